"""Leak restore (SPEC §9): lane bytes written into the coordinator, proven and put back.

Three steps, in a crash-safe order:
  1. gather the facts (the coordinator's `git status`, every lane's versions of those paths)
     and let `decisions.leaks.decide` judge them; anything unprovable refuses
     `working_tree_unstaged` before anything is touched;
  2. write the backup completely under `<git-common-dir>/lanes/restores/<batch_id>/<stamp>/`
     (`files/<path>`, `restore.patch`, `restore.json`), made visible by one rename;
  3. restore the coordinator to HEAD for exactly those paths (untracked files deleted,
     modified files checked out from the index, which equals HEAD for ` M` entries).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from typing import Iterable

from ..core.crash import crash_point
from ..core.errors import refused
from ..core.model import BatchRecord, Child, Restore, RestorePath
from ..decisions.leaks import LaneVersions, LeakFacts, Proven, Version, decide, needs_versions
from ..gitio import branch_ref, quote_path
from .session import Session

_TREE_KINDS = {0o100644: "file", 0o100755: "exec", 0o120000: "link"}


class _Reader:
    """Versions of paths in worktrees and commits, in Git's terms (kind, blob id)."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.git = s.git
        self.filemode = self.git.config_bool("core.fileMode", True)
        fmt = (self.git.config_get("extensions.objectFormat") or "sha1").lower()
        self._hash = hashlib.sha256 if fmt == "sha256" else hashlib.sha1
        self._present: dict[str, bool] = {}

    def _kind(self, kind: str) -> str:
        return "file" if kind == "exec" and not self.filemode else kind

    def blob_id(self, data: bytes) -> str:
        return self._hash(b"blob %d\0" % len(data) + data).hexdigest()

    def on_disk(self, root: str, path: str) -> Version | None:
        """The version of `path` in the worktree at `root` (None: absent, or not a file/link)."""
        full = os.path.join(root, path)
        parent = os.path.realpath(os.path.dirname(full))
        top = os.path.realpath(root)
        if parent != top and not parent.startswith(top + os.sep):
            return None  # reached through a symbolic link leaving the worktree
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                return Version("link", self.blob_id(os.fsencode(os.readlink(full))))
            if not stat.S_ISREG(st.st_mode):
                return None
            with open(full, "rb") as f:
                data = f.read()
        except OSError:
            return None
        kind = "exec" if st.st_mode & stat.S_IXUSR else "file"
        return Version(self._kind(kind), self.blob_id(data))

    def in_commit(self, commit: str, path: str) -> Version | None:
        """The version of `path` in `commit` (None: absent, or a tree or a submodule)."""
        if commit not in self._present:
            self._present[commit] = self.git.odb.kind(commit) == "commit"
        entry = self.git.odb.entry_at(commit, path) if self._present[commit] else None
        kind = _TREE_KINDS.get(entry.mode) if entry is not None else None
        return Version(self._kind(kind), entry.oid) if kind else None


def differing(s: Session, root: str, commit: str, paths: Iterable[str]) -> list[str]:
    """The paths whose version in the worktree at `root` is not the one `commit` has (kind and bytes,
    as a leak is judged): what a checkout of `commit` there would lose."""
    reader = _Reader(s)
    return [p for p in paths if reader.on_disk(root, p) != reader.in_commit(commit, p)]


def _lane_commits(s: Session, child: Child) -> list[str]:
    """Commits of `base..imm-lane/<slug>/<task>`, plus the recorded lane and executor commits."""
    lane = child.lane
    assert lane is not None
    commits: list[str] = []
    tip = s.git.refs.resolve(branch_ref(lane.branch))
    if tip is not None and tip != lane.base_head:
        commits += s.git.odb.commits(tip, lane.base_head)
    for extra in [lane.lane_commit, *lane.executor_commits]:
        if extra and extra not in commits and s.git.odb.has(extra):
            commits.append(extra)
    return commits


