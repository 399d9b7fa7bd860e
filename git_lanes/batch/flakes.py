"""`git lanes flakes` (SPEC §8.8 v4): the checks with flaky results across the repository's batches.

Read from the records only: every lane record's attempts (`done`), the integrated commits' evidence
(the candidate reruns that landed), the batch records' gate results and final verification. A flaky
result counts once per record it is in. Never writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from ..store import CorruptRecord, EvidenceNotes

if TYPE_CHECKING:
    from ..domain.session import Session


def _flaky(results: Iterable[Any]) -> list[str]:
    return [r["id"] for r in results or [] if isinstance(r, dict) and r.get("flaky") and isinstance(r.get("id"), str)]


def flakes(s: "Session", slugs: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """`[{check, task, count, last_seen, slug}]` of every slug (or of `slugs`), most frequent first."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}

    def seen(slug: str, task: str, check: str, at: str | None) -> None:
        if ":" in check and not task:
            task, check = check.split(":", 1)
        item = found.setdefault((slug, task, check), {"check": check, "task": task or None, "slug": slug,
                                                      "count": 0, "last_seen": None})
        item["count"] += 1
        if at and (item["last_seen"] is None or at > item["last_seen"]):
            item["last_seen"] = at

    notes = EvidenceNotes(s.git)
    for slug in s.batches.slugs() if slugs is None else slugs:
        try:
            snap = s.batches.read(slug)
        except CorruptRecord:
            continue
        if snap is None:
            continue
        rec = snap.record
        for child in rec.children:
            try:
                data, _ = s.lanes.read_data(slug, child.task_id)
            except CorruptRecord:
                data = None
            for attempt in (data or {}).get("qa_attempts") or []:
                for check in _flaky(attempt.get("results")):
                    seen(slug, child.task_id, check, attempt.get("at"))
            for check in _flaky([r.model_dump() for r in child.gate_results or []]):
                seen(slug, "", check, rec.updated_at)
            if child.commit is not None and child.state == "integrated":
                try:
                    note = notes.read(child.commit) or {}
                except CorruptRecord:
                    note = {}
                for check in _flaky(note.get("rerun")):
                    seen(slug, "", check, child.settled_at or rec.updated_at)
        if rec.final_verification is not None:
            for check in _flaky([r.model_dump() for r in rec.final_verification.results]):
                seen(slug, "(final)", check, rec.updated_at)
    return sorted(found.values(), key=lambda i: (-i["count"], i["slug"], i["task"] or "", i["check"]))
