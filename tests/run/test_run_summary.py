"""What `git lanes run` says (SPEC §13, §17.1), end to end through real processes: why a session failed,
session time with its `done`, the summary's failed attempts (and no empty section), the next step,
releases on every way out, lanes.logDir, causal progress, each failure quoted once, a failing setup, a
restarted lane, and where a continued batch is now."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from pathlib import Path

import pytest

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, write_plan
from helpers import write_initiative
from test_run import EXECUTOR, make_repo, run, run_cmd, status

CHECK = ("python3 -c \"import pathlib,sys,time; time.sleep(0.6); t=pathlib.Path('src/{t}.txt'); "
         "ok=t.exists() and t.read_text().startswith('right'); print('checking {t}'); "
         "print('ok' if ok else 'expected right, got ' + (t.read_text().strip() if t.exists() else 'nothing')); "
         "sys.exit(0 if ok else 1)\"")


def executor(tmp_path: Path) -> str:
    script = tmp_path / "executor.py"
    script.write_text(EXECUTOR)
    return f"{sys.executable} {script}"


def repo_with(root: Path, tasks: list[str], blocked: dict[str, list[str]] | None = None) -> Path:
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("run tests\n")
    write_initiative(root, "drv", [{"id": t, "scope": [f"src/{t}.txt"], "check": CHECK.format(t=t),
                                    "blocked_by": (blocked or {}).get(t, [])} for t in tasks])
    return root


def table(stdout: str) -> dict[str, list[str]]:
    """The summary table: {task: [state, sessions, failed attempts, corrections, commit]}."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("task ") and "failed attempts" in line)
    assert re.split(r"\s{2,}", lines[head].strip()) == ["task", "state", "sessions", "failed attempts",
                                                         "corrections", "commit"]
    rows = {}
    for line in lines[head + 1:]:
        if not line.strip():
            break
        cells = line.split()
        rows[cells[0]] = cells[1:]
    return rows


def test_a_failure_and_its_correction_as_a_user_sees_them(tmp_path, hermetic):
    root = repo_with(tmp_path / "repo", ["solo", "other"])
    logs = tmp_path / "logs"
    git(root, "config", "lanes.logDir", str(logs))
    git(root, "config", "lanes.keepScratch", "false")
    prompts = tmp_path / "prompts"
    proc = run(root, "drv", executor(tmp_path), "--qa-failure-limit", "1", "--max-parallel", "2",
               env={"EXEC_FAIL_FIRST": "solo", "EXEC_PROMPTS": str(prompts)})
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # the session line says why it failed: the check id, its exit status, its last output line
    assert re.search(r"solo: session 1 ended \(exit code 0, [\d.]+ s\): done: failed A1 \(exit 1\): "
                     r"expected right, got wrong\n", out), out
    # its time covers the executor (0.1 s) and its done (a 0.6 s check)
    took = float(re.search(r"solo: session 1 ended \(exit code 0, ([\d.]+) s\)", out).group(1))
    assert took >= 0.6
    # causal order: a session ends before its task integrates
    for task, last in (("solo", 2), ("other", 1)):
        assert out.index(f"{task}: session {last} ended") < out.index(f"{task}: integrated")
    # the summary: every failed attempt (a correction reset the counter), the corrections
    rows = table(out)
    assert rows["solo"][:4] == ["released", "2", "1", "1"]
    assert rows["other"][:4] == ["released", "1", "0", "0"]
    # the prompt of the rework session quotes the failure once (the correction quotes it)
    second = (prompts / "solo-2.txt").read_text()
    assert second.count("expected right, got wrong") == 1 and "--- correction" in second
    # the next step lands the batch, and pasting it works
    step = next(line for line in out.splitlines() if "git merge --ff-only imm/drv" in line)
    assert step.strip() == "land it on main: git switch main && git merge --ff-only imm/drv"
    for command in step.split(": ", 1)[1].split(" && "):
        git(root, *command.split()[1:])
    assert git(root, "rev-parse", "main") == git(root, "rev-parse", "imm/drv")
    # session logs under lanes.logDir: the executor's output, then its done with each check
    (log,) = logs.rglob("solo-1.log")
    text = log.read_text()
    assert text.index("executor for solo") < text.index("--- git lanes done")
    assert "[A1] python3 -c" in text and "FAILED (exit 1" in text and "expected right, got wrong" in text
    assert not (hermetic / ".local" / "state" / "git-lanes").exists()
    # nothing left behind: no lane worktree, no lane folder
    assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
    assert git(root, "worktree", "list", "--porcelain").count("worktree ") == 1   # keepScratch false: no scratch
    assert not (root / ".git" / "lanes" / "scratch").exists()                      # nor its pool's folder
    assert not (hermetic / ".local" / "share" / "git-lanes").exists()


