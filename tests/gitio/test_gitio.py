"""The Git gateway against real repositories."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import git
from git_lanes.core.errors import ExitCode, LanesError
from git_lanes.gitio import Git, GitError, RefRaceError, ZERO_OID


def test_discovery_from_subdirectory(repo):
    (repo / "sub" / "deep").mkdir(parents=True)
    g = Git(repo / "sub" / "deep")
    assert g.toplevel == str(repo)
    assert g.git_dir == str(repo / ".git")
    assert g.common_dir == str(repo / ".git")
    assert not g.is_bare
    assert "GIT_DIR" in g.local_env_vars


def test_discovery_in_linked_worktree(repo, tmp_path):
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(wt))
    g = Git(wt)
    assert g.toplevel == str(wt)
    assert g.common_dir == str(repo / ".git")
    assert g.git_dir != g.common_dir
    assert g.out("rev-parse", "--abbrev-ref", "HEAD") == "side"


def test_discovery_honours_git_dir_and_work_tree(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, GIT_DIR=str(repo / ".git"), GIT_WORK_TREE=str(repo))
    g = Git(elsewhere, environ=env)
    assert g.toplevel == str(repo)
    # our own git calls do not inherit GIT_DIR, yet act on the discovered repository
    assert "GIT_DIR" not in g.env
    assert g.out("rev-parse", "--show-toplevel") == str(repo)


def test_bare_repository(tmp_path):
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    g = Git(bare)
    assert g.is_bare and g.toplevel is None


def test_not_a_repository(tmp_path):
    with pytest.raises(LanesError) as exc:
        Git(tmp_path)
    assert exc.value.exit_code == ExitCode.FATAL
    assert "not a git repository" in exc.value.detail


def test_config_read_once_honours_git_c_and_includes(repo, tmp_path):
    inc = tmp_path / "inc.cfg"
    inc.write_text("[lanes]\n\tkeep = .venv/\n")
    git(repo, "config", "include.path", str(inc))
    git(repo, "config", "--add", "lanes.exclude", "__pycache__/")
    git(repo, "config", "--add", "lanes.exclude", "*.pyc")
    env = dict(os.environ, GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="lanes.lockTimeout", GIT_CONFIG_VALUE_0="7")
    g = Git(repo, environ=env)
    assert g.config_int("lanes.locktimeout", 30) == 7
    assert g.config_all("lanes.exclude") == ["__pycache__/", "*.pyc"]
    assert g.config_all("lanes.keep") == [".venv/"]
    assert g.config_get("lanes.missing", "d") == "d"
    git(repo, "config", "lanes.flag", "maybe")
    g = Git(repo)
    with pytest.raises(LanesError) as exc:
        g.config_bool("lanes.flag", False)
    assert exc.value.exit_code == ExitCode.USAGE and "lanes.flag" in exc.value.detail


def test_update_ref_is_compare_and_swap_with_reason(repo):
    g = Git(repo)
    head = g.rev_parse("HEAD")
    g.update_ref("refs/notes/lanes/test", head, None, "git-lanes: first")
    assert g.resolve("refs/notes/lanes/test") == head
    with pytest.raises(RefRaceError):
        g.update_ref("refs/notes/lanes/test", head, None, "must not exist")
    with pytest.raises(RefRaceError):
        g.update_ref("refs/notes/lanes/test", head, "1" * 40, "wrong old value")
    reflog = git(repo, "reflog", "show", "--format=%gs", "refs/notes/lanes/test")
    assert "git-lanes: first" in reflog
    g.update_ref("refs/notes/lanes/test", None, head, "delete")
    assert g.resolve("refs/notes/lanes/test") is None


def test_multi_ref_transaction_is_all_or_nothing(repo):
    g = Git(repo)
    head = g.rev_parse("HEAD")
    with pytest.raises(RefRaceError):
        g.update_refs([("refs/heads/x1", head, None), ("refs/heads/main", head, "2" * 40)], "both or none")
    assert g.resolve("refs/heads/x1") is None


def test_failing_git_call_quotes_command_and_stderr(repo):
    g = Git(repo)
    with pytest.raises(GitError) as exc:
        g.run("rev-parse", "--verify", "no-such-rev")
    err = exc.value
    assert err.exit_code == ExitCode.FATAL
    assert "rev-parse --verify no-such-rev" in err.detail
    assert "exit code 128" in err.detail
    assert "fatal" in err.detail


def test_status_and_worktrees(repo, tmp_path):
    (repo / "new file.txt").write_text("x")
    (repo / "README").write_text("changed\n")
    g = Git(repo)
    entries = {(e.xy, e.path) for e in g.status()}
    assert entries == {("??", "new file.txt"), (" M", "README")}
    wt = tmp_path / "wt2"
    git(repo, "worktree", "add", "-q", "--detach", str(wt))
    paths = {w.path: w for w in g.worktrees()}
    assert paths[str(repo)].branch == "refs/heads/main"
    assert paths[str(wt)].branch is None and paths[str(wt)].head == g.rev_parse("HEAD")


def test_ident_falls_back_without_identity(repo, monkeypatch):
    for var in ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("EMAIL", "")
    git(repo, "config", "user.useConfigOnly", "true")
    assert Git(repo).ident() == ("git-lanes", "git-lanes@localhost")


def test_zero_oid_shape():
    assert ZERO_OID == "0" * 40


def test_an_old_git_is_refused_with_the_version_named(repo, tmp_path, monkeypatch):
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\ncase "$*" in *version) echo "git version 2.30.1"; exit 0;; esac\nexec {real} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(LanesError) as exc:
        Git(repo).require_version()
    assert exc.value.exit_code == ExitCode.FATAL
    assert "needs git >= 2.38 (found 2.30)" in exc.value.detail


def test_a_prepared_index_replaces_reset_once_head_holds_its_tree(repo, tmp_path):
    """`snapshot(keep=True)` leaves the index of the tree it built; once HEAD holds that tree the
    index is installed under Git's lock protocol (the lane clean without a scan); a held
    `index.lock` or another tree installs nothing."""
    wt = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "lane", str(wt))
    (wt / "new.txt").write_text("delivered\n")
    g = Git(wt)
    tree = g.work.snapshot(str(wt), keep=True)
    assert git(wt, "status", "--porcelain").strip() == "?? new.txt"          # the real index untouched
    assert not g.work.install_index(str(wt), "0" * 40)               # prepared for another tree
    commit = git(wt, "commit-tree", tree, "-p", "HEAD", "-m", "lane commit").strip()
    git(wt, "update-ref", "refs/heads/lane", commit)
    lock = g.work.index_path(str(wt)) + ".lock"
    open(lock, "w").close()
    assert not g.work.install_index(str(wt), tree)                   # Git holds the index
    os.unlink(lock)
    assert g.work.install_index(str(wt), tree)
    assert git(wt, "status", "--porcelain") == ""
    assert not os.path.exists(g.work.prepared_index(str(wt), tree))
    assert not g.work.install_index(str(wt), tree)                   # used once


def git_listed(g: Git) -> list:
    """What `git worktree list` says now, taken afresh (no list kept from before)."""
    from git_lanes.gitio import worktrees

    worktrees._LISTED.pop(g.common_dir, None)
    return list(g.work.list())


def test_the_worktree_list_is_reused_only_while_nothing_it_reads_changed(repo, tmp_path):
    """Commands list worktrees after every lock; a list is taken again only when something `git
    worktree list` reads changed: a worktree added or gone, a HEAD switched. A branch checked out
    in a worktree that moved is the list before with that branch's new commit, as Git lists it."""
    wt = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "lane", str(wt))
    g = Git(repo)
    calls = []
    run = g.run
    g.run = lambda *a, **k: calls.append(a[:2]) or run(*a, **k)
    first = g.work.list()
    assert calls == [("worktree", "list")]
    assert Git(repo).work.list() == first and len(calls) == 1          # any session of the process
    (wt / "f").write_text("x\n")
    git(wt, "add", "f")
    git(wt, "commit", "-q", "-m", "moves the lane branch")
    git(repo, "commit", "-q", "--allow-empty", "-m", "moves the main branch")
    moved = g.work.list()
    assert len(calls) == 1 and moved.at(str(wt)).head == git(wt, "rev-parse", "HEAD").strip()
    assert moved.at(str(repo)).head == git(repo, "rev-parse", "HEAD").strip()
    assert list(moved) == git_listed(Git(repo)) and moved.on("refs/heads/lane") == moved.at(str(wt))
    git(wt, "switch", "-q", "-c", "other")
    calls.clear()
    assert g.work.list().at(str(wt)).branch == "refs/heads/other" and len(calls) == 1
    git(wt, "switch", "-q", "--detach")
    git(wt, "commit", "-q", "--allow-empty", "-m", "a detached HEAD moves")
    assert g.work.list().at(str(wt)).head == git(wt, "rev-parse", "HEAD").strip() and len(calls) == 2
    import shutil

    shutil.rmtree(wt)
    assert g.work.list().at(str(wt)).prunable and len(calls) == 3
    g.work.list()
    assert len(calls) == 3


