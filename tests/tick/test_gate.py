"""SPEC §8.3, §8.6 v3: integration never blocks the batch; one run per distinct check; the
scratch pool outlives a batch and keeps what setup built; failed gate results stay in the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import check_file, deliver, lane_path, lanes, lanes_json, write_initiative

PY = sys.executable


def provision(repo, task) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


def finish(lane: Path, files: dict[str, str]) -> None:
    deliver(lane, files)
    code, out, err = lanes(lane, "done")
    assert code == 0, out + err


def child(report, task):
    return next(c for c in report["children"] if c["task_id"] == task)


def counter_check(repo: Path, name: str) -> str:
    """A check that appends one line (its GIT_LANES_TASK / GIT_LANES_TASKS) to a log outside the tree."""
    log = repo.parent / f"{name}.log"
    script = repo.parent / f"{name}.py"
    script.write_text("import os, pathlib\n"
                      f"with open({str(log)!r}, 'a') as f:\n"
                      "    f.write(os.environ.get('GIT_LANES_TASK', '') + '|' + os.environ.get('GIT_LANES_TASKS', '')"
                      " + '\\n')\n")
    return f"{PY} {script}"


def runs(repo: Path, name: str) -> list[str]:
    log = repo.parent / f"{name}.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_check_several_tasks_share_runs_once_per_candidate(repo):
    shared = counter_check(repo, "shared")
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": shared},
                                    {"id": "b", "scope": ["src/b"], "check": shared}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    finish(la, {"src/a/x": "a"})
    finish(lb, {"src/b/x": "b"})
    lane_runs = len(runs(repo, "shared"))
    code, report = lanes_json(repo, "tick")
    assert code == 0 and [child(report, t)["state"] for t in "ab"] == ["integrated", "integrated"]
    reruns = runs(repo, "shared")[lane_runs:]
    # a's candidate runs a's check once; b's candidate (a integrated since b's base) runs the shared
    # command once for both tasks, with GIT_LANES_TASK empty and GIT_LANES_TASKS in plan order (b's
    # candidate stands on a's in a window of 2, SPEC §8.9: both verified at once, in either order)
    assert sorted(reruns) == sorted(["a|", "|a b"])
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "b")["commit"]))
    assert sorted(r["id"] for r in note["rerun"]) == ["a:A1", "b:A1"]


def test_the_scratch_pool_outlives_the_batch_and_keeps_what_setup_built(repo):
    (repo / ".gitignore").write_text("deps/\n")
    setup = repo.parent / "setup.py"
    setup.write_text("import os, pathlib\n"
                     "pathlib.Path('deps').mkdir(exist_ok=True)\n"
                     "pathlib.Path('deps/lib').write_text('x')\n"
                     f"open({str(repo.parent / 'setup.log')!r}, 'a').write(os.getcwd() + '\\n')\n")
    git(repo, "config", "lanes.setupCommand", f"{PY} {setup}")
    needs_deps = f"{PY} -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('deps/lib').exists() else 1)\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": needs_deps},
                                    {"id": "b", "scope": ["src/b"], "check": needs_deps}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    assert child(lanes_json(repo, "tick")[1], "a")["state"] == "integrated"
    finish(provision(repo, "b"), {"src/b/x": "b"})
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report["reason"]
    scratch = repo / ".git" / "lanes" / "scratch" / "0"
    assert (scratch / "deps" / "lib").exists()      # lanes.keep was never set: setup's own output is kept
    in_scratch = [line for line in (repo.parent / "setup.log").read_text().splitlines()
                  if os.path.realpath(line) == os.path.realpath(scratch)]
    assert len(in_scratch) == 1                      # set up once, when the worktree was created
    worktrees = git(repo, "worktree", "list", "--porcelain")
    assert str(scratch) in worktrees                 # a cache kept between batches
    # moved (not made) for b: its index is a split index, one shared index beside it
    assert git(scratch, "rev-parse", "--shared-index-path").strip()
    admin = git(scratch, "rev-parse", "--absolute-git-dir").strip()
    assert len([n for n in os.listdir(admin) if n.startswith("sharedindex.")]) == 1
    assert git(scratch, "status", "--porcelain") == ""


def test_lanes_copy_reaches_the_scratch_worktree_is_kept_there_and_made_again_when_gone(repo):
    """SPEC §6 v3: `lanes.copy` applies to the scratch worktree too (a check that needs the copied
    `.venv/` or `.env` passes on the candidate as it did in the lane), where the copies are kept as if
    listed in `lanes.keep`; a copy a check removed is made again before the next rerun."""
    (repo / ".gitignore").write_text(".venv/\n.env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore the local files")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "tool").write_text("tool\n")
    os.symlink("tool", repo / ".venv" / "bin" / "tool3")
    (repo / ".env").write_text("TOKEN=1\n")
    for pattern in (".venv/", ".env"):
        git(repo, "config", "--add", "lanes.copy", pattern)
    needs = (f"{PY} -c \"import os,pathlib,sys; sys.exit(0 if pathlib.Path('.venv/bin/tool').exists() "
             "and os.path.islink('.venv/bin/tool3') and pathlib.Path('.env').read_text() == 'TOKEN=1\\n' else 1)\"")
    removes = f"{PY} -c \"import shutil; shutil.rmtree('.venv')\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": needs},
                                    {"id": "b", "scope": ["src/b"], "check": needs},
                                    {"id": "c", "scope": ["src/c"], "check": needs}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    scratch = repo / ".git" / "lanes" / "scratch" / "0"
    for task in "abc":
        lane = provision(repo, task)
        assert (lane / ".venv" / "bin" / "tool").exists()       # the lane's own copy
        finish(lane, {f"src/{task}/x": task})
        report = lanes_json(repo, "tick")[1]
        assert child(report, task)["state"] == "integrated", child(report, task)["reason"]
        assert (scratch / ".venv" / "bin" / "tool").exists() and (scratch / ".env").exists()
        assert os.path.islink(scratch / ".venv" / "bin" / "tool3")
        assert git(scratch, "status", "--porcelain", "--ignored=no") == ""   # ignored: never in a candidate
        if task == "a":
            subprocess.run(removes, shell=True, cwd=scratch, check=True)   # as a check of the rerun could
    assert report["batch_state"] == "completed", report["reason"]


def test_the_scratch_copies_come_from_the_coordinator_and_follow_a_lanes_copy_set_later(repo):
    """The scratch worktree's copies are the coordinator's (not those of the worktree a tick runs in),
    and a `lanes.copy` set after the pool exists reaches it at the next rerun."""
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore .env")
    (repo / ".env").write_text("COORD\n")
    needs = f"{PY} -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('.env').read_text() == 'COORD\\n' else 1)\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"], "check": needs}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    assert child(lanes_json(repo, "tick")[1], "a")["state"] == "integrated"    # the pool exists, no copies
    git(repo, "config", "lanes.copy", ".env")
    lane = provision(repo, "b")
    finish(lane, {"src/b/x": "b"})
    (lane / ".env").write_text("LANE\n")      # the lane's own copy changed after its done
    code, report = lanes_json(lane, "tick")   # a tick run from inside the lane
    assert code == 0 and child(report, "b")["state"] == "integrated", child(report, "b")["reason"]
    assert (repo / ".git" / "lanes" / "scratch" / "0" / ".env").read_text() == "COORD\n"


def test_a_failing_setup_in_the_scratch_parks_the_child(repo):
    """...and leaves no half set-up worktree: once setup is fixed, the next verification sets a
    scratch worktree up again (the check needs what setup makes, and no lanes.keep names it)."""
    (repo / ".gitignore").write_text("deps/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore deps")
    needs_deps = f"{PY} -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('deps/ok').exists() else 1)\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": needs_deps}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    good = repo.parent / "good.py"
    good.write_text("import pathlib\npathlib.Path('deps').mkdir()\npathlib.Path('deps/ok').write_text('ok')\n")
    git(repo, "config", "lanes.setupCommand", f"{PY} {good}")   # the lane is set up fine
    lane = provision(repo, "a")
    finish(lane, {"src/a/x": "a"})
    fail = repo.parent / "fail.py"
    fail.write_text("import sys\nprint('resolving deps')\nprint('npm ERR! missing: bundt')\nsys.exit(3)\n")
    git(repo, "config", "lanes.setupCommand", f"{PY} {fail}")
    code, report = lanes_json(repo, "tick")
    a = child(report, "a")
    assert a["state"] == "needs_human"
    quoted, _, log = a["reason"].partition("; whole output: ")   # SPEC §17.1 v4: the cause first, then the last
    assert quoted == "batch_integration_setup_failed: exit 3: npm ERR! missing: bundt | resolving deps"
    assert log.endswith("/scratch-setup-1.log")
    assert git(repo, "rev-parse", "imm/demo") == git(repo, "rev-parse", "main")
    assert "/lanes/scratch/" not in git(repo, "worktree", "list", "--porcelain")   # not kept half set up
    git(repo, "config", "lanes.setupCommand", f"{PY} {good}")
    code, report = lanes_json(repo, "resume", "demo", "--yes")
    assert code == 0 and child(report, "a")["state"] == "integrated", child(report, "a")["reason"]


def test_failing_gate_results_stay_in_the_record_and_show_prints_them(repo):
    flag = repo.parent / "gate-fails"
    flag.write_text("")
    check = f"{PY} -c \"import os,sys; print('gate said no'); sys.exit(1 if os.path.exists({str(flag)!r}) else 0)\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    flag.unlink()
    assert lanes(lane, "done")[0] == 0
    flag.write_text("")
    report = lanes_json(repo, "tick")[1]
    a = child(report, "a")
    assert a["state"] == "needs_human" and a["reason"].startswith("batch_integration_check_failed: a:A1 failed")
    [result] = a["gate_results"]
    assert (result["id"], result["passed"], result["exit_code"]) == ("a:A1", False, 1)
    assert "gate said no" in result["output_tail"]
    shown = lanes_json(repo, "show", "a")[1]
    assert shown["child"]["gate_results"][0]["output_tail"] == result["output_tail"]
    # resumed (its lane still delivers a passed attempt): no longer parked, so no gate results
    flag.unlink()
    code, resumed = lanes_json(repo, "resume", "demo", "--yes")
    assert code == 0 and "gate_results" not in child(resumed, "a") and child(resumed, "a")["state"] == "integrated"


def test_evidence_notes_keep_each_result_as_recorded(repo):
    """SPEC §8.5, §2.1: the note holds the passed attempt's results and the reruns, result items whose
    `output_tail` is the last 4 KiB of the output, as the lane record keeps them."""
    noisy = f"{PY} -c \"[print(i) for i in range(2000)]\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": noisy}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    report = lanes_json(repo, "tick")[1]
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "a")["commit"]))
    lane_record = lanes_json(repo, "show", "a")[1]["lane_record"]
    recorded = lane_record["qa_attempts"][0]["results"][0]["output_tail"]
    assert note["attempt"]["results"] == lane_record["qa_attempts"][0]["results"]
    assert note["rerun"][0]["output_tail"] == recorded
    assert recorded.endswith("1998\n1999\n") and 4000 <= len(recorded.encode()) <= 4096


def test_a_tick_while_a_candidate_is_verified_admits_and_reports_it(repo):
    gate = repo.parent / "gate-open"
    waiter = repo.parent / "slow.py"   # passes at once in the lane; in the scratch it waits for the gate
    waiter.write_text("import os, time\n"
                      "while 'scratch' in os.getcwd() and not os.path.exists(%r):\n"
                      "    time.sleep(0.05)\n" % str(gate))
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": f"{PY} {waiter}"},
                                    {"id": "b", "scope": ["src/b"]}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    verifier = subprocess.Popen(["git", "lanes", "tick", "--json"], cwd=repo, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        status: dict = {}
        while time.monotonic() < deadline and not status.get("candidate"):
            time.sleep(0.1)
            status = lanes_json(repo, "status")[1]
        assert status["candidate"]["task_id"] == "a"
        assert child(status, "a")["state"] == "lane_committed"
        # meanwhile the batch goes on: b is provisioned and admitted by a tick that skips step 9
        code, report = lanes_json(repo, "provision", "b")
        assert code == 0 and child(report, "b")["state"] == "enrolled"
        assert report["candidate"]["task_id"] == "a" and child(report, "a")["state"] == "lane_committed"
    finally:
        gate.write_text("")
        out, err = verifier.communicate(timeout=60)
    assert verifier.returncode == 0, err
    assert child(json.loads(out), "a")["state"] == "integrated"
    assert "candidate" not in lanes_json(repo, "status")[1]


def test_a_verifier_killed_mid_rerun_leaves_a_candidate_the_next_tick_lands(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check_file("src/a/x")}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    for point in ("candidate-recorded", "candidate-verified"):
        env = dict(os.environ, GIT_LANES_CRASH_AT=point)
        proc = subprocess.run(["git", "lanes", "tick"], cwd=repo, env=env, capture_output=True, text=True)
        assert proc.returncode != 0
        status = lanes_json(repo, "status")[1]
        assert status["candidate"]["task_id"] == "a" and child(status, "a")["state"] == "lane_committed"
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed"
    assert len(git(repo, "rev-list", "main..imm/demo").split()) == 1


def verified_candidate(repo, point: str = "candidate-verified") -> dict:
    """One task delivered, its candidate verified, the tick killed before the fast-forward (at
    `fast-forward-marked`: right before the merge, which a test then plays up to where it died)."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check_file("src/a/x")}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    env = dict(os.environ, GIT_LANES_CRASH_AT=point)
    assert subprocess.run(["git", "lanes", "tick"], cwd=repo, env=env, capture_output=True).returncode != 0
    cand = lanes_json(repo, "status")[1]["candidate"]
    return cand


