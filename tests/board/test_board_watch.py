"""`git lanes watch` (SPEC §17.5) in a pseudo-terminal: the board appears full-screen, is redrawn when the
record changes, `q` or Ctrl-C quits with exit 0 and the terminal comes back as it was (curses' endwin:
the alternate screen left, the terminal modes restored). Without a terminal it prints plain snapshots."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from conftest import git
from helpers import write_initiative

ENTER_ALT, LEAVE_ALT = b"\x1b[?1049h", b"\x1b[?1049l"   # xterm's smcup / rmcup


def started(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("watch tests\n")
    write_initiative(root, "wat", [{"id": "one"}, {"id": "two", "blocked_by": ["one"]}])
    proc = subprocess.run(["git", "lanes", "start", "wat", "--yes"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return root


class Screen:
    """`git lanes watch` on a pseudo-terminal of its own (its controlling terminal, so ^C is SIGINT)."""

    def __init__(self, root: Path, *args: str, argv: tuple[str, ...] = ("git", "lanes"), term: str = "xterm") -> None:
        env = {**os.environ, "TERM": term, "LINES": "30", "COLUMNS": "140"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:   # the child: exec at once
            try:
                os.chdir(root)
                os.execvpe(argv[0], [*argv, "watch", *args], env)
            finally:
                os._exit(127)
        self.out = b""
        self.modes = None

    def read_until(self, needle: bytes, timeout: float = 30) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} never came; the screen said: {self.out[-3000:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                assert chunk, f"watch ended before {needle!r}: {self.out[-3000:]!r}"
                self.out += chunk
        return self.out

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    pass
            if self.modes is None:
                try:
                    self.modes = termios.tcgetattr(self.fd)
                except termios.error:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.modes = termios.tcgetattr(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"watch did not quit: {self.out[-3000:]!r}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


# Git itself dies of a SIGINT its dashed external got (it re-raises it once the child ended), whatever the
# child's exit code: so Ctrl-C's exit 0 is git-lanes' own, seen when it runs as `git-lanes`.
@pytest.mark.parametrize("quit_key,argv", [(b"q", ("git", "lanes")), (b"\x03", ("git-lanes",))], ids=["q", "ctrl-c"])
def test_the_board_appears_updates_and_quits_leaving_the_terminal_as_it_was(tmp_path, quit_key, argv):
    root = started(tmp_path)
    batch_id = json.loads(git(root, "show", "refs/notes/lanes/batch/wat:batch.json"))["batch_id"]
    screen = Screen(root, "--interval", "0.2", argv=argv)
    try:
        before = termios.tcgetattr(screen.fd)                     # the terminal as the shell left it
        screen.read_until(batch_id.encode())
        screen.read_until(b"q quits")
        shown = screen.read_until(b"pending")
        assert ENTER_ALT in shown and b"running" in shown           # full-screen, on the alternate screen
        mark = len(screen.out)
        proc = subprocess.run(["git", "lanes", "retire", "wat", "--yes"], cwd=root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        screen.read_until(b"superseded")                            # redrawn in place from the new record
        assert b"superseded" in screen.out[mark:]
        screen.send(quit_key)
        assert screen.wait() == 0
        assert screen.out.rstrip().endswith(LEAVE_ALT) or LEAVE_ALT in screen.out[-200:]
        assert b"Traceback" not in screen.out
        # echo and line editing back as they were (curses' endwin ran)
        assert screen.modes[3] == before[3] and screen.modes[0:3] == before[0:3]
    finally:
        screen.close()


def test_without_a_terminal_it_prints_plain_snapshots(tmp_path):
    root = started(tmp_path)
    once = subprocess.run(["git", "lanes", "watch", "--once"], cwd=root, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    lines = once.stdout.splitlines()
    assert lines[0].startswith("batch wat-") and lines[0].endswith("(wat): running")
    assert any(line.startswith("one ") and "pending" in line for line in lines)
    assert "\x1b" not in once.stdout and sum(line.startswith("batch wat-") for line in lines) == 1
    # no terminal and no --once: a snapshot per interval, until the batch is over
    proc = subprocess.Popen(["git", "lanes", "watch", "--interval", "0.2"], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    assert subprocess.run(["git", "lanes", "retire", "wat", "--yes"], cwd=root, capture_output=True).returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    heads = [line for line in out.splitlines() if line.startswith("batch wat-")]
    assert len(heads) >= 2 and heads[0].endswith("running") and "): superseded" in heads[-1]


def test_a_terminal_curses_does_not_know_gets_plain_snapshots(tmp_path):
    root = started(tmp_path)
    screen = Screen(root, "--interval", "0.2", argv=("git-lanes",), term="no-such-terminal")
    try:
        screen.read_until(b"plain snapshots instead")
        screen.read_until(b"(wat): running")
        screen.send(b"\x03")
        assert screen.wait() == 0
        assert ENTER_ALT not in screen.out and b"Traceback" not in screen.out
    finally:
        screen.close()
