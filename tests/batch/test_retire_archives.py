"""Retire and stale release of a dirty lane (SPEC §12, §17.1, §17.6 v4), through the installed `git lanes`:
`retire` archives and removes parked lanes in its superseded write; `release --stale` archives a dirty lane's
work (the only change it makes to a terminal record), prints each archive commit and the ignored paths it did not
keep; `audit` never recommends a command that would refuse."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import git
from flow import cli, done, exists, intent, ok, provision, record, start, write_plan


def human(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, input="")


def plan(repo: Path) -> None:
    (repo / ".gitignore").write_text("cache/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore cache")
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "out", exists("src/a/out.txt"))])})


def archived_tree_has(repo: Path, commit: str, path: str, text: str) -> bool:
    return git(repo, "show", f"{commit}:{path}") == text


def test_retire_archives_and_removes_a_dirty_parked_lane(repo):
    plan(repo)
    start(repo, "demo")
    lane = provision(repo, "a")
    (lane / "src" / "a").mkdir(parents=True)
    (lane / "src" / "a" / "half.txt").write_text("half done\n")
    code, _, err = cli(lane, "done", "--give-up", "-m", "stuck")
    assert code == 0, err
    assert ok(repo, "tick")["batch_state"] == "needs_human"
    proc = human(repo, "retire", "demo", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert not lane.exists()
    assert git(repo, "branch", "--list", "imm-lane/*") == ""
    rec = record(repo, "demo")
    assert rec["batch_state"] == "superseded"
    entries = [a for a in ok(repo, "status")["children"] if a["task_id"] == "a"]
    assert entries and entries[0]["state"] == "needs_human"
    # the archive is in the record (one write with the superseded state) and holds the uncommitted work
    log = ok(repo, "log", "demo")
    assert log[-1]["summary"].startswith("retired: needs_human -> superseded; archived a")
    snapshot = next(line.split(" kept as ")[1].strip() for line in proc.stderr.splitlines() if " kept as " in line)
    assert archived_tree_has(repo, snapshot, "src/a/half.txt", "half done\n")
    code, doc, err = cli(repo, "audit", "demo")
    assert code == 0, (doc, err)
    # the slug starts anew
    assert ok(repo, "start", "demo", "--yes")["batch_state"] == "running"


def test_release_stale_archives_a_dirty_lane_and_says_what_it_did_not_keep(repo):
    plan(repo)
    start(repo, "demo")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "ok\n"})["passed"] is True
    assert ok(repo, "tick")["batch_state"] == "completed"
    (lane / "notes.txt").write_text("my notes\n")         # uncommitted work left in a finished lane
    (lane / "cache").mkdir()
    (lane / "cache" / "big.bin").write_text("x")           # ignored: not kept anywhere
    code, doc, err = cli(repo, "audit", "demo")
    assert code == 1 and "git lanes release --stale demo" in doc["findings"][0]["detail"] if isinstance(doc, dict) \
        and doc.get("findings") else code == 1
    before = record(repo, "demo")
    proc = human(repo, "release", "--stale", "demo")
    assert proc.returncode == 0, proc.stderr
    assert not lane.exists()
    line = next(x for x in proc.stdout.splitlines() if x.startswith("removed lane a: "))
    assert "uncommitted work kept as " in line and "ignored files not kept: cache" in line
    archive = line.split("archived as ")[1].split(";")[0].split(")")[0]
    assert archived_tree_has(repo, archive, "notes.txt", "my notes\n")
    after = record(repo, "demo")
    assert after["batch_state"] == before["batch_state"] == "completed"
    code, doc, err = cli(repo, "audit", "demo")
    assert code == 0, (doc, err)
