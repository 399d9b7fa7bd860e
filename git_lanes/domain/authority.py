"""What the batch authorized: intent identities, approved revisions, effective intents (§7 step 1, §10)."""

from __future__ import annotations

from functools import lru_cache

from ..core.errors import LanesError
from ..core.model import BatchRecord, Revision
from ..plan.initiative import Plan
from ..plan.intent import Intent, ParsedIntent, parse_intent
from .session import Session


def last_revision(record: BatchRecord, task_id: str) -> Revision | None:
    found = [r for r in record.revisions if r.task_id == task_id]
    return found[-1] if found else None


def revision_intent(record: BatchRecord, task_id: str) -> ParsedIntent | None:
    rev = last_revision(record, task_id)
    if rev is None:
        return None
    identity = record.intent_identities.get(task_id)
    path = identity.intent_path if identity else f".lanes/{record.slug}/{task_id}.toml"
    return _parse(path, rev.intent_text)


@lru_cache(maxsize=256)
def _parse(path: str, text: str) -> ParsedIntent:
    return parse_intent(path, text.encode())


def approved(record: BatchRecord, task_id: str, revision: int, content_hash: str) -> bool:
    return any(r.task_id == task_id and r.to_revision == revision and r.intent_content_hash == content_hash
               for r in record.revisions)


def effective_parsed(s: Session, record: BatchRecord, task_id: str) -> tuple[ParsedIntent, str]:
    """(intent, source): the last approved revision (`"revision"`), else the authorized intent as
    of the batch base (`"authorized"`)."""
    parsed = revision_intent(record, task_id)
    if parsed is not None:
        return parsed, "revision"
    found = s.plan_at(record.base_head, record.slug).by_id(task_id)
    if found is None:
        raise LanesError(f"task {task_id} is not in the plan at {record.base_head[:12]}")
    return found, "authorized"


def effective_intent(s: Session, record: BatchRecord, task_id: str) -> Intent:
    return effective_parsed(s, record, task_id)[0].intent


def recorded_digest(record: BatchRecord) -> str:
    """The plan digest of the intents the record holds (reseals included)."""
    from ..plan.initiative import plan_digest

    entries = []
    for child in record.children:
        ident = record.intent_identities.get(child.task_id)
        if ident is None:
            return ""
        entries.append({**ident.model_dump(), "blocked_by": list(child.blocked_by)})
    return plan_digest(entries)


def plan_mismatch(s: Session, record: BatchRecord, commit: str) -> str | None:
    """`<task>: <what changed>` when the plan at `commit` is not what the batch authorized."""
    if recorded_digest(record) != record.plan_digest:
        return f"{record.slug}: the recorded plan_digest {record.plan_digest} is not the digest of the authorized intents"
    if not record.reseals and s.plan_tree(commit, record.slug) == s.plan_tree(record.base_head, record.slug):
        return None    # the very initiative the batch authorized (same tree: same bytes)
    try:
        plan: Plan = s.plan_at(commit, record.slug)
    except LanesError as exc:
        return f"{record.slug}: the initiative at {commit[:12]} is unreadable ({exc.detail})"
    planned = [t.task_id for t in plan.tasks]
    recorded = [c.task_id for c in record.children]
    if planned != recorded:
        added = [t for t in planned if t not in recorded]
        removed = [t for t in recorded if t not in planned]
        if added:
            return f"{added[0]}: task added to the initiative"
        if removed:
            return f"{removed[0]}: task removed from the initiative"
        return f"{record.slug}: task order changed"
    for parsed, child in zip(plan.tasks, record.children):
        ident = record.intent_identities.get(child.task_id)
        if ident is None:
            return f"{child.task_id}: no recorded intent identity"
        if list(parsed.intent.blocked_by) != list(child.blocked_by):
            return f"{child.task_id}: blocked_by changed"
        if parsed.path != ident.intent_path:
            return f"{child.task_id}: intent path changed"
        same = (parsed.intent.revision == ident.intent_revision and parsed.content_hash == ident.intent_content_hash)
        if not same and not approved(record, child.task_id, parsed.intent.revision, parsed.content_hash):
            if parsed.intent.revision != ident.intent_revision:
                return (f"{child.task_id}: intent revision {ident.intent_revision} -> {parsed.intent.revision} "
                        "was not approved")
            return f"{child.task_id}: intent content changed without an approved revision"
    return None
