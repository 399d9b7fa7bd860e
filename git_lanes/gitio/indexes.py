"""A worktree's index files, never its real index unless asked: the snapshot of a delivery built
in a temporary index, the index such a snapshot prepares for a tree (installed under Git's own
lock protocol once HEAD holds it), and the refresh of an index to HEAD. Part of `WorkingTrees`.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING, Sequence

from .tempnames import copy_file, new_dir

if TYPE_CHECKING:
    from .git import Git

# a `git ls-files -v -z` entry whose tag is lower case (assume-unchanged) or S (skip-worktree)
_FLAGGED = re.compile(rb"(?:^|\0)(?:[a-z]|S) ")
_UNMARKED: set[tuple] = set()   # (index, inode, size, mtime) of indexes seen without such marks


class Indexes:
    git: "Git"

    def _run(self, *args: str, cwd: str | None = None, env=None, input: bytes | None = None,
             check: bool = True):
        raise NotImplementedError   # WorkingTrees runs Git for it

    def admin_dir(self, worktree: str) -> str | None:
        """The worktree's own git folder, read from its `.git` (no process); None when it cannot say."""
        dot_git = os.path.join(worktree, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        try:
            with open(dot_git, encoding="utf-8") as fh:
                first = fh.readline().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return os.path.join(worktree, first[len("gitdir: "):]) if first.startswith("gitdir: ") else None

    def drop_unfinished(self, worktree: str) -> bool:
        """Remove a worktree whose `git worktree add` was killed before it wrote `commondir`: its git
        folder (under `<common dir>/worktrees/`) still locked `initializing`, its `.git` file written.
        Git can neither run in it nor `worktree remove` it ("is not a .git file"). Only for a caller
        that knows nobody is adding it now (a scratch slot's flock). True when it removed it."""
        import shutil

        admin = self.admin_dir(worktree)
        if admin is None or os.path.realpath(os.path.dirname(admin)) != \
                os.path.realpath(os.path.join(self.git.common_dir, "worktrees")):
            return False
        try:
            with open(os.path.join(admin, "locked"), encoding="utf-8", errors="replace") as fh:
                if fh.read().strip() != "initializing":
                    return False
        except OSError:
            return False   # not locked `initializing`: an add that finished
        try:
            if os.path.getsize(os.path.join(admin, "commondir")) > 0:
                return False
        except FileNotFoundError:
            pass           # no `commondir` yet
        except OSError:
            return False
        shutil.rmtree(admin, ignore_errors=True)
        shutil.rmtree(worktree, ignore_errors=True)
        return True

    def forget_missing(self, worktree: str) -> None:
        """Drop Git's registration of `worktree` when its folder is gone (what `git worktree prune`
        does for every worktree, here for this one only: a prune beside another process's `git
        worktree add` can take that add's metadata before it is locked). For a caller that holds
        the worktree (a scratch slot's flock)."""
        import shutil

        if os.path.exists(worktree):
            return
        wanted = os.path.realpath(worktree)
        root = os.path.join(self.git.common_dir, "worktrees")
        try:
            names = os.listdir(root)
        except OSError:
            return
        for name in names:
            try:
                with open(os.path.join(root, name, "gitdir"), encoding="utf-8", errors="replace") as fh:
                    named = fh.read().strip()
            except OSError:
                continue
            if os.path.realpath(os.path.dirname(named)) == wanted:   # `gitdir` names the worktree's `.git`
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    def index_path(self, worktree: str) -> str:
        """The worktree's index file, read from its `.git` (no Git process); Git answers the rest."""
        admin = self.admin_dir(worktree)
        if admin is not None:
            return os.path.join(admin, "index")
        return self.git.out("rev-parse", "--path-format=absolute", "--git-path", "index", cwd=worktree)

    def snapshot(self, worktree: str, excludes: str | None = None, *, keep: bool = False) -> str:
        """The tree of HEAD plus every change Git does not ignore; the real index is untouched.

        With `keep`, the index this built (that tree, every entry freshly stat'ed) is left beside
        the worktree's own (`prepared_index`), for `install_index` once HEAD holds that tree."""
        index = self.index_path(worktree)
        extra = ["-c", f"core.excludesFile={excludes}"] if excludes else []
        admin = os.path.dirname(index)
        keep = keep and os.path.isdir(admin)   # built beside the index it may replace: a rename away
        if keep:
            folder = admin
        else:
            import tempfile

            folder = tempfile.gettempdir()
        with new_dir(folder, "git-lanes-index.") as tmp:
            temp_index = os.path.join(tmp, "index")
            env = {**self.git.env, "GIT_INDEX_FILE": temp_index}
            if os.path.exists(index):
                copy_file(index, temp_index)
                self._unflag(worktree, env, index)
            self._run(*extra, "add", "-A", cwd=worktree, env=env)
            tree = self._run("write-tree", cwd=worktree, env=env).stdout.decode().strip()
            if keep:
                self.drop_prepared(worktree)
                os.replace(temp_index, self.prepared_index(worktree, tree))
            return tree

    def marked(self, worktree: str) -> bool:
        """Whether the worktree's index marks any entry assume-unchanged or skip-worktree: `git status`
        looks past those, so a worktree it calls clean may still hold changes there."""
        key = _index_key(self.index_path(worktree))
        if key is not None and key in _UNMARKED:
            return False
        found = bool(_FLAGGED.search(self._run("ls-files", "-v", "-z", cwd=worktree).stdout))
        if not found and key is not None:
            _UNMARKED.add(key)
        return found

    def _unflag(self, worktree: str, env: dict[str, str], index: str) -> None:
        """Entries marked assume-unchanged, and skip-worktree ones whose file is there, lose the mark in
        the (temporary) index `env` names, a copy of `index`: `git add -A` looks past marked entries,
        and a delivery is what the files hold (SPEC §5), whatever the index was told to assume. A
        skip-worktree entry whose file is absent (a sparse checkout's) keeps it: its absence is no
        deletion. An index this process saw unmarked, unchanged since, is not listed again."""
        key = _index_key(index)
        if key is not None and key in _UNMARKED:
            return
        listed = self._run("ls-files", "-v", "-z", cwd=worktree, env=env).stdout
        if not _FLAGGED.search(listed):
            if key is not None:
                _UNMARKED.add(key)
            return
        assumed, skipped = [], []
        for entry in listed.split(b"\0"):
            tag, path = entry[:1], entry[2:]
            if tag.islower():
                assumed.append(path)
            if tag in (b"S", b"s") and os.path.lexists(os.path.join(worktree, os.fsdecode(path))):
                skipped.append(path)
        for flag, paths in (("--no-assume-unchanged", assumed), ("--no-skip-worktree", skipped)):
            if paths:   # one flag per run: Git 2.39 applies only the first of two
                self._run("update-index", flag, "-z", "--stdin", cwd=worktree, env=env,
                          input=b"".join(p + b"\0" for p in paths))

    def prepared_index(self, worktree: str, tree: str) -> str:
        """Where `snapshot(keep=True)` leaves the index of `tree`: in the worktree's own admin
        folder (the file system of its index; removed with the worktree), named after the tree."""
        return f"{self.index_path(worktree)}.git-lanes-{tree}"

    def drop_prepared(self, worktree: str) -> None:
        """Remove what `snapshot(keep=True)` left beside the worktree's index."""
        prefix = os.path.basename(self.index_path(worktree)) + ".git-lanes-"
        folder = os.path.dirname(self.index_path(worktree))
        for name in os.listdir(folder):
            if name.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))

    def still_delivers(self, worktree: str, tree: str, excludes: str | None = None) -> bool | None:
        """Whether the worktree still delivers `tree`, asked of the index `snapshot(keep=True)` left
        for it: `git add -A --dry-run` names no path (one process; a new snapshot takes two). None
        when no such index is there."""
        prepared = self.prepared_index(worktree, tree)
        if not os.path.isfile(prepared):
            return None
        extra = ["-c", f"core.excludesFile={excludes}"] if excludes else []
        env = {**self.git.env, "GIT_INDEX_FILE": prepared}
        proc = self._run(*extra, "add", "-A", "--dry-run", cwd=worktree, env=env, check=False)
        return None if proc.returncode != 0 else not proc.stdout.strip()

    def install_index(self, worktree: str, tree: str) -> bool:
        """Make the prepared index of `tree` the worktree's index (Git's own protocol: an exclusive
        `index.lock`, then a rename), so a HEAD moved to `tree` needs no `reset --mixed` (a scan of
        the whole worktree). False, nothing changed, when there is none or the index is locked."""
        index = self.index_path(worktree)
        prepared = self.prepared_index(worktree, tree)
        try:
            os.link(prepared, index + ".lock")
        except OSError:
            return False   # none prepared, or another Git command holds the index
        os.replace(index + ".lock", index)
        self.drop_prepared(worktree)
        return True

    def binary_patch(self, worktree: str, head: str, paths: Sequence[str]) -> bytes:
        """A binary patch that re-applies the worktree's versions of `paths` onto `head`, built
        with a temporary index (the worktree's own index is never touched)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="git-lanes-patch.") as tmp:
            env = {**self.git.env, "GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self._run("read-tree", head, cwd=worktree, env=env)
            data = b"".join(os.fsencode(p) + b"\0" for p in paths)
            self._run("update-index", "--add", "-z", "--stdin", cwd=worktree, env=env, input=data)
            return self._run("diff", "--cached", "--binary", "--full-index", "--no-renames", "--no-ext-diff",
                                "--no-textconv", "--no-color", "--src-prefix=a/", "--dst-prefix=b/", head,
                                cwd=worktree, env=env).stdout

    # -- writing a worktree ----------------------------------------------------------------------

    def refresh_index(self, worktree: str, tree: str | None = None) -> bool:
        """The index follows HEAD, the files stay (best effort; whether it did): the prepared index
        when it holds `tree` (HEAD's), else `git reset --mixed`."""
        if tree is not None and self.install_index(worktree, tree):
            return True
        return self._run("reset", "-q", "--mixed", cwd=worktree, check=False).returncode == 0

    def index_matches(self, worktree: str, commit: str) -> bool:
        """Whether the worktree's index holds exactly `commit`'s tree (reads only; no lock taken)."""
        return self._run("--no-optional-locks", "diff-index", "--cached", "--quiet", commit, "--",
                         cwd=worktree, check=False).returncode == 0


def _index_key(index: str) -> tuple | None:
    """What identifies one version of an index file (Git replaces it by a rename: a new inode)."""
    try:
        st = os.stat(index)
    except OSError:
        return None
    return (index, st.st_ino, st.st_size, st.st_mtime_ns)
