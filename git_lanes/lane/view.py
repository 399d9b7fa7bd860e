"""What a lane command reads of the records, as plain data: no model is built (SPEC §5; issue 15's
start-up budget for `task`, `done` and `inbox`).

The lane side never writes the batch record, so it reads only the files of it that concern its own
task (`batch.json`, its child, its intent identity, and the revisions, interventions and archived
lanes) and checks every field it uses, whatever reaches Git or a path, as the models would:
a tampered value is `CorruptRecord`, never used. The rest of the record is the coordinator's to
validate (every tick does).

The effective intent is read the same way: the batch authorized each intent by its content hash
(`intent_identities`, or an approved revision's `intent_content_hash`), so a document with that
hash was validated when it was authorized and only needs parsing. A document that does not match
(a resealed batch reads its plan at the batch base) goes through the full, validating path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.contracts import LANE_RECORD
from ..core.errors import LanesError
from ..gitio import is_oid
from ..plan.intentdoc import DEFAULT_TIMEOUT_S, intent_doc_hash, load_toml
from ..store import CorruptRecord
from ..store.layout import shard

if TYPE_CHECKING:
    from ..domain.session import Session

_LISTS = ("revisions/", "interventions/", "archived_lanes/")


class _Bad(ValueError):
    """A field of the record that cannot be used as it is."""


def _get(doc: Any, key: str, kind: type | tuple[type, ...], where: str, *, optional: bool = False) -> Any:
    if not isinstance(doc, dict):
        raise _Bad(f"{where}: not a JSON object")
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _Bad(f"{where}.{key}: {'required' if value is None else 'wrong type'}")
    return value


def _oid(doc: Any, key: str, where: str) -> str:
    value = _get(doc, key, str, where)
    if not is_oid(value):
        raise _Bad(f"{where}.{key}: not an object id")
    return value


class LaneSpot(NamedTuple):
    """The child's `lane`, as the lane side needs it."""
    path: str | None
    branch: str
    base_head: str
    run_id: str
    remote: tuple[str, str] | None      # (clone_id, host) of a lane in another clone (SPEC §14)

    @classmethod
    def of(cls, doc: Any) -> "LaneSpot":
        remote = _get(doc, "remote", dict, "lane", optional=True)
        where = (_get(remote, "clone_id", str, "lane.remote"), _get(remote, "host", str, "lane.remote")) \
            if remote is not None else None
        path = _get(doc, "path", str, "lane", optional=True)
        if (path is None) == (where is None):
            raise _Bad("lane: a lane has either a path or remote")
        return cls(path, _get(doc, "branch", str, "lane"), _oid(doc, "base_head", "lane"),
                   _get(doc, "run_id", str, "lane"), where)


class LaneBatch(NamedTuple):
    """The batch record as one lane reads it: the batch's identity and its own task's part."""
    slug: str
    commit: str                        # the record's state commit
    batch_id: str
    base_head: str
    task_id: str
    state: str | None                  # the child's state (None: the batch has no such child)
    correction_due: str | None
    lane: LaneSpot | None
    intent_path: str | None            # the authorized identity (None when the record has none)
    intent_hash: str | None
    revision: dict[str, str] | None    # the last approved revision: {intent_text, intent_content_hash}
    interventions: list[dict[str, str]]    # this task's since its last lane was archived, oldest first
    archived_runs: frozenset[str]          # runs `resume --restart` ended
    receipts: bool | None = None           # (v4) false: the batch was started `--no-receipts` (§8.7)
    resumed_at: str | None = None          # when `resume` last freed the child (SPEC §7 B v3)

    @classmethod
    def read(cls, session: "Session", slug: str, task_id: str) -> "LaneBatch | None":
        """The latest record of `slug` as `task_id`'s lane reads it; None when there is none."""
        child_file = f"children/{shard(task_id)}/{task_id}.json"
        identity_file = f"identities/{shard(task_id)}/{task_id}.json"

        def wanted(path: str) -> bool:
            return path in ("batch.json", child_file, identity_file) or path.startswith(_LISTS)

        found = session.batches.files(slug, wanted=wanted)
        if found is None:
            return None
        tip, _, _, files = found
        try:
            return cls._parse(slug, task_id, tip, files, child_file, identity_file)
        except (_Bad, ValueError, TypeError, RecursionError) as exc:
            raise CorruptRecord(f"corrupt batch record of {slug} at {tip}: {exc}") from None

    @classmethod
    def _parse(cls, slug: str, task_id: str, tip: str, files: dict[str, bytes], child_file: str,
               identity_file: str) -> "LaneBatch":
        import json

        batch = json.loads(files["batch.json"]) if "batch.json" in files else None
        if batch is None:
            raise _Bad("batch.json: missing")
        child = json.loads(files[child_file]) if child_file in files else None
        state = correction = lane = resumed = None
        if child is not None:
            if _get(child, "task_id", str, "child") != task_id:
                raise _Bad(f"{child_file}: holds another task")
            state = _get(child, "state", str, "child")
            correction = _get(child, "correction_due", str, "child", optional=True)
            resumed = _get(child, "resumed_at", str, "child", optional=True)
            lane_doc = _get(child, "lane", dict, "child", optional=True)
            lane = LaneSpot.of(lane_doc) if lane_doc is not None else None
        identity = json.loads(files[identity_file]) if identity_file in files else None
        revisions, interventions, archived, ended = [], [], set(), ""
        for path in sorted(p for p in files if p.startswith(_LISTS)):
            item = json.loads(files[path])
            if _get(item, "task_id", str, path) != task_id:
                continue
            if path.startswith("revisions/"):
                revisions.append({"at": _get(item, "at", str, path),
                                  "intent_text": _get(item, "intent_text", str, path),
                                  "intent_content_hash": _get(item, "intent_content_hash", str, path)})
            elif path.startswith("interventions/"):
                interventions.append({k: _get(item, k, str, path) for k in ("at", "kind", "text", "text_digest")})
            else:
                archived.add(_get(item, "run_id", str, path, optional=True))
                ended = max(ended, _get(item, "at", str, path))
        # a restarted child starts over (SPEC §6): what was sent to a lane before it was archived is not
        # this lane's inbox
        interventions = [i for i in interventions if i["at"] >= ended]
        return cls(slug=slug, commit=tip, batch_id=_get(batch, "batch_id", str, "batch"),
                   base_head=_oid(batch, "base_head", "batch"), task_id=task_id, state=state,
                   correction_due=correction, lane=lane,
                   intent_path=_get(identity, "intent_path", str, "identity") if identity is not None else None,
                   intent_hash=_get(identity, "intent_content_hash", str, "identity") if identity is not None else None,
                   revision=revisions[-1] if revisions else None, interventions=interventions,
                   archived_runs=frozenset(r for r in archived if r is not None), resumed_at=resumed,
                   receipts=False if batch.get("receipts") is False else None)


