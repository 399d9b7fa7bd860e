"""Two `provision`s of one task at once (issue 29 item 21): one wins, the other refuses cleanly (exit 1,
one `error:` line) and leaves the winner's lane alone — before, the second removed the first's half-made
lane as "an interrupted provision", and the healthy lane ended parked `batch_lane_lost`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from adversary import GIT_LANES, child, lanes_proc, make_repo, record
from conftest import git

SLUG = "race"
TRIALS = 20


def test_two_provisions_of_one_task_at_once_never_park_the_winner(tmp_path):
    tasks = [{"id": f"p{i:02d}", "scope": [f"src/p{i:02d}"], "check": f"test -f src/p{i:02d}/out.txt"}
             for i in range(TRIALS)]
    repo = make_repo(tmp_path / "repo", slug=SLUG, tasks=tasks, final_checks=[], lanes_root=tmp_path / "lanes")
    # a setup that takes a while: the second provision comes while the first's lane is half made
    git(repo, "config", "lanes.setupCommand", "sleep 0.3")
    assert lanes_proc(repo, "start", SLUG, "--yes", "--max-parallel", str(TRIALS)).code == 0
    refusals: dict[str, int] = {}
    for i in range(TRIALS):
        task = f"p{i:02d}"
        procs = [subprocess.Popen([GIT_LANES, "provision", task, "--slug", SLUG], cwd=repo, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True) for _ in range(2)]
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        codes = sorted(code for code, _, _ in results)
        assert codes == [0, 1], results
        _, _, err = next(r for r in results if r[0] == 1)
        errors = [line for line in err.splitlines() if line.startswith(("error:", "fatal:"))]
        assert len(errors) == 1 and "Traceback" not in err, err
        code = errors[0].split(":")[1].strip()
        assert code in ("batch_busy", "batch_lane_unknown_child"), err
        refusals[code] = refusals.get(code, 0) + 1
        c = child(record(repo, SLUG), task)
        assert c["state"] == "enrolled", (task, c)
        assert Path(c["lane"]["path"]).is_dir(), c
    tick = lanes_proc(repo, "tick", SLUG, "--json")
    assert tick.code == 0, tick
    report = json.loads(tick.out)
    assert {c["state"] for c in report["children"]} == {"enrolled"}, \
        [(c["task_id"], c["state"], c.get("reason")) for c in report["children"] if c["state"] != "enrolled"]
    assert refusals.get("batch_busy"), refusals   # the race was run: some trials met while both were at work
