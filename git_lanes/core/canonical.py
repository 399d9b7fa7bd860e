"""Canonical JSON and digests (SPEC §2)."""

from __future__ import annotations

import json
from typing import Any

from .digests import sha256_hex


def canonical_json(value: Any) -> str:
    """Keys sorted by code point, no whitespace, non-ASCII kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_digest(text: str | bytes) -> str:
    """`sha256:` + hex SHA-256 of the UTF-8 bytes."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + sha256_hex(data)


def canonical_digest(value: Any) -> str:
    return sha256_digest(canonical_json(value))
