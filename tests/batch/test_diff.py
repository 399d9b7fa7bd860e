"""`git lanes diff <task>` (SPEC §6 v3), through the installed `git lanes`: a child's change against its lane
base, from its lane commit, else its last attempt, else a fresh snapshot of its lane; as `git diff` shows it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, states, world, write_plan


def simple(task: str) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))])


def diff(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", "diff", *args], cwd=cwd, capture_output=True, text=True)


def test_diff_follows_the_child_from_its_lane_to_its_lane_commit(repo):
    (repo / "src").mkdir()
    (repo / "src" / "a").mkdir()
    (repo / "src" / "a" / "old.txt").write_text("old\n")
    (repo / "src" / "a" / "gone.txt").write_text("gone\n")
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    start(repo, "demo", "--max-parallel", "2")
    la, lb = provision(repo, "a"), provision(repo, "b")
    base = child_of(ok(repo, "status"), "a")["lane"]["base_head"]
    # nothing delivered yet: a fresh snapshot of the lane, written to the object store only
    (la / "src" / "a" / "out.txt").write_text("new\n")
    (la / "src" / "a" / "old.txt").write_text("changed\n")
    (la / "src" / "a" / "gone.txt").unlink()
    (la / "README").write_text("outside\n")
    before = world(repo, la)
    code, doc, err = cli(repo, "diff", "a")
    assert code == 0, err
    assert world(repo, la) == before                                    # read-only, the lane untouched
    assert (doc["task_id"], doc["base"], doc["source"]) == ("a", base, "lane")
    assert doc["paths"] == [{"path": "README", "status": "M"}, {"path": "src/a/gone.txt", "status": "D"},
                            {"path": "src/a/old.txt", "status": "M"}, {"path": "src/a/out.txt", "status": "A"}]
    assert doc["outside_scope"] == ["README"]
    assert git(repo, "cat-file", "-t", doc["tree"]).strip() == "tree"
    proc = diff(repo, "a", "--name-status")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["M\tREADME", "D\tsrc/a/gone.txt", "M\tsrc/a/old.txt", "A\tsrc/a/out.txt"]
    assert "warning: a changes paths outside its scope: README" in proc.stderr
    # an attempt: its tree
    git(la, "checkout", "--", "README")
    attempt = done(la)
    assert attempt["passed"] is True
    code, doc, err = cli(repo, "diff", "a")
    assert (doc["source"], doc["tree"], doc["outside_scope"]) == ("attempt", attempt["tree"], [])
    proc = diff(repo, "a")                                              # as git diff shows it
    assert "diff --git a/src/a/old.txt b/src/a/old.txt" in proc.stdout and "+changed" in proc.stdout
    assert "\x1b[" not in proc.stdout                                   # no terminal, no colour (Git's rule)
    stat = diff(repo, "a", "--stat").stdout
    assert "3 files changed" in stat
    # integrated after a sibling: still only its own change (its lane commit), not the sibling's
    assert done(lb, {"src/b/out.txt": "b\n"})["passed"] is True
    ok(repo, "integrate", "--slug", "demo", "b")                     # --slug, as every command naming a task
    report = ok(repo, "tick")
    assert states(report) == {"a": "integrated", "b": "integrated"}
    code, doc, err = cli(repo, "diff", "a")
    assert doc["source"] == "commit" and [p["path"] for p in doc["paths"]] == [
        "src/a/gone.txt", "src/a/old.txt", "src/a/out.txt"]


def test_diff_usage_errors(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    start(repo, "demo")
    provision(repo, "a")
    for args, needle in ((("a", "--stat", "--name-status"), "mutually exclusive"),
                         (("zz",), "zz is not a child"),
                         (("b",), "b has no lane")):
        proc = diff(repo, *args)
        assert proc.returncode == 2 and proc.stdout == "" and needle in proc.stderr, (args, proc.stderr)


def test_a_path_that_is_not_utf8_is_quoted_as_git_quotes_it_in_the_json(repo):
    """SPEC §8 v3: a path that is not valid UTF-8 is reported with Git's own quoting, in paths[] as
    in outside_scope (the document stays valid UTF-8 JSON)."""
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    la = provision(repo, "a")
    (la / "src" / "a").mkdir(parents=True)
    with open(os.path.join(os.fsencode(la / "src" / "a"), b"bad\xff.txt"), "wb") as fh:
        fh.write(b"x\n")
    proc = subprocess.run(["git", "lanes", "diff", "a", "--json"], cwd=repo, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.decode("utf-8"))   # strict: raw bytes would not decode
    assert doc["paths"] == [{"path": '"src/a/bad\\377.txt"', "status": "A"}]
    assert git(la, "status", "--porcelain", "-uall").strip() == '?? "src/a/bad\\377.txt"'   # as Git quotes it
