"""`git lanes resume` (SPEC §7 B) and `git lanes retire` (SPEC §12).

Both follow one pattern: decide from the stored record and from Git (nothing written), show
the decision and get a confirmation (outside the lock: a person may take their time), then
under the slug's lock re-read the record and write only if it has not moved meanwhile
(`batch_busy` otherwise). The caller ticks afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..core import lifecycle
from ..core.crash import crash_point
from ..core.errors import LanesError, refused, usage
from ..core.ids import check_id
from ..core.model import IN_FLIGHT, ArchivedLane, BatchRecord, Child, RevisionDelegation
from ..core.model4 import ConfirmedBy
from ..domain.lanehost import LocalLanes
from ..domain.session import Session
from ..gitio import branch_ref, short_branch
from ..store import CorruptRecord, Snapshot, lane_lock
from .metering import raise_budget


@dataclass
class Recovery:
    """What resuming does to one parked child."""

    task_id: str
    state: str | None                 # settled | lane_committed | enrolled | pending (restart) | None
    why: str = ""                     # what was found (or why it cannot be recovered)
    attempt: int | None = None        # the passed attempt a settled child settles on
    settled_at: str | None = None


@dataclass
class ResumePlan:
    snap: Snapshot
    recoveries: list[Recovery] = field(default_factory=list)
    unblocked: list[str] = field(default_factory=list)   # skipped_blocked children back to pending
    running: bool = False                                 # (v3) freeing parked children of a running batch


def _read(s: Session, slug: str) -> Snapshot:
    check_id(slug, "slug")
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    return snap


# -- resume ------------------------------------------------------------------------------------

def recover(s: Session, rec: BatchRecord, child: Child) -> Recovery:
    """How a parked child comes back from what Git holds (state None: it cannot)."""
    from ..tick.observe import earlier_run, obligation_after_pass

    task = child.task_id
    lane = child.lane
    if lane is None:
        return Recovery(task, None, "it has no lane")
    if lane.remote is not None:   # (v4) from the pulled refs
        from ..remote.recover import recover_remote

        state, why, attempt, settled_at = recover_remote(s, rec, child)
        return Recovery(task, state, why, attempt=attempt, settled_at=settled_at)
    where = LocalLanes(s).presence(lane.path)
    if not where.exists:
        return Recovery(task, None, f"its lane {lane.path} is gone")
    if where.branch != branch_ref(lane.branch):
        on = short_branch(where.branch) if where.branch else "a detached HEAD"
        return Recovery(task, None, f"its lane {lane.path} is on {on}, not {lane.branch}")
    try:
        lrec, _ = s.lanes.read(rec.slug, task)
    except CorruptRecord as exc:
        return Recovery(task, None, f"its lane record cannot be read ({exc.detail})")
    if lrec is not None and lrec.run_id != lane.run_id:
        if not earlier_run(rec, child, lrec):
            return Recovery(task, None, f"its lane record belongs to run {lrec.run_id}, not {lane.run_id}")
        lrec = None
    if lrec is not None and lrec.gave_up is not None and not lane.lane_commit:
        # (v3) a give-up older than the resume is history: the executor goes on in its lane
        return Recovery(task, "enrolled", f"its executor gave up ({lrec.gave_up.text}); it goes on in its lane")
    if lane.lane_commit:
        if not s.git.odb.has(lane.lane_commit):
            return Recovery(task, None, f"its lane commit {lane.lane_commit} is missing")
        return Recovery(task, "lane_committed", "its lane commit is recorded")
    if lrec is None or not lrec.qa_attempts:
        return Recovery(task, "enrolled", "no attempt yet")
    last = lrec.qa_attempts[-1]
    if not last.passed:
        return Recovery(task, "enrolled", "its last attempt failed")
    if obligation_after_pass(s, rec, task, last) != "settled":
        return Recovery(task, "enrolled", "its passed attempt waits for a review or a new attempt")
    if not LocalLanes(s).delivers(lane.path, last.tree):
        return Recovery(task, "enrolled", "the lane changed since its passed attempt")
    return Recovery(task, "settled", "a passed attempt", attempt=len(lrec.qa_attempts) - 1, settled_at=last.at)


def _named(rec: BatchRecord, tasks: list[str], restart: list[str]) -> list[Child]:
    """The children named on the command line; a task the batch does not have is a usage error."""
    named = []
    for task in dict.fromkeys([*tasks, *restart]):
        check_id(task, "task id")
        child = rec.child(task)
        if child is None:
            option = "--restart: " if task in restart and task not in tasks else ""
            raise usage(f"{option}{task} is not a child of batch {rec.batch_id}")
        named.append(child)
    return named


def _parked(rec: BatchRecord, tasks: list[str], restart: list[str], delegating: bool) -> tuple[list[Child], bool]:
    """The parked children this resume frees, and whether the batch is running (SPEC §6 v3). A running
    batch's grant may change on its own (`--[no-]delegate-revisions`, §10.1: "a resume may withdraw it")."""
    named = _named(rec, tasks, restart)
    if rec.batch_state == "running":
        if not named and not delegating:
            raise usage(f"batch {rec.batch_id} is running: name the parked children to free "
                        f"(git lanes resume {rec.slug} TASK… or --restart TASK…)")
        for child in named:
            if child.state != "needs_human":
                raise refused("batch_not_parked", f"{child.task_id} is {child.state}")
        return named, True
    if rec.batch_state != "needs_human":
        raise refused("batch_not_parked", f"batch {rec.batch_id} is {rec.batch_state}, not needs_human; it is "
                                          f"finished: start a new batch with git lanes start {rec.slug}")
    if tasks:
        raise usage(f"batch {rec.batch_id} is needs_human: resume acts on every parked child, so name none "
                    f"(git lanes resume {rec.slug} --yes); --restart TASK sends one back to pending")
    for child in named:
        if child.state != "needs_human":
            raise refused("batch_restart_refused", f"{child.task_id} is {child.state}; --restart only sends a "
                                                   "parked child back to pending")
    return [c for c in rec.children if c.state == "needs_human"], False


