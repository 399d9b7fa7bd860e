"""How the loops of remote lanes wait (SPEC §14, §17.2): `--interval` between rounds, but a quarter of it
(at least 0.25 s) for up to 10 s after the last change while the other side's answer is due (a join
waiting for admission, a `done` waiting for its landing, a coordinator with a candidate or a remote lane
in flight); and the executor machine's wait for its sessions, heartbeats meanwhile.
"""

from __future__ import annotations

import queue
import time

from ..core.errors import LanesError
from ..lane.side import give_up

FAST_MIN = 0.25       # seconds: the shortest poll while the other side's answer is due
FAST_FOR = 10.0       # seconds after the last change that polls stay short
EMPTY_SESSIONS = 2    # sessions in a row without a delivery before the lane gives up (as `run`)
ERRORS = 2            # sessions in a row that failed to run before the lane gives up


def pause(interval: float, changed_at: float, due: bool) -> float:
    """The wait before the next round: short while an answer is `due` and the last change is recent."""
    if not due or time.monotonic() - changed_at > FAST_FOR:
        return interval
    return min(interval, max(FAST_MIN, interval / 4))


class Waiting:
    """The executor machine's waits (mixed into `work.Worker`)."""

    def wait(self, since: float | None = None) -> None:
        """Until a session ends (push, then back to the loop) or `--interval` passed (counted from `since`,
        when the last pull began: polls start every pause(), however long a round takes); heartbeats
        meanwhile."""
        deadline = (time.monotonic() if since is None else since) + self.pause()
        while not self.interrupted.is_set():
            now = time.monotonic()
            if self.held and now - self.last_beat >= self.beat_every:
                self.beat(force=True)
                continue
            until = min(deadline, self.last_beat + self.beat_every if self.held else deadline)
            ended = self._ended(max(0.0, until - now))
            if ended:
                for sess in ended:
                    self.after_session(sess)
                self.push()
                self.changed_at = time.monotonic()
                return
            if time.monotonic() >= deadline:
                return
            self.progress.draw(force=False)

    def pause(self) -> float:
        """Short while this machine waits for the coordinator: a lane held here waits for its admission,
        landing or release; no batch has arrived yet; or a slot is free while the batch still has pending
        children (their provision handoffs come from the coordinator's next tick)."""
        report = self.report or {}
        room = len(self.held) < self.jobs and report.get("batch_state") == "running" and \
            any(c.get("state") == "pending" for c in report.get("children", []))
        return pause(self.interval, self.changed_at,
                     self.batch_id is None or room or any(t not in self.active() for t in self.held))

    def _ended(self, timeout: float) -> list:
        if self.sessions is None:
            self.interrupted.wait(timeout)
            return []
        try:
            first = self.sessions.ended.get(timeout=timeout)
        except queue.Empty:
            return []
        ended = [first]
        while True:
            try:
                ended.append(self.sessions.ended.get_nowait())
            except queue.Empty:
                return ended

    def wait_all(self) -> None:
        while self.active() and not self.interrupted.is_set():
            self.wait()

    def after_session(self, sess) -> None:
        self.sessions.finished(sess)
        tr = self.track_of(sess.task_id)
        took = (sess.ended or time.monotonic()) - sess.started
        code = "" if sess.exit_code is None else f"exit code {sess.exit_code}, "
        self.event(f"{sess.task_id}: session {sess.n} ended ({code}{took:.1f} s): {sess.outcome}")
        if sess.task_id not in self.held:
            return   # a lane no longer this clone's: nothing to count
        bad = sess.outcome.startswith("error")
        tr.errors = tr.errors + 1 if bad else 0
        tr.empty = tr.empty + 1 if sess.outcome == "delivered nothing" else 0
        if tr.errors < ERRORS and tr.empty < EMPTY_SESSIONS:
            return
        text = (f"{tr.errors} executor sessions in a row failed: {sess.outcome}" if bad else
                f"{tr.empty} executor sessions in a row ended without a delivery "
                f"(last: exit code {sess.exit_code}; log {sess.log_path})")
        try:
            give_up(self.sessions.lane_session(sess.lane_path), text[:4000])
        except LanesError as exc:
            self.event(f"{sess.task_id}: giving up failed: {exc.message}")
            return
        self.event(f"{sess.task_id}: gave up: {text}")
