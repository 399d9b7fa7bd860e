"""Executor sessions (SPEC §13): one thread per running session.

The thread builds the prompt, runs the executor in its own process group (output appended to the
session's log file), waits for it and, unless the executor delivered itself, runs `done` for it.
The main thread only learns that a session ended (`wait`), so it ticks, provisions, corrects and
releases meanwhile. Ctrl-C: SIGTERM to every group, SIGKILL after a grace.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..core.crash import crash_point
from ..core.errors import LanesError
from ..core.redact import secret_values
from ..domain.checks import child_env, failure_line, status_text
from ..domain.procs import Group
from ..domain.session import Session
from ..domain.snapshot import still_delivers
from .logpipe import RedactedLog
from .metering import fresh_usage_file, session_ended
from .occupancy import Busy, Occupancy
from .progress import flaky_note
from .prompts import build_prompt, failing_checks

if TYPE_CHECKING:
    from .progress import Track

POLL = 0.05            # seconds between looks at the session queue when there is nothing else to do
TERM_GRACE = 2.0       # seconds a session gets between SIGTERM and SIGKILL on Ctrl-C
WAIT_EARLIER = 0.25    # seconds between looks at a lane an earlier run's session still works in
QUIET = 0.3            # seconds without an expected session end that a chore may take
_KEEP = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")


@dataclass
class Sess:
    task_id: str
    n: int
    lane_path: str
    log_path: str
    started: float
    group: Group | None = None
    reaped: bool = False
    exit_code: int | None = None
    ended: float | None = None
    outcome: str = ""          # what happened once it ended (shown, and used to decide what next)
    delivered: bool = False    # an attempt (or a give-up) exists that this session or its `done` made
    earlier: bool = False      # it waited out the executor a killed run left in the lane, and ran none
    killed: bool = False       # run itself signalled its executor (Ctrl-C, a stop): not a crash
    usage: dict | None = None  # what the executor reported in its GIT_LANES_USAGE file (SPEC §17.4)
    thread: threading.Thread | None = None


def verdict(passed: bool, results: list[dict], note: str | None) -> str:
    """`passed`, or why an attempt failed: `failed A2 (exit 1): <its most telling output line>[; …]`, or the
    note (SPEC §17.1 v4: the last line naming a failure, else the last line)."""
    if passed:
        return "passed"
    failing = [failure_line(r, telling=True) for r in results if not r["passed"]]
    return "failed " + "; ".join(([note] if note else []) + failing)


def _crash(sess: Sess) -> str | None:
    """How the executor crashed (`executor exited N`, `executor killed by SIGSEGV`), or None: it exited 0,
    was never started, or run itself signalled it."""
    code = sess.exit_code
    if code is None or code == 0 or sess.killed or sess.earlier:
        return None
    if code > 0:
        return f"executor exited {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"executor killed by {name}"


def _log_done(path: str, doc: dict) -> None:
    """Append the `done` the driver ran to the session's log: each check's command, status and output."""
    lines = ["", "--- git lanes done (run by git lanes run after the executor exited) ---"]
    for r in doc["results"]:
        lines.append(f"[{r['id']}] {r['command']}: {'passed' if r['passed'] else 'FAILED'} "
                     f"({status_text(r)}, {r['duration_ms'] / 1000:.1f} s)")
        lines += ["    " + line for line in r["output_tail"].rstrip().splitlines()]
    if doc.get("note"):
        lines.append(doc["note"])
    lines.append(f"{doc['task_id']}: {'passed' if doc['passed'] else 'failed'} (tree {doc['tree'][:12]})")
    with open(path, "a", encoding="utf-8", errors="replace") as log:
        log.write("\n".join(lines) + "\n")


def logged_sessions(log_dir: str) -> dict[str, int]:
    """The highest session number of each task in a batch's log folder (`<task>-<n>.log`): how many
    sessions the batch ran for it, earlier runs included."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        names = []
    found: dict[str, int] = {}
    for name in names:
        task, _, n = name[:-4].rpartition("-")
        if name.endswith(".log") and task and n.isdigit():
            found[task] = max(found.get(task, 0), int(n))
    return found


