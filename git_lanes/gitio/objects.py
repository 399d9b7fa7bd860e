"""The object database: blobs, trees and commits read (through `readers.py`) and built here, plus
the few questions about history that Git's plumbing answers in one call (ancestry, merge-tree).

Objects are written as loose objects through a temporary file and a rename, never through a
`.lock` file: objects are content-addressed, so a process killed mid-write leaves at most a
temporary file that no later write waits for (SPEC §15). Trees are built from the entries that
changed, reusing every unchanged subtree: a write costs in proportion to what changed.

Paths are `str` decoded with `surrogateescape`, so a name that is not valid UTF-8 round-trips
exactly (`os.fsencode` gives its bytes back); `quote_path` shows it the way Git does.
"""

from __future__ import annotations

import os
import zlib
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple

from .process import GitError, is_oid
from .tempnames import new_file

if TYPE_CHECKING:
    from .git import Git

TREE_MODE = 0o040000
FILE_MODES = (0o100644, 0o100755)
DELETED = ("000000", "0" * 40)
_CACHE_MAX = 8192

# Git objects never change: what was read of a tree or a blob is kept by id.
_FLAT: dict[str, dict[str, str]] = {}
_BLOBS: dict[str, bytes] = {}
_HISTORIES: dict[tuple[str, str, bool], tuple[str, ...]] = {}   # (tip, exclude, first parent) -> commits
_TREES: dict[tuple[str, str], tuple["TreeEntry", ...]] = {}       # (objects dir, tree) -> its entries
_COMMITS: dict[tuple[str, str], "CommitInfo"] = {}                # (objects dir, commit) -> it parsed


