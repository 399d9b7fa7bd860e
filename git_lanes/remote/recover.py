"""`resume` without `--restart` of a parked remote lane (SPEC §14, §17.2): recovered from the refs the
last pull brought, as a local lane is recovered from its worktree; a lane whose machine has stopped
beating cannot be (restart it instead: another machine takes it)."""

from __future__ import annotations

from ..domain.lanehost import RemoteLanes, batch_timeout, silence
from ..domain.session import Session
from ..gitio import branch_ref
from ..store import CorruptRecord


def recover_remote(s: Session, rec, child) -> tuple[str | None, str, int | None, str | None]:
    """(state or None, why, attempt, settled_at) for a parked child whose lane lives in another clone."""
    from ..tick.observe import obligation_after_pass

    lane = child.lane
    where = f"clone {lane.remote.clone_id} ({lane.remote.host})"
    restart = "a restart hands the task to any machine"
    if lane.lane_commit:
        if not s.git.odb.has(lane.lane_commit):
            return None, f"its lane commit {lane.lane_commit} is missing", None, None
        return "lane_committed", "its lane commit is recorded", None, None
    if RemoteLanes(s).presence(lane, timeout=0).branch != branch_ref(lane.branch):
        return None, f"its lane branch {lane.branch} from {where} is not here (pull first); {restart}", None, None
    try:
        lrec, _ = s.lanes.read(rec.slug, child.task_id)
    except CorruptRecord as exc:
        return None, f"its lane record cannot be read ({exc.detail})", None, None
    if lrec is None or lrec.run_id != lane.run_id or lrec.claim is None:
        return None, f"the lane record of {where} is not this run's (pull first); {restart}", None, None
    quiet = silence(lrec.claim, s.clock(), batch_timeout(s.git, rec))
    if quiet is not None:
        return None, f"its lane lives in {where}, which sent {quiet}; {restart}", None, None
    if lrec.released is not None:
        return None, f"{where} released its lane; {restart}", None, None
    if lrec.gave_up is not None:
        return "enrolled", f"its executor gave up ({lrec.gave_up.text}); it goes on in {where}", None, None
    if not lrec.qa_attempts:
        return "enrolled", f"no attempt yet; it goes on in {where}", None, None
    last = lrec.qa_attempts[-1]
    if not last.passed:
        return "enrolled", f"its last attempt failed; it goes on in {where}", None, None
    if obligation_after_pass(s, rec, child.task_id, last) != "settled":
        return "enrolled", "its passed attempt waits for a review or a new attempt", None, None
    return "settled", "a passed attempt", len(lrec.qa_attempts) - 1, last.at
