"""The guards and SPEC §7 C steps 1–5: put the batch back on what Git holds before anything moves.

    guards            parallelism asserted, coordinator on its branch, requests on a parked batch
    ensure_branch     a crash between `start`'s record and its branch
    authorize    (1)  the plan at the head is the authorized one
    restore_leaks(2)  lane writes found in the coordinator
    adopt        (3)  integrations a crash left unrecorded
    record_releases(4) integrated lanes that are gone
    lineage      (5)  the batch branch descends from what the record says

A step returns False when the tick must stop there (the batch was stopped; finish reports it).
"""

from __future__ import annotations

import os

from ..core import lifecycle
from ..core.errors import ExitCode, LanesError
from ..core.model import AdoptedHead
from ..decisions.lineage import LineageFacts, classify_lineage
from ..domain import authority
from ..domain.workspace import drop_left_branch
from ..gitio import RefRaceError, short_branch
from ..store import fast_forward_mark
from . import engine
from .land import mark_integrated
from .request import Outcome
from .state import TickState


def guards(t: TickState) -> Outcome | None:
    """The refusals that reject a tick before it looks at anything (nothing written)."""
    rec = t.record
    if t.req.max_parallel is not None and t.req.max_parallel != rec.max_parallel:
        return t.reject("batch_parallel_mismatch",
                        f"the batch runs with --max-parallel {rec.max_parallel}, not {t.req.max_parallel}")
    tip = t.git.refs.resolve(t.branch.ref)
    if tip is None and _work_integrated(rec):
        return t.reject("batch_coordinator_off_branch",
                        f"the batch branch {rec.branch} is gone, with integrated work on it; recreate it at its "
                        f"last integrated commit: 'git update-ref {t.branch.ref} {t.expected()}'")
    t.continue_start = _start_interrupted(t, tip)
    if t.continue_start is not None:
        return None
    wt = t.s.worktree_at(rec.coordinator)
    if wt is None or not os.path.isdir(rec.coordinator):
        return t.reject("batch_coordinator_off_branch", f"the coordinator worktree {rec.coordinator} is missing")
    if wt.branch != t.branch.ref:
        on = short_branch(wt.branch) if wt.branch else "a detached HEAD"
        return t.reject("batch_coordinator_off_branch",
                        f"the coordinator {rec.coordinator} is on {on}, not {rec.branch}; "
                        f"switch back with 'git -C {rec.coordinator} switch {rec.branch}'")
    if rec.batch_state == "needs_human" and t.req.has_requests:
        return t.reject("batch_needs_human", f"the batch needs a human decision ({rec.reason}); "
                                             f"resume it with 'git lanes resume {rec.slug}'")
    return None


def _work_integrated(rec) -> bool:
    """Anything this batch itself put on its branch (carried-over commits aside)."""
    return bool(rec.adopted_heads) or any(c.commit and c.lane and not c.lane.carried_over
                                          for c in rec.children)


def _start_interrupted(t: TickState, tip: str | None) -> str | None:
    """How to finish a `start` killed after its record write (SPEC §15 v3), or None: the batch branch
    is missing (`branch`), the coordinator still has to be created (`worktree`) or switched to the
    branch (`switch`) — only while nothing ran yet: no lane, nothing integrated, the coordinator
    clean at the batch's base."""
    rec = t.record
    if _work_integrated(rec) or any(c.lane is not None and not c.lane.carried_over for c in rec.children):
        return None
    if tip is not None and tip != rec.base_head:
        return None
    wt = t.s.worktree_at(rec.coordinator)
    if wt is None:
        path = rec.coordinator
        fresh = not os.path.lexists(path) or (os.path.isdir(path) and not os.listdir(path))
        return "worktree" if fresh else None
    if wt.branch == t.branch.ref:
        return "branch" if tip is None else None
    if wt.head != rec.base_head or not t.git.work.is_clean(rec.coordinator):
        return None
    moved = f" to {t.branch.name}"
    if any(s.startswith("checkout: moving from ") and s.endswith(moved) for s in t.git.work.head_log(rec.coordinator)):
        return None   # it was on the branch once: the user switched away (switching back continues)
    return "switch"