def test_a_fast_forward_killed_after_the_index_write_is_finished_by_the_next_tick(repo):
    """`merge --ff-only` writes the coordinator's index, then moves the branch: a kill between the
    two leaves the verified candidate staged on the old head (found by the kill soak)."""
    cand = verified_candidate(repo, "fast-forward-marked")
    git(repo, "read-tree", "-m", "-u", cand["head"], cand["commit"])   # what the merge did before it died
    assert git(repo, "status", "--porcelain").startswith("A  src/a/x")
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["batch_state"] == "completed", report
    assert git(repo, "rev-parse", "imm/demo").strip() == cand["commit"]
    assert git(repo, "status", "--porcelain") == ""
    assert child(report, "a")["state"] == "integrated" and child(report, "a")["commit"] == cand["commit"]


def test_a_fast_forward_killed_while_writing_files_is_put_back_and_redone(repo):
    """Killed while it wrote the files (the index untouched), the merge leaves some of the candidate's
    files in the coordinator, one perhaps torn (empty): no lane's version, so the leak rule would
    refuse for ever. They are copied aside, put back, and the next fast-forward writes them whole."""
    cand = verified_candidate(repo, "fast-forward-marked")
    (repo / "src" / "a").mkdir(parents=True, exist_ok=True)
    (repo / "src" / "a" / "x").write_text("")   # torn: created, not yet written
    code, out, err = lanes(repo, "tick")
    assert code == 0 and "was interrupted while it wrote files" in err, err
    assert git(repo, "rev-parse", "imm/demo").strip() == cand["commit"]
    assert (repo / "src" / "a" / "x").read_text() == "a"
    assert git(repo, "status", "--porcelain") == ""
    report = lanes_json(repo, "status")[1]
    assert child(report, "a")["state"] == "integrated" and report["batch_state"] == "completed"
    assert not (repo / ".git" / "lanes" / "locks" / "demo.ff").exists()


