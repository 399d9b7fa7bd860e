"""SPEC §7 C steps 8–9: land settled children on the batch branch.

    lane_commits (8)  one commit per settled child, inside its scope (§8.2)
    integrate    (9)  at most one candidate per tick, recorded under the slug's lock with the
                      verification lock taken (§8.3, §8.6); `gate.py` verifies and lands it
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import authority, lifecycle
from ..crash import crash_point
from ..gitio import branch_ref
from ..model import Candidate
from ..scope import outside_scope
from ..store import Held, flock_try, verify_lock_path
from . import engine
from .state import TickState

if TYPE_CHECKING:
    from ..checks import CheckResult
    from ..model import Child
    from ..report import Extras


@dataclass
class Pending:
    """A recorded candidate to verify, with the verification lock held for it."""
    batch_id: str
    candidate: Candidate
    items: list[tuple[str, str, str, float]]     # (task, check id, command, timeout) to rerun
    order: list[str]                              # the batch's tasks in plan order
    held: Held
    schedule: bool = True                         # the report after landing hands off provisions
    rebuilt: bool = False
    results: list["CheckResult"] = field(default_factory=list)
    setup_failure: str | None = None              # `<exit status>: <last lines>` of a failed setup
    extras: "Extras | None" = None                # what the tick that recorded it reports (refusals, ...)
    reason: str | None = None
    coordinator: str | None = None                # where the scratch worktree's `lanes.copy` files come from
    specs: dict = field(default_factory=dict)     # (v4) {(task, id): (inputs, receipts allowed)} (`engine.rerun_specs`)
    receipts: bool = True                         # (v4) receipts apply (the batch's and the command's say, §8.7)


# -- step 8 -----------------------------------------------------------------------------------------

def lane_commits(t: TickState) -> bool:
    """settled -> lane_committed; the lane branches move with the record, in one ref transaction."""
    rec = t.record
    built = []
    for child in rec.children:
        if child.state == "lane_committed":
            built.append(child)  # a crash may have left the branch move undone
        if child.state != "settled":
            continue
        attempt = t.attempt_of(child)
        if attempt is None or not attempt.passed:
            t.park(child, "batch_lane_lost")
            continue
        outside = outside_scope(t.s, rec, child.task_id, child.lane.base_head, attempt.tree)
        if outside:
            t.park(child, "dirty_outside_scope: " + ", ".join(outside))
            continue
        tip = t.git.refs.resolve(branch_ref(child.lane.branch)) or child.lane.base_head
        goal = authority.effective_intent(t.s, rec, child.task_id).goal
        commit, executor = engine.build_lane_commit(t.git, rec, child, attempt, goal, tip)
        lifecycle.commit_lane(child, commit, executor)
        t.events.append(f"lane commit {child.task_id}")
        built.append(child)
    if built:
        # each lane branch moves in the record's own transaction (asked again should a branch race it)
        moves: dict[str, list] = {}

        def also() -> list:
            moves.update((child.task_id, engine.lane_branch_moves(t.s, child)) for child in built)
            return [u for found in moves.values() for u in found]

        t.write(also=also)
        crash_point("lane-commit-recorded")
        for child in built:
            engine.move_lane_branch(t.s, child, moved=bool(moves.get(child.task_id)))
    return True


# -- step 9 -----------------------------------------------------------------------------------------

def integrate(t: TickState) -> bool:
    """One candidate at a time: the recorded one whose verifier died, else the next lane-committed
    child in settle order (`settled_at`, then plan order). A live verifier makes this step a no-op;
    the verifier that just landed one goes on with the next (it holds the lock already)."""
    if t.pending is not None:
        return True   # a rebuilt candidate waits for its verification
    mine = t.landing.held if t.landing is not None else None
    held = mine or flock_try(verify_lock_path(t.git, t.slug))
    if held is None:
        return True   # a live verifier holds it: only the next integration waits
    try:
        t.pending = _choose(t, held)
    finally:
        if t.pending is None and mine is None:
            held.release()
        if t.landed:
            t.write()   # no next candidate was written: the integration on its own
    return True


def _choose(t: TickState, held: Held) -> Pending | None:
    rec = t.record
    stale = rec.candidate
    if stale is not None:
        if stale.head == t.head:
            return pending_for(t, rec.child(stale.task_id), stale, held)
        rec.candidate = None   # built on a head that moved: build it again below
        t.events.append(f"candidate of {stale.task_id} dropped (the head moved)")
    order = {c.task_id: i for i, c in enumerate(rec.children)}
    queue = sorted((c for c in rec.children if c.state == "lane_committed"),
                   key=lambda c: (c.settled_at or "", order[c.task_id]))
    for child in queue:
        try:
            commit = build(t, child)
        except engine.Park as park:
            t.park(child, park.reason)
            t.write()
            continue
        rec.candidate = Candidate(task_id=child.task_id, commit=commit, head=t.head, at=t.s.clock())
        t.events.append(f"candidate {child.task_id}")
        t.write()
        crash_point("candidate-recorded")
        return pending_for(t, child, rec.candidate, held)
    if stale is not None and rec.candidate is None:
        t.write()
    return None


def build(t: TickState, child: "Child") -> str:
    """The candidate of a lane-committed child on the current head (§8.3), or Park."""
    rec = t.record
    git = t.git
    lane = child.lane
    head = t.head
    expected = t.expected()
    if head != expected:
        raise engine.Park(f"batch_head_lineage_broken: the coordinator is at {head}, expected {expected}")
    if list(git.odb.commit(lane.lane_commit).parents) != [lane.base_head]:
        raise engine.Park(f"batch_head_lineage_broken: lane commit {lane.lane_commit} is not a single commit "
                          f"on the lane base {lane.base_head}")
    if not t.on_branch(lane.base_head):
        raise engine.Park(f"batch_head_lineage_broken: lane base {lane.base_head} is not on the batch branch")
    candidate = engine.build_candidate(git, head, lane.lane_commit, lane.base_head)
    engine.check_identity(git, lane.base_head, lane.lane_commit, head, candidate)
    what = authority.plan_mismatch(t.s, rec, candidate)
    if what is not None:
        raise engine.Park(f"plan_changed: {what}")
    return candidate


def pending_for(t: TickState, child: "Child", candidate: Candidate, held: Held, rebuilt: bool = False) -> Pending:
    """What verifying `candidate` reruns: the child's checks and those of every sibling integrated
    since its lane base, each from its authorized or approved intent."""
    rec = t.record
    since_base = t.since(child.lane.base_head)
    tasks = [child.task_id] + [sib.task_id for sib in rec.children
                               if sib.commit in since_base and sib.task_id != child.task_id]
    intents = [(task, authority.effective_intent(t.s, rec, task)) for task in tasks]
    return Pending(rec.batch_id, candidate, engine.rerun_items(intents), [c.task_id for c in rec.children], held,
                   schedule=t.schedule, rebuilt=rebuilt, coordinator=rec.coordinator,
                   specs=engine.rerun_specs(intents), receipts=t.req.receipts and rec.receipts is not False)


def mark_integrated(t: TickState, child: "Child", commit: str, rerun: list["CheckResult"]) -> None:
    """integrated at `commit`; its evidence note goes with the next record write; reseal."""
    from ..revise import reseal

    rec = t.record
    lifecycle.integrate(rec, child, commit)
    attempt = t.attempt_of(child)
    resealed = reseal(t.s, rec, child.task_id, commit, t.s.clock())
    ident = rec.intent_identities.get(child.task_id)   # the identity the integrated commit carries (§10.2)
    t.notes[commit] = engine.evidence_note(rec, child, attempt, rerun, ident.model_dump() if ident else None)
    if resealed:
        t.events.append(f"resealed {child.task_id}")
