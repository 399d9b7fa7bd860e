"""Whether a lane record's claim stands (SPEC §14): a pure rule, shared by the coordinator (which
reads records as models) and the lane side (which reads them as plain data)."""

from __future__ import annotations

from collections.abc import Collection


def claim_is_live(batch_id: str, archived_runs: Collection[str], lane_batch_id: object, lane_run_id: object,
                  released: bool) -> bool:
    """A claim held in a lane record stands unless that clone released the lane, or the record is of
    another batch, or of a run that `resume --restart` ended (its run id among the task's archived
    lanes)."""
    return not released and lane_batch_id == batch_id and lane_run_id not in archived_runs
