"""`lanes.setupCommand`'s output (SPEC §17.1 v4): kept whole for its log, quoted by the lines that say why."""

from __future__ import annotations

import re
import time

from ..core.errors import LanesError
from ..core.redact import redact, secret_values
from . import procs
from .checks import CheckResult, plain_text, run_command, split_command


class SetupResult(CheckResult):
    """A setup's result, with the path of the log that holds its whole output (`log`, "" when none)."""

    log = ""
    quoted = ""   # `setup_lines` of its whole output


_SETUP_KEPT = 64 << 20   # bytes of a setup's output kept for its log


def run_whole(cmd: str, cwd: str, env: dict[str, str], timeout: float) -> tuple[CheckResult, str]:
    """(the setup's result, with the last 4 KiB as any command's; its whole output, plain and redacted)."""
    began = time.monotonic()
    try:
        done = procs.run(split_command(cmd), cwd=cwd, env=env, timeout=timeout, tail=_SETUP_KEPT)
    except (LanesError, OSError, ValueError):   # it cannot start: the ordinary runner says why
        result = run_command("setup", cmd, cwd=cwd, env=env, timeout=timeout)
        return result, result.output_tail
    text = redact(plain_text(done.output.decode("utf-8", errors="replace")), secret_values())
    if done.timed_out:
        text += ("" if text.endswith("\n") or not text else "\n") + f"[timed out after {timeout:g} s]\n"
    tail = text
    if len(text.encode()) > 4096:   # from a line boundary, as every stored tail (SPEC §17.1 v4)
        tail = text.encode()[-4096:].decode("utf-8", errors="ignore")
        tail = tail[tail.index("\n") + 1:] if "\n" in tail.rstrip("\n") else tail
    code, sig = (None, "SIGKILL") if done.timed_out else (done.exit_code, done.signal)
    return CheckResult("setup", cmd, code, sig, code == 0, int((time.monotonic() - began) * 1000), tail), text


_CAUSE = re.compile(r"error|ERR!|fatal|not found", re.IGNORECASE)


def setup_lines(text: str) -> str:
    """The lines of a failed setup worth quoting (SPEC §17.1 v4): the first two naming a cause (`error`,
    `ERR!`, `fatal`, `not found`), then the last three non-empty ones, none twice, joined by ` | `."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [n for n, line in enumerate(lines) if _CAUSE.search(line)][:2]
    last = list(range(max(0, len(lines) - 3), len(lines)))
    picked = causes + [n for n in last if n not in causes and lines[n] not in {lines[c] for c in causes}]
    return " | ".join(lines[n] for n in picked)
