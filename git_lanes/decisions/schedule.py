"""Pure scheduling (SPEC §3): conservative scope overlap, `startable()` and plan waves.

No Git, no I/O: every function takes plain data and returns plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

IN_FLIGHT = ("enrolled", "settled", "lane_committed")
"""Child states that hold a slot (and occupy their scope)."""

DONE = ("integrated", "released")
"""Child states that satisfy a dependent's `blocked_by`."""

PARKED = "needs_human"
"""A parked child keeps its scope (while it still has a lane) but not its slot."""

_WILDCARDS = frozenset("*?[]")


class SchedChild(Protocol):
    """What scheduling reads of a batch child."""

    @property
    def task_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def blocked_by(self) -> Sequence[str]: ...

    @property
    def lane(self) -> object | None: ...


def _segments(entry: str) -> tuple[str, ...]:
    """The normalized entry as path segments, cut before its first wildcard segment."""
    text = entry.strip().lower()
    while text.startswith("./"):
        text = text[2:]
    kept: list[str] = []
    for segment in text.split("/"):
        if not segment:
            continue
        if _WILDCARDS.intersection(segment):
            break
        kept.append(segment)
    return tuple(kept)


def normalize_scope_entry(entry: str) -> str:
    """Trim, lower-case, drop a leading `./` and trailing `/`, cut at the first wildcard segment.

    `""` (from a leading wildcard, say) is the empty prefix, which overlaps everything.
    """
    return "/".join(_segments(entry))


def _prefix_related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def entries_overlap(a: str, b: str) -> bool:
    """One normalized entry equals, or is a segment-prefix of, the other."""
    return _prefix_related(_segments(a), _segments(b))


def scopes_overlap(scope_a: Sequence[str], scope_b: Sequence[str]) -> bool:
    """Any entry of one scope overlaps any entry of the other."""
    segs_b = [_segments(entry) for entry in scope_b]
    return any(_prefix_related(_segments(a), b) for a in scope_a for b in segs_b)


def startable(children: Sequence[SchedChild], max_parallel: int,
              scopes: Mapping[str, Sequence[str]], limit: int | None = None) -> list[str]:
    """Task ids to start now, in plan order.

    Slots are held by in-flight children and by those chosen in this call; the walk stops
    when they reach `max_parallel` (or when `limit` children are chosen). A `pending` child
    is chosen when all its blockers are integrated/released and its scope overlaps no
    occupied child: slot holders plus parked children that still have a lane.
    `scopes` maps every task id to its declared scope.
    """
    states = {child.task_id: child.state for child in children}
    in_flight = sum(1 for child in children if child.state in IN_FLIGHT)
    occupied = [child.task_id for child in children
                if child.state in IN_FLIGHT or (child.state == PARKED and child.lane is not None)]
    chosen: list[str] = []
    for child in children:
        if in_flight + len(chosen) >= max_parallel or (limit is not None and len(chosen) >= limit):
            break
        if child.state != "pending":
            continue
        if any(states.get(blocker) not in DONE for blocker in child.blocked_by):
            continue
        scope = scopes[child.task_id]
        if any(scopes_overlap(scope, scopes[other]) for other in occupied):
            continue
        chosen.append(child.task_id)
        occupied.append(child.task_id)
    return chosen


def waves(task_ids: Sequence[str], blocked_by: Mapping[str, Sequence[str]],
          scopes: Mapping[str, Sequence[str]], max_parallel: int) -> list[list[str]]:
    """Pack the tasks (in plan order) into waves; every task lands in exactly one.

    Wave k takes, in plan order, the tasks whose blockers all sit in earlier waves and whose
    scopes are disjoint from those already in the wave, at most `max_parallel` of them.
    Raises ValueError for `max_parallel < 1` or blockers that can never be satisfied.
    """
    if max_parallel < 1:
        raise ValueError("max_parallel must be at least 1")
    placed: set[str] = set()
    remaining = list(task_ids)
    result: list[list[str]] = []
    while remaining:
        wave: list[str] = []
        for task_id in remaining:
            if len(wave) >= max_parallel:
                break
            if all(blocker in placed for blocker in blocked_by[task_id]) and not any(
                    scopes_overlap(scopes[task_id], scopes[other]) for other in wave):
                wave.append(task_id)
        if not wave:
            raise ValueError(f"blockers of {remaining[0]!r} can never be satisfied")
        placed.update(wave)
        remaining = [task_id for task_id in remaining if task_id not in placed]
        result.append(wave)
    return result


def chain_below(blocked_by: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """For each task, the number of tasks on the longest chain that waits for it (0: nothing waits
    for it). A machine that may take several startable tasks takes the one most work waits for
    first: the critical path leaves the soonest. A blocker outside the mapping is ignored; a task on
    a cycle (which `start` refuses) counts 0."""
    waiting: dict[str, list[str]] = {task: [] for task in blocked_by}
    blocking: dict[str, int] = {task: 0 for task in blocked_by}   # how many tasks wait for it, unvisited
    for task, blockers in blocked_by.items():
        for blocker in set(blockers):
            if blocker in waiting:
                waiting[blocker].append(task)
                blocking[blocker] += 1
    below = {task: 0 for task in blocked_by}
    ready = [task for task, n in blocking.items() if n == 0]    # nothing waits for them: the chains' ends
    while ready:   # from the ends of the chains back to their starts (Kahn's order, reversed)
        task = ready.pop()
        for blocker in set(blocked_by[task]):
            if blocker not in waiting:
                continue
            below[blocker] = max(below[blocker], below[task] + 1)
            blocking[blocker] -= 1
            if blocking[blocker] == 0:
                ready.append(blocker)
    return {task: below[task] if blocking[task] == 0 else 0 for task in blocked_by}
