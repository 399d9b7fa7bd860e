"""An intent or initiative document as read (SPEC §2): TOML, bounded in depth, and its content
hash. Nothing here validates a field (that is `intent`'s models); the lane side, which reads an
intent whose hash the batch authorized, needs no more than this. Pure, and cheap to import.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from .canonical import canonical_digest
from .errors import usage

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
    return doc


def intent_doc_hash(doc: Mapping[str, Any]) -> str:
    """`sha256:` + hex SHA-256 of the canonical JSON of an intent document as parsed."""
    return canonical_digest(doc)
