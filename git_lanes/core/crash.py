"""Fault injection for the crash tests: `GIT_LANES_CRASH_AT=<point>` kills this process (SIGKILL)
when it reaches the named point, so a test can die exactly after a given write.

Points (each right after a change to Git state, before the next one):
  batch/start.py      record-written, branch-created
  domain/workspace.py lane-branch-created, worktree-added, worktree-removed, branch-deleted
  lane/side.py        attempt-recorded
  tick/               lane-commit-recorded, lane-branch-moved, candidate-recorded, candidate-verified,
                      fast-forward-marked, fast-forwarded, evidence-recorded, tracker-closed
  domain/leaks.py     leak-backed-up, leak-restored
  batch/resume.py     resume-recorded, retire-recorded
  run/sessions.py     session-done

tests/tick/test_crash_matrix.py kills at every one of them and checks that the next command continues.
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    if os.environ.get("GIT_LANES_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
