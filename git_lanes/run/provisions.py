"""Provisioning for `git lanes run` (SPEC §6, §13 v3): lanes made for the provision handoffs, all at once
(each in a thread: N setups cost about one), and offered in one tick; the old lane of a restarted child released first (its work kept), a never-admitted lane left by an
interrupted run replaced by a fresh one (so `lanes.copy` and `lanes.setupCommand` always run); a setup that
fails three times in a row for one child stops the run with its text. And the scratch worktree made ready
while the first lanes work (SPEC §8.3 v3).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..core.errors import LanesError, refused
from ..decisions.admission import MAX_OFFERS
from ..domain.session import Session
from ..domain.workspace import create_lane
from ..gitio import BatchBranch, LaneBranch, branch_ref
from ..tick import Request

if TYPE_CHECKING:
    from .progress import Progress
    from .spares import Spares

PROVISION_TRIES = 3    # failed provisions of one lane in a row before the driver leaves it to a person


class Stop(Exception):
    """The driver cannot go on (the batch stays as it is, resumable)."""


class Provisioning:
    """The provisioning part of the driver (`Driver` mixes it in)."""

    slug: str
    batch_id: str
    branch: str
    coordinator: str
    cs: Session
    report: dict[str, Any]
    spares: "Spares"
    progress: "Progress"
    interrupted: threading.Event
    verifier: threading.Thread | None
    verifier_session: Session | None
    preparer: threading.Thread | None
    verify_inline: bool

    def prepare_scratch(self) -> None:
        """Once, when the first session starts and nothing is verified yet: a scratch worktree made ready
        at the batch head in a thread (`scratch.prepare`), so the first candidate does not wait for a
        new worktree's checkout and setup. The verifier waits for it; a failure is only a cache miss."""
        if self.preparer is not None or self.verifier is not None or self.verify_inline:
            return

        def work() -> None:
            from ..domain import scratch

            try:
                vs = self.verifier_session = Session(cwd=self.coordinator)
                head = vs.git.refs.resolve(branch_ref(self.branch))
                if head is not None and not self.interrupted.is_set():
                    scratch.prepare(vs, head, slug=self.slug, batch_id=self.batch_id, coordinator=self.coordinator)
            except Exception:   # noqa: BLE001 - the verification makes the worktree it needs
                pass
        self.preparer = threading.Thread(target=work, name="scratch", daemon=True)
        self.preparer.start()

    def finish_preparing(self) -> None:
        """Wait for the scratch worktree being made ready (its setup was killed on Ctrl-C): nothing this
        run started outlives it."""
        if self.preparer is not None:
            self.preparer.join()

    def provision(self, handoffs: list[dict[str, Any]]) -> dict[str, Any]:
        """Create every lane the handoffs name (at once, `_create_all`), then offer them all in one tick."""
        s = self.cs
        offers, wanted = [], []
        for h in handoffs[:MAX_OFFERS]:
            task = h["task_id"]
            spare = self.spares.take(task)
            if spare is not None:
                offers.append((task, spare))
            else:
                wanted.append((task, h["base_head"]))
        offers += self._create_all(s, wanted)
        if not offers:
            return self.report
        # only=set(): this tick admits, it observes no lane (the ticks after the sessions do that)
        report = self.tick(Request(offers=offers, only=set(), actor="run"), spares=True)
        enrolled = {c["task_id"] for c in report["children"] if c["state"] != "pending"}
        refusals = {r["task_id"]: r["reason"] for r in report.get("lane_refusals", [])}
        for task, path in offers:
            if task in enrolled:
                self.track_of(task).provision_failures = 0
                self.progress.event(f"{task}: lane {path}")
            elif refusals.get(task) == "batch_lane_unknown_child":
                self.spares.keep(task, path)      # its slot went to another child meanwhile: keep it
            else:                                  # refused: never admitted, so it holds no work
                why = refusals.get(task, "not admitted")
                if why == "batch_lane_dirty":
                    from ..batch.steward import setup_leftovers

                    why += ": " + setup_leftovers(s, path)
                self.progress.event(f"{task}: lane {path} refused: {why}")
                self.track_of(task).provision_failures += 1
                self.spares.keep(task, path)
                self.spares.drop(task)
                self.spares.never.discard(task)
        return report

    def _create_all(self, s: Session, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Fresh lanes for `wanted` [(task, base)], made at once: each in a thread with a session of its
        own (worktree, `lanes.copy`, `lanes.setupCommand`: the slow part), so N lanes cost about one
        setup's time. Each is made as `provision` makes one (crash safe on its own) and goes through the
        tick's admission after; what each did is reported here, in plan order. A lane that cannot be made
        is counted; the third setup failure in a row of one child stops the run, the lanes made beside
        it left as spares (removed on the way out)."""
        results: list[tuple[str | None, list[str], LanesError | None] | BaseException | None] = [None] * len(wanted)

        def work(i: int, task: str, base: str, session: Session) -> None:
            try:
                results[i] = self._create(session, task, base)
            except BaseException as exc:   # noqa: BLE001 - raised again by the main thread
                results[i] = exc
        if len(wanted) == 1:
            work(0, *wanted[0], s)
        elif wanted:
            threads = [threading.Thread(target=work, args=(i, task, base, Session(cwd=self.coordinator)),
                                        name=f"provision {task}", daemon=True)
                       for i, (task, base) in enumerate(wanted) if not self.interrupted.is_set()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            s.forget_worktrees()   # the threads added worktrees this session has not seen
        made: list[tuple[str, str]] = []
        stop: Stop | None = None
        for (task, _), result in zip(wanted, results):
            if isinstance(result, BaseException):
                raise result
            if result is None:
                continue   # interrupted before it started
            path, events, exc = result
            for line in events:
                self.progress.event(line)
            if path is not None:
                made.append((task, path))
                continue
            if exc is None:
                continue
            tr = self.track_of(task)
            tr.provision_failures += 1
            self.progress.event(f"{task}: cannot provision: {exc.message}")
            if exc.code == "batch_lane_setup_failed" and tr.provision_failures >= PROVISION_TRIES and stop is None:
                stop = Stop(f"{exc.message} (lanes.setupCommand failed {tr.provision_failures} times in a row in "
                            f"a new lane of {task}; {task} stays pending: fix the setup and run again)")
        if stop is not None:
            for task, path in made:
                self.spares.keep(task, path)
            raise stop
        return made

    def _create(self, s: Session, task: str, base: str) -> tuple[str | None, list[str], LanesError | None]:
        """A fresh lane for `task` (the old lane of a restarted child released first, without loss), under
        the lane's lock (a `provision` of another process holds it while it makes the same lane): (its
        path or None, the events to report, why it could not be made). Thread safe: it reports nothing
        itself and changes nothing of the driver's."""
        from ..batch.steward import release_restarted
        from ..store import lane_lock_try

        events: list[str] = []
        held = lane_lock_try(s.git, self.slug, task)
        if held is None:
            return None, events, refused("batch_busy", f"another git-lanes command holds the lock of the lane of "
                                                       f"{task} (a provision of {task} is under way)")
        try:
            for attempt in (1, 2):
                try:
                    return create_lane(s, self.slug, task, base, self.batch_id, coordinator=s.git.toplevel), \
                        events, None
                except LanesError as exc:
                    if exc.code != "batch_lane_branch_exists" or attempt == 2:
                        return None, events, exc
                    try:
                        old = release_restarted(s, self.slug, task) or self._drop_unused_lane(s, task)
                    except LanesError as again:
                        return None, events, again
                    if old is None:
                        return None, events, exc
                    kept = f"; its uncommitted work is kept in {old['snapshot'][:12]}" if old.get("snapshot") else ""
                    events.append(f"{task}: removed the old lane {old['path'] or old['branch']}{kept}")
            return None, events, None
        finally:
            for h in reversed(held):
                h.release()

    def _drop_unused_lane(self, s: Session, task: str) -> dict[str, Any] | None:
        """A lane branch left by a provision that was never admitted (an interrupted run): when it holds no
        work (its tip on the batch branch, its worktree clean) it goes, so the lane is made afresh (copy,
        setup); else None (a person decides)."""
        from ..domain.lanehost import LocalLanes
        from ..domain.workspace import remove_lane

        branch = LaneBranch(self.slug, task)
        tip = s.git.refs.resolve(branch.ref)
        head = s.git.refs.resolve(BatchBranch(self.slug).ref)
        if tip is None or head is None or not s.git.odb.is_ancestor(tip, head):
            return None
        wt = s.worktrees(refresh=True).on(branch.ref)
        if wt is not None and os.path.isdir(wt.path) and not LocalLanes(s).clean(wt.path):
            return None
        remove_lane(s, wt.path if wt is not None else "", branch.name)
        return {"path": wt.path if wt is not None else "", "branch": branch.name}
