"""Admission of an offered lane (SPEC §6.1): the first failing check wins."""

from __future__ import annotations

from dataclasses import dataclass

MAX_OFFERS = 64
MAX_PATH_BYTES = 4096


@dataclass(frozen=True)
class LaneFacts:
    """What Git says about an offered path (gathered by the effectful side)."""
    real_path: str
    is_worktree_root: bool          # exists, is the root of a worktree of this repository
    is_coordinator: bool
    branch: str | None              # full ref HEAD is on, None when detached
    head: str | None
    base_ok: bool                   # HEAD is a batch-branch commit containing the blockers' integrations
    dirty: bool
    occupied_by: str | None         # another non-released child whose lane is this path


def admission_refusal(facts: LaneFacts, expected_branch: str) -> str | None:
    """The reason code refusing the offer, or None when it is admitted."""
    if not facts.is_worktree_root:
        return "batch_lane_foreign_repository"
    if facts.is_coordinator:
        return "batch_lane_is_coordinator"
    if facts.branch != "refs/heads/" + expected_branch:
        return "batch_lane_branch_mismatch"
    if not facts.base_ok:
        return "batch_lane_base_mismatch"
    if facts.dirty:
        return "batch_lane_dirty"
    if facts.occupied_by is not None:
        return "batch_lane_occupied"
    return None
