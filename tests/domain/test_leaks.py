"""Leak restore (SPEC §9): real repositories, real lanes, the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from git_lanes.decisions.leaks import LaneVersions, LeakFacts, Proven, Version, decide, entry_refusal, prove

BIN = Path(sys.executable).parent
PASS = json.dumps(f"{sys.executable} -c pass")


def cli(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["git-lanes", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"git-lanes {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_json(cwd: Path, *args: str, check: bool = True) -> tuple[int, dict]:
    proc = cli(cwd, *args, "--json", check=check)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}


TASKS = {"alpha": ["a.txt", "README", "src/alpha"], "beta": ["b.txt"]}


def make_batch(root: Path, tasks: dict[str, list[str]] = TASKS) -> Path:
    """A repository with the initiative `demo` committed and a running batch (max-parallel 2)."""
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("hello\n")
    (root / "src").mkdir()
    (root / "src" / "keep.txt").write_text("keep\n")
    folder = root / ".lanes" / "demo"
    folder.mkdir(parents=True)
    names = ", ".join(f'"{t}"' for t in tasks)
    (folder / "initiative.toml").write_text(f'title = "Demo"\ntasks = [{names}]\n')
    for task, scope in tasks.items():
        (folder / f"{task}.toml").write_text(
            f'task_id = "{task}"\nrevision = 1\ngoal = "Do {task}"\nscope = {json.dumps(scope)}\n'
            f'[[acceptance]]\nid = "A1"\ntext = "runs"\ncheck = {PASS}\n')
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initiative demo")
    cli(root, "start", "demo", "--max-parallel", "2", "--yes")
    return root


def provision(root: Path, task: str) -> Path:
    _, report = cli_json(root, "provision", task)
    paths = [h["lane_path"] for h in report["handoffs"] if h["task_id"] == task and h.get("lane_path")]
    assert paths, report
    return Path(paths[0])


def finish(root: Path, lane: Path) -> dict:
    """`done` in the lane, then a tick in the coordinator; returns the tick's report."""
    cli(lane, "done")
    return cli_json(root, "tick")[1]


def child(report: dict, task: str) -> dict:
    return next(c for c in report["children"] if c["task_id"] == task)


def world(root: Path) -> tuple[str, str, dict[str, str]]:
    """Everything a refusal must leave alone: refs, the coordinator's status, its files."""
    refs = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    status = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    files = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            p = Path(dirpath, name)
            files[str(p.relative_to(root))] = p.read_bytes()
    return refs, status, files


def restores_dir(root: Path) -> Path:
    return root / ".git" / "lanes" / "restores"


@pytest.fixture
def batch(tmp_path) -> Path:
    return make_batch(tmp_path / "repo")


# -- restored --------------------------------------------------------------------------------------

