"""SPEC §7 C steps 10–16 and the report: admit, complete, stop, hand off, tell the next action.

    admit    (11)  `--offer`s checked by §6.1's rules
    complete (12)  final verification, then `completed`
    stop     (14)  nothing in flight and nothing startable
    report   (13, 15, 16)  handoffs and next action, from the record and read-only observations
    tracker  (10)  issue closes, outside the lock
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..core import lifecycle
from ..core.crash import crash_point
from ..core.errors import refused
from ..core.model import DONE, FinalVerification
from ..core.report import LaneView, build_report, handoffs, startable_now, stop_decision
from ..decisions.admission import admission_refusal
from ..domain import authority
from ..gitio import LaneBranch, branch_ref
from ..store import CorruptRecord
from .observe import obligation_after_pass
from .request import Outcome
from .state import TickState

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Child
    from ..domain.receipts import Receipts
    from ..domain.session import Session


# -- step 11: admit --------------------------------------------------------------------------------------

def admit(t: TickState) -> bool:
    """`--offer`s and the claims pulled from other clones (a claim waits while its child cannot start)."""
    rec = t.record
    for offer in t.lanes.offers(t.req.offers, t.slug, rec):
        task_id = offer.task_id
        child = rec.child(task_id)
        if child is None or child.state != "pending" or task_id not in startable_now(rec, t.scopes):
            if not offer.standing:
                _refuse_offer(t, task_id, offer.where(), "batch_lane_unknown_child")
            continue
        blockers = [rec.child(b).commit for b in child.blocked_by]

        def base_ok(lane_head: str) -> bool:
            return t.on_branch(lane_head) and all(b and t.on_branch(b, lane_head) for b in blockers)

        branch = LaneBranch(t.slug, task_id)
        facts = t.lanes.facts(offer, rec, branch.name, base_ok)
        reason = admission_refusal(facts, branch.name)
        if reason:
            _refuse_offer(t, task_id, offer.where(), reason)
            continue
        lifecycle.enroll(child, t.lanes.lane(offer, facts, branch.name))
        t.views[task_id] = LaneView(next_obligation="implement")
        t.events.append(f"enrolled {task_id}")
    return True


def _refuse_offer(t: TickState, task_id: str, where: dict[str, Any], reason: str) -> None:
    t.extras.lane_refusals.append({"task_id": task_id, **where, "reason": reason})


# -- step 12: complete -------------------------------------------------------------------------------------

def final_verification(s: "Session", record: "BatchRecord", head: str, receipts: "Receipts | None" = None) -> FinalVerification:
    """The batch's final checks, in order, in a scratch worktree at `head` (SPEC §10.3): all of them,
    each looked up in `receipts` first (§8.7) and retried up to `lanes.flakeRetries` (§8.8)."""
    from ..core.ids import validate_final_check
    from ..core.model import CheckResultModel
    from ..domain import scratch
    from ..domain.checkrun import Spec, execute_all, flake_retries
    from ..domain.checks import CheckResult, child_env

    results: list[CheckResult] = []
    if record.final_checks:
        with scratch.take(s, record.coordinator) as sc:
            try:
                sc.move_to(head, slug=record.slug, batch_id=record.batch_id)
            except scratch.SetupFailed as failed:
                results.append(failed.result)
            else:
                env = child_env(os.environ, s.git.local_env_vars, slug=record.slug, batch=record.batch_id, task="")
                specs = [Spec(f"final-{index}", command, FINAL_TIMEOUT, argv=validate_final_check(command))
                         for index, command in enumerate(record.final_checks, 1)]
                results = execute_all(specs, cwd=sc.path, env_of=lambda _: env, tree=s.git.odb.tree_of(head),
                                      book=receipts, retries=flake_retries(s.git, gate=False),
                                      before_retry=lambda: sc.move_to(head, slug=record.slug, batch_id=record.batch_id))
                if receipts is not None:
                    receipts.flush()
    return FinalVerification(passed=all(r.passed for r in results), head=head,
                             results=[CheckResultModel(**r.to_json()) for r in results])


FINAL_TIMEOUT = 1800.0


def complete(t: TickState) -> bool:
    rec = t.record
    if rec.batch_state != "running" or not lifecycle.done(rec):
        return True
    from ..domain.receipts import book

    receipts = book(t.git, where="scratch", batch_id=rec.batch_id, clock=t.s.clock, warn=t.s.warn,
                    batch_flag=rec.receipts, command_flag=t.req.receipts)
    fv = final_verification(t.s, rec, t.head, receipts)
    rec.final_verification = fv
    rec.batch_state = "completed"
    if fv.passed:
        rec.reason = "all enrollable children integrated"
    else:
        rec.reason = ("all enrollable children integrated; final verification did not pass: "
                      + ", ".join(r.command for r in fv.results if not r.passed))
    t.reason = rec.reason
    t.events.append("completed")
    return True


# -- step 14: stop -------------------------------------------------------------------------------------------

def stop(t: TickState) -> bool:
    rec = t.record
    if rec.batch_state != "running":
        return True
    decision = stop_decision(rec, t.scopes, t.extras.first_park)
    if decision is not None:
        rec.batch_state, rec.reason = decision
        t.reason = rec.reason
        t.events.append(f"stopped {rec.batch_state}")
    return True


# -- A. terminal ----------------------------------------------------------------------------------------------

def terminal(t: TickState) -> None:
    from .repair import record_releases

    record_releases(t)
    t.reason = f"terminal state already reached: {t.record.batch_state}"


# -- the report (steps 13, 15, 16) ------------------------------------------------------------------------------

def _passive_view(t: TickState, child: "Child") -> None:
    """next_obligation for a report that did not observe the lane (read-only)."""
    try:
        lrec, _ = t.s.lanes.read(t.slug, child.task_id)
    except CorruptRecord:
        return
    view = LaneView(next_obligation="implement")
    if lrec is not None and lrec.run_id == child.lane.run_id:
        view.record_revision = lrec.record_revision
        if lrec.qa_attempts and lrec.qa_attempts[-1].passed:
            view.next_obligation = obligation_after_pass(t.s, t.record, child.task_id, lrec.qa_attempts[-1])
    t.views[child.task_id] = view


def report(t: TickState, write: bool = True) -> Outcome:
    """Write what changed (unless told not to), then the report of the record."""
    rec = t.record
    if write:
        t.write()
    for c in rec.children:
        if c.state == "enrolled" and c.task_id not in t.views and c.lane:
            _passive_view(t, c)
        if c.state == "integrated" and c.lane:
            where = t.lanes.presence(c.lane)
            # a release killed half-way (files gone) is released all the same: its work is integrated; a
            # local lane committed past its lane commit holds work that never was: it is not released
            moved_on = c.lane.remote is None and where.head is not None and where.head != c.lane.lane_commit
            t.view(c.task_id).clean_on_branch = where.exists and where.branch == branch_ref(c.lane.branch) and \
                (not moved_on and t.lanes.clean(c.lane, c.lane.lane_commit if where.head == c.lane.lane_commit
                                                else None)
                 or t.lanes.half_removed(c.lane))
    commits = t.batch_commits()
    head = t.git.refs.resolve(t.branch.ref)
    hand = handoffs(rec, t.views, t.scopes if rec.batch_state == "running" else {}, head, set(commits),
                    schedule=t.schedule)
    reason = t.reason if t.reason is not None else rec.reason
    action = _landed(t, rec, head) if rec.batch_state == "completed" else None
    doc = build_report(rec, reason=reason, hand=hand, views=t.views, extras=t.extras, commits=commits,
                       action=action).to_json()
    for refusal in (t.extras.lane_instruction or {}, t.extras.lane_revision or {}):
        if refusal.get("accepted") is False:
            code, _, detail = refusal["reason"].partition(": ")
            return Outcome(doc, 1, refused(code, detail))
    return Outcome(doc, 0)


def _landed(t: TickState, rec, head: str | None) -> str | None:
    """`next_action` of a completed batch already landed (its head an ancestor of `base_branch`, SPEC §17.1
    v4), naming `release --stale` while lanes of it remain; None when it is not landed."""
    from ..core.report import landed_action

    base = t.git.refs.resolve(f"refs/heads/{rec.base_branch}") if rec.base_branch else None
    if head is None or base is None or rec.base_branch == rec.branch or not t.git.is_ancestor(head, base):
        return None
    leftovers = any(c.state == "integrated" and c.lane and not c.lane.carried_over and c.lane.path
                    and t.lanes.presence(c.lane).exists for c in rec.children)
    return landed_action(rec, leftovers)


# -- step 10: tracker closes (outside the lock) -----------------------------------------------------------------

def _integrated_by(s: "Session", rec: "BatchRecord", child) -> str:
    """The batch whose marker closes the child's issue: the one that integrated it (a child `start`
    carried over was integrated, and its issue closed, by an earlier batch: its commit's `Lanes-Batch`)."""
    if child.lane is not None and child.lane.carried_over and child.commit:
        return s.git.odb.commit(child.commit).trailers.get("Lanes-Batch") or rec.batch_id
    return rec.batch_id


