"""Whether one commit is an ancestor of another (`git merge-base --is-ancestor`), cheaply.

Replication asks it for every ref that moved (is the remote's value a fast-forward of ours?), every
poll of a loop. The usual answer is near: a record or a branch grew by a few commits. So the commits
are read here, breadth first from the descendant, up to `LIMIT` of them: meeting the ancestor says
yes, running out of parents says no; a longer walk, an object this reader cannot read (a shallow
clone's missing parent) or a non-commit is Git's to answer. Between two object ids the answer never
changes, so it is kept for the process.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from .process import GitError, is_oid

if TYPE_CHECKING:
    from .objects import ObjectDB

LIMIT = 256
_KEPT: dict[tuple[str, str, str], bool] = {}   # (repository, ancestor, descendant) -> the answer


def is_ancestor(odb: "ObjectDB", ancestor: str, descendant: str) -> bool:
    key = (odb.git.common_dir, ancestor, descendant)
    fixed = is_oid(ancestor) and is_oid(descendant)
    if fixed and key in _KEPT:
        return _KEPT[key]
    answer = _walk(odb, ancestor, descendant) if fixed else None
    if answer is None:
        proc = odb.git.run("merge-base", "--is-ancestor", "--end-of-options", ancestor, descendant, check=False)
        if proc.returncode not in (0, 1):
            raise GitError(["git", "merge-base", "--is-ancestor", ancestor, descendant], proc.returncode,
                           proc.stderr.decode("utf-8", "replace"))
        answer = proc.returncode == 0
    if fixed:
        if len(_KEPT) > 4096:
            _KEPT.clear()
        _KEPT[key] = answer
    return answer


def _walk(odb: "ObjectDB", ancestor: str, descendant: str) -> bool | None:
    if ancestor == descendant:
        return True
    seen = {descendant}
    todo = deque([descendant])
    while todo:
        try:
            parents = odb.commit(todo.popleft()).parents
        except Exception:   # not a commit, or not readable here: Git answers
            return None
        for parent in parents:
            if parent == ancestor:
                return True
            if parent not in seen:
                if len(seen) >= LIMIT:
                    return None
                seen.add(parent)
                todo.append(parent)
    return False
