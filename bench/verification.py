"""Verification (SPEC v4 §8.7–§8.9): receipts, declared inputs, a window of stacked candidates.

Each result is measured against a baseline run in the same process tree:

- **verify_once**: scratch executions of the checks (counted by the checks themselves, through a
  `python` shim first on PATH that logs each run's place and tree) over the distinct scratch
  receipt keys the run wrote, in the realistic batch plus a final check equal to a task's check.
  1.00 means no check ran twice on the same input in the scratch worktree. The detail has the
  same count with `--no-receipts` (what v3 did).
- **realistic_v4_speedup**: the realistic batch (`bench/realistic.py`, unchanged) under
  `--verify-window 1 --no-receipts` (v3's one-at-a-time, every check run) over the same batch
  with v4's defaults, in the same run; the detail also has each one's ratio to the critical path
  plus one run of each distinct check.
- **realistic_inputs_speedup**: the same, v4 with `inputs` declared on each task's own test-file
  check, over v3's way.
- **landing_inputs**: 8 disjoint tasks whose checks declare `inputs` (their own scope), each
  check sleeping 2 s, `--max-parallel 8`: `run`'s makespan over (executor time + one check);
  **landing_inputs_trusted**: the same with `lanes.gateTrustsLane = true`.
- **parallel_landing**: 8 lanes that finish together, CPU-light 1 s checks without `inputs`:
  the time from the last `done` to the last landing with a window of 1 over a window of 4.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import realistic
from .common import (BenchError, Result, Task, World, critical_path, initiative_files, make_repo, run_batch, spread,
                     write)

V3 = ("--verify-window", "1", "--no-receipts")

SHIM = textwrap.dedent('''\
    #!{python}
    """`python` as the checks call it: log where and on which tree it runs, then be the real one."""
    import os, subprocess, sys
    try:
        tree = subprocess.run(["git", "rev-parse", "HEAD^{{tree}}"], capture_output=True, text=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        tree, status = "", ""
    with open({log!r}, "a") as f:
        f.write("\\t".join([os.getcwd(), tree, "dirty" if status else "clean", " ".join(sys.argv[1:])]) + "\\n")
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
    ''')


def _run(world: World, repo: Path, slug: str, executor: str, parallel: int, extra: tuple[str, ...] = (),
         env: dict[str, str] | None = None) -> tuple[float, dict[str, Any]]:
    """`git-lanes run` to completion: (wall seconds, report)."""
    sample, report = run_batch(world, repo, slug, executor, parallel, extra, env)
    return sample.wall, report


# -- the realistic batch, three ways ------------------------------------------------------------------

def _inputs_for(task: str) -> list[str]:
    """What `python -m pytest tests/test_<task>.py` reads: the package's core, the task's module and
    the modules of the chain before it, its test file and pytest's configuration."""
    chain = [task, *realistic.WORK[task][0]]
    return sorted({"pytest.ini", "calc/__init__.py", "calc/core.py", f"tests/test_{task}.py",
                   *(f"calc/{t}.py" for t in chain)})


def _names(quick: bool) -> list[str]:
    return ["stats", "report"] if quick else list(realistic.WORK)   # quick: one chain of two


def _realistic_files(names: list[str], inputs: bool, final_check: str | None = None) -> dict[str, str]:
    tasks = realistic._tasks(names)
    files = {**realistic.BASE, **initiative_files("bench", tasks)}
    if inputs:
        for t in tasks:
            text = files[f".lanes/bench/{t.task_id}.toml"]
            # the first acceptance item is the task's own test file
            files[f".lanes/bench/{t.task_id}.toml"] = text.replace(
                'id = "A1"\n', f'id = "A1"\ninputs = {json.dumps(_inputs_for(t.task_id))}\n', 1)
    if final_check:
        init = ".lanes/bench/initiative.toml"
        files[init] = files[init] + f"final_checks = [{json.dumps(final_check)}]\n"
    return files


def _realistic_setup(world: World, names: list[str], scale: float) -> tuple[str, float, list[str]]:
    work = {t: w for t, w in realistic.WORK.items() if t in names}
    table = json.dumps({t: (seconds * scale, files) for t, (_, seconds, files) in work.items()})
    payload = write(world.path("payload.json"), table)
    script = write(world.path("executor.py"), realistic.EXECUTOR)
    path = critical_path({t: w[1] * scale for t, w in work.items()}, {t: w[0] for t, w in work.items()})
    distinct = sorted({c for t in realistic._tasks(names) for c in t.checks})
    return f"{sys.executable} {script} {payload}", path, distinct


