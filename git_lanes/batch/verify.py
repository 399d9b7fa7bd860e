"""`git lanes verify` (SPEC §6): the completing tick's own final verification, or one task's
acceptance checks on the commit that integrated it, in the scratch worktree. Never writes."""

from __future__ import annotations

from typing import Any

from ..core.errors import usage
from ..core.model import BatchRecord
from ..domain import authority, scratch
from ..domain.session import Session
from ..gitio import branch_ref
from ..tick.engine import rerun_items, rerun_specs
from ..tick.finish import final_verification


def task_of_commit(s: Session, record: BatchRecord, commit: str) -> str:
    """The task a batch commit integrated (its `Lanes-Task` trailer for this batch)."""
    task = s.git.odb.commit(commit).trailers.get("Lanes-Task")
    if not task or record.child(task) is None:
        raise usage(f"{commit} is not a commit that integrated a task of {record.slug}")
    return task


def verify(s: Session, slug: str, rev: str | None, receipts: bool = False) -> dict[str, Any]:
    """{passed, head, results[...]}. With `receipts` (`--receipts`), this clone's scratch receipts stand
    for runs (SPEC §8.7); none is ever written."""
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    record = snap.record
    from ..domain.receipts import book

    found = book(s.git, where="scratch", batch_id=record.batch_id, clock=s.clock, warn=s.warn, write=False,
                 command_flag=receipts)
    if rev is None:
        head = s.git.refs.resolve(branch_ref(record.branch))
        if head is None:
            raise usage(f"no batch branch {record.branch}")
        return final_verification(s, record, head, found).model_dump(mode="json")
    commit = s.git.rev_parse(rev)
    if commit is None:
        raise usage(f"--commit: unknown revision {rev}")
    task = task_of_commit(s, record, commit)
    parsed = s.plan_at(commit, slug).by_id(task)
    intent = parsed.intent if parsed else authority.effective_intent(s, record, task)
    with scratch.take(s, record.coordinator) as sc:
        try:
            results = sc.run(commit, rerun_items([(task, intent)]), slug=slug, batch_id=record.batch_id,
                             order=[c.task_id for c in record.children], specs=rerun_specs([(task, intent)]),
                             receipts=found)
        except scratch.SetupFailed as failed:
            results = [failed.result]
    return {"passed": all(r.passed for r in results), "head": commit, "results": [r.to_json() for r in results]}