def _unblocked(rec: BatchRecord, freed: set[str]) -> list[str]:
    """Skipped children whose blockers are no longer parked or skipped once `freed` are freed (plan order)."""
    held = {c.task_id for c in rec.children if c.state in ("needs_human", "skipped_blocked")} - freed
    back = []
    for c in rec.children:
        if c.state == "skipped_blocked" and not held.intersection(c.blocked_by):
            held.discard(c.task_id)
            back.append(c.task_id)
    return back


def plan_resume(s: Session, slug: str, restart: list[str], tasks: list[str] = (),
                delegating: bool = False) -> ResumePlan:
    """Every decision of a resume, from the record and Git; raises the refusal; writes nothing."""
    snap = _read(s, slug)
    rec = snap.record
    parked, running = _parked(rec, list(tasks), restart, delegating)
    plan = ResumePlan(snap, running=running)
    stuck = []
    for child in parked:
        if child.task_id in restart:
            plan.recoveries.append(Recovery(child.task_id, "pending", "restarted"))
            continue
        found = recover(s, rec, child)
        if found.state is None:
            stuck.append(found)
        plan.recoveries.append(found)
    if stuck:
        raise refused("batch_resume_unrecoverable",
                      "; ".join(f"{r.task_id}: {r.why}" for r in stuck)
                      + "; restart " + ("it" if len(stuck) == 1 else "them") + " with "
                      + " ".join(f"--restart {r.task_id}" for r in stuck) + " (nothing was written)")
    plan.unblocked = _unblocked(rec, {r.task_id for r in plan.recoveries})
    return plan


def resume_text(plan: ResumePlan, delegate: bool | None) -> str:
    rec = plan.snap.record
    state = "running" if plan.running else f"parked: {rec.reason or 'needs a human decision'}"
    lines = [f"Resume batch {rec.batch_id} ({rec.slug}), {state}"]
    for r in plan.recoveries:
        what = "restart: back to pending, a new lane is needed" if r.state == "pending" else f"-> {r.state} ({r.why})"
        lines.append(f"  {r.task_id}: {what}")
    for task in plan.unblocked:
        lines.append(f"  {task}: -> pending (was skipped)")
    grant = rec.revision_delegation is not None
    if delegate is True:
        lines.append("  revision delegation GRANTED: breaking revisions inside the envelope are approved without asking")
    elif delegate is False:
        lines.append("  revision delegation " + ("WITHDRAWN" if grant else "off"))
    else:
        lines.append("  revision delegation " + ("granted (unchanged)" if grant else "off (unchanged)"))
    return "\n".join(lines)


