"""`run` continuing a batch prints where it is now, and its summary has no empty sections (SPEC §17.1 v4),
through the installed `git lanes`."""

from __future__ import annotations

import subprocess
import sys

from flow import child_of, cli, done, exists, intent, ok, provision, start, write_plan

EXECUTOR = ("import os, pathlib\nt = os.environ['GIT_LANES_TASK']\np = pathlib.Path('src') / t\n"
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
    script.write_text(EXECUTOR)
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
