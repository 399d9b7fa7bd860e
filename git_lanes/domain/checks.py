"""The commands a task names (SPEC §2.1, §10.3): acceptance checks, final checks, setup.

Each one string, split with `shlex` and run without a shell (final checks: split on white space)
by `procs`, in the tree it checks, with the caller's environment minus the repository-local Git
variables plus `GIT_LANES_*`. Its result item keeps the last 4 KiB of its output, secrets
redacted first (`redact.py`).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from ..core.errors import LanesError, usage
from ..core.ids import FINAL_CHECK_MAX_WORDS, validate_final_check
from ..core.redact import longest, redact, secret_values
from . import procs
from .procs import MISSING_EXIT_CODE, TAIL_BYTES

__all__ = ["CheckResult", "FINAL_CHECK_MAX_WORDS", "MISSING_EXIT_CODE", "TAIL_BYTES", "child_env", "failed_summary",
           "failure_line", "last_lines", "plain_text", "run_checks", "run_command", "split_command", "status_text",
           "tail_lines", "validate_final_check"]


class CheckResult(NamedTuple):   # (a tuple: `dataclasses` costs `done` more start-up than this module)
    """The result item of one command (SPEC §2.1)."""

    id: str
    command: str
    exit_code: int | None
    signal: str | None
    passed: bool
    duration_ms: int
    output_tail: str
    # (v4, SPEC §8.7, §8.8) left out of the JSON while unset, so a result is what it was before
    cached: bool = False              # a receipt stood for the run
    receipt: str | None = None        # that receipt's key
    flaky: bool = False               # passed on a retry after failing
    attempts: tuple = ()              # a flaky pass: the failed runs `{exit_code, signal, output_tail}`, then the pass

    def to_json(self) -> dict:
        """`{id, command, exit_code, signal, passed, duration_ms, output_tail}`, plus `cached`, `receipt`,
        `flaky` and `attempts` when set."""
        data = self._asdict()
        for key in _OPTIONAL:
            if not data[key]:
                del data[key]
        if "attempts" in data:
            data["attempts"] = [dict(a) for a in data["attempts"]]
        return data


_OPTIONAL = ("cached", "receipt", "flaky", "attempts")


# Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, links), charset and two-byte ones.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]+[0-~]|\x1b[0-~]?"
                      r"|\x9b[0-?]*[ -/]*[@-~]")


def plain_text(text: str) -> str:
    """`text` without terminal escape sequences, `\r\n` as `\n` (SPEC §2.1 v3: `output_tail` is plain)."""
    return _ESCAPES.sub("", text).replace("\r\n", "\n")


def status_text(result: Mapping) -> str:
    """How a result ended, for people: `exit 1`, `killed by SIGTERM`, `timed out (SIGKILL)`."""
    if result.get("exit_code") is not None:
        return f"exit {result['exit_code']}"
    if result.get("signal"):
        timed_out = "[timed out after" in (result.get("output_tail") or "")
        return f"timed out ({result['signal']})" if timed_out else f"killed by {result['signal']}"
    return "did not run"


def tail_lines(text: str, n: int = 1) -> list[str]:
    """The last `n` non-empty lines of an output, each as it is (indentation kept)."""
    return [line.rstrip() for line in (text or "").splitlines() if line.strip()][-n:]


# the line that says what failed (SPEC §17.1 v4): test runners end with statistics (`Duration: 19ms`)
_TELLING = re.compile(r"failed|error|assert|✘|✗|not ok|fatal", re.IGNORECASE)


def telling_line(text: str) -> str:
    """The last non-empty line of an output matching `FAILED`, `Error`, `assert`, `✘`, `✗`, `not ok` or
    `fatal` (case-insensitive), else its last non-empty line."""
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    return next((line for line in reversed(lines) if _TELLING.search(line)), lines[-1] if lines else "")


def failure_line(result: Mapping, telling: bool = False) -> str:
    """`<id> (<status>): <last output line>` of a failed result (SPEC §13's session line); with
    `telling`, the line that says what failed instead (`1 failed in 0.2s`, `# fail 1`, `FAIL pkg`)."""
    tail = result.get("output_tail") or ""
    line = telling_line(tail).strip() if telling else next(iter(tail_lines(tail)), "")
    return f"{result['id']} ({status_text(result)})" + (f": {line}" if line else "")


def failed_summary(results: Iterable[Mapping], note: str | None) -> str:
    """What `qa_failed` names: the failing check ids, or the attempt's note."""
    failed = [r["id"] for r in results if not r["passed"]]
    return ", ".join(failed) if failed else (note or "failed")


def child_env(base: Mapping[str, str], local_env_vars: Iterable[str], *,
              slug: str, batch: str, task: str) -> dict[str, str]:
    """`base` minus the repository-local Git variables, plus the three `GIT_LANES_*`."""
    drop = {name.strip() for name in local_env_vars if name.strip()}
    env = {key: value for key, value in base.items() if key not in drop}
    env.update(GIT_LANES_SLUG=slug, GIT_LANES_BATCH=batch, GIT_LANES_TASK=task)
    return env


def last_lines(text: str, count: int = 5) -> str:
    """The last `count` non-empty lines of an output (what v3 means by "its last lines"), joined by ` | `."""
    return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-count:])


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