def _archive(s: Session, rec: BatchRecord, child: Child, at: str) -> list[ArchivedLane]:
    """Keep the restarted lane's tip (and its lane commit, when the tip does not contain it) and its lane
    record's tip reachable from the record; the entry also names the run that ended."""
    lane = child.lane
    if lane is None:
        return []
    tip = s.git.refs.resolve(branch_ref(lane.branch))
    keep = [tip] if tip else []
    if lane.lane_commit and lane.lane_commit != tip and not (tip and s.git.odb.is_ancestor(lane.lane_commit, tip)):
        keep.append(lane.lane_commit)
    if not keep:
        keep.append(lane.base_head)  # nothing left of the lane; the entry still ends its run
    record_tip = s.lanes.tip(rec.slug, child.task_id)
    return [ArchivedLane(at=at, task_id=child.task_id, branch=lane.branch, tip=c, run_id=lane.run_id,
                         record_tip=record_tip if i == 0 else None) for i, c in enumerate(keep)]


def apply_resume(s: Session, rec: BatchRecord, plan: ResumePlan, delegate: bool | None, at: str) -> None:
    """Free the parked children as planned; a needs_human batch runs again under the new confirmation."""
    for r in plan.recoveries:
        child = rec.child(r.task_id)
        assert child is not None
        if r.state == "pending":
            rec.archived_lanes.extend(_archive(s, rec, child, at))
        lifecycle.free(child, r.state, at=at, attempt=r.attempt, settled_at=r.settled_at)
    for task in plan.unblocked:
        lifecycle.unblock(rec.child(task))
    for c in rec.children:   # a child still skipped names a parked child it still waits for
        if c.state == "skipped_blocked":
            root = lifecycle.parked_blocker(rec, c)
            if root is not None:
                c.reason = f"dependency {root} parked"
    if delegate is True:
        rec.revision_delegation = RevisionDelegation(confirmation_time=at)
    elif delegate is False:
        rec.revision_delegation = None
    if not plan.running:
        rec.batch_state = "running"
        rec.reason = None
        rec.confirmation_time = at
    rec.updated_at = at


def _drop_lane_records(s: Session, slug: str, archived: list[ArchivedLane]) -> None:
    """After the write that archived them: delete the restarted lanes' record refs (compare-and-swap under
    the lane's lock), so each new lane's record starts at revision 1. A lane that wrote meanwhile keeps its
    record: that run is over, and the next lane's record is a fresh one anyway."""
    for a in archived:
        if not a.record_tip:
            continue
        with lane_lock(s.git, slug, a.task_id, warn=s.warn):
            try:
                s.git.refs.delete(s.lanes.ref(slug, a.task_id), a.record_tip, f"git-lanes: restart {a.task_id}")
            except LanesError:
                s.warn(f"the lane record of {a.task_id} moved; it stays (its run is over)")


def resume(s: Session, slug: str, restart: list[str], delegate: bool | None,
           confirm: Callable[[str], bool], tasks: list[str] = (), budget: tuple = (None, None)) -> BatchRecord:
    """Free parked children (SPEC §6, §7 B): of a needs_human batch all of them, with a newer
    confirmation; of a running batch the named ones, at once. All or nothing."""
    restart = list(dict.fromkeys(restart))
    tasks = list(dict.fromkeys(tasks))
    plan = plan_resume(s, slug, restart, tasks, delegate is not None)
    answer = confirm(resume_text(plan, delegate)) if not plan.running or delegate is True else True
    if not answer:
        raise refused("batch_confirmation_declined", "nothing was written")
    at = s.clock()
    recorded = plan.snap.record.confirmation_time
    if not plan.running and at <= recorded:
        raise refused("batch_confirmation_stale", f"the confirmation time {at} is not newer than the batch's "
                                                  f"recorded confirmation {recorded}; nothing was written")
    with s.transaction(slug, "resume", expect=plan.snap.commit) as tx:
        again = plan_resume(s, slug, restart, tasks, delegate is not None)
        if _shape(again) != _shape(plan):
            raise refused("batch_busy", f"the record of {slug} moved while confirming; run resume again")
        before = len(tx.record.archived_lanes)
        apply_resume(s, tx.record, again, delegate, at)
        if not again.running:   # whose the new confirmation is: an MCP client's says so (SPEC §17.6)
            tx.record.confirmed_by = ConfirmedBy(**answer) if isinstance(answer, dict) else None
        archived = tx.record.archived_lanes[before:]
        parts = [f"{r.task_id} {r.state}" for r in again.recoveries] + [f"{t} pending" for t in again.unblocked]
        if delegate is not None:
            parts.append("delegation " + ("granted" if delegate else "withdrawn"))
        parts += raise_budget(tx.record, *budget)   # (v4) resume --budget-usd/--budget-tokens (SPEC §17.4)
        tx.write("resumed" + (": " + ", ".join(parts) if parts else ""), stamp=False)
        crash_point("resume-recorded")
    _drop_lane_records(s, slug, archived)
    return tx.record


