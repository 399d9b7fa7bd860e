"""Beyond one machine (SPEC §14): push / pull with leases and a tracking namespace, and join.

The remote is a local bare repository; the second machine is a clone of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import deliver, lane_path, lanes, lanes_json, write_initiative

TASKS = [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}]
FAMILIES = ("refs/notes/lanes/", "refs/heads/imm/", "refs/heads/imm-lane/")


def refs(root: Path) -> dict[str, str]:
    out = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    pairs = (line.rsplit(" ", 1) for line in out.splitlines())
    # (v4, SPEC §8.7) a clone's receipts are its own: push and pull leave them where they are
    return {name: oid for name, oid in pairs if name.startswith(FAMILIES) and "/lanes/receipts/" not in name}


def record_json(root: Path) -> dict:
    return json.loads(git(root, "show", "refs/notes/lanes/batch/demo:batch.json"))


def statuses(doc: dict) -> dict[str, str]:
    return {r["ref"]: r["status"] for r in doc["refs"]}


def ok(cwd: Path, *args: str):
    code, doc = lanes_json(cwd, *args)
    assert code == 0, doc
    return doc


def provision(repo: Path, task: str) -> Path:
    return Path(lane_path(ok(repo, "provision", task), task))


def finish(repo: Path, task: str, lane: Path | None = None) -> dict:
    """Deliver `task` in its lane and tick it to integrated."""
    lane = lane or provision(repo, task)
    deliver(str(lane), {f"src/{task}/out.txt": f"{task}\n"})
    code, out, err = lanes(lane, "done")
    assert code == 0, err
    report = ok(repo, "tick")
    assert {c["task_id"]: c["state"] for c in report["children"]}[task] == "integrated", report
    return report


def rogue_commit(bare: Path, ref: str) -> str:
    """A parentless commit someone else wrote to the remote's `ref` (a diverged value)."""
    tree = git(bare, "rev-parse", f"{ref}^{{tree}}").strip()
    commit = git(bare, "commit-tree", tree, "-m", "someone else").strip()
    git(bare, "update-ref", ref, commit)
    return commit


@pytest.fixture
def world(repo: Path, tmp_path: Path, request) -> dict[str, Path]:
    """A coordinator with task a integrated (so evidence exists), a bare remote `origin`. A test function
    with a `remote_timeout` attribute starts the batch with that lanes.remoteTimeout (the record keeps it)."""
    write_initiative(repo, "demo", TASKS)
    if getattr(request.function, "remote_timeout", None):
        git(repo, "config", "lanes.remoteTimeout", str(request.function.remote_timeout))
    ok(repo, "start", "demo", "--yes", "--max-parallel", "2")
    finish(repo, "a")
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return {"repo": repo, "bare": bare, "tmp": tmp_path}


def clone_of(world: dict[str, Path]) -> Path:
    clone = world["tmp"] / "clone"
    git(world["tmp"], "clone", "-q", str(world["bare"]), str(clone))
    return clone


def test_push_then_pull_round_trips_the_record_and_the_evidence(world):
    repo, bare = world["repo"], world["bare"]
    doc = ok(repo, "push")
    assert set(statuses(doc).values()) == {"pushed"}
    assert "refs/notes/lanes/evidence" in statuses(doc) and "refs/heads/imm/demo" in statuses(doc)
    assert "refs/notes/lanes/lane/demo/a" in statuses(doc) and "refs/heads/imm-lane/demo/a" in statuses(doc)
    assert refs(bare) == refs(repo)
    clone = clone_of(world)
    doc = ok(clone, "pull")
    assert set(statuses(doc).values()) == {"pulled"}
    assert refs(clone) == refs(repo)
    assert git(clone, "show", "refs/notes/lanes/batch/demo:batch.json") == \
        git(repo, "show", "refs/notes/lanes/batch/demo:batch.json")
    head = git(repo, "rev-parse", "imm/demo").strip()
    assert git(clone, "notes", "--ref=lanes/evidence", "show", head) == \
        git(repo, "notes", "--ref=lanes/evidence", "show", head)
    # fetched first into the separate namespace, never into refs/remotes or a branch directly
    assert git(clone, "for-each-ref", "--format=%(refname)", "refs/lanes-remotes/origin/notes/lanes/batch/")
    status = ok(clone, "status", "demo")
    assert {c["task_id"]: c["state"] for c in status["children"]} == {"a": "integrated", "b": "pending"}


def test_a_second_push_or_pull_with_nothing_new_moves_nothing(world):
    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    before = (refs(bare), refs(repo))
    code, out, err = lanes(repo, "push")
    assert code == 0, err
    assert out.splitlines() and all(line.startswith("up_to_date: ") for line in out.splitlines())
    assert (refs(bare), refs(repo)) == before
    doc = ok(repo, "pull")
    assert set(statuses(doc).values()) == {"up_to_date"}
    assert (refs(bare), refs(repo)) == before


def test_a_diverged_ref_is_remote_moved_for_push_and_pull_and_nobody_changes(world):
    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    clone = clone_of(world)
    ok(clone, "pull")
    ref = "refs/notes/lanes/batch/demo"
    rogue = rogue_commit(bare, ref)
    ours = refs(repo)[ref]
    for side in (repo, clone):
        code, doc = lanes_json(side, "push")
        assert code == 1 and statuses(doc)[ref] == "remote_moved", doc
        assert refs(bare)[ref] == rogue and refs(side)[ref] == ours
        code, doc = lanes_json(side, "pull")
        assert code == 1 and statuses(doc)[ref] == "remote_moved", doc
        assert refs(bare)[ref] == rogue and refs(side)[ref] == ours
    code, out, err = lanes(repo, "pull")
    assert code == 1 and f"remote_moved: {ref}" in out and "not pulled" in err


