"""The built-in steward: `git lanes provision` and `git lanes release` (SPEC §6)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .checks import child_env, run_command
from .errors import refused, usage
from .model import ArchivedLane
from .plan import check_id
from .session import Session, lane_branch
from .store import slug_lock
from .tick import Outcome, Request, Tick


def repo_id(s: Session) -> str:
    """A stable, readable id of this repository: `<name>-<8 hex of the common dir>`."""
    common = os.path.realpath(s.git.common_dir)
    name = os.path.basename(os.path.dirname(common)) if os.path.basename(common) == ".git" else os.path.basename(common)
    return f"{name or 'repo'}-{hashlib.sha256(common.encode()).hexdigest()[:8]}"


def lane_root(s: Session) -> str:
    root = s.git.config_get("lanes.worktreeRoot")
    if root:
        return os.path.expanduser(root)
    from platformdirs import user_data_dir

    return user_data_dir("git-lanes", appauthor=False)


def default_lane_path(s: Session, slug: str, task_id: str) -> str:
    return os.path.join(lane_root(s), repo_id(s), slug, task_id)


def run_setup(s: Session, path: str, slug: str, batch_id: str, task_id: str) -> None:
    cmd = s.git.config_get("lanes.setupCommand")
    if not cmd:
        return
    env = child_env(os.environ, s.git.local_env_vars, slug=slug, batch=batch_id, task=task_id)
    result = run_command("setup", cmd, cwd=path, env=env, timeout=1800)
    if not result.passed:
        tail = result.output_tail.strip().splitlines()[-1:] or [""]
        s.warn(f"lanes.setupCommand failed in {path} (exit {result.exit_code}): {tail[0]}")


def provision(s: Session, slug: str, task_id: str, path: str | None) -> Outcome:
    """Create the lane branch at the provision handoff's base, add the worktree, set it up, offer it."""
    check_id(task_id, "task id")
    report = Tick(s, slug, Request(actor="status")).report_only()
    handoff = next((h for h in report["handoffs"] if h.get("action") == "provision" and h["task_id"] == task_id), None)
    if handoff is None:
        raise refused("batch_lane_unknown_child", f"{task_id} has no provision handoff in batch {report['batch_id']} "
                                                  f"(it is {_state_of(report, task_id)})")
    target = create_lane(s, slug, task_id, handoff["base_head"], report["batch_id"], path)
    return Tick(s, slug, Request(offers=[(task_id, target)], actor="provision")).run()


def create_lane(s: Session, slug: str, task_id: str, base: str, batch_id: str, path: str | None = None) -> str:
    """The lane branch at `base` (refusing an existing one), its worktree, set up; the worktree path.

    Offering it (a tick) is the caller's business: `provision` offers one, `run` several at once.
    """
    branch = lane_branch(slug, task_id)
    ref = "refs/heads/" + branch
    if s.git.resolve(ref) is not None:
        raise refused("batch_lane_branch_exists", f"{branch} exists already; release it or offer its worktree "
                                                  "with 'git lanes tick --offer'")
    target = os.path.abspath(path) if path else default_lane_path(s, slug, task_id)
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise usage(f"--path: {target} exists and is not empty")
    if not s.git.repo.refs.add_if_new(ref.encode(), base.encode(),
                                      message=f"git-lanes: provision {task_id}".encode()):
        raise refused("batch_lane_branch_exists", f"{branch} was created meanwhile")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    s.git.run("worktree", "add", "-q", target, branch)
    s.worktrees(refresh=True)
    run_setup(s, target, slug, batch_id, task_id)
    return target


def _state_of(report: dict[str, Any], task_id: str) -> str:
    child = next((c for c in report["children"] if c["task_id"] == task_id), None)
    return "not a child of this batch" if child is None else child["state"]


def _remove_lane(s: Session, path: str, branch: str, tip: str | None, keep_branch: bool) -> None:
    if os.path.isdir(path):
        s.git.run("worktree", "remove", path)
    else:
        s.git.run("worktree", "prune")
    if not keep_branch and tip is not None:
        s.git.update_ref("refs/heads/" + branch, None, tip, "git-lanes: release lane")


