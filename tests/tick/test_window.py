"""SPEC §8.9 (v4): a window of stacked candidates — verified at once, each in a scratch worktree of its
own, landed strictly in order, one verified commit each; a failing candidate parks its child and the
ones after it are built again; a window of 1 is §8.6; a kill mid-window lands nothing twice or out of
order; a user's fast-forward drops the window and it is built again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import deliver, lane_path, lanes, lanes_json, write_initiative

PY = sys.executable
TASKS = "abcd"


def provision(repo, task) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


def child(report, task):
    return next(c for c in report["children"] if c["task_id"] == task)


def timed_check(repo: Path, seconds: float = 1.5) -> str:
    """One command for every task (so each candidate runs it once, shared): it logs `cwd start end`
    to a file outside the repository, sleeping `seconds` in a scratch worktree (not in a lane), and
    fails in a scratch worktree whose tree holds `src/b/FAIL`."""
    script = repo.parent / "timed.py"
    log = repo.parent / "timed.log"
    script.write_text(
        "import os, sys, time\n"
        "start = time.time()\n"
        "scratch = os.sep + 'scratch' + os.sep in os.getcwd()\n"
        f"time.sleep({seconds} if scratch else 0)\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    tasks = os.environ.get('GIT_LANES_TASKS') or os.environ.get('GIT_LANES_TASK')\n"
        "    f.write(f\"{os.getcwd()} {start} {time.time()} {tasks}\\n\")\n"
        "sys.exit(1 if scratch and os.path.exists('src/b/FAIL') else 0)\n")
    return f"{PY} {script}"


def scratch_runs(repo: Path) -> list[tuple[str, float, float, str]]:
    log = repo.parent / "timed.log"
    rows = [line.split(" ", 3) for line in log.read_text().splitlines()] if log.exists() else []
    return [(cwd, float(a), float(b), tasks) for cwd, a, b, tasks in rows if f"{os.sep}scratch{os.sep}" in cwd]


def four(repo: Path, *start_args: str, fail_b: bool = False) -> str:
    """Four disjoint tasks, started with `start_args`, each delivered and done in its lane (settled in
    plan order); the batch base."""
    check = timed_check(repo)
    write_initiative(repo, "demo", [{"id": t, "scope": [f"src/{t}"], "check": check} for t in TASKS])
    code, out, err = lanes(repo, "start", "demo", "--yes", "--max-parallel", "4", *start_args)
    assert code == 0, out + err
    base = git(repo, "rev-parse", "HEAD").strip()
    paths = {t: provision(repo, t) for t in TASKS}
    for t in TASKS:
        files = {f"src/{t}/x": t}
        if t == "b" and fail_b:
            files["src/b/FAIL"] = "only a scratch worktree fails on it"
        deliver(paths[t], files)
        code, out, err = lanes(paths[t], "done")
        assert code == 0, out + err
    return base


def landed(repo: Path, base: str) -> list[str]:
    """The `Lanes-Task` of each commit base..imm/demo, oldest first (and the history is linear)."""
    assert git(repo, "rev-list", "--merges", f"{base}..imm/demo") == ""
    return git(repo, "log", "--reverse", "--format=%(trailers:key=Lanes-Task,valueonly)", f"{base}..imm/demo").split()


def batch_record(repo: Path) -> dict:
    return json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:batch.json"))


def test_four_candidates_are_verified_at_once_and_land_in_order_one_commit_each(repo):
    base = four(repo)
    assert batch_record(repo)["verify_window"] == 4   # min(4, max_parallel)
    code, report = lanes_json(repo, "tick")
    assert code == 0, report
    assert [child(report, t)["state"] for t in TASKS] == ["integrated"] * 4
    assert landed(repo, base) == list(TASKS)
    runs = scratch_runs(repo)
    # each candidate once (its own check, shared with the candidates before it), each in a worktree of its own
    assert sorted(r[3] for r in runs) == ["a", "a b", "a b c", "a b c d"]
    assert len({r[0] for r in runs}) == 4
    assert max(r[1] for r in runs) < min(r[2] for r in runs), runs   # all four ran at the same time
    # every landed commit is exactly a verified tree: each candidate's rerun results are its evidence
    for t in TASKS:
        note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, t)["commit"]))
        stacked = {f"{x}:A1" for x in TASKS[:TASKS.index(t) + 1]}
        assert note["task_id"] == t and {r["id"] for r in note["rerun"]} == stacked
    subjects = git(repo, "log", "--first-parent", "--format=%s", "refs/notes/lanes/batch/demo").splitlines()
    assert "candidate a, candidate b, candidate c, candidate d" in subjects
    assert sum(1 for s in subjects if s.startswith("integrated ") or ", integrated " in s) >= 4
    assert "candidates" not in batch_record(repo)


def test_a_failing_candidate_parks_its_child_and_the_later_ones_are_built_again_and_land(repo):
    base = four(repo, fail_b=True)
    code, report = lanes_json(repo, "tick")
    assert code == 0, report
    assert [child(report, t)["state"] for t in TASKS] == ["integrated", "needs_human", "integrated", "integrated"]
    assert child(report, "b")["reason"].startswith("batch_integration_check_failed: b:A1")
    assert landed(repo, base) == ["a", "c", "d"]
    # c and d landed as built again on a's commit, without b's change
    for t in "cd":
        assert git(repo, "ls-tree", "--name-only", "-r", child(report, t)["commit"], "src/b") == ""
        note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, t)["commit"]))
        assert all(r["passed"] for r in note["rerun"]) and "b:A1" not in {r["id"] for r in note["rerun"]}


def test_a_window_of_one_verifies_one_candidate_at_a_time_as_v3(repo):
    base = four(repo, "--verify-window", "1")
    assert batch_record(repo)["verify_window"] == 1
    code, report = lanes_json(repo, "tick")
    assert code == 0 and landed(repo, base) == list(TASKS)
    runs = sorted(scratch_runs(repo), key=lambda r: r[1])
    assert [r[3] for r in runs] == ["a", "a b", "a b c", "a b c d"]
    assert all(earlier[2] <= later[1] for earlier, later in zip(runs, runs[1:]))   # never two at once
    assert len({r[0] for r in runs}) == 1   # one scratch worktree does it all
    subjects = git(repo, "log", "--first-parent", "--format=%s", "refs/notes/lanes/batch/demo").splitlines()
    assert subjects[:5] == ["completed", "integrated d", "integrated c, candidate d", "integrated b, candidate c",
                            "integrated a, candidate b"]


def test_an_old_record_with_one_candidate_reads_as_a_window_of_one():
    from git_lanes.core.model import BatchRecord

    sha = "1" * 40
    lane = {"path": "/l", "branch": "imm-lane/demo/a", "base_head": sha, "run_id": "r", "lane_commit": sha}
    record = BatchRecord.model_validate({
        "batch_id": "demo-20261203T000000Z-abcdef", "slug": "demo", "plan_digest": "d", "base_head": sha,
        "branch": "imm/demo", "coordinator": "/c", "confirmation_time": "t", "max_parallel": 2,
        "budget": {"max_children": 1, "qa_failure_limit": 2}, "created_at": "t", "updated_at": "t",
        "children": [{"task_id": "a", "state": "lane_committed", "lane": lane}],
        "candidate": {"task_id": "a", "commit": sha, "head": sha, "at": "t"}})
    assert record.verify_window is None and [c.task_id for c in record.candidates] == ["a"]
    assert record.candidate.state == "verifying"
    dumped = record.model_dump(mode="json", by_alias=True)
    assert "candidate" not in dumped and dumped["candidates"][0]["task_id"] == "a"


@pytest.mark.parametrize("bad", ["0", "-1", "x"])
def test_a_verify_window_below_one_is_a_usage_error(repo, bad):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    before = git(repo, "for-each-ref")
    code, out, err = lanes(repo, "start", "demo", "--yes", "--verify-window", bad)
    assert code == 2 and "--verify-window" in err and "Traceback" not in err
    git(repo, "config", "lanes.verifyWindow", bad)
    code, out, err = lanes(repo, "start", "demo", "--yes")
    assert code == 2 and "lanes.verifyWindow" in err and err.startswith("error:"), err
    assert git(repo, "for-each-ref") == before


def test_lanes_verify_window_config_is_recorded(repo):
    git(repo, "config", "lanes.verifyWindow", "3")
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    assert batch_record(repo)["verify_window"] == 3


def test_a_tick_killed_while_its_window_is_verified_lands_nothing_twice_or_out_of_order(repo):
    base = four(repo)
    proc = subprocess.Popen(["git", "lanes", "tick"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(batch_record(repo).get("candidates", [])) < 4:
        time.sleep(0.05)
    time.sleep(0.3)   # the checks run
    os.killpg(proc.pid, 9)
    proc.wait()
    status = lanes_json(repo, "status")[1]
    assert [c["task_id"] for c in status["candidates"]] == list(TASKS)
    assert status["candidate"]["task_id"] == "a"
    code, out, err = lanes(repo, "status")
    assert "candidate 1: a verifying" in out and "candidate 4: d" in out
    code, report = lanes_json(repo, "tick")
    assert code == 0, report
    assert [child(report, t)["state"] for t in TASKS] == ["integrated"] * 4
    assert landed(repo, base) == list(TASKS)


def test_a_user_fast_forward_drops_the_window_and_it_is_built_again(repo):
    base = four(repo)
    proc = subprocess.Popen(["git", "lanes", "tick"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(batch_record(repo).get("candidates", [])) < 4:
        time.sleep(0.05)
    first = {c["task_id"]: c["commit"] for c in batch_record(repo)["candidates"]}
    (repo / "USER.md").write_text("the user's own commit\n")
    git(repo, "add", "USER.md")
    git(repo, "commit", "-q", "-m", "user fast-forward")
    user = git(repo, "rev-parse", "HEAD").strip()
    assert proc.wait(timeout=120) == 0
    report = lanes_json(repo, "status")[1]
    assert [child(report, t)["state"] for t in TASKS] == ["integrated"] * 4
    assert landed(repo, user) == list(TASKS)
    assert git(repo, "merge-base", "--is-ancestor", user, "imm/demo") == ""
    assert all(child(report, t)["commit"] != first[t] for t in TASKS)   # every one built again on the new head
    assert report["adopted_heads"] and landed(repo, base) == list(TASKS)


def test_in_process_a_window_of_two_verifies_two_at_once_and_status_shows_it(repo):
    """`run_tick` in this process: the window's candidates are verified in threads of their own at
    once; each holds `locks/verify/<slug>/<task_id>` while its checks run; all land in order."""
    from git_lanes.domain.session import Session
    from git_lanes.store import candidate_lock_path, is_held
    from git_lanes.tick import Request, run_tick, status_report

    base = four(repo, "--verify-window", "2")
    s = Session(cwd=str(repo))
    held: list[set[str]] = []
    done = []

    def watch():
        while not done:
            held.append({t for t in TASKS if is_held(candidate_lock_path(s.git, "demo", t))})
            time.sleep(0.05)

    import threading

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        report = run_tick(s, "demo", Request(actor="tick")).report
    finally:
        done.append(True)
        watcher.join()
    assert [child(report, t)["state"] for t in TASKS] == ["integrated"] * 4
    assert landed(repo, base) == list(TASKS)
    assert {"a", "b"} in held   # both verification locks at once
    runs = scratch_runs(repo)
    first_two = sorted(runs, key=lambda r: r[1])[:2]
    assert {r[3] for r in first_two} == {"a", "a b"} and first_two[1][1] < first_two[0][2]
    at_once = max(sum(1 for r in runs if r[1] <= start < r[2]) for _, start, _, _ in runs)
    assert at_once == 2, runs   # two checks at once, never more
    assert "candidates" not in status_report(s, "demo")


def test_dropping_a_candidate_drops_every_one_stacked_on_it():
    from git_lanes.core import lifecycle
    from git_lanes.core.model import BatchRecord

    sha = "2" * 40
    children = [{"task_id": t, "state": "lane_committed",
                 "lane": {"path": f"/{t}", "branch": f"imm-lane/demo/{t}", "base_head": sha, "run_id": "r",
                          "lane_commit": sha}} for t in TASKS]
    record = BatchRecord.model_validate({
        "batch_id": "demo-20261203T000000Z-abcdef", "slug": "demo", "plan_digest": "d", "base_head": sha,
        "branch": "imm/demo", "coordinator": "/c", "confirmation_time": "t", "max_parallel": 4, "verify_window": 4,
        "budget": {"max_children": 4, "qa_failure_limit": 2}, "created_at": "t", "updated_at": "t",
        "children": children,
        "candidates": [{"task_id": t, "commit": sha, "head": sha, "at": "t"} for t in TASKS]})
    assert lifecycle.drop_candidates(record, "b") == ["c", "d"]
    assert [c.task_id for c in record.candidates] == ["a"]
    lifecycle.park(record, record.child("a"), "batch_integration_check_failed: a:A1 failed on candidate x")
    assert record.candidates == []
