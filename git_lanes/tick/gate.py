"""The gate of SPEC §8.3 run as §8.6 and §8.9 say: the reruns of a recorded candidate outside the
slug's lock (holding its verification lock, `verify/<slug>/<task_id>`), then, under the slug's lock
again, the verdict on it: a failure parks its child (dropping the candidates stacked on it, which
step 9 builds again on the one before it, else on the head); a pass is recorded on the candidate
(`state: passed`, `passed_at`, `results`), and step 9 (`window.py`) lands passed candidates in order.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from ..core.crash import crash_point
from ..domain import scratch
from .land import Pending
from .repair import restore_leaks
from .state import TickState

if TYPE_CHECKING:
    from ..domain.session import Session


def rerun(s: "Session", slug: str, pending: Pending) -> None:
    """Run the candidate's checks in a scratch worktree of the pool (no slug lock held)."""
    from ..domain.checkrun import flake_retries
    from ..domain.receipts import book

    pending.thread = threading.get_ident()
    receipts = book(s.git, where="scratch", batch_id=pending.batch_id, clock=s.clock, warn=s.warn,
                    command_flag=pending.receipts)
    with scratch.take(s, pending.coordinator) as sc:
        try:
            pending.results = sc.run(pending.candidate.commit, pending.items, slug=slug, batch_id=pending.batch_id,
                                     order=pending.order, specs=pending.specs, receipts=receipts, fail_fast=True,
                                     retries=flake_retries(s.git, gate=True),
                                     stop=lambda: pending.stopped)
            pending.setup_failure = None
        except scratch.SetupFailed as failed:
            pending.results = []
            pending.setup_failure = str(failed)
    crash_point("candidate-verified")


def same(a, b) -> bool:
    return (a.task_id, a.commit, a.head) == (b.task_id, b.commit, b.head)


def park_failed(t: TickState, child, commit: str, failed: list, after: list[str]) -> None:
    """Park the child of a candidate whose checks failed (dropping the candidates after it)."""
    from ..core.model import CheckResultModel

    child.gate_results = [r if isinstance(r, CheckResultModel) else CheckResultModel(**r.to_json()) for r in failed]
    t.park(child, f"batch_integration_check_failed: {', '.join(r.id for r in failed)} failed on candidate {commit}")
    if after:
        t.events.append(f"candidate of {', '.join(after)} dropped ({child.task_id} failed)")


def land(t: TickState) -> bool:
    """Step 9, first part (under the slug's lock again): the verdict on each verified candidate still
    in the window, in window order — its child parked, or the candidate recorded passed."""
    position = {c.task_id: i for i, c in enumerate(t.record.candidates)}
    for pending in sorted(t.landings, key=lambda p: position.get(p.candidate.task_id, len(position))):
        _judge(t, pending)
    return True


def _judge(t: TickState, pending: Pending) -> None:
    rec = t.record
    if pending.stopped or rec.batch_state != "running":
        return   # stopped, or its candidate left the window: nothing of ours to judge
    cand = next((c for c in rec.candidates if same(c, pending.candidate)), None)
    if cand is None or cand.state != "verifying":
        return
    child = rec.child(cand.task_id)
    failed = [r for r in pending.results if not r.passed]
    from ..core.model import CheckResultModel

    before = rec.candidates[:rec.candidates.index(cand)]
    if failed and pending.setup_failure is None and any(c.state != "passed" for c in before):
        # its tree holds the changes of the candidates before it, not judged yet: a failure may be theirs
        cand.state = "waiting"
        cand.results = [CheckResultModel(**r.to_json()) for r in pending.results]
        t.events.append(f"{child.task_id} failed, waiting for the candidates before it")
        return
    if pending.setup_failure is not None or failed:
        after = [c.task_id for c in rec.candidates[len(before) + 1:]]
        if pending.setup_failure is not None:
            t.park(child, f"batch_integration_setup_failed: {pending.setup_failure}")
        else:
            park_failed(t, child, cand.commit, failed, after)
        t.write()
        return
    cand.state = "passed"
    cand.passed_at = t.s.clock()
    cand.results = [CheckResultModel(**r.to_json()) for r in pending.results]
    if cand is not rec.candidates[0] or cand.head != t.head:
        t.events.append(f"passed {child.task_id}")


PATHSPEC_MAX = 2000   # more changed paths than this: the whole coordinator is looked at


def clear_the_way(t: TickState, candidate: str) -> None:
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
    from ..core.errors import refused
    from ..domain.leaks import differing
    from ..gitio import quote_path

    lost = differing(t.s, t.record.coordinator, candidate, [p.rstrip("/") for p in paths])
    if lost:
        task = t.record.candidate.task_id if t.record.candidate else "the candidate"
        detail = (f"{quote_path(lost[0])}: a file Git ignores in the coordinator, where {task} puts a "
                  f"tracked one; move it away (git-lanes never overwrites it), then git lanes tick {t.slug}")
        exc = refused("working_tree_unstaged", detail)
        exc.report = t.reject(exc.code, exc.detail).report
        raise exc
