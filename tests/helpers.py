"""Shared builders for tests: initiatives, in-process and subprocess `git lanes` runs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from conftest import git


def check_file(path: str) -> str:
    """An acceptance check that passes when `path` exists in the tree it runs in."""
    return f"python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('{path}').exists() else 1)\""


def write_initiative(root: Path, slug: str, tasks: list[dict[str, Any]], *, final_checks: list[str] | None = None,
                     title: str = "Test initiative", tracker: str | None = None, commit: bool = True) -> None:
    """tasks: [{id, scope, blocked_by?, check?, goal?, extra?}] -> .lanes/<slug>/*.toml, committed."""
    folder = root / ".lanes" / slug
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f'title = "{title}"', "tasks = [" + ", ".join(f'"{t["id"]}"' for t in tasks) + "]"]
    if final_checks is not None:
        lines.append("final_checks = [" + ", ".join(json.dumps(c) for c in final_checks) + "]")
    if tracker:
        lines += ["[tracker]", f'github = "{tracker}"']
    (folder / "initiative.toml").write_text("\n".join(lines) + "\n")
    for t in tasks:
        scope = t.get("scope", [f"src/{t['id']}.txt"])
        check = t.get("check", check_file(scope[0]))
        body = [f'task_id = "{t["id"]}"', "revision = 1", f'goal = "{t.get("goal", "Make " + t["id"])}"',
                "scope = [" + ", ".join(json.dumps(s) for s in scope) + "]"]
        if t.get("blocked_by"):
            body.append("blocked_by = [" + ", ".join(json.dumps(b) for b in t["blocked_by"]) + "]")
        body += t.get("extra", [])
        body += ["[[acceptance]]", 'id = "A1"', 'text = "it works"', f"check = {json.dumps(check)}"]
        (folder / f"{t['id']}.toml").write_text("\n".join(body) + "\n")
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"initiative {slug}")


def lanes(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the CLI in-process (fast): (exit code, stdout, stderr)."""
    from git_lanes.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    saved = {}
    try:
        os.chdir(cwd)
        for k, v in (env or {}).items():
            saved[k] = os.environ.get(k)
            os.environ[k] = v
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def lanes_json(cwd: Path, *args: str) -> tuple[int, Any]:
    code, out, err = lanes(cwd, *args, "--json")
    assert out.strip(), f"no JSON on stdout (exit {code}): {err}"
    return code, json.loads(out)


def git_lanes(cwd: Path, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """The real installed `git lanes`, through git, in a subprocess."""
    proc = subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"git lanes {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def all_refs(root: Path) -> str:
    return git(root, "for-each-ref", "--format=%(refname) %(objectname)")


def snapshot_state(root: Path) -> tuple[str, str]:
    """Every ref and the working-tree status: what "nothing written" compares."""
    return all_refs(root), git(root, "status", "--porcelain", "--untracked-files=all")


def lane_path(report: dict, task: str) -> str:
    for h in report["handoffs"]:
        if h["task_id"] == task and h.get("lane_path"):
            return h["lane_path"]
    for c in report["children"]:
        if c["task_id"] == task and c.get("lane"):
            return c["lane"]["path"]
    raise AssertionError(f"no lane for {task}")


def deliver(lane: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = Path(lane) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def forge_passed_attempt(lane: Path) -> None:
    """A lane is untrusted: it may write its own record with any tool, past `done`'s own scope check
    (SPEC v3 §5). Record a passed attempt of the lane's delivery by hand, as such a lane would, so that
    the gate's rules can be tested on deliveries `done` refuses."""
    from git_lanes.lane.side import LaneContext
    from git_lanes.domain.session import Session
    from git_lanes.domain.snapshot import snapshot_tree

    s = Session(cwd=str(lane))
    ctx = LaneContext.load(s)
    attempt = {"at": s.clock(), "tree": snapshot_tree(s.git, str(lane)), "passed": True, "results": [],
               "author_ident": None, "note": None}
    ctx.update(lambda rec: {**rec, "qa_attempts": [*rec["qa_attempts"], attempt]}, "forged")
