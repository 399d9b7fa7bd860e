"""Issue 14 on the lane side and the steward, through the installed `git lanes` (SPEC v3 §2, §2.1, §5, §6):
done fails an out-of-scope delivery before any check, qa_failed says why, shell syntax in a check is a plan
error, output tails are plain text, lanes.copy, a failing setup fails its provision, release says what it
removed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, record, start, write_plan
from git_lanes.core.ids import shell_syntax

PY = shlex.quote(sys.executable)


def human(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`git lanes ARGS` without --json: what a person sees."""
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, input="")


def lane_record(repo: Path, task: str) -> dict:
    doc = ok(repo, "show", task, "--slug", "demo")
    return doc["lane_record"]


def lane_with(repo: Path, acceptance: list[tuple[str, str, str]]) -> Path:
    """A running batch of one task `a` with these checks, its lane provisioned and src/a/out.txt written."""
    write_plan(repo, "demo", {"a": intent("a", acceptance=acceptance)})
    start(repo, "demo")
    lane = provision(repo, "a")
    (lane / "src" / "a").mkdir(parents=True)
    (lane / "src" / "a" / "out.txt").write_text("in scope\n")
    return lane


# -- 1. done: out of scope before any check; error: qa_failed -------------------------------------------

def test_done_fails_an_out_of_scope_delivery_before_running_any_check(repo, tmp_path):
    ran = tmp_path / "check-ran"
    check = f"{PY} -c \"import pathlib; pathlib.Path({str(ran)!r}).write_text('x')\""
    lane = lane_with(repo, [("A1", "runs", check)])
    (lane / "README").write_text("changed outside the scope\n")
    (lane / "stray.txt").write_text("new outside the scope\n")
    proc = human(lane, "done")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "error: qa_failed: delivery_outside_scope: README, stray.txt"
    assert not ran.exists()                               # no check ran
    (attempt,) = lane_record(repo, "a")["qa_attempts"]
    assert attempt["passed"] is False and attempt["results"] == []
    assert attempt["note"] == "delivery_outside_scope: README, stray.txt"
    # a QA failure like any other: counted at the next tick, the child keeps running
    report = ok(repo, "tick")
    assert child_of(report, "a")["state"] == "enrolled" and child_of(report, "a")["qa_failures"] == 1
    # fixed by the executor, done runs the checks and passes
    git(lane, "checkout", "--", "README")
    (lane / "stray.txt").unlink()
    code, doc, err = cli(lane, "done")
    assert code == 0 and doc["passed"] is True and ran.exists()


def test_a_failing_check_names_its_id_status_and_last_line(repo):
    check = f"{PY} -c \"import sys; print('collecting'); print('assert 1 == 2: the answer'); sys.exit(3)\""
    lane = lane_with(repo, [("A1", "exists", exists("src/a/out.txt")), ("A2", "answers", check)])
    proc = human(lane, "done")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: qa_failed: A2"
    assert "FAIL A2 (exit 3): " in proc.stdout and "assert 1 == 2: the answer" in proc.stdout
    assert "ok   A1: " in proc.stdout
    # --json: the document on stdout, the same error on stderr (--retry: the same tree again, SPEC §17.6 v4)
    code, doc, err = cli(lane, "done", "--retry")
    assert code == 1 and doc["passed"] is False and err.strip() == "error: qa_failed: A2"


# -- 7. shell syntax is a plan error ---------------------------------------------------------------------

