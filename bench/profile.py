"""Where the time goes: profiles of `git lanes run` per trivial task and of the lane-side commands.

    python -m bench.profile run  [--tasks N] [--parallel P] [--top K]
        `git lanes run` on N trivial tasks, in this process tree: its CPU per task (own and
        children's), the top functions of a per-thread CPU cProfile, and every Git call it made,
        by phase of a task's life (provision, session, done, tick, lane commit, integrate, release)
        and by command line.
    python -m bench.profile lane [--top K]
        `git-lanes task --json` and `git-lanes done` in a lane: `python -X importtime` (what
        start-up imports cost, by package) and a cProfile of each, with their Git calls.
    python -m bench.profile tick [--tasks N] [--top K]
        an idle `git-lanes tick` in a batch of N children (default 1,000), one lane admitted: what
        it costs as the batch grows.
    python -m bench.profile gitlog [--tasks N] [--parallel P]
        `git lanes run` with an executor that runs `git lanes done` itself, under a `git` on PATH
        that logs every argv: every Git process of the whole tree, executors included.

Each works in a hermetic world like the benchmarks (see `bench.common.World`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pstats
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .common import (Clock, World, executor_script, file_tasks, initiative_files, make_repo, provision, run_batch,
                     write)

ROOT = Path(__file__).resolve().parent.parent
SAFE = {"core.hooksPath=/dev/null", "core.fsmonitor=false", "commit.gpgSign=false", "submodule.recurse=false",
        "merge.directoryRenames=false"}


def _repo(world: World, n: int) -> Path:
    tasks = file_tasks(n, lambda t: [f"test -s out/{t}.txt"])
    return make_repo(world, initiative_files("bench", tasks), name="profile")


def _env(world: World) -> dict[str, str]:
    return dict(world.env, PYTHONPATH=str(ROOT) + os.pathsep + world.env.get("PYTHONPATH", ""))


def inproc(world: World, cwd: Path, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]], pstats.Stats]:
    """Run `git-lanes ARGS` under `bench._inproc`: (cpu, calls, stats)."""
    out = Path(tempfile.mkdtemp(dir=world.root, prefix="inproc-"))
    world.run([sys.executable, "-m", "bench._inproc", str(out), *args], cwd, env=_env(world))
    cpu = json.loads((out / "cpu.json").read_text())
    calls = json.loads((out / "calls.json").read_text())
    return cpu, calls, pstats.Stats(str(out / "profile.pstats"))


# -- Git command lines, normalized -------------------------------------------------------------------

def normalize(argv: list[str], root: str) -> str:
    """A Git argv as a readable, groupable line: our fixed `-c` settings and `--git-dir`/`--work-tree`
    dropped, object ids, paths and task ids replaced by placeholders."""
    words, skip = [], False
    for i, w in enumerate(argv):
        if skip:
            skip = False
            continue
        if w == "-c" and i + 1 < len(argv) and argv[i + 1] in SAFE:
            skip = True
            continue
        if w.startswith(("--git-dir=", "--work-tree=")):
            continue
        w = w.replace(root, "<tmp>")
        w = re.sub(r"\b[0-9a-f]{40}\b", "<oid>", w)
        w = re.sub(r"<tmp>/\S*", "<path>", w)
        w = re.sub(r"\bt\d+\b", "<task>", w)
        w = re.sub(r"\bbench-\d{8}T\d{6}Z-[0-9a-f]{6}\b", "<batch>", w)
        words.append(w)
    if words and os.path.basename(words[0]) == "git":
        words[0] = "git"
    line = " ".join(words)
    return line if len(line) <= 140 else line[:137] + "..."


def git_calls(calls: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in calls if c["argv"] and os.path.basename(c["argv"][0]) == "git"]


def print_calls(calls: list[dict[str, Any]], root: str, tasks: int, top: int) -> None:
    gits = git_calls(calls)
    print(f"\nGit processes: {len(gits)} in all, {len(gits) / tasks:.1f} per task; "
          f"other processes: {len(calls) - len(gits)}")
    by_phase = collections.Counter(c["phase"] for c in gits)
    print("by phase (per task):  " + ",  ".join(f"{p} {n / tasks:.1f}" for p, n in by_phase.most_common()))
    lines = collections.Counter((c["phase"], normalize(c["argv"], root)) for c in gits)
    print(f"top {top} command lines (count in all; phase):")
    for (phase, line), n in lines.most_common(top):
        print(f"  {n:4d}  [{phase}]  {line}")


# -- cProfile tables ---------------------------------------------------------------------------------------

def _label(key: tuple[str, int, str]) -> str:
    path, line, func = key
    if path == "~":
        return func
    parts = Path(path).parts
    for anchor in ("git_lanes", "pydantic", "dulwich", "click", "pydantic_core", "platformdirs"):
        if anchor in parts:
            path = "/".join(parts[parts.index(anchor):])
            break
    else:
        path = Path(path).name
    return f"{path}:{line}({func})"


def print_profile(stats: pstats.Stats, top: int, title: str) -> None:
    rows = stats.stats  # type: ignore[attr-defined]
    total = max((v[3] for v in rows.values()), default=0.0)
    print(f"\n{title}: profiled CPU (per-thread CPU clock, all threads) {total * 1000:.0f} ms at the top frame")
    print(f"  by cumulative (git_lanes functions), top {top}:")
    ours = [(k, v) for k, v in rows.items() if "git_lanes" in k[0]]
    for k, (cc, nc, tt, ct, _) in sorted(ours, key=lambda kv: -kv[1][3])[:top]:
        print(f"    {ct * 1000:8.1f} ms cum  {tt * 1000:7.1f} ms self  {nc:6d} calls  {_label(k)}")
    print(f"  by own time (any function), top {top}:")
    for k, (cc, nc, tt, ct, _) in sorted(rows.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"    {tt * 1000:8.1f} ms self  {ct * 1000:8.1f} ms cum  {nc:6d} calls  {_label(k)}")


# -- the three profiles ---------------------------------------------------------------------------------------

def profile_run(world: World, tasks: int, parallel: int, top: int) -> None:
    repo = _repo(world, tasks)
    executor = executor_script(world, sleep=0, runs_done=False)
    with Clock() as c:
        cpu, calls, stats = inproc(world, repo, "run", "bench", "--executor", str(executor), "--max-parallel",
                                   str(parallel), "--yes")
    own, children = cpu["process_s"], cpu["children_s"]
    print(f"git lanes run: {tasks} trivial tasks, --max-parallel {parallel}, exit {cpu['exit']}, "
          f"wall {c.sample.wall:.2f} s (under the profiler)")
    print(f"CPU: run's own process {own:.2f} s ({own / tasks * 1000:.0f} ms/task), its children {children:.2f} s "
          f"({children / tasks * 1000:.0f} ms/task)")
    print_calls(calls, str(world.root), tasks, top)
    print_profile(stats, top, "git lanes run")


IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s+)(\S+)")


def _importtime_once(world: World, cwd: Path, args: list[str]) -> str:
    return world.run([sys.executable, "-X", "importtime", "-m", "git_lanes", *args], cwd, check=False).stderr


def _import_total(text: str) -> int:
    return sum(int(m[1]) for m in map(IMPORT_LINE.match, text.splitlines()) if m)


def importtime(world: World, cwd: Path, args: list[str], top: int, tries: int = 5) -> None:
    """The least disturbed of `tries` runs (the smallest total): imports are deterministic, noise is not."""
    text = min((_importtime_once(world, cwd, args) for _ in range(tries)), key=_import_total)
    per_pkg: collections.Counter[str] = collections.Counter()
    roots = []
    total = 0
    for line in text.splitlines():
        m = IMPORT_LINE.match(line)
        if not m:
            continue
        self_us, cum_us, indent, name = int(m[1]), int(m[2]), len(m[3]), m[4]
        total += self_us
        per_pkg[name.split(".")[0] if not name.startswith("git_lanes.") else name] += self_us
        if indent == 1:
            roots.append((cum_us, name))
    print(f"\n`git-lanes {' '.join(args)}` imports: {total / 1000:.0f} ms in all (python -X importtime, self times; "
          f"the least disturbed of {tries} runs)")
    print("  by package (git_lanes by module), top " + str(top) + ":")
    for name, us in per_pkg.most_common(top):
        print(f"    {us / 1000:7.1f} ms  {name}")
    print("  top-level imports by cumulative time:")
    for cum, name in sorted(roots, reverse=True)[:top]:
        print(f"    {cum / 1000:7.1f} ms  {name}")


def profile_lane(world: World, top: int) -> None:
    repo = _repo(world, 1)
    world.lanes(repo, "start", "bench", "--yes")
    lane = provision(world, repo, "t0")
    world.lanes(lane, "task", "--json")          # warm: .pyc files, page cache
    for args in (["task", "--json"], ["done"]):
        if args == ["done"]:
            write(lane / "out" / "t0.txt", "delivered\n")
        importtime(world, lane, args, top)
        cpu, calls, stats = inproc(world, lane, *args)
        print(f"`git-lanes {' '.join(args)}`: own CPU {cpu['process_s'] * 1000:.0f} ms, children "
              f"{cpu['children_s'] * 1000:.0f} ms")
        print_calls(calls, str(world.root), 1, top)
        print_profile(stats, top, f"git-lanes {' '.join(args)}")


GIT_WRAPPER = """#!/bin/sh
printf '%s\\037' "$PPID" "$PWD" "$@" >> "{log}"
printf '\\n' >> "{log}"
exec {git} "$@"
"""


def _git_shim(world: World, log: Path) -> None:
    """A `git` that logs its argv, first on PATH and in Git's exec path: Git puts its exec path first
    on the PATH of what it runs (so `git lanes done` reaches git-lanes' own Git calls too)."""
    exec_path = Path(world.git(world.root, "--exec-path").strip())
    shim = world.root / "git-shim"
    shim.mkdir()
    for entry in exec_path.iterdir():
        if entry.name != "git":
            (shim / entry.name).symlink_to(entry)
    write(shim / "git", GIT_WRAPPER.format(log=log, git=exec_path / "git"), executable=True)
    world.env["GIT_EXEC_PATH"] = str(shim)
    world.env["PATH"] = f"{shim}{os.pathsep}{world.env['PATH']}"


def profile_gitlog(world: World, tasks: int, parallel: int, top: int) -> None:
    repo = _repo(world, tasks)
    log = world.root / "git.log"
    _git_shim(world, log)
    executor = executor_script(world, sleep=0, runs_done=True)
    sample, _ = run_batch(world, repo, "bench", str(executor), parallel)
    entries = [line.split("\x1f")[:-1] for line in log.read_text().splitlines() if line]
    lines = collections.Counter(normalize(["git", *e[2:]], str(world.root)) for e in entries)
    print(f"git lanes run, {tasks} tasks, executor runs `git lanes done` itself: wall {sample.wall:.2f} s, "
          f"CPU {sample.cpu:.2f} s; Git processes {len(entries)} ({len(entries) / tasks:.1f} per task)")
    print(f"top {top} command lines (count in all):")
    for line, n in lines.most_common(top):
        print(f"  {n:4d}  {line}")


def profile_tick(world: World, children: int, top: int) -> None:
    repo = _repo(world, children)
    world.lanes(repo, "start", "bench", "--yes", "--max-parallel", "2")
    provision(world, repo, file_tasks(children, lambda t: [])[0].task_id)
    world.lanes(repo, "tick")   # warm
    cpu, calls, stats = inproc(world, repo, "tick")
    print(f"idle `git-lanes tick` at {children} children: own CPU {cpu['process_s'] * 1000:.0f} ms, children "
          f"{cpu['children_s'] * 1000:.0f} ms")
    print_calls(calls, str(world.root), 1, top)
    print_profile(stats, top, "git-lanes tick")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("run", "lane", "tick", "gitlog"))
    ap.add_argument("--tasks", type=int, default=None, help="tasks (run, gitlog: 8) or children (tick: 1000)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    from .__main__ import _tmp_default

    tempfile.tempdir = _tmp_default() or tempfile.gettempdir()
    with World(keep=args.keep) as world:
        if args.what == "run":
            profile_run(world, args.tasks or 8, args.parallel, args.top)
        elif args.what == "lane":
            profile_lane(world, args.top)
        elif args.what == "tick":
            profile_tick(world, args.tasks or 1000, args.top)
        else:
            profile_gitlog(world, args.tasks or 8, args.parallel, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
