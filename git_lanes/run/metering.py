"""A session's usage (SPEC §17.4, §17.6), as `run` and `work` handle it: the `GIT_LANES_USAGE` file named
for it, read and removed once the executor exited, and the session's entry in the lane record."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..batch.metering import record_session, take_usage, usage_path
from ..core.errors import LanesError
from ..domain.procs import signal_name

if TYPE_CHECKING:
    from ..domain.session import Session


def fresh_usage_file(log_dir: str, task: str, n: int) -> str:
    """The path the session may write its usage to (in its log folder, outside every worktree); a file an
    earlier run left there is removed first."""
    path = usage_path(log_dir, task, n)
    try:
        os.unlink(path)
    except OSError:
        pass
    return path


def session_ended(ls: "Session", path: str, n: int, started: str, exit_code: int | None) -> dict[str, Any] | None:
    """Read the session's usage and record `{n, started, ended, exit, usage}` in the lane record (under the
    lane's own lock); the usage (None: none reported). A record that cannot be written is a warning."""
    usage = take_usage(path, ls.warn)
    code: int | str | None = signal_name(-exit_code) if exit_code is not None and exit_code < 0 else exit_code
    try:
        record_session(ls, {"n": n, "started": started, "ended": ls.clock(), "exit": code, "usage": usage})
    except LanesError as exc:
        ls.warn(f"session {n}'s usage not recorded: {exc.message}")
    return usage


def budget_stop(cs: "Session", slug: str, batch_id: str, event) -> bool:
    """Nothing runs and a budget is reached: every in-flight child parks `budget_reached`, the batch goes
    needs_human (SPEC §17.6); whether it did."""
    from ..batch.metering import over_budget as reached, stop_for_budget

    reason = reached(cs, slug, batch_id)
    if reason is not None:
        stop_for_budget(cs, slug, batch_id, reason)
        event(f"stopped: {reason}")
    return reason is not None
