"""`git lanes audit [<slug>]` (SPEC §6): every lane branch checked against the records. Never writes.

Findings, one `{kind, branch, detail}` each, sorted by branch:
  unknown_lane_branch  an `imm-lane/*` branch that no batch record knows
  stale_lane           a lane of a terminal batch that was never released
  lane_moved           the lane branch no longer points at the recorded lane commit
  lane_base_mismatch   the lane commit (or the branch) is not on the recorded lane base
  outside_scope        the branch changes paths outside the child's effective scope
"""

from __future__ import annotations

from typing import Any

from ..core.errors import LanesError, usage
from ..core.ids import check_id
from ..core.model import BatchRecord, Child
from ..domain.scope import outside_scope
from ..domain.session import LANE_PREFIX, Session
from ..gitio import short_branch

_ORDER = ("unknown_lane_branch", "stale_lane", "lane_moved", "lane_base_mismatch", "outside_scope")


def _finding(kind: str, branch: str, detail: str) -> dict[str, str]:
    return {"kind": kind, "branch": branch, "detail": detail}


def _short(oid: str | None) -> str:
    return oid[:12] if oid else "nothing"


def _parents(s: Session, commit: str) -> list[str] | None:
    try:
        return list(s.git.odb.commit(commit).parents)
    except LanesError:
        return None


def _check_lane(s: Session, record: BatchRecord, child: Child, branch: str, tip: str) -> list[dict[str, str]]:
    lane = child.lane
    assert lane is not None
    found = []
    if record.terminal and child.state != "released":
        found.append(_finding("stale_lane", branch,
                              f"batch {record.batch_id} is {record.batch_state} but the lane of {child.task_id} "
                              f"({child.state}) was never released; 'git lanes release --stale {record.slug}'"))
    commit = lane.lane_commit
    if commit:
        pending_move = child.state == "lane_committed" and (tip == lane.base_head or tip in lane.executor_commits)
        if tip != commit and not pending_move:
            found.append(_finding("lane_moved", branch,
                                  f"{branch} is at {_short(tip)}, not at the lane commit {_short(commit)} of "
                                  f"{child.task_id} (batch {record.batch_id})"))
        parents = _parents(s, commit)
        if parents != [lane.base_head]:
            shown = ", ".join(_short(p) for p in parents) if parents else "none"
            found.append(_finding("lane_base_mismatch", branch,
                                  f"lane commit {_short(commit)} of {child.task_id} has parent(s) {shown}, "
                                  f"not the recorded lane base {_short(lane.base_head)}"))
    elif tip != lane.base_head and not (s.git.odb.has(lane.base_head) and s.git.odb.is_ancestor(lane.base_head, tip)):
        found.append(_finding("lane_base_mismatch", branch,
                              f"{branch} at {_short(tip)} does not descend from the recorded lane base "
                              f"{_short(lane.base_head)} of {child.task_id}"))
    if s.git.odb.has(lane.base_head):
        try:
            outside = outside_scope(s, record, child.task_id, lane.base_head, tip)
        except LanesError as exc:
            found.append(_finding("outside_scope", branch,
                                  f"the scope of {child.task_id} cannot be read: {exc.detail}"))
        else:
            if outside:
                found.append(_finding("outside_scope", branch,
                                      f"{branch} changes paths outside the scope of {child.task_id}: "
                                      + ", ".join(outside)))
    return found


def _check_branch(s: Session, records: dict[str, BatchRecord | None], branch: str, tip: str) -> list[dict[str, str]]:
    rest = branch[len("imm-lane/"):]
    parts = rest.split("/")
    if len(parts) != 2 or not all(parts):
        return [_finding("unknown_lane_branch", branch, "not of the form imm-lane/<slug>/<task>; no record knows it")]
    slug, task_id = parts
    record = records.get(slug)
    if record is None:
        return [_finding("unknown_lane_branch", branch, f"no batch record for {slug}")]
    child = record.child(task_id)
    if child is None:
        return [_finding("unknown_lane_branch", branch, f"{task_id} is not a child of batch {record.batch_id}")]
    if child.lane is None or child.lane.branch != branch:
        archived = [a for a in record.archived_lanes if a.branch == branch]
        if archived:
            return [_finding("stale_lane", branch,
                             f"the old lane of {task_id} (archived by batch {record.batch_id} at "
                             f"{_short(archived[-1].tip)}) was never released")]
        return [_finding("unknown_lane_branch", branch,
                         f"{task_id} has no lane in batch {record.batch_id} (it is {child.state})")]
    return _check_lane(s, record, child, branch, tip)


def audit(s: Session, slug: str | None) -> list[dict[str, Any]]:
    """Every `imm-lane/*` branch (only `imm-lane/<slug>/*` with a slug) checked against the records."""
    if slug is not None:
        check_id(slug, "slug")
    prefix = LANE_PREFIX + (f"{slug}/" if slug is not None else "")
    branches = {short_branch(ref): oid for ref, oid in s.git.refs.under(prefix).items()}
    slugs = [slug] if slug is not None else s.batches.slugs()
    records: dict[str, BatchRecord | None] = {}
    for name in slugs:
        snap = s.batches.read(name)
        records[name] = snap.record if snap is not None else None
    if slug is not None and records[slug] is None and not branches:
        raise usage(f"no batch and no lane branch for {slug}")
    findings: list[dict[str, str]] = []
    for branch in sorted(branches):
        findings += _check_branch(s, records, branch, branches[branch])
    findings.sort(key=lambda f: (f["branch"], _ORDER.index(f["kind"])))
    return findings