def test_pull_never_moves_a_checked_out_branch(world):
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    ok(clone, "pull")
    worktree = world["tmp"] / "clone-wt"
    git(clone, "worktree", "add", "-q", str(worktree), "imm/demo")
    old = refs(clone)["refs/heads/imm/demo"]
    finish(repo, "b")
    ok(repo, "push")
    code, doc = lanes_json(clone, "pull")
    assert code == 0, doc
    got = statuses(doc)
    assert got["refs/heads/imm/demo"] == "checked_out"
    assert refs(clone)["refs/heads/imm/demo"] == old
    assert got["refs/notes/lanes/batch/demo"] == "pulled"
    assert record_json(clone) == record_json(repo)
    code, out, err = lanes(clone, "pull")
    assert "checked_out: refs/heads/imm/demo" in out and "hint:" in err
    # the user pulls it with git in that worktree; then git-lanes sees it up to date
    git(worktree, "merge", "-q", "--ff-only", "refs/lanes-remotes/origin/heads/imm/demo")
    assert statuses(ok(clone, "pull"))["refs/heads/imm/demo"] == "up_to_date"


def test_diverged_refs_are_filtered_out_before_the_atomic_push(world):
    """A remote_moved ref is never part of the push, so it does not sink the refs that can go."""
    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    ref = "refs/notes/lanes/batch/demo"
    rogue = rogue_commit(bare, ref)
    finish(repo, "b")
    code, doc = lanes_json(repo, "push")
    assert code == 1
    got = statuses(doc)
    assert got[ref] == "remote_moved" and refs(bare)[ref] == rogue
    for pushed in ("refs/heads/imm/demo", "refs/notes/lanes/evidence", "refs/notes/lanes/lane/demo/b"):
        assert got[pushed] == "pushed" and refs(bare)[pushed] == refs(repo)[pushed]


def test_a_lease_that_fails_during_the_push_pushes_nothing_then_push_pulls_and_retries(world, monkeypatch):
    """The remote moves between the fetch and the push: the lease on that ref fails and, the push
    being atomic, no other ref is pushed either. `git lanes push` then pulls and tries again: the
    moved ref is now seen diverged (reported, never overwritten) and the others go."""
    from git_lanes.gitio import Git
    from git_lanes.remote import push
    from git_lanes.domain.session import Session

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    finish(repo, "b")
    before = refs(bare)
    raced = "refs/notes/lanes/evidence"
    real_run = Git.run

    def racing_run(self, *args, **kw):
        if args and args[0] == "push":
            rogue_commit(bare, raced)
        return real_run(self, *args, **kw)

    monkeypatch.setattr(Git, "run", racing_run)
    doc = push(Session(cwd=str(repo)))                 # one push
    sent = [r for r in doc["refs"] if r["status"] != "up_to_date"]
    assert len(sent) >= 3 and all(r["status"] == "rejected" for r in sent), doc
    assert "stale info" in next(r["message"] for r in sent if r["ref"] == raced)
    after = refs(bare)
    assert after[raced] != before[raced]
    assert {k: v for k, v in after.items() if k != raced} == {k: v for k, v in before.items() if k != raced}, \
        "an atomic push with a failed lease pushed something"
    git(bare, "update-ref", raced, before[raced])      # as it was: the command's first lease fails again
    code, doc = lanes_json(repo, "push")               # the command: pull, push again
    monkeypatch.undo()
    assert code == 1 and doc["attempts"] == 2
    assert statuses(doc)[raced] == "remote_moved" and refs(bare)[raced] != refs(repo)[raced]
    for ref in ("refs/notes/lanes/batch/demo", "refs/heads/imm/demo"):
        assert statuses(doc)[ref] == "pushed" and refs(bare)[ref] == refs(repo)[ref]


def test_push_replaces_a_value_this_repository_wrote_before(world):
    """The coordinator's lane commit replaces the executor's tip (not a fast-forward): the remote's
    value is one the ref held here, so it is pushed, with a lease on exactly that value."""
    repo, bare = world["repo"], world["bare"]
    lane = provision(repo, "b")
    deliver(str(lane), {"src/b/out.txt": "b\n"})
    git(lane, "add", "-A")
    git(lane, "commit", "-q", "-m", "executor work")
    ok(repo, "push")
    ref = "refs/heads/imm-lane/demo/b"
    executor_tip = refs(bare)[ref]
    finish(repo, "b", lane)
    assert refs(repo)[ref] != executor_tip
    doc = ok(repo, "push")
    item = next(r for r in doc["refs"] if r["ref"] == ref)
    assert item["status"] == "pushed" and item.get("rewound") is True and item["remote"] == executor_tip
    assert refs(bare)[ref] == refs(repo)[ref]


def test_pull_does_not_recreate_a_released_lane(world):
    repo = world["repo"]
    ok(repo, "push")
    assert ok(repo, "release", "a")["released"]
    assert "refs/heads/imm-lane/demo/a" not in refs(repo)
    doc = ok(repo, "pull")
    assert statuses(doc)["refs/heads/imm-lane/demo/a"] == "released"
    assert "refs/heads/imm-lane/demo/a" not in refs(repo)


