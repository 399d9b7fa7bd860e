"""The tracker inside the tick (issue 6): close each integrated task's issue exactly once, never lying."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import deliver, forge_passed_attempt, lane_path, lanes, write_initiative
from test_tracker import ISSUE, REPO, TOKEN, gh  # noqa: F401  (the fake GitHub fixture)


@pytest.fixture
def batch(repo, gh):
    write_initiative(repo, "demo", [
        {"id": "parser", "scope": ["src/parser"], "extra": [f"issue = {ISSUE}"]},
        {"id": "other", "scope": ["src/other"]},
    ], tracker=REPO)
    git(repo, "config", "lanes.githubApiUrl", gh.url)
    code, report = run(repo, "start", "demo", "--yes", "--max-parallel", "2")
    assert code == 0, report
    return repo


def run(repo, *args, token=TOKEN):
    env = {"GH_TOKEN": token} if token is not None else {}
    code, out, err = lanes(repo, *args, "--json", env=env)
    import json

    run.outputs.append(out + err)
    return code, json.loads(out) if out.strip() else None


run.outputs = []


def deliver_task(repo, task, token=TOKEN):
    code, report = run(repo, "provision", task, token=token)
    lane = Path(lane_path(report, task))
    deliver(lane, {f"src/{task}/x.txt": task})
    assert lanes(lane, "done")[0] == 0
    return lane


def child(report, task):
    return next(c for c in report["children"] if c["task_id"] == task)


def test_closed_exactly_once_after_integration_and_never_again(batch, gh):
    deliver_task(batch, "parser")
    assert gh.requests == []                     # nothing before integration
    code, report = run(batch, "tick")
    assert child(report, "parser")["state"] == "integrated"
    assert report["tracker_observations"] == [{"task_id": "parser", "status": "updated",
                                               "message": report["tracker_observations"][0]["message"]}]
    assert child(report, "parser")["tracker_closed"] is True
    assert gh.state == "closed" and gh.state_reason == "completed"
    markers = [c for c in gh.comments if f"git-lanes:terminal-event={report['batch_id']}/parser" in c["body"]]
    assert len(markers) == 1
    seen = len(gh.requests)
    code, report = run(batch, "tick")
    code, status = run(batch, "status")
    assert len(gh.requests) == seen              # never written (or even read) again
    assert child(status, "parser")["tracker_closed"] is True
    assert "tracker_closed" not in child(status, "other")


def test_rate_limited_close_on_the_completing_tick_is_retried_on_the_next(batch, gh):
    deliver_task(batch, "other")
    deliver_task(batch, "parser")
    gh.fail[("PATCH", "issue")] = (429, {"Retry-After": "1"}, {"message": "slow down"})
    code, report = run(batch, "tick")
    assert report["batch_state"] == "completed"
    assert report["tracker_observations"][0]["status"] == "retryable_failure"
    assert "tracker_closed" not in child(report, "parser")
    del gh.fail[("PATCH", "issue")]
    code, report = run(batch, "tick")            # a terminal batch still retries
    assert report["tracker_observations"][0]["status"] == "updated"
    assert child(report, "parser")["tracker_closed"] is True
    assert len([c for c in gh.comments if "git-lanes:terminal-event" in c["body"]]) == 1


def test_hand_closed_issue_is_ambiguous_and_left_untouched(batch, gh):
    gh.state, gh.state_reason = "closed", "completed"
    deliver_task(batch, "parser")
    code, report = run(batch, "tick")
    assert report["tracker_observations"][0]["status"] == "ambiguous_remote_state"
    assert gh.writes() == []
    assert "tracker_closed" not in child(report, "parser")


def test_bad_token_is_a_permanent_failure(batch, gh):
    gh.fail[("GET", "issue")] = (401, {}, {"message": "Bad credentials"})
    deliver_task(batch, "parser")
    code, report = run(batch, "tick")
    assert report["tracker_observations"][0]["status"] == "permanent_failure"
    assert child(report, "parser")["state"] == "integrated"   # tracker results never change state


def test_no_token_is_permanent_and_sends_nothing(batch, gh):
    deliver_task(batch, "parser", token=None)
    code, report = run(batch, "tick", token=None)
    assert report["tracker_observations"][0] == {"task_id": "parser", "status": "permanent_failure",
                                                 "message": "no GH_TOKEN/GITHUB_TOKEN"}
    assert gh.requests == []


def test_a_parked_child_is_never_closed(batch, gh):
    lane = deliver_task(batch, "parser")
    deliver(lane, {"README": "outside scope\n"})
    assert lanes(lane, "done")[0] == 1        # (v3) done refuses it first ...
    forge_passed_attempt(lane)                # ... so the lane records a pass by hand, and the gate parks it
    code, report = run(batch, "tick")
    assert child(report, "parser")["state"] == "needs_human"
    assert gh.requests == []


def test_the_token_never_appears_in_notes_commits_or_output(batch, gh):
    deliver_task(batch, "parser")
    gh.fail[("PATCH", "issue")] = (500, {}, {"message": f"echo {TOKEN}"})
    run(batch, "tick")
    del gh.fail[("PATCH", "issue")]
    run(batch, "tick")
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=batch,
                             capture_output=True).stdout
    assert TOKEN.encode() not in objects
    assert all(TOKEN not in text for text in run.outputs)
    logs = subprocess.run(["git", "log", "--all", "-p", "--notes=*"], cwd=batch, capture_output=True).stdout
    assert TOKEN.encode() not in logs


def test_integrate_leaves_closing_issues_to_the_next_tick(batch, gh):
    """SPEC §6: `integrate` runs steps 1-9, 12 and 14 of a tick; step 10 (tracker closes) is not one."""
    deliver_task(batch, "parser")
    code, report = run(batch, "integrate", "demo", "parser")
    assert code == 0 and child(report, "parser")["state"] == "integrated", report
    assert gh.requests == [] and "tracker_observations" not in report
    code, report = run(batch, "tick")
    assert report["tracker_observations"][0]["status"] == "updated" and gh.state == "closed"


def test_a_carried_over_childs_issue_is_the_batch_that_integrated_it(batch, gh):
    """A child `start` carries over was integrated, and its issue closed, by the earlier batch: the new
    batch finds that batch's marker (already_current), not a closed issue without its own (ambiguous)."""
    deliver_task(batch, "parser")
    code, first = run(batch, "tick")
    assert child(first, "parser")["tracker_closed"] is True and gh.state == "closed"
    code, report = run(batch, "provision", "other")
    lane = Path(lane_path(report, "other"))
    assert lanes(lane, "done", "--give-up", "-m", "stuck")[0] == 0
    code, report = run(batch, "tick")
    assert report["batch_state"] == "needs_human", report
    assert lanes(batch, "retire", "demo", "--yes")[0] == 0
    assert lanes(batch, "release", "--stale", "demo")[0] == 0
    code, report = run(batch, "start", "demo", "--yes", "--max-parallel", "2")
    assert code == 0 and child(report, "parser")["state"] == "integrated", run.outputs[-1]
    assert report["tracker_observations"] == [{"task_id": "parser", "status": "already_current",
                                               "message": report["tracker_observations"][0]["message"]}]
    assert first["batch_id"] in report["tracker_observations"][0]["message"]
    assert child(report, "parser")["tracker_closed"] is True and len(gh.writes()) == 2   # the first close only
    seen = len(gh.requests)
    run(batch, "tick")
    assert len(gh.requests) == seen
