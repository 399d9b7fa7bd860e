"""The lane commands' use cases (SPEC §5): `task`, `inbox`, `done`, `done --give-up`.

Each takes a `Session` opened inside a lane worktree and returns plain data for the CLI to
render. Only the lane side writes the lane's own record (`refs/notes/lanes/lane/<slug>/<task>`),
always through `write_lane_record` (the lane's lock, compare-and-swap); the batch record is only
ever read here. A lane in another clone (SPEC §14) is this clone's when the batch record names
its `lanes.cloneId`; until the coordinator admits its claim, `done` refuses `batch_lane_not_enrolled`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from .authority import effective_parsed, last_revision
from .checks import child_env, run_checks
from .crash import crash_point
from .errors import refused, usage
from .gitio import branch_ref
from .lanehost import clone_id, live_claim
from .model import BatchRecord, Child, GaveUp, Intervention, LaneRecord, QaAttempt
from .scope import outside_scope
from .session import Session
from .snapshot import changed_paths, snapshot_tree
from .store import CorruptRecord, lane_lock

MAX_GIVE_UP_TEXT = 4000
Change = Callable[[LaneRecord], "LaneRecord | None"]


def write_lane_record(session: Session, slug: str, task_id: str, run_id: str, change: Change, summary: str, *,
                      fresh: Callable[[], LaneRecord] | None = None,
                      extra_parents: tuple[str, ...] = ()) -> tuple[LaneRecord | None, str | None]:
    """The one lane-record transaction: under the lane's lock, read the record of run `run_id` (a
    record of another run counts as absent: `fresh()` starts this run's, with the old tip as its
    parent), apply `change` (None: nothing to write), compare-and-swap it one `record_revision` up.
    Returns (the record now, the ref's tip)."""
    with lane_lock(session.git, slug, task_id, warn=session.warn):
        record, tip = session.lanes.read(slug, task_id)
        if record is not None and record.run_id != run_id:
            record = None  # a restarted lane starts a fresh record
        current = record if record is not None else (fresh() if fresh is not None else None)
        changed = change(current) if current is not None else None
        if changed is None:
            return record, tip
        changed = changed.model_copy(update={"record_revision": changed.record_revision + 1})
        commit = session.lanes.write(slug, changed, tip, summary, extra_parents=extra_parents, at=session.clock())
        return changed, commit


def own_claim(session: Session, record: BatchRecord, slug: str, task_id: str):
    """This clone's claim on `task_id` (SPEC §14) of the batch's current run, or None."""
    try:
        lrec, _ = session.lanes.read(slug, task_id)
    except CorruptRecord:
        return None
    claim = live_claim(record, task_id, lrec)
    return claim if claim is not None and claim.clone_id == clone_id(session.git) else None


def heartbeat(session: Session, slug: str, task_id: str, run_id: str) -> bool:
    """Refresh `claim.heartbeat_at` in this clone's lane record of `run_id` (SPEC §14): an ordinary
    lane write, done by `work` on a timer whatever the lane's sessions are doing. False when the
    record holds no such claim (nothing written)."""
    at = session.clock()

    def beat(rec: LaneRecord) -> LaneRecord | None:
        if rec.claim is None or rec.released is not None:
            return None
        return rec.model_copy(update={"claim": rec.claim.model_copy(update={"heartbeat_at": at})})

    record, _ = write_lane_record(session, slug, task_id, run_id, beat, f"heartbeat {task_id}")
    return record is not None and record.claim is not None and record.claim.heartbeat_at == at


@dataclass
class LaneContext:
    """The lane a command runs in: its batch, its child and its own record."""

    session: Session
    slug: str
    task_id: str
    worktree: str  # the lane worktree's root
    record: BatchRecord
    child: Child
    lane_record: LaneRecord | None  # this run's record; None when not written yet for it
    lane_commit: str | None  # the lane record's ref tip (what a write swaps against)

    @classmethod
    def load(cls, session: Session) -> "LaneContext":
        """Resolve the lane from the current worktree's branch; exit 2 when it is not one."""
        slug, task_id = session.lane_task()
        snap = session.batches.read(slug)
        if snap is None:
            raise usage(f"no batch for {slug} (the branch imm-lane/{slug}/{task_id} belongs to none)")
        record = snap.record
        child = record.child(task_id)
        if child is None:
            raise usage(f"task {task_id} is not a child of batch {record.batch_id}")
        claim = own_claim(session, record, slug, task_id)
        if claim is not None and (child.lane is None or child.lane.run_id != claim.run_id):
            raise refused("batch_lane_not_enrolled",
                          f"{task_id} is claimed by this clone ({claim.clone_id}) but the coordinator has not "
                          f"admitted it (it is {child.state} in the batch record as last pulled); run "
                          f"'git lanes pull' after the coordinator's next tick")
        if child.lane is None:
            raise usage(f"task {task_id} has no lane in batch {record.batch_id} (state {child.state})")
        worktree = session.git.toplevel or ""
        remote = child.lane.remote
        if remote is not None and remote.clone_id != clone_id(session.git):
            raise usage(f"the lane of {task_id} in batch {record.batch_id} lives in clone {remote.clone_id} "
                        f"({remote.host}), not in this one")
        if remote is None and os.path.realpath(child.lane.path) != os.path.realpath(worktree):
            raise usage(f"this worktree ({worktree}) is not the lane of {task_id}: "
                        f"batch {record.batch_id} records its lane at {child.lane.path}")
        lane_record, lane_commit = session.lanes.read(slug, task_id)
        if lane_record is not None and lane_record.run_id != child.lane.run_id:
            lane_record = None  # a restarted lane starts a fresh record
        return cls(session, slug, task_id, worktree, record, child, lane_record, lane_commit)

    def current(self) -> LaneRecord:
        """This run's lane record, or a fresh one."""
        if self.lane_record is not None:
            return self.lane_record
        return LaneRecord(batch_id=self.record.batch_id, task_id=self.task_id, run_id=self.child.lane.run_id)

    def update(self, change: Callable[[LaneRecord], LaneRecord | None], summary: str) -> LaneRecord:
        """The lane record's transaction (`write_lane_record`) for this run. A lane of another clone
        also keeps its branch tip reachable from the record (its executor commits travel with it)."""
        lane = self.child.lane
        extra: tuple[str, ...] = ()
        if lane.remote is not None:
            tip = self.session.git.refs.resolve(branch_ref(lane.branch))
            extra = (tip,) if tip and tip != lane.base_head else ()
        self.lane_record, self.lane_commit = write_lane_record(
            self.session, self.slug, self.task_id, lane.run_id, change, summary,
            fresh=lambda: LaneRecord(batch_id=self.record.batch_id, task_id=self.task_id, run_id=lane.run_id),
            extra_parents=extra)
        return self.current()

    def interventions(self) -> list[Intervention]:
        """This lane's instructions and corrections, oldest first."""
        return [i for i in self.record.interventions if i.task_id == self.task_id]


def _inbox_items(ctx: LaneContext) -> list[dict[str, Any]]:
    read = ctx.lane_record.inbox_read if ctx.lane_record else 0
    return [{"at": i.at, "kind": i.kind, "text": i.text, "text_digest": i.text_digest, "read": n < read}
            for n, i in enumerate(ctx.interventions())]


def task_info(session: Session) -> dict[str, Any]:
    """`git lanes task --json`: the effective intent, its checks and the unread inbox."""
    ctx = LaneContext.load(session)
    parsed, source = effective_parsed(session, ctx.record, ctx.task_id)
    intent = parsed.intent
    return {
        "task_id": ctx.task_id,
        "slug": ctx.slug,
        "batch_id": ctx.record.batch_id,
        "run_id": ctx.child.lane.run_id,
        "intent_path": parsed.path,
        "intent_revision": intent.revision,
        "goal": intent.goal,
        "scope": list(intent.scope),
        "acceptance": [{"id": a.id, "text": a.text, "check": a.check, "timeout": a.timeout_s}
                       for a in intent.acceptance],
        "revision_approved": source == "revision",
        "unread": [item for item in _inbox_items(ctx) if not item["read"]],
    }


def inbox(session: Session, ack: bool = False) -> list[dict[str, Any]]:
    """`git lanes inbox`: this lane's interventions, oldest first; `ack` marks them all read."""
    ctx = LaneContext.load(session)
    items = _inbox_items(ctx)
    if ack:
        read = len(items)
        ctx.update(lambda rec: None if rec.inbox_read == read else rec.model_copy(update={"inbox_read": read}),
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


def done(session: Session) -> dict[str, Any]:
    """`git lanes done`: snapshot the delivery, run the effective checks, record the attempt.

    Returns `{task_id, passed, tree, results[…]}` (plus `note` when the attempt has one).
    """
    ctx = LaneContext.load(session)
    git, lane = session.git, ctx.child.lane
    if ctx.child.correction_due:
        raise refused("correction_due", "wait for the coordinator's correction")
    parsed, source = effective_parsed(session, ctx.record, ctx.task_id)
    if source == "revision":
        _write_intent_file(ctx.worktree, parsed.path, last_revision(ctx.record, ctx.task_id).intent_text)
    tree = snapshot_tree(git, ctx.worktree)
    if tree == git.odb.tree_of(lane.base_head):
        raise refused("nothing_to_deliver", "nothing to deliver")
    results = []
    outside = outside_scope(session, ctx.record, ctx.task_id, lane.base_head, tree)
    if outside:   # the gate's own rule (SPEC §5 v3): fail now, before any check runs
        note = "delivery_outside_scope: " + ", ".join(outside)
    else:
        env = child_env(os.environ, git.local_env_vars, slug=ctx.slug, batch=ctx.record.batch_id, task=ctx.task_id)
        results = run_checks([(a.id, a.check, a.timeout_s) for a in parsed.intent.acceptance],
                             cwd=ctx.worktree, env=env)
        after = snapshot_tree(git, ctx.worktree)
        note = None
        if after != tree:
            note = "checks changed the delivery: " + ", ".join(changed_paths(git, tree, after))
    passed = note is None and all(r.passed for r in results)
    attempt = QaAttempt(at=session.clock(), tree=tree, passed=passed, results=[r.to_json() for r in results],
                        author_ident=_author_ident(session), note=note)
    ctx.update(lambda rec: rec.model_copy(update={"qa_attempts": [*rec.qa_attempts, attempt]}),
               f"done {ctx.task_id}: {'passed' if passed else 'failed'}")
    crash_point("attempt-recorded")
    result: dict[str, Any] = {"task_id": ctx.task_id, "passed": passed, "tree": tree,
                              "results": [r.to_json() for r in results]}
    if note:
        result["note"] = note
    return result


def give_up(session: Session, text: str) -> dict[str, Any]:
    """`git lanes done --give-up -m TEXT`: record that the executor cannot finish."""
    if not text.strip() or len(text) > MAX_GIVE_UP_TEXT:
        raise usage(f"the give-up message must be 1..{MAX_GIVE_UP_TEXT} characters and not blank")
    ctx = LaneContext.load(session)
    gave_up = GaveUp(at=session.clock(), text=text)
    ctx.update(lambda rec: rec.model_copy(update={"gave_up": gave_up}), f"give up {ctx.task_id}")
    return {"task_id": ctx.task_id, "gave_up": gave_up.model_dump()}
