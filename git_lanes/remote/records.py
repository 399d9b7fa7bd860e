"""What the lane-branch rules of replication consult (SPEC §14): the batch records as this clone and
as the fetched remote hold them, and who writes a lane branch. Read on demand, once per command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import LanesError
from ..domain.clone import clone_id
from ..domain.lanehost import live_claim
from ..domain.session import Session
from ..gitio import BatchBranch, LaneBranch, batch_record_ref, lane_record_ref

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Child


class Records:
    """The batch records (local and as fetched) that the lane-branch rules consult, read on demand."""

    def __init__(self, s: Session, theirs_all: dict[str, str]) -> None:
        self.s = s
        self.theirs_all = theirs_all
        self._cache: dict[tuple[str, bool], "BatchRecord | None"] = {}

    def record(self, slug: str, fetched: bool) -> "BatchRecord | None":
        key = (slug, fetched)
        if key not in self._cache:
            ref = batch_record_ref(slug)
            commit = self.theirs_all.get(ref) if fetched else self.s.git.refs.resolve(ref)
            record = None
            if commit is not None:
                try:
                    snap = self.s.batches.read(slug, commit=commit)
                    record = snap.record if snap else None
                except (LanesError, ValueError):   # an unreadable record decides nothing here
                    record = None
            self._cache[key] = record
        return self._cache[key]

    def children(self, ref: str) -> list["Child"]:
        """The child a lane-branch ref belongs to, in the fetched record then the local one."""
        lane = LaneBranch.of_ref(ref)
        if lane is None:
            return []
        found = []
        for fetched in (True, False):
            rec = self.record(lane.slug, fetched)
            child = rec.child(lane.task) if rec is not None else None
            if child is not None and child.lane is not None and child.lane.branch == lane.name:
                found.append(child)
        return found

    def released(self, ref: str) -> bool:
        """The lane of `ref` is released: so a record says, or this clone released it itself (its own lane
        record says so, for the run a record names) and the coordinator has not recorded it yet."""
        children = self.children(ref)
        if any(c.state == "released" for c in children):
            return True
        lane = LaneBranch.of_ref(ref)
        if lane is None or not children:
            return False
        try:
            lrec, _ = self.s.lanes.read(lane.slug, lane.task)
        except (LanesError, ValueError):
            return False
        return lrec is not None and lrec.released is not None and any(c.lane.run_id == lrec.run_id for c in children)

    def lane_commit_of(self, ref: str) -> str | None:
        return next((c.lane.lane_commit for c in self.children(ref) if c.lane.lane_commit), None)

    def replaced_by_lane_commit(self, ref: str, ours: str, theirs: str) -> bool:
        """The remote holds the recorded lane commit; ours is its base or a recorded executor commit."""
        return any(c.lane.lane_commit == theirs and (ours == c.lane.base_head or ours in c.lane.executor_commits)
                   for c in self.children(ref))

    def keep_reachable(self, ref: str, ours: str) -> bool:
        """The fetched batch record or the fetched lane record of this lane keeps `ours` reachable."""
        lane = LaneBranch.of_ref(ref)
        if lane is None:
            return False
        odb = self.s.git.odb
        for record_ref in (batch_record_ref(lane.slug), lane_record_ref(lane.slug, lane.task)):
            commit = self.theirs_all.get(record_ref)
            if commit is not None and odb.has(commit) and odb.has(ours) and odb.is_ancestor(ours, commit):
                return True
        return False

    def coordinates(self, rec: "BatchRecord") -> bool:
        wt = self.s.worktree_at(rec.coordinator)
        return wt is not None and wt.branch == BatchBranch(rec.slug).ref

    def coordinated(self) -> list["BatchRecord"]:
        """Local records of the batches whose coordinator worktree is in this repository."""
        records = (self.record(slug, False) for slug in self.s.batches.slugs())
        return [rec for rec in records if rec is not None and self.coordinates(rec)]

    def writes(self, ref: str) -> bool:
        """This clone writes the lane branch `ref`: as the coordinator, of a lane that lives here or has
        its lane commit; else as the holder of the lane's live claim, until the lane commit."""
        lane = LaneBranch.of_ref(ref)
        rec = self.record(lane.slug, False) if lane else None
        child = rec.child(lane.task) if rec is not None else None
        if child is None:
            return True   # no record knows it: the plain rules apply
        committed = self.lane_commit_of(ref) is not None
        if self.coordinates(rec):
            return child.lane is not None and (child.lane.path is not None or committed)
        try:
            lrec, _ = self.s.lanes.read(lane.slug, lane.task)
        except (LanesError, ValueError):
            return False
        claim = live_claim(rec, lane.task, lrec)
        return claim is not None and claim.clone_id == clone_id(self.s.git) and not committed

    def wanted_here(self, ref: str) -> bool:
        """Whether pull copies the lane branch `ref` into this clone: the coordinator takes every lane's;
        another clone takes a claimed lane's only when the claim is its own, so no executor keeps a copy
        of another machine's lane that nothing would ever delete. A lane with no claim (one in the
        coordinator's clone) and a branch no lane record knows follow the plain rules."""
        lane = LaneBranch.of_ref(ref)
        if lane is None:
            return True
        holder = self._claim_holder(lane)
        if holder is None or holder == clone_id(self.s.git):
            return True
        return any(rec is not None and self.coordinates(rec)
                   for rec in (self.record(lane.slug, False), self.record(lane.slug, True)))

    def _claim_holder(self, lane: LaneBranch) -> str | None:
        """The clone whose claim the lane's record carries (as fetched, else as here); None without one."""
        for commit in (self.theirs_all.get(lane_record_ref(lane.slug, lane.task)),
                       self.s.lanes.tip(lane.slug, lane.task)):
            if commit is None:
                continue
            try:
                claim = self.s.lanes.data_at(lane.slug, lane.task, commit).get("claim")
            except (LanesError, ValueError, AttributeError):
                continue
            return claim.get("clone_id") if isinstance(claim, dict) else None
        return None

    def replaced_elsewhere(self, ref: str, ours: str) -> bool:
        """A copy of a lane branch that another clone writes now (a restarted lane joined again), its value
        kept reachable by the fetched records: pull replaces it, push never sends it back."""
        return ours != self.lane_commit_of(ref) and not self.writes(ref) and self.keep_reachable(ref, ours)
