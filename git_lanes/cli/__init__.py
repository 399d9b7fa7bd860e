"""The `git lanes` command line (click): `app` (the group), `options`, `render`, and one module per
command family. `entry` runs the lane side's everyday command lines (`lanecmds.FAST`) before
importing click at all; everything else — and `cli`, `main` — loads the whole group."""

from __future__ import annotations

import os
import sys


def _group():
    from . import batch, board, lane, meta, remote, requests, run, steward  # noqa: F401  (they register the commands)
    from . import app

    return app


def __getattr__(name: str):
    if name in ("cli", "main"):
        return getattr(_group(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def entry() -> None:
    from .lanecmds import fast

    code = fast(sys.argv[1:], os.environ)
    sys.exit(_group().main() if code is None else code)


__all__ = ["cli", "entry", "main"]
