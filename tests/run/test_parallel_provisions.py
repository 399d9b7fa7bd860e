"""`run` prepares the lanes it may start at once (issue 28 item 6): N lanes whose `lanes.setupCommand`
sleeps 1 s are made in about 1 s of wall time, not N s; a setup that fails in one lane does not hurt
the others (their lanes are made and admitted in the same round; the failed one is made again)."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import git
from test_run import executor, make_repo, run, status  # noqa: F401 (a fixture)

N = 5
SETUP = r'''
import os, pathlib, sys, time
trace, task = os.environ["SETUP_TRACE"], os.environ.get("GIT_LANES_TASK", "")
def note(word):
    fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{word} {task} {time.time():.6f} {os.getcwd()}\n".encode())
    os.close(fd)
note("start")
time.sleep(1)
marker = pathlib.Path(trace + "." + task)
if task == os.environ.get("SETUP_FAIL_ONCE") and not marker.exists():
    marker.write_text("failed once\n")
    note("fail")
    print("error: the setup of " + task + " failed (once)")
    sys.exit(1)
note("end")
'''


def test_lanes_are_provisioned_at_once_and_a_failing_setup_hurts_no_other(tmp_path, executor):
    tasks = [f"t{i}" for i in range(N)]
    root = make_repo(tmp_path / "repo", tasks)
    script = tmp_path / "setup.py"
    script.write_text(SETUP)
    trace = tmp_path / "trace.txt"
    git(root, "config", "lanes.setupCommand", f"{sys.executable} {script}")
    git(root, "config", "lanes.worktreeRoot", str(tmp_path / "lanes"))
    proc = run(root, "drv", executor, "--max-parallel", str(N),
               env={"SETUP_TRACE": str(trace), "SETUP_FAIL_ONCE": "t0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {c["task_id"]: c["state"] for c in status(root, "drv")["children"]} == {t: "released" for t in tasks}
    assert "t0: cannot provision:" in proc.stdout, proc.stdout

    lines = [line.split(" ", 3) for line in trace.read_text().splitlines()]
    lanes = [(word, task, float(at)) for word, task, at, cwd in lines
             if task in tasks and "/lanes/scratch/" not in cwd.replace("\\", "/")]   # not the scratch worktree's
    first: dict[str, float] = {}
    ended: dict[str, float] = {}
    for word, task, at in lanes:
        if word == "start":
            first.setdefault(task, at)
        elif task not in ended:
            ended[task] = at
    assert set(first) == set(tasks) and set(ended) == set(tasks), lanes
    span = max(ended.values()) - min(first.values())
    # one after another: at least N s; at once: about 1 s (a generous margin for a loaded machine)
    assert span < 0.6 * N, f"the first setups of {N} lanes took {span:.2f} s of wall time"
    # the failed setup of t0 ran beside the others, which all went on in that same round
    others = [t for t in tasks if t != "t0"]
    assert all(ended[t] - first["t0"] < 0.6 * N for t in others), lanes
    assert sum(1 for word, task, _ in lanes if word == "start" and task != "t0") == N - 1   # made once each
    assert Path(str(trace) + ".t0").exists()
