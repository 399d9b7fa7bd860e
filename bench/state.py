"""State in Git: what a one-child write costs, and what an idle tick costs, at 1,000 vs 10 children.

Two repositories, one with an initiative of 10 tasks and one with 1,000 (`--quick`: 100),
each with a running batch. Each run, in each repository:

- `git-lanes provision <next task>`: one admission, i.e. one one-child write of the batch
  record. The loose objects that appear meanwhile (count, and bytes as stored) are that write's
  **amplification**; the ratio is the bytes at 1,000 children over the bytes at 10 — the
  specification's "a write costs in proportion to what changed" makes it about 1;
- `git-lanes tick` with nothing to do (every admitted lane idle, nothing startable: the
  **idle tick**); the ratio is its wall time at 1,000 children over 10.
"""

from __future__ import annotations

import os
from pathlib import Path

from .common import Clock, Result, World, file_tasks, initiative_files, make_repo, ms, spread


def _loose(repo: Path) -> dict[str, int]:
    """{object path: size on disk} of the repository's loose objects."""
    top = repo / ".git" / "objects"
    out = {}
    for d in os.listdir(top):
        if len(d) == 2:
            for name in os.listdir(top / d):
                out[d + name] = os.path.getsize(top / d / name)
    return out


def _batch(world: World, children: int, slots: int) -> Path:
    tasks = file_tasks(children, lambda t: ["true"])
    repo = make_repo(world, initiative_files("bench", tasks), name=f"children-{children}")
    # every slot open at once: each run admits one more child, and none of them is ever startable late
    world.lanes(repo, "start", "bench", "--yes", "--max-parallel", str(slots))
    return repo


def measure(world: World, runs: int, quick: bool) -> list[Result]:
    sizes = (max(10, runs + 1), 100 if quick else 1_000)
    repos = {n: _batch(world, n, runs) for n in sizes}
    written: dict[int, list[tuple[int, int]]] = {n: [] for n in sizes}
    idle: dict[int, list] = {n: [] for n in sizes}
    for r in range(runs):
        for n, repo in repos.items():
            task = file_tasks(n, lambda t: [])[r].task_id
            before = _loose(repo)
            world.lanes(repo, "provision", task)
            after = _loose(repo)
            new = [k for k in after if k not in before]
            written[n].append((len(new), sum(after[k] for k in new)))
            with Clock() as c:
                world.lanes(repo, "tick")
            idle[n].append(c.sample)
    small, large = sizes
    return [
        Result("state_write_amplification", [b / a for (_, a), (_, b) in zip(written[small], written[large])], {
            "children": list(sizes),
            **{f"objects_{n}": spread([float(k) for k, _ in written[n]]) for n in sizes},
            **{f"bytes_{n}": spread([float(b) for _, b in written[n]]) for n in sizes},
            "what": f"loose-object bytes written by one admission (a one-child write) at {large} children",
            "baseline": f"the same at {small} children", "target": "about 1 (a write costs what changed)"}),
        Result("idle_tick", [b.wall / a.wall for a, b in zip(idle[small], idle[large])], {
            "children": list(sizes),
            **{f"tick_{n}_ms": spread([ms(s.wall) for s in idle[n]]) for n in sizes},
            **{f"tick_{n}_cpu_ms": spread([ms(s.cpu) for s in idle[n]]) for n in sizes},
            "cpu_ratio": spread([b.cpu / a.cpu for a, b in zip(idle[small], idle[large])]),
            "what": f"a tick with nothing to do at {large} children", "baseline": f"the same at {small} children",
            "target": 3.0, "issue_now": 2.1}),
    ]
