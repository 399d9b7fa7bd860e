"""Integration (issue 4): lane commit, candidate, identity and checks gate, lineage, crash adoption, completion."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import (all_refs, check_file, deliver, forge_passed_attempt, lane_path, lanes, lanes_json,
                     write_initiative)


def start(repo, tasks, *extra, final_checks=None):
    write_initiative(repo, "demo", tasks, final_checks=final_checks)
    code, report = lanes_json(repo, "start", "demo", "--yes", *extra)
    assert code == 0, report
    return report


def provision(repo, task) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


def tick(repo, *args):
    return lanes_json(repo, "tick", *args)[1]


def child(report, task):
    return next(c for c in report["children"] if c["task_id"] == task)


def finish(lane: Path, files: dict[str, str]) -> None:
    deliver(lane, files)
    code, out, err = lanes(lane, "done")
    assert code == 0, out + err


SIX = [
    {"id": "core", "scope": ["src/core"], "check": check_file("src/core/core.py")},
    {"id": "api", "scope": ["src/api"], "blocked_by": ["core"],
     "check": "python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('src/core/core.py').exists() and "
              "pathlib.Path('src/api/api.py').exists() else 1)\""},
    {"id": "cli", "scope": ["src/cli"], "blocked_by": ["api"], "check": check_file("src/cli/cli.py")},
    {"id": "docs", "scope": ["docs"], "check": check_file("docs/index.md")},
    {"id": "docs-api", "scope": ["docs/api.md"], "check": check_file("docs/api.md")},
    {"id": "tests", "scope": ["tests/t.py"], "check": check_file("tests/t.py")},
]
FILES = {"core": "src/core/core.py", "api": "src/api/api.py", "cli": "src/cli/cli.py", "docs": "docs/index.md",
         "docs-api": "docs/api.md", "tests": "tests/t.py"}


def test_six_tasks_run_to_completed_linear_one_green_commit_each(repo):
    report = start(repo, SIX, "--max-parallel", "3", final_checks=["python3 -c pass"])
    base = git(repo, "rev-parse", "HEAD").strip()
    seen = set()
    for _ in range(20):
        todo = [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"]
        for task in todo:
            lane = provision(repo, task)
            finish(lane, {FILES[task]: f"# {task}\n"})
            seen.add(task)
        report = tick(repo)
        for h in report["handoffs"]:
            if h.get("action") == "release":
                assert lanes(repo, "release", h["task_id"])[0] == 0
        if report["batch_state"] != "running":
            break
    assert report["batch_state"] == "completed", report["reason"]
    assert report["final_verification"]["passed"] is True
    assert seen == set(FILES)
    commits = git(repo, "rev-list", "--reverse", f"{base}..imm/demo").split()
    assert len(commits) == 6 and commits == report["commits"]
    assert git(repo, "rev-list", "--merges", f"{base}..imm/demo") == ""
    batch_id = report["batch_id"]
    for c in commits:
        body = git(repo, "log", "-1", "--format=%B", c)
        task = body.split("(", 1)[1].split(")", 1)[0]
        assert body.startswith(f"imm({task}): Make {task}\n\n")
        assert body.strip().endswith(f"Lanes-Batch: {batch_id}\nLanes-Task: {task}")
        note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", c))
        assert note["task_id"] == task and note["batch_id"] == batch_id and note["rerun"]
        # every commit green: re-run the task's checks at its own commit
        code, out, err = lanes(repo, "verify", "--commit", c)
        assert code == 0, out + err
    shown = git(repo, "log", "-1", "--notes=lanes/evidence", "--format=%N", "imm/demo")
    assert f'"batch_id": "{batch_id}"' in shown   # `git log --notes=lanes/evidence` shows the evidence
    # once every lane is gone, the integrated children read released
    code, status = lanes_json(repo, "status")
    assert {c["state"] for c in status["children"]} == {"released"}


@pytest.fixture
def two(repo):
    """Two disjoint tasks, two lanes at once, one candidate at a time (SPEC §8.6; wider: test_window.py)."""
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}], "--max-parallel", "2",
          "--verify-window", "1")
    return repo


def test_lane_commit_is_deterministic_and_keeps_executor_commits(two):
    la = provision(two, "a")
    deliver(la, {"src/a/1.txt": "one\n"})
    git(la, "add", "-A")
    git(la, "commit", "-q", "-m", "executor wip", "--author", "Eve Executor <eve@example.com>")
    deliver(la, {"src/a/2.txt": "two\n"})
    executor_commit = git(la, "rev-parse", "HEAD").strip()
    assert lanes(la, "done")[0] == 0
    report = tick(two)
    a = child(report, "a")
    assert a["state"] == "integrated"
    assert a["lane"]["executor_commits"] == [executor_commit]
    lane_commit = a["lane"]["lane_commit"]
    assert git(two, "rev-parse", "imm-lane/demo/a").strip() == lane_commit
    assert git(two, "log", "-1", "--format=%an <%ae>|%cn <%ce>", lane_commit).strip() == \
        "Eve Executor <eve@example.com>|Cody Committer <cody@example.com>"
    assert git(la, "status", "--porcelain") == ""  # the lane is left clean
    # the executor commit stays reachable from the record
    assert executor_commit in git(two, "rev-list", "refs/notes/lanes/batch/demo")
    assert git(two, "rev-parse", f"{lane_commit}^").strip() == a["lane"]["base_head"]


def test_out_of_scope_change_parks_with_the_paths(two):
    la = provision(two, "a")
    # (v3) `done` fails it first, with the gate's own rule: a QA failure the executor can fix
    deliver(la, {"src/a/ok.txt": "ok", "src/b/intruder.txt": "x", "README": "changed\n"})
    code, out, err = lanes(la, "done")
    assert code == 1 and "error: qa_failed: delivery_outside_scope: README, src/b/intruder.txt" in err
    assert child(tick(two), "a")["qa_failures"] == 1
    # a lane that records a pass anyway is still parked at the gate
    forge_passed_attempt(la)
    report = tick(two)
    a = child(report, "a")
    assert a["state"] == "needs_human"
    assert a["reason"] == "dirty_outside_scope: README, src/b/intruder.txt"


def test_own_intent_edit_without_approval_is_refused(two):
    la = provision(two, "a")
    intent = la / ".lanes" / "demo" / "a.toml"
    intent.write_text(intent.read_text().replace("Make a", "Make something else"))
    deliver(la, {"src/a/ok.txt": "ok"})
    code, out, err = lanes(la, "done")   # (v3) refused by `done` before any check ...
    assert code == 1 and "error: qa_failed: delivery_outside_scope: .lanes/demo/a.toml" in err
    forge_passed_attempt(la)              # ... and by the gate when a lane records a pass anyway
    report = tick(two)
    assert child(report, "a")["reason"] == "dirty_outside_scope: .lanes/demo/a.toml"


def test_intent_edit_inside_scope_fails_closed_at_the_gate(repo):
    start(repo, [{"id": "a", "scope": ["src/a", ".lanes/demo"]}])
    la = provision(repo, "a")
    intent = la / ".lanes" / "demo" / "a.toml"
    intent.write_text(intent.read_text().replace("Make a", "Make something else"))
    finish(la, {"src/a/ok.txt": "ok"})
    report = tick(repo)
    a = child(report, "a")
    assert a["state"] == "needs_human" and a["reason"].startswith("plan_changed: a: intent content changed")
    assert git(repo, "rev-parse", "imm/demo").strip() == report["children"][0]["lane"]["base_head"]
    # a resume would park it again (SPEC §7 step 1): the way on that next_action names is retire and start
    way_on = ("git lanes retire demo --yes, then git lanes release --stale demo, then git lanes start demo --yes")
    assert f"git lanes show a --slug demo, then {way_on}" in report["next_action"]
    assert "git lanes resume demo" not in report["next_action"]
    # pasted as it is, in order, it works
    for command in way_on.split(", then "):
        code, out, err = lanes(repo, *shlex.split(command)[2:])
        assert code == 0, (command, out, err)


def test_a_check_that_fails_only_on_the_candidate(repo):
    no_b = "python3 -c \"import pathlib,sys; sys.exit(1 if pathlib.Path('src/b/b.txt').exists() else 0)\""
    start(repo, [{"id": "a", "scope": ["src/a"], "check": no_b}, {"id": "b", "scope": ["src/b"]}],
          "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(lb, {"src/b/b.txt": "b"})
    tick(repo)
    head_before = git(repo, "rev-parse", "imm/demo").strip()
    finish(la, {"src/a/a.txt": "a"})  # passes in its lane: b is not there
    report = tick(repo)
    a = child(report, "a")
    assert a["state"] == "needs_human"
    assert a["reason"].startswith("batch_integration_check_failed: a:A1 failed on candidate ")
    assert git(repo, "rev-parse", "imm/demo").strip() == head_before  # unmoved
    assert os.path.isdir(la)  # lane kept


def test_content_conflict_and_empty_candidate_after_user_commits(repo):
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}], "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    # the user commits on the batch branch (a fast-forward the tick adopts)
    deliver(repo, {"src/a/f.txt": "user version\n", "src/b/g.txt": "same\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "user work")
    user = git(repo, "rev-parse", "HEAD").strip()
    finish(la, {"src/a/f.txt": "lane version\n"})
    finish(lb, {"src/b/g.txt": "same\n"})
    report = tick(repo)
    assert {"from": report["children"][0]["lane"]["base_head"], "to": user} in report["adopted_heads"]
    a, b = child(report, "a"), child(report, "b")
    assert a["reason"].startswith("batch_integration_conflict: lane commit ")
    assert "does not apply cleanly onto batch head" in a["reason"]
    assert b["reason"].startswith("batch_integration_conflict: candidate ")
    assert "does not carry the lane commit" in b["reason"]
    assert git(repo, "rev-parse", "imm/demo").strip() == user


def test_reset_behind_a_recorded_commit_fails_the_batch(two):
    la, _ = provision(two, "a"), provision(two, "b")
    finish(la, {"src/a/x": "x"})
    report = tick(two)
    base = child(report, "a")["lane"]["base_head"]
    git(two, "reset", "-q", "--hard", base)
    report = tick(two)
    assert report["batch_state"] == "failed"
    assert report["reason"].startswith("batch_head_lineage_broken: ")
    assert child(report, "b")["state"] == "needs_human"   # every in-flight child parked first


@pytest.mark.parametrize("rewrite", ["orphan", "amend"])
def test_a_batch_branch_rewritten_before_any_integration_fails_the_batch(two, rewrite):
    """Nothing integrated yet: the expected head is the batch base, and a branch that no longer
    descends from it (an unrelated history, an amended base) is broken lineage, not adopted."""
    la = provision(two, "a")
    base = child(tick(two), "a")["lane"]["base_head"]
    if rewrite == "orphan":
        git(two, "checkout", "-q", "--orphan", "elsewhere")
        git(two, "commit", "-q", "-m", "unrelated")
        other = git(two, "rev-parse", "HEAD").strip()
        git(two, "checkout", "-q", "imm/demo")
        git(two, "reset", "-q", "--hard", other)
    else:
        git(two, "commit", "-q", "--amend", "-m", "the base, amended")
    assert git(two, "rev-parse", "HEAD").strip() != base
    finish(la, {"src/a/x": "x"})
    report = tick(two)
    assert report["batch_state"] == "failed", report
    assert report["reason"].startswith("batch_head_lineage_broken: ")
    assert not report.get("adopted_heads")
    assert child(report, "a")["state"] == "needs_human"


def test_a_sibling_s_new_file_in_a_folder_another_task_emptied_lands_where_it_was_made(repo):
    """Directory-rename detection (`merge.directoryRenames`, on by default in merge-ort) would move b's
    new src/x/new.txt to src/y/ after a emptied src/x into it: no longer b's change. Landings turn it off."""
    (repo / "src" / "x").mkdir(parents=True)
    (repo / "src" / "x" / "old.txt").write_text("old\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "src/x")
    git(repo, "config", "merge.directoryRenames", "true")
    start(repo, [{"id": "a", "scope": ["src/x/old.txt", "src/y"], "check": "test -f src/y/old.txt"},
                 {"id": "b", "scope": ["src/x/new.txt"], "check": "test -f src/x/new.txt"}], "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    (la / "src" / "y").mkdir()
    os.rename(la / "src" / "x" / "old.txt", la / "src" / "y" / "old.txt")
    finish(la, {})
    assert child(tick(repo), "a")["state"] == "integrated"
    finish(lb, {"src/x/new.txt": "new\n"})
    report = tick(repo)
    assert child(report, "b")["state"] == "integrated", child(report, "b")
    assert git(repo, "ls-tree", "-r", "--name-only", "imm/demo", "src").split() == ["src/x/new.txt",
                                                                                   "src/y/old.txt"]


def test_submodule_recurse_in_the_user_s_configuration_does_not_stop_a_landing(repo, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    (sub / "f").write_text("f\n")
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "sub")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib/sub")
    git(repo, "commit", "-q", "-m", "a submodule")
    git(repo, "config", "submodule.recurse", "true")
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}], "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(la, {"src/a/x": "x\n"})
    assert child(tick(repo), "a")["state"] == "integrated"
    finish(lb, {"src/b/x": "x\n"})   # the scratch worktree moves on: a checkout that would recurse
    report = tick(repo)
    assert child(report, "b")["state"] == "integrated", report


