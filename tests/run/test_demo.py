"""`git lanes demo` (SPEC §13): the embedded example, end to end through the real `git lanes`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import git

from git_lanes.run.demo import CORRECTED_TASK, SLUG, TASKS, execute, initiative_files


def test_demo_runs_the_whole_initiative_to_completed(tmp_path, hermetic):
    home = tmp_path / "demo"
    root = home / SLUG          # (v3) DIR holds the project, its lanes and its logs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_"))}
    # like a fresh machine: no identity anywhere (the demo sets one in its own repository only)
    proc = subprocess.run(["git", "lanes", "demo", str(home)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # everything it made is under DIR: no lane, no log, nothing in the user's folders
    assert sorted(p.name for p in home.iterdir()) == ["logs", SLUG]
    assert list((home / "logs").rglob(f"{CORRECTED_TASK}-2.log"))
    assert not [p for p in hermetic.rglob("*") if "git-lanes" in p.name]
    # the coordinator (+ the scratch pool, which grows to the window of candidates, SPEC §8.9)
    listed = [w for w in git(root, "worktree", "list", "--porcelain").split("\n\n") if w.strip()]
    assert len([w for w in listed if f"{os.sep}lanes{os.sep}scratch{os.sep}" not in w]) == 1
    assert "completed; final verification passed" in proc.stdout
    assert f"imm({CORRECTED_TASK})" in proc.stdout                     # the summary ends with the batch log

    tasks = [t[0] for t in TASKS]
    assert len(tasks) >= 6
    # one commit per task on imm/<slug>, linear history
    assert git(root, "rev-list", "--merges", f"main..imm/{SLUG}").strip() == ""
    landed = git(root, "log", "--reverse", "--format=%(trailers:key=Lanes-Task,valueonly)%x00",
                 f"main..imm/{SLUG}")
    landed = [t.strip() for t in landed.split("\0") if t.strip()]
    assert sorted(landed) == sorted(tasks) and len(landed) == len(tasks)
    assert int(git(root, "rev-list", "--count", f"main..imm/{SLUG}")) == len(tasks)
    # the dependency chain landed in order; the two tasks sharing textkit/cli.py both did
    order = {t: i for i, t in enumerate(landed)}
    assert order["tokens"] < order["wordfreq"] < order["summary"] < order["cli-summary"]
    cli = git(root, "show", f"imm/{SLUG}:textkit/cli.py")
    assert 'COMMANDS["slug"]' in cli and 'COMMANDS["summary"]' in cli

    report = json.loads(subprocess.run(["git", "lanes", "status", SLUG, "--json"], cwd=root, capture_output=True,
                                       text=True, check=True).stdout)
    assert report["batch_state"] == "completed"
    assert report["final_verification"]["passed"] is True
    children = {c["task_id"]: c for c in report["children"]}
    assert all(c["state"] in ("integrated", "released") for c in children.values())
    assert children[CORRECTED_TASK]["corrections"] == 1           # corrected exactly once
    assert all(c["corrections"] == 0 for t, c in children.items() if t != CORRECTED_TASK)
    (correction,) = report["interventions"]
    assert correction["task_id"] == CORRECTED_TASK and correction["kind"] == "correction"
    assert "test_ties_in_alphabetical_order" in correction["text"]  # it quotes the failing output
    # the identity the demo set is its own repository's, and nothing was left dirty
    assert git(root, "config", "--local", "user.name").strip() == "git-lanes demo"
    assert git(root, "status", "--porcelain").strip() == ""
    assert git(root, "for-each-ref", "refs/heads/imm-lane/").strip() == ""


def test_demo_refuses_a_directory_that_is_not_empty(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    proc = subprocess.run(["git", "lanes", "demo", str(tmp_path / "busy")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == f"error: DIR: {tmp_path / 'busy'} exists and is not empty\n"
    assert not (tmp_path / "busy" / ".git").exists()


def test_scripted_executor_fixes_wordfreq_only_after_a_correction(tmp_path):
    (tmp_path / "textkit").mkdir()
    assert execute(CORRECTED_TASK, "Goal: ...", str(tmp_path)) == 0
    buggy = (tmp_path / "textkit" / "wordfreq.py").read_text()
    assert execute(CORRECTED_TASK, "...\n--- correction (2026-01-01T00:00:00.000Z) ---\nfix the ties\n",
                   str(tmp_path)) == 0
    fixed = (tmp_path / "textkit" / "wordfreq.py").read_text()
    assert buggy != fixed and "sorted" in fixed
    files = initiative_files(sys.executable)
    assert f".lanes/{SLUG}/initiative.toml" in files
    assert "final_checks" in files[f".lanes/{SLUG}/initiative.toml"]
