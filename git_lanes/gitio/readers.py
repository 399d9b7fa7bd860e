"""Two ways to read objects, behind one interface (`ObjectDB` picks one per repository):

- `DulwichReader`: in-process through dulwich — nothing to spawn, so the coordinator's many
  reads (records of many children, trees to compare) cost no process each;
- `CatFileReader`: one long-lived `git cat-file --batch`, as git-revise does — no dulwich to
  import, so a lane-side command (`task`, `done`) starts fast.

Both answer `kind`, `read` (raw contents) and `close`; objects are parsed by `parse_tree` and
`parse_commit` below, whoever read them.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from typing import TYPE_CHECKING

from .process import is_oid

if TYPE_CHECKING:
    from .git import Git


def read_loose(objects_dir: str, oid: str) -> tuple[str, bytes] | None:
    """(kind, contents) of a loose object, None when it is not loose (or not whole)."""
    if not is_oid(oid):
        return None
    try:
        with open(os.path.join(objects_dir, oid[:2], oid[2:]), "rb") as fh:
            raw = zlib.decompress(fh.read())
    except (OSError, zlib.error):
        return None
    header, nul, body = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if not nul or not size.isdigit() or int(size) != len(body):
        return None
    return kind.decode("ascii", "replace"), body


class DulwichReader:
    """Loose objects (what this tool and a busy batch mostly read) straight from their files;
    packed ones through dulwich, which rescans the pack folder whenever an object is not packed."""

    def __init__(self, git: "Git") -> None:
        self.common_dir = git.common_dir
        self.objects_dir = os.path.join(git.common_dir, "objects")
        self._store = None

    @property
    def store(self):
        """dulwich's object store, opened (and dulwich imported) at the first object not loose."""
        if self._store is None:
            from dulwich.repo import Repo

            self._store = Repo(self.common_dir, bare=True).object_store
        return self._store

    def read(self, oid: str) -> tuple[str, bytes] | None:
        found = read_loose(self.objects_dir, oid)
        if found is not None:
            return found
        try:
            obj = self.store[oid.encode()]
        except (KeyError, ValueError, AssertionError):
            return None
        return obj.type_name.decode(), obj.as_raw_string()

    def has(self, oid: str) -> bool:
        if is_oid(oid) and os.path.exists(os.path.join(self.objects_dir, oid[:2], oid[2:])):
            return True
        try:
            return oid.encode() in self.store
        except (ValueError, AssertionError):
            return False

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


class CatFileReader:
    """Loose objects from their files too: a lane command mostly reads records written loose a moment
    ago, and then starts no `cat-file` at all."""

    def __init__(self, git: "Git") -> None:
        self.git = git
        self.objects_dir = os.path.join(git.common_dir, "objects")
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            argv = ["git", f"--git-dir={self.git.git_dir}", "cat-file", "--batch"]
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=self.git.env, cwd=self.git.git_dir)
        return self.proc

    def read(self, oid: str) -> tuple[str, bytes] | None:
        if not oid or oid.strip("0123456789abcdef"):
            return None
        found = read_loose(self.objects_dir, oid)
        if found is not None:
            return found
        proc = self._start()
        proc.stdin.write(oid.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if len(header) != 3:
            return None    # `<oid> missing` (or `ambiguous`)
        size = int(header[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)   # the newline after the contents
        return header[1].decode(), data

    def has(self, oid: str) -> bool:
        return self.read(oid) is not None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def parse_tree(data: bytes) -> list[tuple[bytes, int, str]]:
    """(name, mode, oid) of every entry of a raw tree."""
    entries = []
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = int(data[pos:space], 8)
        oid = data[nul + 1:nul + 21].hex()
        entries.append((data[space + 1:nul], mode, oid))
        pos = nul + 21
    return entries


def parse_commit(data: bytes) -> tuple[dict[bytes, list[bytes]], bytes]:
    """({header: [values]}, message) of a raw commit."""
    head, _, message = data.partition(b"\n\n")
    headers: dict[bytes, list[bytes]] = {}
    last = None
    for line in head.split(b"\n"):
        if line.startswith(b" ") and last is not None:     # a continued header (gpgsig, mergetag)
            headers[last][-1] += b"\n" + line[1:]
            continue
        key, _, value = line.partition(b" ")
        headers.setdefault(key, []).append(value)
        last = key
    return headers, message


def split_ident(value: bytes) -> tuple[bytes, int, int]:
    """(`Name <email>`, time, timezone in seconds east) of an author or committer header."""
    ident, _, rest = value.rpartition(b"> ")
    when, _, tz = rest.partition(b" ")
    sign = -1 if tz.startswith(b"-") else 1
    tz = tz.lstrip(b"+-")
    offset = sign * (int(tz[:2] or 0) * 3600 + int(tz[2:4] or 0) * 60) if tz else 0
    return ident + b">", int(when), offset
