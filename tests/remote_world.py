"""A batch spread over machines, for real: a bare server repository, a coordinator clone and executor
clones, each with its own Git directory and its own HOME, talking over file:// or `git daemon` on
127.0.0.1. Processes are real (`python -m git_lanes ...`); nothing of Git is mocked.

The executor script writes `src/<task>.txt` ("right <task>") after EXEC_SLEEP seconds and appends
`start|end <task> <clone> <time>` to EXEC_TRACE; EXEC_FAIL_FIRST=<task> makes its first delivery wrong;
EXEC_COMMIT=<task> commits half of the work and pushes it (`git lanes push`) before sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import git
from helpers import write_initiative

EXECUTOR = r'''
import os, pathlib, subprocess, sys, time

task = os.environ["GIT_LANES_TASK"]
prompt = os.environ.get("GIT_LANES_PROMPT", "")


def trace(word):
    path = os.environ.get("EXEC_TRACE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{word} {task} {os.environ.get('EXEC_CLONE', '?')} {time.time():.6f}\n".encode())
        os.close(fd)


trace("start")
if os.environ.get("EXEC_COMMIT") == task:   # commit some work and push it before working on
    pathlib.Path("src").mkdir(exist_ok=True)
    pathlib.Path("src", task + ".txt").write_text("half done\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "half of " + task], check=True)
    subprocess.run([sys.executable, "-m", "git_lanes", "push"], check=True, capture_output=True)   # retries itself
    trace("pushed")
time.sleep(float(os.environ.get("EXEC_SLEEP", "0.1")))
out = pathlib.Path("src") / (task + ".txt")
out.parent.mkdir(parents=True, exist_ok=True)
wrong = os.environ.get("EXEC_FAIL_FIRST") == task and "The last attempt failed" not in prompt \
    and "Correction for" not in prompt
out.write_text("wrong\n" if wrong else "right " + task + "\n")
trace("end")
'''

TASKS = [{"id": "a"}, {"id": "b", "blocked_by": ["a"]}, {"id": "c", "blocked_by": ["b"]},
         {"id": "d"}, {"id": "e"}, {"id": "f"}]


def right_check(task: str) -> str:
    return (f"python3 -c \"import pathlib,sys; t=pathlib.Path('src/{task}.txt'); "
            f"sys.exit(0 if t.exists() and t.read_text().startswith('right') else 1)\"")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GitDaemon:
    """`git daemon` serving `base` (push enabled) on a free 127.0.0.1 port; stop() and start() again
    make the server unreachable for a while (same port)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.url = f"git://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={self.port}",
                                      f"--base-path={self.base}", "--export-all", "--enable=receive-pack",
                                      "--informative-errors", str(self.base)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert self.proc.poll() is None and time.monotonic() < deadline, "git daemon did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def git_daemon(base: Path):
    """A running GitDaemon for the duration of the block."""
    daemon = GitDaemon(base)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