def test_worktrees_added_moved_and_removed_are_listed_as_git_lists_them_without_asking_it(repo, tmp_path):
    """A worktree added and finished, a detached HEAD moved, a worktree removed: the list is the
    last one with that change, equal to Git's own at every step, and Git is not asked. An add
    still under way (locked), a prunable worktree or an unborn branch is left to Git."""
    from git_lanes.gitio import worktrees

    g = Git(repo)
    worktrees._LISTED.pop(g.common_dir, None)
    calls = []
    run = g.run
    g.run = lambda *a, **k: calls.append(a[:2]) or run(*a, **k)

    def same_as_git(listed) -> bool:
        return sorted(listed) == sorted(git_listed(Git(repo)))

    g.work.list()
    assert calls == [("worktree", "list")]
    a, b = tmp_path / "a b", tmp_path / "b"
    git(repo, "worktree", "add", "-q", "-b", "wa", str(a))
    git(repo, "worktree", "add", "-q", "--detach", str(b), "HEAD")
    listed = g.work.list()
    assert len(calls) == 1 and same_as_git(listed)
    assert listed.at(str(a)).branch == "refs/heads/wa" and listed.at(str(b)).branch is None
    git(b, "commit", "-q", "--allow-empty", "-m", "a detached HEAD moves")
    git(repo, "worktree", "remove", str(a))
    listed = g.work.list()
    assert len(calls) == 1 and same_as_git(listed)
    assert listed.at(str(a)) is None and listed.at(str(b)).head == git(b, "rev-parse", "HEAD").strip()
    git(repo, "worktree", "lock", str(b))
    listed = g.work.list()
    assert len(calls) == 2 and listed.at(str(b)).locked == ""       # asked: a lock is Git's to say
    git(repo, "worktree", "unlock", str(b))
    assert g.work.list().at(str(b)).locked is None and len(calls) == 3
    git(repo, "worktree", "add", "-q", "-b", "wc", str(tmp_path / "c"))
    import shutil

    shutil.rmtree(tmp_path / "c")
    listed = g.work.list()
    assert len(calls) == 4 and listed.at(str(tmp_path / "c")).prunable and same_as_git(listed)
    git(repo, "worktree", "prune")
    git(repo, "switch", "-q", "--orphan", "unborn")
    listed = g.work.list()
    assert len(calls) == 5 and listed.at(str(repo)).branch == "refs/heads/unborn" and same_as_git(listed)


