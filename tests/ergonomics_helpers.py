"""Helpers for the Git-ergonomics tests: the installed `git-lanes`, a repository with a batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The console script of the interpreter running the tests (the venv's bin/).
BIN_DIR = Path(sys.executable).parent
REPO_ROOT = Path(__file__).resolve().parent.parent

INITIATIVE = 'title = "Demo"\ntasks = ["lexer", "parser"]\n'
INTENT = """task_id = "{task}"
revision = 1
goal = "Build the {task}"
scope = ["src/{task}"]
{blocked}
[[acceptance]]
id = "A1"
text = "it passes"
check = "true"
"""


def env_with_bin(**extra: str) -> dict[str, str]:
    """The test's environment with the venv's bin/ first on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(BIN_DIR) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, *, check: bool = True, env: dict[str, str] | None = None,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env or env_with_bin(), capture_output=True, text=True,
                          input=input, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_initiative(root: Path, slug: str = "demo") -> None:
    folder = root / ".lanes" / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "initiative.toml").write_text(INITIATIVE)
    (folder / "lexer.toml").write_text(INTENT.format(task="lexer", blocked=""))
    (folder / "parser.toml").write_text(INTENT.format(task="parser", blocked='blocked_by = ["lexer"]'))


def started_batch(repo: Path, slug: str = "demo") -> Path:
    """Commit an initiative in `repo` and start its batch with the real CLI."""
    write_initiative(repo, slug)
    run(["git", "add", ".lanes"], repo)
    run(["git", "commit", "-q", "-m", f"plan {slug}"], repo)
    run(["git-lanes", "start", slug, "--yes"], repo)
    return repo


def completable_repo(repo: Path, slug: str = "demo") -> Path:
    """What completion reads, without starting a batch: the initiative at HEAD and a batch ref."""
    write_initiative(repo, slug)
    run(["git", "add", ".lanes"], repo)
    run(["git", "commit", "-q", "-m", f"plan {slug}"], repo)
    run(["git", "update-ref", f"refs/notes/lanes/batch/{slug}", "HEAD"], repo)
    return repo
