"""The lane side's everyday command lines run without click (`git_lanes/cli/lanecmds.py`): they must
print exactly what the click path prints, exit the same, and leave every other command line to click."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ergonomics_helpers import env_with_bin
from flow import intent, ok, provision, start, write_plan
from helpers import deliver

from git_lanes.cli.lanecmds import FAST

FAST_ENTRY = "import sys; from git_lanes.cli import entry; sys.argv[0] = 'git-lanes'; entry()"
CLICK_MAIN = "import sys; from git_lanes.cli import main; sys.exit(main())"


def both(cwd, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """(the console script's path, click's path) of one command line, as separate processes."""
    procs = []
    for code in (FAST_ENTRY, CLICK_MAIN):
        procs.append(subprocess.run([sys.executable, "-X", "importtime", "-c", code, *args], cwd=cwd,
                                    env=env_with_bin(), capture_output=True, text=True, timeout=120))
    return procs[0], procs[1]


def imported(proc: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def stderr(proc: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))


@pytest.fixture
def lane(repo):
    check = "test -s src/a/out.txt"
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "out.txt is written", check)])})
    start(repo, "demo")
    path = provision(repo, "a")
    ok(repo, "tick", "demo", "--instruct", json.dumps({"task_id": "a", "text": "mind the tabs",
                                                        "session_state": "idle"}))
    return path


@pytest.mark.parametrize("args", [("task",), ("task", "--json"), ("inbox",), ("inbox", "--json")])
def test_read_only_lines_print_the_same_without_click(lane, args):
    fast, slow = both(lane, *args)
    assert (fast.returncode, fast.stdout, stderr(fast)) == (slow.returncode, slow.stdout, stderr(slow))
    assert fast.returncode == 0 and fast.stdout
    assert "click" not in imported(fast) and "click" in imported(slow)
    if args == ("inbox", "--json"):
        assert [i["text"] for i in json.loads(fast.stdout)] == ["mind the tabs"]


def test_done_and_its_failure_print_the_same_without_click(lane):
    fast, slow = both(lane, "done")       # nothing delivered: refused, exit 1
    assert fast.returncode == slow.returncode == 1
    assert stderr(fast) == stderr(slow) and stderr(fast).startswith("error: ")
    assert "click" not in imported(fast)
    deliver(str(lane), {"src/a/other.txt": "x\n"})          # delivered, the check fails: qa_failed, exit 1
    fast, slow = both(lane, "done", "--json", "--retry")   # the second one on the same failed tree (§17.6)
    assert fast.returncode == slow.returncode == 1 and "click" not in imported(fast)
    docs = json.loads(fast.stdout), json.loads(slow.stdout)
    assert [d["passed"] for d in docs] == [False, False] and docs[0].keys() == docs[1].keys()
    assert stderr(fast) == stderr(slow) == "error: qa_failed: A1"
    deliver(str(lane), {"src/a/out.txt": "a\n"})
    fast = subprocess.run([sys.executable, "-c", FAST_ENTRY, "done"], cwd=lane, env=env_with_bin(),
                          capture_output=True, text=True, timeout=120)
    assert fast.returncode == 0 and fast.stdout.rstrip().endswith(")") and "a: passed" in fast.stdout


def test_an_error_outside_a_lane_is_the_same_one_line(repo):
    fast, slow = both(repo, "task", "--json")
    assert fast.returncode == slow.returncode != 0
    assert stderr(fast) == stderr(slow) and stderr(fast).startswith("error: ")
    assert "click" not in imported(fast)


@pytest.mark.parametrize("args", [("done", "-h"), ("done", "--give-up"), ("task", "--jsn"), ("inbox", "--ack", "x")])
def test_any_other_command_line_goes_through_click(lane, args):
    assert args not in FAST
    fast, slow = both(lane, *args)
    assert (fast.returncode, fast.stdout, stderr(fast)) == (slow.returncode, slow.stdout, stderr(slow))
    assert "click" in imported(fast)
    assert fast.returncode == (0 if "-h" in args else 2)


def test_a_completion_request_is_never_taken_for_a_lane_command(lane):
    proc = subprocess.run([sys.executable, "-c", FAST_ENTRY, "task"], cwd=lane, capture_output=True, text=True,
                          env=env_with_bin(_GIT_LANES_COMPLETE="bash_complete", COMP_WORDS="git-lanes ta",
                                           COMP_CWORD="1"), timeout=60)
    assert proc.returncode == 0 and "task" in proc.stdout and "mind the tabs" not in proc.stdout


def test_render_drops_escape_sequences_off_a_terminal_only(monkeypatch):
    """What `click.echo` did for both paths: a goal or a check's text with colour codes reaches a
    pipe plain, a terminal as written."""
    import io

    from git_lanes.cli import render

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    pipe, tty = io.StringIO(), Terminal()
    monkeypatch.setattr(sys, "stdout", pipe)
    render.say("\x1b[31mred\x1b[0m goal")
    monkeypatch.setattr(sys, "stdout", tty)
    render.say("\x1b[31mred\x1b[0m goal")
    assert pipe.getvalue() == "red goal\n"
    assert tty.getvalue() == "\x1b[31mred\x1b[0m goal\n"