def gather(s: Session, record: BatchRecord, entries) -> tuple[list[LeakFacts], _Reader]:
    """The facts of every status entry; lanes are read only for entries that may be lane writes."""
    reader = _Reader(s)
    coordinator = record.coordinator
    candidates = [e for e in entries if needs_versions(e.xy)]
    lanes: list[tuple[Child, bool, list[str]]] = []
    if candidates:
        for child in record.children:
            if child.lane is None or child.lane.path is None:   # a lane of another clone writes nothing here
                continue
            wt = s.worktree_at(child.lane.path)
            has_worktree = wt is not None and os.path.isdir(child.lane.path) and \
                os.path.realpath(child.lane.path) != os.path.realpath(coordinator)
            lanes.append((child, has_worktree, _lane_commits(s, child)))
    head = s.git.rev_parse("HEAD", cwd=coordinator)
    facts = []
    for e in entries:
        if not needs_versions(e.xy):
            facts.append(LeakFacts(path=e.path, xy=e.xy, current=None))
            continue
        current = None if e.path.endswith("/") else reader.on_disk(coordinator, e.path)
        versions = []
        for child, has_worktree, commits in lanes:
            found = []
            if has_worktree:
                v = reader.on_disk(child.lane.path, e.path)
                if v is not None:
                    found.append(v)
            for c in commits:
                v = reader.in_commit(c, e.path)
                if v is not None and v not in found:
                    found.append(v)
            versions.append(LaneVersions(child.task_id, reader.in_commit(child.lane.base_head, e.path), tuple(found)))
        facts.append(LeakFacts(path=e.path, xy=e.xy, current=current,
                               head=reader.in_commit(head, e.path) if head and e.xy != "??" else None,
                               lanes=tuple(versions)))
    return facts, reader


# -- the backup ---------------------------------------------------------------------------------

def _stamp(at: str) -> str:
    return "".join(ch for ch in at if ch.isalnum() or ch in ".") or "restore"


def _undo_text(backup: str, coordinator: str) -> list[str]:
    return [
        "git-lanes proved that these files in the coordinator were written by a lane (their bytes equal "
        "that lane's version and differ from the lane base) and put the coordinator back to HEAD for them.",
        f"To put the changes back exactly, in the coordinator ({coordinator}): "
        f"git apply --binary {os.path.join(backup, 'restore.patch')}",
        f"Or copy the files from {os.path.join(backup, 'files')} into the coordinator by hand.",
        "Every file is also still in its lane (worktree or lane branch), named by lane_task_id.",
    ]