def test_a_joined_lane_is_claimed_admitted_observed_integrated_and_released_from_refs(world):
    """SPEC §14 v3 step by step: join (claim, atomic push), admission on refs after a pull, done in
    the other clone, lane commit pushed back, the executor's branch follows on pull, release there,
    released and the branch deleted by the coordinator; audit finds nothing."""
    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    clone = clone_of(world)
    mine = world["tmp"] / "mine"
    mine.mkdir()   # the user's own folder, empty: the lane's release leaves it
    target = mine / "joined-b"
    doc = ok(clone, "join", "demo", "b", "--path", str(target))   # join pulls first
    base = git(repo, "rev-parse", "imm/demo").strip()
    assert doc["lane_branch"] == "imm-lane/demo/b" and doc["base_head"] == base and doc["admitted"] is False
    assert os.path.realpath(doc["lane_path"]) == os.path.realpath(target)
    assert git(target, "symbolic-ref", "HEAD").strip() == "refs/heads/imm-lane/demo/b"
    clone_id = git(clone, "config", "lanes.cloneId").strip()
    claim = doc["claim"]
    assert claim["clone_id"] == clone_id and claim["heartbeat_at"] == claim["at"] and claim["run_id"]
    # branch and record travelled together
    assert refs(bare)["refs/heads/imm-lane/demo/b"] == base
    lane_json = json.loads(git(bare, "show", "refs/notes/lanes/lane/demo/b:lane.json"))
    assert lane_json["claim"] == claim and lane_json["run_id"] == claim["run_id"] and lane_json["record_revision"] == 1
    # not admitted yet: done refuses and writes nothing
    deliver(str(target), {"src/b/out.txt": "b\n"})
    before = refs(clone)
    code, out, err = lanes(target, "done")
    assert code == 1 and "batch_lane_not_enrolled" in err
    assert refs(clone) == before
    # the coordinator admits the claim from refs after a pull
    assert statuses(ok(repo, "pull"))["refs/notes/lanes/lane/demo/b"] == "pulled"
    report = ok(repo, "tick")
    child = next(c for c in report["children"] if c["task_id"] == "b")
    assert child["state"] == "enrolled", report
    assert child["lane"]["path"] is None and child["lane"]["remote"] == {"clone_id": clone_id, "host": claim["host"]}
    assert child["lane"]["run_id"] == claim["run_id"] and child["lane"]["base_head"] == base
    hand = next(h for h in report["handoffs"] if h["task_id"] == "b")
    assert hand["role"] == "executor" and hand["lane_path"] is None and hand["remote"]["clone_id"] == clone_id
    ok(repo, "push")
    # the executor works once a pull shows it enrolled; its commit travels with the lane record
    ok(clone, "pull")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "executor work on b")
    executor_commit = git(target, "rev-parse", "HEAD").strip()
    code, out, err = lanes(target, "done")
    assert code == 0, err
    record_tip = git(clone, "rev-parse", "refs/notes/lanes/lane/demo/b").strip()
    assert executor_commit in git(clone, "log", "--format=%P", "-1", record_tip).split()
    doc = ok(clone, "push")
    assert statuses(doc)["refs/notes/lanes/lane/demo/b"] == "pushed"
    assert statuses(doc)["refs/heads/imm-lane/demo/b"] == "pushed"
    ok(repo, "pull")
    report = ok(repo, "tick")
    child = next(c for c in report["children"] if c["task_id"] == "b")
    assert child["state"] == "integrated", report
    lane_commit = child["lane"]["lane_commit"]
    assert child["lane"]["executor_commits"] == [executor_commit]
    assert git(repo, "log", "-1", "--format=%an", lane_commit).strip() == "Ada Author"
    assert refs(repo)["refs/heads/imm-lane/demo/b"] == lane_commit
    doc = ok(repo, "push")
    item = next(r for r in doc["refs"] if r["ref"] == "refs/heads/imm-lane/demo/b")
    assert item["status"] == "pushed" and item["rewound"] is True and item["remote"] == executor_commit
    assert refs(bare)["refs/heads/imm-lane/demo/b"] == lane_commit
    # the clone pushes before it pulls: its executor tip was replaced by the lane commit, not diverged
    assert statuses(ok(clone, "push"))["refs/heads/imm-lane/demo/b"] == "remote_ahead"
    # pull moves the checked-out lane branch to the lane commit (its delivery is that tree) and refreshes the index
    doc = ok(clone, "pull")
    item = next(r for r in doc["refs"] if r["ref"] == "refs/heads/imm-lane/demo/b")
    assert item["status"] == "pulled" and item["remote"] == lane_commit and item["rewound"] is True
    assert git(target, "rev-parse", "HEAD").strip() == lane_commit
    assert git(target, "status", "--porcelain", "--untracked-files=all") == ""
    # the release handoff names the remote lane; release happens in its clone
    code, out, err = lanes(repo, "release", "b")
    assert code == 1 and "batch_lane_release_refused" in err and clone_id in err
    status = ok(clone, "status", "demo")
    release = next(h for h in status["handoffs"] if h.get("action") == "release" and h["task_id"] == "b")
    assert release["remote"]["clone_id"] == clone_id and release["lane_path"] is None
    doc = ok(clone, "release", "b")
    assert doc["released"][0]["pushed"] is True
    assert not target.exists() and "refs/heads/imm-lane/demo/b" not in refs(clone)
    assert mine.is_dir()
    assert json.loads(git(bare, "show", "refs/notes/lanes/lane/demo/b:lane.json"))["released"]["at"]
    # the clone pulls before the coordinator has recorded the release: the branch it released stays gone
    doc = ok(clone, "pull")
    assert statuses(doc)["refs/heads/imm-lane/demo/b"] == "released"
    assert "refs/heads/imm-lane/demo/b" not in refs(clone)
    ok(repo, "pull")
    report = ok(repo, "tick")
    assert next(c for c in report["children"] if c["task_id"] == "b")["state"] == "released"
    doc = ok(repo, "push")
    assert statuses(doc)["refs/heads/imm-lane/demo/b"] == "deleted"
    ok(clone, "pull")
    for side in (repo, bare, clone):
        assert "refs/heads/imm-lane/demo/b" not in refs(side)
    ok(repo, "release", "a")   # the local lane of the fixture
    code, out, err = lanes(repo, "audit", "demo")
    assert code == 0, out + err
    # a copy of a released lane's branch is never pushed back where it is gone
    git(bare, "update-ref", "-d", "refs/heads/imm-lane/demo/a")
    ok(repo, "push")
    assert statuses(ok(clone, "push"))["refs/heads/imm-lane/demo/a"] == "released"
    assert "refs/heads/imm-lane/demo/a" not in refs(bare)


