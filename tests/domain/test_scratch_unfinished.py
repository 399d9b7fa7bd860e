"""A scratch worktree whose `git worktree add` was killed before it wrote `commondir` (SPEC §8.3,
§15): its git folder locked `initializing`, its `.git` file written. Git can neither run in it nor
remove it; the next verification that takes the slot makes it anew instead of failing every run
(found by the kill soak: two batches stuck on `its .git does not lead to this repository`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import git
from flow import child_of, done, exists, intent, ok, provision, start, write_plan


def killed_add_before_commondir(repo: Path, slot: Path) -> Path:
    """What a SIGKILL between Git's `.git` file and its `commondir` write leaves."""
    slot.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "-q", "--detach", str(slot), "HEAD")
    admin = Path(git(slot, "rev-parse", "--git-dir").strip())
    (admin / "commondir").unlink()
    (admin / "locked").write_text("initializing\n")
    return admin


def test_a_scratch_slot_left_by_an_add_killed_before_commondir_is_made_anew(repo):
    write_plan(repo, "demo", {"a": intent("a", scope=["src/a"], acceptance=[("A1", "out", exists("src/a/out.txt"))])})
    start(repo, "demo")
    slot = repo / ".git" / "lanes" / "scratch" / "0"
    admin = killed_add_before_commondir(repo, slot)
    proc = subprocess.run(["git", "worktree", "remove", "--force", "--force", str(slot)], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode != 0          # Git itself cannot remove it: the state is the real one
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "x\n"})["passed"] is True
    report = ok(repo, "tick")
    assert child_of(report, "a")["state"] == "integrated", child_of(report, "a").get("reason")
    assert report["batch_state"] == "completed"
    assert not (admin / "locked").exists()
    assert (slot / "src" / "a" / "out.txt").is_file()


def test_a_scratch_slot_is_made_without_pruning_other_worktrees(repo):
    """Making a slot anew forgets only that slot's registration: a worktree of someone else's that is
    registered but whose folder is gone right now (another process's `git worktree add` between
    its metadata and its folder looks the same to `git worktree prune`) is left to its owner."""
    write_plan(repo, "demo", {"a": intent("a", scope=["src/a"], acceptance=[("A1", "out", exists("src/a/out.txt"))])})
    start(repo, "demo")
    other = repo.parent / "someone-elses"
    git(repo, "worktree", "add", "-q", "--detach", str(other), "HEAD")
    admin = Path(git(other, "rev-parse", "--git-dir").strip())
    shutil.rmtree(other)                                     # its folder gone, its registration kept
    slot = repo / ".git" / "lanes" / "scratch" / "0"
    killed_add_before_commondir(repo, slot)
    (slot / ".git").unlink()                                 # and this slot's folder half gone too
    lane = provision(repo, "a")
    assert done(lane, {"src/a/out.txt": "x\n"})["passed"] is True
    report = ok(repo, "tick")
    assert child_of(report, "a")["state"] == "integrated", child_of(report, "a").get("reason")
    assert (admin / "gitdir").is_file()                      # not pruned by git-lanes
    assert (slot / "src" / "a" / "out.txt").is_file()


def test_only_an_unfinished_add_is_dropped(repo, tmp_path):
    from git_lanes.gitio import Git

    whole, unfinished = tmp_path / "whole", tmp_path / "unfinished"
    git(repo, "worktree", "add", "-q", "--detach", str(whole), "HEAD")
    git(repo, "worktree", "add", "-q", "--detach", str(unfinished), "HEAD")
    admin = Path(git(unfinished, "rev-parse", "--git-dir").strip())
    (admin / "commondir").unlink()
    work = Git(repo).work
    assert work.drop_unfinished(str(whole)) is False                 # finished: no `initializing` lock
    assert work.drop_unfinished(str(unfinished)) is False            # no lock either: Git's to judge
    (admin / "locked").write_text("initializing\n")
    assert work.drop_unfinished(str(unfinished)) is True
    assert whole.is_dir() and not unfinished.exists() and not admin.exists()
    assert str(whole) in git(repo, "worktree", "list")


def test_a_scratch_worktree_git_cannot_check_out_is_made_anew(repo):
    """A kill can leave the scratch worktree's split index naming a shared index that is gone; Git
    then refuses every checkout there. The pool's worktree is git-lanes' own: it is made anew."""
    write_plan(repo, "demo", {t: intent(t, scope=[f"src/{t}"], acceptance=[("A1", "out", exists(f"src/{t}/out.txt"))])
                              for t in ("a", "b")})
    start(repo, "demo", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    assert done(la, {"src/a/out.txt": "x\n"})["passed"] is True
    assert child_of(ok(repo, "tick"), "a")["state"] == "integrated"
    slot = repo / ".git" / "lanes" / "scratch" / "0"
    admin = Path(git(slot, "rev-parse", "--git-dir").strip())
    shared = list(admin.glob("sharedindex.*"))
    assert shared                                   # the slot's index is split
    for path in shared:
        path.unlink()
    assert subprocess.run(["git", "checkout", "-q", "-f", "--detach", "HEAD"], cwd=slot,
                          capture_output=True).returncode != 0      # Git itself refuses there now
    assert done(lb, {"src/b/out.txt": "x\n"})["passed"] is True
    report = ok(repo, "tick")
    assert child_of(report, "b")["state"] == "integrated", child_of(report, "b").get("reason")
    assert (slot / "src" / "b" / "out.txt").is_file()
