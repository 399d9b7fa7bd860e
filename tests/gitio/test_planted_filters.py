"""Nothing planted in a lane runs in the coordinator (docs/security.md, issue 29 item 20).

A lane is a linked worktree: its `config.worktree` (and whatever that file includes), the shared
`info/attributes` and its own `.git` file are all the executor's to write. A clean/smudge/process
filter (or a diff textconv) planted there must never run in a coordinator command — whose
environment holds the user's tokens. Each test plants a filter whose command writes a marker file
outside the repository and runs coordinator commands through the installed `git lanes`; the marker
never appears.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import deliver, git_lanes, lane_path, write_initiative


def _start(repo: Path) -> Path:
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    git_lanes(repo, "start", "demo", "--yes")
    report = json.loads(git_lanes(repo, "provision", "a", "--json").stdout)
    return Path(lane_path(report, "a"))


def _evil(marker: Path) -> str:
    """A filter command that leaves `marker` behind (and passes the content through)."""
    return f"sh -c 'echo ran >> {marker}; cat'"


def _driver(marker: Path, name: str = "evil") -> str:
    cmd = _evil(marker).replace("\\", "\\\\").replace('"', '\\"')
    return (f'[filter "{name}"]\n\tclean = "{cmd}"\n\tsmudge = "{cmd}"\n\trequired = true\n'
            f'[diff "{name}"]\n\ttextconv = "{cmd}"\n')


def _admin(lane: Path) -> Path:
    return Path(git(lane, "rev-parse", "--path-format=absolute", "--git-dir").strip())


def _coordinator_commands(repo: Path, lane: Path, env: dict[str, str], marker: Path) -> list[tuple[str, int]]:
    """Every coordinator command that reads the lane: (command, exit code); the marker never appears."""
    ran = []
    for args in (["status"], ["status", "--json"], ["show", "a"], ["diff", "a"], ["tick"], ["integrate"],
                 ["audit"], ["show", "a"], ["diff", "a"], ["release", "a"]):
        proc = subprocess.run(["git", "lanes", *args], cwd=repo, env=env, capture_output=True, text=True)
        assert "Traceback" not in proc.stderr, proc.stderr
        ran.append((" ".join(args), proc.returncode))
        assert not marker.exists(), f"a planted filter ran in the coordinator during {ran}: {proc.stderr}"
    return ran


@pytest.fixture
def token_env():
    return dict(os.environ, GITHUB_TOKEN="ghp_" + "s3cret" * 4)


@pytest.mark.parametrize("how", ["include", "includeIf", "worktree", "info-attributes"])
def test_a_filter_planted_in_a_lane_never_runs_in_a_coordinator_command(repo, tmp_path, token_env, how):
    lane = _start(repo)
    marker = tmp_path / "marker"
    git(repo, "config", "extensions.worktreeConfig", "true")
    own = _admin(lane) / "config.worktree"
    planted = tmp_path / "planted.cfg"
    planted.write_text(_driver(marker))
    if how == "include":
        own.write_text(f"[include]\n\tpath = {planted}\n")
    elif how == "includeIf":
        own.write_text(f'[includeIf "gitdir:{lane}/"]\n\tpath = {planted}\n'
                       f'[includeIf "onbranch:imm-lane/**"]\n\tpath = {planted}\n')
    else:
        own.write_text(_driver(marker))
    if how == "info-attributes":
        info = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip()) / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text("* filter=evil diff=evil\n")
        deliver(str(lane), {"src/a/x": "a\n"})
    else:
        deliver(str(lane), {"src/a/.gitattributes": "* filter=evil diff=evil\n", "src/a/x": "a\n"})
    assert git(lane, "config", "--get", "filter.evil.clean")   # Git in the lane does see it
    done = subprocess.run(["git", "lanes", "done"], cwd=lane, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    marker.unlink(missing_ok=True)   # the lane's own commands are the lane's business
    ran = _coordinator_commands(repo, lane, token_env, marker)
    assert ("release a", 0) in ran and not lane.exists()


@pytest.mark.parametrize("delivered", [True, False])
def test_a_lane_whose_git_file_points_at_a_repository_it_made_is_never_run_in(repo, tmp_path, token_env, delivered):
    lane = _start(repo)
    marker = tmp_path / "marker"
    deliver(str(lane), {"src/a/x": "a\n"})
    if delivered:
        assert subprocess.run(["git", "lanes", "done"], cwd=lane, capture_output=True, text=True).returncode == 0
    fake = tmp_path / "fake.git"
    git(tmp_path, "init", "-q", "--bare", str(fake))
    with open(fake / "config", "a") as fh:
        fh.write(_driver(marker))
        fh.write("[core]\n\tbare = false\n")
    (fake / "info").mkdir(exist_ok=True)
    (fake / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    (lane / ".git").write_text(f"gitdir: {fake}\n")
    for args in (["diff", "a"], ["show", "a"], ["status"], ["tick"], ["audit"]):
        proc = subprocess.run(["git", "lanes", *args], cwd=repo, env=token_env, capture_output=True, text=True)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert not marker.exists(), f"the lane's own repository's filter ran during {args}: {proc.stderr}"
    child = json.loads(git_lanes(repo, "status", "--json").stdout)["children"][0]
    assert child["state"] == "needs_human" and child["reason"].startswith("batch_lane_lost: ")
    assert "does not lead to this repository" in child["reason"]
