"""A lane's session lock (git_lanes/run/occupancy.py): held by the executor itself, so a killed `run`
leaves it held for as long as its orphaned executor works, and only for that long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from git_lanes.run.occupancy import NAME, Busy, Occupancy


def holder(occ: Occupancy) -> subprocess.Popen:
    """A stand-in executor: its own process group, the lock's descriptor inherited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(occ.fd,),
                            start_new_session=True)
    occ.name(proc.pid)
    return proc


def test_the_executor_holds_the_lane_after_its_starter_let_go(tmp_path):
    occ = Occupancy.take(str(tmp_path))
    proc = holder(occ)
    try:
        occ.release()   # the `run` that started it is gone
        with pytest.raises(Busy) as busy:
            Occupancy.take(str(tmp_path))
        assert busy.value.group == proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    again = Occupancy.take(str(tmp_path))   # that session ended: the lane is free
    again.release()


def test_a_lock_no_live_session_holds_is_broken(tmp_path):
    """Something an executor left outside its group holds the lock: it speaks for no session."""
    occ = Occupancy.take(str(tmp_path))
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(occ.fd,))
    try:
        dead = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        dead.wait()
        occ.name(dead.pid)   # the session's group, gone
        occ.release()
        deadline = time.monotonic() + 5
        while True:   # the group id of a reaped process may linger briefly in the kernel's tables
            try:
                taken = Occupancy.take(str(tmp_path))
                break
            except Busy:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert os.path.exists(tmp_path / NAME)
        taken.release()
    finally:
        stray.kill()
        stray.wait()


def test_one_process_taking_twice_is_refused_the_second_time(tmp_path):
    first = Occupancy.take(str(tmp_path))
    first.name(os.getpgid(0))
    try:
        with pytest.raises(Busy):
            Occupancy.take(str(tmp_path))
    finally:
        first.release()
