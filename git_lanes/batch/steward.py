"""The built-in steward: `git lanes provision` and `git lanes release` (SPEC §6)."""

from __future__ import annotations

import os
from typing import Any

from ..core import lifecycle
from ..core.errors import LanesError, refused, usage
from ..core.ids import check_id
from ..core.model import ArchivedLane
from ..core.reasons import meaning
from ..domain.lanehost import LocalLanes
from ..domain.session import Session, lane_branch
from ..domain.workspace import (create_lane, default_lane_path, drop_left_branch, missing_folders, remove_if_empty,
                                remove_lane)
from ..gitio import branch_ref, quote_path
from ..store import slug_lock
from ..tick import Outcome, Request, run_tick, status_report


def _state_of(report: dict[str, Any], task_id: str) -> str:
    child = next((c for c in report["children"] if c["task_id"] == task_id), None)
    return "not a child of this batch" if child is None else child["state"]


def _handoff(report: dict[str, Any], action: str, task_id: str) -> dict[str, Any] | None:
    return next((h for h in report["handoffs"] if h.get("action") == action and h["task_id"] == task_id), None)


def not_driven(s: Session, slug: str) -> None:
    """`batch_busy` when a live `git lanes run` of another process drives the slug (SPEC §17.1): its
    provisions and releases are that run's, and a second hand on them races it."""
    from ..store import driver

    live = driver(s.git, slug)
    if live is not None and live["pid"] != os.getpid():
        raise refused("batch_busy", f"git lanes run (pid {live['pid']}) drives {slug}")


def provision(s: Session, slug: str, task_id: str, path: str | None) -> Outcome:
    """Create the lane branch at the provision handoff's base, add the worktree, set it up, offer it;
    under the lane's lock, taken without waiting: a second provision of the task at once refuses
    `batch_busy` and leaves the first's lane alone (it is no interrupted provision's)."""
    from ..store import lane_lock_try

    check_id(task_id, "task id")
    not_driven(s, slug)
    held = lane_lock_try(s.git, slug, task_id)
    if held is None:
        raise refused("batch_busy", f"another git-lanes command holds the lock of the lane of {task_id} "
                                    f"(a provision of {task_id} is under way)")
    try:
        not_driven(s, slug)   # a run that started meanwhile
        return _provision(s, slug, task_id, path)
    finally:
        for h in reversed(held):
            h.release()


def _provision(s: Session, slug: str, task_id: str, path: str | None) -> Outcome:
    report = status_report(s, slug)
    handoff = _handoff(report, "provision", task_id)
    if handoff is None:
        if _state_of(report, task_id) == "not a child of this batch":
            raise usage(f"{task_id} is not a child of batch {report['batch_id']}")
        raise refused("batch_lane_unknown_child", f"{task_id} has no provision handoff in batch {report['batch_id']} "
                                                  f"(it is {_state_of(report, task_id)})")
    coordinator = s.record(slug).coordinator
    # the folders this provision makes (a configured lanes.worktreeRoot too): a refused one leaves none of them
    made = missing_folders(path or default_lane_path(s, slug, task_id))
    try:
        target = create_lane(s, slug, task_id, handoff["base_head"], report["batch_id"], path, coordinator=coordinator)
    except BaseException:
        remove_if_empty(made)
        raise
    admitted = False
    try:
        outcome = run_tick(s, slug, Request(offers=[(task_id, target)], actor="provision"))
        child = next((c for c in outcome.report["children"] if c["task_id"] == task_id), None)
        admitted = bool(child and child.get("lane") and child["state"] != "pending"
                        and os.path.realpath(child["lane"]["path"] or "") == os.path.realpath(target))
        if admitted or outcome.exit_code != 0:
            return outcome
        # the tick refused the offer: a refused provision is a refusal (exit 1, SPEC §6, §16)
        why = next((r["reason"] for r in outcome.report.get("lane_refusals", []) if r["task_id"] == task_id),
                   "batch_lane_unknown_child: the tick did not admit the lane")
        code, _, detail = why.partition(": ")
        if code == "batch_lane_dirty" and not detail:
            detail = setup_leftovers(s, target)
        return Outcome(outcome.report, 1, refused(code, f"{detail or meaning(code) or code} (the lane was removed)"))
    finally:
        if not admitted:   # a refused provision leaves nothing behind (it holds only copies and setup)
            remove_lane(s, target, lane_branch(slug, task_id), force=True)
            remove_if_empty(made)


