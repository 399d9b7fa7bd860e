"""Start-up time of the cheap paths, against `python -c "import click"`.

    python bench/startup.py [--runs N] [--check]

Measures the median wall time of

  - `git-lanes --version`
  - `git-lanes completion bash`
  - a completion request (`_GIT_LANES_COMPLETE=bash_complete COMP_WORDS="git-lanes ti"
    COMP_CWORD=1 git-lanes`)

and of `python -c "import click"` with the same interpreter, each as a child process of
this one, interleaved so that drift hits them alike, and prints each ratio to the baseline.
The target is a ratio of at most 2; `--check` exits 1 when one is above it.

`git-lanes` is the console script beside the interpreter (the installed entry point); if
there is none, `python -c "from git_lanes.cli import entry; entry()"` stands in for it.
Children run with bytecode writing allowed (an installed package has its .pyc files) and
after one warm-up run each, so the figures are those of a warm installed tool.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 2.0


def _entry() -> list[str]:
    script = Path(sys.executable).parent / "git-lanes"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from git_lanes.cli import entry; sys.argv[0] = 'git-lanes'; entry()"]


def cases() -> list[tuple[str, list[str], dict[str, str]]]:
    entry = _entry()
    return [
        ('python -c "import click"', [sys.executable, "-c", "import click"], {}),
        ("git-lanes --version", entry + ["--version"], {}),
        ("git-lanes completion bash", entry + ["completion", "bash"], {}),
        ("completion request (git-lanes ti<TAB>)", entry,
         {"_GIT_LANES_COMPLETE": "bash_complete", "COMP_WORDS": "git-lanes ti", "COMP_CWORD": "1"}),
    ]


def _time(argv: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-400:]}")
    return elapsed


def measure(runs: int) -> list[tuple[str, float]]:
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    table = cases()
    samples: dict[str, list[float]] = {name: [] for name, _, _ in table}
    with tempfile.TemporaryDirectory() as cwd:  # outside any repository, like a first TAB
        for name, argv, extra in table:
            _time(argv, {**base_env, **extra}, cwd)  # warm-up: page cache, .pyc files
        for _ in range(runs):
            for name, argv, extra in table:
                samples[name].append(_time(argv, {**base_env, **extra}, cwd))
    return [(name, statistics.median(values)) for name, values in samples.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (default 21)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is above {TARGET}")
    args = parser.parse_args(argv)
    results = measure(args.runs)
    baseline = results[0][1]
    width = max(len(name) for name, _ in results)
    print(f"median of {args.runs} runs, {sys.executable}")
    worst = 0.0
    for name, median in results:
        ratio = median / baseline
        if name != results[0][0]:
            worst = max(worst, ratio)
        print(f"{name:<{width}}  {median * 1000:7.1f} ms  {ratio:4.2f}x")
    verdict = "ok" if worst <= TARGET else "ABOVE TARGET"
    print(f"worst ratio {worst:.2f}x (target <= {TARGET:.0f}x): {verdict}")
    return 1 if args.check and worst > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
