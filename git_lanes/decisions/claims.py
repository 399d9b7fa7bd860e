"""Whether a lane record's claim stands (SPEC §14): a pure rule, shared by the coordinator (which
reads records as models) and the lane side (which reads them as plain data)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence


def claim_is_live(batch_id: str, archived_runs: Collection[str], lane_batch_id: object, lane_run_id: object,
                  released: bool) -> bool:
    """A claim held in a lane record stands unless that clone released the lane, or the record is of
    another batch, or of a run that `resume --restart` ended (its run id among the task's archived
    lanes)."""
    return not released and lane_batch_id == batch_id and lane_run_id not in archived_runs


def join_order(tasks: Sequence[str], blocked_by: Mapping[str, Sequence[str]], clone_id: str) -> list[str]:
    """The order in which an executor machine claims the startable `tasks` (SPEC §14 `work`): the task
    most work waits for first (`chain_below`: its chain is the batch's critical path); among equals an
    order of this clone's own (a hash of clone and task), so machines that see the same handoffs
    rarely race for the same claim."""
    from hashlib import sha256

    from .schedule import chain_below

    below = chain_below(blocked_by)
    return sorted(tasks, key=lambda task: (-below.get(task, 0), sha256(f"{clone_id}/{task}".encode()).hexdigest()))
