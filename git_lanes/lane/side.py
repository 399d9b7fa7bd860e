"""The lane commands' use cases (SPEC §5): `task`, `inbox`, `done`, `done --give-up`.

Each takes a `Session` opened inside a lane worktree and returns plain data for the CLI to
render. Only the lane side writes the lane's own record (`refs/notes/lanes/lane/<slug>/<task>`),
always through `write_lane_data` (the lane's lock, compare-and-swap); the batch record is only
ever read here, as plain data (`lane/view.py`): a lane command builds no model and imports no
pydantic, so an agent's `git lanes task` or `done` starts nearly as fast as Python itself. A lane
in another clone (SPEC §14) is this clone's when the batch record names its `lanes.cloneId`; until
the coordinator admits its claim, `done` refuses `batch_lane_not_enrolled`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

from ..core.contracts import LANE_RECORD
from ..core.crash import crash_point
from ..core.errors import refused, usage
from ..decisions.claims import claim_is_live
from ..domain.clone import clone_id
from ..domain.scope import paths_outside_scope
from ..domain.session import Session
from ..domain.snapshot import changed_paths, snapshot_tree, still_delivers
from ..gitio import GitError, branch_ref
from ..store import CorruptRecord, lane_lock
from .view import LaneBatch, LaneIntent, LaneSpot, effective_intent, lane_record

if TYPE_CHECKING:
    from ..core.model import LaneRecord

MAX_GIVE_UP_TEXT = 4000
Data = dict[str, Any]


def fresh_lane_data(batch_id: str, task_id: str, run_id: str) -> Data:
    """A lane record with nothing in it yet (`LaneRecord(...).model_dump(mode="json")`'s shape)."""
    return {"contract": LANE_RECORD, "batch_id": batch_id, "task_id": task_id, "run_id": run_id,
            "record_revision": 0, "qa_attempts": [], "inbox_read": 0, "gave_up": None}


def write_lane_data(session: Session, slug: str, task_id: str, run_id: str, change: Callable[[Data], "Data | None"],
                    summary: str, *, fresh: Callable[[], Data] | None = None,
                    extra_parents: tuple[str, ...] = ()) -> tuple[Data | None, str | None]:
    """The one lane-record transaction: under the lane's lock, read the record of run `run_id` (a
    record of another run counts as absent: `fresh()` starts this run's, with the old tip as its
    parent), apply `change` to a copy (None: nothing to write), compare-and-swap it one
    `record_revision` up. Returns (the record now, the ref's tip)."""
    with lane_lock(session.git, slug, task_id, warn=session.warn):
        record, tip = lane_record(session, slug, task_id)
        if record is not None and record.get("run_id") != run_id:
            record = None  # a restarted lane starts a fresh record
        current = record if record is not None else (fresh() if fresh is not None else None)
        changed = change(dict(current)) if current is not None else None
        if changed is None:
            return record, tip
        changed["record_revision"] = changed.get("record_revision", 0) + 1
        commit = session.lanes.write_data(slug, changed, tip, summary, extra_parents=extra_parents, at=session.clock())
        return changed, commit


def write_lane_record(session: Session, slug: str, task_id: str, run_id: str,
                      change: Callable[["LaneRecord"], "LaneRecord | None"], summary: str, *,
                      fresh: Callable[[], "LaneRecord"] | None = None,
                      extra_parents: tuple[str, ...] = ()) -> tuple["LaneRecord | None", str | None]:
    """`write_lane_data` for a caller that works with models (claims, heartbeats of `work`): the
    record is validated as read and as written."""
    from ..core.model import LaneRecord

    def as_model(data: Data) -> LaneRecord:
        return session.lanes.model(slug, task_id, data)

    def on_data(data: Data) -> Data | None:
        changed = change(as_model(data))
        return None if changed is None else LaneRecord.model_validate(changed.model_dump()).model_dump(mode="json")

    record, tip = write_lane_data(session, slug, task_id, run_id, on_data, summary,
                                  fresh=(lambda: fresh().model_dump(mode="json")) if fresh is not None else None,
                                  extra_parents=extra_parents)
    return (as_model(record) if record is not None else None), tip


def heartbeat(session: Session, slug: str, task_id: str, run_id: str) -> bool:
    """Refresh `claim.heartbeat_at` in this clone's lane record of `run_id` (SPEC §14): an ordinary
    lane write, done by `work` on a timer whatever the lane's sessions are doing. False when the
    record holds no such claim (nothing written)."""
    at = session.clock()

    def beat(rec: Data) -> Data | None:
        claim = rec.get("claim")
        if not isinstance(claim, dict) or rec.get("released") is not None:
            return None
        return {**rec, "claim": {**claim, "heartbeat_at": at}}

    record, _ = write_lane_data(session, slug, task_id, run_id, beat, f"heartbeat {task_id}")
    return record is not None and isinstance(record.get("claim"), dict) and record["claim"].get("heartbeat_at") == at


def _own_claim(session: Session, batch: LaneBatch, lrec: Data | None) -> Data | None:
    """This clone's claim on the task (SPEC §14) of the batch's current run, or None."""
    claim = lrec.get("claim") if lrec is not None else None
    if not isinstance(claim, dict):
        return None
    live = claim_is_live(batch.batch_id, batch.archived_runs, lrec.get("batch_id"), lrec.get("run_id"),
                         lrec.get("released") is not None)
    return claim if live and claim.get("clone_id") == clone_id(session.git) else None


class LaneContext:
    """The lane a command runs in: its batch (as it reads it), its child and its own record."""

    def __init__(self, session: Session, slug: str, task_id: str, worktree: str, batch: LaneBatch,
                 lane_record: Data | None, lane_commit: str | None) -> None:
        self.session = session
        self.slug = slug
        self.task_id = task_id
        self.worktree = worktree           # the lane worktree's root
        self.batch = batch
        self.lane_record = lane_record     # this run's record; None when not written yet for it
        self.lane_commit = lane_commit     # the lane record's ref tip (what a write swaps against)

    @classmethod
    def load(cls, session: Session) -> "LaneContext":
        """Resolve the lane from the current worktree's branch; exit 2 when it is not one."""
        slug, task_id = session.lane_task()
        batch = LaneBatch.read(session, slug, task_id)
        if batch is None:
            raise usage(f"no batch for {slug} (the branch imm-lane/{slug}/{task_id} belongs to none)")
        if batch.state is None:
            raise usage(f"task {task_id} is not a child of batch {batch.batch_id}")
        corrupt: CorruptRecord | None = None
        try:
            lane_data, lane_commit = lane_record(session, slug, task_id)
        except CorruptRecord as exc:   # no claim to see in it; refused below, once the lane is known
            lane_data, lane_commit, corrupt = None, None, exc
        claim = _own_claim(session, batch, lane_data)
        lane = batch.lane
        if claim is not None and (lane is None or lane.run_id != claim.get("run_id")):
            raise refused("batch_lane_not_enrolled",
                          f"{task_id} is claimed by this clone ({claim.get('clone_id')}) but the coordinator has not "
                          f"admitted it (it is {batch.state} in the batch record as last pulled); run "
                          f"'git lanes pull' after the coordinator's next tick")
        if lane is None:
            raise usage(f"task {task_id} has no lane in batch {batch.batch_id} (state {batch.state})")
        worktree = session.git.toplevel or ""
        if lane.remote is not None and lane.remote[0] != clone_id(session.git):
            raise usage(f"the lane of {task_id} in batch {batch.batch_id} lives in clone {lane.remote[0]} "
                        f"({lane.remote[1]}), not in this one")
        if lane.remote is None and os.path.realpath(lane.path or "") != os.path.realpath(worktree):
            raise usage(f"this worktree ({worktree}) is not the lane of {task_id}: "
                        f"batch {batch.batch_id} records its lane at {lane.path}")
        if corrupt is not None:
            raise corrupt
        if lane_data is not None and lane_data.get("run_id") != lane.run_id:
            lane_data = None  # a restarted lane starts a fresh record
        return cls(session, slug, task_id, worktree, batch, lane_data, lane_commit)

    @property
    def lane(self) -> LaneSpot:
        assert self.batch.lane is not None
        return self.batch.lane

    def current(self) -> Data:
        """This run's lane record, or a fresh one."""
        if self.lane_record is not None:
            return self.lane_record
        return fresh_lane_data(self.batch.batch_id, self.task_id, self.lane.run_id)

    def update(self, change: Callable[[Data], "Data | None"], summary: str) -> Data:
        """The lane record's transaction (`write_lane_data`) for this run. A lane of another clone
        also keeps its branch tip reachable from the record (its executor commits travel with it)."""
        lane = self.lane
        extra: tuple[str, ...] = ()
        if lane.remote is not None:
            tip = self.session.git.refs.resolve(branch_ref(lane.branch))
            extra = (tip,) if tip and tip != lane.base_head else ()
        self.lane_record, self.lane_commit = write_lane_data(
            self.session, self.slug, self.task_id, lane.run_id, change, summary,
            fresh=lambda: fresh_lane_data(self.batch.batch_id, self.task_id, lane.run_id), extra_parents=extra)
        return self.current()


def _inbox_items(ctx: LaneContext) -> list[dict[str, Any]]:
    read = ctx.lane_record.get("inbox_read", 0) if ctx.lane_record else 0
    return [{"at": i["at"], "kind": i["kind"], "text": i["text"], "text_digest": i["text_digest"], "read": n < read}
            for n, i in enumerate(ctx.batch.interventions)]


def task_info(session: Session) -> dict[str, Any]:
    """`git lanes task --json`: the effective intent, its checks and the unread inbox."""
    ctx = LaneContext.load(session)
    intent = effective_intent(session, ctx.batch)
    return {
        "task_id": ctx.task_id,
        "slug": ctx.slug,
        "batch_id": ctx.batch.batch_id,
        "run_id": ctx.lane.run_id,
        "intent_path": intent.path,
        "intent_revision": intent.revision,
        "goal": intent.goal,
        "scope": list(intent.scope),
        "acceptance": [{k: v for k, v in a.items() if (k, v) not in (("inputs", None), ("receipts", True))}
                       for a in intent.acceptance],
        "revision_approved": intent.source == "revision",
        "unread": [item for item in _inbox_items(ctx) if not item["read"]],
    }


def inbox(session: Session, ack: bool = False) -> list[dict[str, Any]]:
    """`git lanes inbox`: this lane's interventions, oldest first; `ack` marks them all read."""
    ctx = LaneContext.load(session)
    items = _inbox_items(ctx)
    if ack:
        read = len(items)
        ctx.update(lambda rec: None if rec.get("inbox_read") == read else {**rec, "inbox_read": read},
                   f"inbox {ctx.task_id}: read {read}")
    return items


def _author_ident(session: Session) -> str | None:
    """`Name <email>` of `git var GIT_AUTHOR_IDENT` in the lane, or None."""
    ident = session.git.ident_or_none("AUTHOR")
    return f"{ident[0]} <{ident[1]}>" if ident else None


def _write_intent_file(worktree: str, path: str, text: str) -> None:
    """Write the approved intent into the lane, only when its content differs."""
    target = os.path.join(worktree, path)
    data = text.encode()
    try:
        with open(target, "rb") as f:
            if f.read() == data:
                return
    except FileNotFoundError:
        os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as f:
        f.write(data)


def done(session: Session, *, cancelled: Callable[[], bool] | None = None, receipts: bool = True,
         fail_fast: bool | None = None, retry: bool = False,
         usage: dict[str, float] | None = None) -> dict[str, Any] | None:
    """`git lanes done`: snapshot the delivery, run the effective checks, record the attempt.

    Returns `{task_id, passed, tree, results[…]}` (plus `note` when the attempt has one); None when
    `cancelled()` says so once the checks ran (`run`'s Ctrl-C killed them): nothing is written. `usage`
    (`done --usage`, SPEC §17.4) is recorded with the attempt.
    v4: receipts stand for checks and the passes are kept (not with `receipts=False`, `--no-receipts`,
    nor when the batch says so, §8.7); a failure is retried (`lanes.flakeRetries`, §8.8); with
    `fail_fast` (default `lanes.failFast`) no check runs after the first failing one.
    The very tree whose last attempt failed is refused `nothing_changed` (SPEC §17.1 v4) unless
    something newer than that attempt may change its outcome, or `retry`.
    """
    ctx = LaneContext.load(session)
    git = session.git
    if ctx.batch.correction_due:
        raise refused("correction_due", "wait for the coordinator's correction")
    intent = effective_intent(session, ctx.batch)
    if intent.revision_text is not None:
        # SPEC §5: an empty delivery is refused before the approved intent is written into the lane;
        # the intent file alone is no delivery either
        probe = snapshot_tree(git, ctx.worktree)
        if set(git.odb.diff_paths(git.odb.tree_of(ctx.lane.base_head), probe)) <= {intent.path}:
            raise refused("nothing_to_deliver", "nothing to deliver")
        _write_intent_file(ctx.worktree, intent.path, intent.revision_text)
    tree = snapshot_tree(git, ctx.worktree, keep=True)   # its index answers "did the checks change it?"
    failed_on = None if retry else _failed_on(ctx, tree)
    if failed_on is not None:
        git.work.drop_prepared(ctx.worktree)
        raise refused("nothing_changed", f"the last attempt failed on tree {tree}")
    from ..domain.receipts import book

    found = book(git, where="lane", batch_id=ctx.batch.batch_id, clock=session.clock, warn=session.warn,
                 batch_flag=ctx.batch.receipts, command_flag=receipts)
    if fail_fast is None:
        fail_fast = git.config_bool("lanes.failFast", False)
    try:
        note, results = _check(ctx, intent, tree, found, fail_fast)
    except BaseException:
        git.work.drop_prepared(ctx.worktree)
        raise
    passed = note is None and all(r.passed for r in results)
    if cancelled is not None and cancelled():
        git.work.drop_prepared(ctx.worktree)
        return None
    if not passed:   # a passed one's stays: the tick that settles it asks it (`LocalLanes.delivers`)
        git.work.drop_prepared(ctx.worktree)
    attempt = {"at": session.clock(), "tree": tree, "passed": passed, "results": [r.to_json() for r in results],
               "author_ident": _author_ident(session), "note": note}
    if usage:
        attempt["usage"] = dict(usage)
    ctx.update(lambda rec: {**rec, "qa_attempts": [*rec["qa_attempts"], attempt]},
               f"done {ctx.task_id}: {'passed' if passed else 'failed'}")
    crash_point("attempt-recorded")
    if found is not None and (note is None or not note.startswith(CHANGED)):
        found.flush()   # one write, after the lane's own (its lock taken last, SPEC §8.7)
    result: dict[str, Any] = {"task_id": ctx.task_id, "passed": passed, "tree": tree,
                              "results": [r.to_json() for r in results]}
    if note:
        result["note"] = note
    return result


CHANGED = "checks changed the delivery"


def _failed_on(ctx: LaneContext, tree: str) -> str | None:
    """The time of the last attempt when it failed on `tree` and no intervention, `resumed_at` or approved
    revision is newer than it (SPEC §17.6 v4); else None."""
    attempts = (ctx.lane_record or {}).get("qa_attempts") or []
    last = attempts[-1] if attempts else None
    if last is None or last.get("passed") or last.get("tree") != tree:
        return None
    at = last.get("at") or ""
    batch = ctx.batch
    newer = [i["at"] for i in batch.interventions] + [batch.resumed_at or ""] + \
        [(batch.revision or {}).get("at") or ""]
    return None if any(t and t >= at for t in newer) else at


def _check(ctx: LaneContext, intent: LaneIntent, tree: str, receipts=None,
           fail_fast: bool = False) -> tuple[str | None, list]:
    """(note, results) of the delivery `tree`: refused when empty, failed without a check when it
    leaves the scope, else the effective checks run in the lane (`checkrun`: receipts, flaky
    retries, `fail_fast`), which must leave it as it was."""
    from ..domain.checkrun import Spec, execute_all, flake_retries
    from ..domain.checks import child_env

    git, lane = ctx.session.git, ctx.lane
    if tree == git.odb.tree_of(lane.base_head):
        raise refused("nothing_to_deliver", "nothing to deliver")
    outside = _outside(ctx, intent, tree)
    if outside:   # the gate's own rule (SPEC §5 v3): fail now, before any check runs
        return "delivery_outside_scope: " + ", ".join(outside), []
    env = child_env(os.environ, git.local_env_vars, slug=ctx.slug, batch=ctx.batch.batch_id, task=ctx.task_id)
    specs = [Spec(a["id"], a["check"], a["timeout"], inputs=a.get("inputs"), receipts=a.get("receipts", True),
                  task=ctx.task_id) for a in intent.acceptance]
    results = execute_all(specs, cwd=ctx.worktree, env_of=lambda _: env, tree=tree, book=receipts,
                          retries=flake_retries(git, gate=False), fail_fast=fail_fast)
    try:
        after = tree if still_delivers(git, ctx.worktree, tree) else snapshot_tree(git, ctx.worktree)
    except GitError as exc:   # e.g. a check made an empty repository in the lane: Git cannot add it
        why = exc.stderr.splitlines()[0].strip() if exc.stderr else ""
        return f"{CHANGED}: it can no longer be snapshotted" + (f" ({why})" if why else ""), results
    if after != tree:
        return f"{CHANGED}: " + ", ".join(changed_paths(git, tree, after)), results
    return None, results


def _outside(ctx: LaneContext, intent: LaneIntent, tree: str) -> list[str]:
    """The delivery's paths outside the effective scope: the gate's rule (`scope`), on what the
    lane read (its approved intent file excepted)."""
    own = ctx.batch.intent_path
    rev = ctx.batch.revision
    return paths_outside_scope(ctx.session.git, ctx.lane.base_head, tree, intent.scope, own,
                               rev["intent_text"] if rev is not None else None)


def give_up(session: Session, text: str) -> dict[str, Any]:
    """`git lanes done --give-up -m TEXT`: record that the executor cannot finish."""
    if not text.strip() or len(text) > MAX_GIVE_UP_TEXT:
        raise usage(f"the give-up message must be 1..{MAX_GIVE_UP_TEXT} characters and not blank")
    from ..core.ids import require_utf8

    require_utf8(text, "--message")
    ctx = LaneContext.load(session)
    gave_up = {"at": session.clock(), "text": text}
    ctx.update(lambda rec: {**rec, "gave_up": gave_up}, f"give up {ctx.task_id}")
    return {"task_id": ctx.task_id, "gave_up": dict(gave_up)}
