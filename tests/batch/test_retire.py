"""`git lanes retire` (SPEC §12) and the way on: `release --stale`, then a new `start` that continues
`imm/<slug>` and carries over the children already integrated on it."""

from __future__ import annotations

import json

import pytest

from conftest import git
from flow import (child_of, cli, done, exists, intent, ok, provision, reachable_from, record, start, states,
                  world, write_plan)
from git_lanes.core.errors import LanesError
from git_lanes.batch.resume import retire
from git_lanes.domain.session import Session

STATE_REF = "refs/notes/lanes/batch/demo"


def simple(task: str, **kw) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))], **kw)


def other_refs(repo) -> list[str]:
    lines = git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    return [line for line in lines if not line.startswith(STATE_REF + " ")]


def parked_batch(repo):
    """a integrated, b parked (gave up, with an executor commit), c skipped behind b."""
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b"), "c": simple("c", blocked_by=["b"])})
    start(repo, "demo", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    assert done(la, {"src/a/out.txt": "a\n"})["passed"] is True
    (lb / "src" / "b").mkdir(parents=True)
    (lb / "src" / "b" / "draft.txt").write_text("draft\n")
    git(lb, "add", "-A")
    git(lb, "commit", "-q", "-m", "draft")
    ok(lb, "done", "--give-up", "-m", "blocked")
    report = ok(repo, "tick")
    assert states(report) == {"a": "integrated", "b": "needs_human", "c": "skipped_blocked"}
    assert report["batch_state"] == "needs_human"
    return report, la, lb


def test_retire_release_stale_and_start_continue_the_branch(repo):
    report, la, lb = parked_batch(repo)
    old_id = report["batch_id"]
    a_commit = child_of(report, "a")["commit"]
    b_tip = git(lb, "rev-parse", "HEAD").strip()
    stored = json.loads(git(repo, "show", f"{STATE_REF}:batch.json"))
    refs_before = other_refs(repo)
    children_before = git(repo, "ls-tree", "-r", f"{STATE_REF}^{{tree}}", "children")

    report = ok(repo, "retire", "demo", "--yes")
    assert report["batch_state"] == "superseded"
    # the children and the other lanes unchanged; the parked lane b archived and removed in the same write
    # (SPEC §17.6 v4), its tip kept reachable from the record
    after = json.loads(git(repo, "show", f"{STATE_REF}:batch.json"))
    assert {k: v for k, v in after.items() if k not in ("batch_state", "updated_at")} == \
        {k: v for k, v in stored.items() if k not in ("batch_state", "updated_at")}
    assert git(repo, "ls-tree", "-r", f"{STATE_REF}^{{tree}}", "children") == children_before
    assert other_refs(repo) == [r for r in refs_before if not r.startswith("refs/heads/imm-lane/demo/b ")]
    assert la.is_dir() and not lb.exists()
    assert reachable_from(repo, b_tip, STATE_REF)
    # the retired batch is terminal: a tick only reports
    assert ok(repo, "tick")["reason"] == "terminal state already reached: superseded"

    # start refuses while the old lanes are there
    code, doc, err = cli(repo, "start", "demo", "--yes")
    assert code == 1 and "stale_lanes" in err and "hint: git lanes release --stale demo" in err
    released = ok(repo, "release", "--stale", "demo")
    assert sorted(r["task_id"] for r in released["released"]) == ["a"]   # b went with retire
    assert git(repo, "for-each-ref", "refs/heads/imm-lane/") == ""
    assert reachable_from(repo, b_tip, STATE_REF)             # never-integrated work stays reachable

    head = git(repo, "rev-parse", "HEAD").strip()
    report = ok(repo, "start", "demo", "--yes", "--max-parallel", "2")
    assert report["batch_id"] != old_id and report["batch_state"] == "running"
    assert git(repo, "rev-parse", "HEAD").strip() == head     # the branch continues where it was
    a = child_of(report, "a")
    assert a["state"] == "integrated" and a["commit"] == a_commit   # carried over as integrated (SPEC §6)
    assert ok(repo, "tick")["children"][0]["state"] == "integrated"  # it had no lane here: none to release
    assert states(report)["b"] == "pending" and states(report)["c"] == "pending"
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"] == ["b"]
    assert report["commits"] == [a_commit]

    # b again: the old batch's lane record of b is not this run's
    lb = provision(repo, "b")
    assert child_of(ok(repo, "tick"), "b")["state"] == "enrolled"
    assert done(lb, {"src/b/out.txt": "b\n"})["passed"] is True
    report = ok(repo, "tick")
    assert states(report)["b"] == "integrated"
    lc = provision(repo, "c")
    assert done(lc, {"src/c/out.txt": "c\n"})["passed"] is True
    report = ok(repo, "tick")
    assert report["batch_state"] == "completed", report["reason"]
    assert states(report)["a"] == "integrated"
    subjects = git(repo, "log", "--format=%s", f"{head}~1..imm/demo").splitlines()
    assert subjects == ["imm(c): Make c", "imm(b): Make b", "imm(a): Make a"]
    assert git(repo, "rev-list", "--merges", "imm/demo") == ""


def test_a_carried_over_child_costs_no_max_children(repo):
    """SPEC §3: `max_children` counts children that ever had a lane; one carried over had none here."""
    parked_batch(repo)
    ok(repo, "retire", "demo", "--yes")
    ok(repo, "release", "--stale", "demo")
    report = ok(repo, "start", "demo", "--yes", "--max-children", "1")
    assert report["batch_state"] == "running", report["reason"]
    assert states(report)["a"] == "integrated"
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"] == ["b"]

def test_retire_a_running_batch_with_nothing_in_flight(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    report = ok(repo, "retire", "demo", "--yes")
    assert report["batch_state"] == "superseded" and states(report) == {"a": "pending"}


def test_retire_refusals_write_nothing(repo):
    code, doc, err = cli(repo, "retire", "demo", "--yes")
    assert code == 1 and err.strip() == "error: stale_batch_absent: no active batch of demo"
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    report = start(repo, "demo", "--max-parallel", "2")
    la = provision(repo, "a")
    before = world(repo, la)
    code, doc, err = cli(repo, "retire", "demo", "--yes")
    assert code == 1
    assert err.strip() == f"error: stale_batch_in_flight: batch {report['batch_id']}, child a"
    assert world(repo, la) == before
    # nothing in flight, but no terminal and no --yes
    git(repo, "worktree", "remove", "--force", str(la))
    ok(repo, "tick")                                         # a is lost: parked, nothing in flight
    before = world(repo)
    code, doc, err = cli(repo, "retire", "demo")
    assert code == 1 and "batch_confirmation_required" in err
    assert world(repo) == before
    ok(repo, "retire", "demo", "--yes")
    code, doc, err = cli(repo, "retire", "demo", "--yes")
    assert code == 1 and err.startswith("error: stale_batch_absent: no active batch of demo (the latest, ")


def test_a_record_that_moves_while_confirming_is_batch_busy(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    s = Session(cwd=str(repo))

    def confirm_while_someone_ticks(text):
        assert "superseded" in text
        ok(repo, "provision", "a")      # the record moves (a is enrolled now)
        return True

    with pytest.raises(LanesError) as exc:
        retire(s, "demo", confirm_while_someone_ticks)
    assert exc.value.code == "batch_busy"
    rec = record(repo, "demo")
    assert rec["batch_state"] == "running"


def test_a_declined_confirmation_writes_nothing(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    before = world(repo)
    with pytest.raises(LanesError) as exc:
        retire(Session(cwd=str(repo)), "demo", lambda text: False)
    assert exc.value.code == "batch_confirmation_declined"
    assert world(repo) == before
