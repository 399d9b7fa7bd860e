"""The reconciler: one tick is the ordered steps of SPEC §7, each a function `step(state)`.

`tick`, `instruct`, `revise`, `review`, `provision`, `start`, `resume` and `run` all run the full
pipeline, differing only in the request they carry; `integrate` runs the same steps without
admission (`INTEGRATE`); `status` builds the same report without a step or a write.

Integration never blocks the batch (§8.6, §8.9): step 9 (`window.py`) records a window of stacked
candidates (each with its verification lock taken); their reruns run after the slug's lock is
released, each in a thread of its own (`verifier.py`), and `LAND` judges each under the lock again,
lands the passed ones in order and fills the window again. `run_tick` verifies in-process until
none is left; `run` hands that to a worker (`verify`), so everything else goes on meanwhile.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..core.errors import usage
from . import finish, gate, land, observe, repair, window
from .land import Pending
from .request import Outcome, Request, parse_offers
from .state import TickState

Step = Callable[[TickState], bool]

FULL: tuple[Step, ...] = (
    repair.authorize, repair.restore_leaks, repair.adopt, repair.record_releases, repair.lineage,   # 1-5
    observe.requests, observe.observe,                                                              # 6-7
    land.lane_commits, window.integrate,                                                            # 8-9
    finish.admit, finish.complete, finish.stop,                                                     # 11, 12, 14
)
INTEGRATE: tuple[Step, ...] = tuple(step for step in FULL if step is not finish.admit)
LAND: tuple[Step, ...] = (   # its leak check looks only where the fast-forward goes (`gate.land`)
    repair.authorize, repair.adopt, repair.record_releases, repair.lineage,
    gate.land, window.integrate, finish.complete, finish.stop,
)

__all__ = ["FULL", "INTEGRATE", "LAND", "Outcome", "Pending", "Request", "TickState", "hold_landing", "parse_offers",
           "run_tick", "status_report", "tick", "verify"]


def run_tick(s, slug: str, req: Request, steps: Sequence[Step] = FULL) -> Outcome:
    """One tick, every candidate it recorded verified and landed or parked before it returns."""
    outcome, pendings = tick(s, slug, req, steps)
    if pendings:
        outcome = verify(s, slug, req, pendings) or outcome
    return outcome


def tick(s, slug: str, req: Request, steps: Sequence[Step] = FULL) -> tuple[Outcome, list[Pending]]:
    """The steps under the slug's lock; the candidates step 9 recorded come back to be verified."""
    return _hold(s, slug, req, steps, None, schedule=finish.admit in steps)


def verify(s, slug: str, req: Request, pendings: list[Pending], cancelled: Callable[[], bool] = lambda: False,
           posted: Callable[[Outcome], None] | None = None) -> Outcome | None:
    """The candidates' reruns (no slug lock), all at once, each judged by `LAND` under the lock as it
    ends (which lands passed candidates in order and records the next ones, verified in turn); the
    outcome of the last landing. Cancelled meanwhile (Ctrl-C killed the checks), nothing more is
    decided: the candidates stay recorded for the next tick."""
    from .verifier import Verifier

    return Verifier(s, slug, lambda ps: hold_landing(s, slug, req, ps), posted=posted, cancelled=cancelled).run(pendings)


def hold_landing(s, slug: str, req: Request, landings: list[Pending]) -> tuple[Outcome, list[Pending]]:
    """`LAND` under the slug's lock for verified candidates (those that ended together are judged in one
    hold, each landing still one write): the candidates it records come back."""
    return _hold(s, slug, req, LAND, list(landings), schedule=any(p.schedule for p in landings))


def _hold(s, slug: str, req: Request, steps: Sequence[Step], landings: list[Pending] | None, *,
          schedule: bool) -> tuple[Outcome, list[Pending]]:
    t = None
    landings = landings or []
    try:
        with s.transaction(slug, req.actor) as tx:
            s.forget_worktrees()   # the list after the lock: what other commands did is seen
            t = TickState(s, slug, req, tx, schedule=schedule)
            if landings:   # the report goes on from the tick that recorded the candidate
                t.landings, t.extras, t.reason = landings, landings[0].extras or t.extras, landings[0].reason
            outcome = _locked(t, steps)
            for p in t.pendings:
                p.extras, p.reason = t.extras, t.reason
            for landing in landings:
                if all(p.held is not landing.held for p in t.pendings):
                    landing.held.release()   # nothing more to verify under its lock: another verifier may go
    except BaseException:
        for p in landings + (t.pendings if t else []):
            p.held.release()
        raise
    closes = finish.tracker_closes(s, slug, t.record, req.actor, outcome) if req.closes_issues else None
    return closes or outcome, t.pendings


def _locked(t: TickState, steps: Sequence[Step]) -> Outcome:
    if t.tx.record is None:
        raise usage(f"no batch for {t.slug} (start one with 'git lanes start {t.slug}')")
    rec = t.record
    if t.req.has_requests and rec.terminal:
        raise usage(f"no active batch for {t.slug} (the latest is {rec.batch_state})")
    if rec.terminal:
        finish.terminal(t)
        return finish.report(t)
    t.s.evidence.check()   # a broken notes ref stops the tick before it writes anything
    if rec.batch_state == "running":
        from ..domain.workspace import setup_command

        setup_command(t.s)   # shell syntax in it: exit 2 now, not after steps 7-9 wrote (SPEC §2 v3)
    guard = repair.guards(t)
    if guard:
        return guard
    if rec.batch_state == "needs_human":
        return finish.report(t, write=False)
    repair.ensure_branch(t)
    for step in steps:
        if not step(t):
            break
    return finish.report(t)


def status_report(s, slug: str) -> dict[str, Any]:
    """The report of the stored record with read-only observations (`git lanes status`)."""
    from ..store import Transaction

    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug}")
    t = TickState(s, slug, Request(actor="status"), Transaction(s.batches, slug, snap, "status", s.clock))
    return finish.report(t, write=False).report
