"""Refs: typed names, reads from Git's own files, and every write as one of Git's ref transactions.

Each write is a compare-and-swap (`git update-ref --stdin`: start, prepare, commit) with a reflog
reason; several refs move together or not at all. A lost race raises `RefRaceError`. A Git
`.lock` file left by a killed process never stops a write for good (SPEC §15): a lock on a ref
whose writers are guarded by an `flock` the caller holds (`guarded=True`) is stale and removed
at once; any other lock is removed once it is older than 60 seconds, and a younger one is waited
for (`process.LockWait`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar, Sequence

from .process import ZERO_OID, GitError, LockWait, is_oid, locked_path

if TYPE_CHECKING:
    from .git import Git

STATE_PREFIX = "refs/notes/lanes/"
BATCH_RECORD_PREFIX = "refs/notes/lanes/batch/"
LANE_RECORD_PREFIX = "refs/notes/lanes/lane/"
EVIDENCE_REF = "refs/notes/lanes/evidence"
HEADS = "refs/heads/"
BATCH_BRANCH_PREFIX = "refs/heads/imm/"
LANE_BRANCH_PREFIX = "refs/heads/imm-lane/"

Update = tuple[str, "str | None", "str | None"]   # (ref, new or None to delete, old or None: must not exist)


def _segments(ref: str | None, prefix: str, count: int) -> list[str] | None:
    """The `count` non-empty segments of `ref` after `prefix`, or None."""
    if not ref or not ref.startswith(prefix):
        return None
    parts = ref[len(prefix):].split("/")
    return parts if len(parts) == count and all(parts) else None


class _Branch:
    """A branch git-lanes names: `PREFIX` followed by its `FIELDS`, one segment each. Immutable,
    equal by kind and value (plain slots, not a dataclass: `dataclasses` costs a lane command's
    start-up more than all of this module)."""
    PREFIX: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]
    __slots__ = ()

    def __init__(self, *values: str, **named: str) -> None:
        values = values + tuple(named.pop(f) for f in self.FIELDS[len(values):] if f in named)
        if len(values) != len(self.FIELDS) or named:
            raise TypeError(f"{type(self).__name__} takes {', '.join(self.FIELDS)}")
        for field, value in zip(self.FIELDS, values):
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _values(self) -> tuple[str, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()   # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self.FIELDS)})"

    @property
    def name(self) -> str:
        return "/".join([self.PREFIX[len(HEADS):].rstrip("/"), *self._values()])

    @property
    def ref(self) -> str:
        return HEADS + self.name

    @classmethod
    def of_ref(cls, ref: str | None):
        """The branch `ref` names (a full ref), or None when it is not one of this kind."""
        parts = _segments(ref, cls.PREFIX, len(cls.FIELDS))
        return cls(*parts) if parts else None


class BatchBranch(_Branch):
    """`imm/<slug>`: the batch branch, moved by git-lanes only by fast-forward."""
    PREFIX = BATCH_BRANCH_PREFIX
    FIELDS = ("slug",)
    __slots__ = FIELDS
    slug: str


class LaneBranch(_Branch):
    """`imm-lane/<slug>/<task>`: one lane's branch."""
    PREFIX = LANE_BRANCH_PREFIX
    FIELDS = ("slug", "task")
    __slots__ = FIELDS
    slug: str
    task: str


def branch_ref(name: str) -> str:
    """`x` -> `refs/heads/x` (a branch name as the record stores it, as the full ref Git needs)."""
    return HEADS + name


def short_branch(ref: str | None) -> str | None:
    """`refs/heads/x` -> `x` (None stays None; anything else is returned as is)."""
    return ref[len(HEADS):] if ref and ref.startswith(HEADS) else ref


def batch_record_ref(slug: str) -> str:
    return BATCH_RECORD_PREFIX + slug


def lane_record_ref(slug: str, task: str) -> str:
    return f"{LANE_RECORD_PREFIX}{slug}/{task}"


class RefRaceError(Exception):
    """A compare-and-swap lost: a ref no longer holds the expected value."""


_RACE = ("but expected", "reference already exists", "unable to resolve reference")


_PER_WORKTREE = ("refs/worktree/", "refs/bisect/", "refs/rewritten/")
_VALID: dict[str, bool] = {}   # ref name -> whether `git check-ref-format` accepts it


