"""What a clone of a remote batch is told, and how its leftovers go (SPEC §17.2): `status` says `git lanes
pull` when the last fetch brought a newer record, an executor clone is told `work`/`join` (never
`provision`), a remote lane shows its machine and heartbeat, `release` works from inside the lane it
removes, and `pull` prunes the `refs/remotes/<R>/imm-lane/*` of lanes the server no longer has.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import git
from helpers import deliver, lane_path, lanes, lanes_json, write_initiative
from remote_world import World

CHAIN = [{"id": "a"}, {"id": "b", "blocked_by": ["a"]}, {"id": "d"}]


def test_an_executor_clone_is_told_to_pull_then_to_work_or_join_and_the_coordinator_sees_the_machine(tmp_path):
    world = World(tmp_path, tasks=CHAIN)
    world.lanes(None, "start", world.slug, "--yes", "--max-parallel", "1")
    world.lanes(None, "push")
    east = world.clone("east")
    world.lanes("east", "pull")
    doc = json.loads(world.lanes("east", "status", world.slug, "--json").stdout)
    action = doc["next_action"]
    assert f"git lanes work {world.slug} --remote origin --executor CMD" in action, action
    assert "git lanes join rl a" in action and "provision" not in action, action
    assert not [h for h in doc["handoffs"] if h.get("action") == "provision"]
    human = world.lanes("east", "status", world.slug).stdout
    assert "git lanes provision" not in human, human

    world.lanes("east", "join", world.slug, "a")
    world.lanes(None, "pull")
    world.lanes(None, "tick")                      # admits east's claim
    clone_id = git(east, "config", "lanes.cloneId").strip()
    human = world.lanes(None, "status", world.slug).stdout
    assert re.search(rf"a +enrolled .*in clone {clone_id} on \S+, heartbeat \d+ s ago", human), human
    assert f"handoff: executor implement a: in clone {clone_id} on " in human, human
    assert "git -C . lanes task" not in human
    shown = world.lanes(None, "show", "a", "--slug", world.slug).stdout
    assert f"lane: in clone {clone_id} on " in shown, shown

    world.lanes(None, "push")                      # the coordinator moved on; east's next fetch sees it
    world.lanes("east", "push")                    # a push fetches first: the tracking refs are newer now
    doc = json.loads(world.lanes("east", "status", world.slug, "--json").stdout)
    assert doc["next_action"].startswith("origin holds a newer record of rl than this clone"), doc["next_action"]
    assert "git lanes pull origin" in doc["next_action"]
    world.lanes("east", "pull")
    doc = json.loads(world.lanes("east", "status", world.slug, "--json").stdout)
    assert "git lanes pull" not in doc["next_action"] and "lanes of this clone: a" in doc["next_action"], doc


def test_a_clone_that_never_pulled_a_fetched_batch_is_told_to_pull(tmp_path):
    world = World(tmp_path, tasks=CHAIN)
    world.lanes(None, "start", world.slug, "--yes")
    world.clone("east")
    world.lanes("east", "push")   # fetches the remote's records into refs/lanes-remotes/origin/ (nothing to send)
    proc = world.lanes("east", "status", world.slug, check=False)   # the server has no batch yet: no hint
    assert proc.returncode == 2 and "git lanes pull" not in proc.stderr, proc.stderr
    world.lanes(None, "push")
    world.lanes("east", "push")
    proc = world.lanes("east", "status", world.slug, check=False)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("error: ") and "git lanes pull origin" in proc.stderr, proc.stderr


def test_release_run_inside_the_lane_it_releases_works(repo: Path):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    code, doc = lanes_json(repo, "start", "demo", "--yes")
    assert code == 0, doc
    code, doc = lanes_json(repo, "provision", "a")
    lane = Path(lane_path(doc, "a"))
    deliver(str(lane), {"src/a/out.txt": "a\n"})
    assert lanes(lane, "done")[0] == 0
    code, doc = lanes_json(repo, "tick")
    assert {c["task_id"]: c["state"] for c in doc["children"]}["a"] == "integrated", doc
    code, out, err = lanes(lane, "release", "a", "--slug", "demo")
    assert code == 0, err
    assert "removed lane a" in out and not lane.exists()
    assert git(repo, "for-each-ref", "refs/heads/imm-lane/").strip() == ""


def test_pull_prunes_remote_tracking_refs_of_lane_branches_the_server_deleted(tmp_path):
    world = World(tmp_path, tasks=CHAIN)
    world.lanes(None, "start", world.slug, "--yes")
    world.lanes(None, "push")
    east = world.clone("east")
    world.lanes("east", "join", world.slug, "a")
    git(east, "fetch", "-q", "origin")             # plain Git copies the lane branch into refs/remotes/
    assert git(east, "for-each-ref", "refs/remotes/origin/imm-lane/").strip() != ""
    git(world.server, "update-ref", "-d", "refs/heads/imm-lane/rl/a")
    world.lanes("east", "pull", check=False)
    assert git(east, "for-each-ref", "refs/remotes/origin/imm-lane/").strip() == ""


def test_work_waits_for_a_batch_and_a_continuing_coordinator_prints_the_integration_it_lands(tmp_path):
    from test_remote_lanes import wait_for

    world = World(tmp_path, tasks=[{"id": "a"}])
    try:
        east = world.clone("east")
        early = world.start("east", "work", "--executor", world.executor(), "--interval", "0.25")  # --remote origin
        wait_for(lambda: "waiting for a batch of any slug on origin" in Path(early.log_path).read_text(), world,
                 what="work saying it waits")
        world.stop_all()

        git(world.coord, "config", "lanes.remoteTimeout", "60")
        world.lanes(None, "start", world.slug, "--yes")
        world.lanes(None, "push")
        world.lanes("east", "join", world.slug, "a")
        world.lanes(None, "pull")
        world.lanes(None, "tick")
        world.lanes(None, "push")
        world.lanes("east", "pull")
        lane = next(line.split(" ", 1)[1] for line in git(east, "worktree", "list", "--porcelain").splitlines()
                    if line.startswith("worktree ") and line.endswith("/rl/a"))
        deliver(lane, {"src/a.txt": "right a\n"})
        assert lanes(Path(lane), "done")[0] == 0
        world.lanes("east", "push")
        coord = world.coordinate()
        on_server = ["git", "rev-list", "--count", f"main..imm/{world.slug}"]   # record and branch: one push
        wait_for(lambda: subprocess.run(on_server, cwd=world.server, capture_output=True, text=True).stdout.strip()
                 == "1", world, what="the integration of a on the server")
        world.lanes("east", "pull")
        world.lanes("east", "release", "a", "--slug", world.slug)   # pushes the release
        code, out = world.finish(coord)
        assert code == 0, world.logs()
        assert "continuing batch" in out and "a: integrated " in out, out
    finally:
        world.stop_all()
