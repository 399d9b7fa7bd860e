"""`git lanes work [<slug>] --remote R --executor CMD [--jobs N] [--once]`: the executor machine (SPEC §14).

One process, one loop, everything it knows read from what the last pull brought:

    pull          the batch record, every lane record and branch (a failed pull: say so, go on)
    release       lanes of this clone that the coordinator's release handoffs name
    stop          the batch is terminal (exit 0 when completed, else 1) or needs a human (exit 1)
    sessions      for each lane of this clone the coordinator enrolled whose next step is to
                  implement (no attempt, a failed one below the QA limit, a correction arrived): one
                  executor session exactly as `git lanes run` runs it (prompt, log, `done` after it)
    join          provision handoffs, up to N lanes held (a lost claim race just moves on)
    heartbeat     every `remote_timeout / 3` seconds (the batch record's value, SPEC §17.2),
                  `claim.heartbeat_at` of each lane held
    wait          until a session ends (then push at once) or `--interval` passes since the pull
                  began; while a lane held waits for the coordinator (admission, landing, release), a
                  slot is free and children are pending, or no batch came yet, max(0.25, interval / 4)
                  for up to 10 s after the last change
A lane whose claim the coordinator restarted (lost: no heartbeat) is no longer this clone's: its
session is stopped at the next pull and the lane stays for `release --stale`.

Pushes carry only the refs this clone writes (its lanes' branches and records), after each `done`,
each heartbeat and each release; a lease that fails re-pulls and retries (`claims.sync_push`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.errors import LanesError, usage
from ..core.model import TERMINAL
from ..domain.checks import split_command
from ..domain.clone import clone_id
from ..domain.lanehost import batch_timeout, live_claim, remote_timeout
from ..domain.procs import CtrlC, stopping
from ..domain.session import Session
from ..lane.side import heartbeat
from ..remote.claims import (claimed_elsewhere, failure_text, held_lanes, join, own_refs, release, sync_push,
                             wants_session)
from ..remote.heartbeats import beating
from ..remote.pacing import Waiting
from ..remote.replicate import pull, resolve_remote, unsent
from ..store import CorruptRecord
from . import RunResult, executor_steps, summary_facts
from .progress import Progress, Track, child_rows
from .sessions import Sessions

JOIN_BACKOFF = 3      # rounds a task is left alone after a join of it failed


@dataclass
class Held:
    """A lane this clone claimed (admitted or not yet)."""
    task_id: str
    run_id: str
    path: str


@dataclass
class Worker(Waiting):
    s: Session
    slug: str | None
    remote: str
    argv: list[str]
    jobs: int
    interval: float
    out: Callable[[str], None]
    as_json: bool
    once: bool = False
    track: dict[str, Track] = field(default_factory=dict)
    held: dict[str, Held] = field(default_factory=dict)
    pulls: int = 0
    pushes: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    sessions: Sessions | None = None
    batch_id: str | None = None
    interrupted: threading.Event = field(default_factory=threading.Event)
    ctrl_c: CtrlC = field(default_factory=CtrlC)
    skip: dict[str, int] = field(default_factory=dict)
    unreachable: str | None = None
    joined: int = 0                 # lanes joined by this process (`--once`: at most --jobs)
    changed_at: float = field(default_factory=time.monotonic)
    round_at: float = 0.0           # the last full round (status, sessions, joins, releases)
    waiting_said: bool = False

    def __post_init__(self) -> None:
        self.git = self.s.git
        self.clone = clone_id(self.git, create=True)
        self.beat_every = remote_timeout(self.git) / 3
        self.last_beat = time.monotonic()
        tty = sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
        self.progress = Progress(self.out, tty, quiet_stdout=self.as_json)
        self.progress.rows = lambda: child_rows(self.report, self.track, self.active(), time.monotonic())
        self.states: dict[str, str] = {}

    def active(self) -> dict[str, Any]:
        return self.sessions.active if self.sessions is not None else {}

    def event(self, text: str) -> None:
        self.progress.event(text)

    # -- talking to the remote ------------------------------------------------------------------------

    def pull(self) -> bool:
        try:
            doc = pull(self.s, self.remote)
        except LanesError as exc:
            self._unreachable(exc)
            return False
        self.pulls += 1
        if any(r["status"] == "pulled" for r in doc["refs"]):
            self.changed_at = time.monotonic()
        if self.unreachable:
            self.event(f"{self.remote} reachable again")
            self.unreachable = None
            self.changed_at = time.monotonic()
        return True

    def push(self, s: Session | None = None) -> None:
        """Push what this clone wrote (its lanes' branches and records)."""
        if self.slug is None:
            return
        s = s or self.s
        refs = own_refs(s, self.slug)
        try:
            if not refs or not unsent(s, self.remote, refs.__contains__):
                return
            doc = sync_push(s, self.remote, only=refs.__contains__, fetched=True)
        except LanesError as exc:
            self._unreachable(exc)
            return
        self.pushes += 1
        for r in doc["refs"]:
            if r["status"] == "remote_moved":
                self.event(f"remote_moved: {r['ref']} diverged on {self.remote}; not overwritten")

    def _unreachable(self, exc: LanesError) -> None:
        text = failure_text(exc)
        if text != self.unreachable:
            self.event(f"{self.remote}: {text}; retrying every {self.interval:g} s (sessions go on)")
        self.unreachable = text

    # -- the loop -----------------------------------------------------------------------------------------

    def drive(self) -> None:
        while not self.interrupted.is_set():
            polled = time.monotonic()
            pulled = self.pull()
            if not pulled and self.slug is None:
                self.wait(polled)
                continue
            rec = self._record()
            if rec is None:
                if self.once:
                    raise usage(f"no batch on {self.remote} yet")
                if not self.waiting_said:
                    self.waiting_said = True
                    self.event(f"waiting for a batch of {self.slug or 'any slug'} on {self.remote}")
                self.wait(polled)
                continue
            if self.changed_at < self.round_at and time.monotonic() - self.round_at < self.interval:
                self.wait(polled)   # the pull brought nothing and nothing happened here: no round before --interval
                continue
            self.round_at = time.monotonic()
            self.report = self._status()
            self.note(self.report)
            state = rec.batch_state
            if state in TERMINAL or state == "needs_human":
                self.release_done()
                return
            self.forget(rec)
            self.start_sessions(rec)
            if pulled and (not self.once or self.joined < self.jobs):
                self.join_more()      # before releases: a join is on the batch's critical path, a release is not
            released = self.release_done(push=False)
            if released and pulled and (not self.once or self.joined < self.jobs):
                self.join_more()      # the releases freed slots: the handoffs waiting for one go first
            if released:
                self.push()
            self.beat(force=False)
            if self.once and not self.owed(rec):
                self.wait_all()
                return
            self.wait(polled)

    def owed(self, rec) -> bool:
        """`--once`: a lane joined here still owes its session (waiting for admission, or enrolled and
        wanting one), or a session runs."""
        if self.active():
            return True
        for task, held in self.held.items():
            child = rec.child(task)
            if child is None or self.track_of(task).sessions:
                continue
            if child.state == "pending" or (child.state == "enrolled" and wants_session(self.s, rec, child)):
                return True
        return False

    def _record(self):
        if self.slug is None:
            try:
                self.slug = self.s.choose_slug(None)
            except LanesError:
                return None
        snap = self.s.batches.read(self.slug)
        if snap is None:
            return None
        rec = snap.record
        if rec.batch_id != self.batch_id:
            self._new_batch(rec)
        return rec

    def _new_batch(self, rec) -> None:
        from . import log_dir  # the same session logs as `run`

        if self.sessions is not None:
            self.sessions.kill(signal.SIGTERM)
            self.sessions.wind_down()
        self.batch_id = rec.batch_id
        self.beat_every = batch_timeout(self.git, rec) / 3   # the record's timeout, not this clone's (§17.2)
        self.held.clear()
        self.log_dir = log_dir(self.s, rec.batch_id)
        self.sessions = Sessions(slug=rec.slug, batch_id=rec.batch_id, argv=self.argv,
                                 local_vars=tuple(self.git.local_env_vars), log_dir=self.log_dir)
        self.sessions.interrupted = self.interrupted
        self.event(f"working on batch {rec.batch_id} ({rec.slug}) from {self.remote} as clone {self.clone} "
                   f"(jobs {self.jobs}); executor: {' '.join(self.argv)}")
        self.event(f"session logs: {self.log_dir}/<task>-<n>.log")
        self._adopt(rec)

    def _adopt(self, rec) -> None:
        """Lanes this clone claimed before (an earlier `work` or `join`): held again."""
        for task, (run_id, path) in held_lanes(self.s, rec).items():
            self.held[task] = Held(task, run_id, path)

    def _status(self) -> dict[str, Any]:
        from ..tick import status_report

        return status_report(self.s, self.slug)

    def note(self, report: dict[str, Any]) -> None:
        for c in report["children"]:
            task, state = c["task_id"], c["state"]
            before = self.states.get(task)
            self.states[task] = state
            if before is None or before == state or task not in self.held:
                continue
            if state == "enrolled" and before == "pending":
                self.event(f"{task}: admitted by the coordinator")
            elif state in ("integrated", "released") and before not in ("integrated", "released"):
                self.track_of(task).finished = time.monotonic()
                self.event(f"{task}: integrated {(c.get('commit') or '')[:12]}")
            elif state == "needs_human":
                self.event(f"{task}: parked: {c.get('reason')}")
        self.progress.draw()

    def track_of(self, task: str) -> Track:
        return self.track.setdefault(task, Track())

    # -- what to do with the lanes held --------------------------------------------------------------------

    def release_done(self, push: bool = True) -> int:
        """Release the lanes the release handoffs name for this clone; one push for all of them (`push`:
        now, else the caller's); how many."""
        released = 0
        for h in self.report.get("handoffs", []):
            if h.get("action") != "release" or (h.get("remote") or {}).get("clone_id") != self.clone:
                continue
            task = h["task_id"]
            if task in self.active():
                continue
            try:
                release(self.s, self.slug, task, remote=None)
            except LanesError as exc:
                self.event(f"{task}: lane not released: {exc.message}")
                continue
            released += 1
            self.held.pop(task, None)
            self.event(f"{task}: lane released")
        if released and push:
            self.push()
        return released

    def forget(self, rec) -> None:
        """Lanes that are no longer this clone's to work (parked, restarted, taken elsewhere)."""
        for task, held in list(self.held.items()):
            child = rec.child(task)
            if child is None:
                self.held.pop(task)
                continue
            if child.lane is not None and child.lane.run_id == held.run_id and \
                    child.state not in ("needs_human", "released"):
                continue
            if child.state == "pending":
                try:
                    lrec, _ = self.s.lanes.read(rec.slug, task)
                except CorruptRecord:
                    lrec = None
                claim = live_claim(rec, task, lrec)
                if claim is not None and claim.run_id == held.run_id:
                    continue   # claimed, not admitted yet
            self.held.pop(task)
            why = f"{child.state}: {child.reason}" if child.reason else child.state
            if any(a.task_id == task and a.run_id == held.run_id for a in rec.archived_lanes):
                why = "restarted by the coordinator: its heartbeats did not arrive in time"
            self.stop_session(task)
            self.event(f"{task}: no longer this clone's lane ({why}); its worktree {held.path} stays "
                       f"(git lanes release --stale {rec.slug} removes it)")

    def stop_session(self, task: str) -> None:
        """The session of a lane that is no longer this clone's ends now (SPEC §17.6)."""
        sess = self.active().get(task)
        if sess is None:
            return
        with self.sessions.lock:
            if sess.group is not None and not sess.reaped:
                sess.group.kill(signal.SIGTERM)
        self.event(f"{task}: session {sess.n} stopped")

    def start_sessions(self, rec) -> None:
        from ..batch.metering import over_budget

        reason = over_budget(self.s, self.slug, rec.batch_id) if self.held else None   # the pulled totals (§17.6)
        if reason is not None:
            if reason != getattr(self, "budget_said", None):
                self.event(f"no new session: {reason}")
                self.budget_said = reason
            return
        for task, held in self.held.items():
            if self.interrupted.is_set():
                return
            child = rec.child(task)
            if task in self.active() or child is None or child.state != "enrolled" or child.lane is None \
                    or child.lane.run_id != held.run_id or not wants_session(self.s, rec, child):
                continue
            sess = self.sessions.begin(task, held.path, self.track_of(task))
            self.event(f"{task}: session {sess.n} started")

    def join_more(self) -> None:
        from ..decisions.claims import join_order

        room = self.jobs - len(self.held)
        rec = self.s.batches.read(self.slug).record
        tasks = [h["task_id"] for h in self.report.get("handoffs", []) if h.get("action") == "provision"]
        for task in join_order(tasks, {c.task_id: c.blocked_by for c in rec.children}, self.clone):
            if room <= 0 or self.interrupted.is_set():
                return
            if task in self.held or claimed_elsewhere(self.s, rec, task):
                continue
            if self.skip.get(task, 0) > 0:
                self.skip[task] -= 1
                continue
            try:
                with beating(lambda s: self.beat(force=False, s=s), self.git.cwd, self.event,
                             poll=min(self.beat_every, 1.0)):
                    doc = join(self.s, self.slug, task, remote=self.remote, attempts=1, pulled=True)
            except LanesError as exc:
                if exc.code != "batch_lane_claimed":
                    self.skip[task] = JOIN_BACKOFF
                self.event(f"{task}: not joined: {exc.message}")
                continue
            self.pushes += 1
            room -= 1
            self.joined += 1
            self.changed_at = time.monotonic()
            self.held[task] = Held(task, doc["claim"]["run_id"], doc["lane_path"])   # the claim is its first beat
            self.event(f"{task}: joined, lane {doc['lane_path']} (waits for the coordinator to admit it)")

    def beat(self, force: bool, s: Session | None = None) -> None:
        if not self.held or (not force and time.monotonic() - self.last_beat < self.beat_every):
            return
        self.last_beat = time.monotonic()
        for held in list(self.held.values()):
            try:
                heartbeat(s or self.s, self.slug, held.task_id, held.run_id)
            except LanesError as exc:
                self.event(f"{held.task_id}: heartbeat not written: {exc.message}")
        self.push(s)


    def on_sigint(self, signum, frame) -> None:
        if not self.ctrl_c.first():
            return
        self.interrupted.set()
        if self.sessions is not None:
            self.sessions.kill(signal.SIGTERM)


def work(s: Session, slug: str | None, *, remote: str, executor: str, jobs: int = 1, once: bool = False,
         interval: float = 2.0, as_json: bool = False, out: Callable[[str], None] = print) -> RunResult:
    """The executor machine's loop; exit 0 when the batch completed, 1 when it needs a human or ended otherwise."""
    import shutil

    resolve_remote(s.git, remote)
    if s.git.config_get(f"remote.{remote}.url") is None:
        raise usage(f"--remote: no remote named '{remote}' (add one with 'git remote add')")
    argv = split_command(executor)
    if argv and os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise usage(f"--executor: {argv[0]}: command not found")
    if jobs < 1 or interval <= 0:
        raise usage("--jobs must be at least 1 and --interval more than 0")
    worker = Worker(s, slug, remote, argv, jobs, interval, out, as_json, once=once)
    with stopping(worker.on_sigint):   # Ctrl-C, SIGTERM, SIGHUP
        try:
            worker.drive()
        finally:
            if worker.sessions is not None and worker.sessions.active:
                worker.sessions.kill(signal.SIGTERM)   # lanes no longer this clone's (the batch stopped)
                worker.sessions.wind_down()
    return _result(worker)


def _result(worker: Worker) -> RunResult:
    s, slug = worker.s, worker.slug
    if slug is None or s.batches.read(slug) is None:
        raise usage(f"no batch arrived from {worker.remote}")
    report = worker._status()
    worker.event(f"{worker.remote}: {worker.pulls} pull(s), {worker.pushes} push(es)")
    worker.progress.close()
    facts = summary_facts(s, slug, report, worker, getattr(worker, "log_dir", ""))
    state = report["batch_state"]
    facts["next"] = executor_steps(slug, worker.remote, state)
    result = RunResult(report, 0, None, facts)
    if worker.interrupted.is_set():
        result.exit_code = 1
        result.error = (f"interrupted; the lanes of this clone stay as they are: run "
                        f"'git lanes work {slug} --remote {worker.remote} ...' again")
    elif state == "needs_human":
        result.exit_code, result.error = 1, f"batch_needs_human: {report.get('reason')}"
    elif state in TERMINAL and state != "completed":
        result.exit_code, result.error = 1, f"the batch ended {state}: {report.get('reason')}"
    return result
