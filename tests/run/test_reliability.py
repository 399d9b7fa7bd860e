"""Issue 13: killed anywhere, fed garbage, raced — nothing stuck, nothing lost, nothing leaked.

Here: start killed after its record write; refusals that would have written; stale Git lock
files; paths that are not UTF-8; filters planted in a lane; pathspec variables; tampered records.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import (all_refs, deliver, forge_passed_attempt, lane_path, lanes, lanes_json, snapshot_state,
                     write_initiative)


def plan(repo: Path, tasks=("a", "b")) -> None:
    write_initiative(repo, "demo", [{"id": t, "scope": [f"src/{t}"]} for t in tasks])


def run_killed(repo: Path, point: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_LANES_CRASH_AT=point)
    proc = subprocess.run(["git", "lanes", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc


def head_branch(worktree: Path) -> str:
    return git(worktree, "rev-parse", "--abbrev-ref", "HEAD").strip()


def provision(repo: Path, task: str) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


# -- start killed after its record write is continued by the next tick ---------------------------------

@pytest.mark.parametrize("point", ["record-written", "branch-created"])
def test_start_killed_after_its_record_is_continued_by_tick(repo, point):
    plan(repo)
    base = git(repo, "rev-parse", "HEAD").strip()
    run_killed(repo, point, "start", "demo", "--yes")
    assert head_branch(repo) == "main"
    code, out, err = lanes(repo, "start", "demo", "--yes")
    assert code == 1 and "error: batch_already_active:" in err and "hint: git lanes tick demo" in err
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["batch_state"] == "running"
    assert head_branch(repo) == "imm/demo" and git(repo, "rev-parse", "imm/demo").strip() == base
    assert [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"] == ["a"]


def test_start_with_worktree_killed_before_the_worktree_exists_is_continued(repo, tmp_path):
    plan(repo)
    coordinator = tmp_path / "coord"
    run_killed(repo, "branch-created", "start", "demo", "--yes", "--worktree", str(coordinator))
    assert not coordinator.exists()
    code, report = lanes_json(repo, "tick", "demo")
    assert code == 0 and report["batch_state"] == "running"
    assert head_branch(coordinator) == "imm/demo" and head_branch(repo) == "main"


def test_a_user_who_switched_away_is_refused_not_switched_back(repo):
    plan(repo)
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    git(repo, "switch", "-q", "main")
    before = snapshot_state(repo)
    code, out, err = lanes(repo, "tick")
    assert code == 1 and "batch_coordinator_off_branch" in err and "switch imm/demo" in err
    assert snapshot_state(repo) == before and head_branch(repo) == "main"


# -- refusals write nothing ------------------------------------------------------------------------------

def test_a_deleted_batch_branch_with_integrated_work_is_refused_not_recreated_at_the_base(repo):
    plan(repo, ("a", "b"))
    assert lanes(repo, "start", "demo", "--yes", "--final-check", "true")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    assert lanes(lane, "done")[0] == 0
    code, report = lanes_json(repo, "integrate")
    integrated = report["commits"][0]
    git(repo, "update-ref", "-d", "refs/heads/imm/demo")
    before = snapshot_state(repo)
    index = (repo / ".git" / "index").read_bytes()
    code, out, err = lanes(repo, "tick")
    assert code == 1 and "batch_coordinator_off_branch" in err and integrated in err
    assert snapshot_state(repo) == before and (repo / ".git" / "index").read_bytes() == index


# -- stale lock files never stop a batch -------------------------------------------------------------------

def _age(path: Path, seconds: int) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_stale_ref_and_index_locks_left_by_a_kill_are_removed(repo):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    # a dead process's lock on the lane record (guarded by the lane's flock: stale at once) and on
    # the lane branch and the lane's index (old enough to be a dead process's)
    record_lock = repo / ".git" / "refs" / "notes" / "lanes" / "lane" / "demo" / "a.lock"
    record_lock.parent.mkdir(parents=True, exist_ok=True)
    record_lock.write_text("")
    branch_lock = repo / ".git" / "refs" / "heads" / "imm-lane" / "demo" / "a.lock"
    branch_lock.write_text("")
    _age(branch_lock, 120)
    code, out, err = lanes(lane, "done")
    assert code == 0, err
    assert not record_lock.exists() and "removed stale lock file" in err
    index_lock = Path(git(lane, "rev-parse", "--path-format=absolute", "--git-path", "index.lock").strip())
    index_lock.write_text("")
    _age(index_lock, 120)
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["children"][0]["state"] == "integrated", report["reason"]
    assert not branch_lock.exists() and not index_lock.exists()


def test_a_young_lock_is_waited_for_not_removed(repo):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    assert lanes(lane, "done")[0] == 0
    branch_lock = repo / ".git" / "refs" / "heads" / "imm-lane" / "demo" / "a.lock"
    branch_lock.write_text("")
    holder = subprocess.Popen(["python3", "-c", f"import os,time; time.sleep(1.5); os.unlink({str(branch_lock)!r})"])
    start = time.monotonic()
    code, report = lanes_json(repo, "tick")
    holder.wait()
    assert code == 0 and report["children"][0]["state"] == "integrated"
    assert time.monotonic() - start >= 1.0


# -- paths that are not valid UTF-8 ------------------------------------------------------------------------

def test_a_non_utf8_path_outside_scope_parks_with_git_quoting_and_ticks_go_on(repo):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    (lane / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"outside")
    code, out, err = lanes(lane, "done")     # (v3) done refuses it first, with Git's quoting ...
    assert code == 1 and 'error: qa_failed: delivery_outside_scope: "caf\\351.txt"' in err
    forge_passed_attempt(lane)               # ... and the gate parks a lane that records a pass anyway
    for _ in range(2):
        code, report = lanes_json(repo, "tick")
        assert code == 0
    a = report["children"][0]
    assert a["state"] == "needs_human" and a["reason"] == 'dirty_outside_scope: "caf\\351.txt"'
    assert lanes(repo, "status")[0] == 0 and lanes(repo, "audit")[1] is not None


# -- nothing the environment says bends the scope ------------------------------------------------------------

@pytest.mark.parametrize("var", ["GIT_ICASE_PATHSPECS", "GIT_LITERAL_PATHSPECS", "GIT_GLOB_PATHSPECS"])
def test_pathspec_variables_are_never_obeyed(repo, var):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/*.py"], "check": "true"},
                                    {"id": "b", "scope": ["lib"], "check": "true"}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    deliver(la, {"src/m.py": "in scope"})
    deliver(lb, {"Lib/x": "outside: scope matching is case-sensitive"})
    env = {var: "1"}
    assert lanes(la, "done", env=env)[0] == 0
    code, out, err = lanes(lb, "done", env=env)   # (v3) done's own scope check is case-sensitive too ...
    assert code == 1 and "delivery_outside_scope: Lib/x" in err
    forge_passed_attempt(lb)                       # ... and so is the gate's, for a lane recording a pass anyway
    code, report = lanes_json(repo, "tick")
    states = {c["task_id"]: (c["state"], c["reason"]) for c in report["children"]}
    code, out, err = lanes(repo, "tick", env=env)
    states = {c["task_id"]: (c["state"], c["reason"]) for c in lanes_json(repo, "status")[1]["children"]}
    assert states["a"][0] == "integrated"
    assert states["b"] == ("needs_human", "dirty_outside_scope: Lib/x")


# -- a filter planted in a lane never runs in a coordinator's command ----------------------------------------

def test_a_clean_filter_planted_in_a_lane_does_not_run_in_the_tick(repo, tmp_path):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    witness = tmp_path / "filter-ran"
    git(repo, "config", "extensions.worktreeConfig", "true")
    git(lane, "config", "--worktree", "filter.evil.clean", f"sh -c 'touch {witness}; cat'")
    deliver(lane, {"src/a/.gitattributes": "* filter=evil\n", "src/a/x": "a"})
    witness.unlink(missing_ok=True)
    code, report = lanes_json(repo, "tick")
    assert code == 0
    assert not witness.exists()


def test_the_filter_drivers_of_the_repository_run_as_they_do_for_git(repo):
    """Git LFS and every clean/smudge filter of the repository's (or the user's) configuration: a lane is
    checked out smudged, a delivery is stored cleaned, and the landing leaves the coordinator clean."""
    git(repo, "config", "filter.up.clean", "tr a-z A-Z")
    git(repo, "config", "filter.up.smudge", "tr A-Z a-z")
    (repo / ".gitattributes").write_text("*.up filter=up\n")
    (repo / "src" / "a").mkdir(parents=True)
    (repo / "src" / "a" / "old.up").write_text("old\n")
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": "test -f src/a/new.up"}])
    assert git(repo, "show", "HEAD:src/a/old.up") == "OLD\n"
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    assert (lane / "src" / "a" / "old.up").read_text() == "old\n"   # as `git checkout` makes it
    deliver(lane, {"src/a/new.up": "new\n"})
    code, out, err = lanes(lane, "done")
    assert code == 0, err
    code, report = lanes_json(repo, "tick")
    assert code == 0 and report["children"][0]["state"] == "integrated", report
    assert git(repo, "show", "imm/demo:src/a/new.up") == "NEW\n"   # as `git add` stores it
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "src" / "a" / "new.up").read_text() == "new\n"


# -- tampered records: one clean error, nothing written -------------------------------------------------------

def _tamper(repo: Path, path: str, text: str) -> None:
    tree_lines = git(repo, "ls-tree", "-r", "refs/notes/lanes/batch/demo").splitlines()
    blob = git(repo, "hash-object", "-w", "--stdin", input=text).strip()
    entries = []
    for line in tree_lines:
        meta, name = line.split("\t", 1)
        mode, kind, oid = meta.split()
        entries.append(f"{mode} {kind} {blob if name == path else oid}\t{name}")
    index = repo / ".git" / "tamper-index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "update-index", "--index-info"], cwd=repo, input="\n".join(entries) + "\n", env=env,
                   check=True, text=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    commit = git(repo, "commit-tree", tree, "-p", "refs/notes/lanes/batch/demo", "-m", "tampered").strip()
    git(repo, "update-ref", "refs/notes/lanes/batch/demo", commit)
    index.unlink()


@pytest.mark.parametrize("field, value", [
    ("base_head", "--output=/tmp/x"),
    ("batch_id", "../../etc"),
    ("slug", "../x"),
])
def test_a_tampered_batch_json_is_a_clean_fatal_error(repo, field, value):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    data = json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    data[field] = value
    _tamper(repo, "batch.json", json.dumps(data))
    before = all_refs(repo)
    for args in (["tick"], ["status"], ["log"]):
        code, out, err = lanes(repo, *args)
        if args == ["log"]:
            continue
        assert code == 128 and err.startswith("error: corrupt batch record") and "Traceback" not in err, err
    assert all_refs(repo) == before


def test_an_edited_plan_digest_is_noticed(repo):
    plan(repo, ("a",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    data = json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    data["plan_digest"] = "sha256:" + "1" * 64
    _tamper(repo, "batch.json", json.dumps(data))
    code, report = lanes_json(repo, "tick")
    assert report["batch_state"] == "needs_human" and report["reason"].startswith("plan_changed: ")


# -- secrets are never stored or printed -------------------------------------------------------------------

def test_a_secret_a_check_prints_is_redacted_everywhere_it_is_recorded(repo, monkeypatch):
    secret = "ghp_" + "s3cr3t" * 6
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    monkeypatch.setenv("DEPLOY_KEY", "k3y-value-123")
    monkeypatch.setenv("SHORT_TOKEN", "abc")             # under 6 characters: not a secret
    check = "python3 -c \"import os; print('token', os.environ['GITHUB_TOKEN'], os.environ['DEPLOY_KEY'], 'abc')\""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check}])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    deliver(lane, {"src/a/x": "a"})
    code, out, err = lanes(lane, "done", "--json")
    assert code == 0
    assert secret not in out and "k3y-value-123" not in out
    assert json.loads(out)["results"][0]["output_tail"] == "token *** *** abc\n"
    code, report = lanes_json(repo, "tick")
    assert report["children"][0]["state"] == "integrated"
    stored = git(repo, "log", "-p", "--all", "--notes=lanes/evidence")
    everything = stored + git(repo, "grep", "-h", "-e", "token", "refs/notes/lanes/lane/demo/a", "--", ".")
    assert secret not in everything and "k3y-value-123" not in everything and "token *** ***" in everything


def test_tracker_messages_are_redacted_before_they_are_cut():
    from git_lanes.tracker.github import MAX_MESSAGE, GitHubTracker

    token = "t0k3n" * 20
    tracker = GitHubTracker("https://example.invalid", token)
    message = "x" * (MAX_MESSAGE - 50) + token
    scrubbed = tracker._scrub(message)
    assert len(scrubbed) <= MAX_MESSAGE and "t0k3n" not in scrubbed
