"""What every benchmark family shares: a hermetic world, repository builders, timing, statistics.

Nothing here knows a benchmark. A `World` is a temporary directory with its own HOME and Git
configuration in which subprocesses run (`git`, `git-lanes`, checks); `Sample` is the wall and
CPU time of one measured stretch, CPU being the `RUSAGE_CHILDREN` delta, i.e. every finished
child process (and its waited-for descendants) of this process; `Result` is what a benchmark
returns: one ratio per run and the detail that explains it.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

IDENT = ("Bench", "bench@example.com")
FIXED_EPOCH = 1_700_000_000
TIMEOUT = 900          # seconds any one command may take before the benchmark gives up on it


class BenchError(Exception):
    """A benchmark could not measure (a command failed, a batch did not complete)."""


# -- statistics -----------------------------------------------------------------------------------

def spread(values: Sequence[float]) -> dict[str, float]:
    """{median, min, max} of `values` (rounded for printing; never empty)."""
    if not values:
        raise BenchError("no samples")
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


@dataclass
class Result:
    """One benchmark's outcome: a ratio per run (measured / baseline) and its explanation."""
    name: str
    ratios: list[float]
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ratio": spread(self.ratios), "runs": len(self.ratios), "detail": self.detail}


# -- timing ---------------------------------------------------------------------------------------

def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass
class Sample:
    wall: float
    cpu: float

    def __add__(self, other: "Sample") -> "Sample":
        return Sample(self.wall + other.wall, self.cpu + other.cpu)


class Clock:
    """`with Clock() as c: ...` then `c.sample`: wall time and the CPU of children reaped meanwhile."""

    def __enter__(self) -> "Clock":
        self._cpu = _children_cpu()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample = Sample(time.perf_counter() - self._wall, _children_cpu() - self._cpu)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


# -- the hermetic world -----------------------------------------------------------------------------

def lanes_entry() -> list[str]:
    """The installed `git-lanes` beside this interpreter (what `git lanes` runs)."""
    script = Path(sys.executable).parent / "git-lanes"
    if not script.exists():
        raise BenchError(f"no git-lanes beside {sys.executable}: install the package into this environment")
    return [str(script)]


