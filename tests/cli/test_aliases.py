"""Git aliases of `git lanes` work, and `git lanes aliases` manages a documented set."""

from __future__ import annotations

import json
import subprocess

import pytest
from ergonomics_helpers import run, started_batch

from git_lanes.surface.aliases import ALIASES, RECORD_KEY


def git_config(repo, *args, check=True):
    return run(["git", "config", *args], repo, check=check)


@pytest.fixture
def batch_repo(repo):
    return started_batch(repo)


def test_plain_bang_and_dash_c_aliases_reach_git_lanes(batch_repo, tmp_path):
    repo = batch_repo
    git_config(repo, "alias.lt", "lanes tick")
    git_config(repo, "alias.lst", "!git lanes status")
    git_config(repo, "alias.lshow", "!git-lanes show")

    doc = json.loads(run(["git", "lt", "--json"], repo).stdout)
    assert doc["slug"] == "demo" and doc["batch_state"] == "running"

    # from another directory, through git -C
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    doc = json.loads(run(["git", "-C", str(repo), "lt", "--json"], elsewhere).stdout)
    assert doc["slug"] == "demo"

    # a !-alias runs in the top of the worktree, with git -C too
    doc = json.loads(run(["git", "-C", str(repo / ".lanes"), "lst", "--json"], elsewhere).stdout)
    assert [c["task_id"] for c in doc["children"]] == ["lexer", "parser"]
    doc = json.loads(run(["git", "-C", str(repo), "lshow", "lexer", "--json"], elsewhere).stdout)
    assert doc["child"]["task_id"] == "lexer"

    # git -c reaches git-lanes' configuration through an alias
    proc = run(["git", "-c", "alias.lv=lanes --version", "lv"], repo)
    assert proc.stdout.startswith("git-lanes version ")


def test_alias_exit_codes_pass_through(batch_repo):
    git_config(batch_repo, "alias.lt", "lanes tick")
    proc = run(["git", "lt", "--max-parallel", "3"], batch_repo, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: batch_parallel_mismatch: ")
    proc = run(["git", "lt", "--no-such-option"], batch_repo, check=False)
    assert proc.returncode == 2 and proc.stdout == ""


def _local_aliases(repo) -> dict[str, str]:
    proc = git_config(repo, "--local", "--get-regexp", r"^alias\.", check=False)
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


def _recorded(repo) -> list[str]:
    return git_config(repo, "--local", "--get-all", RECORD_KEY, check=False).stdout.split()


def test_install_is_idempotent_and_uninstall_removes_only_ours(repo):
    git_config(repo, "alias.lsh", "log --stat")          # the user's own, different
    git_config(repo, "alias.lst", "lanes status")        # the user's own, identical
    git_config(repo, "alias.co", "checkout")             # unrelated

    proc = run(["git", "lanes", "aliases", "--install"], repo)
    assert "warning: alias.lsh is already 'log --stat'" in proc.stderr
    installed = _local_aliases(repo)
    assert installed["alias.lsh"] == "log --stat"
    assert installed["alias.lt"] == "lanes tick"
    ours = [name for name in ALIASES if name not in ("lsh", "lst")]
    assert _recorded(repo) == ours
    config_after_first = (repo / ".git" / "config").read_bytes()

    proc = run(["git", "lanes", "aliases", "--install"], repo)
    assert (repo / ".git" / "config").read_bytes() == config_after_first   # nothing written
    assert "alias.lt = lanes tick is already installed" in proc.stdout

    listing = run(["git", "lanes", "aliases"], repo).stdout
    assert "(installed)" in listing and "(yours: log --stat)" in listing and "(yours (same))" in listing

    git_config(repo, "alias.llog", "log -1")              # changed by the user after install
    proc = run(["git", "lanes", "aliases", "--uninstall"], repo)
    assert "alias.llog was changed" in proc.stderr
    left = _local_aliases(repo)
    assert left == {"alias.lsh": "log --stat", "alias.lst": "lanes status", "alias.co": "checkout",
                    "alias.llog": "log -1"}
    assert _recorded(repo) == []

    proc = run(["git", "lanes", "aliases", "--uninstall"], repo)
    assert proc.stdout.strip() == "no alias installed by git-lanes"
    assert _local_aliases(repo) == left


def test_installed_alias_runs(batch_repo):
    run(["git", "lanes", "aliases", "--install"], batch_repo)
    doc = json.loads(run(["git", "lt", "--json"], batch_repo).stdout)
    assert doc["batch_state"] == "running"
    out = run(["git", "lsh", "parser"], batch_repo).stdout
    assert out.startswith("parser: pending (batch demo-")   # (v3) show as a person reads it


def test_a_global_alias_is_never_shadowed(repo):
    subprocess.run(["git", "config", "--global", "alias.lt", "log --oneline"], check=True)
    proc = run(["git", "lanes", "aliases", "--install"], repo)
    assert "warning: alias.lt is already 'log --oneline'" in proc.stderr
    assert "alias.lt" not in _local_aliases(repo)
    assert "lt" not in _recorded(repo)


def test_aliases_go_to_the_repository_not_the_user(repo, hermetic):
    before = (hermetic / ".gitconfig").read_text()
    run(["git", "lanes", "aliases", "--install"], repo)
    assert (hermetic / ".gitconfig").read_text() == before
    # a linked worktree shares them
    run(["git", "worktree", "add", "-q", "--detach", str(repo.parent / "wt")], repo)
    proc = run(["git", "config", "--get", "alias.lt"], repo.parent / "wt")
    assert proc.stdout.strip() == "lanes tick"
