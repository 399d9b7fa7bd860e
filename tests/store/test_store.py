"""The notes-backed record store: layout, compare-and-swap, cost of a write, the lock."""

from __future__ import annotations

import threading
import time

import pydantic
import pytest

from conftest import git
from git_lanes.core.errors import LanesError
from git_lanes.gitio import Git
from git_lanes.core.model import BatchRecord, Budget, Child, Lane, LaneRecord
from git_lanes.store import BATCH_REF, BatchStore, EvidenceNotes, LaneStore, slug_lock

STAMP = "2026-01-02T03:04:05.000Z"


def make_record(head: str, n: int = 3, slug: str = "demo") -> BatchRecord:
    return BatchRecord(batch_id=f"{slug}-20260102T030405Z-abcdef", slug=slug, plan_digest="sha256:" + "0" * 64,
                       base_head=head, branch=f"imm/{slug}", coordinator="/tmp/x", confirmation_time=STAMP,
                       budget=Budget(max_children=n, qa_failure_limit=2), max_parallel=2,
                       children=[Child(task_id=f"t{i:04d}") for i in range(n)], created_at=STAMP, updated_at=STAMP)


def objects(repo) -> tuple[int, int]:
    """(loose object count, their compressed bytes / 1024) — what a write added."""
    files = [p for p in (repo / ".git" / "objects").glob("??/*")]
    return len(files), sum(p.stat().st_size for p in files) // 1024


def test_round_trip_keeps_order_and_every_field(repo):
    g = Git(repo)
    head = g.rev_parse("HEAD")
    rec = make_record(head, 5)
    rec.children[3].state = "enrolled"
    rec.children[3].lane = Lane(path="/l", branch="imm-lane/demo/t0003", base_head=head, run_id="r")
    store = BatchStore(g)
    snap = store.write(None, rec, summary="first", actor="test")
    again = store.read("demo")
    assert again.record == rec
    assert [c.task_id for c in again.record.children] == [f"t{i:04d}" for i in range(5)]
    files = git(repo, "ls-tree", "-r", "--name-only", BATCH_REF + "demo").split()
    assert "batch.json" in files
    assert any(f.startswith("children/") and f.endswith("/t0003.json") for f in files)
    assert git(repo, "show", f"{BATCH_REF}demo:batch.json").startswith('{"base_head"')
    assert snap.commit == g.resolve(BATCH_REF + "demo")
    child = git(repo, "show", f"{BATCH_REF}demo:" + next(f for f in files if f.endswith("/t0003.json")))
    assert "tracker_closed" not in child   # SPEC §4: "only true": absent until the issue is closed


def test_a_write_that_changes_nothing_writes_nothing(repo):
    g = Git(repo)
    store = BatchStore(g)
    snap = store.write(None, make_record(g.rev_parse("HEAD")), summary="first", actor="test")
    same = snap.record.model_copy(update={"updated_at": "2027-01-01T00:00:00.000Z"})
    before = objects(repo)
    assert store.write(snap, same, summary="again", actor="test").commit == snap.commit
    assert objects(repo) == before
    assert g.resolve(BATCH_REF + "demo") == snap.commit


def test_one_child_write_in_a_1000_child_batch_is_small(repo):
    g = Git(repo)
    store = BatchStore(g)
    snap = store.write(None, make_record(g.rev_parse("HEAD"), 1000), summary="first", actor="test")
    rec = snap.record.model_copy(deep=True)
    rec.children[500].state = "skipped_blocked"
    rec.children[500].reason = "dependency x parked"
    rec.updated_at = "2026-01-02T03:04:06.000Z"
    count0, size0 = objects(repo)
    store.write(snap, rec, summary="one child", actor="test")
    count1, size1 = objects(repo)
    assert count1 - count0 <= 8, f"{count1 - count0} objects"
    assert size1 - size0 <= 16, f"{size1 - size0} KiB"


