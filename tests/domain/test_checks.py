"""Running checks: real subprocesses, no shell (SPEC §2.1, §10.3)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from git_lanes.domain.checks import (CheckResult, child_env, run_checks, run_command, split_command,
                                     validate_final_check)
from git_lanes.core.errors import ExitCode, LanesError

PY = sys.executable
QPY = shlex.quote(PY)


def run(code: str, tmp_path: Path, timeout: float = 10, **kw) -> CheckResult:
    return run_command("A1", [PY, "-c", code], cwd=tmp_path, env=dict(os.environ),
                       timeout=timeout, **kw)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


SPAWN_SLEEP = ("import subprocess, sys\n"
               "p = subprocess.Popen(['sleep', '30'])\n"
               "print(p.pid, flush=True)\n")


# --- results -------------------------------------------------------------------------------

def test_pass(tmp_path):
    r = run("print('hello')", tmp_path)
    assert (r.exit_code, r.signal, r.passed) == (0, None, True)
    assert r.output_tail == "hello\n"
    assert r.id == "A1" and r.command == shlex.join([PY, "-c", "print('hello')"])
    assert r.duration_ms >= 0


def test_fail_with_stderr_merged(tmp_path):
    r = run("import sys; print('out', flush=True); sys.stderr.write('err\\n'); sys.exit(3)",
            tmp_path)
    assert (r.exit_code, r.signal, r.passed) == (3, None, False)
    assert r.output_tail == "out\nerr\n"


def test_to_json_keys(tmp_path):
    doc = run("pass", tmp_path).to_json()
    assert list(doc) == ["id", "command", "exit_code", "signal", "passed", "duration_ms",
                         "output_tail"]
    assert doc["exit_code"] == 0 and doc["passed"] is True


def test_result_is_frozen(tmp_path):
    r = run("pass", tmp_path)
    with pytest.raises(AttributeError):
        r.passed = False  # type: ignore[misc]


def test_runs_in_cwd(tmp_path):
    r = run("import os; print(os.getcwd())", tmp_path)
    assert Path(r.output_tail.strip()).resolve() == tmp_path.resolve()


def test_stdin_is_not_inherited(tmp_path):
    r = run("import sys; print(repr(sys.stdin.read()))", tmp_path)
    assert r.output_tail == "''\n"


# --- output tail ---------------------------------------------------------------------------

def test_output_tail_keeps_last_4096_bytes(tmp_path):
    r = run("import sys; sys.stdout.write('x' * 10000 + 'END')", tmp_path)
    assert len(r.output_tail.encode()) == 4096
    assert r.output_tail.endswith("xEND")


def test_huge_output_is_streamed(tmp_path):
    code = ("import sys\n"
            "for i in range(200000): sys.stdout.write('line %06d\\n' % i)\n")
    r = run(code, tmp_path)
    assert r.passed
    assert r.output_tail.endswith("line 199999\n")
    assert 4096 - len("line 199999\n") < len(r.output_tail) <= 4096 and r.output_tail.startswith("line ")


def test_invalid_utf8_is_replaced(tmp_path):
    r = run("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe done')", tmp_path)
    assert r.output_tail == "ok \ufffd\ufffd done"


# --- timeouts, signals, process groups -----------------------------------------------------

def test_timeout_kills_process_group_with_grandchild(tmp_path):
    code = SPAWN_SLEEP + "p.wait()\n"
    t0 = time.monotonic()
    r = run(code, tmp_path, timeout=1)
    assert time.monotonic() - t0 < 5
    assert (r.exit_code, r.signal, r.passed) == (None, "SIGKILL", False)
    assert r.output_tail.endswith("\n[timed out after 1 s]")
    grandchild = int(r.output_tail.split()[0])
    assert wait_gone(grandchild)


def test_timeout_message_keeps_fraction(tmp_path):
    r = run("import time; print('partial', flush=True); time.sleep(30)", tmp_path,
            timeout=0.5)
    assert r.output_tail == "partial\n[timed out after 0.5 s]"
    assert r.exit_code is None and r.signal == "SIGKILL"


def test_grandchild_holding_pipe_does_not_hang_after_exit(tmp_path):
    # The leader exits at once; its grandchild keeps stdout open. Not a timeout.
    t0 = time.monotonic()
    r = run(SPAWN_SLEEP, tmp_path, timeout=20)
    assert time.monotonic() - t0 < 5
    assert (r.exit_code, r.signal, r.passed) == (0, None, True)
    assert wait_gone(int(r.output_tail.split()[0]))


def test_killed_by_signal(tmp_path):
    r = run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", tmp_path)
    assert (r.exit_code, r.signal, r.passed) == (None, "SIGTERM", False)


def test_own_process_group(tmp_path):
    r = run("import os; print(os.getpgid(0) == os.getpid(), os.getpgid(0) != %d)"
            % os.getpgid(0), tmp_path)
    assert r.output_tail == "True True\n"


def test_keyboard_interrupt_kills_group_and_reraises(tmp_path):
    pid_file = tmp_path / "pid"
    code = ("import subprocess, pathlib\n"
            "p = subprocess.Popen(['sleep', '30'])\n"
            f"pathlib.Path({str(pid_file)!r}).write_text(str(p.pid))\n"
            "p.wait()\n")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run(code, tmp_path, timeout=20)
    finally:
        timer.cancel()
    assert wait_gone(int(pid_file.read_text()))


# --- commands that cannot run --------------------------------------------------------------

def test_missing_executable_is_127(tmp_path):
    r = run_command("A1", "no-such-program-git-lanes --flag", cwd=tmp_path,
                    env=dict(os.environ), timeout=5)
    assert (r.exit_code, r.signal, r.passed) == (127, None, False)
    assert "no-such-program-git-lanes" in r.output_tail


def test_not_executable_is_127(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    r = run_command("A1", str(script), cwd=tmp_path, env=dict(os.environ), timeout=5)
    assert r.exit_code == 127 and not r.passed
    assert "script.sh" in r.output_tail


def test_unparsable_command_is_127(tmp_path):
    r = run_command("A1", "echo 'unterminated", cwd=tmp_path, env=dict(os.environ), timeout=5)
    assert r.exit_code == 127 and not r.passed
    assert "unterminated" in r.output_tail


# --- no shell, shlex quoting ---------------------------------------------------------------

def test_shlex_quoting(tmp_path):
    command = f"{QPY} -c \"print('a b')\""
    r = run_command("A1", command, cwd=tmp_path, env=dict(os.environ), timeout=10)
    assert r.passed and r.output_tail == "a b\n"
    assert r.command == command


def test_no_shell_expansion(tmp_path):
    command = f"{QPY} -c 'import sys; print(sys.argv[1:])' $HOME '*' ; echo"
    r = run_command("A1", command, cwd=tmp_path, env=dict(os.environ), timeout=10)
    assert r.output_tail == "['$HOME', '*', ';', 'echo']\n"


def test_sh_as_child_executable(tmp_path):
    r = run_command("A1", "sh -c 'echo one; exit 4'", cwd=tmp_path, env=dict(os.environ),
                    timeout=10)
    assert (r.exit_code, r.output_tail) == (4, "one\n")


def test_explicit_argv_overrides_split(tmp_path):
    r = run_command("F1", "shown to the user", cwd=tmp_path, env=dict(os.environ),
                    timeout=10, argv=[PY, "-c", "print('ran')"])
    assert r.command == "shown to the user" and r.output_tail == "ran\n"


def test_split_command():
    assert split_command("python -m pytest -q 'tests/a b.py'") == [
        "python", "-m", "pytest", "-q", "tests/a b.py"]
    assert split_command("a # b") == ["a", "#", "b"]


@pytest.mark.parametrize("command", ["", "   ", "echo 'open", 'echo "open', "echo \\"])
def test_split_command_refuses(command):
    with pytest.raises(LanesError) as info:
        split_command(command)
    assert info.value.exit_code == ExitCode.USAGE
    assert repr(command) in info.value.detail


# --- environment ---------------------------------------------------------------------------

def test_child_env_scrubs_and_adds():
    base = {"GIT_DIR": "/x", "GIT_INDEX_FILE": "/y", "PATH": "/bin", "KEEP": "1",
            "GIT_LANES_TASK": "stale"}
    env = child_env(base, ["GIT_DIR", "GIT_INDEX_FILE", ""], slug="s", batch="b", task="t")
    assert env == {"PATH": "/bin", "KEEP": "1", "GIT_LANES_SLUG": "s",
                   "GIT_LANES_BATCH": "b", "GIT_LANES_TASK": "t"}
    assert base["GIT_DIR"] == "/x"  # the caller's mapping is untouched


def test_child_env_in_a_real_child(tmp_path, repo):
    local = subprocess.run(["git", "rev-parse", "--local-env-vars"], cwd=repo,
                           capture_output=True, text=True, check=True).stdout.split()
    assert "GIT_DIR" in local
    base = {**os.environ, "GIT_DIR": str(tmp_path / "elsewhere"),
            "GIT_WORK_TREE": str(tmp_path), "KEEP_ME": "yes"}
    env = child_env(base, local, slug="demo", batch="demo-1", task="")
    code = ("import os\n"
            "for k in ['GIT_DIR', 'GIT_WORK_TREE', 'KEEP_ME', 'GIT_LANES_SLUG',"
            " 'GIT_LANES_BATCH', 'GIT_LANES_TASK']:\n"
            "    print(k, repr(os.environ.get(k)))\n"
            "import subprocess; print(subprocess.run(['git', 'rev-parse', '--show-toplevel'],"
            " capture_output=True, text=True).stdout.strip())\n")
    r = run_command("A1", [PY, "-c", code], cwd=repo, env=env, timeout=10)
    assert r.passed, r.output_tail
    lines = r.output_tail.splitlines()
    assert lines[:6] == ["GIT_DIR None", "GIT_WORK_TREE None", "KEEP_ME 'yes'",
                         "GIT_LANES_SLUG 'demo'", "GIT_LANES_BATCH 'demo-1'",
                         "GIT_LANES_TASK ''"]
    assert Path(lines[6]).resolve() == repo.resolve()


# --- run_checks ----------------------------------------------------------------------------

def test_run_checks_runs_all_in_order(tmp_path):
    items = [("A1", f"{QPY} -c 'print(1)'", 10),
             ("A2", f"{QPY} -c 'import sys; sys.exit(1)'", 10),
             ("A3", "no-such-program-git-lanes", 10),
             ("A4", f"{QPY} -c 'print(4)'", 10)]
    results = run_checks(items, cwd=tmp_path, env=dict(os.environ))
    assert [(r.id, r.exit_code, r.passed) for r in results] == [
        ("A1", 0, True), ("A2", 1, False), ("A3", 127, False), ("A4", 0, True)]


def test_run_checks_empty(tmp_path):
    assert run_checks([], cwd=tmp_path, env={}) == []


# --- final checks --------------------------------------------------------------------------

def test_final_check_accepts():
    assert validate_final_check("python -m pytest -q") == ["python", "-m", "pytest", "-q"]
    assert validate_final_check("  a  b  ") == ["a", "b"]
    assert len(validate_final_check(" ".join("w" * 8))) == 8
    assert validate_final_check("x" * 512) == ["x" * 512]
    assert validate_final_check("make check-all ./tests/x.py a=b,c@d:e%f+g~h") == [
        "make", "check-all", "./tests/x.py", "a=b,c@d:e%f+g~h"]


@pytest.mark.parametrize("char", list("|&;<>\\`$(){}\"'"))
def test_final_check_refuses_character(char):
    command = f"python -m pytest {char}x"
    with pytest.raises(LanesError) as info:
        validate_final_check(command)
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.detail.startswith(f"final check {command!r}: contains ")


@pytest.mark.parametrize("command, reason", [
    ("", "must not be empty"),
    ("    ", "must not be empty"),
    ("a\tb", "contains a control character"),      # SPEC §2.1: no control character, a tab included
    ("true\u009b", "contains a control character"), # C1: an 8-bit CSI
    ("true\x7f", "contains a control character"),
    (" ".join("w" * 9), "more than 8 words"),
    ("x" * 513, "longer than 512 characters"),
    ("make\ncheck", "must be one line"),
    ("make check\n", "must be one line"),
    ("make\rcheck", "must be one line"),
    ("make\u2028check", "must be one line"),
    ("make\x00check", "contains a control character"),
    ("make\x1bcheck", "contains a control character"),
])
def test_final_check_refuses(command, reason):
    with pytest.raises(LanesError) as info:
        validate_final_check(command)
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.detail == f"final check {command!r}: {reason}"


def test_final_check_words_run_as_argv(tmp_path):
    (tmp_path / "check.py").write_text("print(42)\n")
    command = f"{PY} check.py"
    words = validate_final_check(command)
    r = run_command("F1", command, cwd=tmp_path, env=dict(os.environ), timeout=10, argv=words)
    assert r.passed and r.output_tail == "42\n"


# -- the one line a failure is summed up by ----------------------------------------------------------------

NODE_TEST = """not ok 1 - sum
  ---
  error: |-
    Expected values to be strictly equal:
    3 !== 6
  ...
