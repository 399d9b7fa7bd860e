"""`git lanes run` (SPEC §13): the Parent in a box, end to end through real processes.

The executor is a small Python script written into the test's temporary directory; what it does
is steered by environment variables, which the driver passes through to every session:
EXEC_SLEEP (seconds; EXEC_SLEEP_<task> for one task), EXEC_TRACE (a file outside the repository:
`start/end <task> <time>` lines), EXEC_PROMPTS (a folder: each session's GIT_LANES_PROMPT),
EXEC_GIVE_UP (a task that gives up), EXEC_FAIL_FIRST (a task whose first delivery is wrong),
EXEC_NOTHING (a task it never touches).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import write_initiative

from git_lanes.run.prompts import build_prompt, default_correction, failure_text

EXECUTOR = r'''
import os, pathlib, subprocess, sys, time

task = os.environ["GIT_LANES_TASK"]
prompt = os.environ.get("GIT_LANES_PROMPT", "")


def trace(word):
    path = os.environ.get("EXEC_TRACE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{word} {task} {time.time():.6f}\n".encode())
        os.close(fd)


trace("start")
prompts = os.environ.get("EXEC_PROMPTS")
if prompts:
    folder = pathlib.Path(prompts)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(list(folder.glob(task + "-*.txt"))) + 1
    (folder / f"{task}-{n}.txt").write_text(prompt)
print(f"executor for {task}", flush=True)
time.sleep(float(os.environ.get("EXEC_SLEEP_" + task, os.environ.get("EXEC_SLEEP", "0.1"))))
if os.environ.get("EXEC_NOTHING") == task:
    trace("end")
    sys.exit(3)
if os.environ.get("EXEC_GIVE_UP") == task:
    subprocess.run(["git", "lanes", "done", "--give-up", "-m", "cannot do " + task], check=True)
    trace("end")
    sys.exit(0)
out = pathlib.Path("src") / (task + ".txt")
out.parent.mkdir(parents=True, exist_ok=True)
wrong = os.environ.get("EXEC_FAIL_FIRST") == task and "CORRECTOR SAYS" not in prompt \
    and "The last attempt failed" not in prompt
out.write_text("wrong\n" if wrong else "right " + task + "\n")
trace("end")
'''

CORRECTOR = r'''
import os, sys
data = sys.stdin.read()
open(os.environ["CORRECTOR_INPUT"], "w").write(data)
print("CORRECTOR SAYS: write the word right into the file; the check said:")
print(data.strip().splitlines()[0])
'''


def right_check(task: str) -> str:
    return (f"python3 -c \"import pathlib,sys; t=pathlib.Path('src/{task}.txt'); "
            f"sys.exit(0 if t.exists() and t.read_text().startswith('right') else 1)\"")


def make_repo(root: Path, tasks: list[str], slug: str = "drv", blocked: dict[str, list[str]] | None = None,
              final_checks: list[str] | None = None) -> Path:
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("driver tests\n")
    write_initiative(root, slug, [{"id": t, "scope": [f"src/{t}.txt"], "check": right_check(t),
                                   "blocked_by": (blocked or {}).get(t, [])} for t in tasks],
                     final_checks=final_checks)
    return root


@pytest.fixture
def executor(tmp_path) -> str:
    script = tmp_path / "executor.py"
    script.write_text(EXECUTOR)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def run_cmd(slug: str, executor: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "git_lanes", "run", slug, "--executor", executor, "--yes", *args]


def run(root: Path, slug: str, executor: str, *args: str, env: dict[str, str] | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(run_cmd(slug, executor, *args), cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def status(root: Path, slug: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "git_lanes", "status", slug, "--json"], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def batch_tasks(root: Path, slug: str) -> list[str]:
    """The Lanes-Task trailer of every commit on the batch branch, oldest first (and no merges)."""
    assert git(root, "rev-list", "--merges", f"main..imm/{slug}").strip() == ""
    out = git(root, "log", "--reverse", "--format=%(trailers:key=Lanes-Task,valueonly)%x00", f"main..imm/{slug}")
    return [t.strip() for t in out.split("\0") if t.strip()]


def read_trace(path: Path) -> list[tuple[str, str, float]]:
    if not path.exists():
        return []
    return [(w, t, float(s)) for w, t, s in (line.split() for line in path.read_text().splitlines())]


# -- end to end ---------------------------------------------------------------------------------------

def test_sigint_midway_then_rerun_completes_with_one_commit_per_task(tmp_path, executor):
    tasks = [f"t{i:02d}" for i in range(12)]
    root = make_repo(tmp_path / "repo", tasks)
    trace = tmp_path / "trace.txt"
    env = {**os.environ, "EXEC_SLEEP": "0.3", "EXEC_TRACE": str(trace)}
    log = open(tmp_path / "first-run.log", "w")
    proc = subprocess.Popen(run_cmd("drv", executor, "--max-parallel", "4"), cwd=root, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    integrated = 0
    while time.monotonic() < deadline and proc.poll() is None:
        tip = subprocess.run(["git", "rev-list", "--count", "main..imm/drv"], cwd=root, capture_output=True,
                             text=True)
        integrated = int(tip.stdout.strip() or 0) if tip.returncode == 0 else 0
        if integrated >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    assert integrated >= 3
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 1   # SPEC §13: exit 0 only for completed, else 1
    log.close()
    first = (tmp_path / "first-run.log").read_text()
    assert "interrupted" in first
    # every session's process group is gone: the trace stops growing
    settled = trace.read_text()
    time.sleep(0.8)
    assert trace.read_text() == settled
    midway = status(root, "drv")
    assert midway["batch_state"] == "running"
    # no lane is left but those the record knows (spare lanes made ahead of time are removed)
    with_lanes = {c["task_id"] for c in midway["children"] if c["lane"]}
    branches = git(root, "for-each-ref", "--format=%(refname:lstrip=4)", "refs/heads/imm-lane/drv/").split()
    assert set(branches) <= with_lanes
    done_first = len(batch_tasks(root, "drv"))
    assert 3 <= done_first < 12

    again = run(root, "drv", executor, "--max-parallel", "4", env={"EXEC_SLEEP": "0.1", "EXEC_TRACE": str(trace)})
    assert again.returncode == 0, again.stdout + again.stderr
    report = status(root, "drv")
    assert report["batch_state"] == "completed"
    assert report["final_verification"]["passed"] is True
    landed = batch_tasks(root, "drv")
    assert sorted(landed) == tasks and len(landed) == 12          # one commit per task, linear
    assert all(c["state"] == "released" for c in report["children"])
    assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""   # every lane released
    assert "continuing batch" in again.stdout and "completed" in again.stdout
    assert "imm(t00)" in again.stdout or "imm(t" in again.stdout   # the batch branch's log


def test_never_more_than_max_parallel_sessions_and_they_overlap(tmp_path, executor):
    tasks = [f"p{i}" for i in range(8)]
    root = make_repo(tmp_path / "repo", tasks)
    trace = tmp_path / "trace.txt"
    proc = run(root, "drv", executor, "--max-parallel", "3", env={"EXEC_SLEEP": "0.3", "EXEC_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = sorted(read_trace(trace), key=lambda e: (e[2], e[0] == "start"))  # an end before a start at a tie
    running, most = 0, 0
    for word, _task, _at in events:
        running += 1 if word == "start" else -1
        most = max(most, running)
    assert sum(1 for e in events if e[0] == "start") == 8
    assert most <= 3
    assert most >= 2, "the sessions never ran at once"
    assert sorted(batch_tasks(root, "drv")) == tasks
    # spare lanes wait for a slot: offered early, they are neither refused nor reported as such
    assert "refused" not in proc.stdout + proc.stderr
    assert sum(1 for line in proc.stdout.splitlines() if ": lane /" in line) == 8
    for task in tasks:   # each step once, though the verifier's reports reach the main thread late
        assert sum(1 for line in proc.stdout.splitlines() if line.startswith(f"{task}: integrated ")) == 1
        assert proc.stdout.splitlines().count(f"{task}: lane released") == 1


def test_a_report_older_than_one_already_noted_prints_nothing_again():
    """The verifier's report can reach the main thread after a tick's later one: a child never goes
    back from integrated or released, so each step is printed once."""
    from git_lanes.run.loop import Driver
    from git_lanes.run.progress import Progress

    lines: list[str] = []
    d = Driver.__new__(Driver)   # only the reporting half: no session, no lanes
    d.prev, d.track, d.report = {}, {}, {}
    d.progress = Progress(lines.append, tty=False, quiet_stdout=False)
    d.progress.rows = lambda: []

    def report(state):
        return {"batch_state": "running", "children": [{"task_id": "t1", "state": state, "commit": "c" * 40}]}

    for state in ("lane_committed", "integrated", "released", "integrated", "lane_committed", "released"):
        d.note(report(state))
    assert lines == ["t1: integrated " + "c" * 12, "t1: lane released"]


def test_a_release_waits_while_a_landing_is_verified_unless_too_many_lanes_wait():
    """A release holds the slug's lock the verifier takes next to land: between sessions, the driver
    makes spare lanes, and releases only while no verifier runs, or when more lanes wait than a wave."""
    import threading

    from git_lanes.run.loop import Driver

    class NoSpares:
        limit = 2

        def next(self, report):
            return None

    d = Driver.__new__(Driver)
    d.spares, d.report, d.verifier = NoSpares(), {}, None
    d.releases = [{"task_id": "a"}, {"task_id": "b"}]
    assert d._chore() is not None                    # no verifier: a release
    stop = threading.Event()
    d.verifier = threading.Thread(target=stop.wait, args=(10,), daemon=True)
    d.verifier.start()
    try:
        assert d._chore() is None                    # a verifier runs: the release waits
        d.releases.append({"task_id": "c"})
        assert d._chore() is not None                # 3 lanes wait, more than a wave of 2
    finally:
        stop.set()
        d.verifier.join()
    d.releases = [{"task_id": "a"}]
    assert d._chore() is not None                    # the verifier ended: the release goes on


def test_executor_that_only_edits_files_gets_done_run_for_it(tmp_path, executor):
    root = make_repo(tmp_path / "repo", ["alpha", "beta"], blocked={"beta": ["alpha"]})
    prompts = tmp_path / "prompts"
    proc = run(root, "drv", executor, env={"EXEC_PROMPTS": str(prompts)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = status(root, "drv")
    assert report["batch_state"] == "completed"
    assert batch_tasks(root, "drv") == ["alpha", "beta"]
    # the driver ran `done`: one passed attempt each, in the lane records
    for task in ("alpha", "beta"):
        show = subprocess.run([sys.executable, "-m", "git_lanes", "show", task, "--slug", "drv", "--json"], cwd=root,
                              capture_output=True, text=True)
        attempts = json.loads(show.stdout)["lane_record"]["qa_attempts"]
        assert [a["passed"] for a in attempts] == [True]
    # the prompt: goal, scope, acceptance with its check
    prompt = (prompts / "alpha-1.txt").read_text()
    assert "Make alpha" in prompt and "src/alpha.txt" in prompt and right_check("alpha") in prompt
    assert prompt.index("Make alpha") < prompt.index("src/alpha.txt") < prompt.index(right_check("alpha"))
    # one log per session, under the user log dir / repo id / batch id
    logs = list(Path(os.environ["XDG_STATE_HOME"]).glob(f"git-lanes/log/*/{report['batch_id']}/alpha-1.log"))
    assert len(logs) == 1 and "executor for alpha" in logs[0].read_text()


def test_rework_session_after_a_failed_attempt_sees_the_failing_checks(tmp_path, executor):
    root = make_repo(tmp_path / "repo", ["solo"])
    prompts = tmp_path / "prompts"
    proc = run(root, "drv", executor, "--qa-failure-limit", "2", "--json",
               env={"EXEC_PROMPTS": str(prompts), "EXEC_FAIL_FIRST": "solo"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)              # --json: exactly the final report on stdout
    assert report["contract"] == "git_lanes/batch_report/v1" and report["batch_state"] == "completed"
    solo = report["children"][0]
    assert solo["corrections"] == 0 and solo["qa_attempts_seen"] == 2
    second = (prompts / "solo-2.txt").read_text()
    assert "The last attempt failed" in second and "[A1]" in second and "exit code 1" in second
    assert "The last attempt failed" not in (prompts / "solo-1.txt").read_text()


def test_corrector_output_is_the_correction(tmp_path, executor):
    root = make_repo(tmp_path / "repo", ["fixme"])
    script = tmp_path / "corrector.py"
    script.write_text(CORRECTOR)
    seen = tmp_path / "corrector-input.txt"
    prompts = tmp_path / "prompts"
    corrector = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    # the corrector's text is what lets the second session do it right (not the failure section)
    env = {"EXEC_FAIL_FIRST": "fixme", "EXEC_PROMPTS": str(prompts), "CORRECTOR_INPUT": str(seen)}
    proc = run(root, "drv", executor, "--qa-failure-limit", "1", "--corrector", corrector, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = status(root, "drv")
    child = report["children"][0]
    assert child["corrections"] == 1 and child["state"] == "released"
    (correction,) = [i for i in report["interventions"] if i["kind"] == "correction"]
    assert correction["text"].startswith("CORRECTOR SAYS")
    assert "[A1]" in seen.read_text() and "exit code 1" in seen.read_text()
    assert "--- correction" in (prompts / "fixme-2.txt").read_text()
    assert "CORRECTOR SAYS" in (prompts / "fixme-2.txt").read_text()


def test_needs_human_exits_1_and_a_second_run_never_resumes(tmp_path, executor):
    root = make_repo(tmp_path / "repo", ["ok", "stuck", "after"], blocked={"after": ["stuck"]})
    trace = tmp_path / "trace.txt"
    env = {"EXEC_GIVE_UP": "stuck", "EXEC_TRACE": str(trace)}
    proc = run(root, "drv", executor, "--max-parallel", "2", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "batch_needs_human" in proc.stderr
    report = status(root, "drv")
    assert report["batch_state"] == "needs_human"
    states = {c["task_id"]: (c["state"], c["reason"]) for c in report["children"]}
    assert states["stuck"] == ("needs_human", "batch_lane_stopped: cannot do stuck")
    assert states["after"][0] == "skipped_blocked"
    assert states["ok"][0] in ("integrated", "released")
    starts = trace.read_text().count("start ")
    again = run(root, "drv", executor, env=env)
    assert again.returncode == 1
    assert "batch_needs_human" in again.stderr and "resume" in again.stderr
    assert trace.read_text().count("start ") == starts          # no session ran
    assert status(root, "drv")["batch_state"] == "needs_human"


def test_a_child_parked_on_its_candidate_shows_what_failed_there(tmp_path, executor):
    """A check that passes in the lane and fails on the candidate: run's parked line is followed by
    the line of the check's output that says what failed, not only by the reason code."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("driver tests\n")
    scratch_only = ("python3 -c \"import os,sys; bad = os.sep + 'scratch' + os.sep in os.getcwd() + os.sep; "
                    "print('collecting'); print('error: the tool is missing here' if bad else 'fine'); "
                    "print('done in 0.1 s'); sys.exit(1 if bad else 0)\"")
    write_initiative(root, "drv", [{"id": "a", "scope": ["src/a.txt"], "check": scratch_only}])
    proc = run(root, "drv", executor)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    parked = next(i for i, line in enumerate(lines) if line.startswith("a: parked: batch_integration_check_failed"))
    assert lines[parked + 1] == "a:   a:A1 (exit 1): error: the tool is missing here"


