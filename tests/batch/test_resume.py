"""`git lanes resume` (SPEC §6, §7 B): a newer confirmation, every parked child recovered from Git or
restarted, all or nothing; the revision-delegation grant given or withdrawn; on a running batch
(`resume <slug> TASK…`) parked children freed at once, without a confirmation, and the restart of a
child starting it over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from flow import (child_of, cli, done, exists, intent, ok, provision, reachable_from, record, start, states,
                  world, write_plan)
from git_lanes.batch.resume import resume
from git_lanes.core.errors import LanesError
from git_lanes.domain.session import Session

STATE_REF = "refs/notes/lanes/batch/demo"


def simple(task: str, **kw) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))], **kw)


def park_by_plan_change(repo: Path, task: str) -> dict:
    """A user commit on the batch branch changes an intent: the tick parks every in-flight child
    (`plan_changed`); a revert then restores the authorized plan, so the children are recoverable."""
    path = repo / ".lanes" / "demo" / f"{task}.toml"
    path.write_text(path.read_text().replace('goal = "', 'goal = "Changed: '))
    git(repo, "commit", "-q", "-am", "change a plan file by hand")
    report = ok(repo, "tick")
    assert report["batch_state"] == "needs_human" and report["reason"].startswith("plan_changed: ")
    git(repo, "revert", "--no-edit", "HEAD")
    return report


def test_restart_a_lane_that_gave_up_keeps_its_tip_and_continues(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b"), "c": simple("c", blocked_by=["a"])})
    start(repo, "demo", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    (la / "src" / "a").mkdir(parents=True)
    (la / "src" / "a" / "wip.txt").write_text("half done\n")
    git(la, "add", "-A")
    git(la, "commit", "-q", "-m", "wip")
    tip = git(la, "rev-parse", "HEAD").strip()
    ok(la, "done", "--give-up", "-m", "stuck on a design question")
    assert done(lb, {"src/b/out.txt": "b\n"})["passed"] is True
    report = ok(repo, "tick")
    assert states(report) == {"a": "needs_human", "b": "integrated", "c": "skipped_blocked"}
    assert report["batch_state"] == "needs_human"
    old_run = child_of(report, "a")["lane"]["run_id"]

    # not recoverable (its lane is off its branch): refused, nothing written. (Before v3 a give-up itself
    # was unrecoverable; SPEC v3 §6 makes a give-up older than the resume history, see test_resume.py.)
    git(la, "switch", "-q", "--detach")
    before = world(repo, la)
    code, doc, err = cli(repo, "resume", "demo", "--yes")
    assert code == 1
    assert err.strip() == (f"error: batch_resume_unrecoverable: a: its lane {la.resolve()} is on a detached HEAD, "
                           "not imm-lane/demo/a; restart it with --restart a (nothing was written)")
    assert world(repo, la) == before
    git(la, "switch", "-q", "imm-lane/demo/a")

    report = ok(repo, "resume", "demo", "--yes", "--restart", "a")
    assert report["batch_state"] == "running" and report["reason"] is None
    a = child_of(report, "a")
    assert a["state"] == "pending" and a["lane"] is None and a["reason"] is None and a["qa_failures"] == 0
    assert child_of(report, "c")["state"] == "pending" and child_of(report, "c")["reason"] is None
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"] == ["a"]
    archived = json.loads(git(repo, "show", f"{STATE_REF}:archived_lanes/0000/000000.json"))
    assert archived["task_id"] == "a" and archived["tip"] == tip and archived["run_id"] == old_run
    assert reachable_from(repo, tip, STATE_REF)

    # the old lane must be released before it is provisioned again
    code, doc, err = cli(repo, "provision", "a")
    assert code == 1 and "batch_lane_branch_exists" in err
    code, doc, err = cli(repo, "release", "a")             # the restarted child's old lane may go
    assert code == 0, err
    assert not la.exists() and "imm-lane/demo/a" not in git(repo, "branch", "--list", "imm-lane/*")
    assert reachable_from(repo, tip, STATE_REF)            # the record still holds the abandoned work
    la = provision(repo, "a")
    report = ok(repo, "tick")        # the old run's lane record is not this run's: no run mismatch
    assert child_of(report, "a")["state"] == "enrolled" and child_of(report, "a")["lane"]["run_id"] != old_run
    assert done(la, {"src/a/out.txt": "a\n"})["passed"] is True
    report = ok(repo, "tick")
    assert states(report)["a"] == "integrated"
    lc = provision(repo, "c")
    assert done(lc, {"src/c/out.txt": "c\n"})["passed"] is True
    report = ok(repo, "tick")
    assert report["batch_state"] == "completed"
    assert reachable_from(repo, tip, STATE_REF)


def test_a_restarted_lane_s_inbox_holds_only_what_was_sent_to_it(repo):
    """A restarted child starts over (SPEC §6): the instructions its archived lane read are not the new
    lane's inbox; what is sent after the restart is."""
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    la = provision(repo, "a")
    ok(repo, "instruct", "a", "--message", "please do X", "--session-state", "idle")
    assert [i["text"] for i in ok(la, "inbox", "--ack")] == ["please do X"]
    ok(la, "done", "--give-up", "-m", "cannot do it")
    ok(repo, "tick")
    ok(repo, "resume", "demo", "--yes", "--restart", "a")
    ok(repo, "release", "a")
    la = provision(repo, "a")
    assert ok(la, "inbox") == [] and ok(la, "task")["unread"] == []
    ok(repo, "instruct", "a", "--message", "now do Y", "--session-state", "idle")
    assert [(i["text"], i["read"]) for i in ok(la, "inbox")] == [("now do Y", False)]