1..1
# tests 1
# pass 0
# fail 1
# skipped 0
# duration_ms 235.67
"""


@pytest.mark.parametrize("tail, line", [
    ("....F\n\nFAILED tests/test_a.py::test_x - assert 1 == 2\n1 failed, 4 passed in 0.21s\n",
     "1 failed, 4 passed in 0.21s"),
    (NODE_TEST, "error: |-"),   # SPEC §17.1 v4: the last line naming FAILED, Error, assert, not ok, ...
    ("Tests:       1 failed, 3 passed, 4 total\nTime:        0.8 s\nRan all test suites.\n",
     "Tests:       1 failed, 3 passed, 4 total"),
    ("checking\n   nothing to see   \n\n", "nothing to see"),   # no line names a failure: the last one
    ("", ""),
])
def test_a_failure_is_summed_up_by_the_line_that_names_it(tail, line):
    """The session line keeps the last output line (SPEC §13); what run adds under a child parked on
    its candidate is the line that names the failure."""
    from git_lanes.domain.checks import failure_line, tail_lines

    result = {"id": "A1", "exit_code": 1, "signal": None, "output_tail": tail}
    assert failure_line(result, telling=True) == "A1 (exit 1)" + (f": {line}" if line else "")
    last = tail_lines(tail)
    assert failure_line(result) == "A1 (exit 1)" + (f": {last[0]}" if last else "")
