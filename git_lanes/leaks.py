"""Leak restore (SPEC §9): lane bytes written into the coordinator, proven and put back."""

from __future__ import annotations

from .errors import refused
from .model import BatchRecord, Restore
from .session import Session


def restore_leaks(s: Session, record: BatchRecord, at: str) -> Restore | None:
    """None when the coordinator is clean; refuses `working_tree_unstaged` on anything unprovable."""
    entries = s.git.status(cwd=record.coordinator)
    if not entries:
        return None
    first = entries[0]
    raise refused("working_tree_unstaged", f"{first.path}: the coordinator has changes git-lanes cannot prove "
                                           "are a lane's; move or commit them yourself")
