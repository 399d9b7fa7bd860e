"""Beyond one machine (SPEC §14): one batch, many clones, any Git server in between.

    replicate   `push` / `pull`: compare-and-swap replication of records and branches
    claims      `join` (a lane claimed in this clone), a remote lane's `release`, the executor's own
                refs, and the re-pull-and-retry policy every loop pushes with
    work        `git lanes work`: the executor machine's loop
    coordinate  `git lanes run --remote`: the coordinator's loop

The coordinator admits and observes a lane of another clone from refs alone, through
`domain/lanehost.RemoteLanes`; the lane side of such a lane is `lane/side.py` as for any lane.
"""

from .replicate import NEGATIVE, PULL_STATUSES, PUSH_STATUSES, pull, push, push_retrying

__all__ = ["NEGATIVE", "PULL_STATUSES", "PUSH_STATUSES", "pull", "push", "push_retrying"]
