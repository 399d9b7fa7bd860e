"""Who works in a lane right now: the `flock` of its executor session (SPEC §13: one session per lane).

A session takes `<the lane's admin folder>/git-lanes-session` before its executor starts, and the
executor inherits the lock: it is held for as long as the executor runs, also when the `run` or
`work` that started it was killed (the executor has a process group of its own, which a SIGKILL of
its parent does not reach). The file names that group. The next `run` that wants a session in the
lane finds the lock held by a live group and waits for that session instead of starting a second
one beside it; a lock whose group is gone (something the executor left behind, outside its group)
is broken: it speaks for no session.
"""

from __future__ import annotations

import fcntl
import os

NAME = "git-lanes-session"


class Busy(Exception):
    """The lane's session lock is held by the live process group `group`."""

    def __init__(self, group: int) -> None:
        super().__init__(group)
        self.group = group


class Occupancy:
    """The session lock of one lane, held through `fd` (inherited by the executor)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def take(cls, admin: str) -> "Occupancy":
        """The lock of the lane whose admin folder is `admin`; Busy when a live session holds it."""
        path = os.path.join(admin, NAME)
        for _ in range(3):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                group = _group(fd)
                os.close(fd)
                if group is not None and alive(group):
                    raise Busy(group) from None
                _unlink(path)   # no live session holds it: a new file, a new lock
                continue
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return cls(path, fd)
            os.close(fd)   # broken by someone else meanwhile: take the new one
        raise Busy(0)

    def name(self, group: int) -> None:
        """Record the process group of the session that holds the lock now."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{group}\n".encode(), 0)

    def release(self) -> None:
        """This process lets go (an executor still running keeps its inherited hold)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _group(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 1 else None


def alive(group: int) -> bool:
    """Whether any process of the process group `group` is still there."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # someone else's processes: there all the same
    return True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
