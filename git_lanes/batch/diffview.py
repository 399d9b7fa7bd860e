"""`git lanes diff <task>` (SPEC §6 v3): a child's change against its lane base, without `cd`-ing into it.

Read-only. The change shown is the child's lane commit when it has one (never the integrated commit's
diff against the batch head, which may hold siblings' changes), else its last attempt's tree, else a
fresh snapshot of its lane (§5's rule: written to the object store only, the lane is untouched).
"""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import refused, usage
from ..core.ids import check_id
from ..domain.scope import outside_scope
from ..domain.session import Session
from ..gitio import quote_path
from ..store import CorruptRecord


def _source(s: Session, slug: str, record, child) -> tuple[str, str]:
    """(tree, source) of the child's change."""
    lane = child.lane
    if lane.lane_commit:
        return s.git.odb.tree_of(lane.lane_commit), "commit"
    try:
        lrec, _ = s.lanes.read(slug, child.task_id)
    except CorruptRecord:
        lrec = None
    if lrec is not None and lrec.run_id == lane.run_id and lrec.qa_attempts:
        return lrec.qa_attempts[-1].tree, "attempt"
    wt = s.worktree_at(lane.path) if lane.path else None
    if wt is None or not os.path.isdir(lane.path):
        raise refused("batch_lane_lost", f"the lane of {child.task_id} ({lane.path or 'remote'}) is not here "
                                         "and it has delivered nothing yet")
    from ..domain.snapshot import snapshot_tree

    return snapshot_tree(s.git, lane.path), "lane"


def diff_view(s: Session, slug: str, task_id: str) -> dict[str, Any]:
    """`{task_id, base, tree, source, paths[{path, status}], outside_scope[paths]}`."""
    check_id(task_id, "task id")
    record = s.record(slug)
    child = record.child(task_id)
    if child is None:
        raise usage(f"{task_id} is not a child of batch {record.batch_id}")
    if child.lane is None:
        raise usage(f"{task_id} has no lane in batch {record.batch_id} (it is {child.state}): nothing to diff")
    base = child.lane.base_head
    tree, source = _source(s, slug, record, child)
    paths = [{"path": quote_path(path), "status": status} for status, path in s.git.odb.name_status(base, tree)]
    return {"task_id": task_id, "base": base, "tree": tree, "source": source, "paths": paths,
            "outside_scope": outside_scope(s, record, task_id, base, tree)}


def show_diff(s: Session, view: dict[str, Any], mode: str | None) -> int:
    """The diff of a `diff_view` on the user's terminal, printed by Git itself (its pager, its colours)."""
    options = {"stat": ["--stat"], "name-status": ["--name-status"]}.get(mode or "", [])
    return s.git.odb.show_diff(view["base"], view["tree"], options)
