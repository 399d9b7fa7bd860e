"""`git lanes run`: the Parent in a box (SPEC §13).

One process drives a batch to its end. It starts the batch (or continues a running one; never a
`needs_human` one), ticks in-process, provisions the lanes the handoffs name with the built-in
steward, runs one executor session per lane and, when the executor exits without `git lanes
done`, runs `done` for it. Each session lives in a thread of its own: the thread builds the
prompt, runs the executor in its own process group (output to a log file), waits for it and runs
`done`, so the main thread only ticks, provisions, corrects and releases. Every decision is in
the records Git holds, so Ctrl-C (which kills the sessions' process groups) leaves a batch that
the next `git lanes run` continues: a lane whose last attempt is missing or failed gets a new
session.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from .checks import child_env, split_command
from .decisions.instruction import MAX_TEXT, InstructionRequest
from .errors import LanesError, usage
from .session import Session, lane_branch

POLL = 0.05            # seconds between looks at the session queue when there is nothing else to do
REDRAW = 0.25          # seconds between redraws of the live progress on a terminal
TERM_GRACE = 2.0       # seconds a session gets between SIGTERM and SIGKILL on Ctrl-C
CORRECTOR_TIMEOUT = 600.0
PROMPT_LIMIT = 100_000  # characters; an environment string must stay well below 128 KiB
EMPTY_SESSIONS = 2     # sessions in a row without a delivery before the driver gives the lane up
STALLS = 3             # rounds in a row with nothing running and nothing startable before giving up
PROVISION_TRIES = 3    # failed provisions of one lane before the driver leaves it to a person
QUIET = 0.3            # seconds without an expected session end that a chore may take


# -- texts: the prompt, the correction ---------------------------------------------------------

def _outcome(result: dict[str, Any]) -> str:
    if result.get("signal"):
        return f"killed by {result['signal']}"
    if result.get("exit_code") is None:
        return "did not run"
    return f"exit code {result['exit_code']}"


def failing_checks(lane_record) -> list[dict[str, Any]]:
    """The failing results of the lane's last attempt when it failed (else [])."""
    if lane_record is None or not lane_record.qa_attempts or lane_record.qa_attempts[-1].passed:
        return []
    last = lane_record.qa_attempts[-1]
    failed = [r.model_dump(mode="json") for r in last.results if not r.passed]
    if last.note:
        failed.append({"id": "delivery", "command": "git lanes done", "exit_code": None, "signal": None,
                       "passed": False, "output_tail": last.note})
    return failed


def failure_text(failed: list[dict[str, Any]]) -> str:
    """The failing checks with their whole output tails (what a corrector reads on stdin)."""
    parts = []
    for r in failed:
        parts.append(f"[{r['id']}] {r['command']} ({_outcome(r)})\n{r['output_tail'].rstrip()}\n")
    return "\n".join(parts)


def build_prompt(info: dict[str, Any], failed: list[dict[str, Any]]) -> str:
    """`GIT_LANES_PROMPT`: goal, scope, acceptance with checks, the last failure, unread texts."""
    lines = [f"Task {info['task_id']} of the initiative {info['slug']} (batch {info['batch_id']}).", "",
             "Goal:", info["goal"].rstrip(), "", "Scope (change only these paths):"]
    lines += [f"  {p}" for p in info["scope"]]
    lines += ["", "Acceptance (every check must pass; they run in this directory):"]
    for a in info["acceptance"]:
        lines += [f"  [{a['id']}] {a['text']}", f"      check: {a['check']}"]
    if failed:
        lines += ["", "The last attempt failed. Failing checks:"]
        for r in failed:
            lines.append(f"  [{r['id']}] {r['command']} ({_outcome(r)})")
            lines += ["    " + line for line in r["output_tail"].rstrip().splitlines()]
    if info.get("unread"):
        lines += ["", "Unread instructions and corrections (oldest first):"]
        for item in info["unread"]:
            lines += [f"--- {item['kind']} ({item['at']}) ---", item["text"].rstrip()]
    lines += ["", "Work in this directory (the lane). When the work is done, run 'git lanes done' or simply "
                  "exit: the driver then runs it for you. If you cannot finish, run "
                  "'git lanes done --give-up -m \"<why>\"'."]
    text = "\n".join(lines) + "\n"
    if len(text) > PROMPT_LIMIT:
        text = text[:PROMPT_LIMIT - 40] + "\n[prompt truncated]\n"
    return text


