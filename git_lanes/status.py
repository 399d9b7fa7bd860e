"""`git lanes status` and `git lanes show`: read-only views of the stored records."""

from __future__ import annotations

from typing import Any

from .errors import usage
from .session import Session
from .store import CorruptRecord
from .tick import status_report


def status(s: Session, slug: str) -> dict[str, Any]:
    """The report of the latest batch of the slug, whatever its state; never writes."""
    return status_report(s, slug)


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
    if lane_error:
        doc["lane_record_error"] = lane_error
    return doc


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
    head = s.git.rev_parse("HEAD")
    if head is None:
        raise usage("HEAD has no commit yet; the plan is read from HEAD")
    plan = s.plan_at(head, slug)
    from .workspace import setup_command

    setup_command(s)   # one that could never run is refused here too, as by start and run (SPEC §2 v3)
    differs = bool(s.git.toplevel) and any(e.path.startswith(f".lanes/{slug}/") for e in s.git.status())
    risks = {t.task_id: t.intent.risk for t in plan.tasks if t.intent.risk != "low"}
    return plan.to_json(max_parallel), plan.title, differs, risks