class Sessions:
    def __init__(self, *, slug: str, batch_id: str, argv: list[str], local_vars: tuple[str, ...],
                 log_dir: str) -> None:
        self.slug = slug
        self.batch_id = batch_id
        self.argv = argv
        self.local_vars = local_vars
        self.log_dir = log_dir
        self.active: dict[str, Sess] = {}
        self.ended: queue.Queue[Sess] = queue.Queue()
        self.lock = threading.RLock()
        self.interrupted = threading.Event()
        self.durations: list[float] = []   # of the sessions that ended, shortest first

    def lane_session(self, path: str) -> Session:
        """A session in a lane, blind to GIT_DIR & co. (they would name the coordinator's repository)."""
        env = {k: v for k, v in os.environ.items() if k not in self.local_vars or k.startswith(_KEEP)}
        return Session(cwd=path, environ=env)

    def env(self, task: str) -> dict[str, str]:
        return child_env(os.environ, self.local_vars, slug=self.slug, batch=self.batch_id, task=task)

    # -- starting --------------------------------------------------------------------------------------

    def next_n(self, task: str, track: "Track") -> int:
        """The number of the next session of `task` (an earlier run's logs stay: number on from them)."""
        if track.log_base is None:
            track.log_base = logged_sessions(self.log_dir).get(task, 0)
        return track.log_base + track.sessions + 1

    def begin(self, task: str, lane_path: str, track: "Track") -> Sess:
        """A new session of `task` in its lane, counted in its track (first start, sessions)."""
        n = self.next_n(task, track)
        track.sessions += 1
        if track.first_start is None:
            track.first_start = time.monotonic()
        track.finished = None
        return self.start(task, lane_path, n)

    def start(self, task: str, lane_path: str, n: int) -> Sess:
        sess = Sess(task, n, lane_path, os.path.join(self.log_dir, f"{task}-{n}.log"), time.monotonic())
        self.active[task] = sess
        sess.thread = threading.Thread(target=self._main, args=(sess,), name=f"lane-{task}", daemon=True)
        sess.thread.start()
        return sess

    def _main(self, sess: Sess) -> None:
        """Thread: prompt, executor, wait, then `done` unless the executor delivered itself."""
        occ = None
        pipe: RedactedLog | None = None
        try:
            from ..lane.side import task_info

            ls = self.lane_session(sess.lane_path)
            info = task_info(ls)
            lrec, _ = ls.lanes.read(self.slug, sess.task_id)
            if lrec is not None and lrec.run_id != info["run_id"]:
                lrec = None
            before = (len(lrec.qa_attempts) if lrec else 0, bool(lrec and lrec.gave_up))
            env = self.env(sess.task_id)
            env["GIT_LANES_PROMPT"] = build_prompt(info, failing_checks(lrec))
            os.makedirs(self.log_dir, exist_ok=True)
            env["GIT_LANES_USAGE"] = fresh_usage_file(self.log_dir, sess.task_id, sess.n)   # SPEC §17.4
            started_at = ls.clock()
            with open(sess.log_path, "ab") as log:
                occ, earlier = self._occupy(ls.git.work.admin_dir(sess.lane_path), log)
                if occ is None and earlier:
                    sess.outcome = "interrupted"
                    return
                with self.lock:
                    if self.interrupted.is_set():
                        sess.outcome = "interrupted"
                        return
                    try:
                        if not earlier:   # the executor inherits the lane's session lock (`occupancy`)
                            secrets = secret_values(env)   # its output is redacted as it is logged (§17.6)
                            pipe = RedactedLog(sess.log_path, secrets) if secrets else None
                            try:
                                sess.group = Group(self.argv, cwd=sess.lane_path, env=env,
                                                   stdout=pipe.write_fd if pipe else log,
                                                   pass_fds=(occ.fd,) if occ else ())
                            finally:
                                if pipe is not None:
                                    pipe.started()
                    except OSError as exc:
                        log.write(f"git-lanes: cannot run the executor: {exc}\n".encode())
                        sess.outcome = f"error: cannot run the executor: {exc.strerror or exc}"
                        return
            if sess.group is not None:
                if occ is not None:
                    occ.name(sess.group.pid)
                sess.group.wait_exited()
                with self.lock:
                    sess.exit_code = sess.group.reap()   # whatever the executor left running in its group goes
                    sess.reaped = True
                if pipe is not None:
                    pipe.join(5.0)   # the last of its output logged
                sess.usage = session_ended(ls, env["GIT_LANES_USAGE"], sess.n, started_at, sess.exit_code)
            if self.interrupted.is_set():
                sess.outcome = "interrupted"
                return
            ls.forget_worktrees()   # what the executor may have changed
            sess.outcome = self._after_exit(ls, sess, before, bool(info["unread"]))
            sess.earlier = earlier
        except Exception as exc:  # reported by the main thread; the record is untouched or consistent
            what = exc.message if isinstance(exc, LanesError) else f"{type(exc).__name__}: {exc}"
            sess.outcome = "interrupted" if self.interrupted.is_set() else f"error: {what}"
        finally:
            if occ is not None:
                occ.release()   # an executor still running keeps its own hold
            if sess.ended is None:
                sess.ended = time.monotonic()
            self.ended.put(sess)

    def _occupy(self, admin: str | None, log) -> tuple[Occupancy | None, bool]:
        """(the lane's session lock, whether an earlier run's session held it). A session a killed run
        left still working in the lane (its executor holds the lock) is waited for instead of starting a
        second executor beside it (SPEC §13); None with True: interrupted while waiting."""
        if admin is None:
            return None, False
        try:
            return Occupancy.take(admin), False
        except Busy as busy:
            log.write(f"git-lanes: a session an earlier run started (process group {busy.group}) still works "
                      "in this lane; waiting for it to end\n".encode())
            log.flush()
        while not self.interrupted.wait(WAIT_EARLIER):
            try:
                return Occupancy.take(admin), True
            except Busy:
                continue
        return None, True

    def _after_exit(self, ls: Session, sess: Sess, before: tuple[int, bool], had_unread: bool) -> str:
        from ..lane.side import done, inbox

        snap = ls.batches.read(self.slug)
        child = snap.record.child(sess.task_id) if snap is not None and snap.record.batch_id == self.batch_id else None
        if child is None or child.state != "enrolled" or child.lane is None:
            return f"ended ({child.state if child else 'gone'})"
        if had_unread:
            inbox(ls, ack=True)   # the session was given them
        lrec, _ = ls.lanes.read(self.slug, sess.task_id)
        changed = ""
        if lrec is not None and lrec.run_id == child.lane.run_id:
            if lrec.gave_up is not None and not before[1]:
                sess.delivered = True
                return "gave up"
            last = lrec.qa_attempts[-1] if len(lrec.qa_attempts) > before[0] else None
            if last is not None and not (last.passed and not still_delivers(ls.git, sess.lane_path, last.tree,
                                                                            keep=True)):
                sess.delivered = True
                results = [r.model_dump() for r in last.results]
                return "ran done: " + verdict(last.passed, results, last.note) + flaky_note(sess.task_id, results)
            if last is not None:   # its `done` passed, then it changed the lane: that delivery is checked now
                changed = "changed the lane after its done; "
        crashed = _crash(sess)
        if crashed and not changed:   # SPEC §17.1 v4: half a task is not delivered; a new session starts
            return f"crashed: {crashed}; log {sess.log_path}"
        if child.correction_due:
            return "waits for a correction"
        try:
            doc = done(ls, cancelled=self.interrupted.is_set)
        except LanesError as exc:
            if exc.code == "correction_due":
                return "waits for a correction"
            if exc.code == "nothing_to_deliver":
                return "delivered nothing"
            if exc.code == "nothing_changed":   # SPEC §17.6 v4: an empty session
                return "delivered nothing (nothing changed since the last failed attempt)"
            raise
        if doc is None:
            return "interrupted"   # its checks were killed: no attempt recorded
        crash_point("session-done")
        sess.delivered = True
        _log_done(sess.log_path, doc)
        return changed + "done: " + verdict(doc["passed"], doc["results"], doc.get("note")) + flaky_note(sess.task_id,
                                                                                                   doc["results"])

    # -- waiting ----------------------------------------------------------------------------------------

    def post(self, event: object) -> None:
        """Something else the loop waits for (a verified candidate) joins the sessions' ends."""
        self.ended.put(event)

    def wait(self, chore: Callable[[], Callable[[], None] | None], draw: Callable[[], None],
             timeout: float | None = None) -> list:
        """What happened (at least one session end or posted event); [] when interrupted or after
        `timeout` seconds. While no session is expected to end soon, `chore()` offers one small job
        (a spare lane, a release) to do meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.interrupted.is_set() and (deadline is None or time.monotonic() < deadline):
            job = chore() if self.quiet() else None
            try:
                first = self.ended.get_nowait() if job else self.ended.get(timeout=POLL)
            except queue.Empty:
                if job:
                    job()
                draw()
                continue
            ended = [first]
            while True:
                try:
                    ended.append(self.ended.get_nowait())
                except queue.Empty:
                    return ended
        return []

    def quiet(self) -> bool:
        """True when no session is expected to end within QUIET seconds (judged by the shortest
        session so far): chores then never delay the tick an end calls for. A session that has run
        longer than that gives no expectation at all (it could end any time, or much later)."""
        if not self.durations:
            return True
        now = time.monotonic()
        ends = [s.started + self.durations[0] for s in self.active.values()]
        return all(end - now > QUIET or end < now for end in ends)

    def finished(self, sess: Sess) -> None:
        self.active.pop(sess.task_id, None)
        if sess.ended is not None and sess.outcome != "interrupted":
            self.durations.append(sess.ended - sess.started)
            self.durations.sort()

    # -- stopping ---------------------------------------------------------------------------------------

    def kill(self, sig: int) -> None:
        with self.lock:
            for sess in list(self.active.values()):
                if sess.group is not None and not sess.reaped:
                    sess.killed = True
                    sess.group.kill(sig)

    def wind_down(self) -> None:
        """After Ctrl-C: SIGTERM went out; SIGKILL what is still running after the grace, then join."""
        self.kill(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        for sess in list(self.active.values()):
            if sess.thread is not None:
                sess.thread.join(max(0.0, deadline - time.monotonic()))
        self.kill(signal.SIGKILL)
        for sess in list(self.active.values()):
            if sess.thread is not None:
                sess.thread.join(5.0)
