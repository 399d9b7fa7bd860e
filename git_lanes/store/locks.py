"""The `flock`s that order git-lanes' writers (SPEC §15), all under `<git-common-dir>/lanes/locks/`.

- `<slug>.lock`: every writer of the batch record of a slug (and the coordinator's moves of
  its batch branch and lane branches).
- `<slug>.verify`: the one verifier of a candidate of a slug (SPEC §8.6).
- `<slug>.run`: the one loop that drives the slug's batch (`git lanes run`, SPEC §13), held for its
  whole run and never waited for: a second one refuses at once (it holds the driver's pid).
- `<slug>/<task>.lane`: every writer of one lane record (the commands run in that lane).
- `evidence`: every writer of `refs/notes/lanes/evidence`, which all slugs share.

A lock is waited for up to `lanes.lockTimeout` seconds (default 30), then `batch_busy`. The
names in a lock path are validated ids, so a lock file is never created outside the repository.
Holding the lock that guards a ref makes any Git `.lock` file on that ref a dead process's: the
holder removes it with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import ExitCode, LanesError, refused
from ..ids import check_id

if TYPE_CHECKING:
    from ..gitio import Git

POLL = 0.05          # the longest wait between two tries of a lock another process holds
FIRST_POLL = 0.002   # the first: a writer's hold is often a few milliseconds, then the waits double

# A thread of this process that releases an `flock` wakes the threads of this process waiting for
# one (`run`'s verifier and main thread hand the slug's lock to each other without a poll's delay).
_released = threading.Condition()
_releases = 0


def _note_release() -> None:
    global _releases
    with _released:
        _releases += 1
        _released.notify_all()


def _wait_release(seen: int, wait: float) -> None:
    """Sleep `wait` seconds, or less when a thread of this process releases a lock after `seen`."""
    with _released:
        if _releases == seen:
            _released.wait(wait)


def _jittered(wait: float) -> float:
    """`wait` times 0.5 to 1.5: waiters polling in step would leave the lock to whichever polls first
    after a release, every time (the clock's nanoseconds: no `random` to import)."""
    return wait * (0.5 + time.perf_counter_ns() % 1_000_003 / 1_000_003)


def lock_dir(git: "Git") -> str:
    return os.path.join(git.common_dir, "lanes", "locks")


def _open_lock(path: str) -> int:
    """The lock file at `path`, opened (its folders and itself created if missing); a file where a
    folder belongs (`lanes/locks` replaced by a file), a symbolic link or no permission is one fatal
    error naming the path, never a traceback."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LanesError(f"cannot open the lock file {path}: {exc.strerror or exc}", exit_code=ExitCode.FATAL) from None


@contextmanager
def flock(path: str, timeout: float, busy: str) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing), or raise `batch_busy: <busy>`."""
    fd = _open_lock(path)
    try:
        deadline = time.monotonic() + timeout
        poll = FIRST_POLL
        while True:
            seen = _releases
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise refused("batch_busy", busy) from None
                _wait_release(seen, min(_jittered(poll), max(0.0, deadline - time.monotonic())))
                poll = min(POLL, poll * 2)
        yield
    finally:
        os.close(fd)
        _note_release()


class Held:
    """An `flock` this process holds until `release()`."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            _note_release()


def flock_try(path: str) -> Held | None:
    """Take the `flock` on `path` (created if missing) without waiting; None when someone holds it."""
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return Held(fd)


def is_held(path: str) -> bool:
    """Whether some process holds the `flock` on `path` now (without waiting)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _timeout(git: "Git", timeout: float | None) -> float:
    return float(git.config_int("lanes.lockTimeout", 30)) if timeout is None else timeout


@contextmanager
def slug_lock(git: "Git", slug: str, timeout: float | None = None,
              warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """The slug's lock; a Git `.lock` on its batch record ref is then stale and is removed."""
    check_id(slug, "slug")
    wait = _timeout(git, timeout)
    with flock(os.path.join(lock_dir(git), f"{slug}.lock"), wait,
               f"another git-lanes command holds the lock of {slug} (waited {wait:g} s; lanes.lockTimeout)"):
        _remove_ref_lock(git, f"refs/notes/lanes/batch/{slug}", warn or git.warn)
        yield


def verify_lock_path(git: "Git", slug: str) -> str:
    check_id(slug, "slug")
    return os.path.join(lock_dir(git), f"{slug}.verify")


def run_lock(git: "Git", slug: str) -> Held:
    """Take `<slug>.run` for a loop that drives the batch of `slug` (SPEC §13: one executor session per
    lane, so one driver per slug), writing this process's pid into it; `batch_busy` at once when another
    process holds it. The caller releases it when the loop ends (a killed process's goes with it)."""
    check_id(slug, "slug")
    path = os.path.join(lock_dir(git), f"{slug}.run")
    held = flock_try(path)
    if held is None:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                pid = f.read().strip()
        except OSError:
            pid = ""
        raise refused("batch_busy", f"another git lanes run drives {slug}" + (f" (pid {pid})" if pid.isdigit() else ""))
    assert held.fd is not None
    os.ftruncate(held.fd, 0)
    os.pwrite(held.fd, f"{os.getpid()}\n".encode(), 0)
    return held


def fast_forward_mark(git: "Git", slug: str) -> str:
    """`<slug>.ff`: written before the coordinator's `merge --ff-only` and removed once the merge
    succeeded, both under the slug's lock. A later holder that finds it knows a merge died or failed
    (perhaps after its index write); without it, no hold scans the coordinator for a half-done one."""
    check_id(slug, "slug")
    return os.path.join(lock_dir(git), f"{slug}.ff")


@contextmanager
def fetch_lock(git: "Git", namespace: str, timeout: float | None = None) -> Iterator[None]:
    """Taken by every fetch into the tracking namespace `namespace` (`refs/lanes-remotes/<name>/`): two
    at once (a lane's `push` beside its `work` loop's pull) race on its refs, and Git fails one
    (`cannot lock ref …: is at X but expected Y`)."""
    from ..digests import sha1_hex

    wait = _timeout(git, timeout)
    name = sha1_hex(namespace.encode("utf-8", "surrogateescape"))[:16]
    with flock(os.path.join(lock_dir(git), f"fetch-{name}"), wait,
               f"another git-lanes command is fetching into {namespace} (waited {wait:g} s; lanes.lockTimeout)"):
        yield


@contextmanager
def lane_lock(git: "Git", slug: str, task: str, timeout: float | None = None,
              warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """The lane's own lock, held by every writer of its lane record."""
    check_id(slug, "slug")
    check_id(task, "task id")
    wait = _timeout(git, timeout)
    with flock(os.path.join(lock_dir(git), slug, f"{task}.lane"), wait,
               f"another git-lanes command in the lane of {task} holds its lock (waited {wait:g} s)"):
        _remove_ref_lock(git, f"refs/notes/lanes/lane/{slug}/{task}", warn or git.warn)
        yield


@contextmanager
def evidence_lock(git: "Git", timeout: float | None = None,
                  warn: Callable[[str], None] | None = None) -> Iterator[None]:
    wait = _timeout(git, timeout)
    with flock(os.path.join(lock_dir(git), "evidence"), wait,
               f"another git-lanes command holds the evidence lock (waited {wait:g} s)"):
        _remove_ref_lock(git, "refs/notes/lanes/evidence", warn or git.warn)
        yield


def _remove_ref_lock(git: "Git", ref: str, warn: Callable[[str], None]) -> None:
    """Remove the Git `.lock` of a loose ref whose writers all hold the lock we hold."""
    path = os.path.join(git.common_dir, *ref.split("/")) + ".lock"
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    warn(f"removed stale lock file {path}")
