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


def path_problem(entry: str, shown: str | None = None) -> str | None:
    """Why `entry` is not a clean repo-relative path, or None (naming it as `shown`, default itself)."""
    name = repr(entry if shown is None else shown)
    if not entry.strip():
        return "must not be empty"
    if entry.startswith("/"):
        return f"{name} must not be absolute"
    if any(segment in (".", "..") for segment in entry.split("/")):
        return f"{name} must not contain a '.' or '..' segment"
    return None


def has_control(text: str) -> bool:
    """Whether `text` holds a C0 control character (a newline, a tab, ...) or DEL: Git's line-based
    answers about a path, and every line printed, would break on it."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def scope_entry(entry: str) -> str:
    """A scope (or `inputs`) entry as it is used: with one leading `./` (after trimming) it means the
    entry without it (SPEC §2 v4: `./src/a` is `src/a`); any other entry as it is written."""
    trimmed = entry.strip()
    return trimmed[2:] if trimmed.startswith("./") else entry


def scope_entry_problem(entry: str) -> str | None:
    """Why `entry` is not a valid scope entry, or None. Judged as it is used: trimmed, one leading
    `./` stripped (SPEC §2, §3)."""
    if has_control(entry):
        return f"{entry!r} must not contain a control character"
    for char in SCOPE_FORBIDDEN:
        if char in entry:
            return f"{entry!r} must not contain {char!r}"
    return path_problem(scope_entry(entry).strip(), shown=entry)


def final_check_problem(command: object) -> str | None:
    """Why `command` is not an acceptable final check (SPEC §2.1), or None: it names a command,
    not a script — one line of at most 512 characters, 1..8 words, no control character and
    none of ``| & ; < > \\ ` $ ( ) { } " '``."""
    if not isinstance(command, str):
        return "must be a string"
    if command and command.splitlines() != [command]:
        return "must be one line"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in command):   # C0 (a tab too), DEL and C1
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



_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = ("2>&1", ">>", "&&", "||", "|", ";", "&", ">", "<")


def shell_syntax(command: str) -> str | None:
    """The first shell operator outside quotes in `command` (`&&`, `||`, `|`, `;`, `&`, `>`, `>>`, `<`,
    `2>&1`), or `VAR=value` when the command starts with an assignment; None when there is none.

    Commands run without a shell (SPEC §2 v3), so `a && b` would run `a` with `&& b` as its
    arguments. Quoting follows POSIX: `'&&'` and `"a;b"` are ordinary words, and so is `\\;`."""
    if not isinstance(command, str):
        return None
    i, n = 0, len(command)
    word_start = True   # at the start of a word (after white space)
    first_word = True
    while i < n:
        c = command[i]
        if c in "\r\n" and command[i:].strip():
            return "\n"   # a line break outside quotes separates two commands in a shell
        if c in " \t\n":
            if not word_start:
                first_word = False
            word_start = True
            i += 1
            continue
        if word_start and first_word and _ASSIGNMENT.match(command, i):
            return command[i:_word_end(command, i)]
        word_start = False
        if c == "\\":
            i += 2
        elif c == "'":
            close = command.find("'", i + 1)
            i = n if close < 0 else close + 1
        elif c == '"':
            i += 1
            while i < n and command[i] != '"':
                i += 2 if command[i] == "\\" else 1
            i += 1
        else:
            for op in _OPERATORS:
                if command.startswith(op, i) and (op != "2>&1" or _starts_word(command, i)):
                    return op
            i += 1
    return None


def _starts_word(command: str, i: int) -> bool:
    return i == 0 or command[i - 1] in " \t\n"


def _word_end(command: str, i: int) -> int:
    while i < len(command) and command[i] not in " \t\n":
        i += 1
    return i


def shell_syntax_problem(command: str) -> str | None:
    """Why `command` (an acceptance check or `lanes.setupCommand`) cannot run without a shell, or None."""
    found = shell_syntax(command)
    if found is None:
        return None
    what = f"a leading variable assignment {found!r}" if "=" in found and found not in _OPERATORS else \
        f"shell syntax {found!r} outside quotes"
    return (f"{what}: commands run without a shell, so it would be passed to the program as an argument "
            "(and what follows might never run); wrap it in a script")
