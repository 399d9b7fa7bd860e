"""An intent or initiative document as read (SPEC §2): TOML, bounded in depth, and its content
hash. Nothing here validates a field (that is `intent`'s models); the lane side, which reads an
intent whose hash the batch authorized, needs no more than this. Pure, and cheap to import.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from ..core.canonical import canonical_digest
from ..core.errors import usage

DEFAULT_TIMEOUT_S = 1800
MAX_DEPTH = 32   # no plan file needs more than a few levels; deeper nesting is refused, not recursed into


def _too_deep(doc: Any) -> bool:
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return False


def load_toml(path: str, data: bytes) -> dict[str, Any]:
    try:
        doc = tomllib.loads(data.decode("utf-8-sig"))   # a byte-order mark, as some editors write, is no TOML error
    except UnicodeDecodeError:
        raise usage(f"{path}: not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise usage(f"{path}: invalid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        doc = None
    if doc is None or _too_deep(doc):
        raise usage(f"{path}: invalid TOML: nested more than {MAX_DEPTH} levels deep")
    found = _control(doc)
    if found is not None:   # (TOML's escapes let one in: "\u0000" would reach commit messages and every session)
        field, char = found
        raise usage(f"{path}: {field}: contains the control character U+{ord(char):04X} (only a tab or a line "
                    "break may appear in plan text)")
    return doc


def _is_control(c: str) -> bool:
    return (ord(c) < 32 and c not in "\t\n") or 127 <= ord(c) < 160


def _control(doc: Any, where: str = "") -> tuple[str, str] | None:
    """(the field, shown with its control characters escaped; the character) of the first key or string
    of `doc` holding a control character other than a tab or a line break (C0, DEL, C1), or None."""
    if isinstance(doc, str):
        bad = next((c for c in doc if _is_control(c)), None)
        # every control character of the name escaped, line breaks too: the error is one line
        shown = "".join(f"\\x{ord(c):02x}" if _is_control(c) or c in "\t\n" else c for c in where) or "(value)"
        return (shown, bad) if bad is not None else None
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        name = f"{where}[{key}]" if isinstance(key, int) else (f"{where}.{key}" if where else str(key))
        found = (_control(key, name) if isinstance(key, str) else None) or _control(value, name)
        if found is not None:
            return found
    return None


def intent_doc_hash(doc: Mapping[str, Any]) -> str:
    """`sha256:` + hex SHA-256 of the canonical JSON of an intent document as parsed."""
    return canonical_digest(doc)