@pytest.mark.parametrize("env, config, asks", [
    ({}, {}, False),                                                         # the fixture's GIT_*_NAME/EMAIL
    ({"GIT_AUTHOR_NAME": None, "GIT_COMMITTER_EMAIL": None}, {"user.name": "Uma User", "user.email": "u@x.org"},
     False),
    ({"GIT_AUTHOR_NAME": None, "GIT_AUTHOR_EMAIL": None, "GIT_COMMITTER_NAME": None},
     {"author.name": "Al Author", "user.name": "Uma", "author.email": "al@x.org", "committer.name": "Cy"}, False),
    ({"GIT_AUTHOR_NAME": "  Trim Me. ", "GIT_COMMITTER_EMAIL": "<cody@x.org>"}, {}, True),   # Git trims them
    ({"GIT_AUTHOR_EMAIL": None, "GIT_COMMITTER_EMAIL": None, "EMAIL": "env@x.org"}, {}, False),
    ({"GIT_AUTHOR_NAME": "", "GIT_COMMITTER_NAME": "Has <angle> brackets"}, {}, True),
])
def test_an_identity_read_in_process_is_the_one_git_var_gives(repo, monkeypatch, env, config, asks):
    """The author and committer identities, read from the environment and configuration without a
    process when they are given there plainly, equal `git var`'s in every case (trimmed values and
    an empty name are left to Git)."""
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    for key, value in config.items():
        git(repo, "config", key, value)
    g = Git(repo)
    calls = []
    run = g.run
    g.run = lambda *a, **k: calls.append(a[0]) or run(*a, **k)
    for kind in ("AUTHOR", "COMMITTER"):
        proc = subprocess.run(["git", "var", f"GIT_{kind}_IDENT"], cwd=repo, capture_output=True, text=True)
        name, _, rest = proc.stdout.strip().partition(" <")
        want = (name.strip(), rest.split(">", 1)[0]) if proc.returncode == 0 and name.strip() else None
        assert g.ident_or_none(kind) == want, kind
    assert ("var" in calls) == asks


