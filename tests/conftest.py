"""Hermetic world for every test: own HOME, no system config, fixed identities and dates.

Tests live in one folder per layer of `git_lanes/` (core, gitio, store, domain, tick, lane, batch,
remote, run, board, cli, mcp, house); the shared worlds (`flow`, `helpers`, `remote_world`, …) live
here. A test module may borrow another's fixtures by its name (`from test_run import executor`), so
every layer folder is on the import path, as this one is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXED_DATE = "2026-01-02T03:04:05Z"

_HERE = Path(__file__).resolve().parent
sys.path[1:1] = [str(d) for d in sorted(_HERE.iterdir()) if d.is_dir() and any(d.glob("test_*.py"))]


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    for var in list(os.environ):
        if var.startswith(("GIT_", "GIT_LANES_")) or var in {"NO_COLOR", "GH_TOKEN", "GITHUB_TOKEN"}:
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    # the `git-lanes` installed beside this interpreter is the one `git lanes` runs
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Cody Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "cody@example.com")
    monkeypatch.setenv("GIT_AUTHOR_DATE", FIXED_DATE)
    monkeypatch.setenv("GIT_COMMITTER_DATE", FIXED_DATE)
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    yield home


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    """Run real git in `cwd`, fail the test on error, return stdout."""
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """An empty repository with one commit on main."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("hello\n")
    git(root, "add", "README")
    git(root, "commit", "-q", "-m", "initial")
    return root