class World:
    """tmp/server.git, tmp/coord (the coordinator), tmp/<name> executor clones with tmp/home-<name>."""

    def __init__(self, tmp: Path, url_base: str | None = None, tasks=TASKS, slug: str = "rl") -> None:
        self.tmp = tmp
        self.slug = slug
        self.server = tmp / "server.git"
        git(tmp, "init", "-q", "--bare", str(self.server))
        self.url = f"{url_base}/server.git" if url_base else f"file://{self.server}"
        self.coord = tmp / "coord"
        self.coord.mkdir()
        git(self.coord, "init", "-q")
        (self.coord / "README").write_text("remote lanes\n")
        write_initiative(self.coord, slug, [{"id": t["id"], "scope": [f"src/{t['id']}.txt"],
                                             "check": right_check(t["id"]), "blocked_by": t.get("blocked_by", [])}
                                            for t in tasks])
        git(self.coord, "remote", "add", "origin", self.url)
        git(self.coord, "push", "-q", "origin", "main")
        self.script = tmp / "executor.py"
        self.script.write_text(EXECUTOR)
        self.trace = tmp / "trace.txt"
        self.clones: dict[str, Path] = {}
        self.procs: list[subprocess.Popen] = []

    def executor(self) -> str:
        return f"{shlex.quote(sys.executable)} {shlex.quote(str(self.script))}"

    def home_env(self, name: str | None) -> dict[str, str]:
        env = dict(os.environ)
        if name is None:
            return env
        home = self.tmp / f"home-{name}"
        if not home.exists():
            home.mkdir()
            (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   XDG_STATE_HOME=str(home / ".local/state"), XDG_CACHE_HOME=str(home / ".cache"), EXEC_CLONE=name)
        return env

    def clone(self, name: str) -> Path:
        path = self.tmp / name
        subprocess.run(["git", "clone", "-q", self.url, str(path)], check=True, env=self.home_env(name),
                       capture_output=True)
        self.clones[name] = path
        return path

    def lanes(self, where: str | None, *args: str, check: bool = True, timeout: float = 120,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`python -m git_lanes ARGS` in the coordinator (where=None) or in the clone `where`."""
        cwd = self.coord if where is None else self.clones[where]
        proc = subprocess.run([sys.executable, "-m", "git_lanes", *args], cwd=cwd, capture_output=True, text=True,
                              env={**self.home_env(where), **(env or {})}, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"git lanes {' '.join(args)} in {cwd} exited {proc.returncode}:\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        return proc

    def start(self, where: str | None, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """A long-running `git lanes` process (its own process group), output to tmp/<name>.log."""
        name = where or "coord"
        cwd = self.coord if where is None else self.clones[where]
        log = open(self.tmp / f"{name}-{len(self.procs)}.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "git_lanes", *args], cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT, env={**self.home_env(where), **(env or {})},
                                start_new_session=True)
        proc.log_path = log.name   # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def coordinate(self, *args: str, interval: str = "0.25") -> subprocess.Popen:
        return self.start(None, "run", self.slug, "--remote", "origin", "--yes", "--interval", interval, *args)

    def work(self, name: str, *args: str, env: dict[str, str] | None = None, interval: str = "0.25") -> subprocess.Popen:
        return self.start(name, "work", self.slug, "--remote", "origin", "--executor", self.executor(),
                          "--interval", interval, *args,
                          env={"EXEC_TRACE": str(self.trace), "EXEC_SLEEP": "0.2", **(env or {})})

    def finish(self, proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
        """Its exit code and log; a whole batch of two machines and a coordinator takes seconds, but a
        2-core machine running the rest of the suite beside it can stretch that past two minutes."""
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop_all()
            raise AssertionError(f"still running after {timeout} s:\n{self.logs()}") from None
        return code, Path(proc.log_path).read_text()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path}\n{Path(p.log_path).read_text()}" for p in self.procs)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
        self.kill_executors()

    def kill_executors(self, clone: str | None = None) -> None:
        """SIGKILL this world's executors (of `clone`, else of every machine). A session runs in a
        process group of its own, so killing a `work` loop's group leaves its executor running,
        where a machine that died would take it along; no test leaves one behind."""
        script = os.fsencode(str(self.script))
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    env = fh.read().split(b"\0")
            except OSError:
                continue
            if script in argv and (clone is None or f"EXEC_CLONE={clone}".encode() in env):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)

    def status(self, where: str | None = None) -> dict:
        return json.loads(self.lanes(where, "status", self.slug, "--json").stdout)

    def record(self, repo: Path | None = None) -> dict:
        return json.loads(git(repo or self.coord, "show", f"refs/notes/lanes/batch/{self.slug}:batch.json"))

    def landed(self) -> list[str]:
        """The Lanes-Task trailer of every commit on the batch branch (and no merges)."""
        assert git(self.coord, "rev-list", "--merges", f"main..imm/{self.slug}").strip() == ""
        out = git(self.coord, "log", "--reverse", "--format=%(trailers:key=Lanes-Task,valueonly)%x00",
                  f"main..imm/{self.slug}")
        return [t.strip() for t in out.split("\0") if t.strip()]

    def landed_count(self) -> int:
        proc = subprocess.run(["git", "rev-list", "--count", f"main..imm/{self.slug}"], cwd=self.coord,
                              capture_output=True, text=True)
        return int(proc.stdout.strip()) if proc.returncode == 0 else 0

    def traced(self) -> list[tuple[str, str, str]]:
        if not self.trace.exists():
            return []
        return [tuple(line.split()[:3]) for line in self.trace.read_text().splitlines()]
