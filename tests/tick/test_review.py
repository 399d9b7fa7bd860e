"""Reviews (SPEC §5): `review = true` waits for a verdict; other lanes keep moving; a rejection goes
to the inbox, is not a QA failure, and sends the lane back to implement."""

from __future__ import annotations

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, states, world, write_plan

REVIEWED = intent("rev", scope=["src/rev"], extra=["review = true"],
                  acceptance=[("R1", "out exists", exists("src/rev/out.txt"))])
OTHER = intent("other", scope=["src/other"], acceptance=[("O1", "out exists", exists("src/other/out.txt"))])


def setup(repo):
    write_plan(repo, "demo", {"rev": REVIEWED, "other": OTHER})
    report = start(repo, "demo", "--max-parallel", "2", "--qa-failure-limit", "1")
    return report, provision(repo, "rev"), provision(repo, "other")


def obligation(report, task):
    return child_of(report, task).get("next_obligation")


def test_review_waits_others_move_reject_goes_to_inbox_then_approve_integrates(repo):
    _, lr, lo = setup(repo)
    assert done(lr, {"src/rev/out.txt": "v1\n"})["passed"] is True
    assert done(lo, {"src/other/out.txt": "o\n"})["passed"] is True
    report = ok(repo, "tick")
    assert report["reason"] == "review reservation rev open"
    assert states(report) == {"rev": "enrolled", "other": "integrated"}     # the other lane moved on
    assert obligation(report, "rev") == "review" and report["batch_state"] == "running"
    head = git(repo, "rev-parse", "HEAD").strip()

    # a rejection: its text goes to the inbox; not a QA failure (the limit is 1: no correction due)
    report = ok(repo, "review", "rev", "--reject", "-m", "name the function parse, not p")
    rev = child_of(report, "rev")
    assert rev["state"] == "enrolled" and rev["next_obligation"] == "implement"
    assert rev["qa_failures"] == 0 and rev["correction_due"] is None
    assert [(i["kind"], i["text"]) for i in report["interventions"]] == [("review", "name the function parse, not p")]
    [verdict] = report["reviews"]
    assert verdict["verdict"] == "reject" and verdict["task_id"] == "rev" and verdict["tree"]
    assert git(repo, "rev-parse", "HEAD").strip() == head
    code, inbox, _ = cli(lr, "inbox")
    assert [(i["kind"], i["text"], i["read"]) for i in inbox] == [("review", "name the function parse, not p", False)]
    handoff = next(h for h in report["handoffs"] if h["task_id"] == "rev")
    assert handoff["role"] == "executor" and handoff["next_obligation"] == "implement"

    # a plain tick does not reopen the rejected attempt
    report = ok(repo, "tick")
    assert obligation(report, "rev") == "implement" and report["reason"] != "review reservation rev open"

    # the next done is a new attempt that needs a new verdict
    assert done(lr, {"src/rev/out.txt": "v2\n"})["passed"] is True
    report = ok(repo, "tick")
    assert obligation(report, "rev") == "review" and report["reason"] == "review reservation rev open"
    report = ok(repo, "review", "rev", "--approve")
    assert states(report) == {"rev": "integrated", "other": "integrated"}
    assert report["batch_state"] == "completed"
    assert [r["verdict"] for r in report["reviews"]] == ["reject", "approve"]
    commit = child_of(report, "rev")["commit"]
    assert git(repo, "show", f"{commit}:src/rev/out.txt") == "v2\n"


def test_a_verdict_without_an_open_review_is_refused_and_writes_nothing(repo):
    _, lr, lo = setup(repo)
    before = world(repo, lr, lo)
    for args in (("rev", "--approve"), ("other", "--reject", "-m", "no")):
        code, report, err = cli(repo, "review", *args)
        assert code == 1, err
        assert report["batch_state"] == "rejected"
        assert report["reason"] == f"batch_review_not_open: {args[0]} has no open review"
        assert err.strip() == f"error: batch_review_not_open: {args[0]} has no open review"
        assert world(repo, lr, lo) == before
    code, report, err = cli(repo, "review", "ghost", "--approve")   # (v3) not a task of the batch: usage
    assert code == 2 and report is None and "ghost" in err
    code, report, err = cli(repo, "review", "rev")
    assert code == 2 and report is None and "--approve or --reject" in err
    assert world(repo, lr, lo) == before


def test_a_rejection_without_text_still_tells_the_lane(repo):
    _, lr, lo = setup(repo)
    done(lr, {"src/rev/out.txt": "v1\n"})
    ok(repo, "tick")
    report = ok(repo, "review", "rev", "--reject")
    [item] = report["interventions"]
    assert item["kind"] == "review" and item["text"].strip()
    assert report["reviews"][0]["text"] is None
