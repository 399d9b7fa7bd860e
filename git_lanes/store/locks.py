"""The `flock`s that order git-lanes' writers (SPEC §15 v4), all under `<git-common-dir>/lanes/locks/`,
one folder per kind, so no slug, task or remote name can meet another lock:

- `batch/<slug>`: every writer of the batch record of a slug (and the coordinator's moves of its
  batch branch and lane branches).
- `lane/<slug>/<task>`: every writer of one lane record (the commands run in that lane), and a
  `provision` of that task from its start until its lane is admitted or removed.
- `verify/<slug>/<task_id>`: the verifier of a candidate of a slug (SPEC §8.6; `verify_lock_path`
  still names v3's `<slug>.verify` until the verifier's lock moves there).
- `run/<slug>`: the one loop that drives the slug's batch (`git lanes run`, SPEC §13), held for its
  whole run and never waited for: a second one refuses at once. It holds the driver's pid, start
  time and host (`status` shows them, SPEC §17.1).
- `ff/<slug>`: not a lock but a mark (`fast_forward_mark`).
- `fetch/<hex SHA-1 of the remote name>`: every fetch into a remote's tracking namespace.
- `scratch/<slot>`: a scratch worktree in use (`domain/scratch.py`).
- `evidence`: every writer of `refs/notes/lanes/evidence`, which all slugs share; `receipts` likewise.

For one release a writer also takes the v3 lock of the same ref after its own (`<slug>.lock` of a
batch record, `<slug>/<task>.lane` of a lane record), so a v3 process running beside it is excluded;
a slug whose v3 lane folder would meet a lock name (`evidence`, `batch`, `x.verify`, …) gets none.
All git-lanes processes on one repository must be of one version at a time.

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
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from ..core.errors import ExitCode, LanesError, refused
from ..core.ids import check_id

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


KINDS = ("batch", "lane", "verify", "run", "ff", "fetch", "scratch")   # the folders under locks/
FILES = ("evidence", "receipts")                                      # the files beside them
_V3_FILES = (".lock", ".verify", ".run", ".ff")                       # the suffixes of v3's lock files


def lock_dir(git: "Git") -> str:
    return os.path.join(git.common_dir, "lanes", "locks")


def lock_path(git: "Git", kind: str, *names: str) -> str:
    """`locks/<kind>/<names…>` (the names are checked ids: nothing outside the folder)."""
    assert kind in KINDS
    return os.path.join(lock_dir(git), kind, *names)


def _v3_lane_path(git: "Git", slug: str, task: str) -> str | None:
    """v3's lock of a lane record, `<slug>/<task>.lane`, taken beside the v4 one for one release; None
    when the folder `<slug>` would meet a lock of v4 or v3 (a slug named `evidence`, `batch`, `x.verify`,
    `scratch-0`, …): such a slug had no working v3 lane lock to honour."""
    if slug in KINDS or slug in FILES or slug.endswith(_V3_FILES) or slug.startswith(("scratch-", "fetch-")):
        return None
    return os.path.join(lock_dir(git), slug, f"{task}.lane")


def _v3_batch_path(git: "Git", slug: str) -> str:
    """v3's lock of a batch record, `<slug>.lock` (no id ends in `.lock`: it never meets another)."""
    return os.path.join(lock_dir(git), f"{slug}.lock")


@contextmanager
def flock_all(paths: list[str], timeout: float, busy: str) -> Iterator[None]:
    """`flock` on every path in order (v4 first, then v3's), all within one `timeout`."""
    deadline = time.monotonic() + timeout
    with ExitStack() as stack:
        for path in paths:
            stack.enter_context(flock(path, max(0.0, deadline - time.monotonic()), busy))
        yield


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
    with flock_all([lock_path(git, "batch", slug), _v3_batch_path(git, slug)], wait,
                   f"another git-lanes command holds the lock of {slug} (waited {wait:g} s; lanes.lockTimeout)"):
        _remove_ref_lock(git, f"refs/notes/lanes/batch/{slug}", warn or git.warn)
        yield


def verify_lock_path(git: "Git", slug: str) -> str:
    check_id(slug, "slug")
    return os.path.join(lock_dir(git), f"{slug}.verify")


def candidate_lock_path(git: "Git", slug: str, task_id: str) -> str:
    """`verify/<slug>/<task_id>`: the verifier of the candidate of one child of the window (SPEC §8.9 v4)."""
    check_id(slug, "slug")
    check_id(task_id, "task id")
    return lock_path(git, "verify", slug, task_id)


def run_lock(git: "Git", slug: str, since: str = "") -> Held:
    """Take `run/<slug>` for a loop that drives the batch of `slug` (SPEC §13: one executor session per
    lane, so one driver per slug), writing this process's pid, `since` and host into it; `batch_busy`
    at once when another process holds it. The caller releases it when the loop ends (a killed
    process's goes with it)."""
    import json
    import socket

    check_id(slug, "slug")
    path = lock_path(git, "run", slug)
    held = None
    for _ in range(3):   # `status` tries the lock to see whether a run is live: a moment, not a driver
        held = flock_try(path)
        if held is not None:
            break
        time.sleep(0.02)
    if held is None:
        pid = (_driver_of(path) or {}).get("pid")
        raise refused("batch_busy", f"another git lanes run drives {slug}" + (f" (pid {pid})" if pid else ""))
    assert held.fd is not None
    from ..core.clock import now

    doc = {"pid": os.getpid(), "since": since or now(), "host": socket.gethostname()}
    os.ftruncate(held.fd, 0)
    os.pwrite(held.fd, (json.dumps(doc, sort_keys=True) + "\n").encode(), 0)
    return held


