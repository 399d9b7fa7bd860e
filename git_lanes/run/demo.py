"""`git lanes demo [DIR]`: the whole product on a small embedded example (SPEC §13).

Under DIR it writes `textkit/`, a tiny Python project whose tests are plain `unittest` (stdlib only,
offline), and the initiative `textkit` of seven tasks: a dependency chain (tokens -> wordfreq -> summary ->
cli-summary), two tasks sharing a scope (cli-slug and cli-summary both edit textkit/cli.py, so they
never run at once and the later one starts from the earlier one's commit), and one task (wordfreq)
whose first delivery fails its checks and is fixed after one coordinator correction. Then it runs
`git lanes run textkit` with the scripted executor below (`python -m git_lanes.run.demo`), with
`--max-parallel 3 --qa-failure-limit 1`.

The scripted executor plays an agent: it reads GIT_LANES_TASK and writes that task's files in its
lane, then exits (the driver runs `git lanes done` for it). For wordfreq it writes a version that
breaks ties in the wrong order, unless its prompt (GIT_LANES_PROMPT) carries a correction.

The lanes go to `DIR/lanes/` and the session logs to `DIR/logs/` (the project's `lanes.worktreeRoot` and
`lanes.logDir`): nothing the demo makes lands outside DIR.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from typing import Callable

from .demo_project import (CLI_COMMANDS, CLI_MARKER, CORRECTED_TASK, PROJECT, SLUG, TASKS, WORK, WORDFREQ_BUGGY,
                           WORDFREQ_FIXED, initiative_files)

MAX_PARALLEL = 3

__all__ = ["CORRECTED_TASK", "SLUG", "TASKS", "build", "demo", "execute", "initiative_files"]


def _python() -> str:
    """How the checks name Python: `python3` when it is on PATH, else this interpreter."""
    return "python3" if shutil.which("python3") else sys.executable


def _write(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def execute(task: str, prompt: str, cwd: str = ".") -> int:
    """The scripted executor's work for `task`, in the lane at `cwd`."""
    if task == CORRECTED_TASK:
        corrected = "--- correction" in prompt
        _write(os.path.join(cwd, "textkit/wordfreq.py"), WORDFREQ_FIXED if corrected else WORDFREQ_BUGGY)
        print(f"wrote textkit/wordfreq.py ({'fixed after the correction' if corrected else 'first try'})")
        return 0
    if task in CLI_COMMANDS:
        path = os.path.join(cwd, "textkit/cli.py")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        block = CLI_COMMANDS[task]
        if block not in text:
            text = text.replace(CLI_MARKER, block + CLI_MARKER)
        _write(path, text)
        print(f"added the {task[4:]} command to textkit/cli.py")
        return 0
    files = WORK.get(task)
    if files is None:
        print(f"the demo executor knows no task {task!r}", file=sys.stderr)
        return 1
    for rel, text in files.items():
        _write(os.path.join(cwd, rel), text)
        print(f"wrote {rel}")
    return 0


def executor_main() -> int:
    """`python -m git_lanes.run.demo`: the scripted executor, run by `git lanes run` in a lane."""
    task = os.environ.get("GIT_LANES_TASK", "")
    prompt = os.environ.get("GIT_LANES_PROMPT", "")
    print(f"demo executor: task {task}")
    return execute(task, prompt)


def build(root: str, config: dict[str, str] | None = None) -> None:
    """The sample project and its initiative, committed in a new repository at `root` (with `config`
    written to its local configuration)."""
    from ..gitio import Git, init_repository

    for rel, text in {**PROJECT, **initiative_files(_python())}.items():
        _write(os.path.join(root, rel), text)
    init_repository(root)
    git = Git(root)
    # A fresh machine has no identity: give the demo repository one of its own (only there).
    if git.ident_or_none("AUTHOR") is None or git.ident_or_none("COMMITTER") is None:
        git.config_write("user.name", "git-lanes demo")
        git.config_write("user.email", "demo@git-lanes.invalid")
    for key, value in (config or {}).items():
        git.config_write(key, value)
    git.work.commit_all(root, "textkit: the sample project and the initiative textkit")


def demo(directory: str | None, *, as_json: bool = False, out: Callable[[str], None] = print):
    """Build the sample project (in DIR, or a new temporary directory) and run its initiative."""
    from ..batch.start import StartOptions, new_directory
    from ..core.errors import usage
    from ..domain.session import Session
    from ..gitio import local_env_vars
    from . import run

    def note(text: str) -> None:
        if as_json:
            print(text, file=sys.stderr, flush=True)
        else:
            out(text)

    if directory is None:
        home = tempfile.mkdtemp(prefix="git-lanes-demo-")
    else:
        home = new_directory(directory, "DIR")
        try:
            os.makedirs(home, exist_ok=True)
        except OSError as exc:
            raise usage(f"DIR: {directory} cannot be created: {exc.strerror}") from None
    home = os.path.realpath(home)
    # everything the demo makes stays under DIR (SPEC §13 v3): the project, its lanes, the session logs
    root, lanes, logs = (os.path.join(home, name) for name in (SLUG, "lanes", "logs"))
    os.makedirs(root)
    for var in local_env_vars():   # they would point the demo's Git calls at another repository
        if not var.startswith("GIT_CONFIG"):
            os.environ.pop(var, None)
    note(f"git lanes demo: the sample project textkit is in {root}; its lanes go to {lanes}, the session "
         f"logs to {logs}")
    build(root, {"lanes.worktreeRoot": lanes, "lanes.logDir": logs})
    executor = f"{shlex.quote(sys.executable)} -m git_lanes.run.demo"
    opts = StartOptions(max_parallel=MAX_PARALLEL, qa_failure_limit=1, yes=True)
    note(f"running: git lanes run {SLUG} --executor '{executor}' --max-parallel {MAX_PARALLEL} "
         "--qa-failure-limit 1 --yes")
    result = run(Session(cwd=root), SLUG, executor=executor, opts=opts, confirm=lambda text: True,
                 as_json=as_json, out=out)
    if os.path.isdir(lanes) and not os.listdir(lanes):
        os.rmdir(lanes)   # every lane was released
    where = shlex.quote(root)
    result.summary["after"] = (f"The demo project is in {root}: try 'git -C {where} log --oneline "
                               f"imm/{SLUG}', 'git -C {where} lanes status {SLUG}' or "
                               f"'git -C {where} log --notes=lanes/evidence -1 imm/{SLUG}'.")
    from ..board import report  # the batch's page, under DIR with its session logs (SPEC §17.5)

    result.summary["after"] += f"\nreport: {report(Session(cwd=root), SLUG)}"
    return result

if __name__ == "__main__":
    sys.exit(executor_main())
