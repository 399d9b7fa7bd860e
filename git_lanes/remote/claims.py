"""Lanes claimed in this clone (SPEC §14 v3): `join`, a remote lane's `release`, the refs this clone
writes, and the re-pull-and-retry policy every loop pushes with.

join [<slug>] <task> [--remote R] [--path DIR] — in an executor's clone: pull; require a provision
handoff for the task in the pulled record and no live claim of another clone on it; create the
lane branch at the handoff's base and its worktree (`lanes.setupCommand` run in it); write the
lane record's first revision with `claim {at, clone_id, host, run_id, heartbeat_at}`; push branch
and record in ONE atomic push with leases on the values the pull saw. Another clone's claim that
reached the remote first fails a lease: join removes what it created (worktree, branch, its record
write) and exits 1 `batch_lane_claimed: <task> by <clone_id>`. A lane branch left by an ended run
(`resume --restart`) is replaced, its tip kept reachable as an extra parent of the claim.

The coordinator admits the claim on its next pull and tick (`lanehost.RemoteLanes`); until then the
lane is not enrolled and `done` in it refuses `batch_lane_not_enrolled`.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable

from ..core.errors import LanesError, refused, usage
from ..core.ids import check_id
from ..core.model import Claim, LaneRecord, Released
from ..domain.clone import clone_id, host_name
from ..domain.lanehost import live_claim
from ..domain.session import Session
from ..gitio import BatchBranch, LaneBranch, RefRaceError, branch_ref, lane_record_ref
from ..gitio.transport import push_atomic
from ..lane.side import write_lane_record
from ..store import CorruptRecord, lane_lock
from .replicate import ATTEMPTS, pull, push_retrying, resolve_remote
from .sharing import sharing


def failure_text(exc: LanesError) -> str:
    """One line for a failed pull or push: Git's own words when Git failed (the server is unreachable...)."""
    stderr = getattr(exc, "stderr", "") or ""
    words = " ".join(line.strip() for line in stderr.splitlines() if line.strip())
    return (words or exc.message.splitlines()[0])[:300]


# -- pushing and pulling with the one-writer rule ------------------------------------------------------------

def sync_push(s: Session, remote: str, only: Callable[[str], bool] | None = None,
              attempts: int = ATTEMPTS, fetched: bool = False) -> dict[str, Any]:
    """`push_retrying`, and `remote_moved` when the last try was still refused. Diverged refs are in
    the document. `fetched`: the caller pulled moments ago (a loop): the first push leases on what that
    pull saw instead of fetching again."""
    doc = push_retrying(s, remote, only, attempts, fetched=fetched)
    rejected = [r["ref"] for r in doc["refs"] if r["status"] == "rejected"]
    if rejected:
        raise refused("remote_moved", f"the push to {remote} kept failing ({', '.join(rejected)}) after {attempts} "
                                      "tries, pulling again between them; nothing was overwritten")
    return doc


def own_refs(s: Session, slug: str) -> set[str]:
    """The refs this clone writes for `slug`: the lane record and the lane branch of every lane it
    claimed in the batch's current run (a released lane's record only), and its receipts ref when
    `lanes.shareReceipts` carries it (SPEC §8.7)."""
    snap = s.batches.read(slug)
    mine = clone_id(s.git)
    if snap is None or mine is None:
        return set()
    refs = set()
    own = sharing(s.git).own
    if own is not None:
        refs.add(own)
    for child in snap.record.children:
        try:
            lrec, _ = s.lanes.read(slug, child.task_id)
        except CorruptRecord:
            continue
        if lrec is None or lrec.claim is None or lrec.claim.clone_id != mine:
            continue
        released = lrec.released is not None
        claim = live_claim(snap.record, child.task_id, lrec.model_copy(update={"released": None}))
        if claim is None:
            continue
        refs.add(lane_record_ref(slug, child.task_id))
        if not released:
            refs.add(LaneBranch(slug, child.task_id).ref)
    return refs


