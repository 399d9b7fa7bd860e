"""The `git lanes` command line (click): `app` (the group, the entry point), `options`, `render`,
and one module per command family, imported when a command line is parsed."""

from . import batch, lane, meta, remote, requests, run, steward  # noqa: F401  (they register the commands)
from .app import cli, entry, main

__all__ = ["cli", "entry", "main"]
