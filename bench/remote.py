"""Remote lanes against local lanes (SPEC §14, issue 16).

The same 6-task batch (a -> b -> c, and d, e, f; --max-parallel 3; an executor that sleeps
--sleep seconds and writes the task's file) runs twice:

  local    `git lanes run` in one repository;
  remote   `git lanes run --remote` in a coordinator clone and `git lanes work --jobs 2` in two
           executor clones (own Git directories, own HOMEs), through `git daemon` on 127.0.0.1.

It prints both wall times (start of the coordinator to its exit), their ratio, and the pulls and
pushes each process made (what `run --remote` and `work` report on their last progress line), per task.

    python bench/remote.py [--sleep 1] [--interval S] [--keep]

Without --interval, `run --remote` and `work` run at their default interval (2 s): the target is a
remote/local ratio of at most 1.5 there (SPEC §17.2).

Runs in a temporary directory with its own HOMEs, so it touches nothing of yours.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

TASKS = {"a": [], "b": ["a"], "c": ["b"], "d": [], "e": [], "f": []}
EXECUTOR = r'''
import os, pathlib, time
task = os.environ["GIT_LANES_TASK"]
time.sleep(float(os.environ.get("EXEC_SLEEP", "1")))
p = pathlib.Path("src") / (task + ".txt")
p.parent.mkdir(parents=True, exist_ok=True)
p.write_text("right " + task + "\n")
'''


def env_for(home: str) -> dict[str, str]:
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, ".gitconfig"), "w") as f:
        f.write("[init]\n\tdefaultBranch = main\n[user]\n\tname = Bench\n\temail = bench@example.com\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"), XDG_DATA_HOME=os.path.join(home, ".local/share"),
               XDG_STATE_HOME=os.path.join(home, ".local/state"), XDG_CACHE_HOME=os.path.join(home, ".cache"),
               GIT_CONFIG_NOSYSTEM="1")
    return env


def git(cwd: str, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: str, env: dict[str, str]) -> None:
    os.makedirs(os.path.join(root, ".lanes", "rl"))
    git(root, "init", "-q", env=env)
    with open(os.path.join(root, ".lanes", "rl", "initiative.toml"), "w") as f:
        f.write('title = "remote bench"\ntasks = [' + ", ".join(f'"{t}"' for t in TASKS) + "]\n")
    for t, blockers in TASKS.items():
        check = f"python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('src/{t}.txt').exists() else 1)\""
        with open(os.path.join(root, ".lanes", "rl", f"{t}.toml"), "w") as f:
            f.write(f'task_id = "{t}"\nrevision = 1\ngoal = "Make {t}"\nscope = ["src/{t}.txt"]\n'
                    f"blocked_by = {json.dumps(blockers)}\n"
                    f'[[acceptance]]\nid = "A1"\ntext = "it exists"\ncheck = {json.dumps(check)}\n')
    with open(os.path.join(root, "README"), "w") as f:
        f.write("remote bench\n")
    git(root, "add", "-A", env=env)
    git(root, "commit", "-q", "-m", "initiative", env=env)


@contextlib.contextmanager
def daemon(base: str):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
                             f"--base-path={base}", "--export-all", "--enable=receive-pack", base],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def lanes_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "git_lanes", *args]


def _read(proc: subprocess.Popen, who: str, t0: float, out: list) -> None:
    for line in proc.stdout:
        out.append((time.monotonic() - t0, who, line.rstrip("\n")))


def transfers(log: str) -> tuple[int, int]:
    m = re.search(r"(\d+) pull\(s\), (\d+) push\(es\)", log)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=None, help="default: the commands' own (2 s)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--timeline", action="store_true", help="print every progress line with its time")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="git-lanes-remote-bench-")
    script = os.path.join(tmp, "executor.py")
    with open(script, "w") as f:
        f.write(EXECUTOR)
    executor = f"{shlex.quote(sys.executable)} {shlex.quote(script)}"
    try:
        env = {**env_for(os.path.join(tmp, "home-local")), "EXEC_SLEEP": str(args.sleep)}
        local = os.path.join(tmp, "local")
        make_repo(local, env)
        t0 = time.monotonic()
        proc = subprocess.run(lanes_cmd("run", "rl", "--executor", executor, "--yes", "--max-parallel", "3"),
                              cwd=local, env=env, capture_output=True, text=True)
        local_s = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout + proc.stderr

        with daemon(tmp) as base:
            url = f"{base}/server.git"
            git(tmp, "init", "-q", "--bare", "server.git", env=env)
            cenv = {**env_for(os.path.join(tmp, "home-coord")), "EXEC_SLEEP": str(args.sleep)}
            coord = os.path.join(tmp, "coord")
            make_repo(coord, cenv)
            git(coord, "remote", "add", "origin", url, env=cenv)
            git(coord, "push", "-q", "origin", "main", env=cenv)
            clones = {}
            for name in ("east", "west"):
                clones[name] = {**env_for(os.path.join(tmp, f"home-{name}")), "EXEC_SLEEP": str(args.sleep)}
                git(tmp, "clone", "-q", url, name, env=clones[name])
            iv = ["--interval", str(args.interval)] if args.interval else []
            t0 = time.monotonic()
            c = subprocess.Popen(lanes_cmd("run", "rl", "--remote", "origin", "--yes", "--max-parallel", "3",
                                           *iv), cwd=coord, env=cenv, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            workers = {name: subprocess.Popen(lanes_cmd("work", "rl", "--remote", "origin", "--executor", executor,
                                                        "--jobs", "2", *iv),
                                              cwd=os.path.join(tmp, name), env=e, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True)
                       for name, e in clones.items()}
            timeline: list[tuple[float, str, str]] = []
            readers = [threading.Thread(target=_read, args=(p, name, t0, timeline)) for name, p in
                       [("coord", c)] + list(workers.items())]
            for r in readers:
                r.start()
            c.wait()
            remote_s = time.monotonic() - t0
            for w in workers.values():
                w.wait()
            for r in readers:
                r.join()
            cout = "\n".join(line for _, who, line in timeline if who == "coord")
            outs = {name: "\n".join(line for _, who, line in timeline if who == name) for name in workers}
            assert c.returncode == 0, cout
            if args.timeline:
                for at, who, line in sorted(timeline):
                    if not line.startswith("  ") and line.strip():
                        print(f"{at:7.2f} {who:<6} {line}")
        n = len(TASKS)
        interval = f"{args.interval:g} s" if args.interval else "the default (2 s)"
        print(f"6 tasks, executor sleep {args.sleep:g} s, --max-parallel 3, interval {interval}")
        print(f"local  run:           {local_s:6.2f} s")
        print(f"remote (git daemon):  {remote_s:6.2f} s")
        print(f"ratio remote/local:   {remote_s / local_s:6.2f}x   (target at the default interval: <= 1.50x)")
        total_pulls = total_pushes = 0
        for name, log in [("coordinator", cout)] + sorted(outs.items()):
            pulls, pushes = transfers(log)
            total_pulls += pulls
            total_pushes += pushes
            print(f"  {name:<12} {pulls:4d} pulls {pushes:4d} pushes   ({pulls / n:.1f} / {pushes / n:.1f} per task)")
        print(f"  all          {total_pulls:4d} pulls {total_pushes:4d} pushes   "
              f"({total_pulls / n:.1f} / {total_pushes / n:.1f} per task)")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