# -- the lanes this clone holds ------------------------------------------------------------------------------

def held_lanes(s: Session, rec) -> dict[str, tuple[str, str]]:
    """{task: (run_id, worktree)} of the lanes this clone claimed in the batch's current run."""
    mine = clone_id(s.git)
    found = {}
    for child in rec.children:
        try:
            lrec, _ = s.lanes.read(rec.slug, child.task_id)
        except CorruptRecord:
            continue
        claim = live_claim(rec, child.task_id, lrec)
        wt = s.worktree_on(LaneBranch(rec.slug, child.task_id).name)
        if claim is not None and claim.clone_id == mine and wt is not None:
            found[child.task_id] = (claim.run_id, wt.path)
    return found


def claimed_elsewhere(s: Session, rec, task_id: str) -> bool:
    """Another clone's live claim on `task_id` is in the pulled lane record."""
    try:
        lrec, _ = s.lanes.read(rec.slug, task_id)
    except CorruptRecord:
        return False
    claim = live_claim(rec, task_id, lrec)
    return claim is not None and claim.clone_id != clone_id(s.git)


def wants_session(s: Session, rec, child) -> bool:
    """A lane of this clone whose next step is to implement, judged as the coordinator will judge it:
    failed attempts it has not seen yet count toward the QA limit (then a correction is due: wait)."""
    from ..decisions.obligation import qa_limit
    from ..tick.observe import obligation_after_pass

    if child.correction_due:
        return False
    try:
        lrec, _ = s.lanes.read(rec.slug, child.task_id)
    except CorruptRecord:
        return False
    if lrec is None or lrec.run_id != child.lane.run_id or lrec.gave_up is not None:
        return lrec is None or lrec.run_id != child.lane.run_id
    if not lrec.qa_attempts:
        return True
    unseen = lrec.qa_attempts[child.qa_attempts_seen:]
    verdict = qa_limit(child.qa_failures, sum(1 for a in unseen if not a.passed), bool(unseen) and unseen[-1].passed,
                       limit=rec.budget.qa_failure_limit, corrections=child.corrections, correction_due=False)
    if verdict.correction_due or verdict.park:
        return False
    last = lrec.qa_attempts[-1]
    return not last.passed or obligation_after_pass(s, rec, child.task_id, last) == "implement"


# -- join --------------------------------------------------------------------------------------------------------

def join(s: Session, slug: str | None, task_id: str, path: str | None = None, remote: str = "origin",
         attempts: int = ATTEMPTS, pulled: bool = False) -> dict[str, Any]:
    """Claim, in this clone, the lane a provision handoff of the pulled batch record names (`pulled`: the
    caller has just pulled; a lost race pulls again all the same)."""
    check_id(task_id, "task id")
    resolve_remote(s.git, remote)
    for attempt in range(attempts):
        if attempt or not pulled:
            pull(s, remote)
        slug = s.choose_slug(slug)
        done = _join_once(s, slug, task_id, path, remote)
        if done is not None:
            return done
    raise refused("remote_moved", f"the claim of {task_id} kept failing its leases on {remote} after {attempts} "
                                  "re-pulls; nothing was left behind")