def test_a_commit_claiming_the_batch_without_a_record_fails_it(two):
    report = tick(two)
    batch = report["batch_id"]
    git(two, "commit", "-q", "--allow-empty", "-m", f"imm(a): forged\n\nLanes-Batch: {batch}\nLanes-Task: a")
    report = tick(two)
    assert report["batch_state"] == "failed" and "claims this batch without a record" in report["reason"]


def test_coordinator_switched_away_and_back(two):
    la = provision(two, "a")
    finish(la, {"src/a/x": "x"})
    git(two, "switch", "-q", "main")
    before = all_refs(two)
    code, report = lanes_json(two, "tick", "demo")
    assert code == 1 and report["reason"].startswith("batch_coordinator_off_branch:")
    assert all_refs(two) == before
    git(two, "switch", "-q", "imm/demo")
    assert child(tick(two), "a")["state"] == "integrated"


@pytest.mark.parametrize("point", ["fast-forwarded", "lane-commit-recorded"])
def test_a_kill_mid_integration_is_adopted_without_a_second_commit(two, point):
    la = provision(two, "a")
    lb = provision(two, "b")
    finish(lb, {"src/b/x": "b"})
    tick(two)
    finish(la, {"src/a/x": "a"})
    env = dict(os.environ, GIT_LANES_CRASH_AT=point)
    proc = subprocess.run(["git", "lanes", "tick", "--json"], cwd=two, env=env, capture_output=True, text=True)
    assert proc.returncode == 137 and "signal 9" in proc.stderr  # git reports its killed subcommand
    head_after_crash = git(two, "rev-parse", "imm/demo").strip()
    report = tick(two)
    a = child(report, "a")
    assert a["state"] == "integrated"
    if point == "fast-forwarded":
        assert a["commit"] == head_after_crash  # the same candidate id: adopted, never committed twice
    assert len(report["commits"]) == 2
    assert git(two, "rev-list", "--count", f"{a['lane']['base_head']}..imm/demo").strip() in ("1", "2")
    assert git(two, "log", "--format=%s", "imm/demo").splitlines()[:2] == ["imm(a): Make a", "imm(b): Make b"]
    assert len(git(two, "log", "--format=%s", "imm/demo").splitlines()) == 4  # + initiative + initial