def tracker_closes(s: "Session", slug: str, rec: "BatchRecord", actor: str, outcome: Outcome) -> Outcome | None:
    """Close the issues of integrated children; record `tracker_closed` in a short locked write."""
    if not rec.tracker_github:
        return None
    todo = []
    for c in rec.children:
        if c.state in DONE and not c.tracker_closed:
            intent = authority.effective_intent(s, rec, c.task_id)
            if intent.issue:
                todo.append((c.task_id, intent.issue, _integrated_by(s, rec, c)))
    if not todo:
        return None
    from ..tracker.github import from_env

    tracker = from_env(s.git.config_get("lanes.githubApiUrl", "https://api.github.com"))
    observations: list[dict[str, Any]] = []
    closed = []
    for task_id, number, batch_id in todo:
        result = tracker.close_issue(rec.tracker_github, number, batch_id, task_id)
        observations.append({"task_id": task_id, "status": result.status, "message": result.message})
        if result.status in ("updated", "already_current"):
            closed.append(task_id)
    if closed:
        crash_point("tracker-closed")
        with s.transaction(slug, actor) as tx:
            if tx.record is not None and tx.record.batch_id == rec.batch_id:
                for task_id in closed:
                    child = tx.record.child(task_id)
                    if child is not None and child.state in DONE:
                        child.tracker_closed = True
                tx.write(f"{actor}: tracker closed " + ", ".join(closed))
    doc = dict(outcome.report)
    doc["tracker_observations"] = observations
    for child in doc.get("children", []):
        if child["task_id"] in closed:
            child["tracker_closed"] = True
    return Outcome(doc, outcome.exit_code, outcome.error)