def _lost_before(s: Session, slug: str, task_id: str, doc: dict[str, Any], mine: str, branch: LaneBranch,
                 child) -> None:
    """A join killed while it pushed its claim, the claim then won by another clone: the lane record
    diverged (`remote_moved`) and the remote's carries the other claim. What the lost join made here is
    undone (the record as the remote has it; the lane, while it holds nothing) and the join refused
    `batch_lane_claimed`, as a race lost at once would have been."""
    ref = lane_record_ref(slug, task_id)
    if not any(r["ref"] == ref and r["status"] == "remote_moved" for r in doc["refs"]):
        return
    theirs = next(r["remote"] for r in doc["refs"] if r["ref"] == ref)
    try:
        claim = s.lanes.data_at(slug, task_id, theirs).get("claim") if theirs else None
    except (LanesError, ValueError, AttributeError):
        return
    holder = claim.get("clone_id") if isinstance(claim, dict) else None
    if holder is None or holder == mine:
        return
    tip = s.git.refs.resolve(branch.ref)
    head = s.git.refs.resolve(BatchBranch(slug).ref)
    if child is not None and child.state == "pending" and tip and head and s.git.odb.is_ancestor(tip, head):
        _drop_half_joined(s, branch, tip)   # nothing of its own on the branch: only a clean lane goes
    if s.worktree_on(branch.name) is None:
        with lane_lock(s.git, slug, task_id, warn=s.warn):
            ours = s.lanes.tip(slug, task_id)
            try:
                s.git.refs.update([(ref, theirs, ours)], f"git-lanes: join {task_id} lost to {holder}")
            except RefRaceError:
                pass
    raise refused("batch_lane_claimed", f"{task_id} by {holder} ({claim.get('host', '?')})")


def _drop_half_joined(s: Session, branch: LaneBranch, base_head: str) -> bool:
    """A join killed before its claim was written leaves a lane nobody claims: its branch still at the
    base the handoff names and nothing in its worktree. Removed (the join goes on), as the join would
    have on a lost race; True. Anything else is work, kept: False."""
    from ..domain.snapshot import worktree_clean
    from ..domain.workspace import remove_lane

    wt = s.worktree_on(branch.name)
    if wt is None or s.git.refs.resolve(branch.ref) != base_head:
        return False
    try:
        if os.path.isdir(wt.path) and not worktree_clean(s.git, wt.path):
            return False
    except LanesError:
        return False
    remove_lane(s, wt.path if os.path.isdir(wt.path) else "", branch.name, force=True)
    s.warn(f"removed the lane {wt.path} an interrupted join left (nothing in it)")
    return True