def test_needs_human_releases_the_integrated_lanes_and_names_the_commands(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["ok", "stuck", "after"], blocked={"after": ["stuck"]})
    proc = run(root, "drv", executor(tmp_path), "--max-parallel", "2", "--corrector", "cat",
               env={"EXEC_GIVE_UP": "stuck"})
    assert proc.returncode == 1
    # the command that continues it is the one that ran it, its corrector too
    assert f"then continue with: git lanes run drv --executor {shlex.quote(executor(tmp_path))} --corrector cat" \
        in proc.stdout
    assert "error: batch_needs_human: " in proc.stderr
    report = status(root, "drv")
    states = {c["task_id"]: c["state"] for c in report["children"]}
    assert states == {"ok": "released", "stuck": "needs_human", "after": "skipped_blocked"}
    ok_lane = hermetic / ".local" / "share" / "git-lanes"
    assert not list(ok_lane.rglob("drv/ok"))                         # its folder is gone
    assert list(ok_lane.rglob("drv/stuck"))                          # the parked lane keeps its work
    lines = proc.stdout.splitlines()
    step = next(line.strip() for line in lines if line.strip().startswith("stuck: git lanes show"))
    assert step.startswith("stuck: git lanes show stuck --slug drv; then git lanes resume drv --yes")
    shown = subprocess.run(["git", "lanes", "show", "stuck", "--slug", "drv"], cwd=root, capture_output=True,
                           text=True)
    assert shown.returncode == 0 and "gave up" in shown.stdout and "None" not in shown.stdout
    assert "{" not in shown.stdout                                   # values a person reads, no reprs