def _checks_by_hand(world: World, repo: Path, distinct: list[str]) -> float:
    hand = repo.with_name(repo.name + ".hand")
    world.git(repo, "worktree", "add", "-q", "--detach", str(hand), "imm/bench")
    return sum(world.timed(c.split(), hand).wall for c in distinct)


def realistic_speedups(world: World, runs: int, quick: bool) -> list[Result]:
    names = _names(quick)
    executor, path, distinct = _realistic_setup(world, names, 0.2 if quick else 1.0)
    walls: dict[str, list[float]] = {"v3": [], "v4": [], "v4_inputs": []}
    ideals: list[float] = []
    for _ in range(runs):
        for mode, inputs, extra in (("v3", False, V3), ("v4", False, ()), ("v4_inputs", True, ())):
            repo = make_repo(world, _realistic_files(names, inputs), name=f"realistic-{mode}")
            walls[mode].append(_run(world, repo, "bench", executor, 3, extra)[0])
            if mode == "v3":
                ideals.append(path + _checks_by_hand(world, repo, distinct))
    common = {"tasks": len(names), "max_parallel": 3, "distinct_checks": len(distinct),
              "ideal_s": spread(ideals), **{f"wall_{m}_s": spread(w) for m, w in walls.items()},
              **{f"{m}_over_ideal": spread([w / i for w, i in zip(ws, ideals)]) for m, ws in walls.items()}}
    return [
        Result("realistic_v4_speedup", [a / b for a, b in zip(walls["v3"], walls["v4"])], {
            **common, "target": ">= 1.5",
            "what": "wall of the realistic batch with --verify-window 1 --no-receipts over v4's defaults",
            "baseline": "the same batch with v4's defaults (receipts, a window of min(4, P))"}),
        Result("realistic_inputs_speedup", [a / b for a, b in zip(walls["v3"], walls["v4_inputs"])], {
            **common, "target": ">= 2",
            "what": "wall of the realistic batch with --verify-window 1 --no-receipts over v4 with `inputs` "
                    "declared on each task's own test-file check",
            "baseline": "the same batch, v4 defaults and inputs declared"})]


# -- no check twice on the same input --------------------------------------------------------------------

def _scratch_runs(log: Path) -> list[tuple[str, str]]:
    """(argv, tree) of every check run the shim logged in a scratch worktree."""
    if not log.exists():
        return []
    runs = []
    for line in log.read_text().splitlines():
        cwd, tree, _, argv = (line.split("\t") + ["", "", "", ""])[:4]
        if f"{os.sep}lanes{os.sep}scratch{os.sep}" in cwd + os.sep:
            runs.append((argv, tree))
    return runs


def _scratch_receipts(world: World, repo: Path) -> int:
    """How many receipts made in a scratch worktree the clone holds."""
    doc = world.lanes_json(repo, "receipts")
    items = doc.get("receipts", doc) if isinstance(doc, dict) else doc
    return sum(1 for r in items if r.get("where") == "scratch")


def verify_once(world: World, runs: int, quick: bool) -> list[Result]:
    names = _names(quick)
    executor, _, _ = _realistic_setup(world, names, 0.2 if quick else 1.0)
    shim_dir = world.path("shim")
    ratios, v3_ratios, counts = [], [], []
    for _ in range(runs):
        for mode, extra in (("v4", ()), ("v3", V3)):
            log = world.path(f"checks-{mode}.log")
            shim = write(shim_dir / mode / "python", SHIM.format(python=sys.executable, log=str(log)),
                         executable=True)
            env = dict(world.env, PATH=f"{shim.parent}{os.pathsep}{world.env['PATH']}")
            repo = make_repo(world, _realistic_files(names, False, final_check=realistic.SUITE), name=f"once-{mode}")
            _run(world, repo, "bench", executor, 3, extra, env=env)
            scratch = _scratch_runs(log)
            distinct = len(set(scratch))
            if mode == "v4":
                keys = _scratch_receipts(world, repo)
                ratios.append(len(scratch) / max(keys, 1))
                counts.append({"scratch_runs": len(scratch), "distinct_inputs": distinct, "scratch_receipts": keys})
            else:
                v3_ratios.append(len(scratch) / max(distinct, 1))
    return [Result("verify_once", ratios, {
        "runs": counts, "v3_runs_over_distinct_inputs": spread(v3_ratios), "target": "1.00",
        "what": "check executions in the scratch worktree (counted by the checks) in the realistic batch whose "
                "final check is the suite every task also runs",
        "baseline": "distinct scratch receipt keys the run wrote"})]