def test_sessions_that_deliver_nothing_twice_give_the_lane_up(tmp_path, executor):
    root = make_repo(tmp_path / "repo", ["idle"])
    trace = tmp_path / "trace.txt"
    proc = run(root, "drv", executor, env={"EXEC_NOTHING": "idle", "EXEC_TRACE": str(trace)})
    assert proc.returncode == 1
    assert "crashed: executor exited 3; log " in proc.stdout   # SPEC §17.1 v4: no done run for it
    (child,) = status(root, "drv")["children"]
    assert child["state"] == "needs_human"
    assert child["reason"].startswith("batch_lane_stopped: 2 executor sessions in a row ended without a delivery")
    assert trace.read_text().count("start ") == 2


def test_missing_executor_is_a_usage_error(tmp_path):
    root = make_repo(tmp_path / "repo", ["a"])
    proc = run(root, "drv", "no-such-executor-anywhere --flag")
    assert proc.returncode == 2
    assert "no-such-executor-anywhere" in proc.stderr
    assert git(root, "for-each-ref", "refs/notes/lanes/").strip() == ""   # nothing started


# -- the texts ------------------------------------------------------------------------------------------

def _failed(n: int, tail: str) -> list[dict]:
    return [{"id": f"A{i}", "command": f"check-{i} --all", "exit_code": 1, "signal": None, "passed": False,
             "output_tail": tail + f"\nEND-{i}"} for i in range(1, n + 1)]