def running_with_two_landed(tmp_path: Path) -> tuple[Path, str, subprocess.Popen]:
    """`run` on 6 tasks at --max-parallel 2, still running once two of them landed."""
    tasks = [f"t{i}" for i in range(6)]
    root = make_repo(tmp_path / "repo", tasks)
    exe = executor(tmp_path)
    proc = subprocess.Popen(run_cmd("drv", exe, "--max-parallel", "2"), cwd=root, text=True,
                            env={**os.environ, "EXEC_SLEEP": "0.4"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        count = subprocess.run(["git", "rev-list", "--count", "main..imm/drv"], cwd=root, capture_output=True,
                               text=True)
        if count.returncode == 0 and int(count.stdout.strip() or 0) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None
    return root, exe, proc


def test_ctrl_c_releases_the_integrated_lanes_and_says_how_to_go_on(tmp_path):
    root, exe, proc = running_with_two_landed(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"git lanes run drv --executor '{exe}' continues it" in err or f"--executor {exe}" in err
    report = status(root, "drv")
    landed = [c for c in report["children"] if c["commit"]]
    assert len(landed) >= 2
    assert all(c["state"] == "released" for c in landed), ([(c["task_id"], c["state"]) for c in landed], out)
    branches = git(root, "for-each-ref", "--format=%(refname:lstrip=4)", "refs/heads/imm-lane/drv/").split()
    assert not set(branches) & {c["task_id"] for c in landed}


def test_one_ctrl_c_that_git_forwards_too_is_one_ctrl_c(tmp_path):
    """A Ctrl-C at a terminal reaches `git lanes run` twice: from the terminal (its process group) and from
    Git, which forwards it to its child. That is one Ctrl-C: the run stops gently, releases the integrated
    lanes and prints its summary; only a second keypress later aborts."""
    root, _, proc = running_with_two_landed(tmp_path)
    proc.send_signal(signal.SIGINT)      # the terminal's
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)      # Git's, forwarded
    out, err = proc.communicate(timeout=60)
    assert "error: aborted" not in err, err
    assert "continues it" in err and "task " in out, (out, err)    # the summary table, then how to go on
    landed = [c for c in status(root, "drv")["children"] if c["commit"]]
    assert len(landed) >= 2 and all(c["state"] == "released" for c in landed)


def test_ctrl_c_echo_and_a_second_keypress():
    from git_lanes.domain.procs import SAME_CTRL_C, CtrlC

    c = CtrlC()
    assert c.first() is True and c.first() is False   # the first, then its echo
    c.at -= SAME_CTRL_C                               # a keypress later
    try:
        c.first()
    except KeyboardInterrupt:
        return
    raise AssertionError("a second Ctrl-C must abort")

SETUP = """import os, sys
with open(os.environ["SETUP_TRACE"], "a") as f:
    f.write(os.getcwd() + "\\n")
if os.environ.get("SETUP_FAIL"):
    print("npm ERR! code ENOLOCK", file=sys.stderr)
    sys.exit(1)
open(".setup-done", "w").write("ok")
"""


def setup_repo(tmp_path: Path, tasks: list[str]) -> tuple[Path, Path]:
    root = make_repo(tmp_path / "repo", tasks)
    (root / ".gitignore").write_text(".setup-done\n")
    git(root, "add", ".gitignore")
    git(root, "commit", "-q", "-m", "ignore the setup's marker")
    script = tmp_path / "setup.py"
    script.write_text(SETUP)
    git(root, "config", "lanes.setupCommand", f"{sys.executable} {script}")
    return root, tmp_path / "setup-trace.txt"


def test_a_setup_that_fails_three_times_stops_the_run_and_the_child_stays_pending(tmp_path):
    root, trace = setup_repo(tmp_path, ["only"])
    proc = run(root, "drv", executor(tmp_path), env={"SETUP_TRACE": str(trace), "SETUP_FAIL": "1"})
    assert proc.returncode == 1
    assert "error: batch_lane_setup_failed: exit 1: npm ERR! code ENOLOCK" in proc.stderr
    assert len(trace.read_text().splitlines()) == 3
    report = status(root, "drv")
    assert report["batch_state"] == "running" and report["children"][0]["state"] == "pending"
    assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
    # fixed, the next run goes on
    again = run(root, "drv", executor(tmp_path), env={"SETUP_TRACE": str(trace)})
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_setup_that_leaves_changes_says_which_and_leaves_nothing_for_the_next_run(tmp_path):
    """A setup that leaves a file Git does not ignore makes every lane dirty: run names it and stops; the
    lanes it made go (spare ones too), so the next run does not meet a leftover lane branch."""
    root = make_repo(tmp_path / "repo", ["t0", "t1"])
    git(root, "config", "lanes.setupCommand", "touch setup.stamp")
    for _ in range(2):
        proc = run(root, "drv", executor(tmp_path), "--max-parallel", "2")
        assert proc.returncode == 1
        assert "refused: batch_lane_dirty: lanes.copy or lanes.setupCommand left changes Git does not ignore: " \
               "setup.stamp" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "batch_lane_branch_exists" not in proc.stdout + proc.stderr
        assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
        assert git(root, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_restarted_lane_is_released_without_loss_and_provisioned_afresh(tmp_path):
    root, trace = setup_repo(tmp_path, ["stuck"])
    env = {"SETUP_TRACE": str(trace)}
    first = run(root, "drv", executor(tmp_path), env={**env, "EXEC_GIVE_UP": "stuck"})
    assert first.returncode == 1
    old = Path(status(root, "drv")["children"][0]["lane"]["path"])
    (old / "src").mkdir(exist_ok=True)
    (old / "src" / "wip.txt").write_text("half of it\n")              # uncommitted work in the old lane
    resumed = subprocess.run(["git", "lanes", "resume", "drv", "--restart", "stuck", "--yes", "--json"], cwd=root,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert git(root, "for-each-ref", "refs/notes/lanes/lane/").strip() == ""   # its record's ref went
    again = run(root, "drv", executor(tmp_path), env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stuck: removed the old lane" in again.stdout and "uncommitted work is kept in" in again.stdout
    lanes_set_up = [p for p in trace.read_text().splitlines() if "/lanes/scratch/" not in p]
    assert len(lanes_set_up) == 2                                    # set up again: a fresh lane
    report = status(root, "drv")
    child = report["children"][0]
    assert child["state"] == "released" and child["corrections"] == 0
    # the old lane's work and record are reachable from the batch record
    state = "refs/notes/lanes/batch/drv"
    archived = [git(root, "show", f"{state}:{p}") for p in
                git(root, "ls-tree", "-r", "--name-only", state, "archived_lanes").split()]
    tips = [line.split('"tip":"')[1][:40] for line in archived]
    assert any("half of it" in git(root, "show", f"{t}:src/wip.txt") for t in tips
               if "src/wip.txt" in git(root, "ls-tree", "-r", "--name-only", t))
    for t in tips:
        assert subprocess.run(["git", "merge-base", "--is-ancestor", t, state], cwd=root).returncode == 0
    # the new lane's record started at revision 1
    lane_ref = "refs/notes/lanes/lane/drv/stuck"
    revisions = git(root, "rev-list", "--first-parent", "--count", lane_ref).strip()
    assert f'"record_revision":{revisions}' in git(root, "show", f"{lane_ref}:lane.json")


def test_run_after_a_batch_that_ended_elsewhere_releases_its_lanes_first(repo):
    from flow import done, exists, intent, ok, provision, start, write_plan

    write_plan(repo, "demo", {"a": intent("a", scope=["src/a"], acceptance=[("A1", "x", exists("src/a/out.txt"))])})
    start(repo, "demo")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "a\n"})["passed"] is True
    assert ok(repo, "tick")["batch_state"] == "completed"          # ended by a tick: its lane is still there
    proc = subprocess.run(["git", "lanes", "run", "demo", "--executor", "true", "--yes"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr           # not stale_lanes
    assert f"a: released its lane {lane} (integrated)" in proc.stdout
    assert not lane.exists() and git(repo, "for-each-ref", "refs/heads/imm-lane/").strip() == ""


def test_the_summary_counts_the_failed_attempts_of_a_lane_a_restart_archived(tmp_path):
    """SPEC §13: failed attempts are all of them: a lane that failed once, gave up and was restarted
    counts that failure beside those of its new lane."""
    root = make_repo(tmp_path / "repo", ["stuck"])
    gl = lambda cwd, *args: subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True)  # noqa: E731
    assert gl(root, "start", "drv", "--yes").returncode == 0
    provisioned = gl(root, "provision", "stuck", "--json")
    assert provisioned.returncode == 0, provisioned.stderr
    lane = Path(json.loads(provisioned.stdout)["children"][0]["lane"]["path"])
    (lane / "src").mkdir(exist_ok=True)
    (lane / "src" / "stuck.txt").write_text("wrong\n")
    assert gl(lane, "done").returncode == 1                                  # a failed attempt
    assert gl(lane, "done", "--give-up", "-m", "cannot").returncode == 0
    assert gl(root, "tick").returncode == 0
    assert gl(root, "resume", "drv", "--restart", "stuck", "--yes").returncode == 0
    again = run(root, "drv", executor(tmp_path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert table(again.stdout)["stuck"][:3] == ["released", "1", "1"]


def running(word: str) -> list[str]:
    """The processes whose command line has `word` in it."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if word.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass   # ended meanwhile
    return found


def two_sessions_running(tmp_path: Path, sleep: float) -> tuple[Path, str, Path, subprocess.Popen]:
    """`run` on t0 and t1 at --max-parallel 2, once both executors (sleeping `sleep` s) started:
    (repo, executor, trace, the run)."""
    root = make_repo(tmp_path / "repo", ["t0", "t1"])
    exe = executor(tmp_path)
    trace = tmp_path / "trace.txt"
    proc = subprocess.Popen(run_cmd("drv", exe, "--max-parallel", "2"), cwd=root, text=True,
                            env={**os.environ, "EXEC_SLEEP": str(sleep), "EXEC_TRACE": str(trace)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not trace.exists() or trace.read_text().count("start") < 2):
        time.sleep(0.05)
    assert proc.poll() is None and trace.read_text().count("start") == 2
    return root, exe, trace, proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_a_closed_terminal_stops_the_sessions_as_ctrl_c_does(tmp_path, sig):
    """The executors run in process groups of their own, beyond a terminal's signals: a `kill` of `run`
    or its terminal closing must stop them as Ctrl-C does, else they go on working lanes nobody lands,
    beside the sessions of the next run."""
    root, exe, trace, proc = two_sessions_running(tmp_path, sleep=30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    if sig == signal.SIGTERM:
        assert "interrupted" in err and "continues it" in err, err
    assert running(str(tmp_path / "executor.py")) == []
    assert "end" not in trace.read_text()   # stopped, not finished
    assert status(root, "drv")["batch_state"] == "running"


# -- the audit's findings (SPEC §13, §15) ------------------------------------------------------------

def wait_for(path: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never showed in {path}")


def test_a_second_run_on_a_slug_refuses_at_once_while_the_first_drives_it(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["slow"])
    trace = tmp_path / "trace.txt"
    first = subprocess.Popen(run_cmd("drv", executor(tmp_path)), cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "EXEC_SLEEP": "30", "EXEC_TRACE": str(trace)})
    try:
        wait_for(trace, "start slow")
        began = time.monotonic()
        second = run(root, "drv", executor(tmp_path), env={"EXEC_SLEEP": "0"}, timeout=60)
        assert time.monotonic() - began < 20                     # it never waits for the first
        assert second.returncode == 1, second.stdout + second.stderr
        assert second.stderr.strip() == f"error: batch_busy: another git lanes run drives drv (pid {first.pid})"
        assert trace.read_text().count("start slow") == 1        # one session in the lane, the first run's
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 1
    again = run(root, "drv", executor(tmp_path), env={"EXEC_SLEEP": "0"})   # the lock went with the first run
    assert again.returncode == 0, again.stdout + again.stderr


DONE_THEN_EDIT = r'''
import pathlib, subprocess
out = pathlib.Path("src") / "solo.txt"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("right one\n")
subprocess.run(["git", "lanes", "done"], capture_output=True)
out.write_text("right two\n")
'''


def test_a_lane_changed_after_the_executors_own_done_is_checked_again_not_worked_forever(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["solo"])
    script = tmp_path / "done_then_edit.py"
    script.write_text(DONE_THEN_EDIT)
    proc = run(root, "drv", f"{sys.executable} {script}", timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "solo: session 1 ended (exit code 0" in proc.stdout
    assert "changed the lane after its done; done: passed" in proc.stdout
    assert "session 2 started" not in proc.stdout
    assert git(root, "show", "imm/drv:src/solo.txt") == "right two\n"    # what the lane held at the end


def test_sessions_that_leave_a_lane_where_it_was_are_counted_and_reset_by_progress():
    from git_lanes.run.loop import IDLE_SESSIONS, stalled
    from git_lanes.run.progress import Track
    from git_lanes.run.sessions import Sess

    def report(state="enrolled", qa=0, corrections=0, due=None, obligation="implement"):
        return {"batch_state": "running", "children": [
            {"task_id": "t", "state": state, "qa_failures": qa, "corrections": corrections, "correction_due": due,
             "next_obligation": obligation}]}

    tr, sess = Track(), Sess("t", 1, "/lane", "/log", 0.0, outcome="done: passed")
    assert [stalled(tr, sess, report()) for _ in range(IDLE_SESSIONS + 1)] == list(range(IDLE_SESSIONS + 1))
    assert stalled(tr, sess, report(qa=1)) == 0               # a failed attempt counted: progress
    assert stalled(tr, sess, report(qa=1)) == 1
    assert stalled(tr, sess, report(qa=1, due="qa_failure")) == 0
    assert stalled(tr, sess, report(qa=1, corrections=1)) == 0
    assert stalled(tr, sess, report(state="settled", qa=1, corrections=1, obligation=None)) == 0
    assert stalled(tr, Sess("t", 2, "/lane", "/log", 0.0, outcome="interrupted"), report(qa=1, corrections=1)) == 0


SLOW_CORRECTOR = r'''
import os, pathlib, sys, time
sys.stdin.read()
pathlib.Path(os.environ["CORRECTOR_MARK"]).write_text("running")
time.sleep(30)
print("CORRECTOR SAYS: too late")
'''


def test_ctrl_c_while_the_corrector_runs_sends_no_correction(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["solo"])
    corrector = tmp_path / "corrector.py"
    corrector.write_text(SLOW_CORRECTOR)
    mark = tmp_path / "corrector-ran"
    proc = subprocess.Popen(run_cmd("drv", executor(tmp_path), "--qa-failure-limit", "1",
                                    "--corrector", f"{sys.executable} {corrector}"),
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "EXEC_FAIL_FIRST": "solo", "CORRECTOR_MARK": str(mark)})
    try:
        wait_for(mark, "running", timeout=20)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert "correction sent" not in out
    report = status(root, "drv")
    assert not report.get("interventions"), report.get("interventions")
    (solo,) = [c for c in report["children"] if c["task_id"] == "solo"]
    assert solo["corrections"] == 0 and solo["correction_due"]   # still due: the next run sends it


SLOW_ONCE = ("python3 -c \"import os,pathlib,sys,time; m=os.environ.get('SLOW_MARK'); "
             "m and not os.path.exists(m) and (pathlib.Path(m).write_text('checking'), time.sleep(30)); "
             "t=pathlib.Path('src/solo.txt'); sys.exit(0 if t.exists() and t.read_text().startswith('right') else 1)\"")


def test_ctrl_c_while_run_checks_a_session_records_no_attempt(tmp_path, hermetic):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("run tests\n")
    write_initiative(root, "drv", [{"id": "solo", "scope": ["src/solo.txt"], "check": SLOW_ONCE}])
    mark = tmp_path / "check-ran"
    proc = subprocess.Popen(run_cmd("drv", executor(tmp_path), "--qa-failure-limit", "1"), cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SLOW_MARK": str(mark)})
    try:
        wait_for(mark, "checking")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert "done: failed" not in out
    again = run(root, "drv", executor(tmp_path), "--max-children", "3", "--final-check", "true")
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"warning: batch \S+ runs with --max-children 1 \(fixed when it started\); --max-children 3 "
                     r"does not apply", again.stderr), again.stderr
    assert "runs with --final-check none (fixed when it started); --final-check true does not apply" in again.stderr
    assert "QA failures" not in again.stdout and "correction sent" not in again.stdout
    assert table(again.stdout)["solo"][2:4] == ["0", "0"]    # no failed attempt, no correction
    assert "solo: session 2 started" in again.stdout
    assert table(again.stdout)["solo"][1] == "2"             # the batch's sessions, the first run's too


def test_reaching_the_budget_ends_with_the_summary_and_releases(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["t1", "t2", "t3"])
    proc = run(root, "drv", executor(tmp_path), "--max-children", "1", env={"EXEC_SLEEP": "0.8"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: the batch ended budget_stopped: max_children budget exhausted (1)"
    assert table(proc.stdout)["t1"][:2] == ["released", "1"]
    assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""     # spare lanes went too


def test_a_relative_log_dir_is_under_the_git_dir_and_one_in_the_worktree_must_be_ignored(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["solo"])
    git(root, "config", "lanes.logDir", "../session-logs")      # relative: from the Git common dir, in the worktree
    refused = run(root, "drv", executor(tmp_path))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"error: lanes.logDir: {root}/session-logs is inside the worktree {root}")
    assert git(root, "for-each-ref", "refs/notes/lanes/").strip() == "" and not (root / "session-logs").exists()
    (root / ".gitignore").write_text("/session-logs/\n")          # an ignored folder in the worktree is fine
    git(root, "add", ".gitignore")
    git(root, "commit", "-q", "-m", "ignore the logs")
    proc = run(root, "drv", executor(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((root / "session-logs").rglob("solo-1.log"))
    other = make_repo(tmp_path / "other", ["solo"])
    git(other, "config", "lanes.logDir", "lanes-logs")           # under .git: in no worktree
    proc = run(other, "drv", executor(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((other / ".git" / "lanes-logs").rglob("solo-1.log"))


JUNK = r'''
import os, pathlib
task = os.environ["GIT_LANES_TASK"]
pathlib.Path("src").mkdir(exist_ok=True)
pathlib.Path("src", task + ".txt").write_text("right " + task + "\n")
if task == "second":
    pathlib.Path(os.environ["COORD"], "junk.txt").write_text("a change of the user's\n")
'''


def test_a_tick_refused_inside_run_stops_it_with_the_summary_and_releases(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["first", "second"], blocked={"second": ["first"]})
    script = tmp_path / "junk.py"
    script.write_text(JUNK)
    proc = run(root, "drv", f"{sys.executable} {script}", env={"COORD": str(root)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: working_tree_unstaged: junk.txt")
    assert proc.stderr.rstrip().endswith(f"then run again: git lanes run drv --executor '{sys.executable} {script}'")
    assert "tick again" not in proc.stderr
    rows = table(proc.stdout)
    assert rows["first"][0] == "released" and rows["second"][0] == "enrolled"


def test_progress_says_the_qa_failure_before_the_park_it_caused_and_each_leak_restore_once():
    from git_lanes.run.loop import Driver
    from git_lanes.run.progress import Progress

    lines: list[str] = []
    driver = Driver.__new__(Driver)
    driver.prev, driver.track, driver.restored = {}, {}, {("old", "/b/0")}
    driver.progress = Progress(lines.append, tty=False, quiet_stdout=False)
    child = {"task_id": "t1", "state": "enrolled", "qa_failures": 0}
    restores = [{"at": "old", "backup": "/b/0", "paths": []},
                {"at": "new", "backup": "/b/1", "paths": [{"path": "a", "kind": "untracked", "lane_task_id": "t1"},
                                                           {"path": "b", "kind": "modified", "lane_task_id": "t2"}]}]
    driver.note({"batch_state": "running", "children": [child]})
    driver.note({"batch_state": "needs_human", "restores": restores, "children": [
        {**child, "state": "needs_human", "qa_failures": 3, "reason": "batch_qa_failure_limit: 3 failed attempts"}]})
    driver.note({"batch_state": "needs_human", "restores": restores, "children": []})
    assert lines == ["t1: QA failures 3", "t1: parked: batch_qa_failure_limit: 3 failed attempts",
                     "restored 2 leaked path(s) (lane writes of t1, t2) in the coordinator to HEAD; backup: /b/1"]


def test_a_run_killed_outright_leaves_its_executors_working_and_the_next_run_waits_for_them(tmp_path):
    """SIGKILL reaches only `run`: its executors (process groups of their own) go on. The next run must
    not start a second session beside one of them (SPEC §13: one session per lane); it waits for it to
    end, then takes what it delivered."""
    root, exe, trace, first = two_sessions_running(tmp_path, sleep=4)
    first.kill()
    first.wait()
    # the orphans work on (polled: an executor forking its `git lanes done` shows twice until the exec)
    deadline = time.monotonic() + 3
    while len(running(str(tmp_path / "executor.py"))) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(running(str(tmp_path / "executor.py"))) == 2
    again = run(root, "drv", exe, "--max-parallel", "2", env={"EXEC_SLEEP": "0.1", "EXEC_TRACE": str(trace)})
    assert again.returncode == 0, again.stdout + again.stderr
    words = [line.split()[:2] for line in trace.read_text().splitlines()]
    for task in ("t0", "t1"):   # never two sessions at once in one lane
        mine = [w for w, t in words if t == task]
        assert mine[:2] == ["start", "end"], words
    assert "the session a killed run left ended" in again.stderr + again.stdout
    report = status(root, "drv")
    assert report["batch_state"] == "completed" and all(c["state"] == "released" for c in report["children"])


WRITER = ("import os, pathlib\nt = os.environ['GIT_LANES_TASK']\np = pathlib.Path('src') / t\n"
            "p.mkdir(parents=True, exist_ok=True)\n(p / 'out.txt').write_text('ok')\n")


def plan(repo):
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "out", exists("src/a/out.txt"))])})


def test_a_continued_batch_shows_its_current_counters_once(repo, tmp_path):
    plan(repo)
    start(repo, "demo", "--qa-failure-limit", "3")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/wrong.txt": "x\n"})["passed"] is False
    assert child_of(ok(repo, "tick"), "a")["qa_failures"] == 1
    script = tmp_path / "exec.py"
    script.write_text(WRITER)
    proc = subprocess.run(["git", "lanes", "run", "demo", "--executor", f"{sys.executable} {script}"], cwd=repo,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("continuing batch ")
    assert "a: enrolled, QA failures 1, corrections 0" in lines
    assert "a: QA failures 1" not in lines   # an earlier run's counter is not news
    assert "$ git log --oneline imm/demo" in proc.stdout


def test_a_summary_has_no_empty_git_log_and_no_missing_log_folder(repo):
    plan(repo)
    start(repo, "demo")
    lane = provision(repo, "a")
    code, _, err = cli(lane, "done", "--give-up", "-m", "cannot do it")
    assert code == 0, err
    assert ok(repo, "tick")["batch_state"] == "needs_human"
    proc = subprocess.run(["git", "lanes", "run", "demo", "--executor", "true"], cwd=repo, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 1
    assert "$ git log" not in proc.stdout    # nothing integrated: no empty section
    assert "executor logs:" not in proc.stdout   # no session ran: no folder to name
    assert "git lanes show a --slug demo" in proc.stdout
