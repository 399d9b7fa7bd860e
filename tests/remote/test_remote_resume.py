"""`resume` without `--restart` of a parked remote lane (SPEC §14, §17.2): recovered from the pulled refs
when its machine still beats; refused (restart it) while it does not."""

from __future__ import annotations

import time

from conftest import git
from helpers import lanes
from test_remote import joined_and_enrolled, lane_record, ok, world  # noqa: F401 (the fixture)


def states(report: dict) -> dict[str, str]:
    return {c["task_id"]: c["state"] for c in report["children"]}


def test_a_parked_remote_lane_resumes_in_place_once_its_machine_beats_again(world):  # noqa: F811
    from git_lanes.lane.side import heartbeat
    from git_lanes.domain.session import Session

    repo = world["repo"]
    clone, _ = joined_and_enrolled(world)
    run_id = lane_record(clone)["run_id"]
    git(repo, "config", "lanes.remoteRestarts", "0")
    time.sleep(3.2)
    ok(repo, "pull")
    assert states(ok(repo, "tick"))["b"] == "needs_human"
    code, out, err = lanes(repo, "resume", "demo", "--yes")
    assert code == 1 and "batch_resume_unrecoverable" in err and "which sent no heartbeat from" in err, err
    assert "--restart b" in err
    assert heartbeat(Session(cwd=str(clone)), "demo", "b", run_id) is True   # the machine is back
    ok(clone, "push")
    ok(repo, "pull")
    report = ok(repo, "resume", "demo", "--yes")
    b = next(c for c in report["children"] if c["task_id"] == "b")
    assert b["state"] == "enrolled" and b["lane"]["run_id"] == run_id and b["lane"]["remote"], b


test_a_parked_remote_lane_resumes_in_place_once_its_machine_beats_again.remote_timeout = 3  # type: ignore[attr-defined]
