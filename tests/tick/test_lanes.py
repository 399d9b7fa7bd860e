"""Lanes (issue 3): provision, admission, the lane side, observation, corrections, instructions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import git
from helpers import all_refs, deliver, git_lanes, lane_path, lanes, lanes_json, write_initiative


def start(repo, tasks, *extra):
    write_initiative(repo, "demo", tasks)
    code, report = lanes_json(repo, "start", "demo", "--yes", *extra)
    assert code == 0, report
    return report


def provision(repo, task):
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    assert report["children"][[c["task_id"] for c in report["children"]].index(task)]["state"] == "enrolled"
    return Path(lane_path(report, task))


def tick(repo, *args):
    code, report = lanes_json(repo, "tick", *args)
    return code, report


def states(report):
    return {c["task_id"]: c["state"] for c in report["children"]}


def provisions(report):
    return [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"]


DISJOINT_AND_OVERLAP = [
    {"id": "a", "scope": ["src/a"]},
    {"id": "b", "scope": ["src/b"]},
    {"id": "c", "scope": ["src/a/deep"]},   # overlaps a
    {"id": "d", "scope": ["src/d"]},
]


def test_two_lanes_deliver_an_overlapping_task_waits_and_a_give_up_frees_a_slot(repo):
    report = start(repo, DISJOINT_AND_OVERLAP, "--max-parallel", "2")
    assert provisions(report) == ["a", "b"]
    la, lb = provision(repo, "a"), provision(repo, "b")
    code, report = tick(repo)
    assert provisions(report) == []  # both slots held
    # the executor of b delivers through the real CLI, run inside its lane
    deliver(lb, {"src/b/x.txt": "b\n"})
    proc = git_lanes(lb, "done", "--json")
    assert json.loads(proc.stdout)["passed"] is True
    code, report = tick(repo)
    assert states(report)["b"] == "integrated"
    assert provisions(report) == ["d"]  # c overlaps a, which holds a lane
    # a gives up: parked, keeps its scope but not its slot
    git_lanes(la, "done", "--give-up", "-m", "cannot finish")
    code, report = tick(repo)
    st = states(report)
    assert st["a"] == "needs_human" and report["children"][0]["reason"] == "batch_lane_stopped: cannot finish"
    assert st["c"] == "pending" and "c" not in provisions(report)
    assert "d" in provisions(report)
    assert report["batch_state"] == "running"


def test_lane_commands_recognise_the_lane_and_show_the_task(repo):
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    la = provision(repo, "a")
    code, info = lanes_json(la, "task")
    assert code == 0 and info["task_id"] == "a" and info["scope"] == ["src/a"]
    code, out, err = lanes(la, "done")
    assert code == 1 and "error: nothing_to_deliver: nothing to deliver" in err
    code, out, err = lanes(repo, "task")
    assert code == 2 and "not in a lane" in err


# -- admission: one fact violated at a time, nothing written ----------------------------------------

@pytest.fixture
def running(repo, tmp_path):
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]},
                 {"id": "c", "scope": ["src/c"], "blocked_by": ["a"]}], "--max-parallel", "3")
    return repo


def offer_refused(repo, task, path, reason):
    before = all_refs(repo)
    code, report = tick(repo, "--offer", f"{task}={path}")
    assert code == 0
    assert report["lane_refusals"] == [{"task_id": task, "path": os.path.realpath(path), "reason": reason}]
    assert all_refs(repo) == before, "a refused offer wrote something"


def make_lane(repo, tmp_path, task, at="HEAD", name=None):
    path = tmp_path / (name or f"lane-{task}")
    git(repo, "worktree", "add", "-q", "-b", f"imm-lane/demo/{task}", str(path), at)
    return path


def test_admission_unknown_child(running, tmp_path):
    offer_refused(running, "c", make_lane(running, tmp_path, "c"), "batch_lane_unknown_child")   # blocked by a
    offer_refused(running, "zz", tmp_path, "batch_lane_unknown_child")                           # no such child


def test_admission_foreign_repository(running, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    offer_refused(running, "a", plain, "batch_lane_foreign_repository")
    offer_refused(running, "a", tmp_path / "missing", "batch_lane_foreign_repository")
    lane = make_lane(running, tmp_path, "a")
    (lane / "sub").mkdir()
    offer_refused(running, "a", lane / "sub", "batch_lane_foreign_repository")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "commit", "-q", "--allow-empty", "-m", "x")
    git(other, "switch", "-q", "-c", "imm-lane/demo/a")
    offer_refused(running, "a", other, "batch_lane_foreign_repository")


def test_admission_is_coordinator(running):
    offer_refused(running, "a", running, "batch_lane_is_coordinator")


def test_admission_branch_mismatch(running, tmp_path):
    path = tmp_path / "wrong-branch"
    git(running, "worktree", "add", "-q", "-b", "feature", str(path))
    offer_refused(running, "a", path, "batch_lane_branch_mismatch")


def test_admission_base_mismatch(running, tmp_path):
    lane = make_lane(running, tmp_path, "a")
    (lane / "x").write_text("x")
    git(lane, "add", "x")
    git(lane, "commit", "-q", "-m", "not on the batch branch")
    offer_refused(running, "a", lane, "batch_lane_base_mismatch")


def test_admission_dirty(running, tmp_path):
    lane = make_lane(running, tmp_path, "a")
    (lane / "untracked").write_text("x")
    offer_refused(running, "a", lane, "batch_lane_dirty")


def test_admission_occupied_by_a_parked_lane(repo, tmp_path):
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]},
                 {"id": "c", "scope": ["src/c"]}], "--max-parallel", "3")
    la = provision(repo, "a")
    provision(repo, "b")
    git_lanes(la, "done", "--give-up", "-m", "stuck")
    code, report = tick(repo)
    assert states(report)["a"] == "needs_human"
    git(la, "switch", "-q", "-c", "imm-lane/demo/c")
    offer_refused(repo, "c", la, "batch_lane_occupied")


def test_offers_are_untrusted_input(running, tmp_path):
    before = all_refs(running)
    code, out, err = lanes(running, "tick", "--offer", f"a={tmp_path}", "--offer", f"a={tmp_path}")
    assert code == 2 and "invalid lane_offers: a offered twice" in err
    code, out, err = lanes(running, "tick", *sum((["--offer", f"t{i}=/x"] for i in range(65)), []))
    assert code == 2 and "at most 64" in err
    code, out, err = lanes(running, "tick", "--offer", "a=" + "x" * 5000)
    assert code == 2 and "longer than 4096 bytes" in err
    code, out, err = lanes(running, "tick", "--offer", "bad..id=/x")
    assert code == 2
    assert all_refs(running) == before


@pytest.mark.parametrize("char", ["\n", "\t", "\x7f"])
def test_a_lane_whose_real_path_holds_a_control_character_is_foreign(running, tmp_path, char):
    """Git's line-based answers about such a path break (every lane command would exit 128 for ever),
    and `provision --path` refuses one: admission refuses it as a path that is never a lane of ours,
    like a name that is not UTF-8 (SPEC §6.1 rule 1) — reached through a symbolic link too."""
    lane = make_lane(running, tmp_path, "a", name=f"lane{char}a")
    link = tmp_path / "link"
    link.symlink_to(lane)
    for path in (lane, link):
        before = all_refs(running)
        code, report = tick(running, "--offer", f"a={path}")
        assert code == 0
        assert [r["reason"] for r in report["lane_refusals"]] == ["batch_lane_foreign_repository"], report
        assert report["children"][0]["state"] == "pending"
        assert all_refs(running) == before


def test_a_symlinked_lane_is_recorded_by_its_real_path(running, tmp_path):
    lane = make_lane(running, tmp_path, "a")
    link = tmp_path / "link"
    link.symlink_to(lane)
    code, report = tick(running, "--offer", f"a={link}")
    child = report["children"][0]
    assert child["state"] == "enrolled" and child["lane"]["path"] == os.path.realpath(lane)


# -- instructions ---------------------------------------------------------------------------------

def instruct(repo, task, kind="instruction", state="idle", text="please do X"):
    return lanes_json(repo, "instruct", task, "--kind", kind, "--session-state", state, "--message", text)


@pytest.mark.parametrize("task, kind, state, text", [
    ("zz", "instruction", "idle", "zz has no Lane in this batch"),
    ("b", "instruction", "idle", "b has no Lane in this batch"),
    ("a", "correction", "idle", "a has not exhausted its rework budget; send an ordinary instruction instead"),
    ("a", "instruction", "blocked",
     "a's session is blocked on a dialog only the user may answer; send nothing and tell the user"),
    ("a", "instruction", "working", "a's session is working; text goes only to an idle session"),
    ("a", "instruction", "done", "a's session is done; text goes only to an idle session"),
])
def test_instruction_refusals(running, task, kind, state, text):
    provision(running, "a")
    before = all_refs(running)
    code, report = instruct(running, task, kind, state)
    assert code == 1
    assert report["lane_instruction"] == {"task_id": task, "kind": kind, "accepted": False,
                                          "reason": f"batch_lane_instruction_refused: {text}"}
    assert all_refs(running) == before


def test_instruction_refused_when_not_running_in_its_lane(running):
    la = provision(running, "a")
    deliver(la, {"src/a/f": "x"})
    git_lanes(la, "done")
    tick(running)
    code, report = instruct(running, "a")
    assert code == 1
    assert report["lane_instruction"]["reason"] == \
        "batch_lane_instruction_refused: a is integrated, not running in its Lane"


def test_instruction_is_recorded_and_visible_in_the_inbox(running):
    la = provision(running, "a")
    code, report = instruct(running, "a", text="use the new API")
    assert code == 0 and report["lane_instruction"]["accepted"] is True
    item = report["interventions"][-1]
    assert item["text"] == "use the new API" and item["kind"] == "instruction"
    import hashlib
    assert item["text_digest"] == "sha256:" + hashlib.sha256(b"use the new API").hexdigest()
    code, inbox = lanes_json(la, "inbox")
    assert [i["text"] for i in inbox] == ["use the new API"] and inbox[0]["read"] is False
    code, inbox = lanes_json(la, "inbox", "--ack")
    code, inbox = lanes_json(la, "inbox")
    assert inbox[0]["read"] is True


def test_instruct_json_is_validated(running):
    for bad in ('{"task_id": "a", "text": "x", "session_state": "idle", "extra": 1}',
                '{"task_id": "a", "text": "", "session_state": "idle"}',
                '{"task_id": "a", "text": "x", "session_state": "asleep"}',
                '{"task_id": "a", "kind": "shout", "text": "x", "session_state": "idle"}'):
        code, out, err = lanes(running, "tick", "--instruct", bad)
        assert code == 2 and err.startswith("error: invalid --instruct")
    # the instruct command's errors name its own options, not tick's --instruct
    code, out, err = lanes(running, "instruct", "a", "-m", " ", "--session-state", "idle")
    assert code == 2 and err == "error: --message: must be 1 to 4000 characters, not blank\n"


# -- QA failures and corrections -----------------------------------------------------------------------

def test_full_correction_cycle_with_a_disjoint_sibling_moving(repo):
    start(repo, [{"id": "a", "scope": ["src/a"], "check": "python3 -c \"import sys; sys.exit(1)\""},
                 {"id": "b", "scope": ["src/b"]}], "--max-parallel", "2", "--qa-failure-limit", "1")
    la, lb = provision(repo, "a"), provision(repo, "b")

    def fail_once():
        deliver(la, {"src/a/f": str(os.urandom(4))})
        code, out, err = lanes(la, "done")
        assert code == 1
        return tick(repo)[1]

    report = fail_once()
    corr = [h for h in report["handoffs"] if h.get("action") == "correct"]
    assert corr == [{"role": "coordinator", "action": "correct", "task_id": "a", "reason": "QA failure limit reached",
                     "corrections_used": 0, "corrections_left": 2, "lane_path": str(la)}]
    assert "correction" in report["next_action"]
    code, out, err = lanes(la, "done")
    assert code == 1 and "error: correction_due: wait for the coordinator's correction" in err
    code, r = instruct(repo, "a", kind="instruction")
    assert code == 1 and "waits for a design-level correction" in r["lane_instruction"]["reason"]
    code, r = instruct(repo, "a", kind="correction", text="rethink the design")
    assert code == 0
    a = r["children"][0]
    assert a["corrections"] == 1 and a["qa_failures"] == 0 and a["correction_due"] is None

    # the sibling keeps moving meanwhile
    deliver(lb, {"src/b/f": "b"})
    lanes(lb, "done")
    report = fail_once()
    assert states(report)["b"] == "integrated"
    corr = [h for h in report["handoffs"] if h.get("action") == "correct"][0]
    assert (corr["corrections_used"], corr["corrections_left"]) == (1, 1)
    instruct(repo, "a", kind="correction", text="second correction")
    report = fail_once()
    assert states(report)["a"] == "needs_human"
    assert report["children"][0]["reason"] == \
        "batch_correction_limit_reached: QA failure limit reached after 2 coordinator corrections"
    assert report["batch_state"] == "needs_human"


def test_lost_lane_and_run_mismatch(running, tmp_path):
    la = provision(running, "a")
    provision(running, "b")
    git(running, "worktree", "remove", "--force", str(la))
    code, report = tick(running)
    assert report["children"][0]["state"] == "needs_human" and report["children"][0]["reason"] == "batch_lane_lost"
    assert states(report)["c"] == "skipped_blocked"
    assert report["children"][2]["reason"] == "dependency a parked"
    # a lane record of another run: the lane's record says a different run_id
    from git_lanes.gitio import Git
    from git_lanes.core.model import LaneRecord
    from git_lanes.store import LaneStore

    LaneStore(Git(running)).write("demo", LaneRecord(batch_id=report["batch_id"], task_id="b", run_id="another"),
                                  None, "forged")
    code, report = tick(running)
    assert report["children"][1]["reason"] == "batch_lane_run_mismatch"


def test_parallel_mismatch_and_off_branch_guards(running):
    before = all_refs(running)
    code, report = tick(running, "--max-parallel", "2")
    assert code == 1 and report["batch_state"] == "rejected"
    assert report["reason"].startswith("batch_parallel_mismatch:")
    assert report["next_action"] == "Nothing was written; fix the cause, then: git lanes tick demo"
    git(running, "switch", "-q", "main")
    code, out, err = lanes(running, "tick", "demo")
    assert code == 1 and "error: batch_coordinator_off_branch:" in err
    assert all_refs(running) == before
    git(running, "switch", "-q", "imm/demo")
    code, report = tick(running)
    assert code == 0 and report["batch_state"] == "running"


def test_requests_on_a_needs_human_batch_are_rejected(repo):
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    la = provision(repo, "a")
    git_lanes(la, "done", "--give-up", "-m", "no")
    code, report = tick(repo)
    assert report["batch_state"] == "needs_human" and report["reason"] == "batch_lane_stopped: no"
    before = all_refs(repo)
    code, report = tick(repo, "--offer", f"a={la}")
    assert code == 1 and report["reason"].startswith("batch_needs_human:")
    code, report = tick(repo)
    assert code == 0 and report["batch_state"] == "needs_human"
    assert all_refs(repo) == before


def test_budget_max_children(repo):
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}], "--max-children", "1")
    la = provision(repo, "a")
    deliver(la, {"src/a/f": "a"})
    lanes(la, "done")
    code, report = tick(repo)
    assert report["batch_state"] == "budget_stopped"
    assert report["reason"] == "max_children budget exhausted (1)"


def test_the_branch_a_killed_release_left_goes_only_while_it_is_the_lane_commit_and_checked_out_nowhere(repo):
    """`drop_left_branch` (a release killed between the worktree's removal and the branch's): the tick's
    step 4 and `release` both finish it, and neither drops a branch someone moved on or checked out."""
    from git_lanes.domain.session import Session
    from git_lanes.domain.workspace import drop_left_branch

    lane_commit = git(repo, "rev-parse", "HEAD").strip()
    s = Session(cwd=str(repo))
    assert drop_left_branch(s, "imm-lane/demo/gone", lane_commit)                 # nothing left: done
    git(repo, "branch", "imm-lane/demo/left")
    assert drop_left_branch(s, "imm-lane/demo/left", lane_commit, keep=True)      # kept on request
    assert git(repo, "branch", "--list", "imm-lane/demo/left").strip()
    assert drop_left_branch(s, "imm-lane/demo/left", lane_commit)
    assert not git(repo, "branch", "--list", "imm-lane/demo/left").strip()
    git(repo, "branch", "imm-lane/demo/moved")
    git(repo, "commit", "-q", "--allow-empty", "-m", "someone's")
    git(repo, "branch", "-f", "imm-lane/demo/moved", "HEAD")
    assert not drop_left_branch(s, "imm-lane/demo/moved", lane_commit)
    assert not drop_left_branch(s, "imm-lane/demo/moved", lane_commit, keep=True)
    assert git(repo, "rev-parse", "imm-lane/demo/moved").strip() != lane_commit   # not ours: untouched
    git(repo, "worktree", "add", "-q", str(repo.parent / "out"), "-b", "imm-lane/demo/out", lane_commit)
    assert not drop_left_branch(s, "imm-lane/demo/out", lane_commit)              # checked out
    assert git(repo, "branch", "--list", "imm-lane/demo/out").strip()


def test_a_lane_removed_while_a_reader_looks_is_neither_clean_nor_half_removed(repo, tmp_path):
    """`status` reads a lane that a `release` removes at that moment: the folder gone before Git
    could start in it is a lane no longer there, not a failure of the command (exit 128)."""
    import shutil

    from git_lanes.domain.lanehost import LocalLanes
    from git_lanes.domain.session import Session
    from git_lanes.domain.snapshot import half_removed

    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "gone", str(lane))
    s = Session(cwd=str(repo))
    assert LocalLanes(s).clean(str(lane)) is True
    shutil.rmtree(lane)
    assert LocalLanes(s).clean(str(lane)) is False
    assert half_removed(s.git, str(lane)) is False
