"""The driver of `git lanes run` (SPEC §13): tick, act on the handoffs, wait for a session to end.

Every decision is in the records Git holds; the driver only keeps what a person watching needs
(sessions, timings) and what makes it fast (spare lanes, releases while waiting). A candidate a
tick records is verified by a worker thread of its own (SPEC §8.6), so sessions, provisions and
corrections go on while its checks run; the worker posts what it landed to the same queue the
sessions' ends arrive in.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..batch.metering import over_budget
from ..core.errors import LanesError
from ..decisions.admission import MAX_OFFERS
from ..domain.checks import failure_line
from ..domain.procs import CtrlC, kill_all
from ..domain.session import Session
from ..tick import Pending, Request, hold_landing, tick, verify
from .corrections import Correcting
from .metering import budget_stop
from .progress import Progress, Track, child_rows, stalled
from .provisions import PROVISION_TRIES, Provisioning, Stop
from .sessions import Sess, Sessions
from .spares import Spares

EMPTY_SESSIONS = 2     # sessions in a row without a delivery before the driver gives the lane up
IDLE_SESSIONS = 3      # sessions in a row after which the lane asks for the same work again, unchanged
STALLS = 3             # rounds in a row with nothing running and nothing startable before giving up
TERMINAL = ("completed", "failed", "budget_stopped", "superseded")


# states a child never leaves: a report that shows it back before them is older than one already noted
_RANK = {"integrated": 1, "released": 2}


@dataclass
class Landed:
    """What the verifier posts: the report after a candidate landed or parked, or why it stopped."""
    report: dict[str, Any] | None
    error: LanesError | None = None


class Driver(Provisioning, Correcting):
    def __init__(self, s: Session, slug: str, record, argv: list[str], corrector: list[str] | None,
                 as_json: bool, out: Callable[[str], None], log_dir: str, verify_inline: bool = False) -> None:
        self.slug = slug
        self.batch_id = record.batch_id
        self.corrector = corrector
        # the coordinator's session, reused by every tick (a missing coordinator: the tick says so)
        self.cs = Session(cwd=record.coordinator) if os.path.isdir(record.coordinator) else s
        self.sessions = Sessions(slug=slug, batch_id=record.batch_id, argv=argv,
                                 local_vars=tuple(s.git.local_env_vars), log_dir=log_dir)
        try:  # the authorized scopes (a revision only narrows one): what spare lanes must not overlap
            scopes = {t.task_id: list(t.intent.scope) for t in self.cs.plan_at(record.base_head, slug).tasks}
        except LanesError:
            scopes = {}
        tty = sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
        self.progress = Progress(out, tty, quiet_stdout=as_json)
        self.progress.rows = lambda: child_rows(self.report, self.track, self.sessions.active, time.monotonic())
        self.spares = Spares(lambda: self.cs, slug, record.batch_id, scopes, min(record.max_parallel, 32),
                             self.progress.event)
        self.track: dict[str, Track] = {}
        self.removed = False                          # lanes removed since the last tick
        self.releases: list[dict[str, Any]] = []      # release handoffs, carried out while waiting
        self.report: dict[str, Any] = {}
        self.prev: dict[str, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self.restored = {(r.at, r.backup) for r in record.restores}   # leak restores already reported
        self.tasks = [c.task_id for c in record.children]
        self.verifier: threading.Thread | None = None
        self.verifier_session: Session | None = None   # one verifier at a time: they share it in turn
        self.window = None                              # its candidates' verifications (`tick.verifier`)
        self.preparer: threading.Thread | None = None  # the scratch worktree made ready meanwhile
        self.branch = record.branch
        self.verify_inline = verify_inline   # a loop that does not wait on sessions verifies in its ticks
        self.coordinator = record.coordinator
        self.ctrl_c = CtrlC()

    @property
    def interrupted(self):
        return self.sessions.interrupted

    def track_of(self, task_id: str) -> Track:
        return self.track.setdefault(task_id, Track())

    # -- ticks and reports --------------------------------------------------------------------------

    def tick(self, request: Request | None = None, spares: bool = False) -> dict[str, Any]:
        """One tick; with `spares`, the spare lanes are offered too (admitted when a slot is free)."""
        request = request or Request(actor="run")
        if request.only is None:
            # a lane whose session has not been seen to end is not observed yet: its `ended` line comes
            # before its `integrated` line (SPEC §13 v3), and its `done` is never raced
            request.only = set(self.tasks) - set(self.sessions.active)
        offered: dict[str, str] = {}
        if spares and self.spares.lanes and self.report.get("batch_state", "running") == "running":
            # a batch that ended (budget, completed) admits nothing: an offer to it is an error
            named = {task for task, _ in request.offers}
            room = max(0, MAX_OFFERS - len(request.offers))
            offered = dict([(t, p) for t, p in self.spares.lanes.items() if t not in named][:room])
            request.offers = list(request.offers) + list(offered.items())
            self.spares.refresh(self.report, named)
        while True:
            try:
                outcome, pendings = tick(self.cs, self.slug, request)
                break
            except LanesError as exc:
                # our own verifier holds the lock: a landing may wait up to a minute for a Git lock file a
                # kill left (SPEC §15), longer than lanes.lockTimeout; wait for it as long as it works
                if exc.code != "batch_busy" or not self.verifying or self.interrupted.is_set():
                    raise
        if pendings and self.verify_inline:
            outcome, pendings = verify(self.cs, self.slug, request, pendings) or outcome, []
        if pendings:
            self._verify(pendings)
        self.removed = False
        report = outcome.report
        if outcome.error is not None and report.get("batch_state") == "rejected":
            raise Stop(outcome.error.message)
        quiet = set()
        if offered:
            states = {c["task_id"]: c["state"] for c in report["children"]}
            refusals = {r["task_id"]: r["reason"] for r in report.get("lane_refusals", [])}
            for task, path in offered.items():
                if states.get(task) != "pending":
                    self.spares.take(task)
                    self.progress.event(f"{task}: lane {path}")
                elif refusals.get(task) == "batch_lane_unknown_child":
                    quiet.add(task)    # no free slot yet: it stays a spare
                else:
                    self.spares.drop(task)
        self.note(report, quiet)
        return report

    @staticmethod
    def prev_run(c: dict[str, Any]) -> bool:
        """Whether an earlier run left counters on this child (a continued batch's first report)."""
        return bool(c.get("qa_failures") or c.get("corrections")) and c["state"] == "enrolled"

    def note(self, report: dict[str, Any], quiet: set[str] = frozenset()) -> None:
        """Events for what changed since the last report."""
        self.report = report
        if report.get("batch_state") == "rejected":
            return
        for c in report["children"]:
            task = c["task_id"]
            before = self.prev.get(task, {})
            state = c["state"]
            if _RANK.get(state, 0) < _RANK.get(before.get("state"), 0):
                continue   # a report taken before one already noted (the verifier's, read by the main thread late)
            if not before and self.prev_run(c):   # a batch continued: where it is now, once (not as news)
                self.progress.event(f"{task}: {state}, QA failures {c.get('qa_failures', 0)}, corrections "
                                    f"{c.get('corrections', 0)}")
            elif c.get("qa_failures", 0) > before.get("qa_failures", 0):   # before the park it may have caused
                self.progress.event(f"{task}: QA failures {c['qa_failures']}")
            if state != before.get("state") and before:
                if state in ("integrated", "released") and before.get("state") not in ("integrated", "released"):
                    self.track_of(task).finished = time.monotonic()
                    self.progress.event(f"{task}: integrated {c['commit'][:12]}")
                if state == "released":
                    self.progress.event(f"{task}: lane released")
                elif state == "needs_human":
                    self.track_of(task).finished = time.monotonic()
                    self.progress.event(f"{task}: parked: {c['reason']}")
                    for r in c.get("gate_results", []):   # what failed on the candidate, not only that it did
                        self.progress.event(f"{task}:   {failure_line(r, telling=True)}")
                elif state == "skipped_blocked":
                    self.progress.event(f"{task}: skipped ({c['reason']})")
            if c.get("correction_due") and not before.get("correction_due"):
                self.progress.event(f"{task}: correction due ({c['correction_due']})")
            self.prev[task] = c
        for r in report.get("restores", []):   # the record's whole list: those of this run are new
            if (r["at"], r["backup"]) not in self.restored:
                self.restored.add((r["at"], r["backup"]))
                tasks = ", ".join(sorted({p["lane_task_id"] for p in r["paths"]}))
                self.progress.event(f"restored {len(r['paths'])} leaked path(s) (lane writes of {tasks}) in the "
                                    f"coordinator to HEAD; backup: {r['backup']}")
        for r in report.get("lane_refusals", []):
            if r["task_id"] not in quiet:
                self.progress.event(f"{r['task_id']}: lane refused: {r['reason']}")
        self.progress.draw()

    # -- the verifier ------------------------------------------------------------------------------------

    @property
    def verifying(self) -> bool:
        return self.verifier is not None and self.verifier.is_alive()

    def _verify(self, pendings: list[Pending]) -> None:
        """Verify (and land) the candidates in threads of their own (SPEC §8.9), joining the verifier at
        work if there is one; its landings are posted as they come."""
        from ..tick.verifier import Verifier

        if self.window is not None and self.window.add(pendings):
            return

        def land(pendings: list[Pending]):
            return hold_landing(vs, self.slug, Request(actor="run"), pendings)

        def work(pendings: list[Pending]) -> None:
            try:
                if self.preparer is not None:
                    self.preparer.join()   # the worktree it makes ready is the one the first verification takes
                if self.interrupted.is_set():   # Ctrl-C: no new verification; the candidates stay recorded
                    for p in pendings:
                        p.held.release()
                    pendings = []
                window.run(pendings)
            except LanesError as exc:
                self.sessions.post(Landed(None, exc))
            except BaseException as exc:   # reported by the main thread; the candidates stay recorded
                self.sessions.post(Landed(None, LanesError(f"the verifier stopped: {type(exc).__name__}: {exc}")))
        if self.verifier is None or not self.verifier.is_alive():
            self.verifier_session = self.verifier_session or Session(cwd=self.coordinator)
        else:
            self.verifier_session = Session(cwd=self.coordinator)   # the last one may still be finishing
        vs = self.verifier_session
        window = self.window = Verifier(vs, self.slug, land, posted=lambda o: self.sessions.post(Landed(o.report)),
                                        cancelled=self.interrupted.is_set)
        self.verifier = threading.Thread(target=work, args=(pendings,), name="verifier", daemon=True)
        self.verifier.start()

    def landed(self, event: Landed) -> dict[str, Any]:
        """One posted event taken in, then a tick for what it freed (`run --remote`'s loop)."""
        self.take_in([event])
        return self.report if self.interrupted.is_set() else self.tick(Request(actor="run", only=set()), spares=True)

    def take_in(self, events: list[Landed]) -> None:
        """Note what the verifier posted (the caller ticks for what its landings freed)."""
        for event in events:
            if event.error is None:
                # landing admits no lane: the refusals its report carries are those of the tick that
                # recorded the candidate, reported then
                self.note(event.report, {r["task_id"] for r in event.report.get("lane_refusals", [])})
            elif event.error.code != "batch_busy" and not self.interrupted.is_set():
                raise Stop(event.error.message)
            # batch_busy: the main thread held the lock that long (waiting out a Git lock file a kill
            # left): the candidate stays recorded and the next tick verifies it again

    # -- the loop ---------------------------------------------------------------------------------------

    def drive(self) -> None:
        report = self.tick()
        stalls = 0
        while not self.interrupted.is_set():
            if report["batch_state"] != "running":
                return
            report = self.act(report)
            if report["batch_state"] != "running" or self.interrupted.is_set():
                continue
            if not self.sessions.active and not self.verifying and budget_stop(self.cs, self.slug, self.batch_id,
                                                                               self.progress.event):
                report = self.tick()   # a budget reached (SPEC §17.6): the batch went needs_human
                continue
            if not self.sessions.active and not self.verifying:
                stalls += 1   # nothing runs: tick a few times (someone may work a lane), then stop
                if stalls >= STALLS:
                    raise Stop(self._stuck_reason(report))
                report = self.tick()
                continue
            stalls = 0
            happened = self.sessions.wait(self._chore, lambda: self.progress.draw(force=False))
            if not happened:
                return  # interrupted
            # One tick for what happened together: it observes the lanes whose sessions ended, takes in
            # what the verifier landed and offers the spare lanes, so a freed slot is filled at once
            # (one tick per event would queue them behind each other and behind the landings).
            ends = [e for e in happened if not isinstance(e, Landed)]
            self.take_in([e for e in happened if isinstance(e, Landed)])
            for event in ends:
                self.after_session(event)
            if not ends and self.interrupted.is_set():
                return   # Ctrl-C: what was landed is noted, nothing more is decided
            report = self.tick(Request(actor="run", only={e.task_id for e in ends}), spares=True)
            for event in ends:
                if stalled(self.track_of(event.task_id), event, report) >= IDLE_SESSIONS:
                    report = self.stop_lane(event, report)

    def _chore(self) -> Callable[[], None] | None:
        """One small job to do while sessions run: a spare lane, else a release. A release holds the
        slug's lock that a landing being verified takes next: it waits for the verifier to finish,
        unless more lanes wait for one than a wave of lanes holds."""
        spare = self.spares.next(self.report)
        if spare:
            return lambda: self.spares.make(spare)
        if self.releases and (not self.verifying or len(self.releases) > self.spares.limit):
            return lambda: self.release(self.releases.pop(0))
        return None

    def _stuck_reason(self, report: dict[str, Any]) -> str:
        reviews = [c["task_id"] for c in report["children"] if c.get("next_obligation") == "review"]
        if reviews:
            review = f"git lanes review {{t}} --slug {self.slug}"
            return ("waiting for a review verdict on " + ", ".join(reviews) + "; give it with "
                    + "; ".join(f"{review.format(t=t)} --approve (or {review.format(t=t)} --reject -m <reason>)"
                                for t in reviews) + ", then run again")
        failed = [t for t, tr in self.track.items() if tr.provision_failures]
        if failed:
            return ("could not provision a lane for " + ", ".join(sorted(failed))
                    + f"; see the lines above and git lanes status {self.slug}")
        return f"nothing is running and nothing can start; see git lanes status {self.slug}"

    def act(self, report: dict[str, Any]) -> dict[str, Any]:
        """Corrections, provisions and sessions the report's handoffs call for."""
        for h in [h for h in report["handoffs"] if h.get("action") == "correct"]:
            if h["task_id"] in self.sessions.active or self.interrupted.is_set():
                continue
            report = self.correct(h)
        provisions = [h for h in report["handoffs"] if h.get("action") == "provision"
                      and self.track_of(h["task_id"]).provision_failures < PROVISION_TRIES]
        if provisions and not self.interrupted.is_set():
            report = self.provision(provisions)   # the lanes made at once: N setups cost about one
        if report["batch_state"] != "running":
            return report
        self.start_sessions(report)
        self.releases = [h for h in report["handoffs"] if h.get("action") == "release"]
        return report

    def start_sessions(self, report: dict[str, Any]) -> None:
        """A session for every lane whose handoff says implement and that has none running (none at all
        once a usage budget is reached, SPEC §17.4)."""
        if over_budget(self.cs, self.slug, self.batch_id):
            return
        for h in report["handoffs"]:
            if self.interrupted.is_set():
                break
            if h.get("role") == "executor" and h["next_obligation"] == "implement" \
                    and h["task_id"] not in self.sessions.active:
                self.start_session(h["task_id"], h["lane_path"])

    def start_session(self, task: str, lane_path: str) -> None:
        sess = self.sessions.begin(task, lane_path, self.track_of(task))
        self.progress.event(f"{task}: session {sess.n} started")
        self.prepare_scratch()   # once: while the first session works (and the other lanes are made)

    def after_session(self, sess: Sess) -> None:
        self.sessions.finished(sess)
        tr = self.track_of(sess.task_id)
        took = (sess.ended or time.monotonic()) - sess.started
        code = "" if sess.exit_code is None else f"exit code {sess.exit_code}, "
        which = "the session a killed run left" if sess.earlier else f"session {sess.n}"
        self.progress.event(f"{sess.task_id}: {which} ended ({code}{took:.1f} s): {sess.outcome}")
        if sess.outcome.startswith("error"):
            tr.errors += 1
            if tr.errors >= 2:
                raise Stop(f"the sessions of {sess.task_id} keep failing: {sess.outcome}")
            return
        tr.errors = 0
        if not sess.outcome.startswith(("delivered nothing", "crashed")):   # SPEC §17.1 v4: both are empty
            tr.empty = 0
            return
        tr.empty += 1
        if tr.empty >= EMPTY_SESSIONS:
            self.give_lane_up(sess, f"{tr.empty} executor sessions in a row ended without a delivery "
                                    f"(last: exit code {sess.exit_code}; log {sess.log_path})", "deliver nothing")

    def give_lane_up(self, sess: Sess, text: str, failing: str) -> None:
        """`done --give-up` for the lane of sessions that `failing`: a person decides what next."""
        from ..lane.side import give_up

        try:
            give_up(self.sessions.lane_session(sess.lane_path), text[:4000])
        except LanesError as exc:
            raise Stop(f"{sess.task_id}: its sessions {failing} and giving up failed: {exc.message}")
        self.progress.event(f"{sess.task_id}: gave up: {text}")

    def stop_lane(self, sess: Sess, report: dict[str, Any]) -> dict[str, Any]:
        """Give up the lane of sessions that make no progress (the record would have the driver start
        them forever): its child is parked for a person, whom the text tells what happened."""
        tr = self.track_of(sess.task_id)
        self.give_lane_up(sess, f"{tr.idle} executor sessions in a row left the lane asking for the same work "
                                f"again (no new attempt counted, nothing settled; last: {sess.outcome}; log "
                                f"{sess.log_path})", "make no progress")
        tr.idle = 0
        return self.tick(Request(actor="run", only={sess.task_id}), spares=True)

    def wait_all(self) -> bool:
        """Wait for the sessions and the verifier still running when the loop stopped; True when any
        ended (what they delivered goes in before the summary)."""
        any_ended = False
        while (self.sessions.active or self.verifying) and not self.interrupted.is_set():
            for event in self.sessions.wait(lambda: None, lambda: self.progress.draw(force=False)):
                any_ended = True
                if isinstance(event, Landed):
                    if event.report is not None:
                        self.note(event.report)
                    continue
                self.sessions.active.pop(event.task_id, None)
                took = (event.ended or time.monotonic()) - event.started
                self.progress.event(f"{event.task_id}: session {event.n} ended ({took:.1f} s): {event.outcome}")
        return any_ended

    # -- releases and stopping ---------------------------------------------------------------------------

    def release(self, handoff: dict[str, Any]) -> None:
        """Remove the lane a release handoff of the last tick names; the next tick records it."""
        from ..batch.steward import release_handoff

        task = handoff["task_id"]
        if task in self.sessions.active:
            return
        try:
            release_handoff(self.cs, handoff, slug=self.slug)
        except LanesError as exc:
            self.progress.event(f"{task}: lane not released: {exc.message}")
            return
        self.removed = True

    def release_all(self) -> None:
        """On the way out, whatever the batch's state: remove every lane whose child is integrated (and
        clean, on its branch, its commit on the batch branch), recorded `released` in one write."""
        from ..batch.steward import release_gone, release_integrated
        from ..tick import status_report

        self.releases = []
        try:
            self.cs.forget_worktrees()   # the last tick may have moved lane branches after it listed them
            report = status_report(self.cs, self.slug)
            handoffs = [h for h in report.get("handoffs", [])
                        if h.get("action") == "release" and h["task_id"] not in self.sessions.active]
            for item in release_integrated(self.cs, self.slug, handoffs):
                if item.get("failed"):
                    self.progress.event(f"{item['task_id']}: lane not released: {item['reason']}")
                else:
                    self.progress.event(f"{item['task_id']}: lane released")
                    self.prev.setdefault(item["task_id"], {})["state"] = "released"
                self.removed = True
            # lanes removed since the last tick (it would have recorded them): recorded now
            skip = {h["task_id"] for h in handoffs} | set(self.sessions.active)
            for task in release_gone(self.cs, self.slug, report, skip):
                self.progress.event(f"{task}: lane released")
                self.prev.setdefault(task, {})["state"] = "released"
                self.removed = True
        except LanesError as exc:
            self.progress.event(f"could not release the integrated lanes: {exc.message}")

    def on_sigint(self, signum, frame) -> None:
        if not self.ctrl_c.first():
            return
        self.interrupted.set()
        self.sessions.kill(signal.SIGTERM)
        kill_all(signal.SIGTERM)   # the verifier's checks too: the candidate stays recorded for the next tick
