"""The gate of SPEC §8.3 run as §8.6 says: the reruns of a recorded candidate outside the slug's
lock (holding the verification lock), then, under the slug's lock again, the fast-forward — only
if the batch still runs, the candidate is unchanged, the head is still its parent and the rerun
passed. A head that moved (a user fast-forward) rebuilds the candidate once and verifies it again.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import scratch
from . import engine
from ..crash import crash_point
from ..store import fast_forward_mark
from .land import Pending, build, mark_integrated
from .repair import restore_leaks
from .state import TickState

if TYPE_CHECKING:
    from ..session import Session


def rerun(s: "Session", slug: str, pending: Pending) -> None:
    """Run the candidate's checks in a scratch worktree of the pool (no slug lock held)."""
    from ..checkrun import flake_retries
    from ..receipts import book

    receipts = book(s.git, where="scratch", batch_id=pending.batch_id, clock=s.clock, warn=s.warn,
                    command_flag=pending.receipts)
    with scratch.take(s, pending.coordinator) as sc:
        try:
            pending.results = sc.run(pending.candidate.commit, pending.items, slug=slug, batch_id=pending.batch_id,
                                     order=pending.order, specs=pending.specs, receipts=receipts, fail_fast=True,
                                     retries=flake_retries(s.git, gate=True))
            pending.setup_failure = None
        except scratch.SetupFailed as failed:
            pending.results = []
            pending.setup_failure = str(failed)
    crash_point("candidate-verified")


def land(t: TickState) -> bool:
    """Step 9, second half (under the slug's lock again): integrate or park the candidate's child,
    clearing `candidate` in the same write (for an integration, the write that records the next
    candidate: the next step, `land.integrate`); or rebuild it once on a head that moved."""
    pending = t.landing
    rec = t.record
    cand = rec.candidate
    if pending is None or rec.batch_state != "running" or cand != pending.candidate:
        return True   # stopped, or decided meanwhile: nothing of ours to land
    child = rec.child(cand.task_id)
    failed = [r for r in pending.results if not r.passed]
    if pending.setup_failure is not None:
        t.park(child, f"batch_integration_setup_failed: {pending.setup_failure}")
    elif failed:
        from ..model import CheckResultModel

        child.gate_results = [CheckResultModel(**r.to_json()) for r in failed]
        t.park(child, f"batch_integration_check_failed: {', '.join(r.id for r in failed)} failed on candidate "
                      f"{cand.commit}")
    elif t.head != cand.head:
        if pending.rebuilt:
            rec.candidate = None   # it moved again: the next tick builds a fresh one
            t.events.append(f"candidate of {child.task_id} dropped (the head moved again)")
        else:
            _rebuild(t, child, pending)
    else:
        try:
            _clear_the_way(t, cand.commit)
            engine.fast_forward(t.git, rec.coordinator, rec.branch, t.head, cand.commit,
                                fast_forward_mark(t.git, t.slug))
        except engine.Park as park:
            t.park(child, park.reason)
        else:
            crash_point("fast-forwarded")
            t.head = cand.commit
            t.extend_history(cand.commit)
            mark_integrated(t, child, cand.commit, pending.results)
            t.events.append(f"integrated {child.task_id}")
            t.landed = True   # written with the next candidate, in one state commit (`land.integrate`)
            return True
    t.write()
    return True


PATHSPEC_MAX = 2000   # more changed paths than this: the whole coordinator is looked at


def _clear_the_way(t: TickState, candidate: str) -> None:
    """Lane writes in the coordinator's way of the fast-forward are restored first (§9): those at a
    path the candidate changes, or a file where it needs a folder. Only those paths are looked at
    (a `git status` of the whole coordinator is a scan of every file, which the tick's step 2 made
    already); lane writes elsewhere do not stop a fast-forward and the next tick's step 2 restores
    them. What cannot be proved a lane's refuses the landing (`working_tree_unstaged`), as step 2 does."""
    changed = list(t.git.odb.change_identity(t.head, candidate))
    coordinator = t.record.coordinator
    in_the_way = len(changed) > PATHSPEC_MAX or any(
        os.path.lexists(folder) and (os.path.islink(folder) or not os.path.isdir(folder))
        for folder in {os.path.join(coordinator, *path.split("/")[:i])
                       for path in changed for i in range(1, path.count("/") + 1)})
    entries = t.git.work.status(coordinator, paths=changed, ignored=True) if changed and not in_the_way else []
    _keep_ignored(t, candidate, [e.path for e in entries if e.xy == "!!"])
    if in_the_way or any(e.xy != "!!" for e in entries):
        restore_leaks(t)


def _keep_ignored(t: TickState, candidate: str, paths: list[str]) -> None:
    """A file the coordinator's Git ignores, where the candidate puts a tracked one: `git merge` would
    overwrite it without a word (Git takes ignored files for disposable). Unless it already is the
    candidate's version, the landing is refused (`working_tree_unstaged`) and the file stays as it is."""
    from ..errors import refused
    from ..gitio import quote_path
    from ..leaks import differing

    lost = differing(t.s, t.record.coordinator, candidate, [p.rstrip("/") for p in paths])
    if lost:
        task = t.record.candidate.task_id if t.record.candidate else "the candidate"
        detail = (f"{quote_path(lost[0])}: a file Git ignores in the coordinator, where {task} puts a "
                  f"tracked one; move it away (git-lanes never overwrites it), then git lanes tick {t.slug}")
        exc = refused("working_tree_unstaged", detail)
        exc.report = t.reject(exc.code, exc.detail).report
        raise exc


def _rebuild(t: TickState, child, pending: Pending) -> None:
    from ..model import Candidate
    from .land import pending_for

    try:
        commit = build(t, child)
    except engine.Park as park:
        t.park(child, park.reason)
        return
    t.record.candidate = Candidate(task_id=child.task_id, commit=commit, head=t.head, at=t.s.clock())
    t.events.append(f"candidate {child.task_id} rebuilt")
    t.pending = pending_for(t, child, t.record.candidate, pending.held, rebuilt=True)