def test_a_users_edit_after_a_killed_fast_forward_is_not_taken_for_a_torn_file(repo):
    """The merge died (its mark is there) and the user then wrote a file the candidate adds: not the
    beginning of the candidate's version, so not what a killed checkout leaves. Step 2 judges it (not a
    lane's: refused untouched), and the user's bytes stay where they are (SPEC §9)."""
    cand = verified_candidate(repo, "fast-forward-marked")
    (repo / "src" / "a").mkdir(parents=True, exist_ok=True)
    (repo / "src" / "a" / "x").write_text("MY OWN EDIT")
    code, out, err = lanes(repo, "tick")
    assert code == 1 and "working_tree_unstaged: src/a/x" in err, err
    assert (repo / "src" / "a" / "x").read_text() == "MY OWN EDIT"
    assert git(repo, "rev-parse", "imm/demo").strip() == cand["head"]
    (repo / "src" / "a" / "x").unlink()   # moved away: the landing goes on
    assert child(lanes_json(repo, "tick")[1], "a")["state"] == "integrated"


def test_only_a_merge_that_died_is_finished_not_what_the_user_staged(repo):
    """Without the mark a killed merge leaves, a candidate staged in the coordinator by hand is the
    user's: no hold moves the branch for it."""
    cand = verified_candidate(repo)
    assert not (repo / ".git" / "lanes" / "locks" / "demo.ff").exists()
    git(repo, "read-tree", "-m", "-u", cand["head"], cand["commit"])
    _, _, err = lanes(repo, "tick")
    assert "interrupted fast-forward" not in err, err
    assert git(repo, "rev-parse", "imm/demo").strip() == cand["head"]
    assert git(repo, "status", "--porcelain").startswith("A  src/a/x")   # the user's staging kept