def test_join_refusals(world):
    repo = world["repo"]
    ok(repo, "push")
    code, out, err = lanes(repo, "join", "demo", "b")
    assert code == 2 and "git lanes provision b" in err
    clone = clone_of(world)
    code, out, err = lanes(clone, "join", "demo", "a")
    assert code == 1 and "batch_lane_unknown_child" in err            # integrated: no provision handoff
    code, out, err = lanes(clone, "join", "demo", "b", "--remote", "nowhere")
    assert code == 2 and "no remote 'nowhere'" in err
    first = ok(clone, "join", "b", "--path", str(world["tmp"] / "one"))   # the slug is found after the pull
    again = ok(clone, "join", "demo", "b")
    assert again["already_joined"] is True and again["claim"] == first["claim"]
    assert ok(clone, "join", "b", "--slug", "demo")["claim"] == first["claim"]   # --slug, as every task command
    code, out, err = lanes(clone, "join", "other", "b", "--slug", "demo")
    assert code == 2 and "--slug demo and the slug argument other differ" in err
    other = world["tmp"] / "clone2"
    git(world["tmp"], "clone", "-q", str(world["bare"]), str(other))
    code, out, err = lanes(other, "join", "demo", "b")
    assert code == 1 and f"batch_lane_claimed: b by {first['claim']['clone_id']}" in err
    assert "refs/heads/imm-lane/demo/b" not in refs(other)          # another clone's lane: never copied here
    assert git(other, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_path_remote_and_a_missing_remote(world):
    repo, bare = world["repo"], world["bare"]
    doc = ok(repo, "push", str(bare))
    assert set(statuses(doc).values()) == {"pushed"}
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/lanes-remotes/").startswith("refs/lanes-remotes/url-")
    code, out, err = lanes(repo, "push", "nowhere")
    assert code == 2 and "no remote 'nowhere'" in err


# -- races and stale views (SPEC §14 v3: one writer per ref, nothing lost) -----------------------------------

def joined_and_enrolled(world, task: str = "b"):
    """A clone that joined `task`, admitted by the coordinator; both sides pulled. (clone, lane path)"""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    target = world["tmp"] / f"lane-{task}"
    ok(clone, "join", "demo", task, "--path", str(target))
    ok(repo, "pull")
    assert {c["task_id"]: c["state"] for c in ok(repo, "tick")["children"]}[task] == "enrolled"
    ok(repo, "push")
    ok(clone, "pull")
    return clone, target


def lane_record(repo: Path, task: str = "b") -> dict:
    ref = f"refs/notes/lanes/lane/demo/{task}"
    data = json.loads(git(repo, "show", f"{ref}:lane.json"))
    data["attempts"] = git(repo, "ls-tree", "--name-only", f"{ref}:attempts").split() if \
        "attempts" in git(repo, "ls-tree", "--name-only", ref) else []
    return data


def test_a_claim_race_between_two_clones_leaves_one_lane_and_nothing_of_the_loser(world, monkeypatch):
    """Both clones pulled the same handoff; east's claim reaches the server between west's pull and west's
    atomic push: west's lease fails, west removes what it created and names the winner."""
    from git_lanes.remote import claims

    repo, bare, tmp = world["repo"], world["bare"], world["tmp"]
    ok(repo, "push")
    east = clone_of(world)
    west = tmp / "west"
    git(tmp, "clone", "-q", str(bare), str(west))
    real = claims.push_atomic
    raced: list[str] = []

    def racing(git_, target, sends):
        if not raced:
            raced.append("east")
            code, out, err = lanes(east, "join", "demo", "b", "--path", str(tmp / "east-b"))
            assert code == 0, err
        return real(git_, target, sends)

    monkeypatch.setattr(claims, "push_atomic", racing)
    (tmp / "kept").mkdir()   # the user's empty folder; `made` is the join's
    code, out, err = lanes(west, "join", "demo", "b", "--path", str(tmp / "kept" / "made" / "west-b"))
    monkeypatch.undo()
    east_id = git(east, "config", "lanes.cloneId").strip()
    assert raced and code == 1 and f"batch_lane_claimed: b by {east_id}" in err
    assert not (tmp / "kept" / "made").exists() and (tmp / "kept").is_dir()
    assert git(west, "worktree", "list", "--porcelain").count("worktree ") == 1
    ref = "refs/notes/lanes/lane/demo/b"
    assert refs(west)[ref] == refs(bare)[ref] == refs(east)[ref]     # west keeps only a copy of east's claim
    assert lane_record(bare)["claim"]["clone_id"] == east_id and lane_record(bare)["record_revision"] == 1
    assert refs(bare)["refs/heads/imm-lane/demo/b"] == refs(east)["refs/heads/imm-lane/demo/b"]
    ok(repo, "pull")
    child = next(c for c in ok(repo, "tick")["children"] if c["task_id"] == "b")
    assert child["state"] == "enrolled" and child["lane"]["remote"]["clone_id"] == east_id


def test_a_lane_done_racing_a_coordinator_state_write_loses_neither(world, monkeypatch):
    """The lane's done and push land between the coordinator's fetch and its atomic push of a new
    state: different writers, different refs; both writes end on the server."""
    from git_lanes.remote import replicate

    repo, bare = world["repo"], world["bare"]
    clone, target = joined_and_enrolled(world)
    deliver(str(target), {"src/b/out.txt": "b\n"})
    code, out, err = lanes(repo, "instruct", "b", "--message", "mind the tests", "--session-state", "idle")
    assert code == 0, err
    real = replicate.push_atomic
    fired: list[int] = []

    def racing(git_, url, sends):
        if not fired:
            fired.append(1)
            code, out, err = lanes(target, "done")
            assert code == 0, err
            assert statuses(ok(clone, "push"))["refs/notes/lanes/lane/demo/b"] == "pushed"
        return real(git_, url, sends)

    monkeypatch.setattr(replicate, "push_atomic", racing)
    doc = ok(repo, "push")
    monkeypatch.undo()
    assert fired and statuses(doc)["refs/notes/lanes/batch/demo"] == "pushed"
    assert refs(bare)["refs/notes/lanes/batch/demo"] == refs(repo)["refs/notes/lanes/batch/demo"]
    assert len(lane_record(bare)["attempts"]) == 1
    assert [i["text"] for i in ok(repo, "status", "demo")["interventions"]] == ["mind the tests"]
    ok(repo, "pull")
    report = ok(repo, "tick")
    assert {c["task_id"]: c["state"] for c in report["children"]}["b"] == "integrated", report


def test_a_stale_coordinator_pull_overwrites_nothing_and_the_next_round_integrates(world):
    repo, bare = world["repo"], world["bare"]
    clone, target = joined_and_enrolled(world)
    ok(repo, "pull")                                   # the coordinator's view: no attempt yet
    deliver(str(target), {"src/b/out.txt": "b\n"})
    assert lanes(target, "done")[0] == 0
    ok(clone, "push")                                  # the attempt is on the server now
    report = ok(repo, "tick")                          # ticks on its stale copy
    assert {c["task_id"]: c["state"] for c in report["children"]}["b"] == "enrolled"
    doc = ok(repo, "push")
    assert statuses(doc)["refs/notes/lanes/lane/demo/b"] == "remote_ahead"
    assert len(lane_record(bare)["attempts"]) == 1     # the lane's newer record stayed
    assert refs(repo)["refs/notes/lanes/lane/demo/b"] != refs(bare)["refs/notes/lanes/lane/demo/b"]
    ok(repo, "pull")
    report = ok(repo, "tick")
    assert {c["task_id"]: c["state"] for c in report["children"]}["b"] == "integrated", report


def test_a_lease_failure_re_pulls_and_retries_then_gives_up_as_remote_moved(world, monkeypatch):
    """Another process of the coordinator's repository pushes a newer state between this push's fetch
    and its push: the lease fails, the push re-pulls and retries, and nothing is lost. A server that
    keeps refusing ends, after 5 tries, in remote_moved with nothing pushed (the push is atomic)."""
    from git_lanes.core.errors import LanesError
    from git_lanes.remote import claims, replicate
    from git_lanes.domain.session import Session

    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    finish(repo, "b")
    real_push, real_pull = replicate.push_atomic, replicate.pull
    pulls: list[int] = []
    fired: list[int] = []

    def another_coordinator_push(git_, url, sends):
        if not fired:
            fired.append(1)
            ok(repo, "release", "b")                                     # a newer state write...
            subprocess.run(["git", "lanes", "push"], cwd=repo, check=True, capture_output=True)   # ...pushed first
        return real_push(git_, url, sends)

    def counting_pull(*args, **kw):
        pulls.append(1)
        return real_pull(*args, **kw)

    monkeypatch.setattr(replicate, "push_atomic", another_coordinator_push)
    monkeypatch.setattr(replicate, "pull", counting_pull)
    doc = claims.sync_push(Session(cwd=str(repo)), "origin")
    assert fired and pulls == [1]                      # the lease failed once: re-pulled, retried
    assert not [r for r in doc["refs"] if r["status"] in ("rejected", "remote_moved")]
    assert refs(bare)["refs/notes/lanes/batch/demo"] == refs(repo)["refs/notes/lanes/batch/demo"]
    assert {c["task_id"]: c["state"] for c in ok(repo, "status", "demo")["children"]}["b"] == "released"

    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'no pushes today' >&2\nexit 1\n")
    hook.chmod(0o755)
    ok(repo, "release", "a")                           # something to push
    before = refs(bare)
    pulls.clear()
    with pytest.raises(LanesError) as failed:
        claims.sync_push(Session(cwd=str(repo)), "origin")
    assert failed.value.code == "remote_moved" and len(pulls) == 4      # five pushes, pulling between them
    assert refs(bare) == before


def test_a_claim_whose_branch_moved_before_admission_is_refused_on_refs(world):
    """§6.1's rules on refs: a claim whose lane branch is not a batch-branch commit is refused with the same
    code, reported with its remote locator, and the child stays pending."""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    target = world["tmp"] / "early"
    doc = ok(clone, "join", "demo", "b", "--path", str(target))
    deliver(str(target), {"src/b/out.txt": "b\n"})
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "too early")
    ok(clone, "push")
    ok(repo, "pull")
    report = ok(repo, "tick")
    assert {c["task_id"]: c["state"] for c in report["children"]}["b"] == "pending"
    assert report["lane_refusals"] == [{"task_id": "b", "path": None, "remote": {
        "clone_id": doc["claim"]["clone_id"], "host": doc["claim"]["host"]}, "reason": "batch_lane_base_mismatch"}]


