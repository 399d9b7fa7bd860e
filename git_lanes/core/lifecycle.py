"""The child lifecycle (SPEC §4): every move of a child between states, in one place. Pure.

    pending -> enrolled -> settled -> lane_committed -> integrated -> released
    needs_human from any in-flight state; skipped_blocked from pending when a dependency parks

Each function checks that the move is one §4 allows (an illegal move is a bug: `AssertionError`)
and keeps the fields that go with a state right (a park drops `correction_due`, a restart
drops the lane, ...). The whole record is validated again when it is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import DONE, IN_FLIGHT

if TYPE_CHECKING:
    from .model import BatchRecord, Child, Lane

_MOVES = {
    "pending": {"enrolled", "skipped_blocked"},
    "enrolled": {"settled", "needs_human"},
    "settled": {"lane_committed", "needs_human"},
    "lane_committed": {"integrated", "needs_human"},
    "integrated": {"released"},
    "released": set(),
    "needs_human": {"pending", "enrolled", "settled", "lane_committed"},
    "skipped_blocked": {"pending"},
}


def _move(child: "Child", to: str) -> None:
    assert to in _MOVES[child.state], f"{child.task_id}: {child.state} -> {to} is not a lifecycle move"
    child.state = to


def enroll(child: "Child", lane: "Lane") -> None:
    """An admitted lane: the child runs in it from a clean slate of counters."""
    _move(child, "enrolled")
    child.reason = None
    child.qa_failures = 0
    child.qa_attempts_seen = 0
    child.lane = lane


def settle(child: "Child", at: str, attempt: int) -> None:
    """A passed (and, if needed, approved) attempt still equal to the lane's delivery."""
    _move(child, "settled")
    child.settled_at = at
    child.lane.attempt = attempt


def commit_lane(child: "Child", commit: str, executor_commits: list[str]) -> None:
    _move(child, "lane_committed")
    child.lane.lane_commit = commit
    child.lane.executor_commits = executor_commits


def integrate(record: "BatchRecord", child: "Child", commit: str) -> None:
    _move(child, "integrated")
    child.commit = commit
    child.reason = None
    record.candidates = [c for c in record.candidates if c.task_id != child.task_id]


def release(child: "Child") -> None:
    _move(child, "released")


def park(record: "BatchRecord", child: "Child", reason: str) -> list[str]:
    """needs_human with `reason`; pending dependents (transitively) skipped; their ids."""
    _move(child, "needs_human")
    child.reason = reason
    child.correction_due = None
    _drop_candidate(record, child)
    return skip_dependents(record, child.task_id)


def _drop_candidate(record: "BatchRecord", child: "Child") -> list[str]:
    """The candidate of a child that parks is cleared in the same write (SPEC §8.6), and with it every
    candidate stacked on it (§8.9): the task ids of those."""
    return drop_candidates(record, child.task_id)


def drop_candidates(record: "BatchRecord", task_id: str) -> list[str]:
    """Drop the candidate of `task_id` and every one after it in the window; the other task ids dropped."""
    at = next((i for i, c in enumerate(record.candidates) if c.task_id == task_id), None)
    if at is None:
        return []
    dropped = [c.task_id for c in record.candidates[at + 1:]]
    del record.candidates[at:]
    return dropped


def skip_dependents(record: "BatchRecord", task_id: str) -> list[str]:
    """Every pending child that (transitively) depends on `task_id` becomes skipped_blocked, its reason
    naming the child that parked (`dependency a parked` for c in a <- b <- c: b was skipped, not parked)."""
    parked = {task_id}
    skipped = []
    changed = True
    while changed:
        changed = False
        for c in record.children:
            if c.state == "pending" and parked.intersection(c.blocked_by):
                _move(c, "skipped_blocked")
                c.reason = f"dependency {task_id} parked"
                parked.add(c.task_id)
                skipped.append(c.task_id)
                changed = True
    return skipped


def parked_blocker(record: "BatchRecord", child: "Child") -> str | None:
    """The parked child that `child` (transitively) waits for, first in `blocked_by` order; None if none."""
    seen: set[str] = set()
    todo = list(child.blocked_by)
    while todo:
        task = todo.pop(0)
        dep = record.child(task)
        if task in seen or dep is None:
            continue
        seen.add(task)
        if dep.state == "needs_human":
            return task
        if dep.state == "skipped_blocked":
            todo.extend(dep.blocked_by)
    return None


def stop_batch(record: "BatchRecord", state: str, reason: str) -> list[str]:
    """Park every in-flight child with `reason`, then stop the batch; the parked ids."""
    parked = []
    for c in record.children:
        if c.state in IN_FLIGHT:
            park(record, c, reason)
            parked.append(c.task_id)
    record.batch_state = state
    record.reason = reason
    return parked


def free(child: "Child", state: str, *, at: str | None = None, attempt: int | None = None,
         settled_at: str | None = None) -> None:
    """A parked child resumed to `state` (recovered from Git), its counters reset; `at` (the resume)
    makes what its lane record holds from before it history (SPEC §6 v3). A restart starts over."""
    _move(child, state)
    if state == "pending":
        child.lane = None
        child.settled_at = None
        child.qa_attempts_seen = 0
        child.corrections = 0
    elif state == "settled":
        child.lane.attempt = attempt
        child.settled_at = settled_at
    child.reason = None
    child.qa_failures = 0
    child.correction_due = None
    child.gate_results = []   # they told why it was parked; it is not any more
    if at is not None:
        child.resumed_at = at


def restart_lost(child: "Child", at: str) -> None:
    """(v4) An enrolled child whose remote lane was lost, restarted by the tick in the same write (SPEC
    §17.2): pending, its counters reset as `resume --restart` does, one more `remote_restarts`."""
    _move(child, "needs_human")
    free(child, "pending", at=at)
    child.remote_restarts = (child.remote_restarts or 0) + 1


def unblock(child: "Child") -> None:
    """A skipped child back to pending once the park that skipped it is lifted."""
    _move(child, "pending")
    child.reason = None


def done(record: "BatchRecord") -> bool:
    return all(c.state in DONE for c in record.children)
