"""`git lanes mcp` (SPEC §17.3): the commands as Model Context Protocol tools over stdio.

- `tools.py`: each tool's typed arguments (a JSON Schema) and the use case it calls — the same
  function the click command in `cli/` calls, never the CLI in a subprocess, never a shell.
- `calls.py`: one tool call as one fresh command (its own `Session`, warnings, confirmation,
  cancellation as Ctrl-C, progress per check), and its result or refusal as data.
- `server.py`: the wiring to the official `mcp` SDK (the extra `git-lanes[mcp]`), imported only
  by `git lanes mcp` itself: start-up and completion never load it.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'git-lanes[mcp]'"


def available() -> bool:
    """Whether the `mcp` SDK can be imported (without importing it)."""
    from importlib.util import find_spec

    try:
        return find_spec("mcp") is not None and find_spec("mcp.server.lowlevel") is not None
    except (ImportError, ValueError):
        return False
