"""Usage (SPEC §17.4, §17.6): `git lanes run` names a `GIT_LANES_USAGE` file per session; what a scripted
executor writes there is recorded per session in the lane record and summed per child and batch in
`status`, `show` and `run`'s summary (a cost column); a malformed file is a warning; `done --usage`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import git
from helpers import write_initiative

EXECUTOR = r'''
import json, os, pathlib, sys
task = os.environ["GIT_LANES_TASK"]
path = os.environ.get("GIT_LANES_USAGE")
assert path and not path.startswith(os.getcwd()), path   # outside the lane
mode = os.environ.get("USAGE_MODE", "ok")
counter = pathlib.Path(os.environ["SESSIONS_DIR"]) / task
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
if mode == "bad":
    pathlib.Path(path).write_text("{not json")
elif mode == "negative":
    pathlib.Path(path).write_text(json.dumps({"cost_usd": -1}))
else:
    pathlib.Path(path).write_text(json.dumps({"input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.1}))
fail_first = os.environ.get("FAIL_FIRST") == task and n == 1
pathlib.Path("src").mkdir(exist_ok=True)
pathlib.Path(f"src/{task}.txt").write_text("wrong\n" if fail_first else "right\n")
'''

CHECK = ("python3 -c \"import pathlib,sys; t=pathlib.Path('src/{t}.txt'); "
         "sys.exit(0 if t.exists() and t.read_text().startswith('right') else 1)\"")


def make(tmp_path: Path, tasks: list[str]) -> tuple[Path, str, dict[str, str]]:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("usage\n")
    write_initiative(root, "use", [{"id": t, "scope": [f"src/{t}.txt"], "check": CHECK.format(t=t)} for t in tasks])
    script = tmp_path / "executor.py"
    script.write_text(EXECUTOR)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    return root, f"{sys.executable} {script}", {"SESSIONS_DIR": str(sessions)}


def lanes(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=240)


def as_json(root: Path, *args: str) -> dict:
    proc = lanes(root, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_run_records_each_session_and_sums_the_usage(tmp_path):
    root, exe, env = make(tmp_path, ["a", "b"])
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", "--max-parallel", "2", "--qa-failure-limit", "3",
                 env={**env, "FAIL_FIRST": "b"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a: one session; b: a failed one, then a passed one — three sessions of 1200 tokens and $0.10
    report = as_json(root, "status", "use")
    assert report["usage"] == {"input_tokens": 3000, "output_tokens": 600, "cost_usd": 0.3,
                               "children": {"a": {"input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.1},
                                            "b": {"input_tokens": 2000, "output_tokens": 400, "cost_usd": 0.2}}}
    shown = as_json(root, "show", "b", "--slug", "use")
    sessions = shown["lane_record"]["sessions"]
    assert [s["n"] for s in sessions] == [1, 2] and all(s["exit"] == 0 for s in sessions)
    assert sessions[0]["usage"] == {"input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.1}
    assert shown["usage"]["cost_usd"] == 0.2
    # the summary's cost column, and the batch's line
    lines = proc.stdout.splitlines()
    head = next(line for line in lines if line.startswith("task ") and "failed attempts" in line)
    assert head.split()[-1] == "cost"
    row_b = next(line for line in lines if line.startswith("b "))
    assert row_b.split()[-1] == "$0.20"
    assert "usage: $0.30, 3600 tokens" in proc.stdout
    assert "usage: $0.30, 3600 tokens" in lanes(root, "status", "use").stdout
    # each usage file was removed once read
    log_dir = next(line.split(": ", 1)[1] for line in lines if line.startswith("executor logs: "))
    assert not [n for n in os.listdir(log_dir) if n.endswith(".usage.json")]


def test_a_malformed_usage_file_is_a_warning_and_ignored(tmp_path):
    root, exe, env = make(tmp_path, ["a"])
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", env={**env, "USAGE_MODE": "bad"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: usage file " in proc.stderr and "is malformed: not JSON" in proc.stderr
    report = as_json(root, "status", "use")
    assert "usage" not in report
    assert as_json(root, "show", "a", "--slug", "use")["lane_record"]["sessions"][0]["usage"] is None
    head = next(line for line in proc.stdout.splitlines() if line.startswith("task "))
    assert "cost" not in head


def test_a_negative_number_is_malformed(tmp_path):
    root, exe, env = make(tmp_path, ["a"])
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", env={**env, "USAGE_MODE": "negative"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cost_usd: not a number >= 0" in proc.stderr
    assert "usage" not in as_json(root, "status", "use")


def test_done_usage_records_a_hand_driven_lanes_usage(tmp_path):
    from helpers import deliver, snapshot_state

    root, _exe, _env = make(tmp_path, ["a"])
    assert lanes(root, "start", "use", "--yes").returncode == 0
    report = as_json(root, "provision", "a")
    lane = Path(next(c for c in report["children"] if c["task_id"] == "a")["lane"]["path"])
    deliver(str(lane), {"src/a.txt": "right\n"})
    before = snapshot_state(root)
    for bad in ("tokens=5", "cost_usd=-1", "input_tokens=many", "cost_usd"):
        proc = lanes(lane, "done", "--usage", bad)
        assert proc.returncode == 2 and proc.stderr.startswith("error: invalid --usage: "), (bad, proc.stderr)
    assert snapshot_state(root) == before
    proc = lanes(lane, "done", "--usage", "input_tokens=700,output_tokens=50,cost_usd=0.05")
    assert proc.returncode == 0, proc.stderr
    assert as_json(root, "status", "use")["usage"] == {
        "input_tokens": 700, "output_tokens": 50, "cost_usd": 0.05,
        "children": {"a": {"input_tokens": 700, "output_tokens": 50, "cost_usd": 0.05}}}


def test_a_budget_stops_the_batch_at_the_right_session_and_resume_continues_it(tmp_path):
    root, exe, env = make(tmp_path, ["a", "b", "c"])   # one lane at a time: a, b, c, $0.10 each
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", "--budget-usd", "0.2", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = as_json(root, "status", "use")
    assert report["batch_state"] == "needs_human"
    states = {c["task_id"]: c["state"] for c in report["children"]}
    # a and b ran ($0.20 reached after b's session): b's session finished and landed, c never got a session
    assert states == {"a": "released", "b": "released", "c": "needs_human"}, states
    assert report["usage"]["cost_usd"] == 0.2
    assert not (Path(env["SESSIONS_DIR"]) / "c").exists()
    assert "budget_reached: cost_usd 0.2 of 0.2" in proc.stdout + proc.stderr
    parked = [c for c in report["children"] if c["state"] == "needs_human"]
    assert [c["reason"] for c in parked] == ["budget_reached: cost_usd 0.2 of 0.2"] * len(parked)
    # resume raises it; the next run finishes the batch
    proc = lanes(root, "resume", "use", "--yes", "--budget-usd", "1")
    assert proc.returncode == 0, proc.stderr
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = as_json(root, "status", "use")
    assert report["batch_state"] == "completed" and report["usage"]["cost_usd"] == 0.3


def test_a_token_budget_is_recorded_and_reached(tmp_path):
    root, exe, env = make(tmp_path, ["a", "b"])
    proc = lanes(root, "run", "use", "--executor", exe, "--yes", "--budget-tokens", "1000", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "budget_reached: tokens 1200 of 1000" in proc.stdout + proc.stderr
    assert not (Path(env["SESSIONS_DIR"]) / "b").exists()
