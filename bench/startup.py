"""Start-up: the cheap paths, a lane-side command, and `done`, against `python -c "import click"`.

Every command is a child of this process, run in turn with its baseline (A B A B ...) so that
drift hits both alike, after one warm-up run each (page cache, .pyc files):

- **startup**: the slowest of `git-lanes --version`, `git-lanes completion bash` and a
  completion request (`git-lanes ti<TAB>`), run outside any repository, over
  `python -c "import click"` with the same interpreter;
- **lane_task_json**: `git-lanes task --json` in a lane of a running batch, over the same;
- **done_startup**: `git-lanes done` in that lane with one trivial check (`true`), a fresh
  delivery each time, over `python -c "import click"` plus that check run by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .common import (Result, Sample, Task, World, initiative_files, lanes_entry, make_repo, ms, provision,
                     spread, write)

CHECK = "true"


def _lane(world: World) -> Path:
    repo = make_repo(world, initiative_files("bench", [Task("t0", ["out/t0.txt"], [CHECK])]), name="startup")
    world.lanes(repo, "start", "bench", "--yes")
    return provision(world, repo, "t0")


def measure(world: World, runs: int, quick: bool) -> list[Result]:
    samples = runs * (1 if quick else 3)      # cheap: more samples than runs, for a steadier median
    entry = lanes_entry()
    outside = world.path("outside")
    outside.mkdir()
    lane = _lane(world)
    n = [0]

    def fresh_delivery() -> None:
        n[0] += 1
        write(lane / "out" / "t0.txt", f"delivery {n[0]}\n")

    click = [sys.executable, "-c", "import click"]
    complete = dict(world.env, _GIT_LANES_COMPLETE="bash_complete", COMP_WORDS="git-lanes ti", COMP_CWORD="1")
    cases: dict[str, tuple[list[str], Path, dict[str, str] | None]] = {
        "import click": (click, outside, None),
        "--version": (entry + ["--version"], outside, None),
        "completion bash": (entry + ["completion", "bash"], outside, None),
        "completion request": (entry, outside, complete),
        "task --json": (entry + ["task", "--json"], lane, None),
        "check by hand": ([CHECK], lane, None),
        "done": (entry + ["done"], lane, None),
    }
    times: dict[str, list[Sample]] = {name: [] for name in cases}
    for i in range(samples + 1):             # the first round warms up and is dropped
        for name, (argv, cwd, env) in cases.items():
            if name == "done":
                fresh_delivery()
            sample = world.timed(argv, cwd, env=env)
            if i:
                times[name].append(sample)
    base = [s.wall for s in times["import click"]]
    base_cpu = [s.cpu for s in times["import click"]]
    cheap = ("--version", "completion bash", "completion request")
    per_run_worst = [max(times[c][i].wall for c in cheap) / base[i] for i in range(samples)]
    table = {name: spread([ms(s.wall) for s in ts]) for name, ts in times.items()}
    cpu = {name: spread([ms(s.cpu) for s in ts]) for name, ts in times.items()}
    return [
        Result("startup", per_run_worst, {
            "wall_ms": {k: table[k] for k in ("import click", *cheap)},
            "ratios": {c: spread([times[c][i].wall / base[i] for i in range(samples)]) for c in cheap},
            "what": "the slowest of --version, completion bash, a completion request",
            "baseline": 'python -c "import click"', "target": 2.0, "issue_now": 1.2}),
        Result("lane_task_json", [times["task --json"][i].wall / base[i] for i in range(samples)], {
            "wall_ms": {k: table[k] for k in ("import click", "task --json")},
            "cpu_ms": {k: cpu[k] for k in ("import click", "task --json")},
            "cpu_ratio": spread([times["task --json"][i].cpu / base_cpu[i] for i in range(samples)]),
            "what": "git-lanes task --json in a lane", "baseline": 'python -c "import click"',
            "target": 2.0, "issue_now": 5.2}),
        Result("done_startup", [times["done"][i].wall / (base[i] + times["check by hand"][i].wall)
                                for i in range(samples)], {
            "wall_ms": {k: table[k] for k in ("import click", "check by hand", "done")},
            "cpu_ms": {k: cpu[k] for k in ("import click", "check by hand", "done")},
            "cpu_ratio": spread([times["done"][i].cpu / (base_cpu[i] + times["check by hand"][i].cpu)
                                 for i in range(samples)]),
            "what": f"git-lanes done in a lane, one check ({CHECK}), a fresh delivery each time",
            "baseline": 'python -c "import click" plus the check by hand', "target": 2.0}),
    ]