def _join_once(s: Session, slug: str, task_id: str, path: str | None, remote: str) -> dict[str, Any] | None:
    from ..domain.workspace import create_lane, missing_folders, remove_if_empty
    from ..tick import status_report

    git = s.git
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug} on {remote} (the coordinator pushes it after 'git lanes start')")
    rec = snap.record
    coordinator = s.worktree_at(rec.coordinator)
    if coordinator is not None and coordinator.branch == branch_ref(rec.branch):
        raise usage(f"this repository holds the coordinator of {slug}; "
                    f"create the lane with 'git lanes provision {task_id}'")
    mine = clone_id(git, create=True)
    branch = LaneBranch(slug, task_id)
    try:
        lrec, record_tip = s.lanes.read(slug, task_id)
    except CorruptRecord:
        lrec, record_tip = None, s.lanes.tip(slug, task_id)
    claim = live_claim(rec, task_id, lrec)
    if claim is not None and claim.clone_id != mine:
        raise refused("batch_lane_claimed", f"{task_id} by {claim.clone_id} ({claim.host})")
    if claim is not None and s.worktree_on(branch.name) is not None:   # joined before: make sure it travelled
        doc = sync_push(s, remote, only=own_refs(s, slug).__contains__)
        _lost_before(s, slug, task_id, doc, mine, branch, rec.child(task_id))
        return _doc(s, rec, slug, task_id, s.worktree_on(branch.name).path, lrec.claim, again=True)
    child = rec.child(task_id)
    if child is None:   # (v4) not a child at all: a usage error, as in §6
        raise usage(f"{task_id} is not a child of batch {rec.batch_id} (as pulled from {remote})")
    report = status_report(s, slug)
    handoff = next((h for h in report["handoffs"] if h.get("action") == "provision" and h["task_id"] == task_id), None)
    if handoff is None:
        raise refused("batch_lane_unknown_child",
                      f"{task_id} has no provision handoff in batch {rec.batch_id} as pulled from {remote} "
                      f"(it is {child.state})")
    if s.worktree_on(branch.name) is not None and not _drop_half_joined(s, branch, handoff["base_head"]):
        raise refused("batch_lane_branch_exists", f"{branch.name} is checked out in this clone already; "
                                                  "release that lane first")
    replaced = git.refs.resolve(branch.ref)
    if replaced is not None:   # a copy of a lane branch no live claim holds (an ended run): ours replaces it
        try:
            git.refs.delete(branch.ref, replaced, f"git-lanes: join {task_id} replaces an ended lane")
        except RefRaceError:
            raise refused("batch_lane_branch_exists", f"{branch.name} moved while joining; run join again") from None
    made = missing_folders(path) if path else []   # what a lost claim removes besides the lane
    try:
        target = create_lane(s, slug, task_id, handoff["base_head"], rec.batch_id, path)
    except BaseException:
        remove_if_empty(made)
        if replaced is not None and git.refs.resolve(branch.ref) is None:
            git.refs.create(branch.ref, replaced, f"git-lanes: join {task_id} failed")
        raise
    at = s.clock()
    run_id = uuid.uuid4().hex[:16]
    new_claim = Claim(at=at, clone_id=mine, host=host_name(), run_id=run_id, heartbeat_at=at)
    _, prefix = resolve_remote(git, remote)
    # the remote's branch (a lost run may have pushed to it after its restart): kept by the claim too
    theirs = git.refs.resolve(prefix + branch.ref[len("refs/"):])
    kept = [c for c in (replaced, theirs) if c and c != handoff["base_head"] and git.odb.has(c)]
    _, commit = write_lane_record(
        s, slug, task_id, run_id, lambda r: r, f"join {task_id}: claimed by {mine}",
        fresh=lambda: LaneRecord(batch_id=rec.batch_id, task_id=task_id, run_id=run_id, claim=new_claim),
        extra_parents=tuple(dict.fromkeys(kept)))
    try:
        won = _push_claim(s, remote, branch.ref, handoff["base_head"], lane_record_ref(slug, task_id), commit)
    except LanesError:   # the server went away: nothing of the claim stays here either
        _undo(s, slug, task_id, target, branch, commit, record_tip, replaced, made)
        raise
    if won:
        return _doc(s, rec, slug, task_id, target, new_claim)
    _undo(s, slug, task_id, target, branch, commit, record_tip, replaced, made)
    pull(s, remote)
    try:
        winner, _ = s.lanes.read(slug, task_id)
    except CorruptRecord:
        winner = None
    claim = live_claim(rec, task_id, winner)
    if claim is not None and claim.clone_id != mine:
        raise refused("batch_lane_claimed", f"{task_id} by {claim.clone_id} ({claim.host}); "
                                            "this clone's lane was removed")
    return None   # the remote moved for another reason: pull and try again


def _push_claim(s: Session, remote: str, branch_ref: str, base: str, record_ref: str, record_commit: str) -> bool:
    """Branch and record in ONE atomic push, leased on what the pull saw there."""
    target, prefix = resolve_remote(s.git, remote)

    def seen(ref: str) -> str | None:
        return s.git.refs.resolve(prefix + ref[len("refs/"):])

    sends = [(base, branch_ref, seen(branch_ref)), (record_commit, record_ref, seen(record_ref))]
    lines = push_atomic(s.git, target, sends)
    if any(lines.get(ref, ("!", ""))[0] == "!" for _, ref, _ in sends):
        return False
    try:
        s.git.refs.update([(prefix + ref[len("refs/"):], new, old) for new, ref, old in sends], "git-lanes: join")
    except RefRaceError:
        pass   # the next fetch mirrors the remote again
    return True


