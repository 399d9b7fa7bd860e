"""Batch records: `refs/notes/lanes/batch/<slug>`, one commit per state write (SPEC §4, §15).

A write builds only the blobs and trees that changed, keeps every commit the record refers to
reachable as an extra parent of the state commit, and moves the ref by compare-and-swap; a
write whose content equals the current record writes nothing. Every writer goes through
`transaction()`: lock, read, change, validate, write.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from ..core.digests import sha1_hex
from ..core.errors import LanesError, refused
from ..gitio import BATCH_RECORD_PREFIX, RefRaceError, batch_record_ref, trailers
from .layout import CorruptRecord, batch_files, record_from_files
from .locks import slug_lock

if TYPE_CHECKING:
    from ..core.model import BatchRecord
    from ..gitio import Git

STATE_AUTHOR = "git-lanes <git-lanes@localhost>"
Updates = Callable[[], list[tuple[str, "str | None", "str | None"]]]


def _blob_id(data: bytes) -> str:
    return sha1_hex(b"blob %d\0" % len(data) + data)


_COMMITS: set[str] = set()   # base heads found to be commits (an object never changes kind)
_REGULAR: set[str] = set()   # record trees found to hold only folders and regular files


def _regular_files(odb, tree: str, where: str) -> None:
    """A record's tree holds folders and regular files only: a symbolic link, an executable or a
    submodule entry is a tampered record (LanesError naming it)."""
    if tree in _REGULAR:
        return
    for entry in odb.entries(tree):
        if entry.mode == 0o040000:
            _regular_files(odb, entry.oid, f"{where}{entry.name}/")
        elif entry.mode != 0o100644:
            raise LanesError(f"{where}{entry.name} has mode {entry.mode:06o}, not a regular file (100644)")
    if len(_REGULAR) >= 4096:
        _REGULAR.clear()
    _REGULAR.add(tree)


class Snapshot:
    """A record as read, with what a compare-and-swap write needs. A transaction changes `record` in
    place: what the write compares against (the blobs, the commits it referred to) is kept here."""

    def __init__(self, record: "BatchRecord", commit: str | None, tree: str | None = None,
                 blobs: dict[str, str] | None = None) -> None:
        self.record = record
        self.commit = commit                  # the state commit it was read from
        self.tree = tree
        self.blobs = blobs if blobs is not None else {}   # path -> blob id
        self.referenced = frozenset(record.referenced_commits())   # kept reachable by `commit`


def _stamp_free(data: bytes) -> dict:
    value = json.loads(data)
    value.pop("updated_at", None)
    return value


class BatchStore:
    """Batch records of one repository."""

    def __init__(self, git: "Git") -> None:
        self.git = git

    @staticmethod
    def ref(slug: str) -> str:
        return batch_record_ref(slug)

    def slugs(self) -> list[str]:
        return sorted(name[len(BATCH_RECORD_PREFIX):] for name in self.git.refs.under(BATCH_RECORD_PREFIX))

    def read(self, slug: str, commit: str | None = None) -> Snapshot | None:
        """The latest record of the slug (or the one at `commit`), None when there is none."""
        found = self.files(slug, commit)
        if found is None:
            return None
        tip, tree, blobs, files = found
        record = record_from_files(files, f" of {slug} at {tip}")
        kind = self.git.odb.kind(record.base_head) if record.base_head not in _COMMITS else "commit"
        if kind not in (None, "commit"):   # (absent: a clone that has not fetched the batch branch yet)
            raise CorruptRecord(f"corrupt batch record of {slug} at {tip}: base_head: {record.base_head} is a "
                                f"{kind}, not a commit")
        _COMMITS.add(record.base_head)
        return Snapshot(record=record, commit=tip, tree=tree, blobs=blobs)

    def files(self, slug: str, commit: str | None = None, wanted: Callable[[str], bool] | None = None
              ) -> tuple[str, str, dict[str, str], dict[str, bytes]] | None:
        """(state commit, tree, {path: blob id}, {path: bytes}) of the latest record of the slug (or
        the one at `commit`), only the files `wanted` keeps read; None when there is none."""
        tip = commit or self.git.refs.resolve(self.ref(slug))
        if tip is None:
            broken = self.git.refs.garbage(self.ref(slug)) if commit is None else None
            if broken is not None:   # a tampered ref is a corrupt record, not "no batch"
                raise CorruptRecord(f"corrupt batch record of {slug}: {self.ref(slug)} holds {broken}, "
                                    "not an object id")
            return None
        odb = self.git.odb
        try:
            tree = odb.commit(tip).tree
            _regular_files(odb, tree, "")
            blobs = odb.flat(tree)
            files = {path: odb.blob(oid) for path, oid in blobs.items() if wanted is None or wanted(path)}
        except LanesError as exc:
            raise CorruptRecord(f"corrupt batch record of {slug} at {tip}: {exc.detail}") from None
        return tip, tree, blobs, files

    def write(self, snap: Snapshot | None, record: "BatchRecord", *, summary: str, actor: str,
              slug: str | None = None, new_line: bool = False, also: Updates | None = None) -> Snapshot:
        """Compare-and-swap a new state commit; nothing is written when nothing changed.

        `snap` is what the record was built from (None for a slug's first batch). The record is
        validated whole first. Raises `batch_busy` when the ref moved meanwhile. `also` returns more
        ref updates (e.g. evidence notes) for the same transaction; it is asked again when only one
        of those refs moved. The caller holds the slug's lock (`transaction()` does).
        """
        from ..core.model import BatchRecord

        slug = slug or record.slug
        record = BatchRecord.model_validate(record.model_dump(by_alias=True))   # the §4 invariants
        odb = self.git.odb
        files = batch_files(record)
        new_blobs = {path: _blob_id(data) for path, data in files.items()}
        old_blobs = snap.blobs if snap is not None and not new_line else {}
        if snap is not None and not new_line and self._unchanged(old_blobs, new_blobs, files):
            extra = also() if also else []
            if extra:
                self.git.refs.update(extra, f"git-lanes: {summary}", guarded=True)
            return snap
        changes: dict[str, str | None] = {}
        for path, data in files.items():
            if old_blobs.get(path) != new_blobs[path]:
                odb.write_blob(data)
                changes[path] = new_blobs[path]
        for path in old_blobs:
            if path not in files:
                changes[path] = None
        tree = odb.update_tree(snap.tree if snap is not None and not new_line else None, changes)
        assert tree is not None
        parents = [snap.commit] if snap is not None and snap.commit else []
        old_refs = snap.referenced if snap is not None and not new_line else frozenset()
        parents += [c for c in sorted(record.referenced_commits() - old_refs) if odb.has(c)]
        message = (f"{summary}\n\nLanes-Actor: {actor}\nLanes-At: {record.updated_at}\n"
                   f"Lanes-State-Batch: {record.batch_id}\n")
        commit = odb.write_commit(tree, parents, message, author=STATE_AUTHOR, committer=STATE_AUTHOR,
                                  author_time=int(time.time()))
        old = snap.commit if snap else None
        for _ in range(5):
            try:
                self.git.refs.update([(self.ref(slug), commit, old)] + (also() if also else []),
                                     f"git-lanes: {summary}", guarded=True)
                break
            except RefRaceError:
                if self.git.refs.resolve(self.ref(slug)) != old or not also:
                    raise refused("batch_busy", f"the record of {slug} moved while this command ran; "
                                                "run it again") from None
                # only a ref written with it (the shared evidence notes) moved: rebuild that and retry
        else:
            raise refused("batch_busy", f"the refs written with the record of {slug} kept moving; run it again")
        return Snapshot(record=record, commit=commit, tree=tree, blobs=new_blobs)

    def _unchanged(self, old: dict[str, str], new: dict[str, str], files: dict[str, bytes]) -> bool:
        """Whether a record's files equal the stored ones but for the time stamp."""
        if old.keys() != new.keys() or any(old[p] != new[p] for p in new if p != "batch.json"):
            return False
        if old["batch.json"] == new["batch.json"]:
            return True
        try:
            return _stamp_free(self.git.odb.blob(old["batch.json"])) == _stamp_free(files["batch.json"])
        except (LanesError, ValueError):
            return False

    @contextmanager
    def transaction(self, slug: str, *, actor: str, clock: Callable[[], str],
                    expect: str | None | bool = False, warn: Callable[[str], None] | None = None,
                    timeout: float | None = None) -> Iterator["Transaction"]:
        """Hold the slug's lock, read its record, hand it out to change, write it with `tx.write`.

        `expect`: the state commit the caller decided on before taking the lock (None: no record
        yet); a different one refuses `batch_busy` before anything is written.
        """
        with slug_lock(self.git, slug, timeout=timeout, warn=warn):
            snap = self.read(slug)
            if expect is not False and (snap.commit if snap else None) != expect:
                raise refused("batch_busy", f"the record of {slug} moved meanwhile; run the command again "
                                            "(nothing was written)")
            yield Transaction(self, slug, snap, actor, clock)

    def log(self, slug: str, tip: str | None = None) -> list[dict[str, str]]:
        """The audit trail, oldest first: one entry per state write (first parents), from the slug's
        record (or from the state commit `tip`, e.g. a fetched copy's)."""
        tip = tip or self.git.refs.resolve(self.ref(slug))
        entries = []
        while tip:
            c = self.git.odb.commit(tip)
            found = trailers(c.message)
            entries.append({"at": found.get("Lanes-At", ""), "actor": found.get("Lanes-Actor", ""),
                            "summary": c.subject, "commit": tip, "batch_id": found.get("Lanes-State-Batch", "")})
            tip = c.parents[0] if c.parents else None
        entries.reverse()
        return entries


class Transaction:
    """One writer's view of a slug's record under its lock: `record` is changed in place and
    written (validated, compare-and-swap) by `write`, as often as the writer needs."""

    def __init__(self, store: BatchStore, slug: str, snap: Snapshot | None, actor: str,
                 clock: Callable[[], str]) -> None:
        self.store = store
        self.slug = slug
        self.snap = snap
        self.actor = actor
        self.clock = clock
        self.record: "BatchRecord | None" = snap.record if snap else None   # the snapshot was read for it

    def write(self, summary: str, *, record: "BatchRecord | None" = None, new_line: bool = False,
              also: Updates | None = None, stamp: bool = True) -> Snapshot:
        """Write `record` (default: the one handed out), stamping `updated_at` unless told not to."""
        if record is not None:
            self.record = record
        assert self.record is not None
        if stamp:
            self.record.updated_at = self.clock()
        self.snap = self.store.write(self.snap, self.record, summary=summary, actor=self.actor,
                                     slug=self.slug, new_line=new_line, also=also)
        return self.snap