def test_parked_children_recover_from_git_as_lane_committed_settled_and_enrolled(repo, tmp_path):
    flag = tmp_path / "environment-ready"
    flag.write_text("yes\n")
    x_check = (f"python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('src/x/out.txt').exists() "
               f"and pathlib.Path('{flag}').exists() else 1)\"")
    write_plan(repo, "demo", {"x": intent("x", scope=["src/x"], acceptance=[("X1", "out", x_check)]),
                              "y": simple("y"), "z": simple("z")})
    start(repo, "demo", "--max-parallel", "3", "--qa-failure-limit", "3")
    lx, ly, lz = provision(repo, "x"), provision(repo, "y"), provision(repo, "z")
    assert done(lx, {"src/x/out.txt": "x\n"})["passed"] is True
    flag.unlink()                                      # the check now fails only on the candidate
    report = ok(repo, "tick")
    assert child_of(report, "x")["state"] == "needs_human"
    assert child_of(report, "x")["reason"].startswith("batch_integration_check_failed: x:X1 failed on candidate")
    assert done(ly, {"src/y/out.txt": "y\n"})["passed"] is True
    assert done(lz, {"src/z/wrong.txt": "z\n"})["passed"] is False
    report = ok(repo, "tick")
    assert child_of(report, "z")["qa_failures"] == 1 and states(report)["y"] == "integrated"
    report = park_by_plan_change(repo, "z")
    assert states(report) == {"x": "needs_human", "y": "integrated", "z": "needs_human"}

    flag.write_text("yes\n")
    s = Session(cwd=str(repo))
    confirmed = record(repo, "demo")["confirmation_time"]
    shown = []
    resume(s, "demo", [], None, lambda text: shown.append(text) or True)
    rec = s.batches.read("demo").record
    x, z = rec.child("x"), rec.child("z")
    assert (x.state, z.state) == ("lane_committed", "enrolled")
    assert x.reason is None and z.reason is None and z.qa_failures == 0 and x.qa_failures == 0
    assert rec.batch_state == "running" and rec.reason is None and rec.confirmation_time > confirmed
    assert "x: -> lane_committed" in shown[0] and "z: -> enrolled" in shown[0]
    report = ok(repo, "tick")
    assert states(report) == {"x": "integrated", "y": "integrated", "z": "enrolled"}
    assert done(lz, {"src/z/out.txt": "z\n"})["passed"] is True
    assert ok(repo, "tick")["batch_state"] == "completed"


def test_a_passed_attempt_resumes_settled(repo):
    write_plan(repo, "demo", {"p": simple("p"), "q": simple("q")})
    start(repo, "demo", "--max-parallel", "2")
    lp, _ = provision(repo, "p"), provision(repo, "q")
    attempt = done(lp, {"src/p/out.txt": "p\n"})
    assert attempt["passed"] is True
    park_by_plan_change(repo, "q")
    s = Session(cwd=str(repo))
    resume(s, "demo", [], None, lambda text: True)
    rec = s.batches.read("demo").record
    p = rec.child("p")
    assert p.state == "settled" and p.lane.attempt == 0 and p.settled_at is not None and p.reason is None
    assert rec.child("q").state == "enrolled"
    report = ok(repo, "tick")
    assert states(report) == {"p": "integrated", "q": "enrolled"}
    assert git(repo, "show", f"{child_of(report, 'p')['commit']}:src/p/out.txt") == "p\n"


def test_resume_refuses_a_confirmation_that_is_not_newer(repo):
    write_plan(repo, "demo", {"p": simple("p")})
    start(repo, "demo")
    lp = provision(repo, "p")
    park_by_plan_change(repo, "p")
    recorded = record(repo, "demo")["confirmation_time"]
    before = world(repo, lp)
    s = Session(cwd=str(repo), clock=lambda: recorded)
    with pytest.raises(LanesError) as exc:
        resume(s, "demo", [], None, lambda text: True)
    assert exc.value.code == "batch_confirmation_stale" and exc.value.exit_code == 1
    assert world(repo, lp) == before
    s = Session(cwd=str(repo), clock=lambda: "2099-01-01T00:00:00.000Z")
    resume(s, "demo", [], None, lambda text: True)
    assert record(repo, "demo")["confirmation_time"] == "2099-01-01T00:00:00.000Z"


