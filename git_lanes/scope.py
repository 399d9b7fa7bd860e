"""The scope rule (SPEC §3, §5, §8.2), in one place for `done`, the gate and `audit`.

A changed path (base -> tree) is inside the child's effective scope when Git's own pathspec
matching puts it under one entry (`:(glob)<entry>`, or below an entry naming a directory),
case-sensitively whatever the environment; the child's own intent file is also allowed when it
holds exactly the text of an approved revision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import authority
from .gitio import quote_path

if TYPE_CHECKING:
    from .gitio import Git
    from .model import BatchRecord
    from .session import Session


def pathspecs(scope: list[str]) -> list[str]:
    specs = []
    for entry in scope:
        e = entry.strip().rstrip("/")
        specs += [f":(glob){e}", f":(glob){e}/**"]
    return specs


def paths_outside(git: "Git", base: str, tree: str, scope: list[str]) -> list[str]:
    """Changed paths base -> tree that no scope entry matches, sorted."""
    changed = set(git.odb.change_identity(base, tree))
    if not changed:
        return []
    inside = set(git.odb.diff_paths(base, tree, pathspecs(scope)))
    return sorted(changed - inside)


def outside_scope(s: "Session", record: "BatchRecord", task_id: str, base: str, tree: str) -> list[str]:
    """Changed paths outside the child's effective scope (its approved intent file excepted), as Git
    shows them (a path that is not valid UTF-8 quoted, SPEC §8 v3)."""
    intent = authority.effective_intent(s, record, task_id)
    outside = paths_outside(s.git, base, tree, list(intent.scope))
    own = record.intent_identities.get(task_id)
    rev = authority.last_revision(record, task_id)
    if own is not None and rev is not None and own.intent_path in outside:
        if s.git.odb.blob_at(tree, own.intent_path) == rev.intent_text.encode("utf-8"):
            outside.remove(own.intent_path)
    return [quote_path(p) for p in outside]