def _driver_of(path: str) -> dict | None:
    """What `run_lock` wrote in `path` ({pid, since, host}); None when unreadable."""
    import json

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            doc = json.loads(f.read() or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        return None
    return {"pid": doc["pid"], "since": str(doc.get("since") or ""), "host": str(doc.get("host") or "")}


def driver(git: "Git", slug: str) -> dict | None:
    """The live `git lanes run` that drives `slug` ({pid, since, host}), or None: only a process that
    holds `run/<slug>` now counts (the file outlives a killed run; its `flock` does not)."""
    check_id(slug, "slug")
    path = lock_path(git, "run", slug)
    if not is_held(path):
        return None
    return _driver_of(path) or {"pid": 0, "since": "", "host": ""}


def fast_forward_mark(git: "Git", slug: str) -> str:
    """`ff/<slug>`: written before the coordinator's `merge --ff-only` and removed once the merge
    succeeded, both under the slug's lock. A later holder that finds it knows a merge died or failed
    (perhaps after its index write); without it, no hold scans the coordinator for a half-done one. A v3
    mark (`<slug>.ff`, a merge of the old version that died) is moved here first (callers hold the
    slug's lock)."""
    check_id(slug, "slug")
    path = lock_path(git, "ff", slug)
    old = os.path.join(lock_dir(git), f"{slug}.ff")
    if os.path.isfile(old):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(old, path)
    return path


@contextmanager
def fetch_lock(git: "Git", namespace: str, timeout: float | None = None) -> Iterator[None]:
    """Taken by every fetch into the tracking namespace `namespace` (`refs/lanes-remotes/<name>/`): two
    at once (a lane's `push` beside its `work` loop's pull) race on its refs, and Git fails one
    (`cannot lock ref …: is at X but expected Y`). Its file is `fetch/<hex SHA-1 of the remote name>`."""
    from ..core.digests import sha1_hex

    wait = _timeout(git, timeout)
    root = "refs/lanes-remotes/"
    name = namespace[len(root):].rstrip("/") if namespace.startswith(root) else namespace
    with flock(lock_path(git, "fetch", sha1_hex(name.encode("utf-8", "surrogateescape"))), wait,
               f"another git-lanes command is fetching into {namespace} (waited {wait:g} s; lanes.lockTimeout)"):
        yield


def _lane_paths(git: "Git", slug: str, task: str) -> list[str]:
    check_id(slug, "slug")
    check_id(task, "task id")
    v3 = _v3_lane_path(git, slug, task)
    return [lock_path(git, "lane", slug, task)] + ([v3] if v3 else [])


@contextmanager
def lane_lock(git: "Git", slug: str, task: str, timeout: float | None = None,
              warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """The lane's own lock, held by every writer of its lane record."""
    paths = _lane_paths(git, slug, task)
    wait = _timeout(git, timeout)
    with flock_all(paths, wait, f"another git-lanes command in the lane of {task} holds its lock (waited {wait:g} s)"):
        _remove_ref_lock(git, f"refs/notes/lanes/lane/{slug}/{task}", warn or git.warn)
        yield


def lane_lock_try(git: "Git", slug: str, task: str) -> list[Held] | None:
    """The lane's lock taken without waiting (a `provision` of the task holds it until its lane is
    admitted or gone); None when another process holds it. Release each `Held` (v3's first)."""
    held: list[Held] = []
    for path in _lane_paths(git, slug, task):
        h = flock_try(path)
        if h is None:
            for h in reversed(held):
                h.release()
            return None
        held.append(h)
    return held


def lane_lock_held(git: "Git", slug: str, task: str) -> bool:
    """Whether some process holds the lane's lock now (a provision under way, or a lane-side write)."""
    return is_held(_lane_paths(git, slug, task)[0])


@contextmanager
def evidence_lock(git: "Git", timeout: float | None = None,
                  warn: Callable[[str], None] | None = None) -> Iterator[None]:
    wait = _timeout(git, timeout)
    with flock(os.path.join(lock_dir(git), "evidence"), wait,
               f"another git-lanes command holds the evidence lock (waited {wait:g} s)"):
        _remove_ref_lock(git, "refs/notes/lanes/evidence", warn or git.warn)
        yield


@contextmanager
def receipts_lock(git: "Git", ref: str, timeout: float | None = None,
                  warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """`receipts` (SPEC §8.7 v4): every writer of a clone's receipts ref, a lane's `done` beside the
    coordinator's ticks; always taken last, after any other lock."""
    wait = _timeout(git, timeout)
    with flock(os.path.join(lock_dir(git), "receipts"), wait,
               f"another git-lanes command holds the receipts lock (waited {wait:g} s)"):
        _remove_ref_lock(git, ref, warn or git.warn)
        yield


def _remove_ref_lock(git: "Git", ref: str, warn: Callable[[str], None]) -> None:
    """Remove the Git `.lock` of a loose ref whose writers all hold the lock we hold."""
    path = os.path.join(git.common_dir, *ref.split("/")) + ".lock"
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    warn(f"removed stale lock file {path}")
