"""Makespan of `git lanes run` against the ideal (SPEC §13, issue 7).

24 disjoint tasks, an executor that sleeps 2 s and writes the task's file, `--max-parallel 8`:
the ideal is 3 waves x 2 s = 6 s. The ratio is the wall time of `git lanes run` (one process,
start to the end of the summary) over the ideal; the target is <= 1.3.

    python bench/makespan.py [--tasks 24] [--parallel 8] [--sleep 2] [--keep]

Runs in a temporary directory with its own HOME, so it touches nothing of yours.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time


def git(cwd: str, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: str, tasks: int, env: dict[str, str]) -> list[str]:
    os.makedirs(root)
    git(root, "init", "-q", "-b", "main", env=env)
    folder = os.path.join(root, ".lanes", "bench")
    os.makedirs(folder)
    ids = [f"t{i:02d}" for i in range(tasks)]
    with open(os.path.join(folder, "initiative.toml"), "w") as f:
        f.write('title = "makespan"\ntasks = [' + ", ".join(f'"{t}"' for t in ids) + "]\n")
    for t in ids:
        with open(os.path.join(folder, f"{t}.toml"), "w") as f:
            f.write(f'task_id = "{t}"\nrevision = 1\ngoal = "Write out/{t}.txt"\nscope = ["out/{t}.txt"]\n'
                    f'[[acceptance]]\nid = "A1"\ntext = "the file exists"\ncheck = "test -s out/{t}.txt"\n')
    with open(os.path.join(root, "README"), "w") as f:
        f.write("makespan bench\n")
    git(root, "add", "-A", env=env)
    git(root, "commit", "-q", "-m", "initiative", env=env)
    return ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--sleep", type=float, default=2.0)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="git-lanes-makespan-")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_DATA_HOME=os.path.join(home, ".local", "share"), XDG_STATE_HOME=os.path.join(home, ".local", "state"),
               GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="Bench", GIT_AUTHOR_EMAIL="bench@example.com",
               GIT_COMMITTER_NAME="Bench", GIT_COMMITTER_EMAIL="bench@example.com")
    repo = os.path.join(tmp, "repo")
    ids = make_repo(repo, args.tasks, env)
    executor = f"sh -c 'sleep {args.sleep:g}; mkdir -p out; echo done > out/$GIT_LANES_TASK.txt'"
    cmd = [sys.executable, "-m", "git_lanes", "run", "bench", "--executor", executor,
           "--max-parallel", str(args.parallel), "--yes"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    ideal = math.ceil(args.tasks / args.parallel) * args.sleep
    commits = git(repo, "rev-list", "--count", "main..imm/bench", env=env).strip()
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
    print(f"tasks {len(ids)}, max parallel {args.parallel}, executor sleeps {args.sleep:g} s, exit {proc.returncode}, "
          f"{commits} commits")
    print(f"wall {wall:.2f} s, ideal {ideal:.2f} s, ratio {wall / ideal:.3f} (target <= 1.3)")
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