def test_final_verification_failure_is_reported_and_never_rolled_back(repo):
    start(repo, [{"id": "a", "scope": ["src/a"]}], final_checks=["python3 -c pass", "false"])
    la = provision(repo, "a")
    finish(la, {"src/a/x": "x"})
    report = tick(repo)
    assert report["batch_state"] == "completed"
    assert report["final_verification"]["passed"] is False
    assert report["reason"] == ("all enrollable children integrated; final verification did not pass: "
                                "false")
    assert child(report, "a")["state"] == "integrated"
    # a terminal record: ticks only report
    report = tick(repo)
    assert report["reason"] == "terminal state already reached: completed"
    # verify re-runs the final checks and writes nothing
    before = all_refs(repo)
    code, doc = lanes_json(repo, "verify")
    assert code == 1 and doc["passed"] is False and all_refs(repo) == before


def test_checks_run_without_the_coordinators_git_environment(repo):
    probe = ("python3 -c \"import os,sys; sys.exit(1 if os.environ.get('GIT_DIR') or "
             "os.environ.get('GIT_LANES_TASK') != 'a' else 0)\"")
    start(repo, [{"id": "a", "scope": ["src/a"], "check": probe}])
    la = provision(repo, "a")
    deliver(la, {"src/a/x": "x"})
    env = dict(os.environ, GIT_DIR=str(repo / ".git"), GIT_WORK_TREE=str(la))
    proc = subprocess.run(["git", "lanes", "done"], cwd=la, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert child(tick(repo), "a")["state"] == "integrated"


def test_a_lane_branch_moves_in_its_records_write_and_a_landing_shares_one_with_the_next_candidate(two):
    """Step 8's record write moves the lane branch in the same ref transaction (the branch's reflog
    names that state commit), and landing `a` records `b`'s candidate in the same state commit: a
    tick that integrates two settled lanes writes no state commit per step more than it needs
    (a window of one candidate, SPEC §8.6; tests/tick/test_window.py has the wider window's writes)."""
    la, lb = provision(two, "a"), provision(two, "b")
    finish(la, {"src/a/x": "a"})
    finish(lb, {"src/b/x": "b"})
    before = int(git(two, "rev-list", "--count", "--first-parent", "refs/notes/lanes/batch/demo"))
    report = tick(two)
    assert [child(report, t)["state"] for t in "ab"] == ["integrated", "integrated"]
    subjects = git(two, "log", "--first-parent", "--format=%s", "refs/notes/lanes/batch/demo").splitlines()
    written = subjects[:len(subjects) - before]
    settled = next(s for s in written if "lane commit a" in s)
    assert git(two, "reflog", "show", "--format=%gs", "-1", "imm-lane/demo/a").strip() == "git-lanes: " + settled
    assert written == ["completed", "integrated b", "integrated a, candidate b", "candidate a",
                       "settled a, settled b, lane commit a, lane commit b"]


def test_a_landing_is_recorded_on_its_own_when_choosing_the_next_candidate_fails(two, monkeypatch):
    """Landing `a` writes its integration with `b`'s candidate; should building that candidate fail
    (an error, not a park), `a` is still recorded integrated, alone, and the next tick lands `b`."""
    from git_lanes.core.errors import LanesError
    from git_lanes.tick import land

    la, lb = provision(two, "a"), provision(two, "b")
    finish(la, {"src/a/x": "a"})
    finish(lb, {"src/b/x": "b"})
    real = land.build

    def build(t, c):
        if c.task_id == "b":
            raise LanesError("cannot build b's candidate now")
        return real(t, c)

    monkeypatch.setattr(land, "build", build)
    code, out, err = lanes(two, "tick")
    assert code != 0 and "cannot build b's candidate now" in err
    subjects = git(two, "log", "--first-parent", "--format=%s", "-2", "refs/notes/lanes/batch/demo").splitlines()
    assert subjects == ["integrated a", "candidate a"]
    record = json.loads(lanes(two, "status", "--json")[1])
    assert [child(record, t)["state"] for t in "ab"] == ["integrated", "lane_committed"]
    monkeypatch.setattr(land, "build", real)
    report = tick(two)
    assert [child(report, t)["state"] for t in "ab"] == ["integrated", "integrated"]


def test_a_lane_holding_only_files_lanes_exclude_ignores_is_released(repo):
    """Git counts a check's `__pycache__/` as untracked files and would keep the worktree; git-lanes
    excludes it (`lanes.exclude`), so the lane holds no work and its release goes through (SPEC §6, §13)."""
    git(repo, "config", "--add", "lanes.exclude", "__pycache__/")
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    lane = provision(repo, "a")
    (lane / "src" / "a" / "__pycache__").mkdir(parents=True)
    (lane / "src" / "a" / "__pycache__" / "m.pyc").write_bytes(b"\x00cache")
    finish(lane, {"src/a/m.py": "x = 1\n"})
    report = tick(repo)
    assert child(report, "a")["state"] == "integrated"
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "release"] == ["a"]
    code, out, err = lanes(repo, "release", "a")
    assert code == 0, err
    assert not lane.exists() and git(repo, "for-each-ref", "refs/heads/imm-lane/") == ""
    assert child(tick(repo), "a")["state"] == "released"


