"""`git lanes run <slug> --remote R [start's options] [--interval S]`: the coordinator loop without
local executors (SPEC §14 v3).

    start      as `run` does when no batch is active (never resumes a `needs_human` one)
    push       the record, so executor machines see the provision handoffs
    then, until the batch is terminal or needs a human:
      pull     lane branches and lane records (claims, attempts, heartbeats, releases); a failed
               pull skips the tick; once the remote is back the next tick runs at once, but judges
               no heartbeat until pulls have succeeded for remote_timeout / 3 (SPEC §17.2): heartbeats
               that could not travel never park a lane
      tick     admits claims, observes, corrects (the default correction, through the inbox),
               lane-commits, integrates, parks lanes whose heartbeat stopped; when several lanes
               delivered, each first gets a tick of its own (its candidate), oldest delivery first
      push     record, evidence, batch branch, lane commits, deletions of released lanes' branches
      wait     until --interval seconds after the pull began; max(0.25, interval / 4) for up to 10 s
               after the last change while a candidate or a remote lane is in flight or a pending
               child waits for a claim (SPEC §17.2)
After a terminal state the loop goes on while integrated remote lanes still have a live heartbeat
(their machines release them), so the lanes end released and `audit` finds nothing.
Same progress lines, summary and exit codes as `run` (§13).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ..core.errors import LanesError, usage
from ..core.ids import check_id
from ..core.model import IN_FLIGHT, TERMINAL
from ..decisions.instruction import MAX_TEXT, InstructionRequest
from ..domain.lanehost import batch_timeout, remote_restarts, silence
from ..domain.session import Session
from ..remote.claims import failure_text, sync_push
from ..remote.pacing import pause
from ..remote.replicate import pull, unsent
from ..store import CorruptRecord, run_lock
from ..tick import Request, status_report
from . import RunResult, drop_scratch, ending, log_dir as run_log_dir, summary_facts
from .loop import Driver, Landed, Stop
from .prompts import default_correction, failing_checks


class Coordinator:
    def __init__(self, s: Session, slug: str, remote: str, interval: float, driver: Driver) -> None:
        self.s = s
        self.slug = slug
        self.remote = remote
        self.interval = interval
        self.driver = driver
        self.cs = driver.cs
        self.pulls = 0
        self.pushes = 0
        self.unreachable: str | None = None
        self.pull_failed = False
        self.judge_after = 0.0               # after an outage: no heartbeat judged before the lanes could push
        self.changed_at = time.monotonic()   # the last pull that brought news, or the last write
        self.tick_at = 0.0
        self.lanes: dict[str, str] = {}     # task -> clone id of the remote lane it was admitted with

    @property
    def interrupted(self) -> threading.Event:
        return self.driver.interrupted

    def event(self, text: str) -> None:
        self.driver.progress.event(text)

    def _failed(self, exc: LanesError) -> None:
        text = failure_text(exc)
        if text != self.unreachable:
            self.event(f"{self.remote}: {text}; retrying every {self.interval:g} s")
        self.unreachable = text

    def pull(self) -> bool:
        try:
            doc = pull(self.cs, self.remote)
        except LanesError as exc:
            self._failed(exc)
            self.pull_failed = True
            return False
        self.pulls += 1
        if any(r["status"] == "pulled" for r in doc["refs"]):
            self.changed_at = time.monotonic()
        if self.pull_failed:   # the lanes could not push their heartbeats either: give them time to
            grace = self.timeout() / 3
            self.judge_after = time.monotonic() + grace
            self.changed_at = time.monotonic()
            self.event(f"{self.remote} reachable again; heartbeats are judged again in {grace:.0f} s, once the "
                       "lanes pushed theirs")
            self.pull_failed = False
        elif self.unreachable:
            self.event(f"{self.remote} reachable again")
        self.unreachable = None
        for r in doc["refs"]:
            if r["status"] == "remote_moved" and r["ref"].startswith("refs/notes/lanes/batch/"):
                self.event(f"remote_moved: {r['ref']} diverged on {self.remote}; not overwritten")
        return True

    def timeout(self) -> int:
        snap = self.cs.batches.read(self.slug)
        return batch_timeout(self.cs.git, snap.record if snap is not None else None)

    def push(self) -> bool:
        try:
            if not unsent(self.cs, self.remote):
                return True
            doc = sync_push(self.cs, self.remote, fetched=True)
        except LanesError as exc:
            self._failed(exc)
            return False
        self.pushes += 1
        for r in doc["refs"]:
            if r["status"] == "remote_moved":
                self.event(f"remote_moved: {r['ref']} diverged on {self.remote}; not overwritten")
        return True

    # -- the loop ----------------------------------------------------------------------------------------

    def drive(self) -> None:
        self.push()
        self.seen()
        ended_at: float | None = None
        while not self.interrupted.is_set():
            busy = False
            polled = time.monotonic()
            if self.pull() and (self.changed_at >= self.tick_at or time.monotonic() - self.tick_at >= self.interval):
                self.tick_at = time.monotonic()   # a pull that brought nothing ticks once per --interval only
                record_ref = self.cs.batches.ref(self.slug)
                before = self.cs.git.refs.resolve(record_ref)
                for task in self.delivered():   # each lane that delivered gets its candidate in turn, oldest
                    self.tick({task})           # delivery first (the verifier lands them; one push after all)
                report = self.tick()
                state = report["batch_state"]
                if state == "running":
                    report = self.correct(report)
                busy = self.cs.git.refs.resolve(record_ref) != before   # it wrote: news came, more may have
                if busy:
                    self.changed_at = time.monotonic()
                self.push()
                state = self.driver.report["batch_state"]
                if state == "needs_human" or state in TERMINAL:
                    ended_at = ended_at or time.monotonic()
                    if not self.awaiting_release(ended_at):
                        self.release_silent()
                        return
            if not busy:   # polls start every pause(), however long the round took (SPEC §17.2: "every")
                self.wait(max(0.0, self.pause() - (time.monotonic() - polled)))

    def wait(self, timeout: float) -> None:
        """`timeout` seconds, or until the verifier landed (or parked) a candidate: then a tick and a push
        at once, so the handoffs it unblocks leave now (SPEC §17.2)."""
        import queue

        deadline = time.monotonic() + timeout
        while not self.interrupted.is_set():
            try:
                event = self.driver.sessions.ended.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if isinstance(event, Landed):
                self.driver.landed(event)
                self.push()
                self.changed_at = time.monotonic()
                return

    def seen(self) -> None:
        """What the record says before this run's first tick: every landing after it is printed, also by a
        coordinator that continues a batch (SPEC §17.2)."""
        for c in status_report(self.cs, self.slug)["children"]:
            self.driver.prev.setdefault(c["task_id"], c)
            remote = (c.get("lane") or {}).get("remote")
            if c["state"] == "enrolled" and remote:
                self.lanes[c["task_id"]] = remote["clone_id"]

    def pause(self) -> float:
        """--interval; shorter for 10 s after the last change while a candidate or a remote lane is in
        flight, or a pending child waits for a machine's claim: the other side's answer comes soon
        (SPEC §17.2)."""
        snap = self.cs.batches.read(self.slug)
        rec = snap.record if snap is not None else None
        candidates = getattr(rec, "candidates", None) or getattr(rec, "candidate", None)   # §8.9 v4: a list
        due = rec is not None and (bool(candidates) or any(   # integrated: its machine's release is due
            c.lane is not None and c.lane.remote is not None and c.state in (*IN_FLIGHT, "integrated")
            or c.state == "pending" and rec.batch_state == "running" for c in rec.children))
        return pause(self.interval, self.changed_at, due)

    def delivered(self) -> list[str]:
        """Children whose lane recorded attempts this record has not seen, oldest delivery first."""
        snap = self.cs.batches.read(self.slug)
        found = []
        for c in snap.record.children if snap is not None and snap.record.batch_state == "running" else []:
            if c.state != "enrolled" or c.lane is None:
                continue
            try:
                lrec, _ = self.cs.lanes.read(self.slug, c.task_id)
            except CorruptRecord:
                continue
            if lrec is not None and lrec.run_id == c.lane.run_id and len(lrec.qa_attempts) > c.qa_attempts_seen:
                found.append((lrec.qa_attempts[-1].at, c.task_id))
        return [task for _, task in sorted(found)] if len(found) > 1 else []

    def judging(self) -> bool:
        return time.monotonic() >= self.judge_after

    def tick(self, only: set[str] | None = None) -> dict[str, Any]:
        before = {task: c.get("remote_restarts") or 0 for task, c in self.driver.prev.items()}
        report = self.driver.tick(Request(actor="run", only=only, heartbeats=self.judging()))
        for c in report["children"]:
            if (c.get("remote_restarts") or 0) > before.get(c["task_id"], 0):
                self.lanes.pop(c["task_id"], None)
                self.event(f"{c['task_id']}: lane lost, restarted for another machine "
                           f"(restart {c['remote_restarts']} of {remote_restarts(self.cs.git)})")
            remote = (c.get("lane") or {}).get("remote")
            if c["state"] == "enrolled" and remote and self.lanes.get(c["task_id"]) != remote["clone_id"]:
                self.lanes[c["task_id"]] = remote["clone_id"]
                self.driver.track_of(c["task_id"]).first_start = time.monotonic()
                self.event(f"{c['task_id']}: lane in clone {remote['clone_id']} ({remote['host']})")
        return report

    def correct(self, report: dict[str, Any]) -> dict[str, Any]:
        """The default correction (§13) for every child that needs one; it reaches the lane's inbox."""
        for h in [h for h in report["handoffs"] if h.get("action") == "correct"]:
            task = h["task_id"]
            try:
                lrec, _ = self.cs.lanes.read(self.slug, task)
            except CorruptRecord:
                lrec = None
            text = default_correction(task, failing_checks(lrec))
            req = InstructionRequest(task_id=task, kind="correction", text=text[:MAX_TEXT], session_state="idle")
            report = self.driver.tick(Request(instruction=req, actor="run", heartbeats=self.judging()))
            li = report.get("lane_instruction") or {}
            if not li.get("accepted"):
                raise Stop(f"the correction for {task} was refused: {li.get('reason')}")
            self.event(f"{task}: correction sent ({len(text)} characters)")
        return report

    def release_silent(self) -> None:
        """Before the loop stops (SPEC §17.2): integrated remote lanes whose machines did not release them
        are recorded released here, and the push that follows deletes their branch (the lane commit) on
        the remote; a machine that comes back removes its copy with `release --stale`."""
        from ..core import lifecycle
        from ..gitio import branch_ref

        snap = self.cs.batches.read(self.slug)
        tasks = [c.task_id for c in (snap.record.children if snap is not None else []) if c.state == "integrated"
                 and c.lane is not None and c.lane.remote is not None and c.lane.lane_commit
                 and self.cs.git.refs.resolve(branch_ref(c.lane.branch)) in (None, c.lane.lane_commit)]
        if not tasks:
            return
        with self.cs.transaction(self.slug, "run") as tx:
            for task in tasks:
                lifecycle.release(tx.record.child(task))
            tx.write("released " + ", ".join(tasks) + ": their machines did not")
        for task in tasks:
            self.event(f"{task}: lane released here (its machine did not; 'git lanes release --stale "
                       f"{self.slug}' there removes its copy)")
        self.push()

    def awaiting_release(self, ended_at: float) -> bool:
        """Integrated remote lanes whose machines still beat: they release them soon (bounded by the timeout)."""
        timeout = self.timeout()
        if time.monotonic() - ended_at > timeout:
            return False
        snap = self.cs.batches.read(self.slug)
        for c in snap.record.children if snap else []:
            if c.state != "integrated" or c.lane is None or c.lane.remote is None:
                continue
            try:
                lrec, _ = self.cs.lanes.read(self.slug, c.task_id)
            except CorruptRecord:
                continue
            if lrec is not None and lrec.claim is not None and lrec.released is None \
                    and silence(lrec.claim, self.cs.clock(), timeout) is None:
                return True
        return False