def ensure_branch(t: TickState) -> None:
    """Finish an interrupted `start` (the branch at `base_head`; the coordinator created or
    switched to it), then read the head."""
    rec = t.record
    how = t.continue_start
    if how is not None:
        if t.git.refs.resolve(t.branch.ref) is None:
            t.git.refs.create(t.branch.ref, rec.base_head, f"git-lanes: create {rec.branch}")
        if how == "worktree":
            t.git.work.add(rec.coordinator, t.branch.name)
        elif how == "switch":
            t.git.work.switch(rec.coordinator, t.branch.name)
        if how != "branch":
            t.s.warn(f"start was interrupted; the coordinator {rec.coordinator} is now on {rec.branch}")
        t.s.forget_worktrees()
    wt = t.s.worktree_at(rec.coordinator)    # listed after the lock: its HEAD is current
    t.head = wt.head if wt is not None and wt.head else t.git.rev_parse("HEAD", cwd=rec.coordinator)
    _finish_fast_forward(t)


def _finish_fast_forward(t: TickState) -> None:
    """A `merge --ff-only` killed after it wrote the coordinator's index but before it moved the
    branch leaves the verified candidate's tree staged on the old head; move the branch as the
    merge would have (compare-and-swap), so the adoption of step 3 records it. Killed while it
    wrote the files, it leaves some of them (perhaps torn) on an untouched index: put back."""
    mark = fast_forward_mark(t.git, t.slug)
    if not os.path.exists(mark):
        return   # no merge was killed: the coordinator is not scanned for one
    cand = t.record.candidate
    if cand is None or t.head != cand.head or not t.git.odb.has(cand.commit):
        _drop(mark)   # the candidate landed, or went: nothing half-done of it is left to finish
        return
    entries = t.coordinator_status()
    if not entries:
        _drop(mark)
        return
    if all(e.xy in ("??", " M", " D") for e in entries):   # the index untouched
        if _undo_torn_checkout(t, cand, entries):
            _drop(mark)
        return
    if not t.git.work.index_matches(t.record.coordinator, cand.commit):
        return
    try:
        t.git.refs.update([(t.branch.ref, cand.commit, cand.head)], f"git-lanes: finish the fast-forward to "
                                                                     f"{cand.commit[:12]}")
    except RefRaceError:
        return
    _drop(mark)
    t.head = cand.commit
    t.forget_coordinator_status()
    t.s.forget_worktrees()
    t.s.warn(f"an interrupted fast-forward of {t.record.branch} to {cand.commit[:12]} was finished")


def _drop(mark: str) -> None:
    try:
        os.unlink(mark)
    except FileNotFoundError:
        pass


def _undo_torn_checkout(t: TickState, cand, entries) -> bool:
    """Unstaged changes in the coordinator, every one at a path the recorded candidate changes (its
    checkout was killed half-way, a file perhaps torn): copied under `lanes/restores/<batch_id>/`,
    then put back to HEAD. The candidate holds the whole files; the next fast-forward writes them."""
    import shutil

    rec = t.record
    changed = set(t.git.odb.diff_paths(cand.head, cand.commit))
    if any(e.path not in changed or not _torn(t, cand.commit, e) for e in entries):
        return False   # not only what a killed checkout leaves: step 2 judges them (restore, or refuse untouched)
    backup = os.path.join(t.git.common_dir, "lanes", "restores", rec.batch_id,
                          "torn-" + "".join(ch for ch in t.s.clock() if ch.isalnum()))
    for e in entries:
        source = os.path.join(rec.coordinator, e.path)
        if os.path.lexists(source):
            os.makedirs(os.path.dirname(os.path.join(backup, e.path)), exist_ok=True)
            shutil.copy2(source, os.path.join(backup, e.path), follow_symlinks=False)
    for e in entries:
        if e.xy == "??":
            os.unlink(os.path.join(rec.coordinator, e.path))
    t.git.work.checkout_paths(rec.coordinator, [e.path for e in entries if e.xy != "??"])
    t.forget_coordinator_status()
    t.s.warn(f"a fast-forward to {cand.commit[:12]} was interrupted while it wrote files; "
             f"{len(entries)} path(s) put back to {rec.branch} (copies in {backup})")
    return True


