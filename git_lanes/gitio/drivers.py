"""What a worktree's own configuration makes Git run on its files, undone for git-lanes' calls there.

A lane writes its own `config.worktree` (and any file that includes, `[include]` or `[includeIf]`):
a clean/smudge/process filter, a diff textconv or command, or a merge driver set there would run in a
coordinator's command, with the coordinator's environment (docs/security.md). Git itself is asked
what it reads in that worktree (`git config --show-scope`, includes followed), every such key of the
worktree scope is set back with `-c` (command scope wins over every file) to the value the shared
configuration gives it, or off. The drivers of the repository's, the user's and the system's
configuration (Git LFS) run as they do for Git.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .git import Git

_DRIVER_KEY = re.compile(r"^(filter\..+\.(clean|smudge|process|required)|diff\..+\.(textconv|command)|diff\.external"
                         r"|merge\..+\.driver)$")


def drivers_off(git: "Git", worktree: str, admin: str) -> list[str]:
    """`-c` settings undoing the drivers `worktree`'s own configuration sets (none without a
    `config.worktree` in its admin folder `admin`). Asked at every call: a lane may plant one, or edit
    a file its configuration includes, at any time."""
    if not os.path.isfile(os.path.join(admin, "config.worktree")):
        return []
    proc = git.run("config", "--show-scope", "-z", "--get-regexp", r"^(filter|diff|merge)\.", cwd=worktree,
                   check=False, safe=False)
    items = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    shared: dict[str, str] = {}
    planted: set[str] = set()
    for scope, item in zip(items[0::2], items[1::2]):
        key, _, value = item.partition("\n")
        if not _DRIVER_KEY.match(key):
            continue
        if scope == "worktree":
            planted.add(key)
        else:
            shared[key] = value   # the last one read wins, as for Git
    undo: list[str] = []
    for key in sorted(planted):
        undo += ["-c", f"{key}={shared.get(key, 'false' if key.endswith('.required') else '')}"]
    return undo
