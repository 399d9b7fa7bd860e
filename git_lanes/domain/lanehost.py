"""Where a lane lives: the one seam between the coordinator and a lane.

A lane is either a linked worktree of this repository (`LocalLanes`, observed through the
worktree list the command took after its lock) or a lane in another clone (`RemoteLanes`,
SPEC §14), observed from refs alone: its branch and its lane record as the last pull brought
them. `Lanes` chooses the host of each lane by `lane.remote`, so the tick asks every lane the
same questions and never branches on where a lane lives:

    presence(lane)       does it exist, on which branch, at which commit; `lost` when a remote
                         lane's heartbeat stopped (SPEC §14)
    clean(lane, head)    may it be released: a clean worktree here; for a remote lane, its
                         branch is the lane commit (the executor's clone checks its worktree)
    delivers(lane, tree) whether it still delivers `tree`: the worktree here (asked of the index
                         its `done` left, else snapshotted); for a remote lane, its last attempt
                         (the lane record is all the coordinator sees)
    offers(...)          the `--offer`s a command carries, plus the claims pulled lane records make
    facts(offer, ...)    §6.1's admission facts, from the worktree or from refs
    lane(offer, ...)     the `lane` an admitted offer is recorded with
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..core.clock import parse_time
from ..core.errors import LanesError
from ..core.ids import has_control
from ..decisions.admission import LaneFacts
from ..decisions.claims import claim_is_live
from ..gitio import LaneBranch, branch_ref, quote_path
from ..store import CorruptRecord
from .clone import clone_id
from .session import Session

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Claim, Lane, LaneRecord
    from ..gitio import Git

_CLEAN: set[tuple[str, str]] = set()   # (lane path, HEAD) this process saw clean
REMOTE_TIMEOUT = 600   # seconds without a heartbeat before a remote lane counts as lost (lanes.remoteTimeout)
REMOTE_RESTARTS = 2    # restarts of a child whose remote lane was lost before it parks (lanes.remoteRestarts)


def seen_clean(path: str, head: str) -> None:
    """The lane at `path` is clean on `head` as far as this process knows (its index, just found to
    hold every file of it, holds `head`'s tree): `LocalLanes.clean` need not scan it again."""
    _CLEAN.add((path, head))


@dataclass(frozen=True)
class Presence:
    exists: bool          # a worktree of this repository lives at the path; for a remote lane, its branch
    branch: str | None    # full ref its HEAD is on
    head: str | None
    lost: str | None = None   # why a lane counts as lost although its refs (or its worktree) are there


def remote_timeout(git: "Git") -> int:
    return max(1, git.config_int("lanes.remoteTimeout", REMOTE_TIMEOUT))


def batch_timeout(git: "Git", record: "BatchRecord | None") -> int:
    """The heartbeat timeout of a batch: recorded at its start (SPEC §17.2), else lanes.remoteTimeout here."""
    recorded = record.remote_timeout if record is not None else None
    return recorded or remote_timeout(git)


def remote_restarts(git: "Git") -> int:
    """lanes.remoteRestarts: how often a tick restarts a child whose remote lane was lost (SPEC §17.2)."""
    return max(0, git.config_int("lanes.remoteRestarts", REMOTE_RESTARTS))


def silence(claim: "Claim", now: str, timeout: int) -> str | None:
    """`no heartbeat from <clone_id> since <at>` when the last heartbeat (else the claim) is older
    than `timeout` seconds at `now`; a heartbeat in the future counts as now."""
    last = claim.heartbeat_at or claim.at
    age = (parse_time(now) - parse_time(last)) / _dt.timedelta(seconds=1)
    return f"no heartbeat from {claim.clone_id} since {last}" if age > timeout else None


def live_claim(record: "BatchRecord", task_id: str, lrec: "LaneRecord | None") -> "Claim | None":
    """The claim of this batch's current run in a lane record, if it holds one."""
    if lrec is None or lrec.claim is None:
        return None
    archived = {a.run_id for a in record.archived_lanes if a.task_id == task_id}
    live = claim_is_live(record.batch_id, archived, lrec.batch_id, lrec.run_id, lrec.released is not None)
    return lrec.claim if live else None


# -- offers ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Offer:
    """A lane offered to a tick: a worktree path (`--offer`) or a claim pulled from another clone.
    A claim is a standing offer: while its child cannot start, it waits instead of being refused."""
    task_id: str
    path: str | None = None
    claim: "Claim | None" = None

    @property
    def standing(self) -> bool:
        return self.claim is not None

    def where(self) -> dict[str, Any]:
        if self.claim is None:
            return {"path": quote_path(os.path.realpath(self.path or ""))}
        return {"path": None, "remote": {"clone_id": self.claim.clone_id, "host": self.claim.host}}


# -- lanes that are worktrees of this repository -------------------------------------------------------------

def _recordable(path: str) -> bool:
    """A name git-lanes can record and Git can answer about line by line: UTF-8, no C0 or DEL character
    (with a newline in it every lane command would fail for ever; `provision --path` refuses one too)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not has_control(path)


class LocalLanes:
    """Lanes that are linked worktrees of this repository (asked by path)."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.git = session.git

    def presence(self, path: str) -> Presence:
        wt = self.s.worktree_at(path) if path else None
        if wt is None or not os.path.isdir(path):
            return Presence(False, None, None)
        # a `.git` file pointed elsewhere: Git there would act on (and run the filters of) another repository
        return Presence(True, wt.branch, wt.head, self.git.foreign(path))

    def clean(self, path: str, head: str | None = None) -> bool:
        """`git status` shows nothing. With `head`, a clean answer is remembered for (path, head) in
        this process: `run` asks every tick about lanes it has not released yet. A stale answer
        is harmless: removing a lane (`git worktree remove`, never forced) refuses a dirty one."""
        from .snapshot import worktree_clean

        key = (path, head)
        if head is not None and key in _CLEAN:
            return True
        try:
            clean = worktree_clean(self.git, path)
        except LanesError:   # Git's failure, or no folder left to start it in
            if os.path.lexists(os.path.join(path, ".git")):
                raise
            return False   # removed meanwhile (a release racing a reader): nothing there to call clean
        if clean and head is not None:
            _CLEAN.add(key)
        return clean

    def half_removed(self, path: str) -> bool:
        from .snapshot import half_removed

        return bool(path) and half_removed(self.git, path)

    def delivers(self, path: str, tree: str) -> bool:
        """Whether the worktree still delivers `tree`: asked of the index its `done` left for that tree
        (one `git add -A --dry-run`), else snapshotted again; either way the index of `tree` stays
        beside the lane's own, to become its index with the lane commit (`install_index`)."""
        from .snapshot import still_delivers

        return still_delivers(self.git, path, tree, keep=True)

    def facts(self, path: str, *, coordinator: str, expected_branch: str, base_ok: Callable[[str], bool],
              occupied: Callable[[str], str | None]) -> LaneFacts:
        """Gather the admission facts of §6.1 from Git alone, stopping at the first failure."""
        real = os.path.realpath(path)
        if not _recordable(real):
            # a name that is not UTF-8, or holds a control character, is never a lane of ours
            return LaneFacts(real, False, False, None, None, False, True, None)
        wt = self.s.worktree_at(real) if os.path.isdir(real) else None
        is_root = wt is not None and os.path.realpath(wt.path) == real and not wt.bare
        if not is_root:
            return LaneFacts(real, False, False, None, None, False, True, None)
        if real == os.path.realpath(coordinator):
            return LaneFacts(real, True, True, None, None, False, True, None)
        facts = LaneFacts(real, True, False, wt.branch, wt.head, False, True, None)
        if wt.branch != branch_ref(expected_branch) or wt.head is None or not base_ok(wt.head):
            return facts
        dirty = bool(self.git.status(cwd=real))
        return LaneFacts(real, True, False, wt.branch, wt.head, True, dirty, occupied(real))


# -- lanes in other clones ------------------------------------------------------------------------------------

class RemoteLanes:
    """Lanes in other clones (SPEC §14), seen from the refs the last pull brought: the lane branch
    and the lane record (its claim, heartbeats and release)."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.git = session.git

    def _record(self, lane: Lane) -> "LaneRecord | None":
        """This run's lane record (None: unreadable, absent, or another run's; observation says which)."""
        name = LaneBranch.of_ref(branch_ref(lane.branch))
        if name is None:
            return None
        try:
            lrec, _ = self.s.lanes.read(name.slug, name.task)
        except CorruptRecord:
            return None
        return lrec if lrec is not None and lrec.run_id == lane.run_id else None

    def presence(self, lane: Lane, timeout: int | None = None) -> Presence:
        """`timeout`: the batch's (`batch_timeout`); 0 judges no heartbeat (just after an outage)."""
        ref = branch_ref(lane.branch)
        lrec = self._record(lane)
        tip = self.git.refs.resolve(ref)
        if tip is None or (lrec is not None and lrec.released is not None):
            return Presence(False, None, None)
        lost = None
        if lrec is not None and lrec.claim is not None and timeout != 0:
            lost = silence(lrec.claim, self.s.clock(), timeout or remote_timeout(self.git))
        return Presence(True, ref, tip, lost)

    def clean(self, lane: Lane, head: str | None = None) -> bool:
        """Releasable from here: the lane branch is the lane commit (the lane's clone checks the rest)."""
        return lane.lane_commit is not None and self.git.refs.resolve(branch_ref(lane.branch)) == lane.lane_commit

    def delivers(self, lane: Lane, tree: str) -> bool:
        lrec = self._record(lane)
        return lrec is not None and bool(lrec.qa_attempts) and lrec.qa_attempts[-1].tree == tree

    def claims(self, slug: str, record: "BatchRecord", skip: set[str]) -> list[Offer]:
        """A claim in the lane record of each pending child (this batch, a run not ended)."""
        found = []
        for child in record.children:
            if child.state != "pending" or child.task_id in skip:
                continue
            try:
                lrec, _ = self.s.lanes.read(slug, child.task_id)
            except CorruptRecord:
                continue
            claim = live_claim(record, child.task_id, lrec)
            if claim is not None and claim.run_id == lrec.run_id:
                found.append(Offer(child.task_id, claim=claim))
        return found

    def facts(self, claim: "Claim", record: "BatchRecord", expected_branch: str,
              base_ok: Callable[[str], bool]) -> LaneFacts:
        """§6.1's rules on refs: the lane branch exists (else foreign), the claim is not this clone's
        own (the coordinator's), its tip is a valid base, no other lane has that clone and branch."""
        ref = branch_ref(expected_branch)
        tip = self.git.refs.resolve(ref)
        if tip is None:
            return LaneFacts("", False, False, None, None, False, False, None)
        if claim.clone_id == clone_id(self.git):
            return LaneFacts("", True, True, ref, tip, False, False, None)
        occupied = next((o.task_id for o in record.children if o.lane and o.state != "released" and o.lane.remote
                         and o.lane.remote.clone_id == claim.clone_id and o.lane.branch == expected_branch), None)
        return LaneFacts("", True, False, ref, tip, base_ok(tip), False, occupied)


