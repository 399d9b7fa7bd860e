"""The reconciler: one tick is the ordered steps of SPEC §7, each a function `step(state)`.

`tick`, `instruct`, `revise`, `review`, `provision`, `start`, `resume` and `run` all run the full
pipeline, differing only in the request they carry; `integrate` runs the same steps without
admission (`INTEGRATE`); `status` builds the same report without a step or a write.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import usage
from . import finish, land, observe, repair
from .request import Outcome, Request, parse_offers
from .state import TickState

Step = Callable[[TickState], bool]

FULL: tuple[Step, ...] = (
    repair.authorize, repair.restore_leaks, repair.adopt, repair.record_releases, repair.lineage,   # 1-5
    observe.requests, observe.observe,                                                              # 6-7
    land.lane_commits, land.integrate,                                                              # 8-9
    finish.admit, finish.complete, finish.stop,                                                     # 11, 12, 14
)
INTEGRATE: tuple[Step, ...] = tuple(step for step in FULL if step is not finish.admit)

__all__ = ["FULL", "INTEGRATE", "Outcome", "Request", "TickState", "parse_offers", "run_tick", "status_report"]


def run_tick(s, slug: str, req: Request, steps: Sequence[Step] = FULL) -> Outcome:
    """One tick under the slug's lock, then the tracker closes outside it."""
    with s.transaction(slug, req.actor) as tx:
        s.worktrees(refresh=True)   # the list after the lock: what other commands did is seen
        t = TickState(s, slug, req, tx, schedule=finish.admit in steps)
        outcome = _locked(t, steps)
    closes = finish.tracker_closes(s, slug, t.record, req.actor, outcome)
    return closes or outcome


def _locked(t: TickState, steps: Sequence[Step]) -> Outcome:
    if t.tx.record is None:
        raise usage(f"no batch for {t.slug} (start one with 'git lanes start {t.slug}')")
    rec = t.record
    if t.req.has_requests and rec.terminal:
        raise usage(f"no active batch for {t.slug} (the latest is {rec.batch_state})")
    if rec.terminal:
        finish.terminal(t)
        return finish.report(t)
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
