"""Exit codes and the one exception type the CLI turns into `error:` lines.

Exit codes (SPEC §16):
  0   done (whatever the batch state)
  1   an expected negative result or a refusal with a reason code
  2   usage or invalid input (options, plan files, offers, JSON)
  128 fatal environment error (not a repository, a Git failure, a corrupt record)
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2
    FATAL = 128


class LanesError(Exception):
    """An error with a one-line message and an exit code.

    `code` is the stable reason code when there is one (`batch_busy`, ...); the CLI
    prints `error: <code>: <detail>` in that case and `error: <detail>` otherwise.
    `report` optionally carries the JSON document printed on exit 1 with `--json`.
    """

    def __init__(self, detail: str, *, exit_code: ExitCode = ExitCode.USAGE,
                 code: str | None = None, report: object | None = None, hint: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.exit_code = exit_code
        self.code = code
        self.report = report
        self.hint = hint    # a command that works when pasted, printed as `hint: <hint>`

    @property
    def message(self) -> str:
        return f"{self.code}: {self.detail}" if self.code else self.detail


def usage(detail: str) -> LanesError:
    """Invalid input: exit 2, nothing written."""
    return LanesError(detail, exit_code=ExitCode.USAGE)


def refused(code: str, detail: str, report: object | None = None, hint: str | None = None) -> LanesError:
    """A refusal with a stable reason code: exit 1."""
    return LanesError(detail, exit_code=ExitCode.REFUSED, code=code, report=report, hint=hint)


def fatal(detail: str) -> LanesError:
    """The environment is broken (not a repository, Git failed, corrupt record): exit 128."""
    return LanesError(detail, exit_code=ExitCode.FATAL)