# -- the seam the tick asks -----------------------------------------------------------------------------------

class Lanes:
    """Every lane of a batch, each asked through the host it lives in (chosen by `lane.remote`)."""

    def __init__(self, session: Session) -> None:
        self.local = LocalLanes(session)
        self.remote = RemoteLanes(session)

    def presence(self, lane: Lane, timeout: int | None = None) -> Presence:
        return self.remote.presence(lane, timeout) if lane.remote else self.local.presence(lane.path or "")

    def clean(self, lane: Lane, head: str | None = None) -> bool:
        return self.remote.clean(lane, head) if lane.remote else self.local.clean(lane.path or "", head)

    def half_removed(self, lane: Lane) -> bool:
        """A removal of this lane killed half-way (a lane of another clone is removed there)."""
        return not lane.remote and self.local.half_removed(lane.path or "")

    def delivers(self, lane: Lane, tree: str) -> bool:
        return self.remote.delivers(lane, tree) if lane.remote else self.local.delivers(lane.path or "", tree)

    def offers(self, requested: list[tuple[str, str]], slug: str, record: "BatchRecord") -> list[Offer]:
        """The command's `--offer`s, then the claims of pending children that no `--offer` names."""
        offers = [Offer(task_id, path=path) for task_id, path in requested]
        return offers + self.remote.claims(slug, record, {task_id for task_id, _ in requested})

    def facts(self, offer: Offer, record: "BatchRecord", expected_branch: str,
              base_ok: Callable[[str], bool]) -> LaneFacts:
        if offer.claim is not None:
            return self.remote.facts(offer.claim, record, expected_branch, base_ok)

        def occupied(real: str) -> str | None:
            return next((o.task_id for o in record.children if o.lane and o.state != "released"
                         and o.lane.path and os.path.realpath(o.lane.path) == real), None)

        return self.local.facts(offer.path or "", coordinator=record.coordinator, expected_branch=expected_branch,
                                base_ok=base_ok, occupied=occupied)

    def lane(self, offer: Offer, facts: LaneFacts, branch: str) -> "Lane":
        """The lane an admitted offer is recorded with (a claim's run_id becomes the lane's)."""
        from ..core.model import Lane, RemoteLocator

        if offer.claim is not None:
            return Lane(path=None, remote=RemoteLocator(clone_id=offer.claim.clone_id, host=offer.claim.host),
                        branch=branch, base_head=facts.head, run_id=offer.claim.run_id)
        return Lane(path=facts.real_path, branch=branch, base_head=facts.head, run_id=uuid.uuid4().hex[:16])