def test_a_users_own_file_where_the_candidate_writes_one_is_not_taken_for_a_torn_checkout(repo):
    """No merge died (no mark): a file the user made in the coordinator at a path the recorded candidate
    adds stays as it is; it is not copied aside and removed as what a killed merge left."""
    cand = verified_candidate(repo)
    (repo / "src" / "a").mkdir(parents=True, exist_ok=True)
    (repo / "src" / "a" / "x").write_text("mine")
    _, _, err = lanes(repo, "tick")
    assert "interrupted while it wrote files" not in err, err
    assert (repo / "src" / "a" / "x").read_text() == "mine"
    assert not (repo / ".git" / "lanes" / "restores").exists()   # not even copied aside
    assert git(repo, "rev-parse", "imm/demo").strip() == cand["head"]


def leaking_check(repo: Path, writes: dict[str, str]) -> str:
    """A check that passes and, run in a scratch worktree (the rerun), writes `writes` into the
    coordinator: a lane write that leaks while the candidate is verified."""
    script = repo.parent / "leak.py"
    script.write_text("import os, pathlib\n"
                      "if os.sep + os.path.join('lanes', 'scratch') in os.getcwd():\n"
                      f"    for rel, text in {writes!r}.items():\n"
                      f"        p = pathlib.Path({str(repo)!r}, rel)\n"
                      "        p.parent.mkdir(parents=True, exist_ok=True)\n"
                      "        p.write_text(text)\n")
    return f"{PY} {script}"


