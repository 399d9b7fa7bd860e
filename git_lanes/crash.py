"""Fault injection for the crash tests: `GIT_LANES_CRASH_AT=<point>` kills this process (SIGKILL)
when it reaches the named point, so a test can die exactly after a given write.

Points: start-record-written, start-branch-created (start.py); lane-commit-recorded,
candidate-recorded, candidate-verified, fast-forwarded (tick/).
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    if os.environ.get("GIT_LANES_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
