"""SHA-1 and SHA-256 hex digests for the many small ones a command takes (object ids, record
files, shard and lock names, intent hashes): the interpreter's built-in implementations, which
import in about a millisecond where `hashlib` (OpenSSL) takes about six — a third of what a
lane command's own imports cost beyond Python's start. Data past 64 KiB goes to OpenSSL, several
times faster per byte, imported then. The same digests either way."""

from __future__ import annotations

from typing import Any, Callable

_BIG = 1 << 16
_BUILTIN: dict[str, Callable[[bytes], Any]] = {}


def _builtin(name: str) -> Callable[[bytes], Any]:
    if name not in _BUILTIN:
        try:
            if name == "sha1":
                from _sha1 import sha1 as found
            else:
                try:
                    from _sha2 import sha256 as found   # Python 3.12 and later
                except ImportError:
                    from _sha256 import sha256 as found
        except ImportError:   # an interpreter built without them
            import hashlib

            found = getattr(hashlib, name)
        _BUILTIN[name] = found
    return _BUILTIN[name]


def _hex(name: str, data: bytes) -> str:
    if len(data) > _BIG:
        import hashlib

        return hashlib.new(name, data).hexdigest()
    return _builtin(name)(data).hexdigest()


def sha1_hex(data: bytes) -> str:
    return _hex("sha1", data)


def sha256_hex(data: bytes) -> str:
    return _hex("sha256", data)
