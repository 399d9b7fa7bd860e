"""A worktree's delivery (SPEC §5): HEAD plus every tracked and untracked change that neither Git
nor the multi-valued `lanes.exclude` patterns ignore, as a tree, without touching its index.
"""

from __future__ import annotations

import os

from ..core.errors import LanesError
from ..gitio import Git, quote_path
from ..gitio.tempnames import new_file


def _user_excludes(git: Git) -> str | None:
    """The path of the user's global excludes file (`core.excludesFile` or its default)."""
    configured = git.config_get("core.excludesFile")
    if configured is not None:
        if not configured.strip():
            return None
        if configured.startswith("~/"):
            return os.path.join(git.env.get("HOME", ""), configured[2:])
        return os.path.join(git.toplevel or git.cwd, os.path.expanduser(configured))
    xdg = git.env.get("XDG_CONFIG_HOME")
    base = xdg if xdg else os.path.join(git.env.get("HOME", ""), ".config")
    return os.path.join(base, "git", "ignore")


def exclude_file(git: Git) -> str:
    """`<git-common-dir>/lanes/exclude`: the user's excludes plus every `lanes.exclude` pattern,
    rewritten (atomically) only when its content changes."""
    content = b""
    user = _user_excludes(git)
    if user and os.path.isfile(user):
        with open(user, "rb") as f:
            content = f.read()
        if content and not content.endswith(b"\n"):
            content += b"\n"
    for pattern in git.config_all("lanes.exclude"):
        content += pattern.encode("utf-8", "surrogateescape") + b"\n"
    folder = os.path.join(git.common_dir, "lanes")
    path = os.path.join(folder, "exclude")
    try:
        with open(path, "rb") as f:
            if f.read() == content:
                return path
    except FileNotFoundError:
        pass
    os.makedirs(folder, exist_ok=True)
    fd, tmp = new_file(folder, "exclude.")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)
    return path


def snapshot_tree(git: Git, worktree: str, *, keep: bool = False) -> str:
    """The tree id of the worktree's delivery; the worktree's real index is never written (with
    `keep`, the index of that tree is kept for `Worktrees.install_index`)."""
    return git.work.snapshot(worktree, exclude_file(git), keep=keep)


def still_delivers(git: Git, worktree: str, tree: str, *, keep: bool = False) -> bool:
    """Whether the worktree's delivery is still `tree`: cheaply, through the index a
    `snapshot_tree(keep=True)` of it left, else by snapshotting again (with `keep`, as that did)."""
    quick = git.work.still_delivers(worktree, tree, exclude_file(git))
    return quick if quick is not None else snapshot_tree(git, worktree, keep=keep) == tree


def worktree_clean(git: Git, worktree: str) -> bool:
    """True when `git status` (untracked files included, same excludes) shows nothing, and, where the
    index marks entries assume-unchanged or skip-worktree (which `git status` looks past), the
    worktree's delivery is its HEAD's tree."""
    excludes = exclude_file(git)
    if not git.work.is_clean(worktree, excludes):
        return False
    if not git.work.marked(worktree):
        return True
    return git.work.snapshot(worktree, excludes) == git.out("rev-parse", "--verify", "HEAD^{tree}", cwd=worktree)


def half_removed(git: Git, worktree: str) -> bool:
    """What a `git worktree add` or `remove` killed half-way leaves (remove deletes the files first,
    then the registration): the `.git` file gone or half written, metadata Git cannot read, or
    nothing but missing files in `git status`."""
    from ..gitio import GitError

    if not git.work.gitfile_ok(worktree):   # its `.git` file gone or half written
        return os.path.isdir(worktree)
    try:
        entries = git.work.status(worktree)
    except GitError:
        return True   # its metadata half written: Git cannot read it any more
    except LanesError:
        if os.path.isdir(worktree):
            raise
        return False   # the folder went meanwhile (a release racing a reader): removed, not half
    return bool(entries) and all(e.xy == " D" for e in entries)


def changed_paths(git: Git, tree_a: str, tree_b: str) -> list[str]:
    """Sorted paths that differ between two trees (no rename detection), as Git shows them."""
    return [quote_path(p) for p in git.odb.diff_paths(tree_a, tree_b)]


SNAPSHOT_IDENT = "git-lanes <git-lanes@localhost>"


def keep_lane_work(git: Git, task_id: str, path: str | None, tip: str | None, why: str) -> tuple[str | None, str | None]:
    """(the commit that keeps a lane's work: its branch tip, or a commit on top of it holding the lane's
    uncommitted work (§5's snapshot), the snapshot commit or None when the lane was clean). For a lane
    about to be removed (a restart, `retire`, `release --stale`, SPEC §17.1 v4); writes objects only."""
    import time

    if tip is None or not path or not os.path.isdir(path):
        return tip, None
    tree = snapshot_tree(git, path)
    if tree == git.odb.tree_of(tip):
        return tip, None
    keep = git.odb.write_commit(tree, [tip], f"git-lanes: the uncommitted work of {task_id}'s {why} lane\n\n"
                                             f"Lanes-Task: {task_id}\n",
                                author=SNAPSHOT_IDENT, committer=SNAPSHOT_IDENT, author_time=int(time.time()))
    return keep, keep
