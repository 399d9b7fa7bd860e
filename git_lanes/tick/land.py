"""SPEC §7 C steps 8–9: land settled children on the batch branch.

    lane_commits (8)  one commit per settled child, inside its scope (§8.2)
    integrate    (9)  candidate, identity gate, reruns, fast-forward, evidence (§8.3–§8.5)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import authority, lifecycle
from ..scope import outside_scope
from . import engine
from .state import TickState

if TYPE_CHECKING:
    from ..checks import CheckResult
    from ..model import Child


def crash_point(name: str) -> None:
    """Fault injection for crash tests: `GIT_LANES_CRASH_AT=<name>` kills this process here."""
    if os.environ.get("GIT_LANES_CRASH_AT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _selected(t: TickState, child: "Child") -> bool:
    return t.req.only is None or child.task_id in t.req.only


def lane_commits(t: TickState) -> bool:
    """Step 8: settled -> lane_committed; the record is written before any lane branch moves."""
    rec = t.record
    built = []
    for child in rec.children:
        if child.state == "lane_committed":
            built.append(child)  # a crash may have left the branch move undone
        if child.state != "settled" or not _selected(t, child):
            continue
        attempt = t.attempt_of(child)
        if attempt is None or not attempt.passed:
            t.park(child, "batch_lane_lost")
            continue
        outside = outside_scope(t.s, rec, child.task_id, child.lane.base_head, attempt.tree)
        if outside:
            t.park(child, "dirty_outside_scope: " + ", ".join(outside))
            continue
        tip = t.git.refs.resolve("refs/heads/" + child.lane.branch) or child.lane.base_head
        goal = authority.effective_intent(t.s, rec, child.task_id).goal
        commit, executor = engine.build_lane_commit(t.git, rec, child, attempt, goal, tip)
        lifecycle.commit_lane(child, commit, executor)
        t.events.append(f"lane commit {child.task_id}")
        built.append(child)
    if built:
        t.write()  # the record first: then moving the lane branch can never lose a commit
        crash_point("lane-commit-recorded")
        for child in built:
            engine.move_lane_branch(t.s, child)
    return True


def integrate(t: TickState) -> bool:
    """Step 9: every lane-committed child, in settle order (`settled_at`, then plan order)."""
    rec = t.record
    order = {c.task_id: i for i, c in enumerate(rec.children)}
    queue = sorted((c for c in rec.children if c.state == "lane_committed" and _selected(t, c)),
                   key=lambda c: (c.settled_at or "", order[c.task_id]))
    for child in queue:
        try:
            _integrate_one(t, child)
        except engine.Park as park:
            t.park(child, park.reason)
            t.write()
    return True


def _integrate_one(t: TickState, child: "Child") -> None:
    rec = t.record
    git = t.git
    lane = child.lane
    head = t.head  # fast_forward re-checks the coordinator's HEAD right before it moves
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
    since_base = t.since(lane.base_head)
    intents = [(child.task_id, authority.effective_intent(t.s, rec, child.task_id))]
    intents += [(sib.task_id, authority.effective_intent(t.s, rec, sib.task_id)) for sib in rec.children
                if sib.commit in since_base and sib.task_id != child.task_id]
    results = t.scratch().run(candidate, engine.rerun_items(intents))
    failed = [r.id for r in results if not r.passed]
    if failed:
        raise engine.Park(f"batch_integration_check_failed: {', '.join(failed)} failed on candidate {candidate}")
    engine.fast_forward(git, rec.coordinator, rec.branch, head, candidate)
    crash_point("fast-forwarded")
    t.head = candidate
    t.extend_history(candidate)
    mark_integrated(t, child, candidate, results)
    t.events.append(f"integrated {child.task_id}")
    t.write()


def mark_integrated(t: TickState, child: "Child", commit: str, rerun: list["CheckResult"]) -> None:
    """integrated at `commit`; its evidence note goes with the next record write; reseal."""
    from ..revise import reseal

    rec = t.record
    lifecycle.integrate(child, commit)
    attempt = t.attempt_of(child)
    ident = rec.intent_identities.get(child.task_id)
    t.notes[commit] = engine.evidence_note(rec, child, attempt, rerun, ident.model_dump() if ident else None)
    if reseal(t.s, rec, child.task_id, commit, t.s.clock()):
        t.events.append(f"resealed {child.task_id}")