def _undo(s: Session, slug: str, task_id: str, target: str, branch: LaneBranch, commit: str,
          record_tip: str | None, replaced: str | None, made: list[str]) -> None:
    """A lost claim race: remove what join created (the worktree, the branch, the record write)."""
    from ..domain.workspace import remove_if_empty, remove_lane

    remove_lane(s, target, branch.name)   # and the folders up to the lane root it left empty
    remove_if_empty(made)
    with lane_lock(s.git, slug, task_id, warn=s.warn):
        try:
            s.git.refs.update([(lane_record_ref(slug, task_id), record_tip, commit)], f"git-lanes: join {task_id} lost")
        except RefRaceError:
            pass
    if replaced is not None and s.git.refs.resolve(branch.ref) is None:
        s.git.refs.create(branch.ref, replaced, f"git-lanes: join {task_id} lost")


def _doc(s: Session, rec, slug: str, task_id: str, target: str, claim: Claim, again: bool = False) -> dict[str, Any]:
    return {"slug": slug, "batch_id": rec.batch_id, "task_id": task_id, "lane_branch": LaneBranch(slug, task_id).name,
            "lane_path": target, "base_head": s.git.refs.resolve(LaneBranch(slug, task_id).ref),
            "claim": claim.model_dump(mode="json"), "admitted": False, "already_joined": again,
            "next_action": "The coordinator admits the claim on its next pull and tick; then work in the lane "
                           "(git lanes task), run 'git lanes done' and 'git lanes push'."}


# -- releasing a lane of this clone ----------------------------------------------------------------------------

def outside_lane(s: Session) -> Session:
    """`release` run inside the lane it may remove (SPEC §17.2): the command goes on from the main
    worktree, so removing the lane does not pull the ground from under it."""
    top = s.git.toplevel
    here = s.worktrees().at(top) if top else None
    if here is None or not here.branch or LaneBranch.of_ref(here.branch) is None:
        return s
    main = s.worktrees()[0]
    if main.bare or not os.path.isdir(main.path):
        return s
    os.chdir(main.path)
    return Session(cwd=main.path, warn=s.warn)


def release(s: Session, slug: str, task_id: str, keep_branch: bool = False,
            remote: str | None = "origin") -> dict[str, Any]:
    """`git lanes release <task>`: a lane of this clone (SPEC §14) is removed here, its record gets a last
    revision with `released {at}` and is pushed (unless `remote` is None: the caller pushes); any other
    lane goes to the built-in steward."""
    from ..batch import steward
    from ..domain.workspace import remove_lane
    from ..tick import status_report

    check_id(task_id, "task id")
    snap = s.batches.read(slug)
    child = snap.record.child(task_id) if snap is not None else None
    lane = child.lane if child is not None else None
    if lane is None or lane.remote is None:
        return steward.release(s, slug, task_id, keep_branch)
    if lane.remote.clone_id != clone_id(s.git):
        raise refused("batch_lane_release_refused", f"the lane of {task_id} lives in clone {lane.remote.clone_id} "
                                                    f"({lane.remote.host}); release it there")
    report = status_report(s, slug)
    if not any(h.get("action") == "release" and h["task_id"] == task_id for h in report["handoffs"]):
        raise refused("batch_lane_release_refused", f"{task_id} has no release handoff (it is {child.state}; a remote "
                                                    "lane is released once integrated and its branch is the lane "
                                                    "commit: pull first)")
    wt = s.worktree_on(lane.branch)
    where = wt.path if wt is not None else ""
    remove_lane(s, where, lane.branch, keep_branch)   # and the folders up to the lane root it left empty
    at = s.clock()
    write_lane_record(s, slug, task_id, lane.run_id,
                      lambda r: None if r.released else r.model_copy(update={"released": Released(at=at)}),
                      f"release {task_id}")
    pushed, message = remote is not None, None
    try:
        if remote is not None:
            sync_push(s, remote, only={lane_record_ref(slug, task_id)}.__contains__)
    except LanesError as exc:   # written here; the next push sends it
        pushed, message = False, exc.message
    item = {"task_id": task_id, "path": where or None, "branch": lane.branch, "branch_kept": keep_branch,
            "pushed": pushed}
    if message:
        item["message"] = message
    return {"released": [item]}
