"""A slug a `git lanes run` drives (SPEC §17.1): `status` names the driver (`driver: {pid, since, host}`,
`driven by git lanes run (pid N, since <at>)`) and no handoff step; `provision` and `release` from
another process refuse `batch_busy: git lanes run (pid N) drives <slug>`, writing nothing; the views
and `instruct` stay allowed. Only a live holder of `locks/run/<slug>` counts, not the file."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from adversary import lanes_proc, make_repo
from conftest import git
from helpers import snapshot_state

SLUG = "drv"
TASKS = [{"id": t, "scope": [f"src/{t}"], "check": f"test -f src/{t}/out.txt"} for t in ("a", "b")]

HOLD = r'''
import sys, time
from git_lanes.gitio import Git
from git_lanes.store import run_lock
held = run_lock(Git(sys.argv[1]), sys.argv[2])
print("held", flush=True)
sys.stdin.read()
'''


def test_status_provision_and_release_while_a_run_drives_the_slug(tmp_path):
    repo = make_repo(tmp_path / "repo", slug=SLUG, tasks=TASKS, final_checks=[], lanes_root=tmp_path / "lanes")
    assert lanes_proc(repo, "start", SLUG, "--yes").code == 0
    # a process that holds the run lock as `run` does (another process than the commands below)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(repo), SLUG], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        report = json.loads(lanes_proc(repo, "status", SLUG, "--json").out)
        driver = report["driver"]
        assert driver["pid"] == holder.pid and driver["host"] == socket.gethostname() and driver["since"]
        assert "git lanes provision" not in report["next_action"] and f"git lanes run (pid {holder.pid}) drives" \
            in report["next_action"]
        human = lanes_proc(repo, "status", SLUG)
        assert human.code == 0
        assert f"driven by git lanes run (pid {holder.pid}, since {driver['since']})" in human.out
        assert "handoff:" not in human.out and "git lanes provision" not in human.out

        before = snapshot_state(repo)
        for args in (("provision", "a", "--slug", SLUG), ("release", "a", "--slug", SLUG),
                     ("release", "--stale", SLUG)):
            proc = lanes_proc(repo, *args)
            assert proc.code == 1, (args, proc)
            assert proc.err.strip() == f"error: batch_busy: git lanes run (pid {holder.pid}) drives {SLUG}", proc
        assert snapshot_state(repo) == before
        assert not (tmp_path / "lanes").exists() or not any((tmp_path / "lanes").rglob("a"))
        for args in (("show", "a", "--slug", SLUG), ("log", SLUG)):
            assert lanes_proc(repo, *args).code == 0, args
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)

    # the run is gone (its lock with it); the file stays, and says nothing any more
    locks = repo / ".git" / "lanes" / "locks" / "run" / SLUG
    assert locks.is_file()
    report = json.loads(lanes_proc(repo, "status", SLUG, "--json").out)
    assert "driver" not in report and "git lanes provision a" in report["next_action"]
    proc = lanes_proc(repo, "provision", "a", "--slug", SLUG)
    assert proc.code == 0, proc
    assert git(repo, "rev-parse", "--verify", "-q", f"imm-lane/{SLUG}/a").strip()