def test_untracked_lane_file_in_the_coordinator_is_restored_with_a_backup(batch):
    lane = provision(batch, "alpha")
    (lane / "src" / "alpha").mkdir()
    (lane / "src" / "alpha" / "new.py").write_text("print('lane')\n")
    (lane / "a.txt").write_text("from the lane\n")
    (batch / "src" / "alpha").mkdir()
    (batch / "src" / "alpha" / "new.py").write_text("print('lane')\n")
    (batch / "a.txt").write_text("from the lane\n")

    _, report = cli_json(batch, "tick")

    assert git(batch, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (batch / "src" / "alpha").exists()  # the folder the leak created goes with it
    assert (batch / "src" / "keep.txt").read_text() == "keep\n"
    [restore] = report["restores"]
    assert restore["paths"] == [{"path": "a.txt", "kind": "untracked", "lane_task_id": "alpha"},
                                {"path": "src/alpha/new.py", "kind": "untracked", "lane_task_id": "alpha"}]
    backup = Path(restore["backup"])
    assert backup.parent.parent == restores_dir(batch) and backup.parent.name == report["batch_id"]
    assert (backup / "files" / "a.txt").read_text() == "from the lane\n"
    assert (backup / "files" / "src" / "alpha" / "new.py").read_text() == "print('lane')\n"
    doc = json.loads((backup / "restore.json").read_text())
    assert doc["paths"] == restore["paths"] and doc["undo"]
    assert not any("git add" in line for line in doc["undo"])
    # the patch puts the leak back exactly
    git(batch, "apply", "--check", str(backup / "restore.patch"))
    git(batch, "apply", str(backup / "restore.patch"))
    assert (batch / "a.txt").read_text() == "from the lane\n"
    assert (batch / "src" / "alpha" / "new.py").read_text() == "print('lane')\n"
    # recorded in the batch record
    status = cli_json(batch, "status")[1]
    assert status["restores"] == report["restores"]
    # the lane is untouched and still delivers
    assert (lane / "a.txt").read_text() == "from the lane\n"


def test_modified_tracked_file_equal_to_the_lanes_version_is_restored(batch):
    lane = provision(batch, "alpha")
    (lane / "README").write_text("hello from alpha\n")
    (batch / "README").write_text("hello from alpha\n")
    head = git(batch, "rev-parse", "HEAD")

    _, report = cli_json(batch, "tick")

    assert (batch / "README").read_text() == "hello\n"
    assert git(batch, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(batch, "rev-parse", "HEAD") == head
    [restore] = report["restores"]
    assert restore["paths"] == [{"path": "README", "kind": "modified", "lane_task_id": "alpha"}]
    backup = Path(restore["backup"])
    assert (backup / "files" / "README").read_text() == "hello from alpha\n"
    git(batch, "apply", "--check", str(backup / "restore.patch"))


def test_a_version_from_a_lane_commit_is_proof_too(batch):
    """The lane's bytes may live in a commit of base..imm-lane/<slug>/<task>, not its worktree."""
    lane = provision(batch, "alpha")
    (lane / "a.txt").write_text("v1\n")
    git(lane, "add", "a.txt")
    git(lane, "commit", "-q", "-m", "wip")
    (lane / "a.txt").write_text("v2\n")
    (batch / "a.txt").write_text("v1\n")

    _, report = cli_json(batch, "tick")

    assert not (batch / "a.txt").exists()
    assert report["restores"][0]["paths"] == [{"path": "a.txt", "kind": "untracked", "lane_task_id": "alpha"}]


def test_executable_files_and_symbolic_links_are_proven_by_kind_and_bytes(batch):
    lane = provision(batch, "alpha")
    for root in (lane, batch):
        (root / "src" / "alpha").mkdir()
        (root / "src" / "alpha" / "run.sh").write_text("#!/bin/sh\necho hi\n")
        os.chmod(root / "src" / "alpha" / "run.sh", 0o755)
        os.symlink("run.sh", root / "src" / "alpha" / "link")

    _, report = cli_json(batch, "tick")

    assert not (batch / "src" / "alpha").exists()
    assert [p["path"] for p in report["restores"][0]["paths"]] == ["src/alpha/link", "src/alpha/run.sh"]
    backup = Path(report["restores"][0]["backup"])
    assert os.readlink(backup / "files" / "src" / "alpha" / "link") == "run.sh"
    git(batch, "apply", str(backup / "restore.patch"))
    assert os.access(batch / "src" / "alpha" / "run.sh", os.X_OK)
    assert os.readlink(batch / "src" / "alpha" / "link") == "run.sh"


def test_two_restores_get_two_backups_and_the_batch_goes_on(batch):
    lane = provision(batch, "alpha")
    (lane / "a.txt").write_text("one\n")
    (batch / "a.txt").write_text("one\n")
    cli(batch, "tick")
    (batch / "a.txt").write_text("one\n")
    _, report = cli_json(batch, "tick")
    assert len(report["restores"]) == 2
    assert len({r["backup"] for r in report["restores"]}) == 2
    # the lane still finishes and integrates
    report = finish(batch, lane)
    assert child(report, "alpha")["state"] == "integrated"
    assert (batch / "a.txt").read_text() == "one\n"


def test_clean_coordinator_writes_no_restore(batch):
    provision(batch, "alpha")
    _, report = cli_json(batch, "tick")
    assert "restores" not in report
    assert not restores_dir(batch).exists()


# -- refused: nothing touched ----------------------------------------------------------------------

def _assert_refused(root: Path, path: str, words: str) -> None:
    before = world(root)
    proc = cli(root, "tick", check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"error: working_tree_unstaged: {path}: " in proc.stderr
    assert words in proc.stderr
    assert "git add" not in proc.stderr
    assert world(root) == before
    assert not restores_dir(root).exists()
    # the same with --json: the rejected report on stdout, still exit 1, still nothing written
    code, report = cli_json(root, "tick", check=False)
    assert code == 1 and report["batch_state"] == "rejected"
    assert report["reason"].startswith(f"working_tree_unstaged: {path}: ")
    assert world(root) == before


def test_a_users_own_edit_refuses_and_changes_nothing(batch):
    lane = provision(batch, "alpha")
    (lane / "a.txt").write_text("lane\n")
    (batch / "a.txt").write_text("lane\n")          # provable on its own
    (batch / "README").write_text("my own edit\n")  # not a lane's
    _assert_refused(batch, "README", "matches no lane's version")
    assert (batch / "a.txt").read_text() == "lane\n"


def test_an_untracked_file_no_lane_wrote_refuses(batch):
    provision(batch, "alpha")
    (batch / "notes.txt").write_text("mine\n")
    _assert_refused(batch, "notes.txt", "matches no lane's version")


def test_a_staged_file_refuses_even_when_it_is_the_lanes(batch):
    lane = provision(batch, "alpha")
    (lane / "a.txt").write_text("lane\n")
    (batch / "a.txt").write_text("lane\n")
    git(batch, "add", "a.txt")
    _assert_refused(batch, "a.txt", "staged")


def test_a_deletion_refuses(batch):
    provision(batch, "alpha")
    (batch / "README").unlink()
    _assert_refused(batch, "README", "deleted")


def test_a_file_equal_to_the_lane_base_refuses(tmp_path):
    """beta's lane still holds README as at its base; alpha changed README on the batch branch.
    README put back to those base bytes in the coordinator is no lane's write."""
    root = make_batch(tmp_path / "repo")
    alpha = provision(root, "alpha")
    beta = provision(root, "beta")
    (alpha / "README").write_text("hello from alpha\n")
    report = finish(root, alpha)
    assert child(report, "alpha")["state"] == "integrated"
    assert (root / "README").read_text() == "hello from alpha\n"
    assert (beta / "README").read_text() == "hello\n"
    (root / "README").write_text("hello\n")
    _assert_refused(root, "README", "lane base")


def test_a_mode_change_refuses(batch):
    lane = provision(batch, "alpha")
    os.chmod(lane / "README", 0o755)
    os.chmod(batch / "README", 0o755)
    _assert_refused(batch, "README", "mode")


# -- the decision, facts in, verdict out -------------------------------------------------------------

F1, F2, F3 = Version("file", "1" * 40), Version("file", "2" * 40), Version("file", "3" * 40)


def test_decision_proves_each_path_by_the_first_lane_that_holds_it():
    facts = [LeakFacts("a", "??", F2, lanes=(LaneVersions("x", None, (F3,)), LaneVersions("y", None, (F2,)),
                                             LaneVersions("z", None, (F2,)))),
             LeakFacts("b", " M", F2, head=F1, lanes=(LaneVersions("x", F1, (F2,)),))]
    verdict = decide(facts)
    assert verdict.refusal is None
    assert verdict.proven == (Proven("a", "untracked", "y"), Proven("b", "modified", "x"))


def test_decision_refuses_on_the_first_unprovable_entry():
    facts = [LeakFacts("a", "??", F2, lanes=(LaneVersions("x", None, (F2,)),)),
             LeakFacts("b", " M", F3, head=F1, lanes=(LaneVersions("x", F1, (F2,)),)),
             LeakFacts("c", "M ", None)]
    verdict = decide(facts)
    assert verdict.proven == () and verdict.refusal[0] == "b"


@pytest.mark.parametrize("xy,words", [("M ", "staged"), ("A ", "staged"), ("MM", "staged"), (" D", "deleted"),
                                      ("UU", "unmerged"), ("AA", "unmerged"), (" T", "type"), ("D ", "staged")])
def test_decision_refuses_entries_that_are_never_lane_writes(xy, words):
    assert words in entry_refusal(xy)
    assert isinstance(prove(LeakFacts("p", xy, F2, lanes=(LaneVersions("x", None, (F2,)),))), str)


def test_decision_equal_to_base_and_mode_only_and_not_a_file():
    base_equal = LeakFacts("p", " M", F1, head=F2, lanes=(LaneVersions("x", F1, (F1,)),))
    assert "lane base" in prove(base_equal)
    exe = Version("exec", F2.blob)
    mode_only = LeakFacts("p", " M", exe, head=F1, lanes=(LaneVersions("x", F1, (F2,)),))
    assert "mode" in prove(mode_only)
    head_mode = LeakFacts("p", " M", Version("exec", F1.blob), head=F1, lanes=(LaneVersions("x", F1, (F1,)),))
    assert "only its mode changed" in prove(head_mode)
    assert "not a regular file" in prove(LeakFacts("sub/", "??", None, lanes=(LaneVersions("x", None, (F1,)),)))
    assert "no lane" in prove(LeakFacts("p", "??", F1, lanes=()))
