"""Setup failures explain themselves (SPEC §17.1 v4), through the installed `git lanes`: the whole setup output
in `<log dir>/<batch>/<task>-setup-<n>.log`, named in the error; the quoted lines are the first two naming a
cause and the last three; `plan` refuses shell syntax in lanes.setupCommand; the setup hint fits the repository;
an untracked file that blocks `start` gets a hint to ignore it, never to commit it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import git
from flow import cli, exists, intent, ok, start, write_plan
from helpers import snapshot_state

SETUP = r'''
import sys
print("npm WARN deprecated thing@1.0.0")
print("npm ERR! code E404")
for n in range(400):
    print(f"progress line {n} " + "." * 40)
print("npm ERR! 404 Not Found - GET https://registry.example/left-pad")
print("npm ERR! 404 is not in this registry.")
print("npm ERR! A complete log of this run can be found in: /tmp/x.log")
sys.exit(1)
'''


def human(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, input="")


def test_a_failing_setup_keeps_its_whole_output_and_quotes_the_telling_lines(repo, tmp_path):
    (repo / "setup.py").write_text(SETUP)
    git(repo, "add", "setup.py")
    git(repo, "commit", "-q", "-m", "setup")
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "out", exists("src/a/out.txt"))])})
    logs = tmp_path / "logs"
    git(repo, "config", "lanes.logDir", str(logs))
    git(repo, "config", "lanes.setupCommand", "python3 setup.py")
    report = start(repo, "demo")
    proc = human(repo, "provision", "a")
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    head, _, log = line.partition("; whole output: ")
    assert head == ("error: batch_lane_setup_failed: exit 1: npm ERR! code E404 | "
                    "npm ERR! 404 Not Found - GET https://registry.example/left-pad | "
                    "npm ERR! 404 is not in this registry. | "
                    "npm ERR! A complete log of this run can be found in: /tmp/x.log"), line
    assert Path(log) == logs / Path(log).relative_to(logs)
    assert Path(log).name == "a-setup-1.log" and Path(log).parent.name == report["batch_id"]
    text = Path(log).read_text()
    assert "npm WARN deprecated thing@1.0.0" in text and "progress line 0 " in text and "progress line 399" in text
    # a second failure gets its own log
    proc = human(repo, "provision", "a")
    assert proc.stderr.strip().endswith("a-setup-2.log")


def test_setup_lines_rule():
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from git_lanes.domain.setups import setup_lines

    assert setup_lines("a\nb\nc\n") == "a | b | c"
    assert setup_lines("fatal: one\nx\nError two\nerror three\ny\nz\n") == "fatal: one | Error two | error three | y | z"
    assert setup_lines("sh: foo: not found\n") == "sh: foo: not found"   # once, though first and last


def test_plan_refuses_shell_syntax_in_the_setup_command(repo):
    write_plan(repo, "demo", {"a": intent("a")})
    git(repo, "config", "lanes.setupCommand", "npm ci && npm run build")
    for args in (("plan", "demo"), ("start", "demo", "--yes")):
        proc = human(repo, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: lanes.setupCommand 'npm ci && npm run build': ")


def _gap_warning(repo: Path, *files: str) -> str:
    for f in files:
        (repo / f).write_text("{}\n")
    (repo / ".gitignore").write_text("node_modules/\n.venv/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "project files")
    write_plan(repo, "demo", {"a": intent("a")})
    proc = human(repo, "start", "demo", "--yes")
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stderr.splitlines() if line.startswith("warning:") and "lanes" in line)


def test_the_setup_hint_fits_npm_without_a_lockfile(repo):
    (repo / "node_modules").mkdir()
    (repo / "node_modules" / "x.js").write_text("")
    warning = _gap_warning(repo, "package.json")
    assert "git config lanes.setupCommand 'npm install'" in warning and "npm ci" not in warning


def test_the_setup_hint_fits_npm_with_a_lockfile(repo):
    (repo / "node_modules").mkdir()
    (repo / "node_modules" / "x.js").write_text("")
    warning = _gap_warning(repo, "package.json", "package-lock.json")
    assert "git config lanes.setupCommand 'npm ci'" in warning


def test_the_setup_hint_fits_uv_and_plain_python(repo, tmp_path):
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("")
    warning = _gap_warning(repo, "pyproject.toml", "uv.lock")
    assert "git config lanes.setupCommand 'uv sync --frozen'" in warning


def test_the_setup_hint_for_a_venv_without_uv_makes_one_with_pip(repo):
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("")
    warning = _gap_warning(repo, "pyproject.toml")
    assert "pip install -e ." in warning and "uv sync" not in warning


def test_an_untracked_file_that_blocks_start_gets_a_hint_to_ignore_it(repo):
    write_plan(repo, "demo", {"a": intent("a")})
    (repo / ".env").write_text("TOKEN=x\n")
    before = snapshot_state(repo)
    proc = human(repo, "start", "demo", "--yes")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error: dirty_working_tree: untracked: .env"
    hint = next(line for line in lines if line.startswith("hint:"))
    assert ".git/info/exclude" in hint and "commit or stash" not in proc.stderr
    assert snapshot_state(repo) == before
    # the hint works when pasted (a shell runs it): then start goes on
    command = hint.split("e.g. ", 1)[1].split(" (or remove them)")[0]
    subprocess.run(command, shell=True, cwd=repo, check=True)
    assert ok(repo, "start", "demo", "--yes")["batch_state"] == "running"
    assert (repo / ".env").exists()
    code, _, err = cli(repo, "status")
    assert code == 0