def test_heartbeat_silence_counts_a_future_heartbeat_as_now():
    from git_lanes.domain.lanehost import silence
    from git_lanes.core.model import Claim

    claim = Claim(at="2026-01-01T00:00:00.000Z", clone_id="c1", host="h", run_id="r",
                  heartbeat_at="2026-01-01T00:09:00.000Z")
    assert silence(claim, "2026-01-01T00:19:00.000Z", 600) is None
    assert silence(claim, "2026-01-01T00:19:00.001Z", 600) == "no heartbeat from c1 since 2026-01-01T00:09:00.000Z"
    assert silence(claim, "2025-12-31T23:00:00.000Z", 600) is None          # in the coordinator's future
    old = claim.model_copy(update={"heartbeat_at": None})
    assert silence(old, "2026-01-01T00:10:00.001Z", 600) == "no heartbeat from c1 since 2026-01-01T00:00:00.000Z"


def test_heartbeats_keep_a_remote_lane_and_their_absence_parks_it_lost(world):
    import time

    from git_lanes.lane.side import heartbeat
    from git_lanes.domain.session import Session

    repo = world["repo"]
    clone, target = joined_and_enrolled(world)
    run_id = lane_record(clone)["run_id"]
    clone_id = git(clone, "config", "lanes.cloneId").strip()
    git(repo, "config", "lanes.remoteRestarts", "0")   # at the limit at once: it parks (else it restarts)
    time.sleep(3.2)
    assert heartbeat(Session(cwd=str(clone)), "demo", "b", run_id) is True
    beat = lane_record(clone)["claim"]["heartbeat_at"]
    ok(clone, "push")
    ok(repo, "pull")
    assert {c["task_id"]: c["state"] for c in ok(repo, "tick")["children"]}["b"] == "enrolled"
    time.sleep(3.2)
    ok(repo, "pull")
    child = next(c for c in ok(repo, "tick")["children"] if c["task_id"] == "b")
    assert child["state"] == "needs_human"
    assert child["reason"] == f"batch_lane_lost: no heartbeat from {clone_id} since {beat}"
    # a parked remote lane of a finished batch goes with release --stale, its tip kept by the record
    tip = refs(repo)["refs/heads/imm-lane/demo/b"]
    ok(repo, "retire", "demo", "--yes")
    doc = ok(repo, "release", "--stale", "demo")
    assert [r["task_id"] for r in doc["released"]] == ["a", "b"]   # a: the fixture's local lane
    assert "refs/heads/imm-lane/demo/b" not in refs(repo)
    assert git(repo, "merge-base", "--is-ancestor", tip, "refs/notes/lanes/batch/demo") == ""