@pytest.mark.parametrize("check, found", [
    ("node check.js && npm test", "&&"), ("a || b", "||"), ("pytest | tee log", "|"), ("a; b", ";"),
    ("serve &", "&"), ("pytest > out", ">"), ("pytest >> out", ">>"), ("a < in", "<"), ("pytest 2>&1", "2>&1"),
    ("CI=1 pytest", "CI=1"),
])
def test_shell_syntax_in_a_check_is_a_plan_error(repo, check, found):
    assert shell_syntax(check) == found
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "x", check)])})
    for args in (("plan", "demo"), ("start", "demo", "--yes")):
        proc = human(repo, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: .lanes/demo/a.toml: acceptance[0].check: ")
        assert "without a shell" in proc.stderr and "wrap it in a script" in proc.stderr
    assert git(repo, "for-each-ref", "refs/notes/lanes/").strip() == ""


@pytest.mark.parametrize("check", ["echo '&&' ok", 'python3 -c "import sys; sys.exit(0)"', "find . -exec true {} \\;",
                                   "pytest -k 'a or b' FOO=1", 'grep "a|b" x'])
def test_quoted_operators_are_ordinary_arguments(check):
    assert shell_syntax(check) is None


def test_shell_syntax_in_the_setup_command_refuses_provision_and_run(repo):
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "config", "lanes.setupCommand", "npm ci && npm run build")
    before = git(repo, "for-each-ref")
    proc = human(repo, "provision", "a")
    assert proc.returncode == 2 and "lanes.setupCommand" in proc.stderr and "'&&'" in proc.stderr
    assert git(repo, "for-each-ref") == before            # nothing created
    proc = human(repo, "run", "demo", "--executor", "true")
    assert proc.returncode == 2 and "lanes.setupCommand" in proc.stderr
    # a lane made before the setting: its delivery would be verified with setup, so the tick refuses
    # before it records anything (not after its lane commit and candidate)
    git(repo, "config", "--unset", "lanes.setupCommand")
    lane = provision(repo, "a")
    done(lane, {"src/a/out.txt": "a\n"})
    git(repo, "config", "lanes.setupCommand", "npm ci && npm run build")
    before = git(repo, "for-each-ref")
    proc = human(repo, "tick")
    assert proc.returncode == 2 and proc.stderr.startswith("error: lanes.setupCommand 'npm ci && npm run build'")
    assert git(repo, "for-each-ref") == before and proc.stdout == ""


# -- 7. output_tail is plain text ----------------------------------------------------------------------------

def test_output_tails_are_stored_without_terminal_escapes(repo):
    check = f"{PY} -c \"print('\\x1b[31mred\\x1b[0m \\x1b[1mbold\\x1b[0m'); raise SystemExit(1)\""
    lane = lane_with(repo, [("A1", "colours", check)])
    code, doc, err = cli(lane, "done")
    assert doc["results"][0]["output_tail"] == "red bold\n"
    assert "\x1b" not in json.dumps(lane_record(repo, "a"))


# -- 6. inbox says when it is empty ---------------------------------------------------------------------------

def test_an_empty_inbox_says_so(repo):
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    proc = human(lane, "inbox")
    assert proc.returncode == 0 and "empty" in proc.stdout
    assert cli(lane, "inbox")[1] == []


# -- 5. lanes.copy -------------------------------------------------------------------------------------------

def test_lanes_copy_brings_the_coordinators_ignored_files_into_each_new_lane(repo):
    (repo / ".gitignore").write_text(".env\nconfig/local.toml\n")
    (repo / "settings.ini").write_text("tracked\n")
    write_plan(repo, "demo", {"a": intent("a")})            # commits .gitignore and settings.ini too
    start(repo, "demo")
    (repo / ".env").write_text("API_URL=http://localhost\n")
    (repo / "config").mkdir()
    (repo / "config" / "local.toml").write_text("debug = true\n")
    for pattern in (".env", "config/local.toml", "settings.ini"):
        git(repo, "config", "--add", "lanes.copy", pattern)
    proc = human(repo, "provision", "a")
    assert proc.returncode == 0, proc.stderr
    assert "warning: lanes.copy: settings.ini is tracked; not copied" in proc.stderr
    lane = Path(child_of(ok(repo, "status"), "a")["lane"]["path"])
    assert (lane / ".env").read_text() == "API_URL=http://localhost\n"
    assert (lane / "config" / "local.toml").read_text() == "debug = true\n"
    assert git(lane, "status", "--porcelain", "--untracked-files=all") == ""   # copies are never a delivery


def test_lanes_copy_skips_a_match_git_does_not_ignore_and_a_refused_provision_leaves_nothing(repo, hermetic):
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "config", "lanes.copy", "*.local")
    (repo / "notes.local").write_text("not ignored\n")
    before = git(repo, "for-each-ref")
    proc = human(repo, "provision", "a")
    assert "warning: lanes.copy: notes.local is not ignored by Git; not copied" in proc.stderr
    # the coordinator is dirty with a file no lane wrote: the tick refuses, and the lane goes again
    assert proc.returncode == 1 and "working_tree_unstaged: notes.local" in proc.stderr
    assert git(repo, "for-each-ref") == before
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not (hermetic / ".local" / "share" / "git-lanes").exists()


