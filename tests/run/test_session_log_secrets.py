"""Secrets in session logs (issue 29 item 22; SPEC §2.1 v3, §17.6): the executor's own output is
redacted as `run` writes it to the session log — a secret printed whole, one written in two pieces
(split across the reads of the pipe), one on stderr — while the rest of the output stays as printed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from conftest import git
from test_run import make_repo, run

SECRET = "ghp_" + "Zq8x" * 6
EXECUTOR = r'''
import os, pathlib, sys, time
secret = os.environ["GITHUB_TOKEN"]
print("executor starts; token " + secret, flush=True)
half = len(secret) // 2
os.write(1, ("split token " + secret[:half]).encode())
time.sleep(0.3)
os.write(1, (secret[half:] + " end\n").encode())
os.write(2, ("stderr " + secret + "\n").encode())
sys.stdout.write("x" * 70000 + secret[:5])
sys.stdout.flush()
time.sleep(0.2)
sys.stdout.write(secret[5:] + "\n")
sys.stdout.flush()
print("a near miss " + secret[:-1] + "!", flush=True)
pathlib.Path("src").mkdir(exist_ok=True)
pathlib.Path("src/%s.txt" % os.environ["GIT_LANES_TASK"]).write_text("right\n")
'''


def test_the_executors_output_is_redacted_in_its_session_log(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["solo"])
    logs = tmp_path / "logs"
    git(root, "config", "lanes.logDir", str(logs))
    script = tmp_path / "executor.py"
    script.write_text(EXECUTOR)
    proc = run(root, "drv", f"{sys.executable} {script}", env={"GITHUB_TOKEN": SECRET})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (log,) = logs.rglob("solo-1.log")
    text = log.read_text()
    assert SECRET not in text, text[:400]
    assert "executor starts; token ***" in text
    assert "split token *** end" in text
    assert "stderr ***" in text
    assert "x" * 70000 + "***" in text
    assert "a near miss " + SECRET[:-1] + "!" in text   # (not a secret: printed as it is)
    assert SECRET not in proc.stdout + proc.stderr
    for path in Path(tmp_path).rglob("*.log"):
        assert SECRET not in path.read_text(errors="replace"), path


def test_without_a_secret_in_the_environment_the_log_is_written_as_before(tmp_path, hermetic):
    root = make_repo(tmp_path / "repo", ["solo"])
    logs = tmp_path / "logs"
    git(root, "config", "lanes.logDir", str(logs))
    script = tmp_path / "executor.py"
    script.write_text(EXECUTOR.replace('os.environ["GITHUB_TOKEN"]', '"not-a-secret-value"'))
    env = {k: v for k, v in os.environ.items()}
    proc = run(root, "drv", f"{sys.executable} {script}", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (log,) = logs.rglob("solo-1.log")
    assert "split token not-a-secret-value end" in log.read_text()