def test_resume_grants_and_withdraws_revision_delegation(repo):
    write_plan(repo, "demo", {"p": simple("p")})
    start(repo, "demo")
    assert record(repo, "demo")["revision_delegation"] is None
    provision(repo, "p")
    park_by_plan_change(repo, "p")
    ok(repo, "resume", "demo", "--yes", "--delegate-revisions")
    rec = record(repo, "demo")
    assert rec["revision_delegation"] == {"confirmation_time": rec["confirmation_time"]}
    park_by_plan_change(repo, "p")
    ok(repo, "resume", "demo", "--yes")                     # neither flag: unchanged
    assert record(repo, "demo")["revision_delegation"] is not None
    park_by_plan_change(repo, "p")
    ok(repo, "resume", "demo", "--yes", "--no-delegate-revisions")
    assert record(repo, "demo")["revision_delegation"] is None


def test_resume_refusals_write_nothing(repo):
    write_plan(repo, "demo", {"p": simple("p"), "q": simple("q")})
    start(repo, "demo", "--max-parallel", "2")
    lp, lq = provision(repo, "p"), provision(repo, "q")
    before = world(repo, lp, lq)
    code, doc, err = cli(repo, "resume", "demo", "--yes")   # (v3) a running batch: name the parked children
    assert code == 2 and doc is None and "name the parked children to free" in err
    assert world(repo, lp, lq) == before
    code, doc, err = cli(repo, "resume", "nosuch", "--yes")
    assert code == 2 and doc is None
    park_by_plan_change(repo, "q")
    before = world(repo, lp, lq)
    # no terminal and no --yes
    code, doc, err = cli(repo, "resume", "demo")
    assert code == 1 and "batch_confirmation_required" in err
    assert world(repo, lp, lq) == before
    # unknown task
    code, doc, err = cli(repo, "resume", "demo", "--yes", "--restart", "ghost")
    assert code == 2 and doc is None and "ghost is not a child" in err
    assert world(repo, lp, lq) == before
    # all or nothing: p is recoverable, q's lane is gone
    git(repo, "worktree", "remove", "--force", str(lq))
    before = world(repo, lp)
    code, doc, err = cli(repo, "resume", "demo", "--yes")
    assert code == 1
    assert err.strip() == (f"error: batch_resume_unrecoverable: q: its lane {lq} is gone; restart it with "
                           "--restart q (nothing was written)")
    assert world(repo, lp) == before
    report = ok(repo, "resume", "demo", "--yes", "--restart", "q")
    assert states(report) == {"p": "enrolled", "q": "pending"}


def test_a_child_not_parked_cannot_be_restarted(repo):
    write_plan(repo, "demo", {"p": simple("p"), "q": simple("q")})
    start(repo, "demo", "--max-parallel", "2")
    lp, lq = provision(repo, "p"), provision(repo, "q")
    assert done(lp, {"src/p/out.txt": "p\n"})["passed"] is True
    ok(repo, "tick")
    park_by_plan_change(repo, "q")
    before = world(repo, lq)
    code, doc, err = cli(repo, "resume", "demo", "--yes", "--restart", "p")
    assert code == 1 and err.strip() == ("error: batch_restart_refused: p is integrated; --restart only sends a "
                                         "parked child back to pending")
    assert world(repo, lq) == before


def test_restart_takes_every_task_after_it(repo):
    """SPEC §6 `resume <slug> [TASK…] [--restart TASK…]`: the words after `--restart` are all restarted,
    as are repeated flags; a word after another option is a TASK again."""
    write_plan(repo, "demo", {"p": simple("p"), "q": simple("q"), "r": simple("r")})
    start(repo, "demo", "--max-parallel", "3")
    lanes = {t: provision(repo, t) for t in "pqr"}
    for t, lane in lanes.items():
        ok(lane, "done", "--give-up", "-m", f"{t} is stuck")
    assert states(ok(repo, "tick")) == {"p": "needs_human", "q": "needs_human", "r": "needs_human"}
    code, _, err = cli(repo, "resume", "demo", "--restart", "p", "--yes", "q")   # q: a TASK, refused here
    assert code == 2 and "resume acts on every parked child, so name none" in err
    report = ok(repo, "resume", "demo", "--restart", "p", "q", "--yes")
    assert states(report) == {"p": "pending", "q": "pending", "r": "enrolled"}


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
