"""Integration cost, as ratios measured in one process tree (never absolute times in tests).

1. size: an integrating tick in a 100,000-file repository vs the same in a 1,000-file one
   (target <= 3x);
2. marginal: one more integration by `git lanes tick` vs the same work by hand with git —
   `merge-tree --write-tree`, `commit-tree`, `merge --ff-only`, one run of the check
   (target <= 2.5x).

Usage: python bench/integrate.py [--files N] [--small N] [--rounds K]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECK = "python3 -c pass"


def sh(cwd, *args, env=None, input=None) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, input=input, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def make_repo(root: Path, files: int, tasks: int, env) -> None:
    """A repository with `files` files (written with fast-import) and an initiative of `tasks`."""
    root.mkdir(parents=True)
    sh(root, "git", "init", "-q", env=env)
    stream = ["commit refs/heads/main", "committer B <b@e> 1700000000 +0000", "data 4", "bulk"]
    for i in range(files):
        stream += [f"M 100644 inline bulk/{i // 1000:03d}/f{i}.txt", f"data {len(str(i)) + 1}", f"{i}"]
    lanes_dir = root / ".lanes" / "bench"
    init = f'title = "bench"\ntasks = [{", ".join(f"{chr(34)}t{i}{chr(34)}" for i in range(tasks))}]\n'
    entries = {".lanes/bench/initiative.toml": init}
    for i in range(tasks):
        entries[f".lanes/bench/t{i}.toml"] = (
            f'task_id = "t{i}"\nrevision = 1\ngoal = "Task {i}"\nscope = ["work/t{i}"]\n'
            f'[[acceptance]]\nid = "A1"\ntext = "ok"\ncheck = "{CHECK}"\n')
    for path, text in entries.items():
        data = text.encode()
        stream += [f"M 100644 inline {path}", f"data {len(data)}", text]
    sh(root, "git", "fast-import", "--quiet", env=env, input="\n".join(stream) + "\n")
    sh(root, "git", "checkout", "-q", "-f", "main", env=env)
    del lanes_dir


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def lanes_tick_cost(root: Path, env, batches: list[int]) -> list[float]:
    """For each k in `batches`: provision k lanes, deliver, done (untimed); one tick integrating
    all k (timed); release them."""
    import json

    sh(root, "git", "lanes", "start", "bench", "--yes", "--max-parallel", str(max(batches)), env=env)
    costs, n = [], 0
    for k in batches:
        tasks = [f"t{n + j}" for j in range(k)]
        n += k
        for task in tasks:
            out = sh(root, "git", "lanes", "provision", task, "--json", env=env)
            lane = next(h["lane_path"] for h in json.loads(out)["handoffs"] if h["task_id"] == task)
            Path(lane, "work", task).mkdir(parents=True)
            Path(lane, "work", task, "out.txt").write_text(f"{task}\n")
            sh(lane, "git", "lanes", "done", env=env)
        costs.append(timed(lambda: sh(root, "git", "lanes", "tick", env=env)))
        for task in tasks:
            sh(root, "git", "lanes", "release", task, env=env)
    return costs


def by_hand_cost(root: Path, env, rounds: int) -> list[float]:
    """The same integration with plain git: merge-tree, commit-tree, merge --ff-only, the check."""
    costs = []
    for i in range(rounds):
        base = sh(root, "git", "rev-parse", "HEAD", env=env).strip()
        lane = root.parent / f"{root.name}-hand-{i}"
        sh(root, "git", "worktree", "add", "-q", "-b", f"hand/{i}", str(lane), base, env=env)
        Path(lane, "work", f"h{i}").mkdir(parents=True)
        Path(lane, "work", f"h{i}", "out.txt").write_text(f"{i}\n")
        sh(lane, "git", "add", "-A", env=env)
        sh(lane, "git", "commit", "-q", "-m", f"hand {i}", env=env)
        lane_commit = sh(lane, "git", "rev-parse", "HEAD", env=env).strip()
        sh(root, "git", "commit", "-q", "--allow-empty", "-m", f"move head {i}", env=env)

        def work():
            head = sh(root, "git", "rev-parse", "HEAD", env=env).strip()
            tree = sh(root, "git", "merge-tree", "--write-tree", head, lane_commit, env=env).split()[0]
            cand = sh(root, "git", "commit-tree", tree, "-p", head, "-m", f"hand {i}", env=env).strip()
            subprocess.run(CHECK.split(), cwd=root, env=env, check=True)
            sh(root, "git", "merge", "--ff-only", "-q", cand, env=env)

        costs.append(timed(work))
    return costs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="git-lanes-bench-"))
    env = dict(os.environ, HOME=str(work / "home"), GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="B",
               GIT_AUTHOR_EMAIL="b@e", GIT_COMMITTER_NAME="B", GIT_COMMITTER_EMAIL="b@e",
               XDG_DATA_HOME=str(work / "data"))
    (work / "home").mkdir()
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    try:
        ticks = {}
        for label, n in (("small", args.small), ("large", args.files)):
            root = work / label
            make_repo(root, n, 1 + 3 * args.rounds, env)
            # the first integration creates the batch's scratch worktree (once per batch): after it,
            # alternate ticks integrating one lane and ticks integrating two
            costs = lanes_tick_cost(root, env, [1] + [1, 2] * args.rounds)[1:]
            one, two = costs[0::2], costs[1::2]
            ticks[label] = (statistics.median(one), statistics.median(two))
            print(f"{label:>5}: {n:>7} files, tick integrating 1 lane {ticks[label][0]:.3f} s, 2 lanes {ticks[label][1]:.3f} s")
        ratio = ticks["large"][0] / ticks["small"][0]
        print(f"size ratio (integrating tick, large/small): {ratio:.2f}x (target <= 3x)")
        marginal = ticks["small"][1] - ticks["small"][0]
        hand = statistics.median(by_hand_cost(work / "small", env, args.rounds))
        print(f"marginal integration in a tick: {marginal:.3f} s; by hand with git: {hand:.3f} s")
        print(f"marginal ratio (one more integration / by hand): {marginal / hand:.2f}x (target <= 2.5x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