def ignored_where_the_lane_tracks(repo, ours: str, theirs: str) -> None:
    """Task a delivers a tracked `src/a/local.cfg` (`theirs`) where the coordinator has one its Git ignores."""
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    with open(repo / ".git" / "info" / "exclude", "a") as fh:
        fh.write("local.cfg\n")
    (repo / "src" / "a").mkdir(parents=True)
    (repo / "src" / "a" / "local.cfg").write_text(ours)
    lane = provision(repo, "a")
    (lane / "src" / "a").mkdir(parents=True, exist_ok=True)
    (lane / "src" / "a" / "local.cfg").write_text(theirs)
    git(lane, "add", "-f", "src/a/local.cfg")
    git(lane, "commit", "-q", "-m", "add")
    assert lanes(lane, "done")[0] == 0


def test_a_file_the_coordinator_ignores_is_never_overwritten_by_a_landing(repo):
    """`git merge` takes ignored files for disposable; git-lanes does not: a landing that would put a
    tracked file where the coordinator has an ignored one of other content is refused, nothing touched."""
    ignored_where_the_lane_tracks(repo, "USER SECRET\n", "lane\n")
    code, report = lanes_json(repo, "tick")
    assert code == 1 and report["batch_state"] == "rejected"
    assert report["reason"].startswith("working_tree_unstaged: src/a/local.cfg: a file Git ignores")
    assert (repo / "src" / "a" / "local.cfg").read_text() == "USER SECRET\n"
    # moved away, the next tick lands it
    (repo / "src" / "a" / "local.cfg").rename(repo / "local.cfg")   # still ignored, out of the way
    report = tick(repo)
    assert child(report, "a")["state"] == "integrated", (report["reason"], report.get("candidate"), report["batch_state"])
    assert (repo / "src" / "a" / "local.cfg").read_text() == "lane\n"


