"""Worktrees git-lanes creates for work: where lanes go, how a new worktree is set up (lane and
scratch alike), and how a lane is created and removed (SPEC §6 provision/release, §8.3).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from .checks import CheckResult, child_env, run_command
from .errors import refused, usage
from .gitio import LaneBranch, RefRaceError

if TYPE_CHECKING:
    from .session import Session

SETUP_TIMEOUT = 1800.0


def repo_id(s: "Session") -> str:
    """A stable, readable id of this repository: `<name>-<8 hex of the common dir>`."""
    common = os.path.realpath(s.git.common_dir)
    name = os.path.basename(os.path.dirname(common)) if os.path.basename(common) == ".git" else os.path.basename(common)
    return f"{name or 'repo'}-{hashlib.sha256(common.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def lane_root(s: "Session") -> str:
    root = s.git.config_get("lanes.worktreeRoot")
    if root:
        return os.path.expanduser(root)
    from platformdirs import user_data_dir

    return user_data_dir("git-lanes", appauthor=False)


def default_lane_path(s: "Session", slug: str, task_id: str) -> str:
    return os.path.join(lane_root(s), repo_id(s), slug, task_id)


def run_setup(s: "Session", path: str, *, slug: str, batch_id: str, task_id: str) -> CheckResult | None:
    """`lanes.setupCommand` in a new worktree (None when there is none)."""
    cmd = s.git.config_get("lanes.setupCommand")
    if not cmd:
        return None
    env = child_env(os.environ, s.git.local_env_vars, slug=slug, batch=batch_id, task=task_id)
    return run_command("setup", cmd, cwd=path, env=env, timeout=SETUP_TIMEOUT)


def last_line(result: CheckResult) -> str:
    lines = result.output_tail.strip().splitlines()
    return lines[-1] if lines else ""


def create_lane(s: "Session", slug: str, task_id: str, base: str, batch_id: str, path: str | None = None) -> str:
    """The lane branch at `base` (refusing an existing one), its worktree, set up; its path.

    Offering it (a tick) is the caller's business: `provision` offers one, `run` several at once.
    """
    branch = LaneBranch(slug, task_id)
    if s.git.refs.resolve(branch.ref) is not None:
        raise refused("batch_lane_branch_exists", f"{branch.name} exists already; release it or offer its worktree "
                                                  "with 'git lanes tick --offer'")
    target = os.path.abspath(path) if path else default_lane_path(s, slug, task_id)
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise usage(f"--path: {target} exists and is not empty")
    try:
        s.git.refs.create(branch.ref, base, f"git-lanes: provision {task_id}")
    except RefRaceError:
        raise refused("batch_lane_branch_exists", f"{branch.name} was created meanwhile") from None
    os.makedirs(os.path.dirname(target), exist_ok=True)
    s.git.work.add(target, branch.name)
    s.worktrees(refresh=True)
    result = run_setup(s, target, slug=slug, batch_id=batch_id, task_id=task_id)
    if result is not None and not result.passed:
        s.warn(f"lanes.setupCommand failed in {target} (exit {result.exit_code}): {last_line(result)}")
    return target


def remove_lane(s: "Session", path: str, branch: str, keep_branch: bool = False) -> None:
    """Remove a lane's worktree (never forced) and, unless kept, its branch (compare-and-swap)."""
    tip = s.git.refs.resolve("refs/heads/" + branch)
    if path and os.path.isdir(path):
        s.git.work.remove(path)
    else:
        s.git.work.prune()
    s.worktrees(refresh=True)
    if not keep_branch and tip is not None:
        s.git.refs.delete("refs/heads/" + branch, tip, "git-lanes: release lane")
