"""`git lanes status` and `git lanes show`: read-only views of the stored records."""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import usage
from ..domain.session import Session
from ..store import CorruptRecord
from ..tick import status_report


def status(s: Session, slug: str) -> dict[str, Any]:
    """The report of the latest batch of the slug, whatever its state, with its usage totals; never writes.
    While a live `git lanes run` drives the slug (it holds `locks/run/<slug>`), the report says so
    (`driver`) and its `next_action` leaves the handoffs to that run (SPEC §17.1). In a clone of a
    remote batch: what this clone does next, and each remote lane's heartbeat (SPEC §17.2)."""
    from ..remote.views import remote_view, unpulled
    from ..store import driver
    from .metering import totals

    if s.batches.read(slug) is None:
        remote = unpulled(s, slug)
        if remote is not None:
            raise usage(f"no batch for {slug} in this clone yet; {remote} has one (as last fetched): "
                        f"git lanes pull {remote}")
    report = remote_view(s, slug, status_report(s, slug))
    used = totals(s, slug, report)
    if used:
        report["usage"] = used
    live = driver(s.git, slug)
    if live is not None:
        report["driver"] = live
        report["next_action"] = driven_action(s, slug, live)
    return report


def driven_action(s: Session, slug: str, live: dict[str, Any]) -> str:
    """`next_action` while a run drives the slug: no handoff step (the run takes them), only what a
    person may do beside it (parked children: look, then resume)."""
    from shlex import quote

    from ..core.report import parked_commands

    snap = s.batches.read(slug)
    parked = parked_commands(snap.record) if snap is not None else []
    return (f"git lanes run (pid {live['pid']}) drives {quote(slug)}: it provisions the lanes, runs their sessions, "
            f"integrates and releases; follow it with git lanes status {quote(slug)}."
            + (" Parked: " + "; ".join(parked) + "." if parked else ""))


def show(s: Session, slug: str, task_id: str) -> dict[str, Any]:
    """One child (as the report shows it) with its lane record."""
    report = status(s, slug)
    child = next((c for c in report["children"] if c["task_id"] == task_id), None)
    if child is None:
        raise usage(f"{task_id} is not a child of batch {report['batch_id']}")
    try:
        lane_record, _ = s.lanes.read(slug, task_id)
        lane_doc = lane_record.model_dump(mode="json") if lane_record else None
        lane_error = None
    except CorruptRecord as exc:
        lane_doc, lane_error = None, exc.detail
    doc: dict[str, Any] = {"batch_id": report["batch_id"], "child": child, "lane_record": lane_doc}
    if report.get("usage", {}).get("children", {}).get(task_id):
        doc["usage"] = report["usage"]["children"][task_id]
    if lane_error:
        doc["lane_record_error"] = lane_error
    lane = child.get("lane") or {}
    if lane.get("path") and not os.path.isdir(lane["path"]):
        doc["lane_removed"] = True
    doc["inbox"] = _inbox(s, slug, task_id, lane_doc)
    return doc


def _inbox(s: Session, slug: str, task_id: str, lane_doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every instruction and correction sent to the child's current lane, oldest first, with whether the
    lane has read it (SPEC §17.1 v4); what went to a lane a restart archived is not this lane's."""
    record = s.record(slug)
    ended = max((a.at for a in record.archived_lanes if a.task_id == task_id), default="")
    read = (lane_doc or {}).get("inbox_read", 0)
    sent = [i for i in record.interventions if i.task_id == task_id and i.at >= ended]
    return [{"at": i.at, "kind": i.kind, "text": i.text, "read": n < read} for n, i in enumerate(sent)]


def audit_trail(s: Session, slug: str) -> list[dict[str, str]]:
    """`git lanes log`: one entry per state write, oldest first."""
    if s.batches.read(slug) is None:
        raise usage(f"no batch for {slug}")
    return [{k: e[k] for k in ("at", "actor", "summary", "commit")} for e in s.batches.log(slug)]


def check_tasks(s: Session, slug: str, tasks: list[str]) -> None:
    """Task ids the batch does not have are a usage error (SPEC §6 v3), before anything is written."""
    if not tasks:
        return
    record = s.record(slug)
    missing = [t for t in tasks if record.child(t) is None]
    if missing:
        raise usage(f"not a child of batch {record.batch_id}: " + ", ".join(missing))


def plan_view(s: Session, slug: str, max_parallel: int) -> tuple[dict[str, Any], str, bool, dict[str, str]]:
    """`git lanes plan`: (the plan document read from HEAD, its title, whether the working tree
    differs from HEAD under `.lanes/<slug>/`, the risk of each task that is not `low`: shown, SPEC §2)."""
    from ..domain.workspace import setup_command

    setup_command(s)   # shell syntax in lanes.setupCommand: refused here as start and run refuse it (§17.1 v4)
    head = s.git.rev_parse("HEAD")
    if head is None:
        raise usage("HEAD has no commit yet; the plan is read from HEAD")
    plan = s.plan_at(head, slug)
    from ..domain.workspace import setup_command

    setup_command(s)   # one that could never run is refused here too, as by start and run (SPEC §2 v3)
    differs = bool(s.git.toplevel) and any(e.path.startswith(f".lanes/{slug}/") for e in s.git.status())
    risks = {t.task_id: t.intent.risk for t in plan.tasks if t.intent.risk != "low"}
    doc = plan.to_json(max_parallel)
    for child, task in zip(doc["children"], plan.tasks):   # (v4) what each check reads (SPEC §8.7)
        child["checks"] = [{"id": a.id, "inputs": list(a.inputs) if a.inputs else None} for a in task.intent.acceptance]
    return doc, plan.title, differs, risks
