"""The reconciler: one tick, the ordered steps of SPEC §7, each a small method.

`git lanes tick`, `integrate`, `instruct`, `revise`, `review`, `provision` and `run` all come
through `Tick`: they differ only in the request they carry and in which steps they enable.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from . import authority, integrate as engine
from .canonical import sha256_digest
from .decisions.admission import MAX_OFFERS, MAX_PATH_BYTES, admission_refusal
from .decisions.instruction import MAX_CORRECTIONS, InstructionRequest, instruction_refusal
from .decisions.lineage import LineageFacts, classify_lineage, expected_head
from .errors import ExitCode, LanesError, refused, usage
from .model import (DONE, IN_FLIGHT, AdoptedHead, BatchRecord, Child, FinalVerification, Intervention, Lane,
                    LaneRecord, QaAttempt)
from .plan import check_id
from .report import Extras, LaneView, build_report, handoffs, startable_now, stop_decision
from .session import Session, lane_branch
from .store import CorruptRecord, Snapshot, slug_lock

FINAL_TIMEOUT = 1800.0


def crash_point(name: str) -> None:
    """Fault injection for crash tests: `GIT_LANES_CRASH_AT=<name>` kills this process here."""
    if os.environ.get("GIT_LANES_CRASH_AT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Request:
    offers: list[tuple[str, str]] = field(default_factory=list)
    instruction: InstructionRequest | None = None
    review: tuple[str, str, str | None] | None = None     # (task, approve|reject, text)
    revision: Any = None                                    # revise.RevisionRequest
    max_parallel: int | None = None
    integrate_only: bool = False                            # `git lanes integrate`
    only: set[str] | None = None                            # integrate these children only
    actor: str = "tick"

    @property
    def has_requests(self) -> bool:
        return bool(self.offers or self.instruction or self.review or self.revision)


@dataclass
class Outcome:
    report: dict[str, Any]
    exit_code: int = 0
    error: LanesError | None = None


def parse_offers(raw: list[str], cwd: str) -> list[tuple[str, str]]:
    """`TASK=PATH` strings (untrusted): exit 2 on any malformed one, nothing written."""
    if len(raw) > MAX_OFFERS:
        raise usage(f"invalid lane_offers: at most {MAX_OFFERS} offers per call")
    seen: set[str] = set()
    offers = []
    for item in raw:
        task, sep, path = item.partition("=")
        if not sep or not task or not path:
            raise usage(f"invalid lane_offers: {item!r} is not TASK=PATH")
        try:
            check_id(task, "task id")
        except LanesError as exc:
            raise usage(f"invalid lane_offers: {exc.detail}") from None
        if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            raise usage(f"invalid lane_offers: path of {task} is longer than {MAX_PATH_BYTES} bytes")
        if task in seen:
            raise usage(f"invalid lane_offers: {task} offered twice")
        seen.add(task)
        offers.append((task, os.path.join(cwd, path)))
    return offers


def obligation_after_pass(s: Session, rec: BatchRecord, task_id: str, attempt: QaAttempt) -> str:
    """The obligation after a passed attempt: `settled`, `review` (no verdict on it yet) or
    `implement` (a review rejected it, or a revision approved since asks for a new `done`)."""
    rev = authority.last_revision(rec, task_id)
    if rev is not None and attempt.at < rev.at:
        return "implement"
    if not authority.effective_intent(s, rec, task_id).review:
        return "settled"
    verdicts = [r for r in rec.reviews if r.task_id == task_id and r.tree == attempt.tree and r.at >= attempt.at]
    if not verdicts:
        return "review"
    return "settled" if verdicts[-1].verdict == "approve" else "implement"


class Tick:
    def __init__(self, s: Session, slug: str, req: Request, *, tracker_factory: Callable | None = None) -> None:
        self.s = s
        self.git = s.git
        self.slug = slug
        self.req = req
        self.extras = Extras()
        self.events: list[str] = []
        self.views: dict[str, LaneView] = {}
        self.attempts: dict[str, QaAttempt] = {}
        self.snap: Snapshot | None = None
        self.record: BatchRecord | None = None
        self.head: str | None = None
        self.reason: str | None = None
        self._scopes: dict[str, list[str]] | None = None
        self._scratch: engine.Scratch | None = None
        self.tracker_factory = tracker_factory
        self._lane_records: dict[str, LaneRecord] = {}
        self._notes: dict[str, dict[str, Any]] = {}   # evidence notes to write with the next record write
        self._hist: list[str] | None = None
        self._hist_set: set[str] = set()
        from .lanehost import LocalLanes

        self.lanes = LocalLanes(s)

    # -- entry point ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        with slug_lock(self.git, self.slug, warn=self.s.warn):
            outcome = self._locked()
        closes = self._tracker_closes(outcome)
        if closes:
            outcome = closes
        return outcome

    def report_only(self) -> dict[str, Any]:
        """The report of the stored record with read-only observations (`git lanes status`)."""
        snap = self.s.batches.read(self.slug)
        if snap is None:
            raise usage(f"no batch for {self.slug}")
        self.snap = snap
        self.record = snap.record.model_copy(deep=True)
        return self._finish(write=False).report

    def _locked(self) -> Outcome:
        snap = self.s.batches.read(self.slug)
        if snap is None:
            raise usage(f"no batch for {self.slug} (start one with 'git lanes start {self.slug}')")
        self.snap = snap
        self.record = rec = snap.record.model_copy(deep=True)
        if self.req.has_requests and rec.terminal:
            raise usage(f"no active batch for {self.slug} (the latest is {rec.batch_state})")
        if rec.terminal:
            return self._terminal()
        guard = self._guards()
        if guard:
            return guard
        if rec.batch_state == "needs_human":
            return self._finish(write=False)
        self._ensure_branch()
        if self._authorize():
            return self._finish()
        self._restore_leaks()
        self._adopt_crashed()
        self._record_releases()
        if not self._lineage():
            return self._finish()
        self._requests()
        self._observe()
        self._lane_commits()
        self._integrate()
        if not self.req.integrate_only:
            self._admit()
        self._complete()
        self._stop()
        return self._finish()

    # -- guards ---------------------------------------------------------------------------------

    def _reject(self, code: str, detail: str, exit_code: ExitCode = ExitCode.REFUSED) -> Outcome:
        rec = self.record
        assert rec is not None
        report = build_report(rec, state="rejected", reason=f"{code}: {detail}", extras=self.extras,
                              action="Nothing was written; fix the cause and tick again.")
        return Outcome(report.to_json(), int(exit_code), refused(code, detail))

    def _guards(self) -> Outcome | None:
        rec = self.record
        assert rec is not None
        if self.req.max_parallel is not None and self.req.max_parallel != rec.max_parallel:
            return self._reject("batch_parallel_mismatch",
                                f"the batch runs with --max-parallel {rec.max_parallel}, not {self.req.max_parallel}")
        wt = self.s.worktree_at(rec.coordinator)
        if wt is None or not os.path.isdir(rec.coordinator):
            return self._reject("batch_coordinator_off_branch", f"the coordinator worktree {rec.coordinator} is missing")
        if wt.branch != "refs/heads/" + rec.branch:
            on = wt.branch[len("refs/heads/"):] if wt.branch else "a detached HEAD"
            return self._reject("batch_coordinator_off_branch",
                                f"the coordinator {rec.coordinator} is on {on}, not {rec.branch}; "
                                f"switch back with 'git switch {rec.branch}'")
        if rec.batch_state == "needs_human" and self.req.has_requests:
            return self._reject("batch_needs_human", f"the batch needs a human decision ({rec.reason}); "
                                                     "resume it with 'git lanes resume'")
        return None

    def _ensure_branch(self) -> None:
        rec = self.record
        ref = "refs/heads/" + rec.branch
        if self.git.resolve(ref) is None:  # a crash between the record and the branch
            self.git.update_ref(ref, rec.base_head, None, f"git-lanes: create {rec.branch}")
        self.head = self.git.rev_parse("HEAD", cwd=rec.coordinator)

    # -- helpers --------------------------------------------------------------------------------

    @property
    def scopes(self) -> dict[str, list[str]]:
        if self._scopes is None:
            rec = self.record
            self._scopes = {c.task_id: list(authority.effective_intent(self.s, rec, c.task_id).scope)
                            for c in rec.children}
        return self._scopes

    def scratch(self) -> engine.Scratch:
        if self._scratch is None:
            self._scratch = engine.Scratch(self.s, self.record)
        return self._scratch

    def park(self, child: Child, reason: str) -> None:
        """needs_human with `reason`; pending dependents (transitively) skipped."""
        child.state = "needs_human"
        child.reason = reason
        child.correction_due = None
        self.events.append(f"parked {child.task_id}")
        if self.extras.first_park is None:
            self.extras.first_park = reason
        self._skip_dependents(child.task_id)

    def _skip_dependents(self, task_id: str) -> None:
        rec = self.record
        parked = {task_id}
        changed = True
        while changed:
            changed = False
            for c in rec.children:
                if c.state == "pending" and parked.intersection(c.blocked_by):
                    dep = next(d for d in c.blocked_by if d in parked)
                    c.state = "skipped_blocked"
                    c.reason = f"dependency {dep} parked"
                    parked.add(c.task_id)
                    changed = True

    def _history(self) -> list[str]:
        """First-parent commits from the batch base (exclusive) to the head, oldest first.

        Read once per tick (one `rev-list`) and extended by our own fast-forwards, so the
        per-integration questions ("is X on the branch, after Y?") cost no Git process.
        """
        if self._hist is None:
            tip = self.head or self.git.resolve("refs/heads/" + self.record.branch)
            out = self.git.out("rev-list", "--first-parent", "--reverse", tip, f"^{self.record.base_head}") if tip else ""
            self._hist = [c for c in out.split("\n") if c]
            self._hist_set = set(self._hist)
        return self._hist

    def _on_branch(self, commit: str, tip: str | None = None) -> bool:
        """`commit` is an ancestor of (or equal to) the head (or of `tip`)."""
        self._history()
        if tip is None or tip == self.head:
            if commit == self.record.base_head or commit in self._hist_set:
                return True
            tip = self.head
        elif commit == tip:
            return True
        return self.git.has_object(commit) and self.git.is_ancestor(commit, tip)

    def _batch_commits(self) -> list[str]:
        """Integration commits in batch-branch order (first-parent history of the head)."""
        rec = self.record
        recorded = {c.commit for c in rec.children if c.commit}
        if not recorded:
            return []
        ordered = [c for c in self._history() if c in recorded]
        missing = [c for c in rec.commits() if c not in ordered]
        return ordered + missing

    # -- C.1 authorization --------------------------------------------------------------------

    def _authorize(self) -> bool:
        rec = self.record
        what = authority.plan_mismatch(self.s, rec, self.head)
        if what is None:
            return False
        self._stop_batch("needs_human", f"plan_changed: {what}", "plan changed")
        return True

    def _stop_batch(self, state: str, reason: str, event: str) -> None:
        """Park every in-flight child with `reason`, then stop the batch (one write, by the caller)."""
        for c in self.record.children:
            if c.state in IN_FLIGHT:
                self.park(c, reason)
        self.record.batch_state = state
        self.record.reason = self.reason = reason
        self.events.append(event)

    # -- C.2 leak restore -------------------------------------------------------------------------

    def _restore_leaks(self) -> None:
        from .leaks import restore_leaks

        try:
            restore = restore_leaks(self.s, self.record, self.s.clock())
        except LanesError as exc:  # working_tree_unstaged: nothing touched; `--json` prints the rejection
            if exc.exit_code == ExitCode.REFUSED and exc.code and exc.report is None:
                exc.report = self._reject(exc.code, exc.detail).report
            raise
        if restore is not None:
            self.record.restores.append(restore)
            self.events.append(f"restored {len(restore.paths)} leaked path(s)")

    # -- C.3 crash adoption ------------------------------------------------------------------------

    def _expected(self) -> str:
        rec = self.record
        return expected_head(rec.base_head, self._batch_commits(),
                             [(a.from_, a.to) for a in rec.adopted_heads])

    def _adopt_crashed(self) -> None:
        rec = self.record
        expected = self._expected()
        if self.head == expected or not self._on_branch(expected):
            return
        for claim in engine.claims_between(self.git, rec.batch_id, expected, self.head):
            child = rec.child(claim.task_id)
            if child is None or child.state != "lane_committed" or not child.lane or not child.lane.lane_commit:
                continue
            subject = self.git.out("log", "-1", "--format=%s", claim.commit)
            parent = self.git.out("rev-parse", f"{claim.commit}^")
            if not subject.startswith(f"imm({child.task_id}):"):
                continue
            if engine.change_identity(self.git, parent, claim.commit) != \
                    engine.change_identity(self.git, child.lane.base_head, child.lane.lane_commit):
                continue
            self._mark_integrated(child, claim.commit, rerun=[])
            self.events.append(f"adopted {child.task_id}")

    def _mark_integrated(self, child: Child, commit: str, rerun) -> None:
        rec = self.record
        child.state = "integrated"
        child.commit = commit
        child.reason = None
        attempt = self._attempt_of(child)
        ident = rec.intent_identities.get(child.task_id)
        # written with the record, in the same ref transaction
        self._notes[commit] = engine.evidence_note(rec, child, attempt, rerun, ident.model_dump() if ident else None)
        self._reseal(child.task_id, commit)

    def _attempt_of(self, child: Child) -> QaAttempt | None:
        if child.task_id in self.attempts:
            return self.attempts[child.task_id]
        if child.lane is None or child.lane.attempt is None:
            return None
        try:
            lrec, _ = self.s.lanes.read(self.slug, child.task_id)
        except CorruptRecord:
            return None
        if lrec is None or lrec.run_id != child.lane.run_id or child.lane.attempt >= len(lrec.qa_attempts):
            return None
        self.attempts[child.task_id] = lrec.qa_attempts[child.lane.attempt]
        return self.attempts[child.task_id]

    def _reseal(self, task_id: str, commit: str) -> None:
        from .revise import reseal

        if reseal(self.s, self.record, task_id, commit, self.s.clock()):
            self.events.append(f"resealed {task_id}")

    # -- C.4 releases ------------------------------------------------------------------------------

    def _record_releases(self) -> None:
        for c in self.record.children:
            if c.state == "integrated" and c.lane and not self.lanes.presence(c.lane.path).exists:
                c.state = "released"
                self.events.append(f"released {c.task_id}")

    # -- C.5 lineage --------------------------------------------------------------------------------

    def _lineage(self) -> bool:
        rec = self.record
        expected = self._expected()
        head = self.head
        descends = head == expected or self._on_branch(expected)
        recorded = [c.commit for c in rec.children if c.commit]
        unreachable = tuple(c for c in recorded if not self._on_branch(c))
        claims: tuple[str, ...] = ()
        if descends and head != expected:
            known = set(recorded)
            claims = tuple(cl.commit for cl in engine.claims_between(self.git, rec.batch_id, expected, head)
                           if cl.commit not in known)
        verdict, what = classify_lineage(LineageFacts(expected, head, descends, unreachable, claims))
        if verdict == "broken":
            self._stop_batch("failed", f"batch_head_lineage_broken: {what}", "lineage broken")
            return False
        if verdict == "adopt":
            rec.adopted_heads.append(AdoptedHead(**{"from": expected, "to": head}))
            self.events.append(f"adopted head {head[:12]}")
        return True

    # -- C.6 requests -----------------------------------------------------------------------------

    def _requests(self) -> None:
        if self.req.instruction is not None:
            self._instruct(self.req.instruction)
        if self.req.revision is not None:
            from .revise import apply_revision

            self.extras.lane_revision = apply_revision(self.s, self.record, self.req.revision, self.s.clock())
            if self.extras.lane_revision.get("accepted"):
                self._scopes = None
                self.events.append(f"revision of {self.req.revision.task_id}")
        if self.req.review is not None:
            self._review(*self.req.review)

    def _instruct(self, req: InstructionRequest) -> None:
        rec = self.record
        child = rec.child(req.task_id)
        refusal = instruction_refusal(child.state if child else None, bool(child and child.lane),
                                      bool(child and child.correction_due), req)
        info = {"task_id": req.task_id, "kind": req.kind}
        if refusal is not None:
            self.extras.lane_instruction = {**info, "accepted": False,
                                            "reason": f"batch_lane_instruction_refused: {refusal}"}
            return
        rec.interventions.append(Intervention(at=self.s.clock(), task_id=req.task_id, kind=req.kind,
                                              text=req.text, text_digest=sha256_digest(req.text)))
        if req.kind == "correction":
            child.correction_due = None
            child.corrections += 1
            child.qa_failures = 0
        self.extras.lane_instruction = {**info, "accepted": True, "reason": None}
        self.events.append(f"{req.kind} for {req.task_id}")

    def _review(self, task_id: str, verdict: str, text: str | None) -> None:
        from .model import Review

        rec = self.record
        child = rec.child(task_id)
        view = self._view(child) if child and child.state == "enrolled" else None
        if child is None or view is None or view.next_obligation != "review":
            detail = f"{task_id} has no open review"
            report = build_report(rec, state="rejected", reason=f"batch_review_not_open: {detail}",
                                  extras=self.extras, action="Nothing was written; review a lane whose "
                                                             "next obligation is review.")
            raise refused("batch_review_not_open", detail, report=report.to_json())
        attempt = self.attempts.get(task_id)
        rec.reviews.append(Review(at=self.s.clock(), task_id=task_id, verdict=verdict, text=text,
                                  tree=attempt.tree if attempt else None))
        if verdict == "reject":
            body = text or "The review rejected this delivery; rework it."
            rec.interventions.append(Intervention(at=self.s.clock(), task_id=task_id, kind="review",
                                                  text=body, text_digest=sha256_digest(body)))
        self.events.append(f"review {verdict} {task_id}")

    # -- C.7 observe ---------------------------------------------------------------------------------

    def _view(self, child: Child) -> LaneView | None:
        """Read the lane's record; None (after parking the child) when the lane cannot be observed."""
        lane = child.lane
        assert lane is not None
        where = self.lanes.presence(lane.path)
        if not where.exists or where.branch != "refs/heads/" + lane.branch:
            self.park(child, "batch_lane_lost")
            return None
        try:
            lrec, _ = self.s.lanes.read(self.slug, child.task_id)
        except CorruptRecord as exc:
            reason = f"batch_lane_contract_mismatch: {exc.detail}" if "contract error" in exc.detail else "batch_lane_lost"
            self.park(child, reason)
            return None
        view = LaneView(next_obligation="implement", clean_on_branch=False)
        if lrec is None:
            self.views[child.task_id] = view
            return view
        if lrec.run_id != lane.run_id:
            if self._earlier_run(child, lrec):  # this run has not written its record yet
                self.views[child.task_id] = view
                return view
            self.park(child, "batch_lane_run_mismatch")
            return None
        view.record_revision = lrec.record_revision
        self._lane_records[child.task_id] = lrec
        if lrec.qa_attempts and lrec.qa_attempts[-1].passed:
            last = lrec.qa_attempts[-1]
            self.attempts[child.task_id] = last
            view.next_obligation = self._after_pass(child, last)
        self.views[child.task_id] = view
        return view

    def _earlier_run(self, child: Child, lrec: LaneRecord) -> bool:
        """A lane record left by another batch, or by a run of this child that `resume --restart` ended."""
        rec = self.record
        return lrec.batch_id != rec.batch_id or any(
            a.task_id == child.task_id and a.run_id == lrec.run_id for a in rec.archived_lanes)

    def _after_pass(self, child: Child, attempt: QaAttempt) -> str:
        return obligation_after_pass(self.s, self.record, child.task_id, attempt)

    def _observe(self) -> None:
        rec = self.record
        limit = rec.budget.qa_failure_limit
        for child in rec.children:
            if child.state != "enrolled" or (self.req.only is not None and child.task_id not in self.req.only):
                continue
            view = self._view(child)
            if view is None:
                continue
            lrec = self._lane_records.get(child.task_id)
            if lrec is None:
                continue
            if lrec.gave_up is not None:
                self.park(child, f"batch_lane_stopped: {lrec.gave_up.text}")
                continue
            new = lrec.qa_attempts[child.qa_attempts_seen:]
            failed = sum(1 for a in new if not a.passed)
            child.qa_attempts_seen = len(lrec.qa_attempts)
            if failed:
                child.qa_failures += failed
                self.events.append(f"{failed} QA failure(s) of {child.task_id}")
            if child.qa_failures >= limit and not child.correction_due and not (new and new[-1].passed):
                if child.corrections < MAX_CORRECTIONS:
                    child.correction_due = "QA failure limit reached"
                    self.events.append(f"correction due for {child.task_id}")
                else:
                    self.park(child, "batch_correction_limit_reached: QA failure limit reached after "
                                     f"{child.corrections} coordinator corrections")
                continue
            if view.next_obligation == "review":
                if self.reason is None:
                    self.reason = f"review reservation {child.task_id} open"
                continue
            if view.next_obligation == "settled":
                attempt = lrec.qa_attempts[-1]
                if self.lanes.delivery_tree(child.lane.path) != attempt.tree:
                    view.next_obligation = "implement"
                    continue
                child.state = "settled"
                child.settled_at = attempt.at
                child.lane.attempt = len(lrec.qa_attempts) - 1
                self.events.append(f"settled {child.task_id}")

    # -- C.8 lane commits -------------------------------------------------------------------------

    def _lane_commits(self) -> None:
        rec = self.record
        built = []
        for child in rec.children:
            if child.state == "lane_committed":
                built.append(child)  # a crash may have left the branch move undone
            if child.state != "settled" or (self.req.only is not None and child.task_id not in self.req.only):
                continue
            attempt = self._attempt_of(child)
            if attempt is None or not attempt.passed:
                self.park(child, "batch_lane_lost")
                continue
            intent = authority.effective_intent(self.s, rec, child.task_id)
            outside = engine.paths_outside_scope(self.git, child.lane.base_head, attempt.tree, list(intent.scope))
            own = rec.intent_identities.get(child.task_id)
            if own and own.intent_path in outside and authority.last_revision(rec, child.task_id) is not None:
                rev = authority.revision_intent(rec, child.task_id)
                blob = self._blob_at(attempt.tree, own.intent_path)
                if rev is not None and blob is not None and blob == authority.last_revision(rec, child.task_id).intent_text.encode():
                    outside.remove(own.intent_path)
            if outside:
                self.park(child, "dirty_outside_scope: " + ", ".join(outside))
                continue
            tip = self.git.resolve("refs/heads/" + child.lane.branch) or child.lane.base_head
            commit, executor = engine.build_lane_commit(self.s, rec, child, attempt, intent.goal, tip)
            child.lane.lane_commit = commit
            child.lane.executor_commits = executor
            child.state = "lane_committed"
            self.events.append(f"lane commit {child.task_id}")
            built.append(child)
        if built:
            self._write()  # the record first: then moving the lane branch can never lose a commit
            crash_point("lane-commit-recorded")
            for child in built:
                engine.move_lane_branch(self.s, child)

    def _blob_at(self, tree: str, path: str) -> bytes | None:
        from dulwich.object_store import tree_lookup_path

        store = self.git.repo.object_store
        try:
            _mode, sha = tree_lookup_path(store.__getitem__, tree.encode(), path.encode())
            return store[sha].data
        except KeyError:
            return None

    # -- C.9 integrate -------------------------------------------------------------------------------

    def _integrate(self) -> None:
        rec = self.record
        queue = [c for c in rec.children if c.state == "lane_committed"
                 and (self.req.only is None or c.task_id in self.req.only)]
        order = {c.task_id: i for i, c in enumerate(rec.children)}
        queue.sort(key=lambda c: (c.settled_at or "", order[c.task_id]))
        for child in queue:
            try:
                self._integrate_one(child)
            except engine.Park as park:
                self.park(child, park.reason)
                self._write()

    def _integrate_one(self, child: Child) -> None:
        rec = self.record
        git = self.git
        lane = child.lane
        head = self.head  # fast_forward re-checks the coordinator's HEAD right before it moves
        expected = self._expected()
        if head != expected:
            raise engine.Park(f"batch_head_lineage_broken: the coordinator is at {head}, expected {expected}")
        parents = [p.decode() for p in git.repo.object_store[lane.lane_commit.encode()].parents]
        if parents != [lane.base_head]:
            raise engine.Park(f"batch_head_lineage_broken: lane commit {lane.lane_commit} is not a single commit "
                              f"on the lane base {lane.base_head}")
        if not self._on_branch(lane.base_head):
            raise engine.Park(f"batch_head_lineage_broken: lane base {lane.base_head} is not on the batch branch")
        candidate = engine.build_candidate(git, head, lane.lane_commit, lane.base_head)
        engine.check_identity(git, lane.base_head, lane.lane_commit, head, candidate)
        what = authority.plan_mismatch(self.s, rec, candidate)
        if what is not None:
            raise engine.Park(f"plan_changed: {what}")
        intents = [(child.task_id, authority.effective_intent(self.s, rec, child.task_id))]
        history = self._history()
        since_base = set(history[history.index(lane.base_head) + 1:] if lane.base_head in self._hist_set else history)
        for sib in rec.children:
            if sib.commit in since_base and sib.task_id != child.task_id:
                intents.append((sib.task_id, authority.effective_intent(self.s, rec, sib.task_id)))
        results = self.scratch().run(candidate, engine.rerun_items(intents))
        failed = [r.id for r in results if not r.passed]
        if failed:
            raise engine.Park(f"batch_integration_check_failed: {', '.join(failed)} failed on candidate {candidate}")
        engine.fast_forward(git, rec.coordinator, rec.branch, head, candidate)
        crash_point("fast-forwarded")
        self.head = candidate
        self._history().append(candidate)
        self._hist_set.add(candidate)
        self._mark_integrated(child, candidate, results)
        self.events.append(f"integrated {child.task_id}")
        self._write()

    # -- C.11 admit ------------------------------------------------------------------------------------

    def _admit(self) -> None:
        rec = self.record
        for task_id, path in self.req.offers:
            child = rec.child(task_id)
            if child is None or child.state != "pending" or task_id not in startable_now(rec, self.scopes):
                self._refuse_offer(task_id, path, "batch_lane_unknown_child")
                continue
            blockers = [rec.child(b).commit for b in child.blocked_by]

            def base_ok(lane_head: str) -> bool:
                if not self._on_branch(lane_head):
                    return False
                return all(b and self._on_branch(b, lane_head) for b in blockers)

            def occupied(real: str) -> str | None:
                for other in rec.children:
                    if other.lane and other.state != "released" and os.path.realpath(other.lane.path) == real:
                        return other.task_id
                return None

            facts = self.lanes.facts(path, coordinator=rec.coordinator, expected_branch=lane_branch(self.slug, task_id),
                                     base_ok=base_ok, occupied=occupied)
            reason = admission_refusal(facts, lane_branch(self.slug, task_id))
            if reason:
                self._refuse_offer(task_id, facts.real_path, reason)
                continue
            child.state = "enrolled"
            child.reason = None
            child.qa_failures = 0
            child.qa_attempts_seen = 0
            child.lane = Lane(path=facts.real_path, branch=lane_branch(self.slug, task_id), base_head=facts.head,
                              run_id=uuid.uuid4().hex[:16])
            self.views[task_id] = LaneView(next_obligation="implement")
            self.events.append(f"enrolled {task_id}")

    def _refuse_offer(self, task_id: str, path: str, reason: str) -> None:
        self.extras.lane_refusals.append({"task_id": task_id, "path": os.path.realpath(path), "reason": reason})

    # -- C.12 complete ----------------------------------------------------------------------------------

    def _complete(self) -> None:
        rec = self.record
        if rec.batch_state != "running" or not all(c.state in DONE for c in rec.children):
            return
        fv = self.final_verification(self.head)
        rec.final_verification = fv
        rec.batch_state = "completed"
        if fv.passed:
            rec.reason = "all enrollable children integrated"
        else:
            failing = [r.command for r in fv.results if not r.passed]
            rec.reason = ("all enrollable children integrated; final verification did not pass: "
                          + ", ".join(failing))
        self.reason = rec.reason
        self.events.append("completed")

    def final_verification(self, head: str) -> FinalVerification:
        from .verify import final_checks_on

        return final_checks_on(self.s, self.record, head, self.scratch())

    # -- C.14 stop --------------------------------------------------------------------------------------

    def _stop(self) -> None:
        rec = self.record
        if rec.batch_state != "running":
            return
        decision = stop_decision(rec, self.scopes, self.extras.first_park)
        if decision is not None:
            rec.batch_state, rec.reason = decision
            self.reason = rec.reason
            self.events.append(f"stopped {rec.batch_state}")

    # -- A. terminal ----------------------------------------------------------------------------------

    def _terminal(self) -> Outcome:
        self._record_releases()
        self.reason = f"terminal state already reached: {self.record.batch_state}"
        return self._finish()

    # -- write and report -------------------------------------------------------------------------------

    def _write(self) -> None:
        rec = self.record
        rec.updated_at = self.s.clock()
        summary = ", ".join(dict.fromkeys(self.events)) or "update"
        notes = self.s.evidence
        self.snap = self.s.batches.write(self.snap, rec, summary=summary, actor=self.req.actor,
                                         also=lambda: [u for u in [notes.prepare(self._notes)] if u])
        self._notes.clear()
        self.events.clear()

    def _finish(self, write: bool = True) -> Outcome:
        rec = self.record
        if write:
            self._write()
        for c in rec.children:
            if c.state == "enrolled" and c.task_id not in self.views and c.lane:
                self._passive_view(c)
            if c.state == "integrated" and c.lane:
                v = self.views.setdefault(c.task_id, LaneView())
                where = self.lanes.presence(c.lane.path)
                v.clean_on_branch = where.exists and where.branch == "refs/heads/" + c.lane.branch and \
                    self.lanes.clean(c.lane.path, c.lane.lane_commit if where.head == c.lane.lane_commit else None)
        commits = self._batch_commits()
        head = self.git.resolve("refs/heads/" + rec.branch)
        hand = handoffs(rec, self.views, self.scopes if rec.batch_state == "running" else {}, head, set(commits),
                        schedule=not self.req.integrate_only)
        reason = self.reason if self.reason is not None else rec.reason
        report = build_report(rec, reason=reason, hand=hand, views=self.views, extras=self.extras, commits=commits)
        refusal = self.extras.lane_instruction or {}
        rev = self.extras.lane_revision or {}
        if refusal.get("accepted") is False:
            code, _, detail = refusal["reason"].partition(": ")
            return Outcome(report.to_json(), 1, refused(code, detail))
        if rev.get("accepted") is False:
            code, _, detail = rev["reason"].partition(": ")
            return Outcome(report.to_json(), 1, refused(code, detail))
        return Outcome(report.to_json(), 0)

    def _passive_view(self, child: Child) -> None:
        """next_obligation for a report that did not observe the lane (read-only)."""
        try:
            lrec, _ = self.s.lanes.read(self.slug, child.task_id)
        except CorruptRecord:
            return
        view = LaneView(next_obligation="implement")
        if lrec is not None and lrec.run_id == child.lane.run_id:
            view.record_revision = lrec.record_revision
            if lrec.qa_attempts and lrec.qa_attempts[-1].passed:
                view.next_obligation = self._after_pass(child, lrec.qa_attempts[-1])
        self.views[child.task_id] = view

    # -- C.10 tracker (outside the lock) --------------------------------------------------------------

    def _tracker_closes(self, outcome: Outcome) -> Outcome | None:
        rec = self.record
        if rec is None or not rec.tracker_github:
            return None
        todo = []
        for c in rec.children:
            if c.state in DONE and not c.tracker_closed:
                intent = authority.effective_intent(self.s, rec, c.task_id)
                if intent.issue:
                    todo.append((c.task_id, intent.issue))
        if not todo:
            return None
        from .tracker.github import from_env

        api = self.git.config_get("lanes.githubApiUrl", "https://api.github.com")
        tracker = self.tracker_factory() if self.tracker_factory else from_env(api)
        observations = []
        closed = []
        for task_id, number in todo:
            result = tracker.close_issue(rec.tracker_github, number, rec.batch_id, task_id)
            observations.append({"task_id": task_id, "status": result.status, "message": result.message})
            if result.status in ("updated", "already_current"):
                closed.append(task_id)
        if closed:
            with slug_lock(self.git, self.slug, warn=self.s.warn):
                snap = self.s.batches.read(self.slug)
                if snap is not None and snap.record.batch_id == rec.batch_id:
                    new = snap.record.model_copy(deep=True)
                    for task_id in closed:
                        child = new.child(task_id)
                        if child is not None and child.state in DONE:
                            child.tracker_closed = True
                    new.updated_at = self.s.clock()
                    self.snap = self.s.batches.write(snap, new, summary=f"{self.req.actor}: tracker closed "
                                                     + ", ".join(closed), actor=self.req.actor)
                    self.record = self.snap.record
        report = dict(outcome.report)
        report["tracker_observations"] = observations
        for child in report.get("children", []):
            if child["task_id"] in closed:
                child["tracker_closed"] = True
        return Outcome(report, outcome.exit_code, outcome.error)
