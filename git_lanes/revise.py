"""Revisions and reseal (SPEC §10.1-10.2)."""

from __future__ import annotations

from .authority import approved
from .model import BatchRecord, IntentIdentity, Reseal
from .plan import plan_digest
from .session import Session


def reseal(s: Session, record: BatchRecord, task_id: str, commit: str, at: str) -> bool:
    """After `task_id` integrated at `commit` with an approved revision: replace its identity and
    recompute `plan_digest`. Anything else is left alone (and fails closed as plan_changed)."""
    ident = record.intent_identities.get(task_id)
    if ident is None:
        return False
    try:
        plan = s.plan_at(commit, record.slug)
    except Exception:
        return False
    parsed = plan.by_id(task_id)
    if parsed is None:
        return False
    rev, digest = parsed.intent.revision, parsed.content_hash
    if rev == ident.intent_revision and digest == ident.intent_content_hash:
        return False
    if not approved(record, task_id, rev, digest):
        return False
    record.intent_identities[task_id] = IntentIdentity(task_id=task_id, intent_path=ident.intent_path,
                                                       intent_revision=rev, intent_content_hash=digest)
    entries = []
    for child in record.children:
        i = record.intent_identities[child.task_id]
        entries.append({"task_id": child.task_id, "intent_path": i.intent_path, "intent_revision": i.intent_revision,
                        "intent_content_hash": i.intent_content_hash, "blocked_by": list(child.blocked_by)})
    to_digest = plan_digest(entries)
    record.reseals.append(Reseal(at=at, task_id=task_id, from_digest=record.plan_digest, to_digest=to_digest,
                                 intent_revision=rev, intent_content_hash=digest))
    record.plan_digest = to_digest
    return True