def test_a_lane_write_leaked_where_the_fast_forward_goes_is_restored_before_it(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": leaking_check(repo, {"src/a/x": "a"})}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    code, report = lanes_json(repo, "tick")
    assert code == 0 and child(report, "a")["state"] == "integrated", report
    [restore] = report["restores"]
    assert restore["paths"] == [{"path": "src/a/x", "kind": "untracked", "lane_task_id": "a"}]
    assert git(repo, "status", "--porcelain") == ""


def test_a_lane_write_leaked_elsewhere_does_not_hold_up_the_landing(repo):
    """Only the candidate's paths are looked at before the fast-forward (a full `git status` is a scan
    of every file of the coordinator); the next tick's step 2 restores what leaked elsewhere."""
    check = leaking_check(repo, {"src/b/y": "b"})
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check},
                                    {"id": "b", "scope": ["src/b"]}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    deliver(lb, {"src/b/y": "b"})   # b's work in progress: what leaks is provably b's
    finish(la, {"src/a/x": "a"})
    code, report = lanes_json(repo, "tick")
    assert code == 0 and child(report, "a")["state"] == "integrated", report
    assert (repo / "src" / "b" / "y").read_text() == "b" and not report.get("restores")
    code, report = lanes_json(repo, "tick")
    assert code == 0, report
    [restore] = report["restores"]
    assert restore["paths"] == [{"path": "src/b/y", "kind": "untracked", "lane_task_id": "b"}]
    assert not (repo / "src" / "b" / "y").exists()