def setup_leftovers(s: Session, lane: str) -> str:
    """Why a lane nothing has worked in yet is dirty: what `lanes.copy` or `lanes.setupCommand` left."""
    changed = [e.path for e in s.git.work.status(lane)]
    return ("lanes.copy or lanes.setupCommand left changes Git does not ignore: "
            + ", ".join(quote_path(p) for p in changed[:5]) + (" …" if len(changed) > 5 else "")
            + "; ignore them (.gitignore) or make the setup leave none")


def release_handoff(s: Session, handoff: dict[str, Any], keep_branch: bool = False, *, slug: str) -> None:
    """Remove the lane of a release handoff, under the slug's lock (a command that listed it never
    meets it half removed), without a write: the next tick records it `released` (step 4). `release`
    writes at once; `run` removes lanes between its ticks this way."""
    with slug_lock(s.git, slug, warn=s.warn):
        remove_lane(s, handoff["lane_path"], handoff["lane_branch"], keep_branch)


def _removed(task_id: str, path: str, branch: str, keep_branch: bool, **extra: Any) -> dict[str, Any]:
    return {"task_id": task_id, "path": path, "branch": branch, "branch_kept": keep_branch, **extra}


def release(s: Session, slug: str, task_id: str, keep_branch: bool = False) -> dict[str, Any]:
    """Remove a lane that a release handoff names and record it `released`; or the old lane of a child
    that `resume --restart` sent back to pending (its dirty work first kept in a commit)."""
    check_id(task_id, "task id")
    not_driven(s, slug)
    report = status_report(s, slug)
    if _state_of(report, task_id) == "not a child of this batch":
        raise usage(f"{task_id} is not a child of batch {report['batch_id']}")
    handoff = _handoff(report, "release", task_id)
    if handoff is None:
        done = release_restarted(s, slug, task_id, keep_branch) or release_interrupted(s, slug, task_id, keep_branch)
        if done is not None:
            return {"released": [done]}
        raise refused("batch_lane_release_refused", _why_not(s, slug, report, task_id))
    with s.transaction(slug, "release") as tx:
        remove_lane(s, handoff["lane_path"], handoff["lane_branch"], keep_branch)
        child = tx.record.child(task_id)
        if child is not None and child.state == "integrated":
            lifecycle.release(child)
            if keep_branch and child.lane is not None:
                child.lane.branch_kept = True
        tx.write(f"released {task_id}")
    return {"released": [_removed(task_id, handoff["lane_path"], handoff["lane_branch"], keep_branch)]}


def _why_not(s: Session, slug: str, report: dict[str, Any], task_id: str) -> str:
    """Why `release <task>` removes nothing: a released child with nothing left, or an integrated lane
    that is still there but not as its release handoff wants it (the user's now, or holding work)."""
    kept = _kept_branch(s, report, task_id)
    if kept:
        return f"{task_id} is released; its branch {kept} was kept (--keep-branch) and is yours: git branch -D {kept}"
    state = _state_of(report, task_id)
    snap = s.batches.read(slug)
    child = snap.record.child(task_id) if snap else None
    lane = child.lane if child is not None else None
    if state == "released":
        tip = s.git.refs.resolve(branch_ref(lane.branch)) if lane is not None and lane.remote is None else None
        if tip is None:
            return f"{task_id} is released; nothing of its lane is left to remove"
        if tip == lane.lane_commit:
            return f"{task_id} is released; only its branch {lane.branch} is left, and --keep-branch keeps it"
        return f"{task_id} is released; its branch {lane.branch} moved past its lane commit: yours, kept"
    if state == "integrated" and lane is not None and lane.remote is None and lane.path:
        where = LocalLanes(s).presence(lane.path)
        if where.exists:
            if where.branch != branch_ref(lane.branch):
                on = f"on {where.branch}" if where.branch else "detached"
                why = f"its lane {lane.path} is {on}, not on {lane.branch}: what it holds is not the lane's"
            elif where.head != lane.lane_commit:
                why = f"its lane {lane.path} has commits past its lane commit {(lane.lane_commit or '')[:12]}"
            else:
                why = f"its lane {lane.path} holds uncommitted work"
            return f"{task_id} is integrated, but {why}; nothing was removed (no release handoff)"
    return (f"{task_id} has no release handoff (it is {state}; only an integrated, clean lane on its branch "
            "is released)")