def release(s: Session, slug: str, task_id: str, keep_branch: bool = False) -> dict[str, Any]:
    """Remove a lane that a release handoff names; record it `released`."""
    check_id(task_id, "task id")
    report = Tick(s, slug, Request(actor="status")).report_only()
    handoff = next((h for h in report["handoffs"] if h.get("action") == "release" and h["task_id"] == task_id), None)
    if handoff is None:
        restarted = _restarted_lane(s, slug, task_id)
        if restarted is not None:  # `resume --restart` archived its tip: the old lane may go
            remove_lane(s, restarted, keep_branch)
            return {"released": [{"task_id": task_id, "path": restarted["lane_path"], "branch_kept": keep_branch}]}
        raise refused("batch_lane_release_refused", f"{task_id} has no release handoff (it is "
                                                    f"{_state_of(report, task_id)}; only an integrated, clean lane "
                                                    "on its branch is released)")
    remove_lane(s, handoff, keep_branch)
    _record_released(s, slug, [task_id], [])
    return {"released": [{"task_id": task_id, "path": handoff["lane_path"], "branch_kept": keep_branch}]}


def _restarted_lane(s: Session, slug: str, task_id: str) -> dict[str, Any] | None:
    """The old lane of a pending child that `resume --restart` sent back: its branch tip is archived
    in the record, and its worktree (if any) is clean."""
    snap = s.batches.read(slug)
    child = snap.record.child(task_id) if snap else None
    if child is None or child.state != "pending":
        return None
    branch = lane_branch(slug, task_id)
    tip = s.git.resolve("refs/heads/" + branch)
    if tip is None or not any(a.task_id == task_id and a.tip == tip for a in snap.record.archived_lanes):
        return None
    wt = s.worktree_on(branch)
    if wt is not None:
        from .snapshot import worktree_clean

        if not worktree_clean(s.git, wt.path):
            raise refused("batch_lane_release_refused", f"the old lane of {task_id} at {wt.path} has uncommitted work")
    return {"lane_branch": branch, "lane_path": wt.path if wt else ""}


def remove_lane(s: Session, handoff: dict[str, Any], keep_branch: bool = False) -> None:
    """Remove the lane of a release handoff, without a write: the next tick records it `released`
    (step 4). `release` writes at once; `run` removes lanes between its ticks this way."""
    tip = s.git.resolve("refs/heads/" + handoff["lane_branch"])
    _remove_lane(s, handoff["lane_path"], handoff["lane_branch"], tip, keep_branch)


def _record_released(s: Session, slug: str, released: list[str], archived: list[ArchivedLane]) -> None:
    with slug_lock(s.git, slug, warn=s.warn):
        snap = s.batches.read(slug)
        if snap is None:
            return
        rec = snap.record.model_copy(deep=True)
        for task_id in released:
            child = rec.child(task_id)
            if child is not None and child.state == "integrated":
                child.state = "released"
        rec.archived_lanes.extend(archived)
        rec.updated_at = s.clock()
        s.batches.write(snap, rec, summary="released " + ", ".join(released + [a.task_id for a in archived]),
                        actor="release")


def release_stale(s: Session, slug: str) -> dict[str, Any]:
    """Remove clean lanes of a terminal batch, keeping never-integrated lane tips reachable."""
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    rec = snap.record
    if not rec.terminal:
        raise refused("batch_lane_release_refused", f"batch {rec.batch_id} is {rec.batch_state}, not finished; "
                                                    "--stale only removes lanes of terminal batches")
    keep: list[tuple] = []
    skipped: list[dict[str, str]] = []
    archived: list[ArchivedLane] = []
    for child in rec.children:
        if child.lane is None or child.state == "released":
            continue
        lane = child.lane
        tip = s.git.resolve("refs/heads/" + lane.branch)
        if s.worktree_at(lane.path) is not None and os.path.isdir(lane.path):
            from .snapshot import worktree_clean

            if not worktree_clean(s.git, lane.path):
                skipped.append({"task_id": child.task_id, "reason": f"{lane.path} has uncommitted work"})
                continue
        if tip is not None and tip not in rec.referenced_commits():
            archived.append(ArchivedLane(at=s.clock(), task_id=child.task_id, branch=lane.branch, tip=tip))
        keep.append((child, tip))
    if archived:  # the record keeps the tips reachable before any branch goes
        _record_released(s, slug, [], archived)
    released = []
    for child, tip in keep:
        _remove_lane(s, child.lane.path, child.lane.branch, tip, keep_branch=False)
        released.append({"task_id": child.task_id, "path": child.lane.path})
    integrated = [child.task_id for child, _ in keep if child.state == "integrated"]
    if integrated:
        _record_released(s, slug, integrated, [])
    return {"released": released, "skipped": skipped}
