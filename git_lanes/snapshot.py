"""A worktree's delivery as a tree, without touching its index (SPEC §5).

The delivery is HEAD plus every tracked and untracked change that neither Git nor the
multi-valued `lanes.exclude` patterns ignore. It is staged into a copy of the worktree's index
(`GIT_INDEX_FILE`), so the executor's own index, staged or not, is left exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from .gitio import Git


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
    """`<git-common-dir>/lanes/exclude`: the user's excludes plus every `lanes.exclude` pattern.

    Rewritten (atomically) only when its content changes.
    """
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
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="exclude.")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)
    return path


def _index_path(git: Git, worktree: str) -> str:
    """The worktree's index file: `.git/index`, or `<gitdir>/index` of a linked worktree's
    `.git` file (read directly: no Git process); Git answers anything unusual."""
    dot_git = os.path.join(worktree, ".git")
    if os.path.isdir(dot_git):
        return os.path.join(dot_git, "index")
    try:
        with open(dot_git, encoding="utf-8") as fh:
            first = fh.readline().strip()
    except OSError:
        first = ""
    if first.startswith("gitdir: "):
        return os.path.join(os.path.join(worktree, first[len("gitdir: "):]), "index")
    return git.out("rev-parse", "--path-format=absolute", "--git-path", "index", cwd=worktree)


def snapshot_tree(git: Git, worktree: str) -> str:
    """The tree id of the worktree's delivery; the worktree's real index is never written."""
    excludes = exclude_file(git)
    index = _index_path(git, worktree)
    with tempfile.TemporaryDirectory(prefix="git-lanes-index.") as tmp:
        temp_index = os.path.join(tmp, "index")
        if os.path.exists(index):
            shutil.copyfile(index, temp_index)
        env = {**git.env, "GIT_INDEX_FILE": temp_index}
        git.run("-c", f"core.excludesFile={excludes}", "add", "-A", cwd=worktree, env=env)
        return git.run("write-tree", cwd=worktree, env=env).stdout.decode().strip()


def worktree_clean(git: Git, worktree: str) -> bool:
    """True when `git status` (untracked files included, same excludes) shows nothing."""
    proc = git.run("--no-optional-locks", "-c", f"core.excludesFile={exclude_file(git)}", "status",
                   "--porcelain", "-z", "--untracked-files=all", cwd=worktree)
    return not proc.stdout


def changed_paths(git: Git, tree_a: str, tree_b: str) -> list[str]:
    """Sorted paths that differ between two trees (no rename detection)."""
    proc = git.run("diff-tree", "-r", "--no-renames", "--name-only", "-z", tree_a, tree_b)
    return sorted(p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p)