def test_a_file_where_the_candidate_needs_a_folder_refuses_the_landing_not_a_git_error(repo):
    """`merge --ff-only` would fail on it (an untracked file in the way); it is found before the merge
    and, no lane's, refused as step 2 refuses: nothing moves, the candidate stays recorded."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": leaking_check(repo, {"src/a": "mine"})}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    head = git(repo, "rev-parse", "imm/demo").strip()
    finish(provision(repo, "a"), {"src/a/x": "a"})
    code, out, err = lanes(repo, "tick")
    assert code == 1 and err.startswith("error: working_tree_unstaged: src/a"), err
    assert "Traceback" not in err and "merge" not in err
    assert git(repo, "rev-parse", "imm/demo").strip() == head
    assert (repo / "src" / "a").read_text() == "mine"
    assert lanes_json(repo, "status")[1]["candidate"]["task_id"] == "a"
    assert not (repo / ".git" / "lanes" / "locks" / "demo.ff").exists()


@pytest.mark.parametrize("change, settles", [
    ("edit", False), ("new file", False), ("delete", False), ("touch", True), ("none", True)])
@pytest.mark.parametrize("prepared", [True, False])
def test_a_lane_settles_only_while_it_still_delivers_its_passed_attempt(repo, change, settles, prepared):
    """Asked of the index `done` left (one `git add -A --dry-run`), else of a new snapshot: a lane
    changed after its passed `done` is not settled; a file only touched changes nothing."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    finish(lane, {"src/a/x": "a", "src/a/y": "y"})
    admin = Path(git(lane, "rev-parse", "--absolute-git-dir").strip())
    left = [p for p in admin.iterdir() if p.name.startswith("index.git-lanes-")]
    assert len(left) == 1   # what `done` leaves for the tick
    if not prepared:
        left[0].unlink()
    if change == "edit":
        (lane / "src" / "a" / "x").write_text("b")
    elif change == "new file":
        (lane / "src" / "a" / "z").write_text("z")
    elif change == "delete":
        (lane / "src" / "a" / "y").unlink()
    elif change == "touch":
        os.utime(lane / "src" / "a" / "x", (time.time() + 5, time.time() + 5))
    code, report = lanes_json(repo, "tick")
    assert code == 0, report
    assert child(report, "a")["state"] == ("integrated" if settles else "enrolled")
    if settles:
        assert git(lane, "status", "--porcelain") == ""   # the lane is clean on its lane commit


def test_a_failed_done_leaves_no_index_beside_the_lanes(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check_file("src/a/never")}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    assert lanes(lane, "done")[0] == 1
    admin = Path(git(lane, "rev-parse", "--absolute-git-dir").strip())
    assert not [p for p in admin.iterdir() if p.name.startswith("index.git-lanes-")]


def test_the_report_of_a_batchs_first_landing_lists_its_commit_once(repo):
    """The landing hold read the branch's history only after its fast-forward, then added the new
    head to it again: `commits` named the first integration twice."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["commits"] == [child(report, "a")["commit"]], report["commits"]
    finish(provision(repo, "b"), {"src/b/x": "b"})
    code, report = lanes_json(repo, "tick")
    assert report["commits"] == [child(report, t)["commit"] for t in "ab"]


def test_a_scratch_worktree_half_made_by_a_killed_add_is_made_again(repo):
    """A kill inside `git worktree add` of a scratch worktree (`run` makes one ready as its first session
    starts) can leave it registered, locked `initializing`, without its `.git` file: Git then takes its
    folder for part of the Git directory. The next verification makes it again instead of failing."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    assert child(lanes_json(repo, "tick")[1], "a")["state"] == "integrated"
    scratch = repo / ".git" / "lanes" / "scratch" / "0"
    admin = Path(git(scratch, "rev-parse", "--absolute-git-dir").strip())
    (scratch / ".git").unlink()
    (admin / "locked").write_text("initializing")
    finish(provision(repo, "b"), {"src/b/x": "b"})
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["batch_state"] == "completed", report
    assert git(scratch, "rev-parse", "HEAD").strip() == child(report, "b")["commit"]
    assert git(scratch, "status", "--porcelain") == ""


def test_release_stale_removes_a_scratch_worktree_a_killed_add_left_locked(repo):
    """A kill inside its `git worktree add` leaves a scratch worktree locked `initializing`, which
    `git worktree prune` never removes: `release --stale` removes it with its registration, and the
    next batch makes it again."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    finish(provision(repo, "a"), {"src/a/x": "a"})
    assert lanes_json(repo, "tick")[1]["batch_state"] == "completed"
    scratch = repo / ".git" / "lanes" / "scratch" / "0"
    admin = Path(git(scratch, "rev-parse", "--absolute-git-dir").strip())
    (admin / "locked").write_text("initializing")
    code, out, err = lanes(repo, "release", "--stale", "demo")
    assert code == 0 and f"removed scratch worktree {scratch}" in out, out + err
    assert not scratch.exists() and not admin.exists()
    assert str(scratch) not in git(repo, "worktree", "list", "--porcelain")
    git(repo, "switch", "-q", "main")
    write_initiative(repo, "next", [{"id": "b", "scope": ["src/b"]}])
    assert lanes(repo, "start", "next", "--yes")[0] == 0
    finish(provision(repo, "b"), {"src/b/x": "b"})
    assert lanes_json(repo, "tick")[1]["batch_state"] == "completed"
    assert git(scratch, "status", "--porcelain") == ""