test_heartbeats_keep_a_remote_lane_and_their_absence_parks_it_lost.remote_timeout = 3   # type: ignore[attr-defined]


def test_work_once_runs_an_admitted_lane_and_pushes_its_done(world, tmp_path):
    """`work --once`: one round in the clone (the admitted lane's session, done, push); then the
    coordinator integrates it."""
    import sys

    repo, bare = world["repo"], world["bare"]
    clone, target = joined_and_enrolled(world)
    script = tmp_path / "exec.py"
    script.write_text("import os, pathlib\n"
                      "p = pathlib.Path('src', os.environ['GIT_LANES_TASK'], 'out.txt')\n"
                      "p.parent.mkdir(parents=True, exist_ok=True)\np.write_text('done\\n')\n")
    code, out, err = lanes(clone, "work", "demo", "--remote", "origin", "--executor", f"{sys.executable} {script}",
                           "--once")
    assert code == 0, out + err
    assert "b: session 1 started" in out and "done: passed" in out
    assert len(lane_record(bare)["attempts"]) == 1
    ok(repo, "pull")
    assert {c["task_id"]: c["state"] for c in ok(repo, "tick")["children"]}["b"] == "integrated"
    code, out, err = lanes(repo, "run", "demo", "--remote", "nowhere", "--yes")
    assert code == 2 and "no remote named 'nowhere'" in err


