"""Secrets are never stored or printed (SPEC §2.1 v3).

Before command output (or a tracker response, or an error detail) is recorded or shown, every
occurrence of the value of an environment variable whose name contains TOKEN, SECRET, PASSWORD,
PASSWD or CREDENTIAL, or ends in _KEY (values of 6 characters or more), is replaced by `***`:
redaction first, truncation after. Pure.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MIN_LENGTH = 6
MASK = "***"


def secret_values(environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> list[str]:
    """The values to hide, longest first (so a secret that contains another is hidden whole)."""
    env = os.environ if environ is None else environ
    found = {value for name, value in env.items() if len(value) >= MIN_LENGTH and _secret_name(name.upper())}
    found.update(v for v in extra if v and len(v) >= MIN_LENGTH)
    return sorted(found, key=len, reverse=True)


def _secret_name(upper: str) -> bool:
    return upper.endswith("_KEY") or any(m in upper for m in MARKERS)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every secret value replaced by `***`."""
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, MASK)
    return text


def longest(secrets: Iterable[str]) -> int:
    return max((len(v.encode("utf-8", "surrogateescape")) for v in secrets), default=0)
