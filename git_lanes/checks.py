"""Running the commands git-lanes runs: acceptance checks, final checks, setup (SPEC §2.1, §10.3).

Every command runs without a shell, in its own process group, with stdout and stderr merged
and only the last 4 KiB kept. On timeout the whole group is killed; the group never outlives
its leader (stragglers are killed once the leader exits).
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence

from git_lanes.errors import LanesError, usage

TAIL_BYTES = 4096
FINAL_CHECK_MAX_WORDS = 8
FINAL_CHECK_MAX_CHARS = 512
FINAL_CHECK_FORBIDDEN = "|&;<>\\`$(){}\"'"
MISSING_EXIT_CODE = 127

_POLL = 0.02   # seconds between looks at the leader while reading
_DRAIN = 0.5   # seconds to read what is left after the group is killed


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The result item of one command (SPEC §2.1)."""

    id: str
    command: str
    exit_code: int | None
    signal: str | None
    passed: bool
    duration_ms: int
    output_tail: str

    def to_json(self) -> dict:
        """`{id, command, exit_code, signal, passed, duration_ms, output_tail}`."""
        return dataclasses.asdict(self)


def child_env(base: Mapping[str, str], local_env_vars: Iterable[str], *,
              slug: str, batch: str, task: str) -> dict[str, str]:
    """`base` minus the repository-local Git variables, plus the three `GIT_LANES_*`."""
    drop = {name.strip() for name in local_env_vars if name.strip()}
    env = {key: value for key, value in base.items() if key not in drop}
    env.update(GIT_LANES_SLUG=slug, GIT_LANES_BATCH=batch, GIT_LANES_TASK=task)
    return env


def split_command(command: str) -> list[str]:
    """Split one command string with shlex (no shell); usage error if empty or unparsable."""
    if not isinstance(command, str):
        raise usage(f"command {command!r}: not a string")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise usage(f"command {command!r}: {exc}") from None
    if not argv:
        raise usage(f"command {command!r}: empty")
    return argv


def validate_final_check(command: str) -> list[str]:
    """A final check names a command, not a script: return its words or raise a usage error."""
    def bad(reason: str) -> LanesError:
        return usage(f"final check {command!r}: {reason}")

    if not isinstance(command, str):
        raise bad("not a string")
    if command and command.splitlines() != [command]:
        raise bad("must be one line")
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in command):
        raise bad("contains a control character")
    if len(command) > FINAL_CHECK_MAX_CHARS:
        raise bad(f"longer than {FINAL_CHECK_MAX_CHARS} characters")
    found = "".join(c for c in FINAL_CHECK_FORBIDDEN if c in command)
    if found:
        raise bad(f"contains {found!r}; final checks name a command, not a script "
                  "(wrap a script in a file)")
    words = command.split()
    if not words:
        raise bad("empty")
    if len(words) > FINAL_CHECK_MAX_WORDS:
        raise bad(f"more than {FINAL_CHECK_MAX_WORDS} words")
    return words


def run_command(check_id: str, command: str | Sequence[str], *, cwd, env: Mapping[str, str],
                timeout: float, argv: Sequence[str] | None = None) -> CheckResult:
    """Run one command (its `argv`, else `command` split with shlex) and return its result.

    Never raises for the command's own failures: a command that cannot be parsed or started
    gives exit code 127. A KeyboardInterrupt kills the process group and is re-raised.
    """
    display = command if isinstance(command, str) else shlex.join(command)
    start = time.monotonic()
    try:
        if argv is None:
            argv = split_command(command) if isinstance(command, str) else command
        argv = list(argv)
        if not argv:
            raise usage(f"command {display!r}: empty")
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except LanesError as exc:
        return _result(check_id, display, MISSING_EXIT_CODE, None, start, exc.detail)
    except (OSError, ValueError) as exc:
        name = getattr(exc, "filename", None) or (argv[0] if argv else display)
        detail = getattr(exc, "strerror", None) or str(exc)
        return _result(check_id, display, MISSING_EXIT_CODE, None, start,
                       f"git-lanes: cannot run {name}: {detail}")

    tail = bytearray()
    try:
        timed_out = _collect(proc, tail, start + timeout)
    except BaseException:
        _kill_group(proc)
        proc.stdout.close()
        proc.wait()
        raise
    _kill_group(proc)            # timeout, or stragglers once the leader has exited
    _drain(proc, tail)
    proc.stdout.close()
    returncode = proc.wait()

    text = tail.decode("utf-8", errors="replace")
    if timed_out:
        sep = "\n" if text and not text.endswith("\n") else ""
        return _result(check_id, display, None, "SIGKILL", start,
                       f"{text}{sep}[timed out after {timeout:g} s]")
    if returncode < 0:
        return _result(check_id, display, None, _signal_name(-returncode), start, text)
    return _result(check_id, display, returncode, None, start, text)


def run_checks(items: Iterable[tuple[str, str, float]], *, cwd,
               env: Mapping[str, str]) -> list[CheckResult]:
    """Run every `(id, command, timeout)` in order, failures included."""
    return [run_command(check_id, command, cwd=cwd, env=env, timeout=timeout)
            for check_id, command, timeout in items]


def _result(check_id: str, command: str, exit_code: int | None, sig: str | None,
            start: float, output: str) -> CheckResult:
    return CheckResult(id=check_id, command=command, exit_code=exit_code, signal=sig,
                       passed=exit_code == 0,
                       duration_ms=int((time.monotonic() - start) * 1000),
                       output_tail=output)


def _keep_tail(tail: bytearray, chunk: bytes) -> None:
    tail += chunk
    if len(tail) > TAIL_BYTES:
        del tail[:-TAIL_BYTES]


def _collect(proc: subprocess.Popen, tail: bytearray, deadline: float) -> bool:
    """Read output until the leader exits; True when the deadline came first."""
    fd = proc.stdout.fileno()
    eof = False
    pause = 0.0005   # after EOF: short, growing pauses (a fast command costs ~1 ms, not _POLL)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not _exited(proc):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if eof:
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, _POLL)
                continue
            if sel.select(min(_POLL, remaining)):
                chunk = os.read(fd, 65536)
                if chunk:
                    _keep_tail(tail, chunk)
                else:
                    eof = True
                    sel.unregister(fd)
    return False


def _drain(proc: subprocess.Popen, tail: bytearray) -> None:
    """Read what is left in the pipe, giving up after a short grace (an escaped writer)."""
    fd = proc.stdout.fileno()
    end = time.monotonic() + _DRAIN
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (remaining := end - time.monotonic()) > 0 and sel.select(remaining):
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            _keep_tail(tail, chunk)


def _exited(proc: subprocess.Popen) -> bool:
    """Has the leader exited? Where possible it stays unreaped, so its group id stays reserved."""
    if proc.returncode is not None:
        return True
    if hasattr(os, "waitid"):
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, proc.pid, flags) is not None
        except ChildProcessError:
            return True
    return proc.poll() is not None


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.returncode is not None:     # reaped: its group id may belong to someone else now
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
