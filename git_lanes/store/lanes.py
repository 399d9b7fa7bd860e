"""Lane records: `refs/notes/lanes/lane/<slug>/<task>`, written only by commands run in that
lane (one writer per ref, under the lane's own lock; SPEC §5, §15).

Each state commit's tree holds `lane.json`, one blob per attempt (`attempts/<index>.json`)
and, under `trees/`, every attempt's delivery tree, so what an attempt delivered stays
reachable for as long as the record does.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable

from ..core.clock import now
from ..core.errors import LanesError, refused
from ..gitio import RefRaceError, TreeEntry, lane_record_ref
from .layout import CorruptRecord, blob, one_line

if TYPE_CHECKING:
    from ..core.model import LaneRecord
    from ..gitio import Git

STATE_AUTHOR = "git-lanes <git-lanes@localhost>"
_PARSED: dict[str, "LaneRecord"] = {}     # state commit -> the record it holds (a commit never changes)


def _shape(data: Any) -> str:
    """What a JSON value is, in words (`an array`, `a string`, …)."""
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(data), "null" if data is None else "another value")


class LaneStore:
    def __init__(self, git: "Git") -> None:
        self.git = git

    @staticmethod
    def ref(slug: str, task_id: str) -> str:
        return lane_record_ref(slug, task_id)

    def tip(self, slug: str, task_id: str) -> str | None:
        return self.git.refs.resolve(self.ref(slug, task_id))

    def read(self, slug: str, task_id: str) -> tuple["LaneRecord | None", str | None]:
        """(record, state commit); raises CorruptRecord when it cannot be read as v1."""
        tip = self.tip(slug, task_id)
        if tip is None:
            return None, None
        cached = _PARSED.get(tip)
        if cached is None:
            cached = self._parse(slug, task_id, tip)
            if len(_PARSED) >= 1024:
                _PARSED.clear()
            _PARSED[tip] = cached
        return cached.model_copy(deep=True), tip

    def read_data(self, slug: str, task_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the record as plain JSON data, state commit), with no model: what the lane commands read
        (`lane/side.py`); the coordinator validates every record it reads with `read`."""
        tip = self.tip(slug, task_id)
        return (self._data(slug, task_id, tip) if tip is not None else None), tip

    def data_at(self, slug: str, task_id: str, commit: str) -> dict[str, Any]:
        """The record as plain JSON data at one of its state commits (an archived lane's `record_tip`)."""
        return self._data(slug, task_id, commit)

    def _data(self, slug: str, task_id: str, tip: str) -> dict[str, Any]:
        odb = self.git.odb
        try:
            tree = odb.commit(tip).tree
            entries = {e.name: e for e in odb.entries(tree)}
            data = json.loads(odb.blob(entries["lane.json"].oid))
            if not isinstance(data, dict):   # JSON of another shape: a record this build cannot read (§6.3)
                raise CorruptRecord(f"lane record {slug}/{task_id}: contract error: lane.json is "
                                    f"{_shape(data)}, not a JSON object")
            attempts = entries.get("attempts")
            data["qa_attempts"] = [json.loads(odb.blob(e.oid))
                                   for e in sorted(odb.entries(attempts.oid), key=lambda e: e.name)] if attempts else []
        except CorruptRecord:
            raise
        except (KeyError, ValueError, TypeError, RecursionError, LanesError) as exc:
            detail = exc.detail if isinstance(exc, LanesError) else one_line(exc)
            raise CorruptRecord(f"lane record {slug}/{task_id}: unreadable: {detail}") from None
        for i, attempt in enumerate(data["qa_attempts"]):   # what the lane side uses of each, as plain data
            if not isinstance(attempt, dict) or not isinstance(attempt.get("tree"), str) \
                    or not isinstance(attempt.get("passed"), bool) or not isinstance(attempt.get("results"), list):
                raise CorruptRecord(f"lane record {slug}/{task_id}: contract error: attempts/{i:06d}.json is not "
                                    "an attempt (tree, passed, results)")
        return data

    def _parse(self, slug: str, task_id: str, tip: str) -> "LaneRecord":
        return self.model(slug, task_id, self._data(slug, task_id, tip))

    @staticmethod
    def model(slug: str, task_id: str, data: dict[str, Any]) -> "LaneRecord":
        """The validated model of a lane record's data, or CorruptRecord naming the field."""
        from pydantic import ValidationError

        from ..core.model import LaneRecord

        try:
            if "contract" not in data:   # every build writes it: a record without it is not one
                raise CorruptRecord(f"lane record {slug}/{task_id}: contract error: contract: Field required")
            return LaneRecord.model_validate(data, strict=True)   # as stored: no coercion
        except ValidationError as exc:
            raise CorruptRecord(f"lane record {slug}/{task_id}: contract error: {one_line(exc)}") from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise CorruptRecord(f"lane record {slug}/{task_id}: unreadable: {one_line(exc)}") from None

    def write(self, slug: str, record: "LaneRecord", old_commit: str | None, summary: str,
              extra_parents: Iterable[str] = (), at: str | None = None) -> str:
        """Compare-and-swap a new state commit of the lane record; `batch_busy` on a lost race."""
        from ..core.model import LaneRecord

        record = LaneRecord.model_validate(record.model_dump())
        return self.write_data(slug, record.model_dump(mode="json"), old_commit, summary, extra_parents, at)

    def write_data(self, slug: str, data: dict[str, Any], old_commit: str | None, summary: str,
                   extra_parents: Iterable[str] = (), at: str | None = None) -> str:
        """`write` of a record given as its JSON data (`LaneRecord.model_dump(mode="json")`'s shape):
        one blob for `lane.json`, one per attempt, every attempt's delivery tree kept reachable."""
        data = dict(data)
        attempts = data.pop("qa_attempts")
        task_id = data["task_id"]
        odb = self.git.odb
        entries = [TreeEntry("lane.json", 0o100644, odb.write_blob(blob(data)))]
        if attempts:
            files = [TreeEntry(f"{i:06d}.json", 0o100644, odb.write_blob(blob(a))) for i, a in enumerate(attempts)]
            entries.append(TreeEntry("attempts", 0o040000, odb.write_tree(files)))
        delivered = [TreeEntry(f"{i:06d}", 0o040000, a["tree"]) for i, a in enumerate(attempts)
                     if odb.kind(a["tree"]) == "tree"]
        if delivered:
            entries.append(TreeEntry("trees", 0o040000, odb.write_tree(delivered)))
        parents = [old_commit] if old_commit else []
        parents += [p for p in extra_parents if odb.has(p)]
        commit = odb.write_commit(odb.write_tree(entries), parents, f"{summary}\n\nLanes-At: {at or now()}\n",
                                  author=STATE_AUTHOR, committer=STATE_AUTHOR, author_time=int(time.time()))
        try:
            self.git.refs.update([(self.ref(slug, task_id), commit, old_commit)], f"git-lanes: {summary}",
                                 guarded=True)
        except RefRaceError:
            raise refused("batch_busy", f"the lane record of {task_id} moved while this command ran; "
                                        "run it again") from None
        return commit

