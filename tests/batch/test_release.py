"""`git lanes release <task>`: it removes a lane that is really there to remove, and records nothing
it did not do (SPEC §6 release, §7 step 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from helpers import deliver, git_lanes, lane_path, lanes, lanes_json, write_initiative


def integrated(repo) -> Path:
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    assert lanes_json(repo, "start", "demo", "--yes")[0] == 0
    code, report = lanes_json(repo, "provision", "a")
    assert code == 0, report
    lane = Path(lane_path(report, "a"))
    deliver(lane, {"src/a/f": "1\n"})
    assert lanes(lane, "done")[0] == 0
    code, report = lanes_json(repo, "tick")
    assert code == 0 and state(report, "a") == "integrated", report
    return lane


def state(report, task: str) -> str:
    return next(c["state"] for c in report["children"] if c["task_id"] == task)


def notes(repo) -> str:
    return git(repo, "for-each-ref", "refs/notes/")


@pytest.mark.parametrize("away", ["detached", "other-branch"])
def test_a_lane_switched_off_its_branch_is_not_released_behind_the_users_back(repo, away):
    """The user detaches the integrated lane (or switches it to a branch of theirs) and adds a file:
    there is no release handoff, the worktree is still there, so `release` refuses, naming why, and
    writes nothing: the branch stays, the child stays integrated, the user's file stays."""
    lane = integrated(repo)
    if away == "detached":
        git(lane, "switch", "-q", "--detach")
    else:
        git(lane, "switch", "-q", "-c", "mine")
    (lane / "mine.txt").write_text("mine\n")
    before, branch = notes(repo), git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip()
    code, out, err = lanes(repo, "release", "a")
    assert code == 1 and out == "", (out, err)
    assert "error: batch_lane_release_refused: " in err and str(lane) in err, err
    assert ("detached" if away == "detached" else "refs/heads/mine") in err, err
    assert (lane / "mine.txt").read_text() == "mine\n"
    assert git(repo, "rev-parse", "refs/heads/imm-lane/demo/a").strip() == branch
    assert notes(repo) == before
    code, report = lanes_json(repo, "status")
    assert state(report, "a") == "integrated"


def test_a_lane_still_on_its_branch_with_work_in_it_is_refused_naming_the_work(repo):
    lane = integrated(repo)
    (lane / "src" / "a" / "g").write_text("more\n")
    before = notes(repo)
    proc = git_lanes(repo, "release", "a", check=False)   # a fresh process: no lane seen clean before
    assert proc.returncode == 1 and "batch_lane_release_refused" in proc.stderr, proc.stderr
    assert "uncommitted work" in proc.stderr, proc.stderr
    assert (lane / "src" / "a" / "g").exists() and notes(repo) == before


def test_a_released_child_is_released_once(repo):
    """A second `release` of a released child with nothing left of its lane is refused; `--json` too."""
    lane = integrated(repo)
    code, out, err = lanes(repo, "release", "a")
    assert code == 0 and "removed lane a" in out and not lane.exists(), err
    before = notes(repo)
    code, out, err = lanes(repo, "release", "a")
    assert code == 1 and out == "" and "error: batch_lane_release_refused: a is released" in err, (out, err)
    code, out, err = lanes(repo, "release", "a", "--json")
    assert code == 1 and "batch_lane_release_refused: a is released" in err, (out, err)
    assert json.loads(out or "{}").get("released") in (None, [])
    assert notes(repo) == before


def test_a_release_killed_after_the_worktree_went_is_finished(repo):
    """The lane is really gone (the worktree removed, its branch left on the lane commit): `release`
    finishes what a killed release started, as before."""
    lane = integrated(repo)
    git(repo, "worktree", "remove", str(lane))
    code, out, err = lanes(repo, "release", "a")
    assert code == 0 and "removed lane a" in out, err
    assert git(repo, "for-each-ref", "refs/heads/imm-lane/") == ""
    code, report = lanes_json(repo, "status")
    assert state(report, "a") == "released"