def test_default_correction_names_the_checks_and_quotes_their_tails_within_4000():
    text = default_correction("t", _failed(3, "x" * 4000))
    assert len(text) <= 4000
    for i in (1, 2, 3):
        assert f"[A{i}] check-{i} --all (exit code 1)" in text
        assert f"END-{i}" in text                       # the end of each tail is kept
    short = default_correction("t", _failed(1, "boom"))
    assert "boom" in short and "END-1" in short
    assert len(default_correction("t", _failed(40, "y" * 4000))) <= 4000
    assert "No failing check output" in default_correction("t", [])


def test_prompt_has_goal_scope_checks_failure_then_unread_texts():
    info = {"task_id": "t", "slug": "s", "batch_id": "b", "goal": "Do the thing", "scope": ["src/t"],
            "acceptance": [{"id": "A1", "text": "works", "check": "make test"}],
            "unread": [{"at": "2026-01-01T00:00:00.000Z", "kind": "correction", "text": "Try harder"}]}
    prompt = build_prompt(info, _failed(1, "it broke"))
    order = [prompt.index(s) for s in ("Do the thing", "src/t", "check: make test", "it broke", "Try harder")]
    assert order == sorted(order)
    assert "--- correction" in prompt
    assert "[A1] check-1 --all (exit code 1)" in failure_text(_failed(1, "it broke"))
    assert "The last attempt failed" not in build_prompt({**info, "unread": []}, [])


