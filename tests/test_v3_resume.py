"""`git lanes resume <slug> TASK…` on a running batch (SPEC §6 v3), through the installed `git lanes`: parked
children are freed at once, without a confirmation, all or nothing; the restart of a child starts it over."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, reachable_from, record, start, states, world, \
    write_plan

STATE_REF = "refs/notes/lanes/batch/demo"


def simple(task: str, **kw) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))], **kw)


def running_with_a_lost_lane(repo: Path, *extra: str, correct: bool = False) -> tuple[Path, Path]:
    """a and b run; a fails once (with `correct`, at a limit of 1, and is corrected); then a's lane is
    switched off its branch, so the tick parks it (batch_lane_lost) while b keeps the batch running; c
    (after a) is skipped."""
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b"), "c": simple("c", blocked_by=["a"])})
    start(repo, "demo", "--max-parallel", "2", *extra)
    la, lb = provision(repo, "a"), provision(repo, "b")
    assert done(la, {"src/a/wrong.txt": "no\n"})["passed"] is False
    assert child_of(ok(repo, "tick"), "a")["qa_failures"] == 1
    if correct:
        report = ok(repo, "instruct", "a", "--kind", "correction", "--session-state", "idle", "-m", "out.txt")
        assert child_of(report, "a")["corrections"] == 1
    git(la, "switch", "-q", "-c", "elsewhere")
    report = ok(repo, "tick")
    assert states(report) == {"a": "needs_human", "b": "enrolled", "c": "skipped_blocked"}
    assert report["batch_state"] == "running" and child_of(report, "a")["reason"] == "batch_lane_lost"
    return la, lb


def test_resume_frees_a_parked_child_of_a_running_batch(repo):
    la, lb = running_with_a_lost_lane(repo)
    before = world(repo, la, lb)
    # refusals write nothing
    code, doc, err = cli(repo, "resume", "demo", "b")
    assert code == 1 and err.strip() == "error: batch_not_parked: b is enrolled"
    code, doc, err = cli(repo, "resume", "demo")
    assert code == 2 and doc is None and "name the parked children to free" in err
    code, doc, err = cli(repo, "resume", "demo", "zz")
    assert code == 2 and doc is None and "zz is not a child of batch" in err
    code, doc, err = cli(repo, "resume", "demo", "a")              # its lane is still off its branch
    assert code == 1 and err.strip() == (f"error: batch_resume_unrecoverable: a: its lane {la.resolve()} is on "
                                         "elsewhere, not imm-lane/demo/a; restart it with --restart a "
                                         "(nothing was written)")
    assert world(repo, la, lb) == before
    # back on its branch: freed at once (no terminal, no --yes: a running batch needs no confirmation)
    git(la, "switch", "-q", "imm-lane/demo/a")
    confirmed = record(repo, "demo")["confirmation_time"]
    code, report, err = cli(repo, "resume", "demo", "a")
    assert code == 0, err
    a = child_of(report, "a")
    assert (a["state"], a["reason"], a["qa_failures"]) == ("enrolled", None, 0)
    assert a["resumed_at"] >= confirmed
    assert child_of(report, "c")["state"] == "pending" and child_of(report, "c")["reason"] is None
    assert report["batch_state"] == "running" and record(repo, "demo")["confirmation_time"] == confirmed
    (entry,) = [e for e in ok(repo, "log", "demo") if e["summary"].startswith("resumed")]
    assert entry["summary"] == "resumed: a enrolled, c pending" and entry["actor"] == "resume"
    # the old failed attempt was seen before the park: it is not counted again
    assert done(la, {"src/a/out.txt": "a\n"})["passed"] is True
    report = ok(repo, "tick")
    assert states(report)["a"] == "integrated"


def test_naming_tasks_on_a_needs_human_batch_is_a_usage_error(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    la = provision(repo, "a")
    git(la, "switch", "-q", "-c", "elsewhere")
    assert ok(repo, "tick")["batch_state"] == "needs_human"
    before = world(repo, la)
    code, doc, err = cli(repo, "resume", "demo", "a", "--yes")
    assert code == 2 and doc is None and "resume acts on every parked child" in err
    assert world(repo, la) == before


def test_restart_on_a_running_batch_starts_the_child_over(repo):
    la, lb = running_with_a_lost_lane(repo, "--qa-failure-limit", "1", correct=True)
    git(la, "switch", "-q", "imm-lane/demo/a")      # back on its branch, with the failed delivery uncommitted
    rec = record(repo, "demo")
    lane_ref = "refs/notes/lanes/lane/demo/a"
    record_tip = git(repo, "rev-parse", lane_ref).strip()
    code, report, err = cli(repo, "resume", "demo", "--restart", "a")
    assert code == 0, err
    a = child_of(report, "a")
    assert (a["state"], a["lane"], a["corrections"], a["qa_failures"]) == ("pending", None, 0, 0)
    assert a["resumed_at"] and rec["confirmation_time"] == record(repo, "demo")["confirmation_time"]
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"] == ["a"]
    # its lane record's tip is archived, reachable from the record, and its ref is gone
    entries = [json.loads(git(repo, "show", f"{STATE_REF}:{p}"))
               for p in git(repo, "ls-tree", "-r", "--name-only", STATE_REF, "archived_lanes").split()]
    assert [e["record_tip"] for e in entries if e.get("record_tip")] == [record_tip]
    assert reachable_from(repo, record_tip, STATE_REF)
    assert git(repo, "for-each-ref", lane_ref).strip() == ""
    # the old lane is dirty (the failed delivery): release keeps that work in a commit of the record
    code, doc, err = cli(repo, "release", "a")
    assert code == 0, err
    (item,) = doc["released"]
    snapshot = item["snapshot"]
    assert git(repo, "show", f"{snapshot}:src/a/wrong.txt") == "no\n"
    assert reachable_from(repo, snapshot, STATE_REF) and not la.exists()
    # a fresh lane, a fresh record at revision 1
    la = provision(repo, "a")
    assert done(la, {"src/a/out.txt": "a\n"})["passed"] is True
    assert json.loads(git(repo, "show", f"{lane_ref}:lane.json"))["record_revision"] == 1
    assert states(ok(repo, "tick"))["a"] == "integrated"


def test_a_lane_that_gave_up_is_resumed_once_its_executor_can_go_on(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    start(repo, "demo", "--max-parallel", "2")
    la, _ = provision(repo, "a"), provision(repo, "b")
    ok(la, "done", "--give-up", "-m", "waiting for a decision")
    report = ok(repo, "tick")
    assert states(report) == {"a": "needs_human", "b": "enrolled"}
    code, report, err = cli(repo, "resume", "demo", "a")
    assert code == 0, err
    assert child_of(report, "a")["state"] == "enrolled"            # the give-up is history now
    assert done(la, {"src/a/out.txt": "a\n"})["passed"] is True
    assert states(ok(repo, "tick"))["a"] == "integrated"


def test_a_running_batch_withdraws_or_grants_revision_delegation_on_its_own(repo):
    """SPEC §10.1: "a resume may withdraw it, written at once" — on a running batch too, with nothing parked
    (a grant needs its confirmation, as at `start`); with neither, nothing named is still exit 2."""
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo", "--delegate-revisions")
    assert record(repo, "demo")["revision_delegation"] is not None
    report = ok(repo, "resume", "demo", "--no-delegate-revisions")
    assert report["batch_state"] == "running" and record(repo, "demo")["revision_delegation"] is None
    assert ok(repo, "log", "demo")[-1]["summary"] == "resumed: delegation withdrawn"
    before = record(repo, "demo")
    code, _, err = cli(repo, "resume", "demo", "--delegate-revisions")   # no terminal, no --yes
    assert code == 1 and "batch_confirmation" in err and record(repo, "demo") == before
    ok(repo, "resume", "demo", "--delegate-revisions", "--yes")
    assert record(repo, "demo")["revision_delegation"]["confirmation_time"]
    code, _, err = cli(repo, "resume", "demo")
    assert code == 2 and "name the parked children to free" in err
