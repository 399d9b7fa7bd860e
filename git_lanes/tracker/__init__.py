"""The tracker port (SPEC §11): close a child's issue once its commit is on the batch branch.

A tracker never raises for remote trouble and never changes batch or child state; it answers
with a `TrackerResult`. Only `updated` and `already_current` count as closed (`tracker_closed`);
every other status is retried on later ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

UPDATED = "updated"
ALREADY_CURRENT = "already_current"
RETRYABLE_FAILURE = "retryable_failure"
PERMANENT_FAILURE = "permanent_failure"
AMBIGUOUS_REMOTE_STATE = "ambiguous_remote_state"

STATUSES = (UPDATED, ALREADY_CURRENT, RETRYABLE_FAILURE, PERMANENT_FAILURE, AMBIGUOUS_REMOTE_STATE)
CLOSED_STATUSES = (UPDATED, ALREADY_CURRENT)


@dataclass(frozen=True)
class TrackerResult:
    """The outcome of one close attempt: a status from `STATUSES` and a one-line message."""

    status: str
    message: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown tracker status: {self.status!r}")

    @property
    def closed(self) -> bool:
        """True when the issue is known closed by us (sets `tracker_closed`)."""
        return self.status in CLOSED_STATUSES


def marker(batch_id: str, task_id: str) -> str:
    """The hidden comment that records our terminal event on an issue."""
    return f"<!-- git-lanes:terminal-event={batch_id}/{task_id} -->"


@runtime_checkable
class Tracker(Protocol):
    """Closes issues for integrated children; idempotent, never raises for remote trouble."""

    def close_issue(self, repo: str, number: int, batch_id: str, task_id: str) -> TrackerResult:
        """Close issue `number` of `repo` (`owner/name`) for `batch_id`/`task_id`."""
        ...


__all__ = [
    "ALREADY_CURRENT", "AMBIGUOUS_REMOTE_STATE", "CLOSED_STATUSES", "PERMANENT_FAILURE",
    "RETRYABLE_FAILURE", "STATUSES", "Tracker", "TrackerResult", "UPDATED", "marker",
]