def test_run_waits_out_its_own_verifier_held_up_by_a_git_lock_a_kill_left(tmp_path, executor):
    """A kill inside the coordinator's fast-forward leaves a young `HEAD.lock`: the next landing waits
    for it under the batch lock, up to a minute (SPEC §15), longer than lanes.lockTimeout. The main
    thread's tick waits that out too instead of stopping the run with `batch_busy` (the kill soak)."""
    root = make_repo(tmp_path / "repo", ["w1", "w2"])
    git(root, "config", "lanes.lockTimeout", "1")
    assert subprocess.run([sys.executable, "-m", "git_lanes", "start", "drv", "--max-parallel", "2", "--yes"],
                          cwd=root, capture_output=True).returncode == 0
    lock = root / ".git" / "HEAD.lock"
    lock.write_text("")
    proc = subprocess.Popen(run_cmd("drv", executor, "--max-parallel", "2"), cwd=root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "EXEC_SLEEP_w1": "0", "EXEC_SLEEP_w2": "1.5"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not status(root, "drv").get("candidate"):
        time.sleep(0.1)
    time.sleep(5)   # w1's landing waits on the lock; w2's tick then waits on the landing past lockTimeout
    lock.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert "batch_busy" not in out + err
    assert sorted(batch_tasks(root, "drv")) == ["w1", "w2"]


def test_run_makes_the_scratch_worktree_ready_while_the_first_lanes_work(tmp_path, executor):
    """The scratch worktree's checkout and `lanes.setupCommand` (a large repository: seconds; a real
    setup: minutes) happen while the first session works, not when its candidate waits to be verified."""
    root = make_repo(tmp_path / "repo", ["w1"])
    setup_log = tmp_path / "setup.log"
    setup = tmp_path / "setup.py"
    setup.write_text(f"import os, time\nopen({str(setup_log)!r}, 'a').write(f'{{os.getcwd()}} {{time.time()}}\\n')\n")
    git(root, "config", "lanes.setupCommand", f"{shlex.quote(sys.executable)} {shlex.quote(str(setup))}")
    trace = tmp_path / "trace.txt"
    proc = run(root, "drv", executor, env={"EXEC_SLEEP": "2", "EXEC_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scratch = os.path.realpath(root / ".git" / "lanes" / "scratch" / "0")
    in_scratch = [float(line.rsplit(" ", 1)[1]) for line in setup_log.read_text().splitlines()
                  if os.path.realpath(line.rsplit(" ", 1)[0]) == scratch]
    ended = next(float(line.split()[2]) for line in trace.read_text().splitlines() if line.startswith("end w1"))
    assert len(in_scratch) == 1 and in_scratch[0] < ended   # set up once, before the session ended
    assert batch_tasks(root, "drv") == ["w1"]


def test_a_setup_failing_while_the_scratch_is_made_ready_parks_the_child_when_it_is_verified(tmp_path, executor):
    """A failed setup takes the worktree made ready with it: the verification makes it again, runs setup
    again and parks the child with what setup said (never checks run without their setup)."""
    root = make_repo(tmp_path / "repo", ["w1"])
    setup_log = tmp_path / "setup.log"
    setup = tmp_path / "setup.py"
    setup.write_text("import os, sys\n"
                     "if os.sep + os.path.join('lanes', 'scratch') in os.getcwd():\n"
                     f"    open({str(setup_log)!r}, 'a').write('scratch\\n')\n"
                     "    print('pip: no matching distribution')\n"
                     "    sys.exit(4)\n")
    git(root, "config", "lanes.setupCommand", f"{shlex.quote(sys.executable)} {shlex.quote(str(setup))}")
    proc = run(root, "drv", executor)   # however the session and the preparation interleave
    assert proc.returncode == 1
    [child] = status(root, "drv")["children"]
    quoted, _, log = child["reason"].partition("; whole output: ")   # SPEC §17.1 v4: and the whole output's log
    assert quoted == "batch_integration_setup_failed: exit 4: pip: no matching distribution"
    assert log.endswith(".log") and "pip: no matching distribution" in open(log).read()
    assert setup_log.read_text().splitlines() == ["scratch", "scratch"]   # made ready, then verified