class Refs:
    """The refs of one repository: read from Git's files directly (loose refs, then `packed-refs`;
    no process, no dulwich to import), written through Git's own ref transactions."""

    def __init__(self, git: "Git") -> None:
        self.git = git
        self._packed: tuple[tuple[int, int], dict[str, str]] | None = None

    def resolve(self, ref: str) -> str | None:
        """The object id a full ref name points at (following symbolic refs), or None."""
        for _ in range(5):
            if ".." in ref or ref.startswith("/") or "\0" in ref:
                return None
            per_worktree = ref == "HEAD" or ref.startswith(_PER_WORKTREE)
            path = os.path.join(self.git.git_dir if per_worktree else self.git.common_dir, *ref.split("/"))
            try:
                with open(path, "rb") as fh:
                    data = fh.read().strip()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return None if per_worktree else self.packed().get(ref)
            if data.startswith(b"ref: "):
                ref = data[5:].decode("utf-8", "surrogateescape")
                continue
            value = data.decode("ascii", "replace")
            return value if is_oid(value) else None
        return None

    def garbage(self, ref: str) -> str | None:
        """What a loose ref's file holds when it names neither an object id nor another ref (a tampered
        ref: Git calls it broken and skips it), shown short; None otherwise."""
        if ".." in ref or ref.startswith("/") or "\0" in ref or self.resolve(ref) is not None:
            return None
        try:
            with open(os.path.join(self.git.common_dir, *ref.split("/")), "rb") as fh:
                data = fh.read(64)
        except OSError:
            return None
        return None if data.startswith(b"ref: ") else repr(data.strip()[:40].decode("ascii", "replace"))

    def packed(self) -> dict[str, str]:
        """{ref: oid} of `packed-refs`, read again only when the file changed."""
        path = os.path.join(self.git.common_dir, "packed-refs")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        if self._packed is None or self._packed[0] != stamp:
            found = {}
            with open(path, "rb") as fh:
                for line in fh:
                    if line[:1] in (b"#", b"^"):
                        continue
                    oid, _, name = line.rstrip(b"\n").partition(b" ")
                    found[name.decode("utf-8", "surrogateescape")] = oid.decode("ascii", "replace")
            self._packed = (stamp, found)
        return self._packed[1]

    def under(self, *prefixes: str) -> dict[str, str]:
        """{full ref: oid} for every ref under any of `prefixes` (one `for-each-ref`)."""
        proc = self.git.run("for-each-ref", "--format=%(objectname) %(refname)", *prefixes)
        result = {}
        for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
            oid, _, name = line.partition(" ")
            result[name] = oid
        return result

    def update(self, updates: Sequence[Update], reason: str, *, guarded: bool = False) -> None:
        """One transaction; `old` None means the ref must not exist, `new` None deletes it.

        `guarded`: the caller holds the `flock` that every writer of these refs takes, so a
        `.lock` file on one of them can only be a dead process's. Raises RefRaceError when any
        ref moved."""
        if not updates:
            return
        lines = ["start"]
        for ref, new, old in updates:
            expect = old or ZERO_OID
            lines.append(f"delete {ref} {expect}" if new is None else f"update {ref} {new} {expect}")
        lines += ["prepare", "commit", ""]
        data = "\n".join(lines)
        wait = LockWait(self.git.warn)
        while True:
            proc = self.git.run("update-ref", "-m", reason, "--stdin", input=data, check=False)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode("utf-8", "replace")
            lock = locked_path(err)
            if lock:
                wait(lock, ours=guarded and "/" + STATE_PREFIX in lock.replace(os.sep, "/"))
                continue
            if any(text in err for text in _RACE) or ("cannot lock ref" in err and "is at" in err):
                raise RefRaceError(err.strip())
            raise GitError(["git", "update-ref", "-m", reason, "--stdin"], proc.returncode, err)

    def create(self, ref: str, new: str, reason: str) -> None:
        """Create `ref` at `new`; RefRaceError when it exists."""
        self.update([(ref, new, None)], reason)

    def delete(self, ref: str, old: str, reason: str) -> None:
        self.update([(ref, None, old)], reason)

    def reflog(self, ref: str, fmt: str) -> list[str]:
        """`git reflog show --format=<fmt> <ref>`, newest first ([] when the ref has no reflog)."""
        proc = self.git.run("reflog", "show", f"--format={fmt}", ref, "--", check=False)
        return proc.stdout.decode("utf-8", "replace").splitlines() if proc.returncode == 0 else []

    def held_before(self, ref: str, oid: str) -> bool:
        """Whether the local ref once held `oid` (its reflog says so)."""
        return oid in self.reflog(ref, "%H")

    def valid_name(self, ref: str) -> bool:
        """Git's verdict on a ref name (a pure function of the name: asked once per process)."""
        if ref not in _VALID:
            _VALID[ref] = self.git.run("check-ref-format", ref, check=False).returncode == 0
        return _VALID[ref]
