"""SPEC §7 C steps 6–7: the requests a tick carries, then what each running lane did.

    requests (6)  an instruction or correction (§6.2), a revision (§10), a review verdict (§5)
    observe  (7)  lane gone, record unreadable, run mismatch, gave up, QA failures and the
                  correction limit, review pending, settled
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import lifecycle
from ..core.canonical import sha256_digest
from ..core.errors import refused
from ..core.ids import require_utf8
from ..core.model import ArchivedLane, Intervention, Review
from ..core.report import LaneView, build_report
from ..decisions.instruction import instruction_refusal
from ..decisions.obligation import after_pass, qa_limit
from ..domain import authority
from ..domain.lanehost import batch_timeout, remote_restarts
from ..gitio import branch_ref
from ..store import CorruptRecord
from .state import TickState

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Child, LaneRecord, QaAttempt
    from ..domain.session import Session


def obligation_after_pass(s: "Session", rec: "BatchRecord", task_id: str, attempt: "QaAttempt") -> str:
    """`settled`, `review` or `implement` after a passed attempt (SPEC §5)."""
    rev = authority.last_revision(rec, task_id)
    return after_pass(attempt.at, attempt.tree, review_required=authority.effective_intent(s, rec, task_id).review,
                      last_revision_at=rev.at if rev else None,
                      verdicts=[(r.at, r.verdict, r.tree) for r in rec.reviews if r.task_id == task_id])


# -- step 6: requests ----------------------------------------------------------------------------------

def requests(t: TickState) -> bool:
    if t.req.instruction is not None:
        _instruct(t)
    if t.req.revision is not None:
        from ..domain.revise import apply_revision

        t.extras.lane_revision = apply_revision(t.s, t.record, t.req.revision, t.s.clock())
        if t.extras.lane_revision.get("accepted"):
            t.forget_scopes()
            t.events.append(f"revision of {t.req.revision.task_id}")
            _drop_candidates(t, t.req.revision.task_id)
    if t.req.review is not None:
        _review(t, *t.req.review)
        _drop_candidates(t, t.req.review[0])
    return True


def _drop_candidates(t: TickState, task_id: str) -> None:
    """A request that changes a candidate's child drops that candidate and every one after it (§8.9);
    step 9 builds them again."""
    if any(c.task_id == task_id for c in t.record.candidates):
        after = lifecycle.drop_candidates(t.record, task_id)
        t.events.append(f"candidate of {', '.join([task_id] + after)} dropped (a request changed {task_id})")


def _instruct(t: TickState) -> None:
    req = t.req.instruction
    rec = t.record
    child = rec.child(req.task_id)
    refusal = instruction_refusal(child.state if child else None, bool(child and child.lane),
                                  bool(child and child.correction_due), req)
    info = {"task_id": req.task_id, "kind": req.kind}
    if refusal is not None:
        t.extras.lane_instruction = {**info, "accepted": False, "reason": f"batch_lane_instruction_refused: {refusal}"}
        return
    rec.interventions.append(Intervention(at=t.s.clock(), task_id=req.task_id, kind=req.kind, text=req.text,
                                          text_digest=sha256_digest(req.text)))
    if req.kind == "correction":
        child.correction_due = None
        child.corrections += 1
        child.qa_failures = 0
    t.extras.lane_instruction = {**info, "accepted": True, "reason": None}
    t.events.append(f"{req.kind} for {req.task_id}")


def _review(t: TickState, task_id: str, verdict: str, text: str | None) -> None:
    if text is not None:
        require_utf8(text, "--message")
    rec = t.record
    child = rec.child(task_id)
    view = view_lane(t, child) if child and child.state == "enrolled" else None
    if child is None or view is None or view.next_obligation != "review":
        detail = f"{task_id} has no open review"
        report = build_report(rec, state="rejected", reason=f"batch_review_not_open: {detail}", extras=t.extras,
                              action="Nothing was written; see which lane waits for a review: "
                                     f"git lanes status {t.slug}")
        raise refused("batch_review_not_open", detail, report=report.to_json())
    attempt = t.attempts.get(task_id)
    rec.reviews.append(Review(at=t.s.clock(), task_id=task_id, verdict=verdict, text=text,
                              tree=attempt.tree if attempt else None))
    if verdict == "reject":
        body = text or "The review rejected this delivery; rework it."
        rec.interventions.append(Intervention(at=t.s.clock(), task_id=task_id, kind="review", text=body,
                                              text_digest=sha256_digest(body)))
    t.events.append(f"review {verdict} {task_id}")


# -- step 7: observe ------------------------------------------------------------------------------------

def earlier_run(rec: "BatchRecord", child: "Child", lrec: "LaneRecord") -> bool:
    """A lane record left by another batch, or by a run of this child that `resume --restart` ended."""
    return lrec.batch_id != rec.batch_id or any(
        a.task_id == child.task_id and a.run_id == lrec.run_id for a in rec.archived_lanes)


def view_lane(t: TickState, child: "Child") -> LaneView | None:
    """Read the lane's record; None (after parking the child) when the lane cannot be observed."""
    lane = child.lane
    where = t.lanes.presence(lane, batch_timeout(t.git, t.record) if t.req.heartbeats else 0)
    if where.lost and lane.remote is not None and where.lost.startswith("no heartbeat") \
            and restart_lost(t, child, where.lost):   # only a remote lane's machine heals (SPEC §17.2)
        return None
    if not where.exists or where.branch != branch_ref(lane.branch) or where.lost:
        t.park(child, f"batch_lane_lost: {where.lost}" if where.lost else "batch_lane_lost")
        return None
    try:
        lrec, _ = t.s.lanes.read(t.slug, child.task_id)
    except CorruptRecord as exc:
        t.park(child, f"batch_lane_contract_mismatch: {exc.detail}" if "contract error" in exc.detail
               else "batch_lane_lost")
        return None
    view = LaneView(next_obligation="implement", clean_on_branch=False)
    t.views[child.task_id] = view
    if lrec is None:
        return view
    if lrec.run_id != lane.run_id:
        if earlier_run(t.record, child, lrec):  # this run has not written its record yet
            return view
        del t.views[child.task_id]
        t.park(child, "batch_lane_run_mismatch")
        return None
    view.record_revision = lrec.record_revision
    t.lane_records[child.task_id] = lrec
    if lrec.qa_attempts and lrec.qa_attempts[-1].passed:
        last = lrec.qa_attempts[-1]
        t.attempts[child.task_id] = last
        view.next_obligation = obligation_after_pass(t.s, t.record, child.task_id, last)
    return view


