"""Run one `git-lanes` command in this process, recording where its time and its Git calls go.

    python -m bench._inproc OUT_DIR ARGS...      (in the directory the command should run in)

Writes to OUT_DIR: `profile.pstats` (a cProfile of every thread on its own CPU clock, merged),
`calls.json` (each subprocess the command started: its argv, its thread, the phase of the
task's life it served, taken from the Python stack) and `cpu.json` (this process's CPU, and its
children's).
Used by `bench.profile`; not a benchmark.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import threading
import time

# innermost frame first: the first function of this table on the stack names the phase
PHASES = {
    ("steward", "create_lane"): "provision",
    ("steward", "run_setup"): "provision",
    ("steward", "remove_lane"): "release",
    ("steward", "release"): "release",
    ("steward", "release_stale"): "release",
    ("side", "done"): "done",
    ("side", "task_info"): "session",
    ("side", "inbox"): "session",
    ("driver", "_session_main"): "session",
    ("tick", "_lane_commits"): "lane commit",
    ("tick", "_integrate"): "integrate",
    ("tick", "_complete"): "final verification",
    ("tick", "run"): "tick",
    ("driver", "tick"): "tick",
    ("driver", "release_all"): "release",
    ("driver", "release"): "release",
    ("start", "start"): "start",
    ("driver", "summary"): "summary",
    ("driver", "refresh_spare"): "spare lanes",
    ("driver", "make_spare"): "spare lanes",
    ("driver", "drop_spare"): "spare lanes",
}


def phase_of(frame) -> str:
    while frame is not None:
        code = frame.f_code
        module = os.path.splitext(os.path.basename(code.co_filename))[0]
        phase = PHASES.get((module, code.co_name))
        if phase and "git_lanes" in code.co_filename:
            return phase
        frame = frame.f_back
    return "other"


def main() -> int:
    out_dir, args = sys.argv[1], sys.argv[2:]
    calls: list[dict] = []
    lock = threading.Lock()
    real_init = subprocess.Popen.__init__

    def init(self, argv, *a, **kw):
        t0 = time.perf_counter()
        real_init(self, argv, *a, **kw)
        entry = {"argv": [str(x) for x in (argv if isinstance(argv, (list, tuple)) else [argv])],
                 "phase": phase_of(sys._getframe(1)), "thread": threading.current_thread().name,
                 "spawn_ms": round((time.perf_counter() - t0) * 1000, 2)}
        with lock:
            calls.append(entry)

    subprocess.Popen.__init__ = init

    profiles: list[cProfile.Profile] = []
    real_run = threading.Thread.run

    def run(self):
        p = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(p)
        p.enable()
        try:
            real_run(self)
        finally:
            p.disable()

    threading.Thread.run = run
    from git_lanes.cli import main as lanes_main

    main_profile = cProfile.Profile(time.thread_time)
    cpu0 = time.process_time()
    main_profile.enable()
    try:
        code = lanes_main(args)
    finally:
        main_profile.disable()
        cpu = time.process_time() - cpu0
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        stats = pstats.Stats(main_profile)
        for p in profiles:
            try:
                stats.add(p)
            except TypeError:   # a thread that never ran
                pass
        stats.dump_stats(os.path.join(out_dir, "profile.pstats"))
        with open(os.path.join(out_dir, "calls.json"), "w") as f:
            json.dump(calls, f)
        with open(os.path.join(out_dir, "cpu.json"), "w") as f:
            json.dump({"process_s": cpu, "children_s": children.ru_utime + children.ru_stime, "exit": code}, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