def test_a_long_wait_for_a_young_git_lock_is_said_once(repo, monkeypatch):
    """A young lock is waited for, up to a minute (SPEC §15): past a moment, the wait is announced,
    once, naming the file; a merge held up by it then goes through once it is gone."""
    import threading

    import git_lanes.gitio.process as process

    monkeypatch.setattr(process, "WAIT_NOTICE", 0.3)
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    git(repo, "switch", "-q", "-c", "behind", "HEAD~1")
    lock = repo / ".git" / "HEAD.lock"
    lock.write_text("")
    said: list[str] = []
    g = Git(repo)
    g.warn = said.append
    timer = threading.Timer(1.0, lambda: lock.unlink())
    timer.start()
    try:
        g.work.fast_forward(str(repo), git(repo, "rev-parse", "main").strip())
    finally:
        timer.cancel()
    assert git(repo, "rev-parse", "behind") == git(repo, "rev-parse", "main")
    assert len(said) == 1 and said[0].startswith(f"waiting for {lock}, a Git lock file "), said


def test_the_git_binary_is_found_on_path_as_the_exec_search_finds_it(tmp_path):
    """Looked up once per PATH value: the first executable file of that name, a non-executable one
    passed over; a relative entry before it leaves the search to each start (None)."""
    from git_lanes.gitio.process import _which

    plain, runnable = tmp_path / "plain", tmp_path / "runnable"
    plain.mkdir()
    runnable.mkdir()
    (plain / "git").write_text("#!/bin/sh\n")
    (runnable / "git").write_text("#!/bin/sh\n")
    (runnable / "git").chmod(0o755)
    path = os.pathsep.join([str(plain), str(runnable), "/usr/bin"])
    assert _which("git", path) == str(runnable / "git")
    assert _which("git", os.pathsep.join(["bin", str(runnable)])) is None
    assert _which("/usr/bin/git", path) is None                       # a path is run as it is
    assert _which("no-such-program-here", path) is None


@pytest.mark.parametrize("size", [0, 1, 1 << 16, (1 << 16) + 1, 300_000])
def test_digests_are_hashlibs_whichever_implementation_takes_them(size):
    """The built-in SHA-1/SHA-256 for small data, OpenSSL's past 64 KiB: the same digests."""
    import hashlib

    from git_lanes.core.digests import sha1_hex, sha256_hex

    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert sha1_hex(data) == hashlib.sha1(data).hexdigest()
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_lane_command_imports_no_hashlib():
    """`done`'s imports (and what it hashes: records, shard names) leave OpenSSL's hashlib out."""
    code = ("import sys, git_lanes.cli.lanecmds, git_lanes.lane.side\n"
            "from git_lanes.store.layout import shard\nshard('t1')\n"
            "from git_lanes.core.canonical import sha256_digest\nsha256_digest('x')\n"
            "print('hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_exec_path_is_what_git_exec_path_prints_with_or_without_git_exec_path_set(repo, tmp_path):
    """Git exports GIT_EXEC_PATH to the `git lanes` it runs, and `git --exec-path` prints it when set: the
    gateway takes it from there (one process less per `done`) and asks Git only without it."""
    plain = {k: v for k, v in os.environ.items() if k != "GIT_EXEC_PATH"}
    asked = subprocess.run(["git", "--exec-path"], env=plain, capture_output=True, text=True, check=True).stdout.strip()
    assert Git(str(repo), environ=plain).exec_path == os.path.realpath(asked)
    link = tmp_path / "exec-path-link"
    link.symlink_to(asked)
    hosted = {**plain, "GIT_EXEC_PATH": str(link)}
    printed = subprocess.run(["git", "--exec-path"], env=hosted, capture_output=True, text=True, check=True).stdout.strip()
    assert printed == str(link)
    assert Git(str(repo), environ=hosted).exec_path == os.path.realpath(printed) == os.path.realpath(asked)
