"""End-to-end building blocks for the guard tests (revisions, reviews, contracts, resume, retire):
the real installed `git lanes` in a subprocess, plus the "nothing written" witness."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from conftest import git
from helpers import deliver, snapshot_state


def cli(cwd: Path | str, *args: str, input: str | None = None) -> tuple[int, Any, str]:
    """`git lanes ARGS --json` in a subprocess: (exit code, parsed stdout or None, stderr)."""
    proc = subprocess.run(["git", "lanes", *args, "--json"], cwd=cwd, capture_output=True, text=True,
                          input=input if input is not None else "")
    out = proc.stdout.strip()
    return proc.returncode, (json.loads(out) if out else None), proc.stderr


def ok(cwd: Path | str, *args: str) -> Any:
    code, doc, err = cli(cwd, *args)
    assert code == 0, f"git lanes {' '.join(args)} exited {code}: {err}"
    return doc


def intent(task: str, *, revision: int = 1, goal: str | None = None, scope: list[str] | None = None,
           blocked_by: list[str] | None = None, acceptance: list[tuple[str, str, str]] | None = None,
           extra: list[str] | None = None) -> str:
    """The text of an intent file; acceptance = [(id, text, check)]."""
    lines = [f'task_id = "{task}"', f"revision = {revision}", f'goal = "{goal or "Make " + task}"',
             "scope = " + json.dumps(scope or [f"src/{task}"])]
    if blocked_by:
        lines.append("blocked_by = " + json.dumps(blocked_by))
    lines += extra or []
    for aid, text, check in acceptance or [("A1", "it exists", exists(f"src/{task}/out.txt"))]:
        lines += ["[[acceptance]]", f'id = "{aid}"', f'text = "{text}"', f"check = {json.dumps(check)}"]
    return "\n".join(lines) + "\n"


def exists(path: str) -> str:
    return f"python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('{path}').exists() else 1)\""


def contains(path: str, word: str) -> str:
    return (f"python3 -c \"import pathlib,sys; p=pathlib.Path('{path}'); "
            f"sys.exit(0 if p.exists() and '{word}' in p.read_text() else 1)\"")


def write_plan(repo: Path, slug: str, intents: dict[str, str], *, commit: bool = True) -> None:
    """`.lanes/<slug>/` from intent texts (plan order = dict order), committed."""
    folder = repo / ".lanes" / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "initiative.toml").write_text('title = "Guards"\ntasks = ' + json.dumps(list(intents)) + "\n")
    for task, text in intents.items():
        (folder / f"{task}.toml").write_text(text)
    if commit:
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"plan {slug}")


def start(repo: Path, slug: str, *options: str) -> dict:
    return ok(repo, "start", slug, "--yes", *options)


def provision(repo: Path, task: str) -> Path:
    report = ok(repo, "provision", task)
    child = child_of(report, task)
    assert child["state"] == "enrolled", child
    return Path(child["lane"]["path"])


def done(lane: Path, files: dict[str, str] | None = None) -> dict:
    if files:
        deliver(str(lane), files)
    code, doc, err = cli(lane, "done")
    assert doc is not None, err
    return doc


def child_of(report: dict, task: str) -> dict:
    return next(c for c in report["children"] if c["task_id"] == task)


def states(report: dict) -> dict[str, str]:
    return {c["task_id"]: c["state"] for c in report["children"]}


def record(repo: Path, slug: str) -> dict:
    """The stored batch record's fixed-size fields (`git show refs/notes/lanes/batch/<slug>:batch.json`)."""
    return json.loads(git(repo, "show", f"refs/notes/lanes/batch/{slug}:batch.json"))


def world(repo: Path, *lanes: Path) -> tuple:
    """Every ref, the coordinator's status and each lane's status."""
    return snapshot_state(repo) + tuple(git(p, "status", "--porcelain", "--untracked-files=all") for p in lanes)


def reachable_from(repo: Path, commit: str, ref: str) -> bool:
    proc = subprocess.run(["git", "merge-base", "--is-ancestor", commit, ref], cwd=repo)
    return proc.returncode == 0
