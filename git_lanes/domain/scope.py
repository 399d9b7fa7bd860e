"""The scope rule (SPEC §3, §5, §8.2), in one place for `done`, the gate and `audit`.

A changed path (base -> tree) is inside the child's effective scope when Git's own pathspec
matching puts it under one entry (`:(glob)<entry>`, or below an entry naming a directory),
case-sensitively whatever the environment; the child's own intent file is also allowed when it
holds exactly the text of an approved revision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..gitio import quote_path

if TYPE_CHECKING:
    from ..core.model import BatchRecord
    from ..gitio import Git
    from .session import Session


_GLOB = "*?[\\"   # what makes a `:(glob)` pathspec more than a literal path


def pathspecs(scope: list[str]) -> list[str]:
    specs = []
    for entry in scope:
        e = entry.strip().rstrip("/")
        specs += [f":(glob){e}", f":(glob){e}/**"]
    return specs


def paths_outside(git: "Git", base: str, tree: str, scope: list[str]) -> list[str]:
    """Changed paths base -> tree that no scope entry matches, sorted. When no entry holds a glob
    character, `:(glob)<e>` and `:(glob)<e>/**` match exactly `<e>` and what lies below it, so the
    answer needs no Git process (a lane's `done` runs this on every attempt)."""
    changed = set(git.odb.change_identity(base, tree))
    if not changed:
        return []
    literal = [e.strip().rstrip("/") for e in scope]
    if not any(c in e for e in literal for c in _GLOB):
        return sorted(p for p in changed if not any(p == e or p.startswith(e + "/") for e in literal))
    inside = set(git.odb.diff_paths(base, tree, pathspecs(scope)))
    return sorted(changed - inside)


def outside_scope(s: "Session", record: "BatchRecord", task_id: str, base: str, tree: str) -> list[str]:
    """Changed paths outside the child's effective scope (its approved intent file excepted), as Git
    shows them (a path that is not valid UTF-8 quoted, SPEC §8 v3)."""
    from . import authority

    intent = authority.effective_intent(s, record, task_id)
    own = record.intent_identities.get(task_id)
    rev = authority.last_revision(record, task_id)
    return paths_outside_scope(s.git, base, tree, list(intent.scope), own.intent_path if own else None,
                               rev.intent_text if rev is not None else None)


def paths_outside_scope(git: "Git", base: str, tree: str, scope: list[str], intent_path: str | None,
                        revision_text: str | None) -> list[str]:
    """The rule itself, on plain values: the changed paths no scope entry matches, except the intent
    file at `intent_path` when it holds exactly the approved `revision_text`; quoted as Git does."""
    outside = paths_outside(git, base, tree, scope)
    if intent_path is not None and revision_text is not None and intent_path in outside:
        if git.odb.blob_at(tree, intent_path) == revision_text.encode("utf-8"):
            outside.remove(intent_path)
    return [quote_path(p) for p in outside]
