"""Pure scheduling (SPEC §3): scope overlap rules, `startable()` and waves."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_lanes.decisions.schedule import (DONE, IN_FLIGHT, entries_overlap, normalize_scope_entry, scopes_overlap,
                                          startable, waves)

STATES = ("pending", *IN_FLIGHT, *DONE, "needs_human", "skipped_blocked")
ENTRIES = ("src", "src/a", "src/a/b.py", "src/ab", "SRC/A/", "./docs", "docs/*.md", "tests",
           "tests/unit", "README", "lib/[ab]/x", "*")
FAST = settings(max_examples=200, deadline=None, database=None)


@dataclass(frozen=True)
class Child:
    task_id: str
    state: str = "pending"
    blocked_by: list[str] = field(default_factory=list)
    lane: object | None = None


# --- overlap rules -----------------------------------------------------------------------------

@pytest.mark.parametrize("entry, normal", [
    ("src/a", "src/a"),
    ("  Src/A/  ", "src/a"),
    ("./src/a", "src/a"),
    ("src//a", "src/a"),
    ("src/a/*.py", "src/a"),
    ("src/*/x.py", "src"),
    ("src/a?/x", "src"),
    ("src/[ab]/x", "src"),
    ("*.md", ""),
    ("**/x", ""),
    ("./", ""),
])
def test_normalize_scope_entry(entry, normal):
    assert normalize_scope_entry(entry) == normal


@pytest.mark.parametrize("a, b, expected", [
    ("src/a", "src/a", True),
    ("src/a", "src/a/b", True),
    ("src/a/b", "src/a", True),
    ("src/a", "src/ab", False),
    ("src/ab", "src/a", False),
    ("src/a", "src/b", False),
    ("SRC/A", "src/a/b.py", True),
    ("./src/a/", "src/a", True),
    ("src/a/*.py", "src/a/b/c", True),
    ("src/*.py", "src/ab", True),
    ("src/a*/x", "src/b", True),
    ("*", "anything/at/all", True),
    ("docs/*.md", "src", False),
    ("README", "README.md", False),
])
def test_entries_overlap(a, b, expected):
    assert entries_overlap(a, b) is expected
    assert entries_overlap(b, a) is expected


def test_scopes_overlap():
    assert scopes_overlap(["docs", "src/a"], ["lib", "src/a/b.py"])
    assert not scopes_overlap(["docs", "src/a"], ["lib", "src/ab"])
    assert not scopes_overlap([], ["*"])
    assert scopes_overlap(["tests/**"], ["tests/unit/x.py"])


# --- startable: examples -----------------------------------------------------------------------

def test_startable_examples():
    scopes = {"a": ["src/a"], "b": ["src/a/x.py"], "c": ["src/ab"], "d": ["docs"], "e": ["lib"]}
    children = [Child("a"), Child("b"), Child("c"), Child("d", blocked_by=["a"]), Child("e")]
    assert startable(children, 1, scopes) == ["a"]
    assert startable(children, 2, scopes) == ["a", "c"]
    assert startable(children, 5, scopes) == ["a", "c", "e"]
    assert startable(children, 5, scopes, limit=2) == ["a", "c"]
    assert startable(children, 5, scopes, limit=0) == []
    assert startable(children, 0, scopes) == []

    running = [Child("a", "settled", lane="L"), *children[1:]]
    assert startable(running, 2, scopes) == ["c"]
    assert startable(running, 5, scopes) == ["c", "e"]

    done = [Child("a", "integrated", lane="L"), *children[1:]]
    assert startable(done, 5, scopes) == ["b", "c", "d", "e"]


def test_parked_lane_keeps_scope_not_slot():
    scopes = {"a": ["src"], "b": ["src/x"], "c": ["docs"]}
    parked = [Child("a", "needs_human", lane="L"), Child("b"), Child("c")]
    assert startable(parked, 1, scopes) == ["c"]
    unlaned = [Child("a", "needs_human"), Child("b"), Child("c")]
    assert startable(unlaned, 1, scopes) == ["b"]


def test_blocker_must_be_integrated_or_released():
    scopes = {"a": ["a"], "b": ["b"]}
    for state, ok in [("pending", False), ("enrolled", False), ("lane_committed", False),
                      ("needs_human", False), ("skipped_blocked", False),
                      ("integrated", True), ("released", True)]:
        lane = None if state in ("pending", "skipped_blocked") else "L"
        children = [Child("a", state, lane=lane), Child("b", blocked_by=["a"])]
        assert ("b" in startable(children, 5, scopes)) is ok, state


def test_unknown_blocker_never_starts():
    assert startable([Child("b", blocked_by=["ghost"])], 5, {"b": ["b"]}) == []


# --- startable: properties ---------------------------------------------------------------------

@st.composite
def batches(draw):
    """Children in plan order (blockers earlier), their scopes, max_parallel and a limit."""
    count = draw(st.integers(1, 8))
    ids = [f"t{i}" for i in range(count)]
    children, scopes = [], {}
    for index, task_id in enumerate(ids):
        blocked_by = draw(st.lists(st.sampled_from(ids[:index]), unique=True)) if index else []
        state = draw(st.sampled_from(STATES))
        has_lane = state not in ("pending", "skipped_blocked") and (
            state != "needs_human" or draw(st.booleans()))
        children.append(Child(task_id, state, blocked_by, "L" if has_lane else None))
        scopes[task_id] = draw(st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=3))
    max_parallel = draw(st.integers(1, 5))
    limit = draw(st.none() | st.integers(0, 5))
    return children, scopes, max_parallel, limit


@FAST
@given(batches())
def test_never_more_than_max_parallel_slots(batch):
    children, scopes, max_parallel, limit = batch
    chosen = startable(children, max_parallel, scopes, limit)
    in_flight = sum(c.state in IN_FLIGHT for c in children)
    assert len(chosen) == len(set(chosen))
    assert in_flight + len(chosen) <= max(max_parallel, in_flight)
    if in_flight >= max_parallel:
        assert chosen == []
    if limit is not None:
        assert len(chosen) <= limit


@FAST
@given(batches())
def test_never_two_overlapping_occupied_scopes(batch):
    children, scopes, max_parallel, limit = batch
    chosen = startable(children, max_parallel, scopes, limit)
    occupied = [c.task_id for c in children
                if c.state in IN_FLIGHT or (c.state == "needs_human" and c.lane is not None)]
    for index, task_id in enumerate(chosen):
        for other in occupied + chosen[:index]:
            assert not scopes_overlap(scopes[task_id], scopes[other]), (task_id, other)


@FAST
@given(batches())
def test_only_pending_children_with_finished_blockers_start(batch):
    children, scopes, max_parallel, limit = batch
    by_id = {c.task_id: c for c in children}
    chosen = startable(children, max_parallel, scopes, limit)
    order = [c.task_id for c in children]
    assert chosen == sorted(chosen, key=order.index)
    for task_id in chosen:
        assert by_id[task_id].state == "pending"
        assert all(by_id[b].state in DONE for b in by_id[task_id].blocked_by)


@FAST
@given(st.integers(1, 8))
def test_one_slot_disjoint_independent_runs_in_plan_order(count):
    children = [Child(f"t{i}") for i in range(count)]
    scopes = {c.task_id: [f"dir{i}"] for i, c in enumerate(children)}
    started = []
    while True:
        chosen = startable(children, 1, scopes)
        if not chosen:
            break
        assert len(chosen) == 1
        assert startable([replace(c, state="enrolled", lane="L") if c.task_id == chosen[0] else c
                          for c in children], 1, scopes) == []
        started += chosen
        children = [replace(c, state="integrated", lane="L") if c.task_id == chosen[0] else c
                    for c in children]
    assert started == [f"t{i}" for i in range(count)]


@FAST
@given(batches(), st.randoms(use_true_random=False))
def test_simulation_finishes_every_task(batch, rng):
    """From an all-pending start, finishing lanes in any order starts every task exactly once."""
    children, scopes, max_parallel, _ = batch
    children = [Child(c.task_id, blocked_by=c.blocked_by) for c in children]
    started: list[str] = []
    while True:
        chosen = startable(children, max_parallel, scopes)
        started += chosen
        children = [replace(c, state="enrolled", lane="L") if c.task_id in chosen else c
                    for c in children]
        running = [c.task_id for c in children if c.state in IN_FLIGHT]
        assert len(running) <= max_parallel
        assert not any(scopes_overlap(scopes[a], scopes[b])
                       for i, a in enumerate(running) for b in running[i + 1:])
        if not running:
            break
        finished = rng.choice(running)
        children = [replace(c, state="integrated") if c.task_id == finished else c
                    for c in children]
    assert sorted(started) == sorted(scopes)
    assert all(c.state == "integrated" for c in children)


# --- waves -------------------------------------------------------------------------------------

@FAST
@given(batches())
def test_waves_properties(batch):
    children, scopes, max_parallel, _ = batch
    ids = [c.task_id for c in children]
    blocked_by = {c.task_id: c.blocked_by for c in children}
    result = waves(ids, blocked_by, scopes, max_parallel)
    assert sorted(t for wave in result for t in wave) == sorted(ids)
    earlier: set[str] = set()
    for wave in result:
        assert 1 <= len(wave) <= max_parallel
        assert wave == sorted(wave, key=ids.index)
        for index, task_id in enumerate(wave):
            assert set(blocked_by[task_id]) <= earlier
            assert not any(scopes_overlap(scopes[task_id], scopes[o]) for o in wave[:index])
        earlier.update(wave)


def test_waves_examples():
    ids = ["a", "b", "c", "d"]
    blocked = {"a": [], "b": [], "c": ["a"], "d": []}
    scopes = {"a": ["src"], "b": ["src/x"], "c": ["docs"], "d": ["lib"]}
    assert waves(ids, blocked, scopes, 1) == [["a"], ["b"], ["c"], ["d"]]
    assert waves(ids, blocked, scopes, 2) == [["a", "d"], ["b", "c"]]
    assert waves(ids, blocked, scopes, 4) == [["a", "d"], ["b", "c"]]


def test_waves_refuses_bad_input():
    with pytest.raises(ValueError):
        waves(["a"], {"a": []}, {"a": ["a"]}, 0)
    with pytest.raises(ValueError):
        waves(["a"], {"a": ["ghost"]}, {"a": ["a"]}, 1)


# --- the order an executor machine claims in (SPEC §14 `work`) -----------------------------------

def _longest_chain_below(task: str, blocked_by: dict[str, list[str]]) -> int:
    """By brute force: the most tasks on one path of tasks waiting (transitively) for `task`."""
    waiting = [t for t, blockers in blocked_by.items() if task in blockers]
    return max((1 + _longest_chain_below(t, blocked_by) for t in waiting), default=0)


@st.composite
def graphs(draw):
    ids = [f"t{i}" for i in range(draw(st.integers(1, 9)))]
    return {task: draw(st.lists(st.sampled_from(ids[:i]), unique=True)) if i else [] for i, task in enumerate(ids)}


@FAST
@given(graphs())
def test_chain_below_is_the_longest_chain_of_tasks_waiting(blocked_by):
    from git_lanes.decisions.schedule import chain_below

    assert chain_below(blocked_by) == {task: _longest_chain_below(task, blocked_by) for task in blocked_by}


def test_chain_below_counts_a_cycle_and_a_blocker_outside_the_batch_as_nothing():
    from git_lanes.decisions.schedule import chain_below

    assert chain_below({"a": ["b"], "b": ["a"], "c": ["a", "x"], "d": ["d"]}) == {"a": 0, "b": 0, "c": 0, "d": 0}
    long = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(3000)}   # no recursion limit on long chains
    assert chain_below(long)["t0"] == 2999


def test_a_machine_claims_the_task_most_work_waits_for_first():
    """Found with `bench/remote.py`: a machine with two free slots claimed a task nothing waits for
    (and lost that race) before the one the rest of the chain waited for, 0.4 s on the critical path."""
    from git_lanes.decisions.claims import join_order

    blocked_by = {"a": [], "b": ["a"], "c": ["b"], "k": ["c"], "f": [], "g": [], "h": [], "x": ["h"]}
    for clone in ("0c1d", "b7cb", "43e0", "ffff"):
        order = join_order(["f", "g", "b", "h"], blocked_by, clone)
        assert order[0] == "b" and order[1] == "h", (clone, order)   # b: c and k wait; h: x waits; then f, g
    orders = {tuple(join_order(["f", "g", "e", "d"], {**blocked_by, "d": [], "e": []}, clone))
              for clone in ("0c1d", "b7cb", "43e0", "ffff", "1234")}
    assert len(orders) > 1    # among equals each machine has an order of its own
