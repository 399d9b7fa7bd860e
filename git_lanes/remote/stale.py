"""`git lanes release --stale` in an executor's clone (SPEC §17.2): the lanes this clone joined whose
claim is no longer its live one (restarted elsewhere, parked lost, or of a finished batch) go. Their
uncommitted work is kept first as a snapshot commit on the lane's tip, an extra parent of a last
revision of this clone's own lane record (the executor never writes the batch record), which is pushed
when the remote takes it; when the lane record already carries another clone's claim, a lane with such
work is kept (nothing here could keep it reachable without diverging from that record).

The coordinator's clone (and any clone that holds the batch's coordinator) uses the steward's
`release_stale`, which archives into the batch record.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..core.errors import LanesError, usage
from ..core.model import Released
from ..domain.clone import clone_id
from ..domain.lanehost import live_claim
from ..domain.session import Session
from ..gitio import LaneBranch, lane_record_ref
from ..store import CorruptRecord
from .views import coordinates, remotes


def release_stale(s: Session, slug: str, remote: str | None = None) -> dict[str, Any]:
    from ..batch import steward

    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    if coordinates(s, snap.record) or clone_id(s.git) is None:   # no lane was ever joined here
        return steward.release_stale(s, slug)
    return _release_lost(s, snap.record, remote or (remotes(s) or ["origin"])[0])


def _lane_branches(s: Session, slug: str) -> list[LaneBranch]:
    found = []
    for ref in s.git.refs.under(f"refs/heads/imm-lane/{slug}"):
        lane = LaneBranch.of_ref(ref)
        if lane is not None and lane.slug == slug:
            found.append(lane)
    return found


def _release_lost(s: Session, rec, remote: str) -> dict[str, Any]:
    from ..domain.snapshot import snapshot_tree
    from ..domain.snapshot import SNAPSHOT_IDENT
    from ..domain.workspace import remove_lane

    mine = clone_id(s.git)
    released, skipped, pushed = [], [], []
    for lane in _lane_branches(s, rec.slug):
        task = lane.task
        child = rec.child(task)
        try:
            lrec, _ = s.lanes.read(rec.slug, task)
        except CorruptRecord:
            lrec = None
        claim = live_claim(rec, task, lrec)
        ours = lrec is not None and lrec.claim is not None and lrec.claim.clone_id == mine
        live = claim is not None and claim.clone_id == mine and child is not None \
            and child.state not in ("needs_human", "released")
        if live and not rec.terminal:
            continue   # this clone's lane, still wanted (a release handoff removes it when integrated)
        wt = s.worktree_on(lane.name)
        path = wt.path if wt is not None else ""
        tip = s.git.refs.resolve(lane.ref)
        keep = tip
        if path and os.path.isdir(path) and tip is not None:
            tree = snapshot_tree(s.git, path)
            if tree != s.git.odb.tree_of(tip):
                keep = s.git.odb.write_commit(tree, [tip], f"git-lanes: the uncommitted work of {task}'s lost "
                                                           f"lane\n\nLanes-Task: {task}\n", author=SNAPSHOT_IDENT,
                                              committer=SNAPSHOT_IDENT, author_time=int(time.time()))
        snapshot = keep if keep != tip else None
        if keep is not None and not _kept(s, rec, task, keep):
            if not ours:
                skipped.append({"task_id": task, "reason": f"{path or lane.name} holds work no record keeps, and "
                                                           "its lane record is another clone's now"})
                continue
            _archive(s, rec.slug, task, lrec.run_id, keep)
            pushed.append(lane_record_ref(rec.slug, task))
        remove_lane(s, path, lane.name, force=True)   # what it held is kept by a record now
        released.append({"task_id": task, "path": path or None, "branch": lane.name, "branch_kept": False,
                         **({"snapshot": snapshot} if snapshot else {})})
    doc: dict[str, Any] = {"released": released, "skipped": skipped, "scratch": []}
    if pushed:
        from .claims import sync_push

        try:
            sync_push(s, remote, only=set(pushed).__contains__)
        except LanesError as exc:   # kept here all the same; a diverged record stays this clone's
            doc["push"] = exc.message
    return doc


def _kept(s: Session, rec, task: str, commit: str) -> bool:
    """A record this clone holds keeps `commit` reachable (the batch record's archive, the lane record)."""
    odb = s.git.odb
    if commit in rec.referenced_commits():
        return True
    for ref in (s.batches.ref(rec.slug), lane_record_ref(rec.slug, task)):
        tip = s.git.refs.resolve(ref)
        if tip is not None and odb.is_ancestor(commit, tip):
            return True
    return False


def _archive(s: Session, slug: str, task: str, run_id: str, commit: str) -> None:
    """A last revision of this clone's lane record (`released`), `commit` as an extra parent."""
    from ..lane.side import write_lane_record

    at = s.clock()
    write_lane_record(s, slug, task, run_id,
                      lambda r: r.model_copy(update={"released": r.released or Released(at=at)}),
                      f"release --stale {task}: the lost lane's work kept", extra_parents=(commit,))