def test_an_ignored_file_that_already_is_the_candidates_version_does_not_stop_the_landing(repo):
    ignored_where_the_lane_tracks(repo, "same\n", "same\n")
    assert child(tick(repo), "a")["state"] == "integrated"
    assert (repo / "src" / "a" / "local.cfg").read_text() == "same\n"


def test_a_branch_kept_on_release_stays_kept(repo):
    """`release --keep-branch` keeps the lane's branch; nothing git-lanes does later deletes it: a second
    `release` of the released lane is refused (naming the kept branch), and the next tick leaves it."""
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    lane = provision(repo, "a")
    finish(lane, {"src/a/m.py": "x = 1\n"})
    assert child(tick(repo), "a")["state"] == "integrated"
    code, out, err = lanes(repo, "release", "a", "--keep-branch")
    assert code == 0, err
    kept = git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip()
    report = tick(repo)
    assert child(report, "a")["state"] == "released"
    assert child(report, "a")["lane"]["branch_kept"] is True
    code, out, err = lanes(repo, "release", "a")
    assert code == 1 and "batch_lane_release_refused" in err and "imm-lane/demo/a" in err, err
    assert git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip() == kept
    code, out, err = lanes(repo, "release", "a", "--keep-branch")
    assert code == 1 and git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip() == kept


