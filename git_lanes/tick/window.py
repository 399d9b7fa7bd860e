"""SPEC §7 step 9 with a window of stacked candidates (§8.3, §8.6, §8.9 v4).

    chain    the recorded window is cut at the first candidate not built on the one before it
             (the first: on the head) — a head the user moved drops them all
    land     recorded-passed candidates at the front land in order, one write each (§8.3's
             fast-forward, each with its own evidence)
    fill     the window is filled up to `verify_window` with the lane-committed children in settle
             order, each built on the commit of the one before it (merge-tree, identity, intents)
    judge    a candidate that failed while one before it was unjudged (`waiting`) parks once every
             one before it passed (a failure of its own, not theirs)
    collect  a `Pending` for each candidate to verify whose lock `verify/<slug>/<task_id>` is free
             (taken here, under the slug's lock, before the candidates are written)

With a window of 1 this is §8.6: one candidate at a time, recorded with its lock taken, and the
write that lands one records the next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.crash import crash_point
from ..core.model import Candidate
from ..store import candidate_lock_path, fast_forward_mark, flock_try
from . import engine, land
from .state import TickState

if TYPE_CHECKING:
    from ..core.model import CheckResultModel
    from ..domain.receipts import Receipts


def integrate(t: TickState) -> bool:
    rec = t.record
    if rec.batch_state != "running":
        return True
    try:
        _chain(t)
        added, receipts = False, _scratch_receipts(t)
        while True:
            _land_front(t)
            _judge_waiting(t)
            added = _fill(t, rec.verify_window or 1) or added
            if receipts is None or not _pass_cached(t, receipts):
                break
        _collect(t)
    except BaseException:
        if t.landed:
            t.write()   # a landing is recorded on its own when what follows it fails
        raise
    t.write()   # nothing changed: nothing written
    if added:
        crash_point("candidate-recorded")
    return True


def _chain(t: TickState) -> None:
    rec = t.record
    on = t.head
    for i, cand in enumerate(rec.candidates):
        if cand.head != on:
            dropped = [c.task_id for c in rec.candidates[i:]]
            del rec.candidates[i:]
            why = "the head moved" if i == 0 else f"not built on the candidate of {rec.candidates[i - 1].task_id}"
            t.events.append(f"candidate of {', '.join(dropped)} dropped ({why})")
            return
        on = cand.commit


class _Recorded:
    """A recorded result as the evidence note takes it."""

    def __init__(self, model: "CheckResultModel") -> None:
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)   # `id`, `passed`, `flaky`, … as a `CheckResult` has them

    def to_json(self) -> dict:
        return self.model.model_dump(mode="json")


def _land_front(t: TickState) -> None:
    """Whoever finds the first candidate recorded passed on the head lands it, then each following
    recorded-passed one (one write each; the last one's goes with what step 9 records next)."""
    from .gate import clear_the_way

    rec = t.record
    while rec.candidates and rec.candidates[0].state == "passed" and rec.candidates[0].head == t.head:
        if t.landed:
            t.write()
        cand = rec.candidates[0]
        child = rec.child(cand.task_id)
        try:
            clear_the_way(t, cand.commit)
            engine.fast_forward(t.git, rec.coordinator, rec.branch, t.head, cand.commit,
                                fast_forward_mark(t.git, t.slug))
        except engine.Park as park:
            t.park(child, park.reason)
            return
        crash_point("fast-forwarded")
        t.head = cand.commit
        t.extend_history(cand.commit)
        land.mark_integrated(t, child, cand.commit, [_Recorded(r) for r in cand.results])
        t.events.append(f"integrated {child.task_id}")
        t.landed = True


def _judge_waiting(t: TickState) -> None:
    """A candidate that failed while one before it was not judged yet waits for them; once every one
    before it passed, the failure is its own: its child parks (the candidates after it are dropped)."""
    from .gate import park_failed

    rec = t.record
    for i, cand in enumerate(rec.candidates):
        if cand.state == "waiting":
            park_failed(t, rec.child(cand.task_id), cand.commit, [r for r in cand.results if not r.passed],
                        [c.task_id for c in rec.candidates[i + 1:]])
            return
        if cand.state != "passed":
            return


def _fill(t: TickState, window: int) -> bool:
    rec = t.record
    order = {c.task_id: i for i, c in enumerate(rec.children)}
    stacked = {c.task_id for c in rec.candidates}
    queue = sorted((c for c in rec.children if c.state == "lane_committed" and c.task_id not in stacked),
                   key=lambda c: (c.settled_at or "", order[c.task_id]))
    added = False
    for child in queue:
        if len(rec.candidates) >= window:
            break
        on = rec.candidates[-1].commit if rec.candidates else t.head
        try:
            commit = land.build(t, child) if on == t.head else land.build(t, child, on)
        except engine.Park as park:
            t.park(child, park.reason)
            t.write()
            continue
        rec.candidates.append(Candidate(task_id=child.task_id, commit=commit, head=on, at=t.s.clock()))
        t.events.append(f"candidate {child.task_id}")
        added = True
    return added


def _scratch_receipts(t: TickState) -> "Receipts | None":
    """The scratch receipts book of this hold (None: receipts are off): one for every pass of the loop."""
    from ..domain.receipts import book

    return book(t.git, where="scratch", batch_id=t.record.batch_id, clock=t.s.clock, warn=t.s.warn,
                command_flag=land.receipts_apply(t))


def _pass_cached(t: TickState, receipts: "Receipts") -> bool:
    """A candidate for whose every rerun a usable passing receipt stands (SPEC §8.7: nothing would run)
    is judged here, under the slug's lock, as its verifier would judge it — recorded passed with the
    cached results — instead of in a thread and a scratch worktree after this hold; it then lands in
    order like any passed one. Only candidates whose verification lock is free; whether any passed."""
    from ..core.model import CheckResultModel
    from ..domain.scratch import cached

    rec = t.record
    order = [c.task_id for c in rec.children]
    passed = False
    for i, cand in enumerate(rec.candidates):
        if cand.state != "verifying":
            continue
        held = flock_try(candidate_lock_path(t.git, t.slug, cand.task_id))
        if held is None:
            continue   # a live verifier has it
        try:
            p = land.pending_for(t, rec.child(cand.task_id), cand, held, [c.task_id for c in rec.candidates[:i]])
            results = cached(t.git, cand.commit, p.items, slug=t.slug, batch_id=rec.batch_id, order=order,
                             specs=p.specs, receipts=receipts)
        finally:
            held.release()
        if results is None:
            continue
        cand.state, cand.passed_at = "passed", t.s.clock()
        cand.results = [CheckResultModel(**r.to_json()) for r in results]
        t.events.append(f"passed {cand.task_id} (receipts)")
        passed = True
    return passed


def _collect(t: TickState) -> None:
    """A verification for each candidate not passed whose lock this process can take (the lock of the
    candidate this hold judged, still held, goes to its child's rebuilt candidate)."""
    rec = t.record
    mine = {p.candidate.task_id: p.held for p in t.landings if p.held.fd is not None}
    for i, cand in enumerate(rec.candidates):
        if cand.state != "verifying":
            continue   # passed (it lands in order), or failed and waiting for the ones before it
        held = mine.get(cand.task_id)
        if held is None or any(p.held is held for p in t.pendings):
            held = flock_try(candidate_lock_path(t.git, t.slug, cand.task_id))
            if held is None:
                continue   # a live verifier has it
        t.pendings.append(land.pending_for(t, rec.child(cand.task_id), cand, held,
                                           [c.task_id for c in rec.candidates[:i]]))
