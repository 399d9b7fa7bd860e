"""`git lanes integrate` and `git lanes verify` as Git subcommands (issue 9)."""

from __future__ import annotations

from pathlib import Path

from conftest import git
from helpers import all_refs, deliver, forge_passed_attempt, git_lanes, lane_path, lanes, lanes_json, write_initiative

FLAG_ABSENT = "python3 -c \"import pathlib,sys; sys.exit(1 if pathlib.Path('BROKEN').exists() else 0)\""


def provision(repo, task):
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


def finish(lane, files):
    deliver(lane, files)
    code, out, err = lanes(lane, "done")
    assert code == 0, out + err


def child(report, task):
    return next(c for c in report["children"] if c["task_id"] == task)


def test_integrate_lands_settled_lanes_and_schedules_nothing(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]},
                                    {"id": "c", "scope": ["src/c"]}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(la, {"src/a/x": "a"})
    finish(lb, {"src/b/x": "b"})
    lane_branches = git(repo, "branch", "--list", "imm-lane/*")
    code, report = lanes_json(repo, "integrate", "demo")
    assert code == 0
    assert [child(report, t)["state"] for t in "abc"] == ["integrated", "integrated", "pending"]
    assert not [h for h in report["handoffs"] if h.get("action") == "provision"]
    assert git(repo, "branch", "--list", "imm-lane/*") == lane_branches   # no lane provisioned
    assert len(report["commits"]) == 2


def test_integrate_named_children_only(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(la, {"src/a/x": "a"})
    finish(lb, {"src/b/x": "b"})
    code, report = lanes_json(repo, "integrate", "demo", "b")
    assert child(report, "b")["state"] == "integrated" and child(report, "a")["state"] == "enrolled"


def test_integrate_refuses_with_the_tick_reason_codes(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]},
                                    {"id": "c", "scope": ["src/c"], "check": FLAG_ABSENT}])
    lanes(repo, "start", "demo", "--yes", "--max-parallel", "3")
    la, lb, lc = provision(repo, "a"), provision(repo, "b"), provision(repo, "c")
    deliver(la, {"src/a/x": "a", "README": "outside\n"})         # scope: `done` refuses it (v3) ...
    assert lanes(la, "done")[0] == 1
    forge_passed_attempt(la)                                     # ... a lane recording a pass anyway
    git(repo, "commit", "-q", "--allow-empty", "-m", "user commit")  # adopted fast-forward
    deliver(repo, {"src/b/x": "user"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "user writes b's file")
    finish(lb, {"src/b/x": "lane"})                            # conflict
    finish(lc, {"src/c/x": "c", })
    deliver(repo, {"BROKEN": "1"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "user breaks c's check")    # check fails on the candidate
    code, report = lanes_json(repo, "integrate")
    assert child(report, "a")["reason"] == "dirty_outside_scope: README"
    assert child(report, "b")["reason"].startswith("batch_integration_conflict:")
    assert child(report, "c")["reason"].startswith("batch_integration_check_failed: c:A1 failed on candidate")
    assert report["batch_state"] == "needs_human"


def test_integrate_fails_a_rewound_batch_like_a_tick(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(la, {"src/a/x": "a"})
    code, report = lanes_json(repo, "integrate", "demo", "a")
    finish(lb, {"src/b/x": "b"})
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    code, report = lanes_json(repo, "integrate")
    assert report["batch_state"] == "failed"
    assert report["reason"].startswith("batch_head_lineage_broken: ")
    assert child(report, "b")["state"] == "needs_human"


def test_verify_reports_a_later_user_breakage_and_writes_nothing(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": FLAG_ABSENT}],
                     final_checks=["python3 -c pass", "python3 src/a/check.py"])
    lanes(repo, "start", "demo", "--yes")
    la = provision(repo, "a")
    finish(la, {"src/a/check.py": "import pathlib, sys\nsys.exit(1 if pathlib.Path('BROKEN').exists() else 0)\n"})
    code, report = lanes_json(repo, "tick")
    assert report["batch_state"] == "completed" and report["final_verification"]["passed"]
    commit = report["commits"][0]
    code, doc = lanes_json(repo, "verify")
    assert code == 0 and doc["passed"] and doc["head"] == commit
    deliver(repo, {"BROKEN": "yes"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a user breaks it later")
    before = all_refs(repo)
    proc = git_lanes(repo, "verify", "--json", check=False)
    assert proc.returncode == 1
    import json

    doc = json.loads(proc.stdout)
    assert doc["passed"] is False and doc["head"] == git(repo, "rev-parse", "HEAD").strip()
    assert [r["passed"] for r in doc["results"]] == [True, False]
    failing = doc["results"][1]["id"]
    assert proc.stderr == f"error: verification_failed: {failing} at {doc['head']}\n"   # SPEC §16: exit 1 says why
    code, out, err = lanes(repo, "verify")
    assert code == 1 and err.splitlines()[-1] == f"error: verification_failed: {failing} at {doc['head']}"
    assert all_refs(repo) == before
    # --commit runs the acceptance checks of the task that commit integrated, on that commit
    code, doc = lanes_json(repo, "verify", "--commit", commit)
    assert code == 0 and doc["head"] == commit and doc["results"][0]["id"] == "a:A1"
    code, out, err = lanes(repo, "verify", "--commit", "HEAD")
    assert code == 2 and "is not a commit that integrated a task" in err
    assert all_refs(repo) == before
