"""The pure decisions and the child lifecycle, without Git: facts in, verdict out."""

from __future__ import annotations

import pytest

from git_lanes.core import lifecycle
from git_lanes.decisions.admission import LaneFacts, admission_refusal
from git_lanes.decisions.instruction import InstructionRequest, instruction_refusal
from git_lanes.decisions.lineage import LineageFacts, classify_lineage, expected_head
from git_lanes.decisions.obligation import MAX_CORRECTIONS, after_pass, qa_limit
from git_lanes.core.model import BatchRecord, Budget, Child, Lane

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
BRANCH = "imm-lane/demo/t"


# -- lineage (SPEC §8.1) ----------------------------------------------------------------------------

def test_expected_head_follows_integrations_then_adopted_heads():
    assert expected_head(A, [], []) == A
    assert expected_head(A, [B, C], []) == C
    assert expected_head(A, [B], [(B, C), (C, D)]) == D
    assert expected_head(A, [], [(B, C)]) == A          # an adoption from elsewhere does not apply


@pytest.mark.parametrize("facts, verdict", [
    (LineageFacts(A, A, True, (), ()), ("intact", None)),
    (LineageFacts(A, B, True, (), ()), ("adopt", None)),
    (LineageFacts(A, B, False, (), ()), ("broken", f"batch head {B[:12]} does not descend from the expected head {A[:12]}")),
    (LineageFacts(A, B, True, (C,), ()), ("broken", f"recorded commit {C[:12]} is not on the batch branch")),
    (LineageFacts(A, B, True, (), (D,)), ("broken", f"commit {D[:12]} claims this batch without a record")),
])
def test_lineage_classification(facts, verdict):
    assert classify_lineage(facts) == verdict


def test_lineage_checks_descent_before_the_rest():
    assert classify_lineage(LineageFacts(A, B, False, (C,), (D,)))[1].startswith("batch head")


# -- admission (SPEC §6.1): the first failing check wins ----------------------------------------------

GOOD = LaneFacts("/l", True, False, "refs/heads/" + BRANCH, A, True, False, None)


@pytest.mark.parametrize("change, reason", [
    ({}, None),
    ({"is_worktree_root": False, "is_coordinator": True}, "batch_lane_foreign_repository"),
    ({"is_coordinator": True, "branch": None}, "batch_lane_is_coordinator"),
    ({"branch": "refs/heads/main", "base_ok": False}, "batch_lane_branch_mismatch"),
    ({"base_ok": False, "dirty": True}, "batch_lane_base_mismatch"),
    ({"dirty": True, "occupied_by": "other"}, "batch_lane_dirty"),
    ({"occupied_by": "other"}, "batch_lane_occupied"),
])
def test_admission_first_refusal_wins(change, reason):
    facts = LaneFacts(**{**GOOD.__dict__, **change})
    assert admission_refusal(facts, BRANCH) == reason


# -- instructions (SPEC §6.2) -------------------------------------------------------------------------

def req(kind="instruction", state="idle"):
    return InstructionRequest("t", kind, "do it", state)


@pytest.mark.parametrize("child, due, ask, refusal", [
    (None, False, req(), "t has no Lane in this batch"),
    ("integrated", False, req(), "t is integrated, not running in its Lane"),
    ("enrolled", False, req("correction"), "t has not exhausted its rework budget; send an ordinary instruction instead"),
    ("enrolled", True, req(), "t waits for a design-level correction; send it with kind correction"),
    ("enrolled", True, req("correction", "blocked"),
     "t's session is blocked on a dialog only the user may answer; send nothing and tell the user"),
    ("enrolled", False, req("instruction", "working"), "t's session is working; text goes only to an idle session"),
    ("enrolled", False, req("instruction", "done"), "t's session is done; text goes only to an idle session"),
    ("enrolled", False, req(), None),
    ("enrolled", True, req("correction"), None),
])
def test_instruction_refusals_in_order(child, due, ask, refusal):
    assert instruction_refusal(child, child is not None, due, ask) == refusal


# -- obligations after a pass (SPEC §5) -----------------------------------------------------------------

T1, T2, T3 = "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z", "2026-01-01T00:00:03.000Z"


def test_a_pass_settles_without_review():
    assert after_pass(T2, A, review_required=False, last_revision_at=None, verdicts=[]) == "settled"


def test_a_revision_approved_after_the_pass_asks_for_a_new_done():
    assert after_pass(T1, A, review_required=False, last_revision_at=T2, verdicts=[]) == "implement"
    assert after_pass(T3, A, review_required=False, last_revision_at=T2, verdicts=[]) == "settled"


def test_review_verdicts_apply_to_their_own_tree_and_later_ones_win():
    assert after_pass(T1, A, review_required=True, last_revision_at=None, verdicts=[]) == "review"
    assert after_pass(T1, A, review_required=True, last_revision_at=None, verdicts=[(T2, "approve", B)]) == "review"
    assert after_pass(T2, A, review_required=True, last_revision_at=None, verdicts=[(T1, "approve", A)]) == "review"
    assert after_pass(T1, A, review_required=True, last_revision_at=None,
                      verdicts=[(T2, "approve", A), (T3, "reject", A)]) == "implement"
    assert after_pass(T1, A, review_required=True, last_revision_at=None,
                      verdicts=[(T2, "reject", A), (T3, "approve", A)]) == "settled"