def restart_lost(t: TickState, child: "Child", why: str) -> bool:
    """(v4) A remote lane lost (no heartbeat) is restarted in the same write while the child's
    `remote_restarts` is below lanes.remoteRestarts (SPEC §17.2): its tip and lane record archived
    (only what this repository holds), the child pending for another machine to join. False at the
    limit: the caller parks it."""
    done = child.remote_restarts or 0
    limit = remote_restarts(t.git)
    if child.state != "enrolled" or done >= limit:
        return False
    lane, at = child.lane, t.s.clock()
    odb = t.git.odb
    tip = t.git.refs.resolve(branch_ref(lane.branch))
    record_tip = t.s.lanes.tip(t.slug, child.task_id)
    t.record.archived_lanes.append(ArchivedLane(
        at=at, task_id=child.task_id, branch=lane.branch, tip=tip if tip and odb.has(tip) else lane.base_head,
        run_id=lane.run_id, record_tip=record_tip if record_tip and odb.has(record_tip) else None))
    lifecycle.restart_lost(child, at)
    t.events.append(f"restarted {child.task_id} ({done + 1} of {limit}): {why}")
    return True


def observe(t: TickState) -> bool:
    rec = t.record
    for child in rec.children:
        if child.state != "enrolled" or (t.req.only is not None and child.task_id not in t.req.only):
            continue
        view = view_lane(t, child)
        lrec = t.lane_records.get(child.task_id)
        if view is None or lrec is None:
            continue
        def news(at: str) -> bool:   # what happened before a resume freed the child is history (§6 v3)
            return child.resumed_at is None or at > child.resumed_at

        if lrec.gave_up is not None and news(lrec.gave_up.at):
            t.park(child, f"batch_lane_stopped: {lrec.gave_up.text}")
            continue
        new = lrec.qa_attempts[child.qa_attempts_seen:]
        failed = sum(1 for a in new if not a.passed and news(a.at))
        child.qa_attempts_seen = len(lrec.qa_attempts)
        if failed:
            t.events.append(f"{failed} QA failure(s) of {child.task_id}")
        verdict = qa_limit(child.qa_failures, failed, bool(new) and new[-1].passed, limit=rec.budget.qa_failure_limit,
                           corrections=child.corrections, correction_due=bool(child.correction_due))
        child.qa_failures = verdict.qa_failures
        if verdict.correction_due:
            child.correction_due = "QA failure limit reached"
            t.events.append(f"correction due for {child.task_id}")
            continue
        if verdict.park:
            t.park(child, verdict.park)
            continue
        if view.next_obligation == "review":
            if t.reason is None:
                t.reason = f"review reservation {child.task_id} open"
            continue
        if view.next_obligation == "settled":
            attempt = lrec.qa_attempts[-1]
            if not t.lanes.delivers(child.lane, attempt.tree):
                view.next_obligation = "implement"
                continue
            lifecycle.settle(child, attempt.at, len(lrec.qa_attempts) - 1)
            t.events.append(f"settled {child.task_id}")
    return True
