"""Where a lane lives: the one seam between the coordinator and a lane.

Today every lane is a linked worktree of this repository (`LocalLanes`), observed through the
worktree list the command took after its lock. SPEC §14 adds lanes in other clones, observed from
refs alone; they implement the same methods.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from .decisions.admission import LaneFacts
from .session import Session

_CLEAN: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Presence:
    exists: bool          # a worktree of this repository lives at the path
    branch: str | None    # full ref its HEAD is on
    head: str | None


class LocalLanes:
    """Lanes that are linked worktrees of this repository."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.git = session.git

    def presence(self, path: str) -> Presence:
        wt = self.s.worktree_at(path) if path else None
        if wt is None or not os.path.isdir(path):
            return Presence(False, None, None)
        return Presence(True, wt.branch, wt.head)

    def clean(self, path: str, head: str | None = None) -> bool:
        """`git status` shows nothing. With `head`, a clean answer is remembered for (path, head) in
        this process: `run` asks every tick about lanes it has not released yet. A stale answer
        is harmless: removing a lane (`git worktree remove`, never forced) refuses a dirty one."""
        from .snapshot import worktree_clean

        key = (path, head)
        if head is not None and key in _CLEAN:
            return True
        clean = worktree_clean(self.git, path)
        if clean and head is not None:
            _CLEAN.add(key)
        return clean

    def delivery_tree(self, path: str) -> str:
        from .snapshot import snapshot_tree

        return snapshot_tree(self.git, path)

    def facts(self, path: str, *, coordinator: str, expected_branch: str, base_ok: Callable[[str], bool],
              occupied: Callable[[str], str | None]) -> LaneFacts:
        """Gather the admission facts of §6.1 from Git alone, stopping at the first failure."""
        real = os.path.realpath(path)
        wt = self.s.worktree_at(real) if os.path.isdir(real) else None
        is_root = wt is not None and os.path.realpath(wt.path) == real and not wt.bare
        if not is_root:
            return LaneFacts(real, False, False, None, None, False, True, None)
        if real == os.path.realpath(coordinator):
            return LaneFacts(real, True, True, None, None, False, True, None)
        facts = LaneFacts(real, True, False, wt.branch, wt.head, False, True, None)
        if wt.branch != "refs/heads/" + expected_branch or wt.head is None or not base_ok(wt.head):
            return facts
        dirty = bool(self.git.status(cwd=real))
        return LaneFacts(real, True, False, wt.branch, wt.head, True, dirty, occupied(real))
