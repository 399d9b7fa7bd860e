"""Heartbeats on their timer while `git lanes work`'s loop is busy with one long step: a join runs
`lanes.setupCommand`, which may take longer than `lanes.remoteTimeout` (SPEC §14: heartbeats go on
"whatever its sessions are doing"). They run in a thread of their own, with a session of their own.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from ..domain.session import Session


@contextmanager
def beating(beat: Callable[["Session"], None], cwd: str, event: Callable[[str], None],
            poll: float = 1.0) -> Iterator[None]:
    """Call `beat(session)` every `poll` seconds (it decides whether a heartbeat is due) until the block ends."""
    from ..domain.session import Session

    stop = threading.Event()

    def loop() -> None:
        s = Session(cwd=cwd)
        while not stop.wait(poll):
            try:
                beat(s)
            except Exception as exc:   # never the loop's end: the main loop beats again after the step
                event(f"heartbeat failed: {exc}")
                return

    beater = threading.Thread(target=loop, name="heartbeats", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