def test_changes_behind_assume_unchanged_or_skip_worktree_marks_are_delivered_and_never_released_away(repo):
    """`git status` and `git add -A` look past index entries marked assume-unchanged or skip-worktree;
    a delivery is what the files hold (SPEC §5), so `done` delivers them, and a lane whose marked files
    still differ from its commit is not clean: no release handoff, nothing lost."""
    (repo / "src" / "a").mkdir(parents=True)
    for name in ("x", "y", "z"):
        (repo / "src" / "a" / name).write_text(f"{name} 0\n")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "three files")
    start(repo, [{"id": "a", "scope": ["src/a"], "check": check_file("src/a/new")}])
    lane = provision(repo, "a")
    git(lane, "update-index", "--assume-unchanged", "src/a/x")
    git(lane, "update-index", "--skip-worktree", "src/a/y")
    (lane / "src" / "a" / "x").write_text("x 1\n")
    (lane / "src" / "a" / "y").write_text("y 1\n")
    assert git(lane, "status", "--porcelain") == ""   # Git itself sees nothing
    finish(lane, {"src/a/new": "new\n"})
    report = tick(repo)
    assert child(report, "a")["state"] == "integrated"
    commit = child(report, "a")["commit"]
    assert git(repo, "show", f"{commit}:src/a/x") == "x 1\n" and git(repo, "show", f"{commit}:src/a/y") == "y 1\n"
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "release"] == ["a"]
    # a change made after the delivery, behind the mark: the lane holds work, so it is not released
    git(lane, "update-index", "--assume-unchanged", "src/a/z")
    (lane / "src" / "a" / "z").write_text("z 1, after done\n")
    code, out, err = lanes(repo, "release", "a")
    assert code == 1 and "marked assume-unchanged or skip-worktree" in err, err
    assert (lane / "src" / "a" / "z").read_text() == "z 1, after done\n"
    # (a fresh process asks Git again: no release handoff for it)
    proc = subprocess.run(["git", "lanes", "status", "--json"], cwd=repo, capture_output=True, text=True)
    assert [h for h in json.loads(proc.stdout)["handoffs"] if h.get("action") == "release"] == [], proc.stderr
    (lane / "src" / "a" / "z").write_text("z 0\n")   # back as committed: nothing behind the mark now
    proc = subprocess.run(["git", "lanes", "status", "--json"], cwd=repo, capture_output=True, text=True)
    assert [h["task_id"] for h in json.loads(proc.stdout)["handoffs"] if h.get("action") == "release"] == ["a"]
    assert lanes(repo, "release", "a")[0] == 0 and not lane.exists()


