"""State in Git (SPEC §15): batch records, lane records and evidence notes under
`refs/notes/lanes/`, and the locks that order their writers.

  refs/notes/lanes/batch/<slug>        one commit per state write (first parent = the audit log)
  refs/notes/lanes/lane/<slug>/<task>  the lane's own record (lane.json + attempts/ + trees/)
  refs/notes/lanes/evidence            git notes on integrated commits
"""

from ..gitio import BATCH_RECORD_PREFIX as BATCH_REF
from ..gitio import EVIDENCE_REF
from ..gitio import LANE_RECORD_PREFIX as LANE_REF
from .batch import BatchStore, Snapshot, Transaction
from .evidence import EvidenceNotes
from .lanes import LaneStore
from .layout import CorruptRecord, record_from_files
from .locks import (Held, driver, evidence_lock, fast_forward_mark, fetch_lock, flock_try, is_held, lane_lock,
                    lane_lock_held, lane_lock_try, lock_path, run_lock, slug_lock, verify_lock_path)

__all__ = ["BATCH_REF", "EVIDENCE_REF", "LANE_REF", "BatchStore", "Snapshot", "Transaction", "EvidenceNotes",
           "LaneStore", "CorruptRecord", "record_from_files", "Held", "driver", "evidence_lock", "fast_forward_mark",
           "fetch_lock", "flock_try", "is_held", "lane_lock", "lane_lock_held", "lane_lock_try", "lock_path",
           "run_lock", "slug_lock",
           "verify_lock_path"]

from .locks import candidate_lock_path  # noqa: E402 (SPEC §8.9: the window's verification locks)

__all__ += ["candidate_lock_path"]
