"""What `watch`, `report` and `stats` read (SPEC §17.5): a batch's records as plain JSON data, from the
local refs or from a remote's fetched copies (`refs/lanes-remotes/<R>/…`). Read-only: nothing here
writes a record, runs a check or merges; `--remote` fetches into the tracking namespace only.

A batch's facts are one dict: `record` (the batch record's JSON form), `lanes` ({task: the lane record's
JSON data, or None}), `log` (this batch's state writes, oldest first: `{at, actor, summary, commit}`),
`evidence` ({task: its integrated commit's evidence note}) and `now`. Fields that newer builds add
(`sessions[]`, `candidates[]`, `cached`, `flaky`, …) travel as they are: the pure views read them with
`dict.get`, so old and new records both work.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..core.clock import now
from ..core.errors import LanesError, usage
from ..gitio import BATCH_RECORD_PREFIX, EVIDENCE_REF, batch_record_ref, lane_record_ref
from ..store import CorruptRecord

if TYPE_CHECKING:
    from ..domain.session import Session


class Source:
    """Where the records are read: this repository's refs, or the copies a fetch of remote R left under
    the tracking prefix `refs/lanes-remotes/<R>/`."""

    def __init__(self, s: "Session", prefix: str | None = None) -> None:
        self.s = s
        self.prefix = prefix

    def ref(self, ref: str) -> str:
        return ref if self.prefix is None else self.prefix + ref[len("refs/"):]

    def slugs(self) -> list[str]:
        if self.prefix is None:
            return self.s.batches.slugs()
        root = self.ref(BATCH_RECORD_PREFIX)
        return sorted(name[len(root):] for name in self.s.git.refs.under(root.rstrip("/")) if name.startswith(root))

    def choose_slug(self, slug: str | None) -> str:
        """The slug as every command chooses it (SPEC §6); of a remote's records: the only one there."""
        if self.prefix is None or slug is not None:
            return self.s.choose_slug(slug)
        slugs = self.slugs()
        if len(slugs) == 1:
            return slugs[0]
        if not slugs:
            raise usage("no batch fetched from the remote yet")
        raise usage("more than one batch on the remote; name one of: " + ", ".join(slugs))

    def tip(self, slug: str) -> str | None:
        return self.s.git.refs.resolve(self.ref(batch_record_ref(slug)))


def facts(src: Source, slug: str, commit: str | None = None) -> dict[str, Any]:
    """The facts of the latest batch of `slug` (or of the batch whose last state write is `commit`);
    exit 2 when the slug has no batch."""
    s = src.s
    tip = commit or src.tip(slug)
    snap = s.batches.read(slug, tip) if tip else None
    if snap is None:
        raise usage(f"no batch for {slug}")
    record = snap.record.model_dump(mode="json", by_alias=True)
    batch_id = record["batch_id"]
    log = [{k: e[k] for k in ("at", "actor", "summary", "commit")}
           for e in s.batches.log(slug, snap.commit) if e.get("batch_id") == batch_id]
    return {"record": record, "lanes": _lanes(src, slug, record), "log": log,
            "evidence": _evidence(src, record), "now": now()}


def _lanes(src: Source, slug: str, record: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Each child's lane record of this batch (None when it has none, or it cannot be read)."""
    found: dict[str, dict[str, Any] | None] = {}
    for child in record["children"]:
        task = child["task_id"]
        data = None
        tip = src.s.git.refs.resolve(src.ref(lane_record_ref(slug, task)))
        if tip is not None:
            try:
                tip = _of_batch(src, tip, record["batch_id"])
                data = src.s.lanes.data_at(slug, task, tip) if tip is not None else None
            except CorruptRecord as exc:
                src.s.warn(f"{exc.detail} (left out)")
        found[task] = data if isinstance(data, dict) and data.get("batch_id") == record["batch_id"] else None
    return _with_archived(src, slug, record, found)


def _with_archived(src: Source, slug: str, record: dict[str, Any],
                   found: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any] | None]:
    """A child restarted in this batch (`resume --restart`) had lanes before its current one; their
    records are kept from `archived_lanes[].record_tip`: their attempts and sessions come first."""
    earlier: dict[str, list[dict[str, Any]]] = {}
    for archived in record.get("archived_lanes") or []:
        task, tip = archived.get("task_id"), archived.get("record_tip")
        if task not in found or not tip:
            continue
        try:
            old = src.s.lanes.data_at(slug, task, tip)
        except CorruptRecord as exc:
            src.s.warn(f"{exc.detail} (left out)")
            continue
        if old.get("batch_id") == record["batch_id"]:
            earlier.setdefault(task, []).append(old)
    for task, olds in earlier.items():
        runs = olds + ([found[task]] if found[task] else [])
        merged = dict(found[task] or {"batch_id": record["batch_id"], "task_id": task})
        merged["qa_attempts"] = [a for r in runs for a in r.get("qa_attempts") or []]
        if any(isinstance(r.get("sessions"), list) for r in runs):
            merged["sessions"] = [x for r in runs for x in r.get("sessions") or []]
        found[task] = merged
    return found


def _of_batch(src: Source, tip: str, batch_id: str) -> str | None:
    """The newest state commit of a lane record ref that belongs to `batch_id`: a later batch's lane
    record starts with the earlier one's tip as its parent (`lane/side.write_lane_data`), so an older
    batch's is found down the first parents. None when there is none (or it cannot be read)."""
    odb = src.s.git.odb
    commit: str | None = tip
    try:
        while commit is not None:
            state = odb.commit(commit)
            entry = next((e for e in odb.entries(state.tree) if e.name == "lane.json"), None)
            data = json.loads(odb.blob(entry.oid)) if entry is not None else None
            if isinstance(data, dict) and data.get("batch_id") == batch_id:
                return commit
            commit = state.parents[0] if state.parents else None
    except (LanesError, ValueError):
        return None
    return None


def _evidence(src: Source, record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    commits = {c["commit"]: c["task_id"] for c in record["children"] if c.get("commit")}
    try:
        notes = src.s.evidence.read_many(commits, src.ref(EVIDENCE_REF))
    except CorruptRecord as exc:
        src.s.warn(f"{exc.detail} (the candidates' reruns are left out)")
        return {}
    return {commits[c]: note for c, note in notes.items()}


def every_batch(src: Source, slugs: list[str] | None = None) -> list[dict[str, Any]]:
    """The facts of every batch of the repository (of `slugs`), oldest first by creation: each slug's
    record line holds its batches one after the other (SPEC §15); an older batch's lane records are
    those its lanes left, when a later batch did not replace them."""
    found = []
    for slug in slugs if slugs is not None else src.slugs():
        tip = src.tip(slug)
        if tip is None:
            continue
        last: dict[str, str] = {}
        for entry in src.s.batches.log(slug, tip):
            if entry.get("batch_id"):
                last[entry["batch_id"]] = entry["commit"]
        for commit in last.values():
            try:
                found.append(facts(src, slug, commit))
            except CorruptRecord as exc:
                src.s.warn(f"{exc.detail} (left out)")
    return sorted(found, key=lambda f: f["record"]["created_at"])


def fetcher(s: "Session", remote: str | None):
    """(the record source, a function that fetches the remote's records into its tracking namespace, or
    does nothing without a remote)."""
    if remote is None:
        return Source(s), lambda: None
    from ..remote.replicate import fetch, resolve_remote

    target, prefix = resolve_remote(s.git, remote)
    return Source(s, prefix), lambda: fetch(s.git, target, prefix)
