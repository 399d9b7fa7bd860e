"""State in Git: batch records, lane records and evidence notes under `refs/notes/lanes/`.

Layout (store contract `git_lanes/store_layout/v1`, SPEC §15):

  refs/notes/lanes/batch/<slug>        one commit per state write (first-parent = audit log)
      batch.json                       the fixed-size fields
      children/<2 hex>/<task>.json     one blob per child (`index` keeps plan order)
      identities/<2 hex>/<task>.json   one blob per intent identity
      <list>/<bucket>/<index>.json     one blob per appended list entry
      final_verification.json
  refs/notes/lanes/lane/<slug>/<task>  the lane's own record (lane.json + attempts/…)
  refs/notes/lanes/evidence            git notes on integrated commits

A write builds only the blobs and trees that changed, keeps every commit the record refers
to reachable as an extra parent of the state commit, and moves the ref by compare-and-swap.
A write whose content equals the current record writes nothing.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from .canonical import canonical_json
from .errors import ExitCode, LanesError, refused
from .gitio import Git, RefRaceError
from .model import BatchRecord, LaneRecord, now

BATCH_REF = "refs/notes/lanes/batch/"
LANE_REF = "refs/notes/lanes/lane/"
EVIDENCE_REF = "refs/notes/lanes/evidence"
STATE_IDENT = b"git-lanes <git-lanes@localhost>"
_LISTS = ("adopted_heads", "restores", "interventions", "revisions", "reviews", "reseals", "archived_lanes")
_SHARDED = {"children": "children", "intent_identities": "identities"}
_BUCKET = 256


class CorruptRecord(LanesError):
    def __init__(self, detail: str) -> None:
        super().__init__(detail, exit_code=ExitCode.FATAL)


def _shard(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()[:2]


def _blob(value: Any) -> bytes:
    return (canonical_json(value) + "\n").encode()


# -- tree building: work in proportion to what changed ------------------------------------

# Git objects never change: what was read of a tree or a blob is kept by id, so reading a record
# again after a small write reads only the handful of objects that write added.
_FLAT_TREES: dict[bytes, dict[str, bytes]] = {}
_BLOB_DATA: dict[bytes, bytes] = {}
_CACHE_MAX = 8192


def _read_tree_flat(git: Git, tree_id: bytes, prefix: str = "") -> dict[str, bytes]:
    """{path: blob id} for every blob below a tree."""
    flat = _FLAT_TREES.get(tree_id)
    if flat is None:
        flat = {}
        tree = git.repo.object_store[tree_id]
        for entry in tree.iteritems():
            name = entry.path.decode()
            if entry.mode == 0o040000:
                for sub, sha in _read_tree_flat(git, entry.sha).items():
                    flat[name + "/" + sub] = sha
            else:
                flat[name] = entry.sha
        if len(_FLAT_TREES) >= _CACHE_MAX:
            _FLAT_TREES.clear()
        _FLAT_TREES[tree_id] = flat
    return {prefix + path: sha for path, sha in flat.items()}


def _blob_data(git: Git, blob_id: bytes) -> bytes:
    data = _BLOB_DATA.get(blob_id)
    if data is None:
        data = git.repo.object_store[blob_id].data
        if len(_BLOB_DATA) >= _CACHE_MAX:
            _BLOB_DATA.clear()
        _BLOB_DATA[blob_id] = data
    return data


def _update_tree(git: Git, tree_id: bytes | None, changes: dict[str, bytes | None]) -> bytes | None:
    """Apply {path: blob id or None (delete)} to a tree; unchanged subtrees are reused."""
    from dulwich.objects import Tree

    store = git.repo.object_store
    tree = Tree()
    if tree_id is not None:
        for entry in store[tree_id].iteritems():
            tree.add(entry.path, entry.mode, entry.sha)
    by_dir: dict[str, dict[str, bytes | None]] = {}
    for path, blob_id in changes.items():
        head, sep, rest = path.partition("/")
        if sep:
            by_dir.setdefault(head, {})[rest] = blob_id
        elif blob_id is None:
            if head.encode() in tree:
                del tree[head.encode()]
        else:
            tree.add(head.encode(), 0o100644, blob_id)
    for name, sub in by_dir.items():
        key = name.encode()
        old = tree[key][1] if key in tree else None
        new = _update_tree(git, old, sub)
        if new is None:
            if key in tree:
                del tree[key]
        else:
            tree.add(key, 0o040000, new)
    if not len(tree):
        return None
    store.add_object(tree)
    return tree.id


def _blob_id(data: bytes) -> bytes:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().encode()


def _with_subtrees(git: Git, tree_id: bytes, name: str, entries: dict[str, bytes]) -> bytes:
    """`tree_id` plus a directory `name` whose entries are the given trees."""
    from dulwich.objects import Tree

    sub = Tree()
    for key, sha in entries.items():
        sub.add(key.encode(), 0o040000, sha)
    git.repo.object_store.add_object(sub)
    root = Tree()
    for entry in git.repo.object_store[tree_id].iteritems():
        root.add(entry.path, entry.mode, entry.sha)
    root.add(name.encode(), 0o040000, sub.id)
    git.repo.object_store.add_object(root)
    return root.id


def _add_blob(git: Git, data: bytes) -> bytes:
    from dulwich.objects import Blob

    blob = Blob.from_string(data)
    if blob.id not in git.repo.object_store:
        git.repo.object_store.add_object(blob)
    return blob.id


def _commit(git: Git, tree: bytes, parents: list[bytes], message: str) -> str:
    from dulwich.objects import Commit

    c = Commit()
    c.tree = tree
    c.parents = parents
    c.author = c.committer = STATE_IDENT
    c.author_time = c.commit_time = int(time.time())
    c.author_timezone = c.commit_timezone = 0
    c.encoding = b"UTF-8"
    c.message = message.encode()
    git.repo.object_store.add_object(c)
    return c.id.decode()


# -- batch record <-> files ----------------------------------------------------------------

def batch_files(record: BatchRecord) -> dict[str, bytes]:
    """The record as {path: bytes}, the layout documented above."""
    data = record.model_dump(mode="json", by_alias=True)
    files: dict[str, bytes] = {}
    for index, child in enumerate(data.pop("children")):
        files[f"children/{_shard(child['task_id'])}/{child['task_id']}.json"] = _blob({"index": index, **child})
    for task_id, identity in data.pop("intent_identities").items():
        files[f"identities/{_shard(task_id)}/{task_id}.json"] = _blob(identity)
    for name in _LISTS:
        for index, item in enumerate(data.pop(name)):
            files[f"{name}/{index // _BUCKET:04d}/{index:06d}.json"] = _blob(item)
    final = data.pop("final_verification")
    if final is not None:
        files["final_verification.json"] = _blob(final)
    files["batch.json"] = _blob(data)
    return files


def record_from_files(files: dict[str, bytes]) -> BatchRecord:
    try:
        data = json.loads(files["batch.json"])
        children = []
        lists: dict[str, list[tuple[int, Any]]] = {name: [] for name in _LISTS}
        identities = {}
        for path, raw in files.items():
            top = path.split("/", 1)[0]
            if top == "children":
                item = json.loads(raw)
                children.append((item.pop("index"), item))
            elif top == "identities":
                item = json.loads(raw)
                identities[item["task_id"]] = item
            elif top in lists:
                lists[top].append((int(path.rsplit("/", 1)[1].split(".")[0]), json.loads(raw)))
        data["children"] = [c for _, c in sorted(children, key=lambda p: p[0])]
        data["intent_identities"] = identities
        for name, items in lists.items():
            data[name] = [v for _, v in sorted(items, key=lambda p: p[0])]
        if "final_verification.json" in files:
            data["final_verification"] = json.loads(files["final_verification.json"])
        return BatchRecord.model_validate(data)
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptRecord(f"corrupt batch record: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        return f"{loc}: {err['msg']}" if loc else err["msg"]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass
class Snapshot:
    """A record as read, with what a compare-and-swap write needs."""
    record: BatchRecord
    commit: str | None  # the state commit it was read from
    tree: bytes | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)  # path -> blob id


class BatchStore:
    """Batch records of one repository."""

    def __init__(self, git: Git) -> None:
        self.git = git

    @staticmethod
    def ref(slug: str) -> str:
        return BATCH_REF + slug

    def slugs(self) -> list[str]:
        return sorted(name[len(BATCH_REF):] for name in self.git.refs_under(BATCH_REF))

    def read(self, slug: str, commit: str | None = None) -> Snapshot | None:
        """The latest record of the slug (or the one at `commit`), None when there is none."""
        tip = commit or self.git.resolve(self.ref(slug))
        if tip is None:
            return None
        try:
            obj = self.git.repo.object_store[tip.encode()]
            blobs = _read_tree_flat(self.git, obj.tree)
            files = {p: _blob_data(self.git, b) for p, b in blobs.items()}
        except (KeyError, AttributeError) as exc:
            raise CorruptRecord(f"corrupt batch record at {tip}: {exc}") from None
        return Snapshot(record=record_from_files(files), commit=tip, tree=obj.tree, blobs=blobs)

    def write(self, snap: Snapshot | None, record: BatchRecord, *, summary: str, actor: str,
              slug: str | None = None, new_line: bool = False,
              also: Callable[[], list[tuple[str, str | None, str | None]]] | None = None) -> Snapshot:
        """Compare-and-swap a new state commit; nothing is written when nothing changed.

        `snap` is what the record was built from (None for a slug's first batch). The record is
        validated whole first. Raises `batch_busy` when the ref moved meanwhile. `also` returns more
        ref updates (e.g. evidence notes) to make in the same atomic transaction; it is asked again
        when only one of those refs moved.
        """
        slug = slug or record.slug
        record = BatchRecord.model_validate(record.model_dump(by_alias=True))  # the §4 invariants
        if snap is not None and not new_line:
            same = record.model_copy(update={"updated_at": snap.record.updated_at})
            if same == snap.record:
                extra = also() if also else []
                if extra:
                    self.git.update_refs(extra, f"git-lanes: {summary}")
                return snap
        files = batch_files(record)
        old_blobs = snap.blobs if snap is not None and not new_line else {}
        changes: dict[str, bytes | None] = {}
        new_blobs: dict[str, bytes] = {}
        for path, data in files.items():
            blob_id = _blob_id(data)
            new_blobs[path] = blob_id
            if old_blobs.get(path) != blob_id:
                _add_blob(self.git, data)
                changes[path] = blob_id
        for path in old_blobs:
            if path not in files:
                changes[path] = None
        base_tree = snap.tree if snap is not None and not new_line else None
        tree = _update_tree(self.git, base_tree, changes)
        assert tree is not None
        parents = [snap.commit.encode()] if snap is not None and snap.commit else []
        old_refs = snap.record.referenced_commits() if snap is not None and not new_line else set()
        extra = sorted(record.referenced_commits() - old_refs)
        parents += [c.encode() for c in extra if c.encode() in self.git.repo.object_store]
        message = f"{summary}\n\nLanes-Actor: {actor}\nLanes-At: {record.updated_at}\nLanes-State-Batch: {record.batch_id}\n"
        commit = _commit(self.git, tree, parents, message)
        old = snap.commit if snap else None
        for _ in range(5):
            updates = [(self.ref(slug), commit, old)] + (also() if also else [])
            try:
                self.git.update_refs(updates, f"git-lanes: {summary}")
                break
            except RefRaceError:
                if self.git.resolve(self.ref(slug)) != old or not also:
                    raise refused("batch_busy", f"the record of {slug} moved while this command ran; "
                                                "run it again") from None
                # only a ref written with it (the shared evidence notes) moved: rebuild that and retry
        else:
            raise refused("batch_busy", f"the refs written with the record of {slug} kept moving; run it again")
        return Snapshot(record=record, commit=commit, tree=tree, blobs=new_blobs)

    def log(self, slug: str) -> list[dict[str, str]]:
        """The audit trail, oldest first: one entry per state write (first parents)."""
        tip = self.git.resolve(self.ref(slug))
        entries = []
        while tip:
            c = self.git.repo.object_store[tip.encode()]
            msg = c.message.decode("utf-8", "replace")
            trailers = dict(line.split(": ", 1) for line in msg.splitlines() if line.startswith("Lanes-") and ": " in line)
            entries.append({"at": trailers.get("Lanes-At", ""), "actor": trailers.get("Lanes-Actor", ""),
                            "summary": msg.splitlines()[0] if msg else "", "commit": tip,
                            "batch_id": trailers.get("Lanes-State-Batch", "")})
            tip = c.parents[0].decode() if c.parents else None
        entries.reverse()
        return entries


# -- lane records ---------------------------------------------------------------------------

_LANE_RECORDS: dict[str, LaneRecord] = {}   # state commit -> the lane record it holds

class LaneStore:
    """Lane records: written only by commands run in that lane (one writer per ref)."""

    def __init__(self, git: Git) -> None:
        self.git = git

    @staticmethod
    def ref(slug: str, task_id: str) -> str:
        return f"{LANE_REF}{slug}/{task_id}"

    def read(self, slug: str, task_id: str) -> tuple[LaneRecord | None, str | None]:
        """(record, state commit); raises CorruptRecord when it cannot be read as v1."""
        tip = self.git.resolve(self.ref(slug, task_id))
        if tip is None:
            return None, None
        cached = _LANE_RECORDS.get(tip)
        if cached is not None:  # a state commit never changes: neither does the record it holds
            return cached.model_copy(deep=True), tip
        record = self._parse(slug, task_id, tip)
        if len(_LANE_RECORDS) >= 1024:
            _LANE_RECORDS.clear()
        _LANE_RECORDS[tip] = record
        return record.model_copy(deep=True), tip

    def _parse(self, slug: str, task_id: str, tip: str) -> LaneRecord:
        try:
            store = self.git.repo.object_store
            root = store[store[tip.encode()].tree]
            data = json.loads(store[root[b"lane.json"][1]].data)
            attempts = store[root[b"attempts"][1]] if b"attempts" in root else None
            data["qa_attempts"] = [json.loads(store[e.sha].data)
                                   for e in sorted(attempts.iteritems(), key=lambda e: e.path)] if attempts else []
            return LaneRecord.model_validate(data)
        except ValidationError as exc:
            raise CorruptRecord(f"lane record {slug}/{task_id}: contract error: {_one_line(exc)}") from None
        except (KeyError, ValueError, AttributeError) as exc:
            raise CorruptRecord(f"lane record {slug}/{task_id}: unreadable: {_one_line(exc)}") from None

    def write(self, slug: str, record: LaneRecord, old_commit: str | None, summary: str,
              extra_parents: list[str] = ()) -> str:
        record = LaneRecord.model_validate(record.model_dump())
        data = record.model_dump(mode="json")
        attempts = data.pop("qa_attempts")
        files = {"lane.json": _blob(data)}
        for index, attempt in enumerate(attempts):
            files[f"attempts/{index:06d}.json"] = _blob(attempt)
        changes = {p: _add_blob(self.git, d) for p, d in files.items()}
        tree = _update_tree(self.git, None, changes)
        # each attempt's delivery tree stays reachable (a tree entry of the record's own tree)
        delivered = {f"{i:06d}": a["tree"].encode() for i, a in enumerate(attempts)
                     if a["tree"].encode() in self.git.repo.object_store}
        if delivered:
            tree = _with_subtrees(self.git, tree, "trees", delivered)
        parents = [old_commit.encode()] if old_commit else []
        parents += [p.encode() for p in extra_parents if p.encode() in self.git.repo.object_store]
        commit = _commit(self.git, tree, parents, f"{summary}\n\nLanes-At: {now()}\n")
        try:
            self.git.update_ref(self.ref(slug, record.task_id), commit, old_commit, f"git-lanes: {summary}")
        except RefRaceError:
            raise refused("batch_busy", f"the lane record of {record.task_id} moved while this command ran; "
                                        "run it again") from None
        return commit


# -- evidence notes -------------------------------------------------------------------------

class EvidenceNotes:
    """`refs/notes/lanes/evidence`: real git notes, written with our own CAS loop."""

    def __init__(self, git: Git) -> None:
        self.git = git

    def read(self, commit: str) -> dict[str, Any] | None:
        tip = self.git.resolve(EVIDENCE_REF)
        if tip is None:
            return None
        tree = self.git.repo.object_store[self.git.repo.object_store[tip.encode()].tree]
        flat = {p.replace("/", ""): b for p, b in _read_tree_flat(self.git, tree.id).items()}
        blob = flat.get(commit)
        return json.loads(self.git.repo.object_store[blob].data) if blob else None

    def prepare(self, notes: dict[str, dict[str, Any]]) -> tuple[str, str, str | None] | None:
        """(ref, new tip, old tip) of one notes commit adding the notes not there yet; None when
        every commit has its note already (a re-run after a crash writes nothing new)."""
        tip = self.git.resolve(EVIDENCE_REF)
        base_tree = self.git.repo.object_store[tip.encode()].tree if tip else None
        present = {p.replace("/", "") for p in _read_tree_flat(self.git, base_tree)} if base_tree else set()
        changes = {}
        for commit, note in notes.items():
            if commit not in present:
                text = json.dumps(note, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
                changes[commit] = _add_blob(self.git, text.encode())
        if not changes:
            return None
        tree = _update_tree(self.git, base_tree, changes)
        c = _commit(self.git, tree, [tip.encode()] if tip else [],
                    f"Notes added by 'git lanes' for {', '.join(sorted(changes))}\n")
        return EVIDENCE_REF, c, tip

    def add(self, commit: str, note: dict[str, Any], attempts: int = 5) -> None:
        for _ in range(attempts):
            update = self.prepare({commit: note})
            if update is None:
                return
            try:
                self.git.update_ref(update[0], update[1], update[2], "git-lanes: evidence")
                return
            except RefRaceError:
                continue
        raise refused("batch_busy", "the evidence notes moved repeatedly; run the command again")


# -- the per-slug lock ------------------------------------------------------------------------

@contextmanager
def slug_lock(git: Git, slug: str, timeout: float | None = None, warn=None) -> Iterator[None]:
    """One `flock` per slug under `<git-common-dir>/lanes/locks/`, or `batch_busy`."""
    if timeout is None:
        timeout = float(git.config_int("lanes.lockTimeout", 30))
    lock_dir = os.path.join(git.common_dir, "lanes", "locks")
    os.makedirs(lock_dir, exist_ok=True)
    fd = os.open(os.path.join(lock_dir, f"{slug}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise refused("batch_busy", f"another git-lanes command holds the lock of {slug} "
                                                f"(waited {timeout:g} s; lanes.lockTimeout)") from None
                time.sleep(0.05)
        _remove_stale_ref_locks(git, warn)
        yield
    finally:
        os.close(fd)


def _remove_stale_ref_locks(git: Git, warn) -> None:
    """Git `.lock` files on git-lanes' own refs older than 60 s are left by a crash: remove them."""
    root = os.path.join(git.common_dir, "refs", "notes", "lanes")
    if not os.path.isdir(root):
        return
    cutoff = time.time() - 60
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(".lock"):
                path = os.path.join(dirpath, name)
                try:
                    if os.stat(path).st_mtime < cutoff:
                        os.unlink(path)
                        if warn:
                            warn(f"removed stale lock file {path}")
                except FileNotFoundError:
                    pass
