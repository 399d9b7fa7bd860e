"""Final verification (SPEC §10.3) and `git lanes verify`: checks on one exact tree, never a write."""

from __future__ import annotations

import os
from typing import Any

from . import authority
from .checks import child_env, run_command, validate_final_check
from .errors import usage
from .model import BatchRecord, CheckResultModel, FinalVerification
from .session import Session

FINAL_TIMEOUT = 1800.0


def final_checks_on(s: Session, record: BatchRecord, head: str, scratch) -> FinalVerification:
    """Run the batch's final checks, in order, in the scratch worktree at `head`."""
    results = []
    if record.final_checks:
        scratch.move_to(head)
        env = child_env(os.environ, s.git.local_env_vars, slug=record.slug, batch=record.batch_id, task="")
        for index, command in enumerate(record.final_checks, 1):
            argv = validate_final_check(command)
            r = run_command(f"final-{index}", command, cwd=scratch.path, env=env, timeout=FINAL_TIMEOUT, argv=argv)
            results.append(CheckResultModel(**r.to_json()))
    return FinalVerification(passed=all(r.passed for r in results), head=head, results=results)


def task_of_commit(s: Session, record: BatchRecord, rev: str) -> str:
    """The task a batch commit integrated (its `Lanes-Task` trailer for this batch)."""
    body = s.git.out("log", "-1", "--format=%B", rev)
    trailers = dict(l.split(": ", 1) for l in body.splitlines() if l.startswith("Lanes-") and ": " in l)
    task = trailers.get("Lanes-Task")
    if not task or record.child(task) is None:
        raise usage(f"{rev} is not a commit that integrated a task of {record.slug}")
    return task


def verify(s: Session, slug: str, rev: str | None) -> dict[str, Any]:
    """`git lanes verify`: {passed, head, results[...]}; the completing tick runs the same code."""
    from .integrate import Scratch, rerun_items

    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    record = snap.record
    scratch = Scratch(s, record)
    if rev is None:
        head = s.git.resolve("refs/heads/" + record.branch)
        if head is None:
            raise usage(f"no batch branch {record.branch}")
        fv = final_checks_on(s, record, head, scratch)
        return fv.model_dump(mode="json")
    commit = s.git.rev_parse(rev)
    if commit is None:
        raise usage(f"--commit: unknown revision {rev}")
    task = task_of_commit(s, record, commit)
    plan = s.plan_at(commit, slug)
    parsed = plan.by_id(task)
    intent = parsed.intent if parsed else authority.effective_intent(s, record, task)
    results = scratch.run(commit, rerun_items([(task, intent)]))
    return {"passed": all(r.passed for r in results), "head": commit, "results": [r.to_json() for r in results]}
