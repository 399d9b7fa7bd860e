"""The only code that talks to Git (SPEC §8, §15).

- `process`: the scrubbed environment, the `-c` settings, running `git`, its errors.
- `git`: one discovered repository: discovery, config, identities, its components.
- `refs`: typed branch names, reads, and compare-and-swap ref transactions with lock hygiene.
- `objects`: blobs, trees and commits read and built in-process; ancestry, merge-tree.
- `worktrees`: the worktree list and every operation on a working tree.
- `transport`: mirror fetches and atomic pushes with leases.

No module outside this package imports dulwich or runs `git`.
"""

from .git import Git
from .objects import CommitInfo, MissingObject, TreeEntry, quote_path, trailers
from .process import FALLBACK_IDENT, MIN_GIT, SAFE_CONFIG, ZERO_OID, GitError, init_repository, is_oid, local_env_vars
from .refs import (BATCH_BRANCH_PREFIX, BATCH_RECORD_PREFIX, EVIDENCE_REF, LANE_BRANCH_PREFIX, LANE_RECORD_PREFIX,
                   STATE_PREFIX, BatchBranch, LaneBranch, RefRaceError, batch_record_ref, branch_ref, lane_record_ref,
                   short_branch)
from .worktrees import StatusEntry, Worktree, WorktreeList

__all__ = [
    "FALLBACK_IDENT", "MIN_GIT", "SAFE_CONFIG", "ZERO_OID", "Git", "GitError", "init_repository", "is_oid",
    "local_env_vars",
    "CommitInfo", "MissingObject", "TreeEntry", "quote_path", "trailers",
    "BATCH_BRANCH_PREFIX", "BATCH_RECORD_PREFIX", "EVIDENCE_REF", "LANE_BRANCH_PREFIX", "LANE_RECORD_PREFIX",
    "STATE_PREFIX", "BatchBranch", "LaneBranch", "RefRaceError", "batch_record_ref", "branch_ref", "lane_record_ref",
    "short_branch", "StatusEntry", "Worktree", "WorktreeList",
]
