"""The shape rules of names and commands (SPEC §1, §2, §2.1), each in one place. Pure.

Slugs and task ids reach refs and file paths, so every command validates them before it uses
them for anything; scope entries and final checks are validated wherever they are accepted
(`plan`, `start`, `run`) by the same functions.
"""

from __future__ import annotations

import re

from .errors import usage

ID_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9_-])?$")
RESERVED_TASK_ID = "initiative"
MAX_FINAL_CHECKS = 8
MAX_FINAL_CHECK_LENGTH = 512
FINAL_CHECK_MAX_WORDS = 8
FINAL_CHECK_FORBIDDEN = "|&;<>\\`$(){}\"'"
SCOPE_FORBIDDEN = ("\\", "{", "}", "!")


def id_problem(value: object, *, task: bool) -> str | None:
    """Why `value` is not a valid slug (or task id when `task`), or None."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        return f"{value!r} is not a valid id (letters, digits, '.', '_', '-'; at most 128)"
    if ".." in value:
        return f"{value!r} must not contain '..'"
    if value.endswith(".lock"):
        return f"{value!r} must not end in '.lock'"
    if task and value == RESERVED_TASK_ID:
        return f"{value!r} is reserved"
    return None


def check_id(value: str, what: str) -> None:
    """Raise a usage error unless `value` is a valid `what` ("slug" or "task id")."""
    problem = id_problem(value, task=what == "task id")
    if problem:
        raise usage(f"invalid {what}: {problem}")


def require_utf8(value: str, what: str) -> str:
    """`value`, or a usage error when it holds what is not valid UTF-8 (a lone surrogate, or an
    undecodable byte of an argument or a file): such text can be neither recorded nor shown."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise usage(f"{what}: not valid UTF-8") from None
    return value


def path_problem(entry: str) -> str | None:
    """Why `entry` is not a clean repo-relative path, or None."""
    if not entry.strip():
        return "must not be empty"
    if entry.startswith("/"):
        return f"{entry!r} must not be absolute"
    if any(segment in (".", "..") for segment in entry.split("/")):
        return f"{entry!r} must not contain a '.' or '..' segment"
    return None


def scope_entry_problem(entry: str) -> str | None:
    """Why `entry` is not a valid scope entry, or None."""
    for char in SCOPE_FORBIDDEN:
        if char in entry:
            return f"{entry!r} must not contain {char!r}"
    return path_problem(entry)


def final_check_problem(command: object) -> str | None:
    """Why `command` is not an acceptable final check (SPEC §2.1), or None: it names a command,
    not a script — one line of at most 512 characters, 1..8 words, no control character and
    none of ``| & ; < > \\ ` $ ( ) { } " '``."""
    if not isinstance(command, str):
        return "must be a string"
    if command and command.splitlines() != [command]:
        return "must be one line"
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in command):
        return "contains a control character"
    if len(command) > MAX_FINAL_CHECK_LENGTH:
        return f"longer than {MAX_FINAL_CHECK_LENGTH} characters"
    found = "".join(c for c in FINAL_CHECK_FORBIDDEN if c in command)
    if found:
        return (f"contains {found!r} (refused: {' '.join(found)}); final checks name a command, "
                "not a script (wrap a script in a file)")
    words = command.split()
    if not words:
        return "must not be empty"
    if len(words) > FINAL_CHECK_MAX_WORDS:
        return f"more than {FINAL_CHECK_MAX_WORDS} words"
    return None


def validate_final_check(command: str) -> list[str]:
    """A final check's words, or a usage error naming the command and the reason."""
    problem = final_check_problem(command)
    if problem:
        raise usage(f"final check {command!r}: {problem}")
    return command.split()