def test_invalid_record_writes_nothing(repo):
    g = Git(repo)
    store = BatchStore(g)
    snap = store.write(None, make_record(g.rev_parse("HEAD")), summary="first", actor="test")
    bad = snap.record.model_copy(deep=True)
    bad.children[0].state = "integrated"  # no commit, no lane: violates §4
    with pytest.raises(pydantic.ValidationError):
        store.write(snap, bad, summary="bad", actor="test")
    assert g.resolve(BATCH_REF + "demo") == snap.commit


def test_record_invariants():
    head = "a" * 40
    rec = make_record(head)
    with pytest.raises(pydantic.ValidationError, match="needs a reason"):
        BatchRecord.model_validate({**rec.model_dump(by_alias=True),
                                    "children": [{"task_id": "x", "state": "needs_human"}]})
    with pytest.raises(pydantic.ValidationError, match="no in-flight child"):
        lane = {"path": "/p", "branch": "b", "base_head": head, "run_id": "r"}
        BatchRecord.model_validate({**rec.model_dump(by_alias=True), "batch_state": "failed",
                                    "children": [{"task_id": "x", "state": "enrolled", "lane": lane}]})
    with pytest.raises(pydantic.ValidationError, match="every child integrated"):
        BatchRecord.model_validate({**rec.model_dump(by_alias=True), "batch_state": "completed"})
    with pytest.raises(pydantic.ValidationError, match="correction_due only while enrolled"):
        BatchRecord.model_validate({**rec.model_dump(by_alias=True),
                                    "children": [{"task_id": "x", "correction_due": "y"}]})


def test_stale_snapshot_loses_the_race_as_batch_busy(repo):
    g = Git(repo)
    store = BatchStore(g)
    snap = store.write(None, make_record(g.rev_parse("HEAD")), summary="first", actor="test")
    a = snap.record.model_copy(deep=True)
    a.max_parallel = 3
    store.write(snap, a, summary="a", actor="test")
    b = snap.record.model_copy(deep=True)
    b.max_parallel = 4
    with pytest.raises(LanesError) as exc:
        store.write(snap, b, summary="b", actor="test")
    assert exc.value.code == "batch_busy" and exc.value.exit_code == 1
    assert store.read("demo").record.max_parallel == 3


def test_log_follows_first_parents_and_a_new_batch_starts_a_new_line(repo):
    g = Git(repo)
    store = BatchStore(g)
    head = g.rev_parse("HEAD")
    s1 = store.write(None, make_record(head), summary="start one", actor="start")
    r = s1.record.model_copy(deep=True)
    r.max_parallel = 1
    s2 = store.write(s1, r, summary="tick", actor="tick")
    second = make_record(head).model_copy(update={"batch_id": "demo-20260103T000000Z-123456"})
    s3 = store.write(s2, second, summary="start two", actor="start", new_line=True)
    log = store.log("demo")
    assert [e["summary"] for e in log] == ["start one", "tick", "start two"]
    assert [e["actor"] for e in log] == ["start", "tick", "start"]
    assert git(repo, "rev-parse", s3.commit + "^1").strip() == s2.commit


def test_referenced_commits_stay_reachable_as_extra_parents(repo):
    g = Git(repo)
    store = BatchStore(g)
    head = g.rev_parse("HEAD")
    (repo / "f").write_text("lane work\n")
    git(repo, "add", "f")
    tree = git(repo, "write-tree").strip()
    dangling = git(repo, "commit-tree", tree, "-p", head, "-m", "lane commit").strip()
    snap = store.write(None, make_record(head), summary="first", actor="test")
    rec = snap.record.model_copy(deep=True)
    c = rec.children[0]
    c.state, c.commit = "integrated", dangling
    c.lane = Lane(path="/l", branch="imm-lane/demo/t0000", base_head=head, run_id="r", lane_commit=dangling)
    snap2 = store.write(snap, rec, summary="integrate", actor="test")
    parents = git(repo, "rev-list", "--parents", "-n1", snap2.commit).split()[1:]
    assert parents == [snap.commit, dangling]
    assert dangling in git(repo, "rev-list", BATCH_REF + "demo")


