"""An executor's output, redacted as it is written to its session log (SPEC §2.1 v3, §17.6 v4).

The executor writes into a pipe; a thread copies what it reads into the log with every secret value
replaced by `***` — also a secret split across two reads: the last bytes that could begin one wait for
the next read (or the end). The log stays live, behind by at most the longest secret.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable

from ..core.redact import MASK


class RedactedLog:
    """A pipe (`write_fd` for the executor) whose output a thread appends to `path`, redacted."""

    def __init__(self, path: str, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s.encode("utf-8", "surrogateescape") for s in secrets if s}, key=len, reverse=True)
        self.path = path
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, False)   # passed to the executor as its stdout only
        self.thread = threading.Thread(target=self._copy, daemon=True, name=f"log {os.path.basename(path)}")
        self.thread.start()

    def started(self) -> None:
        """The executor has its copy of the writing end (or never will): ours goes, so its end is EOF."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def _copy(self) -> None:
        hold = max((len(s) for s in self.secrets), default=1) - 1
        mask = MASK.encode()
        pending = b""
        try:
            with open(self.path, "ab", buffering=0) as out:
                while True:
                    try:
                        chunk = os.read(self.read_fd, 65536)
                    except OSError:
                        chunk = b""
                    pending += chunk
                    for secret in self.secrets:
                        pending = pending.replace(secret, mask)
                    cut = len(pending) if not chunk else max(0, len(pending) - hold)
                    if cut:
                        out.write(pending[:cut])
                        pending = pending[cut:]
                    if not chunk:
                        return
        finally:
            os.close(self.read_fd)