def _torn(t: TickState, commit: str, entry) -> bool:
    """Whether a status entry is what a checkout of `commit` killed half-way can leave there: the file
    gone, or (so far) a beginning of the version `commit` has; never someone's own edit."""
    path = os.path.join(t.record.coordinator, entry.path)
    if not os.path.lexists(path):
        return True
    wanted = t.git.odb.blob_at(commit, entry.path)
    if wanted is None:
        return False
    try:
        on_disk = os.fsencode(os.readlink(path)) if os.path.islink(path) else _read(path)
    except OSError:
        return False
    return wanted.startswith(on_disk)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _stop(t: TickState, state: str, reason: str, event: str) -> None:
    for task_id in lifecycle.stop_batch(t.record, state, reason):
        t.events.append(f"parked {task_id}")
        if t.extras.first_park is None:
            t.extras.first_park = reason
    t.reason = reason
    t.events.append(event)


def authorize(t: TickState) -> bool:
    """Step 1: the plan digest at the head, allowing only approved revisions."""
    what = authority.plan_mismatch(t.s, t.record, t.head)
    if what is None:
        return True
    _stop(t, "needs_human", f"plan_changed: {what}", "plan changed")
    return False


def restore_leaks(t: TickState) -> bool:
    """Step 2: lane writes in the coordinator, proven and put back (or refused untouched)."""
    from ..domain.leaks import restore_leaks as restore

    try:
        done = restore(t.s, t.record, t.s.clock(), t.coordinator_status())
    except LanesError as exc:   # working_tree_unstaged: nothing touched; `--json` prints the rejection
        if exc.exit_code == ExitCode.REFUSED and exc.code and exc.report is None:
            exc.report = t.reject(exc.code, exc.detail).report
        raise
    t.forget_coordinator_status()
    for r in done:
        t.record.restores.append(r)
        t.events.append(f"restored {len(r.paths)} leaked path(s)")
    return True


def adopt(t: TickState) -> bool:
    """Step 3: a commit past the expected head that is a crashed integration of a recorded lane commit."""
    rec = t.record
    expected = t.expected()
    if t.head == expected or not t.on_branch(expected):
        return True
    for claim in engine.claims_between(t.git, rec.batch_id, expected, t.head):
        child = rec.child(claim.task_id)
        if child is None or child.state != "lane_committed" or not child.lane or not child.lane.lane_commit:
            continue
        commit = t.git.odb.commit(claim.commit)
        if not commit.subject.startswith(f"imm({child.task_id}):") or len(commit.parents) != 1:
            continue
        if t.git.odb.change_identity(commit.parents[0], claim.commit) != \
                t.git.odb.change_identity(child.lane.base_head, child.lane.lane_commit):
            continue
        mark_integrated(t, child, claim.commit, rerun=[])
        t.events.append(f"adopted {child.task_id}")
    return True


def record_releases(t: TickState) -> bool:
    """Step 4: an integrated child whose lane is gone (a remote lane: released in its clone) is released.
    A local lane's branch left on its lane commit (a release killed between the worktree's removal and
    the branch's) goes first, as that release would have done: a released child leaves no branch
    behind for the next batch to refuse as stale."""
    for c in t.record.children:
        if c.state == "integrated" and c.lane and not c.lane.carried_over and not t.lanes.presence(c.lane).exists:
            if c.lane.remote is None:
                drop_left_branch(t.s, c.lane.branch, c.lane.lane_commit)
            lifecycle.release(c)
            t.events.append(f"released {c.task_id}")
    return True


def lineage(t: TickState) -> bool:
    """Step 5: broken lineage fails the batch; a user fast-forward is adopted."""
    rec = t.record
    expected = t.expected()
    head = t.head
    descends = head == expected or t.on_branch(expected)
    recorded = [c.commit for c in rec.children if c.commit]
    unreachable = tuple(c for c in recorded if not t.on_branch(c))
    claims: tuple[str, ...] = ()
    if descends and head != expected:
        known = set(recorded)
        claims = tuple(cl.commit for cl in engine.claims_between(t.git, rec.batch_id, expected, head)
                       if cl.commit not in known)
    verdict, what = classify_lineage(LineageFacts(expected, head, descends, unreachable, claims))
    if verdict == "broken":
        _stop(t, "failed", f"batch_head_lineage_broken: {what}", "lineage broken")
        return False
    if verdict == "adopt":
        rec.adopted_heads.append(AdoptedHead(**{"from": expected, "to": head}))
        t.events.append(f"adopted head {head[:12]}")
    return True