# -- 7. a failing setup fails its provision -------------------------------------------------------------------

# each line flushed as it is printed: one process writing in order into the one pipe both streams share,
# so the output's order never depends on buffering (PYTHONUNBUFFERED or not) or on the scheduler
SETUP = ("import sys\nfor i in range(8):\n    print(f'step {i}', flush=True)\nprint(flush=True)\n"
         "print('npm ERR! missing lockfile', file=sys.stderr, flush=True)\nsys.exit(4)\n")


def test_a_failing_setup_fails_the_provision_and_leaves_nothing(repo, tmp_path, hermetic):
    script = tmp_path / "setup.py"
    script.write_text(SETUP)
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "config", "lanes.setupCommand", f"{sys.executable} {script}")
    proc = human(repo, "provision", "a")
    assert proc.returncode == 1
    # SPEC §17.1 v4: the first lines naming an error, then the last three; the whole output in a log
    quoted, _, log = proc.stderr.strip().partition("; whole output: ")
    assert quoted.startswith("error: batch_lane_setup_failed: exit 4: npm ERR! missing lockfile | ")
    assert quoted.endswith(" | step 6 | step 7")   # (stderr and stdout may interleave either way)
    assert log.endswith("/a-setup-1.log") and "step 0" in Path(log).read_text()
    assert "imm-lane/demo/a" not in git(repo, "branch", "--list", "imm-lane/*")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    lanes_root = hermetic / ".local" / "share" / "git-lanes"
    assert not lanes_root.exists() or not any(lanes_root.rglob("*"))   # no folder left behind
    assert child_of(ok(repo, "status"), "a")["state"] == "pending"
    assert record(repo, "demo")["batch_state"] == "running"


def test_a_setup_that_leaves_changes_names_them_and_leaves_nothing(repo, hermetic):
    """A lane must be clean to be admitted (SPEC §6.1): what the setup left that Git does not ignore is
    named, with the way out, and the lane goes (it held nothing but setup)."""
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "config", "lanes.setupCommand", "touch setup.stamp")
    proc = human(repo, "provision", "a")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("error: batch_lane_dirty: lanes.copy or lanes.setupCommand left changes Git "
                                   "does not ignore: setup.stamp; ignore them (.gitignore) or make the setup "
                                   "leave none (the lane was removed)")
    assert "imm-lane/demo/a" not in git(repo, "branch", "--list", "imm-lane/*")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# -- 7. release says what it removed; no empty folder stays -----------------------------------------------------

def test_release_prints_what_it_removed_and_leaves_no_empty_folder(repo, hermetic):
    write_plan(repo, "demo", {"a": intent("a"), "b": intent("b")})
    start(repo, "demo", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    for lane, task in ((la, "a"), (lb, "b")):
        (lane / "src" / task).mkdir(parents=True)
        (lane / "src" / task / "out.txt").write_text("x\n")
        assert cli(lane, "done")[0] == 0
    ok(repo, "tick")
    proc = human(repo, "release", "a")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"removed lane a: {la} (branch imm-lane/demo/a deleted)\n"
    assert not la.exists() and lb.exists()
    assert la.parent.exists()                    # b's lane is still in the slug's folder
    proc = human(repo, "release", "b")
    assert proc.stdout == f"removed lane b: {lb} (branch imm-lane/demo/b deleted)\n"
    root = hermetic / ".local" / "share" / "git-lanes"
    assert not root.exists()                     # the slug, repo id and root folders went with the last lane
    # no batch is active: --stale removes the scratch worktrees too (a cache shared by every batch)
    proc = human(repo, "release", "--stale", "demo")
    scratch = [line for line in proc.stdout.splitlines() if line.startswith("removed scratch worktree ")]
    assert proc.returncode == 0 and scratch and len(scratch) == len(proc.stdout.splitlines())
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    proc = human(repo, "release", "--stale", "demo")
    assert proc.returncode == 0 and proc.stdout == ""          # SPEC §6: what it removed, nothing else


def test_provision_refuses_a_lane_branch_it_did_not_make_and_touches_nothing(repo):
    """SPEC §6: provision creates the lane branch, refusing an existing one. Only the leftover of a
    killed provision (its branch's reflog starts with the provision's own entry) is cleared."""
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "branch", "imm-lane/demo/a", "imm/demo")                 # someone's, not a provision's
    other = repo.parent / "by-hand"
    git(repo, "worktree", "add", "-q", str(other), "imm-lane/demo/a")
    before = git(repo, "for-each-ref"), git(repo, "worktree", "list", "--porcelain")
    proc = human(repo, "provision", "a")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: batch_lane_branch_exists: imm-lane/demo/a exists already and no provision made it",
        f"hint: git worktree remove {other} && git branch -D imm-lane/demo/a"]
    assert (git(repo, "for-each-ref"), git(repo, "worktree", "list", "--porcelain")) == before and other.is_dir()
    git(repo, "worktree", "remove", str(other))                        # the hint, pasted
    git(repo, "branch", "-D", "imm-lane/demo/a")
    assert human(repo, "provision", "a").returncode == 0