def test_push_and_pull_fetch_only_into_their_own_namespace_not_refs_remotes(world):
    """`git fetch origin <refspecs>` also updates `refs/remotes/origin/*` on the way (Git's
    opportunistic update): refs of the user's, and a second writer that raced a concurrent fetch
    (`cannot lock ref`). Our fetches write only `refs/lanes-remotes/origin/`."""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    for ref in git(clone, "for-each-ref", "--format=%(refname)", "refs/remotes/origin/imm/",
                   "refs/remotes/origin/imm-lane/").split():
        git(clone, "update-ref", "-d", ref)   # what `git clone` made; our fetches must not make them again
    before = git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes/")
    assert "imm" not in before
    ok(clone, "pull")
    ok(clone, "push")
    assert git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes/") == before
    assert git(clone, "for-each-ref", "--format=%(refname)", "refs/lanes-remotes/origin/heads/imm/")


def test_a_pull_waits_for_another_fetch_into_its_namespace_then_is_busy_and_writes_nothing(world):
    """Two fetches into one tracking namespace would race on its refs: the second waits for the
    first's lock up to lanes.lockTimeout, then fails `batch_busy`, having fetched nothing."""
    import threading

    from git_lanes.gitio import Git
    from git_lanes.store import fetch_lock

    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    git(clone, "config", "lanes.lockTimeout", "1")
    before = refs(clone)
    held, done = threading.Event(), threading.Event()

    def fetching():
        with fetch_lock(Git(clone), "refs/lanes-remotes/origin/", timeout=5):
            held.set()
            done.wait(20)

    t = threading.Thread(target=fetching)
    t.start()
    try:
        assert held.wait(5)
        code, out, err = lanes(clone, "pull")
    finally:
        done.set()
        t.join()
    assert code == 1 and err.startswith("error: batch_busy: another git-lanes command is fetching into "
                                        "refs/lanes-remotes/origin/ (waited 1 s; lanes.lockTimeout)"), err
    assert refs(clone) == before
    assert set(statuses(ok(clone, "pull")).values()) == {"pulled"}   # the lock free: the pull goes on


def test_a_push_whose_lease_failed_on_every_try_reports_remote_moved(world, monkeypatch):
    """SPEC §14 v3: a lease failure re-pulls and retries, at most 5 times, before reporting
    `remote_moved` (what the last try left `rejected`), with `error: remote_moved: …`."""
    import git_lanes.remote as remote

    last = {"remote": "origin", "attempts": 5, "refs": [
        {"ref": "refs/heads/imm/demo", "status": "rejected", "local": "1" * 40, "remote": "2" * 40},
        {"ref": "refs/notes/lanes/batch/demo", "status": "up_to_date", "local": "3" * 40, "remote": "3" * 40}]}
    monkeypatch.setattr(remote, "push_retrying", lambda s, name: json.loads(json.dumps(last)))
    code, out, err = lanes(world["repo"], "push")
    assert code == 1
    assert out.splitlines() == ["remote_moved: refs/heads/imm/demo", "up_to_date: refs/notes/lanes/batch/demo"]
    assert err.strip() == "error: remote_moved: 1 ref(s) not pushed (diverged or rejected): refs/heads/imm/demo"
    code, doc = lanes_json(world["repo"], "push")
    assert code == 1 and statuses(doc)["refs/heads/imm/demo"] == "remote_moved"


def test_a_record_that_diverged_is_never_pushed_over_even_when_the_reflog_held_the_remote_value(world):
    """SPEC §14: never a blind force; each ref has one writer. A batch record (it only grows) that
    diverged from the remote is remote_moved, even when this clone's reflog once held the remote's
    value (only a lane branch is replaced by its writer: `rewound`)."""
    repo, bare = world["repo"], world["bare"]
    ok(repo, "push")
    clone = clone_of(world)
    ok(clone, "pull")
    ref = "refs/notes/lanes/batch/demo"
    remote_value = refs(bare)[ref]
    tree = git(clone, "write-tree").strip()
    stray = git(clone, "commit-tree", tree, "-m", "not a record").strip()
    git(clone, "update-ref", ref, stray)          # the pulled value is in this ref's reflog
    code, doc = lanes_json(clone, "push")
    assert code == 1 and statuses(doc)[ref] == "remote_moved" and "rewound" not in next(
        r for r in doc["refs"] if r["ref"] == ref)
    assert refs(bare)[ref] == remote_value


def test_a_lock_file_a_killed_fetch_left_never_stops_pull_or_push(world):
    """SPEC §15: a `.lock` under the private fetch namespace (its every writer holds the fetch lock) is
    removed at once; an old `packed-refs.lock` once it is stale. Neither stops pull or push for good."""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    ok(clone, "pull")
    mirrored = clone / ".git" / "refs" / "lanes-remotes" / "origin" / "notes" / "lanes" / "batch" / "demo.lock"
    mirrored.write_text("")
    old = time.time() - 3600
    os.utime(mirrored, (old, old))
    finish(repo, "b")
    ok(repo, "push")
    code, out, err = lanes(clone, "pull", "--json")
    assert code == 0 and "removed stale lock file" in err and not mirrored.exists(), err
    assert statuses(json.loads(out))["refs/notes/lanes/batch/demo"] == "pulled"
    head = git(repo, "rev-parse", "imm/demo").strip()
    git(world["bare"], "update-ref", "refs/heads/imm/other", head)
    ok(clone, "pull")
    git(clone, "pack-refs", "--all")   # the mirrored refs are packed: pruning one rewrites packed-refs
    git(world["bare"], "update-ref", "-d", "refs/heads/imm/other")
    packed = clone / ".git" / "packed-refs.lock"
    packed.write_text("")
    os.utime(packed, (old, old))
    code, out, err = lanes(clone, "pull", "--json")
    assert code == 0 and not packed.exists(), err
    assert "imm/other" not in git(clone, "for-each-ref", "refs/lanes-remotes/")


