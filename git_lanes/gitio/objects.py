"""The object database: blobs, trees and commits read and built in-process (dulwich), plus the
few questions about history that Git's plumbing answers in one call (ancestry, merge-tree).

Objects are written as loose objects through a temporary file and a rename, never through a
`.lock` file: objects are content-addressed, so a process killed mid-write leaves at most a
temporary file that no later write waits for (SPEC §15). Trees are built from the entries that
changed, reusing every unchanged subtree: a write costs in proportion to what changed.

Paths are `str` decoded with `surrogateescape`, so a name that is not valid UTF-8 round-trips
exactly (`os.fsencode` gives its bytes back); `quote_path` shows it the way Git does.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Mapping

from .process import GitError

if TYPE_CHECKING:
    from .git import Git

TREE_MODE = 0o040000
FILE_MODES = (0o100644, 0o100755)
DELETED = ("000000", "0" * 40)
_CACHE_MAX = 8192

# Git objects never change: what was read of a tree or a blob is kept by id.
_FLAT: dict[str, dict[str, str]] = {}
_BLOBS: dict[str, bytes] = {}


def _enc(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _dec(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def quote_path(path: str) -> str:
    """A path as Git prints it (`core.quotePath`): C-quoted when it holds a byte Git quotes."""
    raw = _enc(path)
    if all(32 <= b < 127 and b not in (34, 92) for b in raw):
        return path
    escapes = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}
    out = []
    for b in raw:
        if b in escapes:
            out.append("\\" + escapes[b])
        elif 32 <= b < 127:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def trailers(message: str, prefix: str = "Lanes-") -> dict[str, str]:
    """The `<prefix>Key: value` lines of a commit message (the last of a key wins)."""
    found = {}
    for line in message.splitlines():
        if line.startswith(prefix) and ": " in line:
            key, _, value = line.partition(": ")
            found[key] = value
    return found


@dataclass(frozen=True)
class TreeEntry:
    name: str
    mode: int
    oid: str


@dataclass(frozen=True)
class CommitInfo:
    oid: str
    tree: str
    parents: tuple[str, ...]
    author: str
    author_time: int
    committer: str
    commit_time: int
    message: str

    @property
    def subject(self) -> str:
        return self.message.split("\n", 1)[0]

    @property
    def trailers(self) -> dict[str, str]:
        return trailers(self.message)


class MissingObject(GitError):
    """An object a ref or record names is not in the repository (or not of the kind expected)."""

    def __init__(self, oid: str, what: str) -> None:
        super().__init__(["git", "cat-file", "-t", oid], 128, f"{oid}: {what}")


class ObjectDB:
    def __init__(self, git: "Git") -> None:
        self.git = git

    @cached_property
    def repo(self):
        from dulwich.repo import Repo

        return Repo(self.git.common_dir, bare=True)

    @cached_property
    def store(self):
        return self.repo.object_store

    # -- reads ---------------------------------------------------------------------------------

    def has(self, oid: str) -> bool:
        try:
            return oid.encode() in self.store
        except (ValueError, AssertionError):
            return False

    def _get(self, oid: str, kind: bytes):
        try:
            obj = self.store[oid.encode()]
        except (KeyError, ValueError, AssertionError):
            raise MissingObject(oid, "no such object") from None
        if obj.type_name != kind:
            raise MissingObject(oid, f"a {obj.type_name.decode()}, not a {kind.decode()}")
        return obj

    def kind(self, oid: str) -> str | None:
        try:
            return self.store[oid.encode()].type_name.decode()
        except (KeyError, ValueError, AssertionError):
            return None

    def commit(self, oid: str) -> CommitInfo:
        c = self._get(oid, b"commit")
        return CommitInfo(oid=oid, tree=c.tree.decode(), parents=tuple(p.decode() for p in c.parents),
                          author=_dec(c.author), author_time=c.author_time, committer=_dec(c.committer),
                          commit_time=c.commit_time, message=c.message.decode("utf-8", "replace"))

    def tree_of(self, rev: str) -> str:
        """The tree of a commit, or the tree itself."""
        obj = self.store[rev.encode()] if self.has(rev) else None
        if obj is None:
            raise MissingObject(rev, "no such object")
        if obj.type_name == b"commit":
            return obj.tree.decode()
        if obj.type_name == b"tree":
            return rev
        raise MissingObject(rev, f"a {obj.type_name.decode()}, not a commit or tree")

    def blob(self, oid: str) -> bytes:
        data = _BLOBS.get(oid)
        if data is None:
            data = self._get(oid, b"blob").data
            if len(_BLOBS) >= _CACHE_MAX:
                _BLOBS.clear()
            _BLOBS[oid] = data
        return data

    def entries(self, tree: str) -> list[TreeEntry]:
        return [TreeEntry(_dec(e.path), e.mode, e.sha.decode()) for e in self._get(tree, b"tree").iteritems()]

    def entry_at(self, treeish: str, path: str) -> TreeEntry | None:
        """The entry at `path` in a commit's or a tree's tree, or None (absent, or below a file)."""
        from dulwich.object_store import tree_lookup_path

        try:
            mode, sha = tree_lookup_path(self.store.__getitem__, self.tree_of(treeish).encode(), _enc(path))
        except (KeyError, MissingObject):
            return None
        except Exception:      # NotTreeError: a file where a folder would be
            return None
        return TreeEntry(path.rsplit("/", 1)[-1], mode, sha.decode())

    def blob_at(self, treeish: str, path: str) -> bytes | None:
        """The bytes of the file at `path`, or None."""
        entry = self.entry_at(treeish, path)
        if entry is None or entry.mode == TREE_MODE or entry.mode == 0o160000:
            return None
        return self.blob(entry.oid)

    def flat(self, tree: str) -> dict[str, str]:
        """{path: blob id} of every file below a tree (cached by tree id)."""
        found = _FLAT.get(tree)
        if found is None:
            found = {}
            for entry in self.entries(tree):
                if entry.mode == TREE_MODE:
                    for sub, oid in self.flat(entry.oid).items():
                        found[entry.name + "/" + sub] = oid
                else:
                    found[entry.name] = entry.oid
            if len(_FLAT) >= _CACHE_MAX:
                _FLAT.clear()
            _FLAT[tree] = found
        return found

    # -- writes ----------------------------------------------------------------------------------

    def _add(self, obj) -> str:
        """Write one object as a loose object, lock-free; its id."""
        oid = obj.id.decode()
        if obj.id in self.store:
            return oid
        folder = os.path.join(self.store.path, oid[:2])
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="tmp_obj_", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(obj.as_legacy_object())
            os.chmod(tmp, 0o444)
            os.replace(tmp, os.path.join(folder, oid[2:]))
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return oid

    def write_blob(self, data: bytes) -> str:
        from dulwich.objects import Blob

        return self._add(Blob.from_string(data))

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        from dulwich.objects import Tree

        tree = Tree()
        for e in entries:
            tree.add(_enc(e.name), e.mode, e.oid.encode())
        return self._add(tree)

    def update_tree(self, base: str | None, changes: Mapping[str, str | None]) -> str | None:
        """Apply {path: blob id (mode 100644) or None (delete)} to a tree, reusing unchanged
        subtrees; None when the result is empty."""
        entries = {e.name: e for e in self.entries(base)} if base is not None else {}
        by_dir: dict[str, dict[str, str | None]] = {}
        for path, oid in changes.items():
            head, sep, rest = path.partition("/")
            if sep:
                by_dir.setdefault(head, {})[rest] = oid
            elif oid is None:
                entries.pop(head, None)
            else:
                entries[head] = TreeEntry(head, 0o100644, oid)
        for name, sub in by_dir.items():
            old = entries.get(name)
            new = self.update_tree(old.oid if old is not None and old.mode == TREE_MODE else None, sub)
            if new is None:
                entries.pop(name, None)
            else:
                entries[name] = TreeEntry(name, TREE_MODE, new)
        return self.write_tree(entries.values()) if entries else None

    def write_commit(self, tree: str, parents: Iterable[str], message: str, *, author: str, committer: str,
                     author_time: int, commit_time: int | None = None, timezone: int = 0) -> str:
        from dulwich.objects import Commit

        c = Commit()
        c.tree = tree.encode()
        c.parents = [p.encode() for p in parents]
        c.author = _enc(author)
        c.committer = _enc(committer)
        c.author_time = author_time
        c.commit_time = author_time if commit_time is None else commit_time
        c.author_timezone = c.commit_timezone = timezone
        c.encoding = b"UTF-8"
        c.message = message.encode("utf-8", "surrogateescape")
        return self._add(c)

    # -- comparing trees ---------------------------------------------------------------------------

    def change_identity(self, a: str, b: str) -> dict[str, tuple[str, str]]:
        """{path: (new mode, new blob)} of the change a -> b (commits or trees; a deletion is
        ("000000", zeros)). In-process, skipping unchanged subtrees."""
        from dulwich.diff_tree import tree_changes

        out: dict[str, tuple[str, str]] = {}
        for change in tree_changes(self.store, self.tree_of(a).encode(), self.tree_of(b).encode()):
            new, old = change.new, change.old
            if new is not None and new.path is not None:
                out[_dec(new.path)] = (f"{new.mode:06o}", new.sha.decode())
            if old is not None and old.path is not None and (new is None or new.path != old.path):
                out.setdefault(_dec(old.path), DELETED)
        return out

    def diff_paths(self, a: str, b: str, pathspecs: Iterable[str] | None = None) -> list[str]:
        """Sorted paths that differ between two trees (or commits), limited to `pathspecs`."""
        specs = list(pathspecs) if pathspecs is not None else []
        raw = self.git.run("diff-tree", "-r", "--no-renames", "--name-only", "-z", "--no-commit-id", a, b,
                           *(["--", *specs] if specs else [])).stdout
        return sorted(_dec(p) for p in raw.split(b"\0") if p)

    def name_status(self, a: str, b: str) -> list[tuple[str, str]]:
        """(Git's status letter A/M/D/T, path) of every path that differs between two trees (or commits),
        renames off, sorted by path."""
        raw = self.git.run("diff-tree", "-r", "--no-renames", "--name-status", "-z", "--no-commit-id", a, b).stdout
        items = raw.split(b"\0")
        pairs = [(items[i].decode(), _dec(items[i + 1])) for i in range(0, len(items) - 1, 2) if items[i]]
        return sorted(pairs, key=lambda p: _enc(p[1]))

    def show_diff(self, a: str, b: str, options: Iterable[str] = ()) -> int:
        """`git diff [OPTIONS] --no-renames A B` on the user's terminal, as `git diff` shows it (pager and
        colour as Git's own configuration says); Git's exit code."""
        from .process import SAFE_CONFIG, attached, scrubbed_env

        argv = ["git", *SAFE_CONFIG, f"--git-dir={self.git.git_dir}", "diff", *options, "--no-renames", a, b]
        env = scrubbed_env(self.git._environ, self.git.local_env_vars)   # the user's locale and pager settings
        return attached(argv, self.git.toplevel or self.git.git_dir, env)

    # -- history -------------------------------------------------------------------------------------

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        proc = self.git.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        raise GitError(["git", "merge-base", "--is-ancestor", ancestor, descendant], proc.returncode,
                       proc.stderr.decode("utf-8", "replace"))

    def commits(self, tip: str, exclude: str, *, first_parent: bool = False) -> list[str]:
        """Commits reachable from `tip` but not from `exclude`, oldest first."""
        args = ["rev-list", "--reverse"] + (["--first-parent"] if first_parent else []) + [tip, f"^{exclude}"]
        return [c for c in self.git.out(*args).split("\n") if c]

    def messages(self, exclude: str, tip: str) -> list[tuple[str, str]]:
        """(commit, message) of every commit in exclude..tip, newest first (one `git log`)."""
        if exclude == tip:
            return []
        raw = self.git.run("log", "--format=%H%x00%B%x01", f"{exclude}..{tip}").stdout.decode("utf-8", "replace")
        found = []
        for item in raw.split("\x01"):
            item = item.strip("\n")
            if item:
                sha, _, body = item.partition("\0")
                found.append((sha.strip(), body))
        return found

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """`git merge-tree --write-tree` (Git >= 2.38): the merged tree, or None on a conflict."""
        proc = self.git.run("merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
        if proc.returncode == 1:
            return None
        if proc.returncode != 0:
            raise GitError(["git", "merge-tree", "--write-tree", ours, theirs], proc.returncode,
                           proc.stderr.decode("utf-8", "replace"))
        return proc.stdout.decode().split("\n", 1)[0].strip()

    def paths(self, rev: str, under: str) -> list[str]:
        """Every file path below `under` at `rev` (`git ls-tree`: no object database opened)."""
        proc = self.git.run("ls-tree", "-r", "-z", "--name-only", rev, "--", under, check=False)
        return [_dec(p) for p in proc.stdout.split(b"\0") if p] if proc.returncode == 0 else []

    def log_oneline(self, *revs: str) -> str:
        return self.git.run("log", "--oneline", "--no-decorate", *revs, check=False).stdout.decode("utf-8", "replace")
