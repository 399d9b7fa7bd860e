"""`git lanes aliases [--install|--uninstall]`: a documented set of short Git aliases.

The aliases go into the repository's own configuration (`git config --local`, i.e.
`$GIT_COMMON_DIR/config`, shared by every worktree and lane of the repository), never into
the user's global configuration: installing them changes nothing outside this repository
and uninstalling leaves nothing behind. (To have one everywhere, set it yourself:
`git config --global alias.lt 'lanes tick'`.)

What was installed is remembered in the multi-valued `lanes.installedAlias` (Git 2.39 has
no configuration comments to mark them with), so `--uninstall` removes exactly those, and
only while they still hold our value. An alias the user already defined (in any scope)
with another value is never overwritten: `--install` warns and leaves it. Both actions are
idempotent; a run that changes nothing writes nothing.
"""

from __future__ import annotations

from typing import Any

# name -> expansion, in the order they are listed and documented (man page: ALIASES).
ALIASES: dict[str, str] = {
    "lt": "lanes tick",
    "lst": "lanes status",
    "lsh": "lanes show",
    "llog": "lanes log",
    "lplan": "lanes plan",
    "lprov": "lanes provision",
    "lrel": "lanes release",
    "ltask": "lanes task",
    "ldone": "lanes done",
    "linbox": "lanes inbox",
}

RECORD_KEY = "lanes.installedAlias"


def _effective(git: Any, name: str) -> str | None:
    """The alias value Git would use (any scope, `git -c` included)."""
    values = git.config_values("--get", f"alias.{name}")
    return values[-1] if values else None


def _local(git: Any, name: str) -> str | None:
    values = git.config_values("--get", f"alias.{name}", scope="local")
    return values[-1] if values else None


def _installed(git: Any) -> list[str]:
    seen: list[str] = []
    for name in git.config_values("--get-all", RECORD_KEY, scope="local"):
        if name and name not in seen:
            seen.append(name)
    return seen


def aliases(session: Any, action: str | None) -> list[str]:
    """List (None), `install` or `uninstall` the aliases; the lines to print on stdout.

    Warnings (an alias of the user's left alone) go through `session.warn`.
    """
    git = session.git
    if action == "install":
        return _install(git, session.warn)
    if action == "uninstall":
        return _uninstall(git, session.warn)
    installed = _installed(git)
    width = max(len(n) for n in ALIASES)
    lines = []
    for name, value in ALIASES.items():
        current = _effective(git, name)
        if current is None:
            state = "not installed"
        elif current != value:
            state = f"yours: {current}"
        elif name in installed:
            state = "installed"
        else:
            state = "yours (same)"
        lines.append(f"git {name:<{width}}  = git {value:<16} ({state})")
    return lines


def _install(git: Any, warn) -> list[str]:
    installed = _installed(git)
    lines = []
    for name, value in ALIASES.items():
        current = _effective(git, name)
        if current is None:
            git.config_write(f"alias.{name}", value)
            if name not in installed:
                git.config_write("--add", RECORD_KEY, name)
                installed.append(name)
            lines.append(f"installed alias.{name} = {value}")
        elif current != value:
            warn(f"alias.{name} is already '{current}'; leaving it (git {name} will not run git {value})")
        elif name in installed:
            lines.append(f"alias.{name} = {value} is already installed")
        else:
            lines.append(f"alias.{name} = {value} is already defined (yours; --uninstall leaves it)")
    return lines


def _uninstall(git: Any, warn) -> list[str]:
    lines = []
    for name in _installed(git):
        value = ALIASES.get(name)
        current = _local(git, name)
        if current is not None and current == value:
            git.config_write("--unset-all", f"alias.{name}")
            lines.append(f"removed alias.{name} = {value}")
        elif current is not None:
            warn(f"alias.{name} was changed to '{current}' since it was installed; leaving it")
        git.config_write("--fixed-value", "--unset-all", RECORD_KEY, name)
    if not lines:
        lines.append("no alias installed by git-lanes")
    return lines
