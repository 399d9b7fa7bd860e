"""SPEC §8.8 v4: flaky checks, and fail-fast (§5, §8.3 v4, §17.6). A check that fails and then passes
on the same tree is a flaky pass (no QA failure, no receipt); the gate retries nothing by default;
candidate reruns stop at the first failing check, `done --fail-fast` too; final checks all run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import git
from helpers import git_lanes, lane_path, lanes, lanes_json

PY = sys.executable


def write_plan(repo: Path, checks: dict[str, list[str]], final_checks: list[str] | None = None) -> None:
    """One initiative `demo`: a task per key (scope `src/<task>`), one acceptance item per check."""
    folder = repo / ".lanes" / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    head = [f'title = "t"', "tasks = [" + ", ".join(json.dumps(t) for t in checks) + "]"]
    if final_checks:
        head.append("final_checks = " + json.dumps(final_checks))
    (folder / "initiative.toml").write_text("\n".join(head) + "\n")
    for task, items in checks.items():
        body = [f'task_id = "{task}"', "revision = 1", f'goal = "Make {task}"', f'scope = ["src/{task}"]']
        for n, check in enumerate(items, 1):
            body += ["[[acceptance]]", f'id = "A{n}"', 'text = "works"', f"check = {json.dumps(check)}"]
        (folder / f"{task}.toml").write_text("\n".join(body) + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "plan")


def script(repo: Path, name: str, body: str) -> str:
    """A check script outside every tree; `count` is how many times it ran before (a file beside it)."""
    path = repo.parent / f"{name}.py"
    counter = repo.parent / f"{name}.count"
    path.write_text("import os, pathlib, sys\n"
                    f"c = pathlib.Path({str(counter)!r})\n"
                    "count = int(c.read_text()) if c.exists() else 0\n"
                    "c.write_text(str(count + 1))\n"
                    "scratch = '/lanes/scratch/' in os.getcwd().replace(os.sep, '/')\n" + body + "\n")
    return f"{PY} {path}"


def count(repo: Path, name: str) -> int:
    c = repo.parent / f"{name}.count"
    return int(c.read_text()) if c.exists() else 0


def provision(repo: Path, task: str) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    lane = Path(lane_path(report, task))
    (lane / "src" / task).mkdir(parents=True, exist_ok=True)
    (lane / "src" / task / "x").write_text(task)
    return lane


def done(lane: Path, *args: str) -> tuple[int, dict, str]:
    code, out, err = lanes(lane, "done", "--json", *args)
    return code, json.loads(out), err


def child(report: dict, task: str) -> dict:
    return next(c for c in report["children"] if c["task_id"] == task)


def test_a_check_that_fails_once_then_passes_lands_flaky_with_no_qa_failure(repo):
    flaky = script(repo, "f", "print('run', count + 1); sys.exit(1 if count == 0 else 0)")
    write_plan(repo, {"a": [flaky]})
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    code, doc, _ = done(lane)
    assert code == 0 and doc["passed"] is True
    r = doc["results"][0]
    assert r["flaky"] is True and r["passed"] is True
    assert [(a["exit_code"], a["output_tail"].strip()) for a in r["attempts"]] == [(1, "run 1"), (0, "run 2")]
    assert count(repo, "f") == 2
    code, listed = lanes_json(repo, "receipts")
    assert listed["receipts"] == []                       # a flaky pass writes no receipt
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    assert child(report, "a")["qa_failures"] == 0
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "a")["commit"]))
    assert note["flaky"] == ["A1"] and note["attempt"]["results"][0]["flaky"] is True
    out = lanes(repo, "show", "a")[1]
    assert "(flaky: A1)" in out
    assert "flaky: a:A1 (1x" in lanes(repo, "status")[1]
    code, flakes = lanes_json(repo, "flakes")
    assert code == 0 and [(f["task"], f["check"], f["count"]) for f in flakes["flakes"]] == [("a", "A1", 1)]
    assert "a:A1" in git_lanes(repo, "flakes").stdout


def test_the_gate_retries_nothing_by_default(repo):
    # passes in the lane; on the candidate it fails its first run there and would pass the next
    racy = script(repo, "r", "sys.exit(1 if scratch and count == 1 else 0)")
    write_plan(repo, {"a": [racy]})
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    assert done(provision(repo, "a"))[0] == 0
    report = lanes_json(repo, "tick")[1]
    a = child(report, "a")
    assert a["state"] == "needs_human" and a["reason"].startswith("batch_integration_check_failed: a:A1")
    assert count(repo, "r") == 2


def test_lanes_gate_flake_retries_lets_a_racy_check_land_flagged(repo):
    racy = script(repo, "r", "sys.exit(1 if scratch and count == 1 else 0)")
    write_plan(repo, {"a": [racy]})
    git(repo, "config", "lanes.gateFlakeRetries", "1")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    assert done(provision(repo, "a"))[0] == 0
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "a")["commit"]))
    assert note["flaky"] == ["a:A1"] and note["rerun"][0]["attempts"][0]["exit_code"] == 1
    assert count(repo, "r") == 3


def test_a_missing_program_and_flake_retries_zero_are_not_retried(repo):
    always = script(repo, "x", "sys.exit(2)")
    write_plan(repo, {"a": [always, "no-such-program-here"]})
    git(repo, "config", "lanes.flakeRetries", "0")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    code, doc, err = done(lane)
    assert code == 1 and count(repo, "x") == 1
    assert [r["exit_code"] for r in doc["results"]] == [2, 127]
    assert all("attempts" not in r and "flaky" not in r for r in doc["results"])
    git(repo, "config", "lanes.flakeRetries", "2")
    done(lane, "--retry")   # the same tree (SPEC §17.6: nothing_changed)
    assert count(repo, "x") == 4                           # a real failure: 1 + 2 retries, still failed


def test_done_fail_fast_stops_at_the_first_failing_check(repo):
    second = script(repo, "s", "sys.exit(0)")
    write_plan(repo, {"a": [f"{PY} -c \"import sys; sys.exit(1)\"", second]})
    git(repo, "config", "lanes.flakeRetries", "0")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    code, doc, err = done(lane, "--fail-fast")
    assert code == 1 and [r["id"] for r in doc["results"]] == ["A1"] and count(repo, "s") == 0
    assert "qa_failed: A1" in err
    code, doc, _ = done(lane, "--retry")                         # default: every check runs
    assert [r["id"] for r in doc["results"]] == ["A1", "A2"] and count(repo, "s") == 1
    git(repo, "config", "lanes.failFast", "true")
    code, doc, _ = done(lane, "--retry")
    assert [r["id"] for r in doc["results"]] == ["A1"] and count(repo, "s") == 1


def test_a_candidate_rerun_stops_at_the_first_failing_check_and_final_checks_all_run(repo):
    fails_on_candidate = script(repo, "c1", "sys.exit(1 if scratch else 0)")
    after = script(repo, "c2", "sys.exit(0)")
    write_plan(repo, {"a": [fails_on_candidate, after]})
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    assert done(provision(repo, "a"))[0] == 0
    assert count(repo, "c2") == 1
    report = lanes_json(repo, "tick")[1]
    a = child(report, "a")
    assert a["state"] == "needs_human" and a["reason"].startswith("batch_integration_check_failed: a:A1 failed")
    assert count(repo, "c2") == 1                           # A2 never ran on the candidate
    code, shown = lanes_json(repo, "show", "a")
    assert [r["id"] for r in shown["child"]["gate_results"]] == ["a:A1"]


def test_final_checks_all_run_and_a_flaky_one_is_retried(repo):
    first = script(repo, "f1", "sys.exit(1)")
    flaky = script(repo, "f2", "sys.exit(1 if count == 0 else 0)")
    write_plan(repo, {"a": [f"{PY} -c \"pass\""]}, final_checks=[first, flaky])
    git(repo, "config", "lanes.flakeRetries", "1")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    assert done(provision(repo, "a"))[0] == 0
    report = lanes_json(repo, "tick")[1]
    fv = report["final_verification"]
    assert report["batch_state"] == "completed" and fv["passed"] is False
    assert [(r["id"], r["passed"], r.get("flaky", False)) for r in fv["results"]] == [
        ("final-1", False, False), ("final-2", True, True)]
    assert count(repo, "f1") == 2 and count(repo, "f2") == 2


def test_runs_progress_names_each_flaky_check():
    from git_lanes.run.progress import flaky_note

    assert flaky_note("a", [{"id": "A1", "flaky": True}, {"id": "A2"}]) == "; flaky: a:A1"
    assert flaky_note("a", [{"id": "A1"}]) == ""


def test_retriable_is_a_nonzero_exit_other_than_127():
    from git_lanes.domain.checkrun import retriable
    from git_lanes.domain.checks import CheckResult

    def r(code, sig=None):
        return CheckResult("x", "x", code, sig, code == 0, 1, "")
    assert [retriable(r(c)) for c in (0, 1, 2, 127)] == [False, True, True, False]
    assert retriable(r(None, "SIGKILL")) is False