# -- the lane record ---------------------------------------------------------------------------------

def lane_record(session: "Session", slug: str, task_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """(this lane's record as JSON data, its state commit), the fields a lane write builds on checked."""
    data, tip = session.lanes.read_data(slug, task_id)
    if data is not None:
        where = f"lane record {slug}/{task_id}"
        try:
            if data.get("contract") != LANE_RECORD:   # another build's: never written over (§6.3)
                raise _Bad(f"lane.contract: {data.get('contract')!r} is not {LANE_RECORD}")
            for key in ("batch_id", "task_id", "run_id"):
                _get(data, key, str, "lane")
            for key in ("record_revision", "inbox_read"):
                if not isinstance(data.get(key, 0), int) or isinstance(data.get(key), bool) or data.get(key, 0) < 0:
                    raise _Bad(f"lane.{key}: not a count")
            if not isinstance(data["qa_attempts"], list):
                raise _Bad("lane.qa_attempts: not a list")
            _get(data, "claim", dict, "lane", optional=True)
        except _Bad as exc:
            raise CorruptRecord(f"{where}: contract error: {exc}") from None
    return data, tip


# -- the effective intent ------------------------------------------------------------------------------

class LaneIntent(NamedTuple):
    """The effective intent (SPEC §10): the last approved revision, else the authorized one."""
    path: str
    revision: int
    goal: str
    scope: list[str]
    acceptance: list[dict[str, Any]]   # {id, text, check, timeout, inputs, receipts} (timeout in seconds, defaulted)
    source: str                        # "revision" or "authorized"
    revision_text: str | None          # the approved revision's text (written into the lane by `done`)

    @classmethod
    def of(cls, doc: dict[str, Any], path: str, source: str, text: str | None) -> "LaneIntent":
        acceptance = [{"id": a["id"], "text": a["text"], "check": a["check"],
                       "timeout": a.get("timeout") or DEFAULT_TIMEOUT_S, "inputs": a.get("inputs"),
                       "receipts": a.get("receipts") is not False} for a in doc["acceptance"]]
        return cls(path, doc["revision"], doc["goal"], list(doc["scope"]), acceptance, source, text)


def effective_intent(session: "Session", batch: LaneBatch) -> LaneIntent:
    """The intent the lane works to, parsed only when its hash is the one the batch authorized."""
    rev = batch.revision
    path = batch.intent_path or f".lanes/{batch.slug}/{batch.task_id}.toml"
    if rev is not None:
        doc = load_toml(path, rev["intent_text"].encode("utf-8"))
        if intent_doc_hash(doc) == rev["intent_content_hash"]:
            return LaneIntent.of(doc, path, "revision", rev["intent_text"])
    elif batch.intent_path is not None and batch.intent_hash is not None:
        data = session.git.odb.blob_at(batch.base_head, batch.intent_path)
        doc = load_toml(batch.intent_path, data) if data is not None else None
        if doc is not None and intent_doc_hash(doc) == batch.intent_hash:
            return LaneIntent.of(doc, batch.intent_path, "authorized", None)
    return _validated(session, batch)


def _validated(session: "Session", batch: LaneBatch) -> LaneIntent:
    """The full path: the whole record and the plan, validated (a resealed batch, a tampered one)."""
    from ..domain.authority import effective_parsed, last_revision

    snap = session.batches.read(batch.slug)
    if snap is None:
        raise LanesError(f"no batch for {batch.slug}")
    parsed, source = effective_parsed(session, snap.record, batch.task_id)
    rev = last_revision(snap.record, batch.task_id)
    intent = parsed.intent
    acceptance = [{"id": a.id, "text": a.text, "check": a.check, "timeout": a.timeout_s, "inputs": a.inputs,
                   "receipts": a.receipts is not False} for a in intent.acceptance]
    return LaneIntent(parsed.path, intent.revision, intent.goal, list(intent.scope), acceptance, source,
                      rev.intent_text if rev is not None and source == "revision" else None)
