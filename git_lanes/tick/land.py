"""SPEC §7 C steps 8–9: land settled children on the batch branch.

    lane_commits (8)  one commit per settled child, inside its scope (§8.2)
    integrate    (9)  `window.py`: a window of stacked candidates, each recorded under the slug's
                      lock with its verification lock taken (§8.3, §8.6, §8.9); `gate.py` judges
                      a verified one; helpers here: `build`, `pending_for`, `mark_integrated`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core import lifecycle
from ..core.crash import crash_point
from ..core.model import Candidate
from ..domain import authority
from ..domain.scope import outside_scope
from ..gitio import branch_ref
from ..store import Held
from . import engine
from .state import TickState

if TYPE_CHECKING:
    from ..core.model import Child
    from ..core.report import Extras
    from ..domain.checks import CheckResult


@dataclass
class Pending:
    """A recorded candidate to verify, with the verification lock held for it."""
    batch_id: str
    candidate: Candidate
    items: list[tuple[str, str, str, float]]     # (task, check id, command, timeout) to rerun
    order: list[str]                              # the batch's tasks in plan order
    held: Held
    schedule: bool = True                         # the report after landing hands off provisions
    stopped: bool = False                         # its candidate left the window: its results are void
    thread: int | None = None                     # the thread running its checks (`procs.kill_thread`)
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


# -- step 9 (`window.integrate`) ------------------------------------------------------------------------

def build(t: TickState, child: "Child", on: str | None = None) -> str:
    """The candidate of a lane-committed child on `on` (the commit of the candidate before it in the
    window), else on the current head (§8.3, §8.9), or Park."""
    rec = t.record
    git = t.git
    lane = child.lane
    head = t.head
    expected = t.expected()
    on = on or head
    if head != expected:
        raise engine.Park(f"batch_head_lineage_broken: the coordinator is at {head}, expected {expected}")
    if list(git.odb.commit(lane.lane_commit).parents) != [lane.base_head]:
        raise engine.Park(f"batch_head_lineage_broken: lane commit {lane.lane_commit} is not a single commit "
                          f"on the lane base {lane.base_head}")
    if not t.on_branch(lane.base_head):
        raise engine.Park(f"batch_head_lineage_broken: lane base {lane.base_head} is not on the batch branch")
    candidate = engine.build_candidate(git, on, lane.lane_commit, lane.base_head)
    engine.check_identity(git, lane.base_head, lane.lane_commit, on, candidate)
    what = authority.plan_mismatch(t.s, rec, candidate)
    if what is not None:
        raise engine.Park(f"plan_changed: {what}")
    return candidate


def rerun_tasks(t: TickState, child: "Child", before: list[str]) -> list[str]:
    """The rerun set of a candidate (§8.3, §8.9): the child itself, then in plan order every sibling
    integrated since its lane base and every child whose candidate stands before it in the window."""
    since_base = t.since(child.lane.base_head)
    return [child.task_id] + [sib.task_id for sib in t.record.children if sib.task_id != child.task_id
                              and (sib.commit in since_base or sib.task_id in before)]


def pending_for(t: TickState, child: "Child", candidate: Candidate, held: Held, before: list[str]) -> Pending:
    """What verifying `candidate` reruns: `rerun_tasks`' checks, each from its authorized or approved
    intent, as (task, check id, command, timeout) items."""
    rec = t.record
    intents = [(task, authority.effective_intent(t.s, rec, task)) for task in rerun_tasks(t, child, before)]
    return Pending(rec.batch_id, candidate.model_copy(deep=True), engine.rerun_items(intents),
                   [c.task_id for c in rec.children], held, schedule=t.schedule, coordinator=rec.coordinator,
                   specs=engine.rerun_specs(intents), receipts=receipts_apply(t))


def receipts_apply(t: TickState) -> bool:
    """Whether this tick's candidate reruns may use receipts: the command's and the batch's say (§8.7)."""
    return t.req.receipts and t.record.receipts is not False


def mark_integrated(t: TickState, child: "Child", commit: str, rerun: list["CheckResult"]) -> None:
    """integrated at `commit`; its evidence note goes with the next record write; reseal."""
    from ..domain.revise import reseal

    rec = t.record
    lifecycle.integrate(rec, child, commit)
    attempt = t.attempt_of(child)
    resealed = reseal(t.s, rec, child.task_id, commit, t.s.clock())
    ident = rec.intent_identities.get(child.task_id)   # the identity the integrated commit carries (§10.2)
    t.notes[commit] = engine.evidence_note(rec, child, attempt, rerun, ident.model_dump() if ident else None)
    if resealed:
        t.events.append(f"resealed {child.task_id}")