class World:
    """A temporary directory with its own HOME, Git configuration and identities.

    Commands run with the caller's environment minus every `GIT_*` variable, plus
    `GIT_CONFIG_NOSYSTEM=1`, fixed identities, XDG folders inside the world, and the folder of
    this interpreter first on PATH (so `git lanes` and `python` are this environment's).
    """

    def __init__(self, keep: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="git-lanes-bench-")).resolve()
        self.keep = keep
        home = self.root / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("GIT_") and k not in {"PYTHONDONTWRITEBYTECODE", "NO_COLOR", "GH_TOKEN",
                                                          "GITHUB_TOKEN", "VIRTUAL_ENV"}}
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   XDG_STATE_HOME=str(home / ".local/state"), XDG_CACHE_HOME=str(home / ".cache"),
                   GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME=IDENT[0], GIT_AUTHOR_EMAIL=IDENT[1],
                   GIT_COMMITTER_NAME=IDENT[0], GIT_COMMITTER_EMAIL=IDENT[1], GIT_TERMINAL_PROMPT="0",
                   LC_ALL="C.UTF-8", PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        self.env = env
        # gc and maintenance off: an auto-gc in the middle of a timed command is noise, not signal
        (home / ".gitconfig").write_text(
            "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
            "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n")
        self._n = 0

    def close(self) -> None:
        if not self.keep:
            remove(self.root)

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, name: str) -> Path:
        """A fresh path in the world (not created) named after `name`."""
        self._n += 1
        return self.root / f"{name}-{self._n}"

    # -- running ------------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], cwd: Path | str, *, input: str | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(list(argv), cwd=cwd, env=env or self.env, input=input, capture_output=True,
                                  text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{shlex.join(argv)} (in {cwd}) did not end within {TIMEOUT} s") from None
        if check and proc.returncode != 0:
            raise BenchError(f"{shlex.join(argv)} (in {cwd}) failed with exit code {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
        return proc

    def git(self, cwd: Path | str, *args: str, input: str | None = None) -> str:
        return self.run(["git", *args], cwd, input=input).stdout

    def lanes(self, cwd: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`git-lanes ARGS` (the console script, no `git` in front: one process less to time)."""
        return self.run([*lanes_entry(), *args], cwd, check=check)

    def lanes_json(self, cwd: Path | str, *args: str) -> dict[str, Any]:
        return json.loads(self.lanes(cwd, *args, "--json").stdout)

    def timed(self, argv: Sequence[str], cwd: Path | str, **kw: Any) -> Sample:
        with Clock() as c:
            self.run(argv, cwd, **kw)
        return c.sample


# -- repositories ------------------------------------------------------------------------------------

@dataclass
class Task:
    """One task of a generated initiative."""
    task_id: str
    scope: list[str]
    checks: list[str]
    blocked_by: list[str] = field(default_factory=list)
    goal: str = ""

    def toml(self) -> str:
        goal = self.goal or f"Task {self.task_id}"
        text = (f'task_id = "{self.task_id}"\nrevision = 1\ngoal = {json.dumps(goal)}\n'
                f"scope = {json.dumps(self.scope)}\nblocked_by = {json.dumps(self.blocked_by)}\n")
        for i, check in enumerate(self.checks, 1):
            text += f'[[acceptance]]\nid = "A{i}"\ntext = "check {i}"\ncheck = {json.dumps(check)}\n'
        return text


def initiative_files(slug: str, tasks: Sequence[Task]) -> dict[str, str]:
    """The plan files of an initiative, as {repo path: text}."""
    files = {f".lanes/{slug}/initiative.toml":
             f'title = "{slug}"\ntasks = {json.dumps([t.task_id for t in tasks])}\n'}
    for t in tasks:
        files[f".lanes/{slug}/{t.task_id}.toml"] = t.toml()
    return files


def file_tasks(n: int, checks: Callable[[str], list[str]], prefix: str = "t") -> list[Task]:
    """`n` disjoint tasks, each owning the file `out/<id>.txt`."""
    width = len(str(max(n - 1, 0)))
    ids = [f"{prefix}{i:0{width}d}" for i in range(n)]
    return [Task(t, [f"out/{t}.txt"], checks(t)) for t in ids]


def fast_import(world: World, root: Path, files: dict[str, str] | None = None, bulk: int = 0,
                branch: str = "main", message: str = "bench repository", parent: bool = False) -> None:
    """One commit on `branch` holding `files` plus `bulk` generated files (`bulk/NNN/fI.txt`),
    written with `git fast-import` (no working-tree writes, no `git add`)."""
    chunks: list[bytes] = []
    msg = message.encode()
    stamp = f"{IDENT[0]} <{IDENT[1]}> {FIXED_EPOCH} +0000"
    chunks.append(f"commit refs/heads/{branch}\ncommitter {stamp}\ndata {len(msg)}\n".encode() + msg + b"\n")
    if parent:
        chunks.append(f"from refs/heads/{branch}^0\n".encode())
    for i in range(bulk):
        data = f"{i}\n".encode()
        chunks.append(f"M 100644 inline bulk/{i // 1000:03d}/f{i}.txt\ndata {len(data)}\n".encode() + data + b"\n")
    for path, text in (files or {}).items():
        data = text.encode()
        mode = "100755" if text.startswith("#!") else "100644"
        chunks.append(f"M {mode} inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    proc = subprocess.run(["git", "fast-import", "--quiet"], cwd=root, env=world.env, input=b"".join(chunks),
                          capture_output=True)
    if proc.returncode != 0:
        raise BenchError(f"git fast-import failed: {proc.stderr.decode(errors='replace')[-800:]}")


def make_repo(world: World, files: dict[str, str], bulk: int = 0, name: str = "repo") -> Path:
    """A fresh repository whose one commit on `main` holds `files` and `bulk` generated files,
    checked out."""
    root = world.path(name)
    root.mkdir()
    world.git(root, "init", "-q", "-b", "main")
    fast_import(world, root, files, bulk)
    world.git(root, "checkout", "-q", "-f", "main")
    return root


def clone(world: World, source: Path, name: str = "clone") -> Path:
    """A local clone (objects hard-linked) with `main` checked out."""
    dest = world.path(name)
    world.git(world.root, "clone", "-q", str(source), str(dest))
    return dest


def remove(*paths: Path) -> None:
    """Remove trees (`rm -rf`: several times faster than shutil.rmtree on 100,000 files)."""
    existing = [str(p) for p in paths if os.path.lexists(p)]
    if existing:
        subprocess.run(["rm", "-rf", "--", *existing], check=False)


def write(path: Path, text: str, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(0o755)
    return path


# -- batches ---------------------------------------------------------------------------------------

def handoff_lane(report: dict[str, Any], task: str) -> str:
    """The lane path the report's executor handoff names for `task`."""
    for h in report.get("handoffs", []):
        if h.get("task_id") == task and h.get("lane_path") and h.get("role") == "executor":
            return h["lane_path"]
    for c in report.get("children", []):
        if c.get("task_id") == task and c.get("lane"):
            return c["lane"]["path"]
    raise BenchError(f"no lane for {task} in the report: {json.dumps(report)[:600]}")


def provision(world: World, root: Path, task: str) -> Path:
    return Path(handoff_lane(world.lanes_json(root, "provision", task), task))


def integrated(report: dict[str, Any], tasks: Iterable[str]) -> bool:
    states = {c["task_id"]: c["state"] for c in report.get("children", [])}
    return all(states.get(t) in ("integrated", "released") for t in tasks)


def tick_until_integrated(world: World, root: Path, tasks: Sequence[str], limit: int = 5) -> tuple[Sample, int]:
    """Tick until every task is integrated: (time of all those ticks, how many)."""
    total = Sample(0.0, 0.0)
    for n in range(1, limit + 1):
        with Clock() as c:
            report = json.loads(world.lanes(root, "tick", "--json").stdout)
        total = total + c.sample
        if integrated(report, tasks):
            return total, n
        if report.get("batch_state") not in ("running", None):
            break
    raise BenchError(f"{', '.join(tasks)} not integrated after {limit} tick(s): "
                     f"{report.get('batch_state')} {report.get('reason')}")


def executor_script(world: World, *, sleep: float, runs_done: bool, name: str = "executor") -> Path:
    """An executor as an agent CLI behaves: sleeps (its thinking), writes `out/$GIT_LANES_TASK.txt`,
    and with `runs_done` runs `git lanes done` itself."""
    lines = ["#!/bin/sh", "set -e"]
    if sleep > 0:
        lines.append(f"sleep {sleep:g}")
    lines += ['mkdir -p out', 'echo "done by $GIT_LANES_TASK" > "out/$GIT_LANES_TASK.txt"']
    if runs_done:
        lines.append("git lanes done")
    return write(world.path(name + ".sh"), "\n".join(lines) + "\n", executable=True)


def critical_path(durations: dict[str, float], blocked_by: dict[str, list[str]]) -> float:
    """The longest chain of `durations` through the dependency graph."""
    finish: dict[str, float] = {}
    for task in durations:  # plan order: blockers first
        finish[task] = durations[task] + max((finish[b] for b in blocked_by.get(task, [])), default=0.0)
    return max(finish.values(), default=0.0)


def waves(n: int, parallel: int) -> int:
    return math.ceil(n / parallel)


def run_batch(world: World, repo: Path, slug: str, executor: str, parallel: int, extra: Sequence[str] = (),
              env: dict[str, str] | None = None) -> tuple[Sample, dict[str, Any]]:
    """`git-lanes run SLUG --executor EXECUTOR --max-parallel P --yes --json`, timed; it must complete."""
    with Clock() as c:
        proc = world.run([*lanes_entry(), "run", slug, "--executor", executor, "--max-parallel", str(parallel),
                          *extra, "--yes", "--json"], repo, check=False, env=env)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = {}
    if proc.returncode != 0 or report.get("batch_state") != "completed":
        raise BenchError(f"git lanes run {' '.join(extra)} ended {report.get('batch_state')} (exit {proc.returncode}): "
                         f"{report.get('reason')} {proc.stderr.strip()[-1500:]}")
    return c.sample, report