def test_run_remote_in_a_clone_that_has_not_pulled_continues_the_pushed_batch(world):
    """SPEC §14: `run --remote` starts the batch only when none is active, and which is active is the
    remote's to say: it pulls first (it used to start a second batch and loop on remote_moved)."""
    repo = world["repo"]
    lane = provision(repo, "b")
    assert lanes(lane, "done", "--give-up", "-m", "stuck")[0] == 0
    parked = ok(repo, "tick")
    assert parked["batch_state"] == "needs_human"
    ok(repo, "push")
    clone = clone_of(world)
    code, out, err = lanes(clone, "run", "demo", "--remote", "origin", "--yes")
    assert code == 1 and f"batch {parked['batch_id']} needs a human decision" in err, err
    assert "then continue with: git lanes run demo --remote origin" in out, out
    assert record_json(clone)["batch_id"] == parked["batch_id"]
    assert git(world["bare"], "rev-parse", "refs/notes/lanes/batch/demo") == \
        git(repo, "rev-parse", "refs/notes/lanes/batch/demo")


def test_a_join_killed_after_its_worktree_was_added_is_joined_again(world):
    """SPEC §15: crash anywhere, the next command goes on. A join killed before its claim was written
    left an unclaimed, empty lane that refused every later join (batch_lane_branch_exists) for ever."""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    target = world["tmp"] / "lane-b"
    env = dict(os.environ, GIT_LANES_CRASH_AT="worktree-added")
    killed = subprocess.run(["git", "lanes", "join", "demo", "b", "--path", str(target)], cwd=clone, env=env,
                            capture_output=True, text=True)
    assert killed.returncode != 0 and target.is_dir()
    code, out, err = lanes(clone, "join", "demo", "b", "--path", str(target), "--json")
    assert code == 0 and "an interrupted join left" in err, err
    ok(repo, "pull")
    assert {c["task_id"]: c["state"] for c in ok(repo, "tick")["children"]}["b"] == "enrolled"


def test_heartbeats_go_on_while_the_loop_is_busy_with_one_long_step(repo):
    """SPEC §14: heartbeats every `lanes.remoteTimeout / 3` "whatever its sessions are doing": a join
    running a long `lanes.setupCommand` beats from a thread of its own, with a session of its own."""
    from git_lanes.remote.heartbeats import beating

    seen, events = [], []
    with beating(lambda s: seen.append(s.git.cwd), str(repo), events.append, poll=0.02):
        time.sleep(0.3)   # the long step
    count = len(seen)
    time.sleep(0.1)
    assert count >= 5 and len(seen) == count and set(seen) == {str(repo)} and events == []

    def broken(s):
        raise RuntimeError("no network")

    with beating(broken, str(repo), events.append, poll=0.02):
        time.sleep(0.1)
    assert events == ["heartbeat failed: no network"]   # said once; the step itself goes on


def test_a_join_killed_while_pushing_its_claim_and_then_beaten_is_undone_by_the_next_join(world, monkeypatch):
    """West's join dies in its push (nothing undone); east then claims the task. West's next join used to
    say already_joined while its record diverged from the server's for ever: it now finds the remote's
    other claim, undoes what its lost join made, and refuses batch_lane_claimed (SPEC §14, §15)."""
    from git_lanes.remote import claims

    repo, bare, tmp = world["repo"], world["bare"], world["tmp"]
    ok(repo, "push")
    east = clone_of(world)
    west = tmp / "west"
    git(tmp, "clone", "-q", str(bare), str(west))

    def killed(git_, target, sends):
        raise KeyboardInterrupt   # the process dies before its push: no undo runs

    monkeypatch.setattr(claims, "push_atomic", killed)
    code, out, err = lanes(west, "join", "demo", "b", "--path", str(tmp / "west-b"))
    monkeypatch.undo()
    assert code != 0 and (tmp / "west-b").is_dir()
    ok(east, "join", "demo", "b", "--path", str(tmp / "east-b"))
    east_id = git(east, "config", "lanes.cloneId").strip()
    code, out, err = lanes(west, "join", "demo", "b", "--path", str(tmp / "west-b"))
    assert code == 1 and f"batch_lane_claimed: b by {east_id}" in err, err
    assert not (tmp / "west-b").exists()
    ref = "refs/notes/lanes/lane/demo/b"
    assert refs(west)[ref] == refs(bare)[ref]
    doc = ok(west, "pull")
    assert statuses(doc)[ref] in ("up_to_date", "pulled"), doc


def test_a_lane_a_killed_join_left_is_kept_once_something_is_in_it(world):
    """Only an empty lane is taken for the debris of a killed join: a file in it is someone's work."""
    repo = world["repo"]
    ok(repo, "push")
    clone = clone_of(world)
    target = world["tmp"] / "lane-b"
    env = dict(os.environ, GIT_LANES_CRASH_AT="worktree-added")
    subprocess.run(["git", "lanes", "join", "demo", "b", "--path", str(target)], cwd=clone, env=env,
                   capture_output=True, text=True)
    (target / "notes.txt").write_text("mine\n")
    code, out, err = lanes(clone, "join", "demo", "b", "--path", str(target))
    assert code == 1 and "batch_lane_branch_exists" in err, err
    assert (target / "notes.txt").read_text() == "mine\n"