def test_a_check_that_leaves_an_empty_repository_fails_the_attempt_and_it_is_recorded(repo):
    """SPEC §5: the second snapshot differing fails the attempt, recorded. A check that makes an empty
    repository in the lane leaves a tree Git cannot add: still a failed attempt, not a fatal error."""
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "fixture", "git init -q fixture")])})
    start(repo, "demo")
    lane = provision(repo, "a")
    (lane / "src" / "a").mkdir(parents=True)
    (lane / "src" / "a" / "x.txt").write_text("x\n")
    code, doc, err = cli(lane, "done")
    assert code == 1, err
    assert doc["passed"] is False and doc["note"].startswith("checks changed the delivery: it can no longer be "
                                                              "snapshotted")
    assert err.startswith("error: qa_failed: ")
    assert child_of(ok(repo, "tick"), "a")["qa_failures"] == 1


def test_a_lane_record_whose_attempt_is_not_one_is_refused_as_corrupt_not_a_crash(repo):
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/wrong.txt": "x\n"})["passed"] is False
    ref = "refs/notes/lanes/lane/demo/a"
    # a state commit whose attempt file is a JSON list, made with plain Git
    git(repo, "read-tree", "--index-output=" + str(repo / ".git" / "tamper.idx"), ref)
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="[]", capture_output=True,
                          text=True, check=True).stdout.strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "tamper.idx")}
    subprocess.run(["git", "update-index", "--cacheinfo", f"100644,{blob},attempts/000000.json"], cwd=repo, env=env,
                   check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    commit = git(repo, "commit-tree", tree, "-p", ref, "-m", "tampered").strip()
    git(repo, "update-ref", ref, commit)
    for args in (("done",), ("done", "--give-up", "-m", "x")):
        code, _, err = cli(lane, *args)
        assert code == 128 and err.startswith("error: lane record demo/a: contract error: attempts/000000.json is "
                                              "not an attempt"), err
        assert "internal error" not in err
    assert git(repo, "rev-parse", ref).strip() == commit          # nothing written
    # the coordinator parks it as a contract mismatch (SPEC §7 step 7), as before
    report = ok(repo, "tick")
    assert child_of(report, "a")["reason"].startswith("batch_lane_contract_mismatch: lane record demo/a: contract "
                                                      "error: attempts/000000.json")


def test_a_failed_provision_at_a_path_removes_the_folders_it_made(repo, tmp_path):
    """SPEC §6: "a refused provision leaves nothing behind", the folders it made above --path included."""
    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    git(repo, "config", "lanes.setupCommand", "false")
    code, _, err = cli(repo, "provision", "a", "--path", str(tmp_path / "np" / "deep" / "lane"))
    assert code == 1 and "batch_lane_setup_failed" in err
    assert not (tmp_path / "np").exists()
    git(repo, "config", "lanes.setupCommand", "python3 -c \"open('stray.txt', 'w').write('x')\"")   # refused: dirty
    code, _, err = cli(repo, "provision", "a", "--path", str(tmp_path / "np2" / "lane"))
    assert code == 1 and "batch_lane_dirty" in err
    assert not (tmp_path / "np2").exists() and tmp_path.exists()