def write_backup(s: Session, record: BatchRecord, at: str, head: str, proven: list[Proven]) -> str:
    """The complete backup, made visible by one rename; returns its directory."""
    coordinator = record.coordinator
    root = os.path.join(s.git.common_dir, "lanes", "restores", record.batch_id)
    os.makedirs(root, exist_ok=True)
    base = _stamp(at)
    final = os.path.join(root, base)
    n = 1
    while os.path.lexists(final):
        n += 1
        final = os.path.join(root, f"{base}-{n}")
    tmp = tempfile.mkdtemp(dir=root, prefix=".incomplete-")
    try:
        for p in proven:
            src = os.path.join(coordinator, p.path)
            dst = os.path.join(tmp, "files", p.path)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
        with open(os.path.join(tmp, "restore.patch"), "wb") as f:
            f.write(s.git.work.binary_patch(coordinator, head, [p.path for p in proven]))
        doc = {
            "batch_id": record.batch_id,
            "at": at,
            "coordinator": coordinator,
            "head": head,
            "paths": [{"path": quote_path(p.path), "kind": p.kind, "lane_task_id": p.lane_task_id} for p in proven],
            "undo": _undo_text(final, coordinator),
        }
        with open(os.path.join(tmp, "restore.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# -- putting the coordinator back -----------------------------------------------------------------

def _remove_untracked(coordinator: str, paths: Iterable[str]) -> None:
    top = os.path.realpath(coordinator)
    for path in paths:
        full = os.path.join(coordinator, path)
        try:
            os.unlink(full)
        except FileNotFoundError:
            continue
        folder = os.path.dirname(full)
        while os.path.realpath(folder) != top and os.path.realpath(folder).startswith(top + os.sep):
            try:
                os.rmdir(folder)  # only folders the leak left empty
            except OSError:
                break
            folder = os.path.dirname(folder)


def _orphans(s: Session, record: BatchRecord) -> list[tuple[str, dict]]:
    """Complete backups of this batch that its record does not list: a tick died between the
    backup (or the restore) and the write of the record (oldest first)."""
    root = os.path.join(s.git.common_dir, "lanes", "restores", record.batch_id)
    known = {r.backup for r in record.restores}
    found = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        path = os.path.join(root, name)
        if name.startswith(".") or path in known:
            continue
        try:
            with open(os.path.join(path, "restore.json"), encoding="utf-8") as f:
                doc = json.load(f)
            paths = [RestorePath(**p) for p in doc["paths"]]
            found.append((path, {"at": str(doc["at"]), "paths": paths, "raw": [p["path"] for p in doc["paths"]]}))
        except (OSError, ValueError, KeyError, TypeError):
            continue   # not one of ours, or damaged: left for a human, never adopted
    return found


def restore_leaks(s: Session, record: BatchRecord, at: str, entries: list | None = None) -> list[Restore]:
    """The restores of this tick (none when the coordinator is clean and no backup is unrecorded);
    refuses `working_tree_unstaged` on anything unprovable.

    A backup left unrecorded by a tick that died is adopted: recorded as it is when the
    coordinator was already put back, reused (no second backup) when the coordinator still holds
    exactly the bytes it saved. `entries`: the coordinator's `git status` when the caller has it."""
    coordinator = record.coordinator
    orphans = _orphans(s, record)
    if entries is None:
        entries = s.git.status(cwd=coordinator)
    if not entries:
        return [Restore(at=doc["at"], backup=path, paths=doc["paths"]) for path, doc in orphans]
    facts, reader = gather(s, record, entries)
    verdict = decide(facts)
    if verdict.refusal is not None:
        path, detail = verdict.refusal
        raise refused("working_tree_unstaged", f"{quote_path(path)}: {detail}")
    proven = list(verdict.proven)
    head = s.git.rev_parse("HEAD", cwd=coordinator)
    assert head is not None
    done: list[Restore] = []
    backup = None
    for path, doc in orphans:
        same = (sorted(doc["raw"]) == sorted(quote_path(p.path) for p in proven)
                and all(reader.on_disk(os.path.join(path, "files"), p.path) == reader.on_disk(coordinator, p.path)
                        for p in proven))
        if same and backup is None:
            backup, at = path, doc["at"]
        else:
            done.append(Restore(at=doc["at"], backup=path, paths=doc["paths"]))
    ours = backup is None
    if backup is None:
        backup = write_backup(s, record, at, head, proven)
    crash_point("leak-backed-up")
    seen = {f.path: f.current for f in facts}
    for p in proven:  # an executor still writing: keep what the backup does not hold
        if reader.on_disk(coordinator, p.path) != seen[p.path]:
            if ours:
                shutil.rmtree(backup, ignore_errors=True)
            raise refused("working_tree_unstaged", f"{quote_path(p.path)}: it changed while git-lanes was restoring it; "
                                                   "tick again")
    _remove_untracked(coordinator, [p.path for p in proven if p.kind == "untracked"])
    s.git.work.checkout_paths(coordinator, [p.path for p in proven if p.kind == "modified"])
    crash_point("leak-restored")
    return [*done, Restore(at=at, backup=backup, paths=[RestorePath(path=quote_path(p.path), kind=p.kind,
                                                                    lane_task_id=p.lane_task_id) for p in proven])]
