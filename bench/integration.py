"""Integration against repository size, and one more integration against the same work by hand.

Each run clones a cached 1,000-file and a cached 100,000-file repository (built once with
`git fast-import`) and, in each clone:

- batch `a` (one task): provision, deliver, `done` — then the timed tick that integrates it:
  the **first integration of the first batch of the clone (cold)**: nothing of git-lanes exists
  in the repository yet;
- batch `b` in the same clone: the same, timed: the **first integration of a second batch
  (warm)**; in the small clone batch `b` goes on for the marginal measure:
- N = 4 lanes provisioned, an idle tick (t0), `done` in each, the tick integrating all N (tN):
  **marginal** = (tN - t0) / N in CPU time (a difference of wall times drowns in noise), one
  more observation, lane commit and integration inside a tick, against the same integration
  **by hand** in a clone of its own: `merge-tree --write-tree`,
  `commit-tree`, `checkout --detach` of the candidate in a scratch worktree, the check there,
  `merge --ff-only` in the coordinator.

Ratios: cold and warm, 100k over 1k (same run, paired); marginal over by hand.
"""

from __future__ import annotations

from pathlib import Path

from .common import (Clock, Result, Sample, Task, World, clone, fast_import,
                     initiative_files, make_repo, ms, provision, remove, spread, tick_until_integrated, write)

CHECK = "true"
EXTRA = 4   # lanes integrated by the tick of the marginal measure (quick: 2)


def _plan(extra: int) -> dict[str, str]:
    """Batch `a`: a0. Batch `b`: b0 (its first integration), b1.. (`extra` lanes integrated in one tick)."""
    files = initiative_files("a", [Task("a0", ["work/a0"], [CHECK])])
    files.update(initiative_files("b", [Task(f"b{i}", [f"work/b{i}"], [CHECK]) for i in range(1 + extra)]))
    return files


def _lane_root(world: World, repo: Path) -> Path:
    root = repo.with_name(repo.name + ".lanes")
    world.git(repo, "config", "lanes.worktreeRoot", str(root))
    return root


def _done(world: World, lane: Path, task: str) -> None:
    write(lane / "work" / task / "out.txt", f"{task}\n")
    world.lanes(lane, "done")


def _deliver(world: World, repo: Path, task: str) -> None:
    _done(world, provision(world, repo, task), task)


def _first_integration(world: World, repo: Path, slug: str, task: str, parallel: int = 1) -> Sample:
    world.lanes(repo, "start", slug, "--yes", "--max-parallel", str(parallel))
    _deliver(world, repo, task)
    sample, _ = tick_until_integrated(world, repo, [task])
    return sample


def _marginal_ticks(world: World, repo: Path, extra: int) -> tuple[Sample, Sample, int]:
    """(an idle tick with `extra` lanes enrolled, the tick integrating them, ticks that took) in batch `b`."""
    tasks = [f"b{i}" for i in range(1, 1 + extra)]
    # every lane first, then every `done`: a provision ticks, and would integrate the lanes already done
    lanes = [provision(world, repo, task) for task in tasks]
    with Clock() as c:
        world.lanes(repo, "tick")
    for task, lane in zip(tasks, lanes):
        _done(world, lane, task)
    many, ticks = tick_until_integrated(world, repo, tasks)
    return c.sample, many, ticks


def by_hand(world: World, source: Path) -> Sample:
    """One integration with plain Git, of a lane whose base is one commit behind the head."""
    repo = clone(world, source, "by-hand")
    try:
        base = world.git(repo, "rev-parse", "HEAD").strip()
        lane, scratch = repo.with_name(repo.name + ".lane"), repo.with_name(repo.name + ".scratch")
        world.git(repo, "worktree", "add", "-q", "-b", "lane", str(lane), base)
        world.git(repo, "worktree", "add", "-q", "--detach", str(scratch), base)
        write(lane / "work" / "hand" / "out.txt", "hand\n")
        world.git(lane, "add", "-A")
        world.git(lane, "commit", "-q", "-m", "lane work")
        lane_commit = world.git(lane, "rev-parse", "HEAD").strip()
        fast_import(world, repo, {"work/other/out.txt": "sibling\n"}, message="a sibling", parent=True)
        world.git(repo, "reset", "-q", "--hard", "main")
        with Clock() as c:
            head = world.git(repo, "rev-parse", "HEAD").strip()
            tree = world.git(repo, "merge-tree", "--write-tree", head, lane_commit).split()[0]
            cand = world.git(repo, "commit-tree", tree, "-p", head, "-m", "imm(hand): by hand").strip()
            world.git(scratch, "checkout", "-q", "--detach", cand)
            world.run([CHECK], scratch)
            world.git(repo, "merge", "--ff-only", "-q", cand)
        return c.sample
    finally:
        _remove(repo)


