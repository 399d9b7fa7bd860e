"""Verifying a window of candidates (SPEC §8.9 v4): each candidate's reruns in a thread of its own
(a scratch worktree of its own from the pool, a Git session of its own), all at once; the verdicts
and landings under the slug's lock (those whose checks ended together in one hold, each landing one
write), in the thread that runs `Verifier.run` — which
hands the candidates those record to verification in turn, until none is left.

A watcher re-reads the record every `POLL` seconds (SPEC: at least every 5 s) and stops the checks
of a candidate that left the window (killing the process groups its thread started): its results
are void, its verdict is never recorded.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..domain.procs import kill_thread
from . import gate
from .land import Pending

if TYPE_CHECKING:
    from .request import Outcome

POLL = 1.0    # seconds between two reads of the record while checks run
STOPPING = 0.1   # ... while a stopped candidate's checks are still being killed


class Verifier:
    def __init__(self, s, slug: str, land: Callable[[list[Pending]], tuple["Outcome", list[Pending]]], *,
                 posted: Callable[["Outcome"], None] | None = None,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.s = s
        self.slug = slug
        self.land = land
        self.posted = posted
        self.cancelled = cancelled
        self.outcome: "Outcome | None" = None
        self.closed = False
        self._done: "queue.Queue[tuple[Pending, BaseException | None]]" = queue.Queue()
        self._inflight: list[Pending] = []
        self._mutex = threading.Lock()
        self._quit = threading.Event()

    def add(self, pendings: list[Pending]) -> bool:
        """Verify these too, at once; False (nothing taken) when this verifier has finished."""
        with self._mutex:
            if self.closed:
                return False
            for p in pendings:
                self._inflight.append(p)
                # its session made here, in the thread that asks: with one candidate at a time the Git
                # calls come in the same order every time (the crash matrix replays them)
                threading.Thread(target=self._rerun, args=(p, self._session(p)), name=f"verify-{p.candidate.task_id}",
                                 daemon=True).start()
        return True

    def _session(self, p: Pending | None = None):
        from ..domain.session import Session

        where = p.coordinator if p is not None and p.coordinator and os.path.isdir(p.coordinator) else None
        return Session(cwd=where or self.s.git.cwd, warn=self.s.warn, clock=self.s.clock)

    def _rerun(self, p: Pending, session) -> None:
        try:
            gate.rerun(session, self.slug, p)
        except BaseException as exc:   # handed to the thread that lands: it stops the others and raises it
            self._done.put((p, exc))
        else:
            self._done.put((p, None))

    def run(self, pendings: list[Pending]) -> "Outcome | None":
        """Verify `pendings` and whatever their landings record next; the outcome of the last landing
        (None: nothing was landed or judged, e.g. cancelled)."""
        ws = self._session(pendings[0] if pendings else None)
        self.add(pendings)
        watcher = threading.Thread(target=self._watch, args=(ws,), name="verify-watch", daemon=True)
        watcher.start()
        try:
            while True:
                with self._mutex:
                    if not self._inflight:
                        self.closed = True
                        break
                try:
                    ended = [self._done.get(timeout=0.5)]
                except queue.Empty:
                    continue
                while True:   # those that ended meanwhile are judged in the same hold
                    try:
                        ended.append(self._done.get_nowait())
                    except queue.Empty:
                        break
                with self._mutex:
                    for p, _ in ended:
                        self._inflight.remove(p)
                failure = next((exc for _, exc in ended if exc is not None), None)
                if failure is not None or self.cancelled():
                    # an error, or Ctrl-C killed the checks: nothing is decided, the candidates stay
                    for p, _ in ended:
                        p.held.release()
                    if failure is not None:
                        raise failure
                    continue
                outcome, more = self.land([p for p, _ in ended])
                self.outcome = outcome
                if self.posted is not None:
                    self.posted(outcome)
                self.add(more)
        except BaseException:
            self._abort()
            raise
        finally:
            self._quit.set()
        return self.outcome

    def _abort(self) -> None:
        """Stop every verification still running and release its lock (the candidates stay recorded)."""
        with self._mutex:
            self.closed = True
        while True:
            with self._mutex:
                left = list(self._inflight)
            if not left:
                return
            for p in left:
                p.stopped = True
                if p.thread is not None:
                    kill_thread(p.thread)
            try:
                p, _ = self._done.get(timeout=STOPPING)
            except queue.Empty:
                continue
            with self._mutex:
                self._inflight.remove(p)
            p.held.release()

    def _watch(self, ws) -> None:
        """The record read again whenever its ref moved (a look at one file, every `POLL` seconds)."""
        ref = ws.batches.ref(self.slug)
        seen = ws.git.refs.resolve(ref)
        record: Any = None
        wait = POLL
        while not self._quit.wait(wait):
            with self._mutex:
                live = list(self._inflight)
            wait = POLL
            if not live:
                continue
            tip = ws.git.refs.resolve(ref)
            if tip != seen:
                try:
                    snap = ws.batches.read(self.slug)
                except Exception:   # a record being rewritten: the next look decides
                    continue
                seen, record = tip, (snap.record if snap is not None else False)   # False: the record is gone
            for p in live:
                if not p.stopped and record is not None and (
                        record is False or record.batch_state != "running"
                        or not any(gate.same(c, p.candidate) for c in record.candidates)):
                    p.stopped = True
                if p.stopped and p.thread is not None:
                    kill_thread(p.thread)
                    wait = STOPPING
