"""The right next step at every state (SPEC §17.1, §17.6 v4), through the installed `git lanes`: a passed child
waits for the tick, a landed batch says so (and how to remove its leftovers), `run` on a completed batch of an
unchanged plan starts nothing (`--new` does), `start` lists each scope conflict once, `git lanes help` works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import git
from flow import child_of, done, exists, intent, ok, provision, start, write_plan


def simple(task: str, scope: list[str] | None = None) -> str:
    return intent(task, scope=scope or [f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))])


def human(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, input="")


def test_a_settled_child_waits_for_the_next_tick(repo):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from git_lanes.domain.session import Session

    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "ok\n"})["passed"] is True
    # the state a tick leaves when it settled a child and has not landed it yet (e.g. killed in between)
    s = Session(str(repo))
    with s.transaction("demo", "test") as tx:
        c = tx.record.child("a")
        c.state, c.settled_at, c.lane.attempt = "settled", "2026-01-02T03:04:05.000Z", 0
        tx.write("test: settled")
    report = ok(repo, "status")
    assert report["next_action"] == "a passed; the next tick lands it (git lanes tick demo)."
    assert "executor" not in report["next_action"]
    assert child_of(ok(repo, "tick"), "a")["state"] == "integrated"


def test_a_landed_batch_says_so_and_names_release_stale_while_lanes_remain(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "ok\n"})["passed"] is True
    report = ok(repo, "tick")
    assert report["batch_state"] == "completed"
    assert "git switch main && git merge --ff-only imm/demo" in report["next_action"]
    git(repo, "switch", "-q", "main")
    git(repo, "merge", "-q", "--ff-only", "imm/demo")
    report = ok(repo, "status", "demo")
    assert report["next_action"] == ("Batch completed; landed on main. Remove its leftover lanes with "
                                     "git lanes release --stale demo.")
    proc = human(repo, "release", "--stale", "demo")
    assert proc.returncode == 0, proc.stderr
    assert not lane.exists()
    assert ok(repo, "status", "demo")["next_action"] == "Batch completed; landed on main."


EXECUTOR = ("import os, pathlib; t = os.environ['GIT_LANES_TASK']; p = pathlib.Path('src') / t; "
            "p.mkdir(parents=True, exist_ok=True); (p / 'out.txt').write_text('ok')")


def test_run_on_a_completed_batch_of_the_same_plan_starts_nothing_and_new_starts_one(repo, tmp_path):
    write_plan(repo, "demo", {"a": simple("a")})
    script = tmp_path / "exec.py"
    script.write_text(EXECUTOR.replace("; ", "\n"))
    argv = ["git", "lanes", "run", "demo", "--executor", f"{sys.executable} {script}", "--yes"]
    first = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    batch = ok(repo, "status")["batch_id"]
    again = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"batch {batch} already completed this plan; nothing to start" in again.stdout
    assert "--new" in again.stdout
    assert "git switch main && git merge --ff-only imm/demo" in again.stdout   # the landing step
    assert "session" not in again.stdout.split("nothing to start")[1].split("task ")[0]
    assert ok(repo, "status")["batch_id"] == batch
    new = subprocess.run(argv + ["--new"], cwd=repo, capture_output=True, text=True, timeout=240)
    assert new.returncode == 0, new.stdout + new.stderr
    assert ok(repo, "status")["batch_id"] != batch


def test_start_lists_each_scope_conflict_once(repo):
    write_plan(repo, "demo", {"a": simple("a", ["src/shared"]), "b": simple("b", ["src/shared"]),
                              "c": simple("c", ["src/shared/c"])})
    proc = human(repo, "start", "demo")
    assert proc.returncode == 1   # no terminal, no --yes: the confirmation text, then the refusal
    text = proc.stderr
    block = text.split("scope conflicts (never run together):\n")[1].split("\nerror")[0]
    lines = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    assert lines == ["a: b, c", "b: c"], text


def test_git_lanes_help_shows_a_commands_help(repo):
    env = dict(os.environ)
    proc = subprocess.run(["git", "lanes", "help", "start"], cwd=repo, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: git lanes start [OPTIONS] SLUG")
    proc = subprocess.run(["git", "lanes", "help"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0 and "Commands:" in proc.stdout and "instruct" in proc.stdout
    proc = subprocess.run(["git", "lanes", "help", "bogus"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: no such command: bogus")
