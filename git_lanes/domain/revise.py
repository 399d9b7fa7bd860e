"""Revisions and reseal (SPEC §10.1-10.2).

`read_request` parses the proposed intent file (exit 2 on bad input, before any lock is
taken); `apply_revision` decides it inside a tick (step C.6) and records an approved one;
`reseal` replaces an integrated child's identity and recomputes `plan_digest`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any, Callable

from pydantic import ValidationError

from ..core.errors import LanesError, usage
from ..core.ids import check_id
from ..core.model import BatchRecord, IntentIdentity, Reseal, Revision
from ..decisions.revision import classify, decide, describe, fixed_refusals
from ..plan.intent import Intent, ParsedIntent, intent_doc_hash, load_toml, parse_intent, validation_error
from .authority import approved, effective_parsed, recorded_digest
from .session import Session

REFUSED = "batch_revision_refused"


@dataclass(frozen=True)
class RevisionRequest:
    """A proposed intent for one task, with what a breaking change needs from a person."""

    task_id: str
    file: str                   # the file it was read from (for messages)
    text: str                   # the file's text, recorded as is and written into the lane
    parsed: ParsedIntent        # validated; `path` is the file, `content_hash` its identity hash
    yes: bool = False
    interactive: bool = False
    confirm: Callable[[str], bool] | None = None
    # the person's answer and its time, asked before the tick takes the slug's lock (`ask_first`)
    answer: bool | None = None
    answered_at: str | None = None
    confirmed_by: tuple[str, str] | None = None   # (actor, confirmation_ref) of an MCP client's confirmation


def read_request(task: str, path: str, *, yes: bool = False, interactive: bool = False,
                 confirm: Callable[[str], bool] | None = None) -> RevisionRequest:
    """Read and validate the intent file at `path` (exit 2 naming file and field otherwise).

    The intent is validated exactly as a plan file is (strict keys and types); whether it keeps
    the task id and raises the revision is the tick's decision (a refusal, exit 1).
    """
    check_id(task, "task id")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise usage(f"{path}: cannot read the intent file: {exc.strerror or exc}") from None
    doc = load_toml(path, data)
    try:
        intent = Intent.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(path, exc) from None
    text = data.decode("utf-8")  # load_toml proved it decodes
    parsed = ParsedIntent(intent=intent, doc=doc, path=path, content_hash=intent_doc_hash(doc))
    return RevisionRequest(task_id=task, file=path, text=text, parsed=parsed, yes=yes, interactive=interactive,
                           confirm=confirm)


def _refusal(task_id: str, reason: str, fallback: str) -> dict[str, Any]:
    return {"task_id": task_id, "accepted": False, "reason": f"{REFUSED}: {reason}", "fallback": fallback}


def ask_first(s: Session, slug: str, request: RevisionRequest) -> RevisionRequest:
    """A breaking revision that needs a person is asked about now, before the tick takes the slug's lock
    (a prompt under it would hold every other command of the batch until answered): the request with the
    answer. The tick decides again on the record it locks; the answer counts only if it still asks."""
    snap = s.batches.read(slug)
    if snap is None or request.confirm is None or not request.interactive:
        return request
    decided = _decide(s, snap.record, request)
    if isinstance(decided, dict) or not decided[0].needs_person:
        return request
    _, current, proposed, change = decided
    answer = request.confirm(_question(snap.record, request.task_id, current, proposed, change))
    return replace(request, answer=answer, answered_at=s.clock())


def _question(record: BatchRecord, task_id: str, current, proposed, change) -> str:
    return (f"Approve the breaking revision of {task_id} in batch {record.batch_id} "
            f"(revision {current.intent.revision} -> {proposed.revision}: {describe(change)})?")


def apply_revision(s: Session, record: BatchRecord, request: RevisionRequest, at: str) -> dict[str, Any]:
    """Decide a revision for an `enrolled` child; record it when approved (SPEC §10.1).

    Returns the report's `lane_revision` item. A refusal changes nothing in `record`.
    """
    decided = _decide(s, record, request)
    if isinstance(decided, dict):
        return decided
    decision, current, proposed, change = decided
    task_id = request.task_id
    if decision.actor is None:
        return _refusal(task_id, decision.refusal or "refused", decision.fallback or "")
    confirmation_ref, actor = None, decision.actor
    if decision.actor == "batch-coordinator":
        confirmation_ref = f"delegated-batch:{record.batch_id}@{record.revision_delegation.confirmation_time}"
    elif decision.actor == "user":
        if decision.needs_person:
            answer, answered_at = request.answer, request.answered_at
            if answer is None:   # not asked before the lock (an in-process caller): asked now
                answer, answered_at = request.confirm(_question(record, task_id, current, proposed, change)), \
                    s.clock()
            if not answer:
                return _refusal(task_id, f"{task_id}: the breaking revision was declined at the terminal",
                                "nothing was recorded; propose another revision or leave the intent as it is")
            confirmation_ref = f"terminal@{answered_at}"
            if request.confirmed_by is not None:   # confirmed through an MCP client (SPEC §17.6)
                actor, confirmation_ref = request.confirmed_by
        else:
            confirmation_ref = f"yes-flag@{at}"
    record.revisions.append(Revision(at=at, task_id=task_id, from_revision=current.intent.revision,
                                     to_revision=proposed.revision, intent_content_hash=request.parsed.content_hash,
                                     intent_text=request.text, actor=actor,
                                     confirmation_ref=confirmation_ref))
    return {"task_id": task_id, "accepted": True, "reason": None, "fallback": None, "actor": actor,
            "from_revision": current.intent.revision, "to_revision": proposed.revision}


def _decide(s: Session, record: BatchRecord, request: RevisionRequest):
    """The refusal (the report's `lane_revision`), or (decision, current, proposed, change)."""
    task_id = request.task_id
    child = record.child(task_id)
    if child is None:
        return _refusal(task_id, f"{task_id} is not a child of batch {record.batch_id}",
                        "name a task of this batch")
    if child.state != "enrolled" or child.lane is None:
        return _refusal(task_id, f"{task_id} is {child.state}, not running in its Lane",
                        "revise only an enrolled child, before its delivery settles")
    proposed = request.parsed.intent
    if proposed.task_id != task_id:
        return _refusal(task_id, f"{task_id}: task_id changed ({request.file} names {proposed.task_id!r})",
                        f"keep task_id = \"{task_id}\" in the revised intent")
    current, _ = effective_parsed(s, record, task_id)
    if proposed.revision <= current.intent.revision:
        return _refusal(task_id, f"{task_id}: revision {proposed.revision} does not raise the current revision "
                                 f"{current.intent.revision}",
                        f"set revision = {current.intent.revision + 1} (or higher) in the revised intent")
    identity = record.intent_identities.get(task_id)
    intent_path = identity.intent_path if identity else current.path
    try:  # the text as the lane will carry it: its stem must name the task
        parse_intent(intent_path, request.text.encode())
    except LanesError as exc:
        return _refusal(task_id, f"{task_id}: {exc.detail}", "fix the revised intent file")
    change = classify(current.intent, proposed)
    decision = decide(task_id, change, fixed_refusals(current.intent, proposed, change),
                      granted=record.revision_delegation is not None, yes=request.yes,
                      interactive=request.interactive and request.confirm is not None,
                      again=f"git lanes revise {shlex.quote(task_id)} --slug {shlex.quote(record.slug)} "
                            f"--intent {shlex.quote(request.file)}")
    return decision, current, proposed, change


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
    to_digest = recorded_digest(record)
    record.reseals.append(Reseal(at=at, task_id=task_id, from_digest=record.plan_digest, to_digest=to_digest,
                                 intent_revision=rev, intent_content_hash=digest))
    record.plan_digest = to_digest
    return True
