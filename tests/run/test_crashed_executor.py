"""A crashed executor and `done` on an unchanged tree (SPEC §17.1, §17.6 v4), through the installed
`git lanes`: run runs no `done` for an executor that exited non-zero without one, says so with its log and
starts a new session; two crashed sessions give the lane up; `done` on the very tree whose last attempt failed
refuses `nothing_changed` (no attempt, no QA failure) unless something came since, or `--retry`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, write_plan
from helpers import snapshot_state

CRASHER = r'''
import os, pathlib, sys
task = os.environ["GIT_LANES_TASK"]
count = pathlib.Path(os.environ["CRASH_COUNT"])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
out = pathlib.Path("src") / task
out.mkdir(parents=True, exist_ok=True)
(out / "out.txt").write_text("half done\n")     # would pass the check: run must not deliver it
if n <= int(os.environ.get("CRASHES", "1")):
    print("Traceback: the agent fell over", flush=True)
    sys.exit(7)
'''


def plan(repo: Path) -> None:
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "out", exists("src/a/out.txt"))])})


def run(repo: Path, tmp: Path, crashes: int) -> subprocess.CompletedProcess:
    script = tmp / "crasher.py"
    script.write_text(CRASHER)
    env = dict(os.environ, CRASH_COUNT=str(tmp / "count"), CRASHES=str(crashes))
    return subprocess.run(["git", "lanes", "run", "demo", "--executor", f"{sys.executable} {script}", "--yes"],
                          cwd=repo, capture_output=True, text=True, env=env, timeout=240)


def test_a_crashed_session_runs_no_done_and_a_new_session_finishes(repo, tmp_path):
    plan(repo)
    proc = run(repo, tmp_path, crashes=1)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    m = re.search(r"a: session 1 ended \(exit code 7, [\d.]+ s\): crashed: executor exited 7; log (\S+)\n", out)
    assert m, out
    assert "Traceback: the agent fell over" in Path(m.group(1)).read_text()
    assert "a: session 2 started" in out
    # the crashed session's work (which would have passed) was never checked: one attempt, session 2's
    assert len(ok(repo, "show", "a")["lane_record"]["qa_attempts"]) == 1
    assert child_of(ok(repo, "status"), "a")["state"] in ("integrated", "released")


def test_two_crashed_sessions_in_a_row_give_the_lane_up(repo, tmp_path):
    plan(repo)
    proc = run(repo, tmp_path, crashes=5)
    assert proc.returncode == 1
    assert proc.stdout.count("crashed: executor exited 7") == 2
    c = child_of(ok(repo, "status"), "a")
    assert c["state"] == "needs_human"
    assert c["reason"].startswith("batch_lane_stopped: 2 executor sessions in a row")
    assert (tmp_path / "count").read_text() == "2"


def test_done_on_the_tree_whose_last_attempt_failed_refuses_nothing_changed(repo):
    plan(repo)
    start(repo, "demo", "--qa-failure-limit", "3")
    lane = provision(repo, "a")
    first = done(lane, {"src/a/wrong.txt": "x\n"})
    assert first["passed"] is False
    ok(repo, "tick")
    before = snapshot_state(repo)
    code, doc, err = cli(lane, "done")
    assert code == 1 and doc["code"] == "nothing_changed"
    assert err.strip() == f"error: nothing_changed: the last attempt failed on tree {first['tree']}"
    assert snapshot_state(repo) == before
    assert git(lane, "status", "--porcelain", "-uall") == "?? src/a/wrong.txt\n"
    c = child_of(ok(repo, "tick"), "a")
    assert c["qa_failures"] == 1 and c["qa_attempts_seen"] == 1
    # --retry runs the checks again (a flaky check): a second failed attempt
    code, doc, err = cli(lane, "done", "--retry")
    assert code == 1 and doc["passed"] is False and doc["tree"] == first["tree"]
    assert child_of(ok(repo, "tick"), "a")["qa_failures"] == 2
    # an instruction newer than the failed attempt: the same tree may be checked again
    ok(repo, "instruct", "a", "--session-state", "idle", "-m", "the check reads a file; try again")
    code, doc, err = cli(lane, "done")
    assert code == 1 and doc["passed"] is False, err
    # a changed tree is always checked
    code, doc, err = cli(lane, "done")
    assert code == 1 and "nothing_changed" in err
    (lane / "src" / "a" / "out.txt").write_text("ok\n")
    code, doc, err = cli(lane, "done")
    assert code == 0 and doc["passed"] is True


def test_the_reason_code_is_listed_and_in_the_man_page():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from git_lanes.core.reasons import meaning

    assert meaning("nothing_changed")
    man = (Path(__file__).resolve().parents[2] / "man" / "git-lanes.1").read_text()
    assert "nothing_changed" in man