def _kept_branch(s: Session, report: dict[str, Any], task_id: str) -> str | None:
    """The branch a `release --keep-branch` of this child kept, while it still exists."""
    for c in report["children"]:
        lane = c.get("lane") or {}
        if c["task_id"] == task_id and c["state"] == "released" and lane.get("branch_kept") and \
                s.git.refs.resolve(branch_ref(lane["branch"])) is not None:
            return lane["branch"]
    return None


def release_interrupted(s: Session, slug: str, task_id: str, keep_branch: bool) -> dict[str, Any] | None:
    """A release killed after it removed the worktree: the branch (still on its lane commit) goes, and
    the child is recorded `released` — the same end as a release that was not interrupted."""
    with s.transaction(slug, "release") as tx:
        child = tx.record.child(task_id) if tx.record else None
        lane = child.lane if child is not None else None
        if lane is None or lane.remote is not None or lane.carried_over or lane.branch_kept \
                or child.state not in ("integrated", "released") \
                or _still_there(s, lane.path or "") \
                or child.state == "released" and (keep_branch or s.git.refs.resolve(branch_ref(lane.branch)) is None) \
                or not drop_left_branch(s, lane.branch, lane.lane_commit, keep=keep_branch):
            return None
        if child.state == "integrated":
            lifecycle.release(child)
            if keep_branch:
                lane.branch_kept = True
        tx.write(f"released {task_id}")
    return _removed(task_id, lane.path, lane.branch, keep_branch)


def _still_there(s: Session, path: str) -> bool:
    """The lane's worktree is still there (§7 step 4's rule: the lane is not gone), whatever branch it
    is on now: nothing of a killed release to finish."""
    if not path or not os.path.isdir(path):
        return False   # no folder: gone, whatever the list says (presence asks the folder too)
    s.forget_worktrees()   # under the lock: what the list says now
    return LocalLanes(s).presence(path).exists


def release_gone(s: Session, slug: str, report: dict[str, Any], skip: set[str]) -> list[str]:
    """Integrated children (but those in `skip`) whose worktree is gone — removed between two ticks of
    `run`, or by a release killed half-way — recorded `released` (their branch deleted when it is on
    the lane commit), as the next tick would; released children whose branch a killed release left
    (recorded by a tick of an older build) lose it the same way; the task ids."""
    done = []
    for c in report["children"]:
        left = c["state"] == "released" and c.get("lane") and c["lane"].get("path") and \
            not c["lane"].get("branch_kept") and \
            s.git.refs.resolve(branch_ref(c["lane"]["branch"])) is not None   # its branch outlived it
        if (c["state"] == "integrated" or left) and c["task_id"] not in skip and \
                release_interrupted(s, slug, c["task_id"], keep_branch=False) is not None:
            done.append(c["task_id"])
    return done