def _fair_shares(lengths: list[int], budget: int) -> list[int]:
    """Split `budget` over items of `lengths`, evenly, giving what a short item leaves to the others."""
    shares = [0] * len(lengths)
    left = max(0, budget)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for k, i in enumerate(order):
        shares[i] = min(lengths[i], left // (len(order) - k))
        left -= shares[i]
    return shares


def default_correction(task_id: str, failed: list[dict[str, Any]], limit: int = MAX_TEXT) -> str:
    """Names the failing checks and quotes their output tails; at most `limit` characters in all."""
    head = (f"Correction for {task_id}: the QA failure limit was reached. Step back and change the approach; "
            "make the failing checks below pass (without changing the checks themselves).\n")
    if not failed:
        return (head + "No failing check output was recorded.")[:limit]
    heads = []
    for r in failed:
        command = r["command"] if len(r["command"]) <= 200 else r["command"][:197] + "..."
        heads.append(f"\n[{r['id']}] {command} ({_outcome(r)}):\n")
    tails = [r["output_tail"].rstrip() for r in failed]
    budget = limit - len(head) - sum(len(h) + 1 for h in heads)
    shares = _fair_shares([len(t) for t in tails], budget)
    text = head
    for h, tail, share in zip(heads, tails, shares):
        if share < len(tail):
            tail = ("..." + tail[len(tail) - share + 3:]) if share > 3 else ""
        text += h + tail + "\n"
    return text[:limit]


# -- one executor session ------------------------------------------------------------------------

@dataclass
class Sess:
    task_id: str
    n: int
    lane_path: str
    log_path: str
    started: float
    proc: subprocess.Popen | None = None
    reaped: bool = False
    exit_code: int | None = None
    ended: float | None = None
    outcome: str = ""          # what happened once it ended (shown, and used to decide what next)
    delivered: bool = False    # an attempt (or a give-up) exists that this session made or `done` made
    thread: threading.Thread | None = None


@dataclass
class Track:
    """What the driver knows about one child beyond the record."""
    sessions: int = 0          # sessions started in this run
    first_start: float | None = None
    finished: float | None = None
    empty: int = 0             # sessions in a row that delivered nothing
    errors: int = 0
    provision_failures: int = 0
    log_base: int | None = None  # the highest session number in the log folder when the run began


def _wait_exited(proc: subprocess.Popen) -> None:
    """Block until the leader exits, leaving it unreaped (its group id stays reserved)."""
    if hasattr(os, "waitid"):
        while True:
            try:
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                return
            except InterruptedError:
                continue
            except ChildProcessError:
                return
    proc.wait()


def _killpg(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# -- progress ---------------------------------------------------------------------------------------

class Progress:
    """A line per child redrawn in place on a terminal; one plain line per event otherwise."""

    def __init__(self, out: Callable[[str], None], tty: bool, quiet_stdout: bool) -> None:
        self.out = out if not quiet_stdout else (lambda text: print(text, file=sys.stderr, flush=True))
        self.tty = tty and not quiet_stdout
        self.drawn = 0
        self.rows: Callable[[], list[str]] = lambda: []
        self.last_draw = 0.0

    def _erase(self) -> str:
        return f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""

    def event(self, text: str) -> None:
        if not self.tty:
            self.out(text)
            return
        self.out(self._erase() + text)
        self.drawn = 0
        self.draw()

    def draw(self, force: bool = True) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self.last_draw < REDRAW:
            return
        self.last_draw = now
        rows = self.rows()
        height = shutil.get_terminal_size((80, 24)).lines - 2
        if len(rows) > height:
            rows = rows[:max(1, height - 1)] + [f"... {len(rows) - max(1, height - 1)} more"]
        if not rows:
            return
        prefix = self._erase()
        for i, row in enumerate(rows):
            self.out((prefix if i == 0 else "") + row)
        self.drawn = len(rows)

    def close(self) -> None:
        """Leave the last drawing on the screen; what follows goes below it."""
        self.drawn = 0


# -- the driver -------------------------------------------------------------------------------------

class Stop(Exception):
    """The driver cannot go on (the batch stays as it is, resumable)."""


class Driver:
    def __init__(self, s: Session, slug: str, record, argv: list[str],
                 corrector: list[str] | None, as_json: bool, out: Callable[[str], None]) -> None:
        from .steward import repo_id

        self.slug = slug
        self.coordinator = coordinator = record.coordinator
        self.batch_id = batch_id = record.batch_id
        self.argv = argv
        self.corrector = corrector
        self.as_json = as_json
        self.out = out
        self.local_vars = tuple(s.git.local_env_vars)
        from platformdirs import user_log_dir

        self.log_dir = os.path.join(user_log_dir("git-lanes", appauthor=False), repo_id(s), batch_id)
        # the coordinator's session, reused by every tick (a missing coordinator: the tick says so)
        self.cs = Session(cwd=coordinator) if os.path.isdir(coordinator) else s
        self.active: dict[str, Sess] = {}
        # Spare lanes: created while the sessions run, for pending children that will be startable once
        # a slot frees (blockers integrated, scope overlapping nothing unfinished), then offered in the
        # tick that frees the slot, so integrating one child and starting the next cost one tick.
        self.spares: dict[str, str] = {}
        self.no_spare: set[str] = set()
        self.max_spares = min(record.max_parallel, 32)
        try:  # the authorized scopes (a revision only narrows one): what spare lanes must not overlap
            plan = self.cs.plan_at(record.base_head, slug)
            self.scopes = {t.task_id: list(t.intent.scope) for t in plan.tasks}
        except LanesError:
            self.scopes = {}
        self.track: dict[str, Track] = {}
        self.ended: queue.Queue[Sess] = queue.Queue()
        self.lock = threading.RLock()
        self.interrupted = threading.Event()
        self.removed = False                          # lanes removed since the last tick
        self.releases: list[dict[str, Any]] = []      # release handoffs, carried out while waiting
        self.durations: list[float] = []              # of the sessions that ended, shortest first
        self.report: dict[str, Any] = {}
        self.prev: dict[str, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self.started_at = time.monotonic()
        tty = sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
        self.progress = Progress(out, tty, quiet_stdout=as_json)
        self.progress.rows = self._rows

    # -- sessions of the repository ---------------------------------------------------------------

    def coord(self, refresh: bool = False) -> Session:
        """The coordinator's session; `refresh` re-reads the worktree list (every tick does: the user
        may have switched the coordinator's branch, which the tick must notice)."""
        if refresh:
            self.cs.worktrees(refresh=True)
        return self.cs

    def lane_session(self, path: str) -> Session:
        """A session in a lane, blind to GIT_DIR & co. (they would name the coordinator's repository)."""
        keep = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
        env = {k: v for k, v in os.environ.items() if k not in self.local_vars or k.startswith(keep)}
        return Session(cwd=path, environ=env)

    def track_of(self, task_id: str) -> Track:
        return self.track.setdefault(task_id, Track())

    # -- ticks and reports --------------------------------------------------------------------------

    def tick(self, request=None, spares: bool = False) -> dict[str, Any]:
        """One tick; with `spares`, the spare lanes are offered too (admitted when a slot is free)."""
        from .tick import Request, Tick

        request = request or Request(actor="run")
        offered = {}
        if spares and self.spares:
            from .decisions.admission import MAX_OFFERS

            named = {task for task, _ in request.offers}
            room = max(0, MAX_OFFERS - len(request.offers))
            offered = dict([(task, path) for task, path in self.spares.items() if task not in named][:room])
            request.offers = list(request.offers) + list(offered.items())
            self.refresh_spare(named)
        outcome = Tick(self.coord(refresh=True), self.slug, request).run()
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
                    del self.spares[task]
                    self.progress.event(f"{task}: lane {path}")
                elif refusals.get(task) == "batch_lane_unknown_child":
                    quiet.add(task)    # no free slot yet: it stays a spare
                else:
                    self.drop_spare(task)
        self.note(report, quiet)
        return report

    def note(self, report: dict[str, Any], quiet: set[str] = frozenset()) -> None:
        """Events for what changed since the last report."""
        self.report = report
        if report.get("batch_state") == "rejected":
            return
        for c in report["children"]:
            before = self.prev.get(c["task_id"], {})
            state = c["state"]
            if state != before.get("state") and before:
                if state in ("integrated", "released") and before.get("state") not in ("integrated", "released"):
                    self.track_of(c["task_id"]).finished = time.monotonic()
                    self.progress.event(f"{c['task_id']}: integrated {c['commit'][:12]}")
                if state == "released":
                    self.progress.event(f"{c['task_id']}: lane released")
                elif state == "needs_human":
                    self.track_of(c["task_id"]).finished = time.monotonic()
                    self.progress.event(f"{c['task_id']}: parked: {c['reason']}")
                elif state == "skipped_blocked":
                    self.progress.event(f"{c['task_id']}: skipped ({c['reason']})")
            if c.get("qa_failures", 0) > before.get("qa_failures", 0):
                self.progress.event(f"{c['task_id']}: QA failures {c['qa_failures']}")
            if c.get("correction_due") and not before.get("correction_due"):
                self.progress.event(f"{c['task_id']}: correction due ({c['correction_due']})")
            self.prev[c["task_id"]] = c
        for r in report.get("lane_refusals", []):
            if r["task_id"] not in quiet:
                self.progress.event(f"{r['task_id']}: lane refused: {r['reason']}")
        self.progress.draw()

    # -- the loop ---------------------------------------------------------------------------------------

    def drive(self) -> None:
        from .tick import Request

        report = self.tick()
        stalls = 0
        while not self.interrupted.is_set():
            if report["batch_state"] != "running":
                return
            report, acted = self.act(report)
            if report["batch_state"] != "running" or self.interrupted.is_set():
                continue
            if not self.active:  # nothing runs: tick a few times (someone may work a lane), then stop
                stalls += 1
                if stalls >= STALLS:
                    raise Stop(self._stuck_reason(report))
                report = self.tick()
                continue
            stalls = 0
            ended = self.wait()
            if not ended:
                return  # interrupted
            # One tick per ended session, each observing (and integrating) only its lane and offering
            # the spare lanes: a freed slot is filled at once, not after every ended lane integrated.
            for i, sess in enumerate(ended):
                self.after_session(sess)
                report = self.tick(Request(actor="run", only={sess.task_id}), spares=True)
                if i + 1 < len(ended) and report["batch_state"] == "running" and not self.interrupted.is_set():
                    report, _ = self.act(report)

    def _stuck_reason(self, report: dict[str, Any]) -> str:
        reviews = [c["task_id"] for c in report["children"] if c.get("next_obligation") == "review"]
        if reviews:
            return ("waiting for a review verdict on " + ", ".join(reviews) + "; give it with 'git lanes review "
                    "<task> --approve|--reject', then run again")
        failed = [t for t, tr in self.track.items() if tr.provision_failures]
        if failed:
            return "could not provision a lane for " + ", ".join(sorted(failed)) + "; see 'git lanes status'"
        return "nothing is running and nothing can start; see 'git lanes status'"

    def act(self, report: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Corrections, provisions and sessions the report's handoffs call for."""
        acted = False
        for h in [h for h in report["handoffs"] if h.get("action") == "correct"]:
            if h["task_id"] in self.active or self.interrupted.is_set():
                continue
            report = self.correct(h)
            acted = True
        for first in (True, False):
            provisions = [h for h in report["handoffs"] if h.get("action") == "provision"
                          and self.track_of(h["task_id"]).provision_failures < PROVISION_TRIES]
            if first and (self.active or len(provisions) < 2):
                continue
            if provisions and not self.interrupted.is_set():
                # when nothing runs yet, one lane first: its session starts while the others are made
                report = self.provision(provisions[:1] if first else provisions)
                acted = True
            if report["batch_state"] != "running":
                return report, acted
            acted = self.start_sessions(report) or acted
        self.releases = [h for h in report["handoffs"] if h.get("action") == "release"]
        return report, acted

    def start_sessions(self, report: dict[str, Any]) -> bool:
        """A session for every lane whose handoff says implement and that has none running."""
        started = False
        for h in report["handoffs"]:
            if self.interrupted.is_set():
                break
            if h.get("role") == "executor" and h["next_obligation"] == "implement" and h["task_id"] not in self.active:
                self.start_session(h["task_id"], h["lane_path"])
                started = True
        return started

    # -- provisioning ----------------------------------------------------------------------------------

    def provision(self, handoffs: list[dict[str, Any]]) -> dict[str, Any]:
        """Create every lane the handoffs name, then offer them all in one tick."""
        from .decisions.admission import MAX_OFFERS
        from .steward import create_lane
        from .tick import Request

        s = self.coord()
        offers = []
        for h in handoffs[:MAX_OFFERS]:
            task = h["task_id"]
            tr = self.track_of(task)
            if task in self.spares:
                offers.append((task, self.spares.pop(task)))
                continue
            try:
                path = create_lane(s, self.slug, task, h["base_head"], self.batch_id)
            except LanesError as exc:
                path = self._existing_lane(s, task) if exc.code == "batch_lane_branch_exists" else None
                if path is None:
                    tr.provision_failures += 1
                    self.progress.event(f"{task}: cannot provision: {exc.message}")
                    continue
            offers.append((task, path))
        if not offers:
            return self.report
        # only=set(): this tick admits, it observes no lane (the ticks after the sessions do that)
        report = self.tick(Request(offers=offers, only=set(), actor="run"), spares=True)
        enrolled = {c["task_id"] for c in report["children"] if c["state"] != "pending"}
        refusals = {r["task_id"]: r["reason"] for r in report.get("lane_refusals", [])}
        for task, path in offers:
            if task in enrolled:
                self.progress.event(f"{task}: lane {path}")
            elif refusals.get(task) == "batch_lane_unknown_child":
                self.spares[task] = path          # its slot went to another child meanwhile: keep it
            else:                                  # refused: never admitted, so it holds no work
                self.track_of(task).provision_failures += 1
                self.spares[task] = path
                self.drop_spare(task)
                self.no_spare.discard(task)
        return report

    def _existing_lane(self, s: Session, task: str) -> str | None:
        """A lane branch left by an interrupted provision: its worktree (added if missing), to offer."""
        from .steward import default_lane_path

        branch = lane_branch(self.slug, task)
        wt = s.worktree_on(branch)
        if wt is not None:
            return wt.path
        path = default_lane_path(s, self.slug, task)
        if os.path.exists(path) and os.listdir(path):
            return None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s.git.run("worktree", "add", "-q", path, branch)
        return path

    # -- corrections ------------------------------------------------------------------------------------

    def correct(self, handoff: dict[str, Any]) -> dict[str, Any]:
        from .tick import Request

        task = handoff["task_id"]
        ls = self.lane_session(handoff["lane_path"])
        lrec, _ = ls.lanes.read(self.slug, task)
        failed = failing_checks(lrec)
        text = None
        if self.corrector:
            text = self._run_corrector(task, handoff["lane_path"], failed)
        if not text:
            text = default_correction(task, failed)
        req = InstructionRequest(task_id=task, kind="correction", text=text[:MAX_TEXT], session_state="idle")
        report = self.tick(Request(instruction=req, actor="run"))
        li = report.get("lane_instruction") or {}
        if li.get("accepted"):
            self.progress.event(f"{task}: correction sent ({len(text)} characters)")
        else:
            raise Stop(f"the correction for {task} was refused: {li.get('reason')}")
        return report

    def _run_corrector(self, task: str, cwd: str, failed: list[dict[str, Any]]) -> str | None:
        env = child_env(os.environ, self.local_vars, slug=self.slug, batch=self.batch_id, task=task)
        try:
            proc = subprocess.Popen(self.corrector, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self.progress.event(f"{task}: corrector cannot run ({exc}); sending the default correction")
            return None
        try:
            stdout, stderr = proc.communicate(failure_text(failed).encode("utf-8", "replace"),
                                              timeout=CORRECTOR_TIMEOUT)
        except subprocess.TimeoutExpired:
            _killpg(proc, signal.SIGKILL)
            proc.communicate()
            self.progress.event(f"{task}: corrector timed out; sending the default correction")
            return None
        except BaseException:
            _killpg(proc, signal.SIGKILL)
            proc.wait()
            raise
        text = stdout.decode("utf-8", "replace").strip()
        if proc.returncode != 0 or not text:
            why = f"exit code {proc.returncode}" if proc.returncode else "no output"
            last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            self.progress.event(f"{task}: corrector failed ({why}) {last[0]}".rstrip()
                                + "; sending the default correction")
            return None
        return text[:MAX_TEXT]

    # -- sessions ---------------------------------------------------------------------------------------

    def _next_n(self, task: str) -> int:
        tr = self.track_of(task)
        if tr.log_base is None:  # an earlier run's logs stay: number on from them
            try:
                names = os.listdir(self.log_dir)
            except OSError:
                names = []
            prefix = task + "-"
            used = [int(n[len(prefix):-4]) for n in names
                    if n.startswith(prefix) and n.endswith(".log") and n[len(prefix):-4].isdigit()]
            tr.log_base = max(used, default=0)
        return tr.log_base + tr.sessions + 1

    def start_session(self, task: str, lane_path: str) -> None:
        n = self._next_n(task)
        tr = self.track_of(task)
        tr.sessions += 1
        now = time.monotonic()
        if tr.first_start is None:
            tr.first_start = now
        tr.finished = None
        sess = Sess(task, n, lane_path, os.path.join(self.log_dir, f"{task}-{n}.log"), now)
        self.active[task] = sess
        sess.thread = threading.Thread(target=self._session_main, args=(sess,), name=f"lane-{task}", daemon=True)
        sess.thread.start()
        self.progress.event(f"{task}: session {n} started")

    def _session_main(self, sess: Sess) -> None:
        """Thread: prompt, executor, wait, then `done` unless the executor delivered itself."""
        try:
            from .laneside import task_info

            ls = self.lane_session(sess.lane_path)
            info = task_info(ls)
            lrec, _ = ls.lanes.read(self.slug, sess.task_id)
            if lrec is not None and lrec.run_id != info["run_id"]:
                lrec = None
            before = (len(lrec.qa_attempts) if lrec else 0, bool(lrec and lrec.gave_up))
            env = child_env(os.environ, self.local_vars, slug=self.slug, batch=self.batch_id, task=sess.task_id)
            env["GIT_LANES_PROMPT"] = build_prompt(info, failing_checks(lrec))
            os.makedirs(self.log_dir, exist_ok=True)
            with open(sess.log_path, "ab") as log:
                with self.lock:
                    if self.interrupted.is_set():
                        sess.outcome = "interrupted"
                        return
                    try:
                        sess.proc = subprocess.Popen(self.argv, cwd=sess.lane_path, env=env, stdin=subprocess.DEVNULL,
                                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                    except OSError as exc:
                        log.write(f"git-lanes: cannot run the executor: {exc}\n".encode())
                        sess.outcome = f"error: cannot run the executor: {exc.strerror or exc}"
                        return
            _wait_exited(sess.proc)
            with self.lock:
                _killpg(sess.proc, signal.SIGKILL)   # whatever the executor left running in its group
                sess.exit_code = sess.proc.wait()
                sess.reaped = True
            sess.ended = time.monotonic()
            if self.interrupted.is_set():
                sess.outcome = "interrupted"
                return
            ls.worktrees(refresh=True)   # what the executor may have changed
            sess.outcome = self._after_exit(ls, sess, before, bool(info["unread"]))
        except Exception as exc:  # reported by the main thread; the record is untouched or consistent
            sess.outcome = "interrupted" if self.interrupted.is_set() else f"error: {type(exc).__name__}: {exc}"
        finally:
            if sess.ended is None:
                sess.ended = time.monotonic()
            self.ended.put(sess)

    def _after_exit(self, ls: Session, sess: Sess, before: tuple[int, bool], had_unread: bool) -> str:
        from .laneside import done, inbox

        snap = ls.batches.read(self.slug)
        child = snap.record.child(sess.task_id) if snap is not None and snap.record.batch_id == self.batch_id else None
        if child is None or child.state != "enrolled" or child.lane is None:
            return f"ended ({child.state if child else 'gone'})"
        if had_unread:
            inbox(ls, ack=True)   # the session was given them
        lrec, _ = ls.lanes.read(self.slug, sess.task_id)
        if lrec is not None and lrec.run_id == child.lane.run_id:
            if lrec.gave_up is not None and not before[1]:
                sess.delivered = True
                return "gave up"
            if len(lrec.qa_attempts) > before[0]:
                sess.delivered = True
                return "ran done: " + ("passed" if lrec.qa_attempts[-1].passed else "failed")
        if child.correction_due:
            return "waits for a correction"
        try:
            doc = done(ls)
        except LanesError as exc:
            if exc.code == "correction_due":
                return "waits for a correction"
            if exc.code == "nothing_to_deliver":
                return "delivered nothing"
            raise
        sess.delivered = True
        return "done: " + ("passed" if doc["passed"] else "failed")

    def wait(self) -> list[Sess]:
        """Sessions that ended (at least one); releases and redraws while waiting. [] when interrupted."""
        while not self.interrupted.is_set():
            chores = self.quiet()
            spare = self.next_spare() if chores else None
            try:
                first = self.ended.get_nowait() if spare or (chores and self.releases) \
                    else self.ended.get(timeout=POLL)
            except queue.Empty:
                if spare:
                    self.make_spare(spare)
                elif chores and self.releases:
                    self.release(self.releases.pop(0))
                self.progress.draw(force=False)
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
        session so far): chores (spare lanes, releases) then never delay the tick an end calls for."""
        if not self.durations:
            return True
        soonest = min((s.started + self.durations[0] for s in self.active.values()), default=float("inf"))
        return soonest - time.monotonic() > QUIET

    def after_session(self, sess: Sess) -> None:
        from .laneside import give_up

        self.active.pop(sess.task_id, None)
        if sess.ended is not None and sess.outcome != "interrupted":
            self.durations.append(sess.ended - sess.started)
            self.durations.sort()
        tr = self.track_of(sess.task_id)
        took = (sess.ended or time.monotonic()) - sess.started
        code = "" if sess.exit_code is None else f"exit code {sess.exit_code}, "
        self.progress.event(f"{sess.task_id}: session {sess.n} ended ({code}{took:.1f} s): {sess.outcome}")
        if sess.outcome.startswith("error"):
            tr.errors += 1
            if tr.errors >= 2:
                raise Stop(f"the sessions of {sess.task_id} keep failing: {sess.outcome}")
            return
        tr.errors = 0
        if sess.outcome == "delivered nothing":
            tr.empty += 1
            if tr.empty >= EMPTY_SESSIONS:
                text = (f"{tr.empty} executor sessions in a row ended without a delivery "
                        f"(last: exit code {sess.exit_code}; log {sess.log_path})")
                try:
                    give_up(self.lane_session(sess.lane_path), text[:4000])
                except LanesError as exc:
                    raise Stop(f"{sess.task_id}: its sessions deliver nothing and giving up failed: {exc.message}")
                self.progress.event(f"{sess.task_id}: gave up: {text}")
        else:
            tr.empty = 0

    # -- spare lanes ------------------------------------------------------------------------------------

    def next_spare(self) -> str | None:
        """The next pending child (plan order) worth a spare lane now, or None."""
        from .schedule import scopes_overlap

        report = self.report
        if report.get("batch_state") != "running" or len(self.spares) >= self.max_spares:
            return None
        done = ("integrated", "released")
        states = {c["task_id"]: c["state"] for c in report["children"]}
        unfinished = [t for t, st in states.items() if st not in done]
        for c in report["children"]:
            task = c["task_id"]
            if c["state"] != "pending" or task in self.spares or task in self.no_spare:
                continue
            if not all(states.get(b) in done for b in c["blocked_by"]):
                continue
            mine = self.scopes.get(task)
            if mine is None or any(o != task and scopes_overlap(mine, self.scopes.get(o, [""])) for o in unfinished):
                continue   # its lane must start from the head its overlapping siblings leave
            return task
        return None

    def make_spare(self, task: str) -> None:
        from .steward import create_lane

        s = self.coord()
        head = s.git.resolve(f"refs/heads/imm/{self.slug}")
        try:
            path = create_lane(s, self.slug, task, head, self.batch_id)
        except LanesError:
            self.no_spare.add(task)   # provisioning proper will deal with it
            return
        self.spares[task] = path

    def refresh_spare(self, skip: set[str]) -> None:
        """Fast-forward the spare lane a freed slot goes to next (the first in plan order) to the batch
        head: a lane based on the current head reruns fewer siblings' checks when it integrates."""
        task = next((c["task_id"] for c in self.report.get("children", [])
                     if c["task_id"] in self.spares and c["task_id"] not in skip), None)
        if task is None:
            return
        s = self.coord()
        head = s.git.resolve(f"refs/heads/imm/{self.slug}")
        wt = s.worktree_on(lane_branch(self.slug, task))
        if head is None or (wt is not None and wt.head == head):
            return
        try:
            s.git.run("-c", "maintenance.auto=false", "merge", "--ff-only", "-q", head, cwd=self.spares[task])
        except LanesError:
            pass   # it stays where it is: still a valid base

    def drop_spare(self, task: str) -> None:
        """Remove a spare lane (never admitted, so it holds no work) and its branch."""
        path = self.spares.pop(task, None)
        self.no_spare.add(task)
        if path is None:
            return
        s = self.coord()
        branch = lane_branch(self.slug, task)
        try:
            s.git.run("worktree", "remove", path)   # never --force: a lane with changes stays
            tip = s.git.resolve("refs/heads/" + branch)
            if tip is not None:
                s.git.update_ref("refs/heads/" + branch, None, tip, "git-lanes: drop a spare lane")
        except LanesError as exc:
            self.progress.event(f"{task}: could not remove the spare lane {path}: {exc.message}")

    def drop_spares(self) -> None:
        for task in list(self.spares):
            self.drop_spare(task)

    # -- releases -------------------------------------------------------------------------------------

    def release(self, handoff: dict[str, Any]) -> None:
        """Remove the lane a release handoff of the last tick names; the next tick records it."""
        from .steward import remove_lane

        task = handoff["task_id"]
        if task in self.active:
            return
        try:
            remove_lane(self.coord(), handoff)
        except LanesError as exc:
            self.progress.event(f"{task}: lane not released: {exc.message}")
            return
        self.removed = True

    def release_all(self) -> None:
        """Remove every lane the last report says to release, then tick once to record it."""
        handoffs = [h for h in self.report.get("handoffs", []) if h.get("action") == "release"]
        self.releases = []
        for h in handoffs:
            self.release(h)
        if self.removed:
            self.tick()

    # -- stopping ---------------------------------------------------------------------------------------

    def on_sigint(self, signum, frame) -> None:
        if self.interrupted.is_set():
            raise KeyboardInterrupt
        self.interrupted.set()
        self.kill_sessions(signal.SIGTERM)

    def kill_sessions(self, sig: int) -> None:
        with self.lock:
            for sess in list(self.active.values()):
                if sess.proc is not None and not sess.reaped:
                    _killpg(sess.proc, sig)

    def wind_down(self) -> None:
        """After Ctrl-C: SIGTERM went out; SIGKILL what is still running after the grace, then join."""
        self.kill_sessions(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        for sess in list(self.active.values()):
            if sess.thread is not None:
                sess.thread.join(max(0.0, deadline - time.monotonic()))
        self.kill_sessions(signal.SIGKILL)
        for sess in list(self.active.values()):
            if sess.thread is not None:
                sess.thread.join(5.0)

    def wait_all(self) -> bool:
        """Wait for the sessions still running when the loop stopped; True when any ended."""
        any_ended = False
        while self.active and not self.interrupted.is_set():
            for sess in self.wait():
                any_ended = True
                self.active.pop(sess.task_id, None)
                took = (sess.ended or time.monotonic()) - sess.started
                self.progress.event(f"{sess.task_id}: session {sess.n} ended ({took:.1f} s): {sess.outcome}")
        return any_ended

    # -- rendering ----------------------------------------------------------------------------------------

    def _rows(self) -> list[str]:
        children = self.report.get("children", [])
        if not children:
            return []
        width = max(len(c["task_id"]) for c in children)
        rows = []
        now = time.monotonic()
        for c in children:
            task = c["task_id"]
            tr = self.track.get(task)
            state = c["state"]
            if state == "enrolled":
                state = "working" if task in self.active else ("correction due" if c.get("correction_due") else "idle")
            elif state in ("settled", "lane_committed"):
                state = "done"
            elapsed = ""
            if tr and tr.first_start is not None:
                elapsed = f"{(tr.finished or now) - tr.first_start:6.1f}s"
            extra = []
            if c.get("qa_failures"):
                extra.append(f"QA failures {c['qa_failures']}")
            if c.get("corrections"):
                extra.append(f"corrections {c['corrections']}")
            if task in self.active:
                extra.append(f"session {self.active[task].n}")
            if c.get("reason") and c["state"] in ("needs_human", "skipped_blocked"):
                extra.append(c["reason"])
            rows.append(f"  {task:<{width}}  {state:<14} {elapsed:>8}  {'; '.join(extra)}".rstrip())
        return rows

    def summary(self, s: Session, report: dict[str, Any]) -> None:
        out = self.out
        self.progress.close()
        fv = report.get("final_verification")
        verdict = ""
        if fv:
            verdict = "; final verification " + ("passed" if fv["passed"] else "FAILED")
        out(f"batch {report['batch_id']} ({report['slug']}): {report['batch_state']}{verdict}")
        rec = s.batches.read(self.slug)
        reason = rec.record.reason if rec is not None and rec.record.batch_id == report["batch_id"] else None
        reason = reason or report.get("reason")   # the stored reason, not "terminal state already reached"
        if reason:
            out(f"reason: {reason}")
        header = ("task", "state", "sessions", "QA failures", "corrections", "commit")
        rows = [header]
        for c in report["children"]:
            tr = self.track.get(c["task_id"])
            rows.append((c["task_id"], c["state"], str(tr.sessions if tr else 0), str(c.get("qa_failures", 0)),
                         str(c.get("corrections", 0)), (c.get("commit") or "")[:12]))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            out("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        for c in report["children"]:
            if c.get("reason") and c["state"] in ("needs_human", "skipped_blocked"):
                out(f"{c['task_id']}: {c['reason']}")
        base = rec.record.base_head if rec is not None else None
        branch = f"imm/{self.slug}"
        if s.git.resolve("refs/heads/" + branch) is not None:
            rng = [f"{base}..{branch}"] if base else [branch]
            log = s.git.run("log", "--oneline", "--no-decorate", *rng, check=False).stdout.decode("utf-8", "replace")
            out(f"\n$ git log --oneline {branch}" + (f" ^{base[:12]}" if base else ""))
            text = log.rstrip("\n")
            if text:
                out(text)
        out(f"\nexecutor logs: {self.log_dir}")


# -- entry point ---------------------------------------------------------------------------------------

def _passed(report: dict[str, Any]) -> bool:
    fv = report.get("final_verification")
    return report.get("batch_state") == "completed" and bool(fv) and bool(fv.get("passed"))


def run(s: Session, slug: str, *, executor: str, corrector: str | None = None, opts=None,
        confirm: Callable[[str], bool] | None = None, as_json: bool = False,
        out: Callable[[str], None] = print) -> int:
    """Drive the batch of `slug` to its end; 0 only for `completed` with final verification passed."""
    import json

    from .plan import check_id
    from .start import StartOptions, start
    from .status import status

    check_id(slug, "slug")
    argv = split_command(executor)
    corrector_argv = split_command(corrector) if corrector is not None else None
    for option, words in (("--executor", argv), ("--corrector", corrector_argv)):
        # a bare name is looked up on PATH now; a path runs relative to the lane, so it is left to the lane
        if words and os.sep not in words[0] and shutil.which(words[0]) is None:
            raise usage(f"{option}: {words[0]}: command not found")
    opts = opts or StartOptions()

    def err(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    snap = s.batches.read(slug)
    if snap is None or snap.record.terminal:
        record = start(s, slug, opts, confirm or (lambda text: True))
        how = "started"
    else:
        record = snap.record
        how = "continuing"
        if record.batch_state == "needs_human":
            report = status(s, slug)
            driver = Driver(s, slug, record, argv, corrector_argv, as_json, out)
            if as_json:
                out(json.dumps(report, indent=2, ensure_ascii=False))
            else:
                driver.summary(s, report)
            err(f"error: batch_needs_human: batch {record.batch_id} needs a human decision ({record.reason}); "
                f"run never resumes it: inspect 'git lanes status', then 'git lanes resume {slug}' and run again")
            return 1

    if how == "continuing":
        given = {"--max-parallel": (opts.max_parallel, record.max_parallel, 1),
                 "--qa-failure-limit": (opts.qa_failure_limit, record.budget.qa_failure_limit, 2)}
        for option, (value, recorded, default) in given.items():
            if value != default and value != recorded:
                err(f"warning: batch {record.batch_id} runs with {option} {recorded} (fixed when it started); "
                    f"{option} {value} does not apply")
    driver = Driver(s, slug, record, argv, corrector_argv, as_json, out)
    driver.progress.event(f"{how} batch {record.batch_id} (max parallel {record.max_parallel}); "
                          f"executor: {executor}")
    driver.progress.event(f"session logs: {driver.log_dir}/<task>-<n>.log")
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, driver.on_sigint) if in_main else None
    interrupted = False
    try:
        try:
            driver.drive()
        except Stop as stop:
            driver.stop_reason = str(stop)
        except LanesError:
            if not driver.interrupted.is_set():
                raise
        if not driver.interrupted.is_set() and driver.wait_all():
            try:  # what the last sessions delivered goes in before the summary
                driver.tick()
            except Stop as stop:
                driver.stop_reason = driver.stop_reason or str(stop)
        interrupted = driver.interrupted.is_set()
        if interrupted:
            driver.wind_down()
        elif driver.report.get("batch_state") in ("completed", "failed", "budget_stopped", "superseded"):
            driver.release_all()
    except BaseException:
        driver.interrupted.set()
        driver.wind_down()
        raise
    finally:
        try:
            driver.drop_spares()   # never admitted, they hold nothing; a new run makes new ones
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)

    coord = driver.coord(refresh=True)
    # the last tick's report when it is the latest word (a batch that ended); else the stored record's
    final = driver.report if driver.report.get("batch_state") in ("completed", "failed", "budget_stopped",
                                                                   "superseded", "needs_human") \
        and not interrupted and not driver.removed else status(coord, slug)
    if as_json:
        out(json.dumps(final, indent=2, ensure_ascii=False))
    else:
        driver.summary(coord, final)
    if interrupted:
        err(f"error: interrupted; the batch is left as it is: run 'git lanes run {slug} --executor ...' "
            "again to continue")
        return 130
    if driver.stop_reason:
        err(f"error: {driver.stop_reason}")
        return 1
    if final["batch_state"] == "needs_human":
        err(f"error: batch_needs_human: {final.get('reason')}; inspect 'git lanes status {slug}', then "
            f"'git lanes resume {slug}' and run again")
        return 1
    if not _passed(final):
        if final["batch_state"] == "completed":
            err("error: the final verification did not pass")
        else:
            err(f"error: the batch ended {final['batch_state']}: {final.get('reason')}")
        return 1
    return 0
