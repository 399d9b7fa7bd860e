"""Spare lanes: made while sessions run, for pending children that will be startable once a slot
frees (blockers integrated, scope overlapping nothing unfinished), then offered in the tick that
frees the slot, so integrating one child and starting the next cost one tick. A spare was never
admitted, so it holds no work: dropping it removes its worktree and branch.
"""

from __future__ import annotations

from typing import Any, Callable

from ..core.errors import LanesError
from ..decisions.schedule import DONE, scopes_overlap
from ..domain.session import Session
from ..domain.workspace import create_lane, remove_lane
from ..gitio import BatchBranch, LaneBranch


class Spares:
    def __init__(self, coordinator: Callable[[], Session], slug: str, batch_id: str, scopes: dict[str, list[str]],
                 limit: int, event: Callable[[str], None]) -> None:
        self.coordinator = coordinator
        self.slug = slug
        self.batch_id = batch_id
        self.scopes = scopes          # the authorized scopes (a revision only narrows one)
        self.limit = limit
        self.event = event
        self.lanes: dict[str, str] = {}     # task -> path
        self.never: set[str] = set()        # tasks that get no spare (provisioning proper deals with them)

    def __contains__(self, task: str) -> bool:
        return task in self.lanes

    def take(self, task: str) -> str | None:
        """The spare lane of `task`, no longer a spare (it is being offered for good)."""
        return self.lanes.pop(task, None)

    def keep(self, task: str, path: str) -> None:
        self.lanes[task] = path

    def next(self, report: dict[str, Any]) -> str | None:
        """The next pending child (plan order) worth a spare lane now, or None."""
        if report.get("batch_state") != "running" or len(self.lanes) >= self.limit:
            return None
        states = {c["task_id"]: c["state"] for c in report["children"]}
        unfinished = [t for t, st in states.items() if st not in DONE]
        for c in report["children"]:
            task = c["task_id"]
            if c["state"] != "pending" or task in self.lanes or task in self.never:
                continue
            if not all(states.get(b) in DONE for b in c["blocked_by"]):
                continue
            mine = self.scopes.get(task)
            if mine is None or any(o != task and scopes_overlap(mine, self.scopes.get(o, [""])) for o in unfinished):
                continue   # its lane must start from the head its overlapping siblings leave
            return task
        return None

    def make(self, task: str) -> None:
        """A spare lane for `task`, under the lane's lock (a `provision` of another process that holds it
        is making that lane: no spare then)."""
        from ..store import lane_lock_try

        s = self.coordinator()
        head = s.git.refs.resolve(BatchBranch(self.slug).ref)
        held = lane_lock_try(s.git, self.slug, task)
        if held is None:
            self.never.add(task)
            return
        try:
            self.lanes[task] = create_lane(s, self.slug, task, head, self.batch_id)
        except LanesError:
            self.never.add(task)
        finally:
            for h in reversed(held):
                h.release()

    def refresh(self, report: dict[str, Any], skip: set[str]) -> None:
        """Fast-forward the spare lane a freed slot goes to next (the first in plan order) to the batch
        head: a lane based on the current head reruns fewer siblings' checks when it integrates."""
        task = next((c["task_id"] for c in report.get("children", [])
                     if c["task_id"] in self.lanes and c["task_id"] not in skip), None)
        if task is None:
            return
        s = self.coordinator()
        head = s.git.refs.resolve(BatchBranch(self.slug).ref)
        wt = s.worktrees().on(LaneBranch(self.slug, task).ref)
        if head is None or (wt is not None and wt.head == head):
            return
        try:
            s.git.work.fast_forward(self.lanes[task], head)
        except LanesError:
            pass   # it stays where it is: still a valid base
        s.forget_worktrees()   # its HEAD moved: the next look sees where to

    def drop(self, task: str) -> None:
        """Remove a spare lane and its branch."""
        path = self.lanes.pop(task, None)
        self.never.add(task)
        if path is None:
            return
        try:
            # never admitted, it holds only copies and setup (whatever they left, e.g. a stamp file)
            remove_lane(self.coordinator(), path, LaneBranch(self.slug, task).name, force=True)
        except LanesError as exc:
            self.event(f"{task}: could not remove the spare lane {path}: {exc.message}")

    def drop_all(self) -> None:
        for task in list(self.lanes):
            self.drop(task)