def release_integrated(s: Session, slug: str, handoffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Remove the lanes of these release handoffs and record them `released` in one write (`run` on its
    way out, whatever the batch's state). A lane that cannot go is reported, not fatal."""
    removed, failed = [], []
    for h in handoffs:
        try:
            release_handoff(s, h, slug=slug)
            removed.append(_removed(h["task_id"], h["lane_path"], h["lane_branch"], False))
        except LanesError as exc:
            failed.append({"task_id": h["task_id"], "path": h["lane_path"], "reason": exc.message})
    if removed:
        _record(s, slug, released=[r["task_id"] for r in removed])
    return removed + [dict(f, failed=True) for f in failed]


def release_restarted(s: Session, slug: str, task_id: str, keep_branch: bool = False) -> dict[str, Any] | None:
    """The old lane of a pending child that `resume --restart` sent back (SPEC §6 v3): its tip, and its
    uncommitted work as a snapshot commit on top, archived in the record first; then the worktree and the
    branch go. None when the child has no such lane."""
    from ..domain.snapshot import keep_lane_work

    snap = s.batches.read(slug)
    child = snap.record.child(task_id) if snap else None
    if child is None or child.state != "pending":
        return None
    if not any(a.task_id == task_id for a in snap.record.archived_lanes):
        return None
    branch = lane_branch(slug, task_id)
    tip = s.git.refs.resolve(branch_ref(branch))
    wt = s.worktree_on(branch)
    if tip is None and wt is None:
        return None
    keep, snapshot = keep_lane_work(s.git, task_id, wt.path if wt is not None else None, tip, "restarted")
    if keep is not None and keep not in snap.record.referenced_commits():
        _record(s, slug, archived=[ArchivedLane(at=s.clock(), task_id=task_id, branch=branch, tip=keep)])
    path = wt.path if wt is not None else ""
    remove_lane(s, path, branch, keep_branch, force=True)   # what it held is in the record now
    return _removed(task_id, path, branch, keep_branch, snapshot=snapshot)


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
    not_driven(s, slug)
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    rec = snap.record
    if not rec.terminal:
        raise refused("batch_lane_release_refused", f"batch {rec.batch_id} is {rec.batch_state}, not finished; "
                                                    "--stale only removes lanes of terminal batches")
    keep = []
    present: set[str] = set()   # lanes that still had a worktree or a branch: what is reported removed
    skipped: list[dict[str, str]] = []
    archived: list[ArchivedLane] = []
    snapshots: dict[str, str | None] = {}   # the commit holding a dirty lane's uncommitted work
    lost: dict[str, list[str]] = {}         # the ignored paths a removed lane held (not kept anywhere)
    for child in rec.children:
        if child.lane is None or child.lane.carried_over or child.state == "released":
            continue
        lane = child.lane
        tip = s.git.refs.resolve(branch_ref(lane.branch))
        if lane.path and s.worktree_at(lane.path) is not None and os.path.isdir(lane.path):
            from ..domain.snapshot import keep_lane_work

            # SPEC §17.1 v4: a dirty lane's uncommitted work goes into a commit the record keeps, then it goes
            lost[child.task_id] = s.git.work.ignored_top_level(lane.path)
            tip, snapshots[child.task_id] = keep_lane_work(s.git, child.task_id, lane.path, tip, "stale")
            present.add(child.task_id)
        if tip is not None:
            present.add(child.task_id)
        if tip is not None and tip not in rec.referenced_commits():
            archived.append(ArchivedLane(at=s.clock(), task_id=child.task_id, branch=lane.branch, tip=tip))
        keep.append(child)
    if archived:  # the record keeps the tips reachable before any branch goes
        _record(s, slug, archived=archived)
    for child in keep:
        remove_lane(s, child.lane.path, child.lane.branch, force=bool(snapshots.get(child.task_id)))
    integrated = [child.task_id for child in keep if child.state == "integrated"]
    if integrated:
        _record(s, slug, released=integrated)
    kept = {a.task_id: a.tip for a in archived}
    def facts(task: str) -> dict[str, Any]:
        found = {"snapshot": snapshots.get(task), "archived": kept.get(task), "ignored": lost.get(task)}
        return {key: value for key, value in found.items() if value}

    doc = {"released": [_removed(c.task_id, c.lane.path, c.lane.branch, False, **facts(c.task_id))
                        for c in keep if c.task_id in present],
           "skipped": skipped, "scratch": drop_scratch_pool(s)}
    from ..domain.receipts import prune

    dropped = prune(s.git, s.git.config_int("lanes.receiptDays", 30), s.clock())   # SPEC §8.7 v4
    if dropped:
        doc["receipts_pruned"] = len(dropped)
    return doc


def drop_scratch_pool(s: Session) -> list[str]:
    """The scratch worktrees (a cache shared by every batch of the repository, SPEC §13 v3) go when no
    batch of the repository is active; the paths removed."""
    from ..domain.scratch import remove_pool

    for slug in s.batches.slugs():
        snap = s.batches.read(slug)
        if snap is not None and not snap.record.terminal:
            return []
    return remove_pool(s)