def _keep(cache: dict, key, value):
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def _enc(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _dec(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def quote_path(path: str) -> str:
    """A path fit for a record, a report or a terminal: as is when it is valid UTF-8 without control
    characters, else C-quoted the way Git quotes it (`"caf\\351.txt"`)."""
    raw = _enc(path)
    try:
        raw.decode("utf-8")
        if not any(b < 32 or b == 127 for b in raw):
            return path
    except UnicodeDecodeError:
        pass
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


class TreeEntry(NamedTuple):   # (tuples: a command pays no dataclass build at start-up)
    name: str
    mode: int
    oid: str


class CommitInfo(NamedTuple):
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
    """Reads through one reader (`readers.py`: dulwich in-process by default, `git cat-file --batch`
    for a lean command), writes loose objects itself (lock-free)."""

    def __init__(self, git: "Git", lean: bool = False) -> None:
        self.git = git
        self.lean = lean
        self._written: set[str] = set()    # objects of this repository known to be there
    @cached_property
    def reader(self):
        from .readers import CatFileReader, DulwichReader

        return CatFileReader(self.git) if self.lean else DulwichReader(self.git)

    @cached_property
    def objects_dir(self) -> str:
        return os.path.join(self.git.common_dir, "objects")

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, oid: str, kind: str) -> bytes:
        found = self.reader.read(oid)
        if found is None:
            raise MissingObject(oid, "no such object")
        if found[0] != kind:
            raise MissingObject(oid, f"a {found[0]}, not a {kind}")
        return found[1]

    def has(self, oid: str) -> bool:
        return self.reader.has(oid)

    def kind(self, oid: str) -> str | None:
        found = self.reader.read(oid)
        return found[0] if found else None

    def commit(self, oid: str) -> CommitInfo:
        from .readers import parse_commit, split_ident

        found = _COMMITS.get((self.objects_dir, oid))
        if found is not None:
            return found
        headers, message = parse_commit(self._read(oid, "commit"))
        author, author_time, _ = split_ident(headers[b"author"][0])
        committer, commit_time, _ = split_ident(headers[b"committer"][0])
        info = CommitInfo(oid=oid, tree=headers[b"tree"][0].decode(), parents=tuple(p.decode() for p in
                                                                                    headers.get(b"parent", [])),
                          author=_dec(author), author_time=author_time, committer=_dec(committer),
                          commit_time=commit_time, message=message.decode("utf-8", "replace"))
        return _keep(_COMMITS, (self.objects_dir, oid), info)

    def tree_of(self, rev: str) -> str:
        """The tree of a commit, or the tree itself."""
        known = _COMMITS.get((self.objects_dir, rev))
        if known is not None:
            return known.tree
        found = self.reader.read(rev)
        if found is None:
            raise MissingObject(rev, "no such object")
        if found[0] == "commit":
            return found[1][5:45].decode()     # `tree <oid>` is a commit's first line
        if found[0] == "tree":
            return rev
        raise MissingObject(rev, f"a {found[0]}, not a commit or tree")

    def blob(self, oid: str) -> bytes:
        data = _BLOBS.get(oid)
        if data is None:
            data = self._read(oid, "blob")
            if len(_BLOBS) >= _CACHE_MAX:
                _BLOBS.clear()
            _BLOBS[oid] = data
        return data

    def entries(self, tree: str) -> list[TreeEntry]:
        from .readers import parse_tree

        found = _TREES.get((self.objects_dir, tree))
        if found is None:
            parsed = parse_tree(self._read(tree, "tree"))
            found = _keep(_TREES, (self.objects_dir, tree),
                          tuple(TreeEntry(_dec(n), mode, oid) for n, mode, oid in parsed))
        return list(found)

    def entry_at(self, treeish: str, path: str) -> TreeEntry | None:
        """The entry at `path` in a commit's or a tree's tree, or None (absent, or below a file)."""
        try:
            tree = self.tree_of(treeish)
            parts = path.split("/")
            for i, part in enumerate(parts):
                entry = next((e for e in self.entries(tree) if e.name == part), None)
                if entry is None or (i + 1 < len(parts) and entry.mode != TREE_MODE):
                    return None
                tree = entry.oid
        except MissingObject:
            return None
        return entry

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

    # -- writes: loose objects, serialized here ----------------------------------------------------

    def _add(self, kind: str, body: bytes) -> str:
        """Write one object as a loose object through a temporary file and a rename; its id.

        An object already there (loose, or written by this process) is not written again; one that
        is only packed gets a loose copy, which Git reads the same (and `gc` drops)."""
        from ..core.digests import sha1_hex  # here: a command that only reads never loads it

        raw = f"{kind} {len(body)}".encode() + b"\0" + body
        oid = sha1_hex(raw)
        if oid in self._written:
            return oid
        folder = os.path.join(self.objects_dir, oid[:2])
        final = os.path.join(folder, oid[2:])
        if os.path.exists(final):
            self._written.add(oid)
            return oid
        fd, tmp = new_file(folder, "tmp_obj_", 0o444)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(raw))
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        self._written.add(oid)
        return oid

    def write_blob(self, data: bytes) -> str:
        return self._add("blob", data)

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        """A tree of `entries`, in Git's order (a folder sorts as if its name ended in `/`)."""
        def order(e: TreeEntry) -> bytes:
            return _enc(e.name) + (b"/" if e.mode == TREE_MODE else b"")
        body = b"".join(f"{e.mode:o} ".encode() + _enc(e.name) + b"\0" + bytes.fromhex(e.oid)
                        for e in sorted(entries, key=order))
        return self._add("tree", body)

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
        tz = f"{'-' if timezone < 0 else '+'}{abs(timezone) // 3600:02d}{abs(timezone) % 3600 // 60:02d}"
        lines = [f"tree {tree}"] + [f"parent {p}" for p in parents] + [
            f"author {author} {author_time} {tz}",
            f"committer {committer} {author_time if commit_time is None else commit_time} {tz}",
            "encoding UTF-8"]
        return self._add("commit", ("\n".join(lines) + "\n\n").encode("utf-8", "surrogateescape")
                         + message.encode("utf-8", "surrogateescape"))

    # -- comparing trees ---------------------------------------------------------------------------

    def change_identity(self, a: str, b: str) -> dict[str, tuple[str, str]]:
        """{path: (new mode, new blob)} of the change a -> b (commits or trees; a deletion is
        ("000000", zeros)). Unchanged subtrees are skipped: work in proportion to the change."""
        out: dict[str, tuple[str, str]] = {}
        self._diff(self.tree_of(a), self.tree_of(b), "", out)
        return out

    def _diff(self, a: str | None, b: str | None, prefix: str, out: dict[str, tuple[str, str]]) -> None:
        if a == b:
            return
        old = {e.name: e for e in self.entries(a)} if a else {}
        new = {e.name: e for e in self.entries(b)} if b else {}
        for name in sorted(old.keys() | new.keys()):
            x, y = old.get(name), new.get(name)
            if x is not None and y is not None and (x.mode, x.oid) == (y.mode, y.oid):
                continue
            x_dir = x is not None and x.mode == TREE_MODE
            y_dir = y is not None and y.mode == TREE_MODE
            if x_dir or y_dir:
                self._diff(x.oid if x_dir else None, y.oid if y_dir else None, f"{prefix}{name}/", out)
            if y is not None and not y_dir:
                out[prefix + name] = (f"{y.mode:06o}", y.oid)
            elif x is not None and not x_dir:
                out[prefix + name] = DELETED

    def diff_paths(self, a: str, b: str, pathspecs: Iterable[str] | None = None) -> list[str]:
        """Sorted paths that differ between two trees (or commits), limited to `pathspecs`."""
        specs = list(pathspecs) if pathspecs is not None else []
        raw = self.git.run("diff-tree", "-r", "--no-renames", "--name-only", "-z", "--no-commit-id", "--end-of-options", a, b,
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
        from .ancestry import is_ancestor

        return is_ancestor(self, ancestor, descendant)

    def commits(self, tip: str, exclude: str, *, first_parent: bool = False) -> list[str]:
        """Commits reachable from `tip` but not from `exclude`, oldest first. Between object ids the
        answer never changes: kept, and a first-parent history grown by one commit (a fast-forward)
        is extended without a process."""
        key = (tip, exclude, first_parent)
        fixed = is_oid(tip) and is_oid(exclude)
        if fixed and key in _HISTORIES:
            return list(_HISTORIES[key])
        found: list[str] | None = None
        if fixed and first_parent:
            parents = self.commit(tip).parents if self.has(tip) else ()
            below = _HISTORIES.get((parents[0], exclude, True)) if parents else None
            if below:   # the parent is not reachable from `exclude`, so neither is its child
                found = [*below, tip]
        if found is None:
            args = ["rev-list", "--reverse"] + (["--first-parent"] if first_parent else []) + \
                ["--end-of-options", tip, f"^{exclude}"]
            found = [c for c in self.git.out(*args).split("\n") if c]
        if fixed:
            if len(_HISTORIES) >= 256:
                _HISTORIES.clear()
            _HISTORIES[key] = tuple(found)
        return found

    def messages(self, exclude: str, tip: str) -> list[tuple[str, str]]:
        """(commit, message) of every commit in exclude..tip, newest first (one `git log`)."""
        if exclude == tip:
            return []
        raw = self.git.run("log", "--format=%H%x00%B%x01", "--end-of-options", f"{exclude}..{tip}").stdout.decode(
            "utf-8", "replace")
        found = []
        for item in raw.split("\x01"):
            item = item.strip("\n")
            if item:
                sha, _, body = item.partition("\0")
                found.append((sha.strip(), body))
        return found

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """`git merge-tree --write-tree` (Git >= 2.38): the merged tree, or None on a conflict."""
        proc = self.git.run("merge-tree", "--write-tree", "--no-messages", "--end-of-options", ours, theirs, check=False)
        if proc.returncode == 1:
            return None
        if proc.returncode != 0:
            raise GitError(["git", "merge-tree", "--write-tree", ours, theirs], proc.returncode,
                           proc.stderr.decode("utf-8", "replace"))
        return proc.stdout.decode().split("\n", 1)[0].strip()

    def paths(self, rev: str, under: str) -> list[str]:
        """Every file path below `under` at `rev` (`git ls-tree`: no object database opened)."""
        proc = self.git.run("ls-tree", "-r", "-z", "--name-only", "--end-of-options", rev, "--", under, check=False)
        return [_dec(p) for p in proc.stdout.split(b"\0") if p] if proc.returncode == 0 else []

    def log_oneline(self, *revs: str) -> str:
        return self.git.run("log", "--oneline", "--no-decorate", "--end-of-options", *revs,
                            check=False).stdout.decode("utf-8", "replace")