# -- the QA failure limit (SPEC §7 step 7) ----------------------------------------------------------------

def test_failures_below_the_limit_are_counted():
    assert qa_limit(0, 1, False, limit=2, corrections=0, correction_due=False).__dict__ == \
        {"qa_failures": 1, "correction_due": False, "park": None}


def test_the_limit_asks_for_a_correction_until_two_were_sent_then_parks():
    for used in range(MAX_CORRECTIONS):
        assert qa_limit(1, 1, False, limit=2, corrections=used, correction_due=False).correction_due
    verdict = qa_limit(1, 1, False, limit=2, corrections=MAX_CORRECTIONS, correction_due=False)
    assert verdict.park == "batch_correction_limit_reached: QA failure limit reached after 2 coordinator corrections"


def test_a_pass_or_a_pending_correction_never_escalates():
    assert qa_limit(1, 1, True, limit=2, corrections=0, correction_due=False).correction_due is False
    assert qa_limit(2, 0, False, limit=2, corrections=0, correction_due=True).correction_due is False


# -- the child lifecycle (SPEC §4) ----------------------------------------------------------------------

def record(*children: Child) -> BatchRecord:
    return BatchRecord(batch_id="demo-20260101T000000Z-abcdef", slug="demo", plan_digest="sha256:" + "0" * 64,
                       base_head=A, branch="imm/demo", coordinator="/c", confirmation_time=T1,
                       budget=Budget(max_children=len(children), qa_failure_limit=2), max_parallel=2,
                       children=list(children), created_at=T1, updated_at=T1)


def lane() -> Lane:
    return Lane(path="/l", branch=BRANCH, base_head=A, run_id="r")


def test_the_happy_path_and_its_fields():
    c = Child(task_id="t")
    lifecycle.enroll(c, lane())
    lifecycle.settle(c, T2, 0)
    lifecycle.commit_lane(c, B, [C])
    lifecycle.integrate(record(c), c, D)
    lifecycle.release(c)
    assert (c.state, c.settled_at, c.lane.attempt, c.lane.lane_commit, c.lane.executor_commits, c.commit) == \
        ("released", T2, 0, B, [C], D)
    record(c)   # a valid record


def test_a_park_skips_dependents_transitively_and_drops_the_correction():
    a = Child(task_id="a", state="enrolled", lane=lane(), correction_due="QA failure limit reached")
    b = Child(task_id="b", blocked_by=["a"])
    c = Child(task_id="c", blocked_by=["b"])
    d = Child(task_id="d")
    rec = record(a, b, c, d)
    assert lifecycle.park(rec, a, "batch_lane_lost") == ["b", "c"]
    assert (a.state, a.reason, a.correction_due) == ("needs_human", "batch_lane_lost", None)
    assert (b.reason, c.reason, d.state) == ("dependency a parked", "dependency a parked", "pending")


def test_stop_batch_parks_every_child_in_flight():
    rec = record(Child(task_id="a", state="enrolled", lane=lane()), Child(task_id="b"))
    assert lifecycle.stop_batch(rec, "failed", "batch_head_lineage_broken: x") == ["a"]
    assert rec.batch_state == "failed" and rec.children[0].state == "needs_human"
    BatchRecord.model_validate(rec.model_dump(by_alias=True))   # §4: a failed batch holds no in-flight child


def test_freeing_a_child_resets_its_counters_and_a_restart_drops_its_lane():
    c = Child(task_id="t", state="needs_human", reason="x", lane=lane(), qa_failures=2, qa_attempts_seen=3)
    lifecycle.free(c, "pending")
    assert (c.state, c.reason, c.lane, c.qa_failures, c.qa_attempts_seen) == ("pending", None, None, 0, 0)
    s = Child(task_id="s", state="needs_human", reason="x", lane=lane())
    lifecycle.free(s, "settled", attempt=1, settled_at=T2)
    assert (s.state, s.lane.attempt, s.settled_at) == ("settled", 1, T2)


@pytest.mark.parametrize("state, move", [
    ("pending", lambda c: lifecycle.integrate(record(c), c, D)),
    ("integrated", lambda c: lifecycle.settle(c, T1, 0)),
    ("released", lifecycle.release),
    ("skipped_blocked", lambda c: lifecycle.enroll(c, lane())),
])
def test_a_move_the_lifecycle_does_not_have_is_refused(state, move):
    with pytest.raises(AssertionError, match="is not a lifecycle move"):
        move(Child(task_id="t", state=state, reason="r" if state == "skipped_blocked" else None,
                   lane=lane() if state in ("integrated", "released") else None,
                   commit=D if state in ("integrated", "released") else None))