def resume_batch(s: Session, slug: str, restart: list[str], delegate: bool | None,
                 confirm: Callable[[str], bool], tasks: list[str] = (), budget: tuple = (None, None)):
    """`git lanes resume`: resume, then a tick."""
    from ..tick import Request, run_tick

    resume(s, slug, restart, delegate, confirm, tasks, budget)
    return run_tick(s, slug, Request(actor="resume"))


def _shape(plan: ResumePlan) -> list:
    return [(r.task_id, r.state, r.attempt) for r in plan.recoveries] + plan.unblocked + [plan.running]


# -- retire ------------------------------------------------------------------------------------

def _retirable(s: Session, slug: str) -> Snapshot:
    snap = s.batches.read(slug)
    if snap is None or snap.record.terminal:
        last = f" (the latest, {snap.record.batch_id}, is {snap.record.batch_state})" if snap else ""
        raise refused("stale_batch_absent", f"no active batch of {slug}{last}")
    rec = snap.record
    busy = next((c for c in rec.children if c.state in IN_FLIGHT), None)
    if busy is not None:
        raise refused("stale_batch_in_flight", f"batch {rec.batch_id}, child {busy.task_id}")
    return snap


def retire(s: Session, slug: str, confirm: Callable[[str], bool]) -> BatchRecord:
    """Turn a non-terminal batch with nothing in flight into `superseded` (SPEC §12)."""
    check_id(slug, "slug")
    snap = _retirable(s, slug)
    rec = snap.record
    parked = [c for c in rec.children if c.state == "needs_human" and c.lane is not None and c.lane.path
              and not c.lane.carried_over]
    text = (f"Retire batch {rec.batch_id} ({slug}, {rec.batch_state}): it becomes superseded and nothing "
            f"more integrates. "
            + (f"The lanes of the parked children ({', '.join(c.task_id for c in parked)}) are archived (their "
               "uncommitted work kept in a commit the record keeps) and removed; " if parked else "")
            + f"other lanes, branches and {rec.branch} stay as they are; "
            f"'git lanes release --stale {slug}' removes them, 'git lanes start {slug}' continues {rec.branch}.")
    if not confirm(text):
        raise refused("batch_confirmation_declined", "nothing was written")
    archived = _parked_archive(s, rec, parked)
    with s.transaction(slug, "retire", expect=snap.commit) as tx:
        tx.record.batch_state = "superseded"
        tx.record.archived_lanes.extend(archived)   # SPEC §17.6 v4: in the superseded write
        tx.write(f"retired: {rec.batch_state} -> superseded"
                 + (f"; archived {', '.join(a.task_id for a in archived)}" if archived else ""))
        crash_point("retire-recorded")
    from ..domain.workspace import remove_lane

    for c in parked:   # what they held is reachable from the record now
        try:
            remove_lane(s, c.lane.path, c.lane.branch, force=True)
        except LanesError as exc:
            s.warn(f"the lane of {c.task_id} was archived but not removed: {exc.message}; "
                   f"git lanes release --stale {slug} removes it")
    return tx.record


def _parked_archive(s: Session, rec: BatchRecord, parked: list[Child]) -> list[ArchivedLane]:
    """The archive entries of the parked lanes `retire` removes: each lane's tip, or a commit on top of it
    that holds its uncommitted work (reported as `retire`'s warning lines)."""
    from ..domain.snapshot import keep_lane_work

    at = s.clock()
    out = []
    for c in parked:
        tip = s.git.refs.resolve(branch_ref(c.lane.branch))
        keep, snapshot = keep_lane_work(s.git, c.task_id, c.lane.path, tip, "retired")
        if snapshot:
            s.warn(f"the uncommitted work of {c.task_id}'s lane is kept as {snapshot}")
        if keep is not None and keep not in rec.referenced_commits():
            out.append(ArchivedLane(at=at, task_id=c.task_id, branch=c.lane.branch, tip=keep, run_id=c.lane.run_id))
    return out


def retire_batch(s: Session, slug: str, confirm: Callable[[str], bool]) -> dict:
    """`git lanes retire`: retire, then the report of the stored record."""
    from ..tick import status_report

    retire(s, slug, confirm)
    return status_report(s, slug)
