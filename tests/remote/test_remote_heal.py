"""Remote lanes that heal (SPEC §17.2, §17.6 "Remote restart"): a lost machine's task is restarted by the
coordinator's own tick and another machine takes it; the lost claim's late pushes change nothing; the
machine that comes back stops its session; executors beat on the batch record's timeout.

Real processes over a bare server (file://), each clone with its own HOME (tests/remote_world.py).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from conftest import git
from remote_world import World
from test_remote_lanes import wait_for

CHAIN = [{"id": "a"}, {"id": "b", "blocked_by": ["a"]}]


def record(world: World) -> dict:
    """The batch record as the coordinator holds it (what it pushes)."""
    from git_lanes.domain.session import Session

    snap = Session(cwd=str(world.coord)).batches.read(world.slug)
    return snap.record.model_dump(mode="json") if snap is not None else {"children": []}


def server_child(world: World, task: str) -> dict:
    return next((c for c in record(world)["children"] if c["task_id"] == task), {})


def test_a_stalled_machine_is_restarted_by_the_coordinator_and_another_machine_finishes_its_task(tmp_path):
    """east stalls in the middle of a (SIGSTOP: no heartbeat for longer than the batch's timeout); the
    coordinator restarts a itself (no person, no resume), archiving east's half-done tip. east comes back:
    its overdue heartbeat of the old claim reaches the server but changes nothing, and at its next pull it
    stops its session. west (no lanes.remoteTimeout of its own: it beats on the record's 3 s) takes a and
    b; the batch completes with west's work."""
    world = World(tmp_path, tasks=CHAIN)
    try:
        east = world.clone("east")
        world.clone("west")
        git(world.coord, "config", "lanes.remoteTimeout", "3")
        coord = world.coordinate("--max-parallel", "2")
        east_work = world.work("east", env={"EXEC_SLEEP": "120", "EXEC_COMMIT": "a"})
        wait_for(lambda: ("pushed", "a", "east") in world.traced(), world, what="east's session of a")
        east_id = git(east, "config", "lanes.cloneId").strip()
        east_run = server_child(world, "a")["lane"]["run_id"]
        half_done = git(world.server, "rev-parse", "refs/heads/imm-lane/rl/a").strip()
        assert record(world)["remote_timeout"] == 3

        os.killpg(east_work.pid, signal.SIGSTOP)   # the machine stalls: no heartbeat
        wait_for(lambda: server_child(world, "a").get("remote_restarts") == 1, world, what="the restart of a")
        a = server_child(world, "a")
        assert a["state"] == "pending" and a["lane"] is None and a["qa_attempts_seen"] == 0
        rec = record(world)
        assert rec["batch_state"] == "running"
        assert [(x["task_id"], x["run_id"], x["tip"]) for x in rec["archived_lanes"]] == [("a", east_run, half_done)]

        os.killpg(east_work.pid, signal.SIGCONT)   # it comes back: a late heartbeat, then a pull
        wait_for(lambda: "a: session 1 stopped" in open(east_work.log_path).read(), world,
                 what="east stopping its session of a")
        east_log = open(east_work.log_path).read()
        assert "restarted by the coordinator" in east_log, east_log
        os.killpg(east_work.pid, signal.SIGKILL)
        east_work.wait(timeout=10)
        world.kill_executors("east")
        assert server_child(world, "a")["state"] == "pending"     # the late push admitted nothing
        lane_a = next(line.split(" ", 1)[1] for line in git(east, "worktree", "list", "--porcelain").splitlines()
                      if line.startswith("worktree ") and line.endswith("/rl/a"))
        (Path(lane_a) / "late.txt").write_text("late\n")   # and east's lane branch moves on the server after it
        git(Path(lane_a), "add", "late.txt")
        git(Path(lane_a), "commit", "-q", "-m", "late work")
        git(Path(lane_a), "push", "-q", "origin", "HEAD:refs/heads/imm-lane/rl/a")
        late = git(Path(lane_a), "rev-parse", "HEAD").strip()

        west_work = world.work("west")
        code, out = world.finish(coord)
        assert code == 0, world.logs()
        assert world.finish(west_work)[0] == 0, world.logs()
        assert f"a: lane in clone {east_id}" in out and out.count(f"lane in clone {east_id}") == 1, out
        assert "a: lane lost, restarted for another machine (restart 1 of 2)" in out, out
        report = world.status()
        assert report["batch_state"] == "completed" and world.landed() == ["a", "b"]
        assert git(world.coord, "show", f"imm/{world.slug}:src/a.txt") == "right a\n"
        assert {t: c for w, t, c in world.traced() if w == "end"} == {"a": "west", "b": "west"}
        assert [c.get("remote_restarts") for c in report["children"]] == [1, None]
        # east's half-done commit stays reachable from the record
        assert git(world.server, "merge-base", "--is-ancestor", half_done, f"refs/notes/lanes/batch/{world.slug}") == ""

        # west's claim replaced the branch east pushed late, and keeps that tip reachable
        assert git(world.server, "merge-base", "--is-ancestor", late, "refs/notes/lanes/lane/rl/a") == ""
        # east, back for good, removes its lost lane; what it had not committed is kept by its lane record
        (Path(lane_a) / "notes.txt").write_text("unsaved\n")
        doc = json.loads(world.lanes("east", "release", "--stale", world.slug, "--json").stdout)
        [item] = doc["released"]
        assert item["task_id"] == "a" and item["snapshot"] and not Path(lane_a).exists(), doc
        assert git(east, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
        assert git(east, "merge-base", "--is-ancestor", item["snapshot"], "refs/notes/lanes/lane/rl/a") == ""
        assert git(east, "show", f"{item['snapshot']}:notes.txt") == "unsaved\n"
    finally:
        world.stop_all()


def test_join_of_a_task_that_is_not_a_child_is_a_usage_error(tmp_path):
    world = World(tmp_path, tasks=CHAIN)
    world.lanes(None, "start", world.slug, "--yes")
    world.lanes(None, "push")
    world.clone("east")
    proc = world.lanes("east", "join", world.slug, "zz", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "zz is not a child of batch" in proc.stderr
    assert git(world.clones["east"], "for-each-ref", "refs/heads/imm-lane/").strip() == ""
    proc = world.lanes("east", "join", world.slug, "b", check=False)   # a child, not startable: exit 1
    assert proc.returncode == 1 and "batch_lane_unknown_child" in proc.stderr


def test_work_once_finishes_its_lane_and_run_remote_releases_what_the_machine_left(tmp_path):
    """`work --once` joins one lane (--jobs 1), waits for its admission, runs its session and exits
    without waiting for the landing. The coordinator integrates it; the machine being gone, run --remote
    records the lane released before it stops and deletes its branch on the server. Back on that machine,
    a pull and `release --stale` remove the lane, its undelivered copy kept by its lane record."""
    world = World(tmp_path, tasks=[{"id": "d"}, {"id": "e"}])
    try:
        east = world.clone("east")
        git(world.coord, "config", "lanes.remoteTimeout", "3")
        coord = world.coordinate("--max-parallel", "2")
        wait_for(lambda: git(world.server, "for-each-ref", "refs/notes/lanes/batch/").strip() != "", world,
                 what="the batch on the server")
        proc = world.lanes("east", "work", world.slug, "--executor", world.executor(), "--once", "--interval", "0.25",
                           env={"EXEC_TRACE": str(world.trace), "EXEC_SLEEP": "0.2"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [(w, c) for w, _t, c in world.traced()] == [("start", "east"), ("end", "east")]
        [(_, task, _)] = [t for t in world.traced() if t[0] == "end"]
        assert f"{task}: session 1 ended" in proc.stdout and "done: passed" in proc.stdout
        other = "e" if task == "d" else "d"
        west = world.clone("west")
        west_work = world.work("west", "--once")
        assert world.finish(west_work)[0] == 0, world.logs()
        code, out = world.finish(coord)
        assert code == 0, world.logs()
        assert f"{task}: lane released here (its machine did not" in out, out
        assert {c["task_id"]: c["state"] for c in world.status()["children"]} == {task: "released", other: "released"}
        assert git(world.server, "for-each-ref", "refs/heads/imm-lane/").strip() == ""

        world.lanes("east", "pull")
        doc = json.loads(world.lanes("east", "release", "--stale", world.slug, "--json").stdout)
        assert [r["task_id"] for r in doc["released"]] == [task], doc
        assert git(east, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
        assert world.lanes("east", "audit", world.slug).returncode == 0
        assert west.exists()
    finally:
        world.stop_all()
