"""The state one tick carries from step to step (SPEC §7).

It holds the record transaction (the record is changed in place and written at the points the
steps choose), the worktree list taken after the lock, the batch head and its first-parent
history (read once, extended by our own fast-forwards), and what the report will show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import lifecycle
from ..core.crash import crash_point
from ..core.errors import ExitCode, refused
from ..core.report import Extras, LaneView, build_report
from ..decisions.lineage import expected_head
from ..domain import authority
from ..gitio import BatchBranch
from ..store import CorruptRecord, evidence_lock
from .request import Outcome, Request

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Child, LaneRecord, QaAttempt
    from ..domain.lanehost import Lanes
    from ..domain.session import Session
    from ..store import Transaction
    from ..store.batch import Updates
    from .land import Pending


class TickState:
    def __init__(self, s: "Session", slug: str, req: Request, tx: "Transaction", *, schedule: bool = True) -> None:
        from ..domain.lanehost import Lanes

        self.s = s
        self.git = s.git
        self.slug = slug
        self.req = req
        self.tx = tx
        self.schedule = schedule      # provision handoffs in the report (not for `integrate`)
        self.extras = Extras()
        self.events: list[str] = []
        self.views: dict[str, LaneView] = {}
        self.attempts: dict[str, "QaAttempt"] = {}
        self.lane_records: dict[str, "LaneRecord"] = {}
        self.notes: dict[str, dict[str, Any]] = {}    # evidence notes to write with the next record write
        self.head: str | None = None
        self.reason: str | None = None
        self.continue_start: str | None = None   # how to finish an interrupted `start` (repair.guards)
        self.pendings: list["Pending"] = []     # candidates step 9 recorded (or found unverified), to verify
        self.landings: "list[Pending]" = []      # verified candidates this hold judges (and lands)
        self.landed = False   # an integration is in the record, not written yet (it goes with the next candidate)
        self.lanes: "Lanes" = Lanes(s)
        self._scopes: dict[str, list[str]] | None = None
        self._hist: list[str] | None = None
        self._base_reached: bool | None = None
        self._hist_set: set[str] = set()
        self._coordinator_status: list | None = None

    @property
    def record(self) -> "BatchRecord":
        assert self.tx.record is not None
        return self.tx.record

    @property
    def branch(self) -> BatchBranch:
        return BatchBranch(self.slug)

    # -- effective scopes ---------------------------------------------------

    @property
    def scopes(self) -> dict[str, list[str]]:
        if self._scopes is None:
            rec = self.record
            self._scopes = {c.task_id: list(authority.effective_intent(self.s, rec, c.task_id).scope)
                            for c in rec.children}
        return self._scopes

    def forget_scopes(self) -> None:
        self._scopes = None

    # -- moves of children --------------------------------------------------------------------------

    def park(self, child: "Child", reason: str) -> None:
        """needs_human with `reason`; its pending dependents skipped; the first park is the batch's reason."""
        lifecycle.park(self.record, child, reason)
        self.events.append(f"parked {child.task_id}")
        if self.extras.first_park is None:
            self.extras.first_park = reason

    def attempt_of(self, child: "Child") -> "QaAttempt | None":
        """The attempt a settled child settled on (from its lane record)."""
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

    # -- the coordinator's working tree -----------------------------------------------------------------

    def coordinator_status(self) -> list:
        """`git status` of the coordinator, read once per hold: the repairs before step 2 and the leak
        restore ask the same question (one status is a full scan of a large worktree). A step that
        writes the coordinator's files, index or branch calls `forget_coordinator_status`."""
        if self._coordinator_status is None:
            self._coordinator_status = self.git.work.status(self.record.coordinator)
        return self._coordinator_status

    def forget_coordinator_status(self) -> None:
        self._coordinator_status = None

    # -- the batch branch's history -------------------------------------------------------------------

    def history(self) -> list[str]:
        """First-parent commits from the batch base (exclusive) to the head, oldest first.

        Read once per tick (one `rev-list`) and extended by our own fast-forwards, so the
        per-integration questions ("is X on the branch, after Y?") cost no Git process.
        """
        if self._hist is None:
            tip = self.head or self.git.refs.resolve(self.branch.ref)
            self._hist = self.git.odb.commits(tip, self.record.base_head, first_parent=True) if tip else []
            self._hist_set = set(self._hist)
        return self._hist

    def extend_history(self, commit: str) -> None:
        """`commit` is the head now (our fast-forward); a history first read after it already has it."""
        hist = self.history()
        if commit not in self._hist_set:
            hist.append(commit)
            self._hist_set.add(commit)

    def on_branch(self, commit: str, tip: str | None = None) -> bool:
        """`commit` is an ancestor of (or equal to) the head (or of `tip`)."""
        self.history()
        if tip is None or tip == self.head:
            if commit in self._hist_set:
                return True
            if commit == self.record.base_head:
                return self._from_base()
            tip = self.head
        elif commit == tip:
            return True
        return self.git.odb.has(commit) and self.git.odb.is_ancestor(commit, tip)

    def _from_base(self) -> bool:
        """Whether the head descends from the batch base: the history is `rev-list head ^base`, which
        also lists an unrelated (rewritten) branch whole, so its oldest commit must sit on the base."""
        if self._base_reached is None:
            base, hist, head = self.record.base_head, self._hist or [], self.head
            if not hist or head is None:
                self._base_reached = head == base
            elif base in self.git.odb.commit(hist[0]).parents[:1]:
                self._base_reached = True
            else:   # through a merge's second parent, or not at all
                self._base_reached = self.git.odb.is_ancestor(base, head)
        return self._base_reached

    def since(self, base: str) -> set[str]:
        """Commits of the history after `base` (all of them when `base` is not on it)."""
        hist = self.history()
        return set(hist[hist.index(base) + 1:] if base in self._hist_set else hist)

    def batch_commits(self) -> list[str]:
        """Integration commits in batch-branch order (first-parent history of the head)."""
        rec = self.record
        recorded = {c.commit for c in rec.children if c.commit}
        if not recorded:
            return []
        ordered = [c for c in self.history() if c in recorded]
        return ordered + [c for c in rec.commits() if c not in ordered]

    def expected(self) -> str:
        rec = self.record
        return expected_head(rec.base_head, self.batch_commits(), [(a.from_, a.to) for a in rec.adopted_heads])

    # -- writing and refusing -------------------------------------------------------------------------

    def write(self, also: "Updates | None" = None) -> None:
        """Write the record (and the evidence notes gathered since the last write) if it changed;
        `also` gives more ref updates for the same transaction (asked again on a race, as the notes)."""
        summary = ", ".join(dict.fromkeys(self.events)) or "update"
        notes = self.s.evidence
        more = also or (lambda: [])
        if self.notes:
            with evidence_lock(self.git, warn=self.s.warn):
                self.tx.write(summary, also=lambda: [u for u in [notes.prepare(self.notes)] if u] + more())
        else:
            self.tx.write(summary, also=also)
        self.notes.clear()
        self.events.clear()
        if self.landed:
            self.landed = False
            crash_point("evidence-recorded")

    def reject(self, code: str, detail: str, exit_code: ExitCode = ExitCode.REFUSED) -> Outcome:
        """Report `rejected`: nothing was written."""
        report = build_report(self.record, state="rejected", reason=f"{code}: {detail}", extras=self.extras,
                              action=f"Nothing was written; fix the cause, then: git lanes tick {self.slug}")
        return Outcome(report.to_json(), int(exit_code), refused(code, detail))

    def view(self, task_id: str) -> LaneView:
        return self.views.setdefault(task_id, LaneView())
