"""The one runner of the commands git-lanes starts (checks, setup, executors, correctors).

Every command runs without a shell, in its own process group, which never outlives its leader:
on a timeout, on Ctrl-C, and once the leader has exited (stragglers), the whole group is killed.
The leader stays unreaped until then, so its group id cannot be reused meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import IO, Any, Callable, Iterator, Mapping, NamedTuple, Sequence

TAIL_BYTES = 4096
MISSING_EXIT_CODE = 127
_POLL = 0.02    # seconds between looks at the leader while reading
_DRAIN = 0.5    # seconds to read what is left after the group is killed


class Finished(NamedTuple):
    """How a command ended: its exit code, or the signal that ended it. (A NamedTuple, not a dataclass:
    `checks`, which every `done` imports, would pull in `dataclasses` and `inspect` through it.)"""
    exit_code: int | None
    signal: str | None
    timed_out: bool
    output: bytes           # the last `tail` bytes of stdout (+ stderr when merged)
    stderr: bytes = b""     # when asked for separately


_LIVE: set["Group"] = set()    # the groups of this process not reaped yet (`kill_all`)


class Group:
    """One command in its own process group."""

    def __init__(self, argv: Sequence[str], *, cwd, env: Mapping[str, str], stdin: int | None = subprocess.DEVNULL,
                 stdout: int | IO[bytes] = subprocess.PIPE, stderr: int | IO[bytes] = subprocess.STDOUT,
                 pass_fds: Sequence[int] = ()) -> None:
        self.proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=stdin, stdout=stdout, stderr=stderr,
                                     start_new_session=True, pass_fds=tuple(pass_fds))
        self.pid = self.proc.pid
        self.thread = threading.get_ident()   # the thread that started it (`kill_thread`)
        _LIVE.add(self)

    def exited(self) -> bool:
        """Has the leader exited? It stays unreaped, so its group id stays reserved."""
        if self.proc.returncode is not None:
            return True
        if hasattr(os, "waitid"):
            try:
                return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:
                return True
        return self.proc.poll() is not None

    def wait_exited(self) -> None:
        """Block until the leader exits, leaving it unreaped."""
        if hasattr(os, "waitid"):
            while True:
                try:
                    os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
                    return
                except InterruptedError:
                    continue
                except ChildProcessError:
                    return
        self.proc.wait()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole group (never once the leader is reaped: its id may be someone else's)."""
        if self.proc.returncode is not None:
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def reap(self) -> int:
        """Kill what is left of the group and reap the leader; its return code."""
        self.kill()
        code = self.proc.wait()
        _LIVE.discard(self)
        return code


def kill_all(sig: int = signal.SIGKILL) -> None:
    """Signal every group this process started and has not reaped (Ctrl-C of a loop whose threads
    run checks: nothing it started outlives it)."""
    for group in list(_LIVE):
        group.kill(sig)


def kill_thread(thread: int, sig: int = signal.SIGKILL) -> None:
    """Signal every group the thread `thread` started and has not reaped (a candidate's verifier whose
    candidate left the window, SPEC §8.9)."""
    for group in list(_LIVE):
        if group.thread == thread:
            group.kill(sig)


def run(argv: Sequence[str], *, cwd, env: Mapping[str, str], timeout: float, input: bytes | None = None,
        separate_stderr: bool = False, tail: int = TAIL_BYTES) -> Finished:
    """Run one command to its end (or its timeout); raises OSError when it cannot start.

    A KeyboardInterrupt kills the group and is re-raised."""
    group = Group(argv, cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                  stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT)
    out, err = bytearray(), bytearray()
    streams = {group.proc.stdout.fileno(): out}
    if separate_stderr:
        streams[group.proc.stderr.fileno()] = err
    try:
        if input is not None:   # fed from a thread: a command may write before it has read it all
            threading.Thread(target=_feed, args=(group.proc.stdin, input), daemon=True).start()
        timed_out = _collect(group, streams, time.monotonic() + timeout, tail)
    except BaseException:
        group.reap()
        _close(group)
        raise
    group.kill()              # timeout, or stragglers once the leader has exited
    _drain(streams, tail)
    _close(group)
    code = group.reap()
    if timed_out:
        return Finished(None, "SIGKILL", True, bytes(out), bytes(err))
    if code < 0:
        return Finished(None, signal_name(-code), False, bytes(out), bytes(err))
    return Finished(code, None, False, bytes(out), bytes(err))