def _remove(repo: Path) -> None:
    """The clone, its lanes and whatever else was made beside it (`<clone>.*`)."""
    remove(repo, *repo.parent.glob(repo.name + ".*"))


def measure(world: World, runs: int, quick: bool) -> list[Result]:
    small_n, large_n = (100, 2_000) if quick else (1_000, 100_000)
    extra = 2 if quick else EXTRA
    plan = _plan(extra)
    bases: dict[str, Path] = {}
    build_s: dict[str, float] = {}
    for label, n in (("small", small_n), ("large", large_n)):
        with Clock() as c:
            bases[label] = make_repo(world, plan, bulk=n, name=f"{label}-base")
        build_s[label] = round(c.sample.wall, 2)
    cold: dict[str, list[Sample]] = {"small": [], "large": []}
    warm: dict[str, list[Sample]] = {"small": [], "large": []}
    idle, many, hand, many_ticks = [], [], [], []
    for _ in range(runs):
        for label in ("small", "large"):
            repo = clone(world, bases[label], label)
            _lane_root(world, repo)
            try:
                cold[label].append(_first_integration(world, repo, "a", "a0"))
                warm[label].append(_first_integration(world, repo, "b", "b0", parallel=extra))
                if label == "small":
                    t0, tn, n = _marginal_ticks(world, repo, extra)
                    idle.append(t0)
                    many.append(tn)
                    many_ticks.append(n)
            finally:
                _remove(repo)
        hand.append(by_hand(world, bases["small"]))

    def ratio(d: dict[str, list[Sample]]) -> list[float]:
        return [big.wall / small.wall for small, big in zip(d["small"], d["large"])]

    def sizes(d: dict[str, list[Sample]]) -> dict[str, object]:
        return {f"{label}_ms": spread([ms(s.wall) for s in d[label]]) for label in ("small", "large")} | {
            f"{label}_cpu_ms": spread([ms(s.cpu) for s in d[label]]) for label in ("small", "large")} | {
            "cpu_ratio": spread([big.cpu / small.cpu for small, big in zip(d["small"], d["large"])])}

    common = {"files_small": small_n, "files_large": large_n, "build_s": build_s}
    # CPU, not wall: the difference of two ticks' wall times drowns in the noise of a shared machine;
    # floored at 1 ms so that a ratio stays a ratio
    marginal = [max((b.cpu - a.cpu) / extra, 1e-3) for a, b in zip(idle, many)]
    marginal_wall = [(b.wall - a.wall) / extra for a, b in zip(idle, many)]
    return [
        Result("integration_first_cold", ratio(cold), {
            **common, **sizes(cold), "what": "tick integrating the first lane of the first batch of a fresh clone",
            "baseline": "the same in the small repository", "target": 3.0, "issue_now": 21.9}),
        Result("integration_first_warm", ratio(warm), {
            **common, **sizes(warm), "what": "tick integrating the first lane of a second batch in the same clone",
            "baseline": "the same in the small repository", "target": 3.0}),
        Result("integration_marginal", [m / h.cpu for m, h in zip(marginal, hand)], {
            "files": small_n, "tick_idle_ms": spread([ms(s.wall) for s in idle]),
            "tick_many_ms": spread([ms(s.wall) for s in many]), "lanes_in_tick_many": extra,
            "marginal_cpu_ms": spread([ms(m) for m in marginal]),
            "by_hand_cpu_ms": spread([ms(h.cpu) for h in hand]),
            "marginal_wall_ms": spread([ms(m) for m in marginal_wall]),
            "by_hand_ms": spread([ms(h.wall) for h in hand]),
            "wall_ratio": spread([m / h.wall for m, h in zip(marginal_wall, hand)]),
            "ticks_for_many": max(many_ticks),
            "what": "CPU of ((tick integrating N lanes) - (idle tick, the same N lanes enrolled)) / N, lane commits "
                    "included",
            "baseline": "merge-tree, commit-tree, checkout in a scratch worktree, the check, merge --ff-only",
            "target": 1.5, "issue_now": 2.5}),
    ]