def run_remote(s: Session, slug: str, *, remote: str, opts=None, confirm: Callable[[str], bool] | None = None,
               interval: float = 2.0, as_json: bool = False, out: Callable[[str], None] = print) -> RunResult:
    """Drive the batch of `slug` with executors on other machines; exit codes as `run` (§13)."""
    from ..batch.start import StartOptions

    check_id(slug, "slug")
    if s.git.config_get(f"remote.{remote}.url") is None:
        raise usage(f"--remote: no remote named '{remote}' (add one with 'git remote add')")
    if interval <= 0:
        raise usage("--interval must be more than 0")
    held = run_lock(s.git, slug)   # one driver per slug, local executors or remote ones (SPEC §13)
    try:
        return _run_remote(s, slug, remote, opts or StartOptions(), confirm, interval, as_json, out)
    finally:
        held.release()


def _run_remote(s: Session, slug: str, remote: str, opts, confirm: Callable[[str], bool] | None,
                interval: float, as_json: bool, out: Callable[[str], None]) -> RunResult:
    from ..batch.start import start

    again = f"git lanes run {slug} --remote {remote}"
    try:   # the batch another clone started and pushed is this one's to continue, not to start again
        pull(s, remote)
    except LanesError as exc:
        s.warn(f"{remote}: {exc.message}; going on from this clone's record")
    snap = s.batches.read(slug)
    if snap is None or snap.record.terminal:
        record = start(s, slug, opts, confirm or (lambda text: True))
        how = "started"
    else:
        record, how = snap.record, "continuing"
        if record.batch_state == "needs_human":
            report = status_report(s, slug)
            return RunResult(report, 1, f"batch_needs_human: batch {record.batch_id} needs a human decision "
                                        f"({record.reason}); run never resumes it: inspect 'git lanes status', "
                                        f"then 'git lanes resume {slug}' and run again",
                             summary_facts(s, slug, report, None, run_log_dir(s, record.batch_id), again=again))
    log_dir = run_log_dir(s, record.batch_id)
    # candidates are verified in the driver's verifier thread, as `run` does: claims are admitted and
    # lanes observed meanwhile
    driver = Driver(s, slug, record, [], None, as_json, out, log_dir)
    coord = Coordinator(s, slug, remote, interval, driver)
    url = s.git.config_get(f"remote.{remote}.url")
    driver.progress.event(f"{how} batch {record.batch_id} (max parallel {record.max_parallel}); executors: in a "
                          f"clone of {url}: git lanes work {slug} --executor CMD (CMD: your agent's command)")
    return _finish(coord, log_dir)


def _finish(coord: Coordinator, log_dir: str) -> RunResult:
    import signal

    driver = coord.driver
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, driver.on_sigint) if in_main else None
    try:
        coord.drive()
    except Stop as stop:
        driver.stop_reason = str(stop)
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        if driver.verifier is not None:
            driver.verifier.join()   # a candidate being verified lands (or stays recorded: Ctrl-C) first
    cs, slug = coord.cs, coord.slug
    interrupted = driver.interrupted.is_set()
    final = status_report(cs, slug)
    for c in final["children"]:   # sessions ran elsewhere: their `done`s are the attempts the lanes recorded
        try:
            lrec, _ = cs.lanes.read(slug, c["task_id"])
        except CorruptRecord:
            continue
        if lrec is not None and lrec.claim is not None:
            driver.track_of(c["task_id"]).sessions = len(lrec.qa_attempts)
    coord.event(f"{coord.remote}: {coord.pulls} pull(s), {coord.pushes} push(es)")
    drop_scratch(cs, final, driver.progress.event)
    driver.progress.close()
    again = f"git lanes run {slug} --remote {coord.remote}"
    return ending(final, summary_facts(cs, slug, final, driver, log_dir, again=again), interrupted,
                  driver.stop_reason, again)