def _feed(stdin: IO[bytes], data: bytes) -> None:
    try:
        stdin.write(data)
    except BrokenPipeError:
        pass
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def _keep(buffer: bytearray, chunk: bytes, tail: int) -> None:
    buffer += chunk
    if len(buffer) > tail:
        del buffer[:-tail]


def _read_ready(sel: selectors.BaseSelector, timeout: float, streams: dict[int, bytearray], live: set[int],
                tail: int) -> bool:
    """Read once from every stream that is ready within `timeout`; False when none was."""
    ready = sel.select(timeout)
    for key, _ in ready:
        chunk = os.read(key.fd, 65536)
        if chunk:
            _keep(streams[key.fd], chunk, tail)
        else:
            live.discard(key.fd)
            sel.unregister(key.fd)
    return bool(ready)


def _collect(group: Group, streams: dict[int, bytearray], deadline: float, tail: int) -> bool:
    """Read output until the leader exits; True when the deadline came first."""
    live = set(streams)
    pause = 0.0005   # once every stream is at EOF: short, growing pauses (a fast command costs ~1 ms)
    with selectors.DefaultSelector() as sel:
        for fd in live:
            sel.register(fd, selectors.EVENT_READ)
        while not group.exited():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if live:
                _read_ready(sel, min(_POLL, remaining), streams, live, tail)
            else:
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, _POLL)
    return False


def _drain(streams: dict[int, bytearray], tail: int) -> None:
    """Read what is left in the pipes, giving up after a short grace (an escaped writer)."""
    end = time.monotonic() + _DRAIN
    live = set(streams)
    with selectors.DefaultSelector() as sel:
        for fd in live:
            sel.register(fd, selectors.EVENT_READ)
        while live and (remaining := end - time.monotonic()) > 0:
            if not _read_ready(sel, remaining, streams, live, tail):
                return


def _close(group: Group) -> None:
    for stream in (group.proc.stdout, group.proc.stderr, group.proc.stdin):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


SAME_CTRL_C = 1.0   # seconds: a SIGINT this soon after the first is the same keypress


class CtrlC:
    """Ctrl-C of a loop that stops gently (`run`, `work`): the first SIGINT asks it to stop; a second one
    aborts. One keypress reaches `git lanes run` twice, from the terminal and again from Git, which forwards
    it to its child: a SIGINT within `SAME_CTRL_C` seconds of the first is that same keypress."""

    def __init__(self) -> None:
        self.at: float | None = None

    def first(self) -> bool:
        """True for the first Ctrl-C, False for its echo; raises KeyboardInterrupt for a second one."""
        now = time.monotonic()
        if self.at is None:
            self.at = now
            return True
        if now - self.at < SAME_CTRL_C:
            return False
        raise KeyboardInterrupt


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def stopping(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """`handler` for Ctrl-C, SIGTERM and SIGHUP while a loop (`run`, `work`) runs, in the main thread:
    its sessions run in process groups of their own, so a `kill` or a closed terminal must stop them
    as Ctrl-C does; else they go on working lanes nobody will land, beside the next run's sessions.
    After SIGHUP, what is still to print goes nowhere (`hung_up`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def stop(signum: int, frame: Any) -> None:
        hung_up(signum)
        handler(signum, frame)

    previous = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            previous[number] = signal.signal(number, stop)
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def hung_up(signum: int) -> None:
    """After SIGHUP the terminal is gone: what is still to print goes nowhere instead of failing."""
    if signum != getattr(signal, "SIGHUP", None):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                os.dup2(devnull, fd)
        except OSError:
            pass
    os.close(devnull)