def test_lane_store_round_trip_and_attempt_trees_stay_reachable(repo):
    g = Git(repo)
    lanes = LaneStore(g)
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    rec = LaneRecord(batch_id="b", task_id="t", run_id="r", record_revision=1,
                     qa_attempts=[{"at": STAMP, "tree": tree, "passed": True, "results": []}])
    commit = lanes.write("demo", rec, None, "done t")
    back, tip = lanes.read("demo", "t")
    assert back == rec and tip == commit
    assert tree in git(repo, "rev-list", "--objects", "refs/notes/lanes/lane/demo/t")


def test_evidence_notes_are_real_git_notes(repo):
    g = Git(repo)
    head = g.rev_parse("HEAD")
    notes = EvidenceNotes(g)
    notes.add(head, {"task_id": "t", "batch_id": "b"})
    notes.add(head, {"task_id": "other"})  # a second add for the same commit writes nothing
    assert notes.read(head)["task_id"] == "t"
    shown = git(repo, "log", "-1", "--notes=lanes/evidence", "--format=%N", head)
    assert '"task_id": "t"' in shown


def test_slug_lock_times_out_as_batch_busy(repo):
    g = Git(repo)
    held = threading.Event()
    release = threading.Event()

    def holder():
        with slug_lock(g, "demo", timeout=5):
            held.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    start = time.monotonic()
    with pytest.raises(LanesError) as exc:
        with slug_lock(g, "demo", timeout=0.2):
            pass
    assert exc.value.code == "batch_busy"
    assert time.monotonic() - start < 2
    release.set()
    t.join()
    with slug_lock(g, "demo", timeout=0.2):
        pass


def test_a_lock_released_by_a_thread_is_taken_by_a_waiting_thread_without_a_poll(repo, monkeypatch):
    """`run`'s verifier and main thread hand the slug's lock to each other: the waiter wakes at the
    release, not at its next poll (here made 5 s long, so a poll would show)."""
    from git_lanes.store import locks

    monkeypatch.setattr(locks, "POLL", 5.0)
    monkeypatch.setattr(locks, "FIRST_POLL", 5.0, raising=False)
    g = Git(repo)
    held, took = threading.Event(), []

    def waiter():
        held.wait(5)
        with slug_lock(g, "demo", timeout=20):
            took.append(time.monotonic())

    t = threading.Thread(target=waiter)
    t.start()
    with slug_lock(g, "demo", timeout=5):
        held.set()
        time.sleep(0.3)   # the waiter has tried once and is waiting
        released = time.monotonic()
    t.join(20)
    assert took and took[0] - released < 1.0

def test_stale_ref_lock_files_are_removed_with_a_warning(repo):
    import os

    g = Git(repo)
    lockdir = repo / ".git" / "refs" / "notes" / "lanes" / "batch"
    lockdir.mkdir(parents=True)
    stale = lockdir / "demo.lock"
    stale.write_text("")
    old = time.time() - 120
    os.utime(stale, (old, old))
    warnings = []
    with slug_lock(g, "demo", timeout=1, warn=warnings.append):
        pass
    assert not stale.exists()
    assert warnings and "stale lock" in warnings[0]


@pytest.mark.parametrize("files, said", [
    ({}, "batch.json is missing"),
    ({"batch.json": b"[]"}, "batch.json: not a JSON object"),
    ({"batch.json": b"{}", "children/aa/t.json": b'{"task_id": "t"}'}, "children/aa/t.json: missing field index"),
    ({"batch.json": b"{}", "identities/aa/t.json": b"{"}, "identities/aa/t.json: Expecting property name"),
])
def test_a_corrupt_record_names_the_file_and_what_is_wrong(files, said):
    from git_lanes.store.layout import CorruptRecord, record_data

    with pytest.raises(CorruptRecord) as info:
        record_data(files)
    assert info.value.detail.startswith(f"corrupt batch record: {said}")