def test_a_skip_worktree_entry_whose_file_is_absent_is_no_deletion(repo):
    """A sparse checkout's skip-worktree entries have no file: their absence is not the task's work."""
    (repo / "src" / "a").mkdir(parents=True)
    (repo / "src" / "a" / "sparse").write_text("kept\n")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "one file")
    start(repo, [{"id": "a", "scope": ["src/a"], "check": check_file("src/a/new")}])
    lane = provision(repo, "a")
    git(lane, "update-index", "--skip-worktree", "src/a/sparse")
    (lane / "src" / "a" / "sparse").unlink()
    finish(lane, {"src/a/new": "new\n"})
    commit = child(tick(repo), "a")["commit"]
    assert git(repo, "show", f"{commit}:src/a/sparse") == "kept\n"


def test_a_lane_committed_past_its_integrated_lane_commit_is_not_released(repo):
    """Commits an executor made after its task integrated are work that never was: the lane gets no
    release handoff, `release` refuses it, and `release --stale` (once the batch ends) keeps the tip
    reachable from the record (SPEC §0, §8.5)."""
    start(repo, [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    lane = provision(repo, "a")
    finish(lane, {"src/a/f": "1\n"})
    assert child(tick(repo), "a")["state"] == "integrated"
    (lane / "src" / "a" / "g").write_text("more\n")
    git(lane, "add", "-A")
    git(lane, "commit", "-q", "-m", "after the integration")
    tip = git(lane, "rev-parse", "HEAD").strip()
    proc = subprocess.run(["git", "lanes", "status", "--json"], cwd=repo, capture_output=True, text=True)
    assert [h for h in json.loads(proc.stdout)["handoffs"] if h.get("action") == "release"] == [], proc.stderr
    code, out, err = lanes(repo, "release", "a")
    assert code == 1 and "batch_lane_release_refused" in err, err
    assert git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip() == tip
    assert lanes(repo, "retire", "demo", "--yes")[0] == 0
    assert lanes(repo, "release", "--stale", "demo")[0] == 0
    assert subprocess.run(["git", "merge-base", "--is-ancestor", tip, "refs/notes/lanes/batch/demo"],
                          cwd=repo).returncode == 0   # kept reachable from the record


@pytest.mark.parametrize("meanwhile", ["deleted", "moved"])
def test_a_lane_branch_that_another_release_deleted_or_someone_moved_meanwhile(repo, monkeypatch, meanwhile):
    """Two releases of one lane race (two `work` loops of a clone): the loser's compare-and-swap finds the
    branch gone, the same end, not an internal error. A branch moved meanwhile is someone's: kept, refused."""
    from git_lanes.gitio.refs import Refs

    start(repo, [{"id": "a", "scope": ["src/a"]}])
    lane = provision(repo, "a")
    finish(lane, {"src/a/f": "1\n"})
    assert child(tick(repo), "a")["state"] == "integrated"
    real = Refs.delete
    base = git(repo, "rev-parse", "main").strip()

    def racing(self, ref, old, reason):
        if ref == "refs/heads/imm-lane/demo/a":
            if meanwhile == "deleted":
                git(repo, "update-ref", "-d", ref)
            else:
                git(repo, "update-ref", ref, base)
        return real(self, ref, old, reason)

    monkeypatch.setattr(Refs, "delete", racing)
    code, out, err = lanes(repo, "release", "a")
    if meanwhile == "deleted":
        assert code == 0 and not lane.exists(), err
        assert child(tick(repo), "a")["state"] == "released"
    else:
        assert code == 1 and "batch_lane_release_refused" in err and "the branch is kept" in err, err
        assert git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip() == base


def test_a_coordinator_whose_git_dir_is_elsewhere_lands_its_batch(tmp_path):
    """A submodule's checkout or `git init --separate-git-dir`: `.git` is a file and Git lists the main
    worktree by its git dir; the coordinator is still found where it is."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", f"--separate-git-dir={tmp_path / 'repo.git'}", str(repo))
    (repo / "README").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    start(repo, [{"id": "a", "scope": ["src/a"]}])
    finish(provision(repo, "a"), {"src/a/x": "x\n"})
    report = tick(repo)
    assert report["batch_state"] == "completed" and child(report, "a")["state"] == "integrated", report
    assert git(repo, "status", "--porcelain") == "" and (repo / "src" / "a" / "x").read_text() == "x\n"