# -- landing ------------------------------------------------------------------------------------------------

LANDING_EXECUTOR = textwrap.dedent('''\
    #!/bin/sh
    set -e
    sleep {sleep}
    mkdir -p out
    echo "done by $GIT_LANES_TASK" > "out/$GIT_LANES_TASK.txt"
    git lanes done >/dev/null
    {python} -c 'import time; print(time.time())' >> {stamps}
    ''')

CHECK = "#!/bin/sh\ntest -s \"out/$1.txt\" && sleep {sleep}\n"


def _landing_repo(world: World, n: int, check: Path, inputs: bool, name: str) -> Path:
    tasks = [Task(f"t{i}", [f"out/t{i}.txt"], [f"{check} t{i}"]) for i in range(n)]
    files = initiative_files("bench", tasks)
    if inputs:
        for t in tasks:
            key = f".lanes/bench/{t.task_id}.toml"
            files[key] = files[key].replace('id = "A1"\n', f'id = "A1"\ninputs = {json.dumps(t.scope)}\n')
    return make_repo(world, files, name=name)


def _landing_times(world: World, repo: Path) -> list[float]:
    """The epoch seconds of every state write that integrated a child."""
    out = []
    for entry in world.lanes_json(repo, "log", "bench"):
        if re.search(r"\bintegrated\b", entry.get("summary", "")):
            out.append(datetime.strptime(entry["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=timezone.utc).timestamp())
    if not out:
        raise BenchError("no integration in git lanes log")
    return out


def landing(world: World, runs: int, quick: bool) -> list[Result]:
    n, sleep = (3, 0.5) if quick else (8, 2.0)
    check = write(world.path("check.sh"), CHECK.format(sleep=sleep), executable=True)
    stamps = world.path("stamps")
    executor = write(world.path("executor.sh"), LANDING_EXECUTOR.format(sleep=sleep, python=sys.executable,
                                                                       stamps=stamps), executable=True)
    ideal = sleep + sleep   # the executor, then one check
    plain, trusted = [], []
    for _ in range(runs):
        for samples, trust in ((plain, False), (trusted, True)):
            repo = _landing_repo(world, n, check, True, "landing")
            if trust:
                world.git(repo, "config", "lanes.gateTrustsLane", "true")
            samples.append(_run(world, repo, "bench", str(executor), n)[0])
    detail = {"tasks": n, "max_parallel": n, "executor_s": sleep, "check_s": sleep, "ideal_s": ideal}
    return [
        Result("landing_inputs", [w / ideal for w in plain], {
            **detail, "wall_s": spread(plain), "target": 1.5,
            "what": "makespan of git lanes run, disjoint tasks whose checks declare their scope as inputs",
            "baseline": "one executor + one check"}),
        Result("landing_inputs_trusted", [w / ideal for w in trusted], {
            **detail, "wall_s": spread(trusted), "target": 1.3,
            "what": "the same with lanes.gateTrustsLane = true", "baseline": "one executor + one check"})]


def parallel_landing(world: World, runs: int, quick: bool) -> list[Result]:
    n, window, sleep = (3, 3, 0.5) if quick else (8, 4, 1.0)
    check = write(world.path("check.sh"), CHECK.format(sleep=sleep), executable=True)
    tails: dict[int, list[float]] = {1: [], window: []}
    for _ in range(runs):
        for w in (1, window):
            stamps = world.path(f"stamps-{w}")
            executor = write(world.path("executor.sh"), LANDING_EXECUTOR.format(
                sleep=sleep, python=sys.executable, stamps=stamps), executable=True)
            repo = _landing_repo(world, n, check, False, f"parallel-{w}")
            _run(world, repo, "bench", str(executor), n, ("--verify-window", str(w)))
            last_done = max(float(x) for x in stamps.read_text().split())
            tails[w].append(max(_landing_times(world, repo)) - last_done)
    return [Result("parallel_landing", [a / b for a, b in zip(tails[1], tails[window])], {
        "tasks": n, "check_s": sleep, "window": window, "tail_window_1_s": spread(tails[1]),
        f"tail_window_{window}_s": spread(tails[window]), "target": ">= 2.5",
        "what": "time from the last done to the last landing with a window of 1",
        "baseline": f"the same with a window of {window}"})]


