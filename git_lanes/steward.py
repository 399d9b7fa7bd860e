"""The built-in steward: `git lanes provision` and `git lanes release` (SPEC §6)."""

from __future__ import annotations

import os
from typing import Any

from . import lifecycle
from .errors import refused, usage
from .ids import check_id
from .model import ArchivedLane
from .session import Session, lane_branch
from .tick import Outcome, Request, run_tick, status_report
from .workspace import create_lane, remove_lane


def _state_of(report: dict[str, Any], task_id: str) -> str:
    child = next((c for c in report["children"] if c["task_id"] == task_id), None)
    return "not a child of this batch" if child is None else child["state"]


def _handoff(report: dict[str, Any], action: str, task_id: str) -> dict[str, Any] | None:
    return next((h for h in report["handoffs"] if h.get("action") == action and h["task_id"] == task_id), None)


def provision(s: Session, slug: str, task_id: str, path: str | None) -> Outcome:
    """Create the lane branch at the provision handoff's base, add the worktree, set it up, offer it."""
    check_id(task_id, "task id")
    report = status_report(s, slug)
    handoff = _handoff(report, "provision", task_id)
    if handoff is None:
        raise refused("batch_lane_unknown_child", f"{task_id} has no provision handoff in batch {report['batch_id']} "
                                                  f"(it is {_state_of(report, task_id)})")
    target = create_lane(s, slug, task_id, handoff["base_head"], report["batch_id"], path)
    return run_tick(s, slug, Request(offers=[(task_id, target)], actor="provision"))


def release_handoff(s: Session, handoff: dict[str, Any], keep_branch: bool = False) -> None:
    """Remove the lane of a release handoff, without a write: the next tick records it `released`
    (step 4). `release` writes at once; `run` removes lanes between its ticks this way."""
    remove_lane(s, handoff["lane_path"], handoff["lane_branch"], keep_branch)


def release(s: Session, slug: str, task_id: str, keep_branch: bool = False) -> dict[str, Any]:
    """Remove a lane that a release handoff names; record it `released`."""
    check_id(task_id, "task id")
    report = status_report(s, slug)
    handoff = _handoff(report, "release", task_id)
    if handoff is None:
        restarted = _restarted_lane(s, slug, task_id)
        if restarted is not None:  # `resume --restart` archived its tip: the old lane may go
            release_handoff(s, restarted, keep_branch)
            return {"released": [{"task_id": task_id, "path": restarted["lane_path"], "branch_kept": keep_branch}]}
        raise refused("batch_lane_release_refused", f"{task_id} has no release handoff (it is "
                                                    f"{_state_of(report, task_id)}; only an integrated, clean lane "
                                                    "on its branch is released)")
    release_handoff(s, handoff, keep_branch)
    _record(s, slug, released=[task_id])
    return {"released": [{"task_id": task_id, "path": handoff["lane_path"], "branch_kept": keep_branch}]}


def _restarted_lane(s: Session, slug: str, task_id: str) -> dict[str, Any] | None:
    """The old lane of a pending child that `resume --restart` sent back: its branch tip is archived
    in the record, and its worktree (if any) is clean."""
    snap = s.batches.read(slug)
    child = snap.record.child(task_id) if snap else None
    if child is None or child.state != "pending":
        return None
    branch = lane_branch(slug, task_id)
    tip = s.git.refs.resolve("refs/heads/" + branch)
    if tip is None or not any(a.task_id == task_id and a.tip == tip for a in snap.record.archived_lanes):
        return None
    wt = s.worktree_on(branch)
    if wt is not None:
        from .snapshot import worktree_clean

        if not worktree_clean(s.git, wt.path):
            raise refused("batch_lane_release_refused", f"the old lane of {task_id} at {wt.path} has uncommitted work")
    return {"lane_branch": branch, "lane_path": wt.path if wt else ""}


def _record(s: Session, slug: str, released: list[str] = (), archived: list[ArchivedLane] = ()) -> None:
    """One write: integrated children released, lane tips archived."""
    with s.transaction(slug, "release") as tx:
        rec = tx.record
        if rec is None:
            return
        for task_id in released:
            child = rec.child(task_id)
            if child is not None and child.state == "integrated":
                lifecycle.release(child)
        rec.archived_lanes.extend(archived)
        tx.write("released " + ", ".join(list(released) + [a.task_id for a in archived]))


def release_stale(s: Session, slug: str) -> dict[str, Any]:
    """Remove clean lanes of a terminal batch, keeping never-integrated lane tips reachable."""
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    rec = snap.record
    if not rec.terminal:
        raise refused("batch_lane_release_refused", f"batch {rec.batch_id} is {rec.batch_state}, not finished; "
                                                    "--stale only removes lanes of terminal batches")
    keep = []
    skipped: list[dict[str, str]] = []
    archived: list[ArchivedLane] = []
    for child in rec.children:
        if child.lane is None or child.state == "released":
            continue
        lane = child.lane
        tip = s.git.refs.resolve("refs/heads/" + lane.branch)
        if s.worktree_at(lane.path) is not None and os.path.isdir(lane.path):
            from .snapshot import worktree_clean

            if not worktree_clean(s.git, lane.path):
                skipped.append({"task_id": child.task_id, "reason": f"{lane.path} has uncommitted work"})
                continue
        if tip is not None and tip not in rec.referenced_commits():
            archived.append(ArchivedLane(at=s.clock(), task_id=child.task_id, branch=lane.branch, tip=tip))
        keep.append(child)
    if archived:  # the record keeps the tips reachable before any branch goes
        _record(s, slug, archived=archived)
    for child in keep:
        remove_lane(s, child.lane.path, child.lane.branch)
    integrated = [child.task_id for child in keep if child.state == "integrated"]
    if integrated:
        _record(s, slug, released=integrated)
    return {"released": [{"task_id": c.task_id, "path": c.lane.path} for c in keep], "skipped": skipped}
