"""pydantic without its plugin discovery (imported by `model.py` before any validator runs)."""

from __future__ import annotations

import sys
from typing import Any


def no_plugin_discovery() -> None:
    """pydantic looks for plugins in every installed distribution's entry points at its first
    validator, importing `importlib.metadata` for it: 40-60 ms of CPU, a sixth of every coordinator
    command's start-up. git-lanes uses no pydantic plugin, so its loader is one that finds none;
    anything else asked of it comes from pydantic's own, imported then."""
    name = "pydantic.plugin._loader"
    if name in sys.modules:
        return
    import importlib
    import types

    def real(attr: str) -> Any:
        if attr.startswith("__"):   # what the import system asks of any module (`__path__`, ...)
            raise AttributeError(attr)
        sys.modules.pop(name, None)
        return getattr(importlib.import_module(name), attr)
    stub = types.ModuleType(name, "git-lanes: pydantic's plugin loader, finding none")
    stub.get_plugins = lambda: ()   # type: ignore[attr-defined]
    stub.__getattr__ = real         # type: ignore[attr-defined]
    sys.modules[name] = stub
