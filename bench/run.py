"""`git lanes run` end to end: CPU per task, makespan, and a batch whose tasks share a slow check.

- **cpu_per_task**: `run` on 8 trivial disjoint tasks (`--max-parallel 4`; the executor writes
  its file and runs `git lanes done`; the detail has the same with an executor that only writes,
  `run` then calling `done` in-process); CPU of the whole process tree per task, over the
  by-hand floor: the same tasks done with plain Git — `worktree add`, the executor, `add -A` and
  `commit`, the check in the lane, `merge-tree --write-tree`, `commit-tree`, `merge --ff-only`,
  the check on the result, `worktree remove`, `branch -D`.
- **run_makespan**: 24 tasks x 2 s at `--max-parallel 8`, the executor running `git lanes done`
  itself (as agent CLIs do); wall over the ideal, 3 waves x 2 s = 6 s.
- **shared_slow_check**: 6 tasks at `--max-parallel 3`, an executor of 1 s, every task's checks
  being its own `test -s` plus the same `sleep 1`; wall over the ideal of one first lane (the
  executor and its checks, measured by hand) plus one run of the shared check per candidate.
"""

from __future__ import annotations

from pathlib import Path

from .common import (Clock, Result, Sample, World, executor_script, file_tasks, initiative_files, make_repo, ms,
                     run_batch, spread, waves)


def _own_check(task: str) -> str:
    return f"test -s out/{task}.txt"


def _repo(world: World, n: int, checks, name: str) -> tuple[Path, list[str]]:
    tasks = file_tasks(n, checks)
    return make_repo(world, initiative_files("bench", tasks), name=name), [t.task_id for t in tasks]


def by_hand(world: World, n: int, executor: Path) -> Sample:
    """The floor: `n` trivial tasks integrated with plain Git, one after the other."""
    repo, ids = _repo(world, n, lambda t: [_own_check(t)], "by-hand")
    with Clock() as c:
        for task in ids:
            lane = repo.with_name(f"{repo.name}.{task}")
            world.git(repo, "worktree", "add", "-q", "-b", f"hand/{task}", str(lane), "HEAD")
            world.run([str(executor)], lane, env=dict(world.env, GIT_LANES_TASK=task))
            world.git(lane, "add", "-A")
            world.git(lane, "commit", "-q", "-m", f"imm({task}): Task {task}")
            world.run(_own_check(task).split(), lane)
            head = world.git(repo, "rev-parse", "HEAD").strip()
            lane_commit = world.git(lane, "rev-parse", "HEAD").strip()
            tree = world.git(repo, "merge-tree", "--write-tree", head, lane_commit).split()[0]
            cand = world.git(repo, "commit-tree", tree, "-p", head, "-m", f"imm({task}): Task {task}").strip()
            world.git(repo, "merge", "--ff-only", "-q", cand)
            world.run(_own_check(task).split(), repo)
            world.git(repo, "worktree", "remove", str(lane))
            world.git(repo, "branch", "-q", "-D", f"hand/{task}")
    return c.sample


def cpu_per_task(world: World, runs: int, quick: bool) -> Result:
    n, parallel = (3, 2) if quick else (8, 4)
    agent = executor_script(world, sleep=0, runs_done=True, name="agent")
    plain = executor_script(world, sleep=0, runs_done=False, name="plain")
    agents, plains, hand = [], [], []
    for _ in range(runs):
        for executor, samples in ((agent, agents), (plain, plains)):
            repo, _ = _repo(world, n, lambda t: [_own_check(t)], "cpu")
            samples.append(run_batch(world, repo, "bench", str(executor), parallel)[0])
        hand.append(by_hand(world, n, plain))
    return Result("cpu_per_task", [a.cpu / b.cpu for a, b in zip(agents, hand)], {
        "tasks": n, "max_parallel": parallel,
        "run_cpu_per_task_ms": spread([ms(s.cpu / n) for s in agents]),
        "by_hand_cpu_per_task_ms": spread([ms(s.cpu / n) for s in hand]),
        "run_wall_ms": spread([ms(s.wall) for s in agents]), "by_hand_wall_ms": spread([ms(s.wall) for s in hand]),
        "driver_runs_done": {
            "ratio": spread([a.cpu / b.cpu for a, b in zip(plains, hand)]),
            "run_cpu_per_task_ms": spread([ms(s.cpu / n) for s in plains]),
            "what": "the same with an executor that only writes its file: run calls done in-process"},
        "what": "CPU of `git lanes run` (whole process tree) per trivial task, the executor running "
                "`git lanes done` itself",
        "baseline": "the same tasks by hand with plain Git (worktree add, the executor's write, add and commit, "
                    "check, merge-tree, commit-tree, merge --ff-only, check, worktree remove)",
        "target": 3.0, "issue_now": 6.9})


def makespan(world: World, runs: int, quick: bool) -> Result:
    n, parallel, sleep = (4, 2, 0.5) if quick else (24, 8, 2.0)
    executor = executor_script(world, sleep=sleep, runs_done=True)
    ideal = waves(n, parallel) * sleep
    samples = []
    for _ in range(runs):
        repo, _ = _repo(world, n, lambda t: [_own_check(t)], "makespan")
        samples.append(run_batch(world, repo, "bench", str(executor), parallel)[0])
    return Result("run_makespan", [s.wall / ideal for s in samples], {
        "tasks": n, "max_parallel": parallel, "executor_s": sleep, "ideal_s": ideal,
        "wall_s": spread([s.wall for s in samples]), "cpu_s": spread([s.cpu for s in samples]),
        "what": "wall time of git lanes run, the executor running `git lanes done` itself",
        "baseline": "ceil(tasks / max_parallel) x executor time", "target": 1.3, "issue_now": 2.2})


def shared_slow_check(world: World, runs: int, quick: bool) -> Result:
    n, parallel, sleep = (3, 2, 0.3) if quick else (6, 3, 1.0)
    shared = f"sleep {sleep:g}"
    executor = executor_script(world, sleep=sleep, runs_done=False)
    samples, ideals = [], []
    for _ in range(runs):
        repo, ids = _repo(world, n, lambda t: [_own_check(t), shared], "shared")
        samples.append(run_batch(world, repo, "bench", str(executor), parallel)[0])
        # the ideal, measured by hand in the finished batch's tree: one executor, then its checks
        scratch = repo.with_name(repo.name + ".hand")
        scratch.mkdir()
        first = world.timed([str(executor)], scratch, env=dict(world.env, GIT_LANES_TASK=ids[0]))
        own = world.timed(_own_check(ids[0]).split(), scratch)
        check = world.timed(shared.split(), scratch)
        ideals.append(first.wall + own.wall + check.wall + n * check.wall)
    return Result("shared_slow_check", [s.wall / i for s, i in zip(samples, ideals)], {
        "tasks": n, "max_parallel": parallel, "executor_s": sleep, "shared_check": shared,
        "ideal_s": spread(ideals), "wall_s": spread([s.wall for s in samples]),
        "cpu_s": spread([s.cpu for s in samples]),
        "what": "wall time of git lanes run when every task's checks include the same slow command",
        "baseline": "one first lane (executor + its checks, by hand) + one run of the shared check per candidate",
        "target": 1.3, "issue_now": 2.75})


def measure_cpu(world: World, runs: int, quick: bool) -> list[Result]:
    return [cpu_per_task(world, runs, quick)]


def measure_makespan(world: World, runs: int, quick: bool) -> list[Result]:
    return [makespan(world, runs, quick)]


def measure_shared(world: World, runs: int, quick: bool) -> list[Result]:
    return [shared_slow_check(world, runs, quick)]
