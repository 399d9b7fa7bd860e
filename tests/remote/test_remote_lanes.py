"""Remote lanes (SPEC §14 v3): one batch, a coordinator and two executor machines, a Git server between.

Every machine is a clone of its own (own Git directory, own HOME); the server is a bare repository
reached over file:// or over `git daemon` on 127.0.0.1. The coordinator runs `git lanes run --remote`,
the executors `git lanes work`; the races are made to happen for real, in separate processes.
"""

from __future__ import annotations

import os
import signal
import time

from conftest import git
from remote_world import TASKS, World, git_daemon


def run_batch(world: World, *coordinator: str, env: dict[str, str] | None = None, during=None,
              timeout: str | None = None) -> dict:
    """6 tasks (a -> b -> c, and d, e, f) through run --remote and two work loops; checked to the end."""
    world.clone("east")
    world.clone("west")
    for where in (world.coord, *world.clones.values()):
        if timeout:
            git(where, "config", "lanes.remoteTimeout", timeout)
    coord = world.coordinate("--max-parallel", "3", *coordinator)
    east = world.work("east", "--jobs", "2", env=env)
    west = world.work("west", "--jobs", "2", env=env)
    if during is not None:
        during()
    code, out = world.finish(coord)
    assert code == 0, world.logs()
    for proc in (east, west):
        code, said = world.finish(proc)
        assert code == 0, world.logs()
        # landing is the coordinator's: an executor's summary does not offer it
        assert "nothing left for this clone: the coordinator lands" in said and "land it on" not in said, said
    report = world.status()
    assert report["batch_state"] == "completed" and report["final_verification"]["passed"] is True
    assert sorted(world.landed()) == sorted(t["id"] for t in TASKS) and len(world.landed()) == 6
    assert [c["state"] for c in report["children"]] == ["released"] * 6
    assert all(c["lane"]["path"] is None and c["lane"]["remote"]["clone_id"] for c in report["children"])
    done_by = {clone for word, _task, clone in world.traced() if word == "end"}
    assert done_by == {"east", "west"}, world.traced()
    assert world.lanes(None, "audit", world.slug).returncode == 0
    for repo in (world.coord, world.server):   # the coordinator deleted every released lane's branch
        assert git(repo, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
    for name, clone in world.clones.items():   # an executor copies no other machine's lane: none is left
        assert git(clone, "for-each-ref", "refs/heads/imm-lane/").strip() == "", name
        assert world.lanes(name, "audit", world.slug).returncode == 0, name
    assert git(world.server, "rev-parse", f"imm/{world.slug}") == git(world.coord, "rev-parse", f"imm/{world.slug}")
    assert "pull(s)" in out and "push(es)" in out
    return report


def test_a_batch_over_file_transport_completes_with_two_executor_machines(tmp_path):
    """d's first delivery is wrong and the QA failure limit is 1: its correction goes through the inbox.
    lanes.keepScratch is false: the run that ends the batch removes the scratch pool, as a local run does."""
    world = World(tmp_path)
    git(world.coord, "config", "lanes.keepScratch", "false")
    try:
        report = run_batch(world, "--qa-failure-limit", "1", env={"EXEC_FAIL_FIRST": "d"})
        assert "/lanes/scratch/" not in git(world.coord, "worktree", "list", "--porcelain")
        d = next(c for c in report["children"] if c["task_id"] == "d")
        assert d["corrections"] == 1 and d["qa_attempts_seen"] == 2
        assert [i["kind"] for i in report["interventions"]] == ["correction"]
        assert report["interventions"][0]["text"].startswith("Correction for d:")
        assert [t for w, t, _ in world.traced() if w == "start"].count("d") == 2
    finally:
        world.stop_all()


def test_a_batch_over_git_daemon_completes_with_two_executor_machines_and_a_server_outage(tmp_path):
    """The server goes away for a while after the first integration: every loop says so and goes on."""
    with git_daemon(tmp_path) as daemon:
        world = World(tmp_path, url_base=daemon.url)

        def outage() -> None:
            wait_for(lambda: world.landed_count() > 0, world, what="a first integration")
            daemon.stop()
            time.sleep(2.5)
            daemon.start()

        try:
            run_batch(world, during=outage, timeout="9")
            logs = world.logs()
            assert "origin: fatal: " in logs or "retrying every" in logs, logs
            assert "reachable again; heartbeats are judged again in 3 s" in logs
        finally:
            world.stop_all()


def wait_for(predicate, world: World, timeout: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            world.stop_all()
            raise AssertionError(f"timed out waiting for {what}\n{world.logs()}")
        time.sleep(0.1)


def test_a_machine_killed_mid_task_at_the_restart_limit_is_parked_lost_then_restarted_by_hand(tmp_path):
    """lanes.remoteRestarts 0: east dies in the middle of a (its heartbeat stops); the coordinator parks
    a batch_lane_lost and, nothing else being able to run, stops needs_human; resume --restart a hands a
    to west, which finishes a and b. Nothing east wrote is lost: its lane record stays in the history of
    a's record."""
    world = World(tmp_path, tasks=[{"id": "a"}, {"id": "b", "blocked_by": ["a"]}])
    try:
        east = world.clone("east")
        world.clone("west")
        git(world.coord, "config", "lanes.remoteRestarts", "0")
        git(world.coord, "config", "lanes.remoteTimeout", "3")
        git(east, "config", "lanes.remoteTimeout", "3")
        coord = world.coordinate("--max-parallel", "2")
        east_work = world.work("east", env={"EXEC_SLEEP": "120", "EXEC_COMMIT": "a"})
        wait_for(lambda: ("pushed", "a", "east") in world.traced(), world, what="east's session of a")
        east_id = git(east, "config", "lanes.cloneId").strip()
        east_record = git(world.server, "rev-parse", "refs/notes/lanes/lane/rl/a").strip()
        half_done = git(world.server, "rev-parse", "refs/heads/imm-lane/rl/a").strip()
        assert git(world.server, "log", "-1", "--format=%s", half_done).strip() == "half of a"
        west_work = world.work("west")
        os.killpg(east_work.pid, signal.SIGKILL)           # the machine dies: loop, session, executor
        world.kill_executors("east")
        east_work.wait(timeout=10)
        code, out = world.finish(coord, timeout=60)
        assert code == 1 and "batch_needs_human" in out, world.logs()
        assert world.finish(west_work, timeout=60)[0] == 1
        report = world.status()
        a = next(c for c in report["children"] if c["task_id"] == "a")
        assert a["state"] == "needs_human"
        assert a["reason"].startswith(f"batch_lane_lost: no heartbeat from {east_id} since ")
        assert {c["task_id"]: c["state"] for c in report["children"]}["b"] == "skipped_blocked"
        assert not [w for w, t, c in world.traced() if c == "west"]

        world.lanes(None, "resume", "rl", "--restart", "a", "--yes")
        world.lanes(None, "push")        # west must not pull the parked record once more
        git(world.coord, "config", "lanes.remoteTimeout", "60")
        coord = world.coordinate("--max-parallel", "2")
        west_work = world.work("west")
        code, out = world.finish(coord)
        assert code == 0, world.logs()
        assert world.finish(west_work)[0] == 0, world.logs()
        report = world.status()
        assert report["batch_state"] == "completed" and world.landed() == ["a", "b"]
        finished_by = {t: c for w, t, c in world.traced() if w == "end"}
        assert finished_by == {"a": "west", "b": "west"}
        assert git(world.server, "merge-base", "--is-ancestor", east_record, "refs/notes/lanes/lane/rl/a") == ""
        # east's half-done commit, replaced on the server by west's lane, is kept by the batch record
        assert git(world.server, "merge-base", "--is-ancestor", half_done, f"refs/notes/lanes/batch/{world.slug}") == ""
        assert world.lanes(None, "audit", "rl").returncode == 0
        assert git(world.server, "for-each-ref", "refs/heads/imm-lane/").strip() == ""
    finally:
        world.stop_all()
