"""SPEC §8.9 v4: candidates whose checks ended together are judged under the slug's lock in one hold,
in window order — each landing still its own write with its own evidence, strictly in order; a failure
among them parks its child and drops the ones stacked on it, which are not judged on void results."""

from __future__ import annotations

import json

from conftest import git
from test_window import TASKS, batch_record, child, four, landed


def _verified(repo):
    """The window of `four` recorded by a tick and verified (in this process), nothing judged yet."""
    from git_lanes.domain.session import Session
    from git_lanes.tick import Request, gate, tick

    s = Session(cwd=str(repo))
    _, pendings = tick(s, "demo", Request(actor="tick"))
    assert [p.candidate.task_id for p in pendings] == list(TASKS)
    for p in pendings:
        gate.rerun(s, "demo", p)
    return s, pendings


def test_candidates_verified_together_are_judged_in_one_hold_and_land_in_order_one_write_each(repo):
    from git_lanes.store import candidate_lock_path, is_held
    from git_lanes.tick import Request, hold_landing

    base = four(repo, "--verify-window", "4")
    s, pendings = _verified(repo)
    before = git(repo, "rev-list", "--count", "refs/notes/lanes/batch/demo").strip()
    outcome, more = hold_landing(s, "demo", Request(actor="tick"), list(reversed(pendings)))   # any order given
    assert more == []
    assert [child(outcome.report, t)["state"] for t in TASKS] == ["integrated"] * 4
    assert landed(repo, base) == list(TASKS)
    writes = int(git(repo, "rev-list", "--count", "refs/notes/lanes/batch/demo").strip()) - int(before)
    assert writes >= 4   # one write per landing (and the completion)
    for t in TASKS:
        note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(outcome.report, t)["commit"]))
        assert note["task_id"] == t and note["rerun"]
    assert not any(is_held(candidate_lock_path(s.git, "demo", t)) for t in TASKS)   # every lock given back


def test_a_failure_judged_with_others_parks_its_child_and_the_later_ones_are_built_again(repo):
    from git_lanes.tick import Request, hold_landing, verify

    base = four(repo, "--verify-window", "4", fail_b=True)
    s, pendings = _verified(repo)
    outcome, more = hold_landing(s, "demo", Request(actor="tick"), pendings)
    assert child(outcome.report, "a")["state"] == "integrated"
    assert child(outcome.report, "b")["state"] == "needs_human"
    assert "batch_integration_check_failed" in child(outcome.report, "b")["reason"]
    # c and d were verified on a tree holding b: dropped, built again on a, verified again
    assert sorted(p.candidate.task_id for p in more) == ["c", "d"]
    assert all(p.candidate.head != q.candidate.head for p in more for q in pendings if q.candidate.task_id == p.candidate.task_id)
    outcome = verify(s, "demo", Request(actor="tick"), more) or outcome
    assert landed(repo, base) == ["a", "c", "d"]
    assert batch_record(repo).get("candidates") in (None, [])