def run_command(check_id: str, command: str | Sequence[str], *, cwd, env: Mapping[str, str],
                timeout: float, argv: Sequence[str] | None = None) -> CheckResult:
    """Run one command (its `argv`, else `command` split with shlex) and return its result.

    Never raises for the command's own failures: a command that cannot be parsed or started
    gives exit code 127. A KeyboardInterrupt kills the process group and is re-raised.
    """
    display = command if isinstance(command, str) else shlex.join(command)
    start = time.monotonic()
    secrets = secret_values()
    try:
        words = list(argv) if argv is not None else (split_command(command) if isinstance(command, str) else list(command))
        if not words:
            raise usage(f"command {display!r}: empty")
        keep = TAIL_BYTES + longest(secrets) + 1
        done = procs.run(words, cwd=cwd, env=env, timeout=timeout, tail=keep)
    except LanesError as exc:
        return _result(check_id, display, MISSING_EXIT_CODE, None, start, exc.detail)
    except (OSError, ValueError) as exc:
        name = getattr(exc, "filename", None) or (words[0] if words else display)
        detail = getattr(exc, "strerror", None) or str(exc)
        return _result(check_id, display, MISSING_EXIT_CODE, None, start, f"git-lanes: cannot run {name}: {detail}")
    text = _tail(redact(plain_text(done.output.decode("utf-8", errors="replace")), secrets), len(done.output) >= keep)
    if done.timed_out:
        sep = "\n" if text and not text.endswith("\n") else ""
        return _result(check_id, display, None, "SIGKILL", start, f"{text}{sep}[timed out after {timeout:g} s]")
    return _result(check_id, display, done.exit_code, done.signal, start, text)


def run_checks(items: Iterable[tuple[str, str, float]], *, cwd, env: Mapping[str, str]) -> list[CheckResult]:
    """Run every `(id, command, timeout)` in order, failures included (each told to this thread's watcher)."""
    results = []
    for check_id, command, timeout in items:
        results.append(run_command(check_id, command, cwd=cwd, env=env, timeout=timeout))
        told(len(results), results[-1])
    return results


def told(n: int, result: CheckResult) -> None:
    """Tell this thread's watcher (`watching`) that its `n`th check ended with `result`."""
    watcher = getattr(_WATCH, "fn", None)
    if watcher is not None:
        watcher(n, result)


_WATCH = threading.local()


@contextlib.contextmanager
def watching(fn):
    """`fn(n, result)` after each check this thread runs (an MCP call's progress notifications)."""
    before = getattr(_WATCH, "fn", None)
    _WATCH.fn = fn
    try:
        yield
    finally:
        _WATCH.fn = before


def _tail(text: str, cut: bool = False) -> str:
    """The last 4 KiB of an output (escape sequences already stripped, secrets redacted first: a secret cut
    in two would show its half), from a line boundary when anything was cut (`cut`: the output was longer
    than what was kept of it), so no half line or half escape sequence is stored."""
    data = text.encode("utf-8")
    if len(data) > TAIL_BYTES:
        text, cut = data[-TAIL_BYTES:].decode("utf-8", errors="ignore"), True
    if cut and "\n" in text.rstrip("\n"):
        text = text[text.index("\n") + 1:]
    return text


def _result(check_id: str, command: str, exit_code: int | None, sig: str | None, start: float,
            output: str) -> CheckResult:
    return CheckResult(id=check_id, command=command, exit_code=exit_code, signal=sig, passed=exit_code == 0,
                       duration_ms=int((time.monotonic() - start) * 1000), output_tail=output)
