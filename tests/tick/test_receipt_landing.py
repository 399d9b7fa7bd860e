"""SPEC §8.7, §8.9 v4: a candidate for whose every rerun a usable passing receipt stands is judged and
landed in the tick that builds it — nothing would run, so no thread and no scratch worktree — in
order, one write per landing, with the same evidence; a candidate with one rerun not covered is
verified in the scratch worktree as before, and a lane receipt stands only with lanes.gateTrustsLane.
`git lanes run` takes in what happened together in one tick and releases every integrated lane."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import git
from helpers import lanes, lanes_json, write_initiative
from test_receipts import child, counter, done, provision, put, runs


def tasks_with_inputs(repo: Path, names: list[str], check: str) -> None:
    """Disjoint tasks `src/<t>/`, each check declaring its own scope as its inputs."""
    write_initiative(repo, "demo", [{"id": t, "scope": [f"src/{t}"], "check": f"{check} {t}",
                                     "extra": []} for t in names])
    for t in names:
        path = repo / ".lanes" / "demo" / f"{t}.toml"
        path.write_text(path.read_text() + f"inputs = [\"src/{t}\"]\n")
    git(repo, "commit", "-qam", "inputs")


def log_summaries(repo: Path) -> list[str]:
    code, entries = lanes_json(repo, "log", "demo")
    assert code == 0
    return [e["summary"] for e in entries]


def scratch_pool(repo: Path) -> Path:
    return repo / ".git" / "lanes" / "scratch"


def two_lanes_done(repo: Path) -> dict:
    """Tasks a and b with their own scope as inputs, both lanes done (passed); the tick's report."""
    tasks_with_inputs(repo, ["a", "b"], counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    for t in ("a", "b"):
        lane = provision(repo, t)
        put(lane, {f"src/{t}/x": t})
        assert done(lane)["passed"]
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    return report


def test_a_candidate_whose_reruns_all_have_receipts_lands_in_the_tick_that_builds_it(repo):
    git(repo, "config", "lanes.gateTrustsLane", "true")
    report = two_lanes_done(repo)
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane", "lane"]   # nothing ran again
    assert not scratch_pool(repo).exists()    # no scratch worktree was needed for look-ups
    summaries = log_summaries(repo)
    # judged under the slug's lock, then landed in order: one write per landing
    assert sum("integrated" in s for s in summaries) == 2
    assert any("passed b (receipts)" in s for s in summaries)
    commits = [child(report, t)["commit"] for t in ("a", "b")]
    assert git(repo, "rev-list", "--count", f"{commits[0]}..{commits[1]}").strip() == "1"   # stacked, in order
    for t in ("a", "b"):
        note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, t)["commit"]))
        assert note["rerun"] and all(r["cached"] is True and len(r["receipt"]) == 64 for r in note["rerun"])
    # b's candidate holds a's check too (it stands before it): a's inputs did not change, a look-up
    b_note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "b")["commit"]))
    assert {r["id"] for r in b_note["rerun"]} == {"b:A1", "a:A1"}


def test_without_gate_trusts_lane_the_candidates_run_in_scratch_and_nothing_lands_on_a_lane_receipt(repo):
    report = two_lanes_done(repo)
    places = [r.split("|")[:2] for r in runs(repo, "c")]
    assert places.count(["scratch", "a"]) == 1 and places.count(["scratch", "b"]) == 1   # each own check once
    assert not any("(receipts)" in s for s in log_summaries(repo))
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "a")["commit"]))
    assert note["rerun"][0].get("cached") is not True


def test_a_failing_check_is_never_a_look_up_even_with_gate_trusts_lane(repo):
    git(repo, "config", "lanes.gateTrustsLane", "true")
    check = counter(repo, "c", fail_in_scratch=True)
    tasks_with_inputs(repo, ["a"], check)
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/a/x": "1"})
    assert done(lane)["passed"]
    # another input than the lane's: the lane receipt does not hold, the check runs (and fails) in scratch
    git(repo, "config", "lanes.receiptEnv", "SOME_VAR")
    report = lanes_json(repo, "tick")[1]
    assert child(report, "a")["state"] == "needs_human"
    assert "batch_integration_check_failed" in child(report, "a")["reason"]
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane", "scratch"]


EXECUTOR = "#!/bin/sh\nset -e\nmkdir -p \"src/$GIT_LANES_TASK\"\necho x > \"src/$GIT_LANES_TASK/x\"\ngit lanes done >/dev/null\n"


def test_run_lands_lanes_that_end_together_and_releases_every_lane(repo):
    git(repo, "config", "lanes.gateTrustsLane", "true")
    names = [f"t{i}" for i in range(4)]
    tasks_with_inputs(repo, names, counter(repo, "c"))
    script = repo.parent / "executor.sh"
    script.write_text(EXECUTOR)
    script.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "git_lanes", "run", "demo", "--executor", shlex.quote(str(script)),
                           "--max-parallel", "4", "--yes", "--json"], cwd=repo, capture_output=True, text=True,
                          env=dict(os.environ), timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["batch_state"] == "completed"
    assert sorted(c["state"] for c in report["children"]) == ["released"] * 4
    listed = git(repo, "worktree", "list", "--porcelain")
    assert not any(f"/demo/{t}\n" in listed for t in names), listed   # no lane left behind
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane"] * 4
