"""What `status` and `show` say about remote lanes (SPEC §17.2): in a clone whose remote holds a record
it has not pulled, `git lanes pull`; in an executor's clone, `git lanes work`/`join` (a clone that does
not coordinate the batch never provisions); for each remote lane, its machine and heartbeat.

"Not pulled yet" is judged only from what the last fetch brought (`refs/lanes-remotes/<R>/…`): status
never talks to the network.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..domain.clone import clone_id
from ..domain.session import Session
from ..gitio import BatchBranch
from ..store import CorruptRecord

WORK_HINT = "git lanes work {slug} --remote {remote} --executor CMD"


def remotes(s: Session) -> list[str]:
    """The configured remotes, `origin` first."""
    names = sorted(key[len("remote."):-len(".url")] for key in s.git.config
                   if key.startswith("remote.") and key.endswith(".url") and key.count(".") >= 2)
    return sorted(names, key=lambda n: n != "origin")


def unpulled(s: Session, slug: str) -> str | None:
    """A remote whose last fetched record of `slug` this clone does not hold yet (nor descends from)."""
    from .replicate import resolve_remote

    ours = s.git.refs.resolve(s.batches.ref(slug))
    for name in remotes(s):
        try:
            _, prefix = resolve_remote(s.git, name)
        except Exception:   # a remote name Git accepts but a ref name cannot hold
            continue
        theirs = s.git.refs.resolve(prefix + s.batches.ref(slug)[len("refs/"):])
        if theirs is None or theirs == ours:
            continue
        if ours is None or not (s.git.odb.has(theirs) and s.git.odb.is_ancestor(theirs, ours)):
            return name
    return None


def coordinates(s: Session, rec) -> bool:
    wt = s.worktree_at(rec.coordinator)
    return wt is not None and wt.branch == BatchBranch(rec.slug).ref


def heartbeats(s: Session, rec, report: dict[str, Any]) -> None:
    """`heartbeat_at` (else the claim's `at`) of each remote lane's record, beside its `lane.remote`."""
    for c in report["children"]:
        remote = (c.get("lane") or {}).get("remote")
        if not remote:
            continue
        try:
            lrec, _ = s.lanes.read(rec.slug, c["task_id"])
        except CorruptRecord:
            continue
        if lrec is not None and lrec.claim is not None and lrec.run_id == c["lane"]["run_id"]:
            c["heartbeat_at"] = lrec.claim.heartbeat_at or lrec.claim.at


def remote_view(s: Session, slug: str, report: dict[str, Any]) -> dict[str, Any]:
    """The report of `status`, with what a clone of a remote batch should do next."""
    snap = s.batches.read(slug)
    if snap is None:
        return report
    rec = snap.record
    heartbeats(s, rec, report)
    remote = unpulled(s, slug)
    q = shlex.quote
    if remote is not None:
        report["next_action"] = (f"{remote} holds a newer record of {slug} than this clone (as last fetched): "
                                 f"git lanes pull {q(remote)}, then git lanes status {q(slug)}")
        return report
    if coordinates(s, rec) or rec.batch_state != "running":
        return report
    names = remotes(s)
    if not names:
        return report
    remote = names[0]
    mine = clone_id(s.git)
    held = [c["task_id"] for c in report["children"]
            if ((c.get("lane") or {}).get("remote") or {}).get("clone_id") == mine and c["state"] == "enrolled"]
    joinable = [h["task_id"] for h in report["handoffs"] if h.get("action") == "provision"]
    report["handoffs"] = [h for h in report["handoffs"] if h.get("action") != "provision"]
    steps = [WORK_HINT.format(slug=q(slug), remote=q(remote)) + " (it joins the lanes the coordinator offers, "
             "runs the executor in them and pushes)"]
    if joinable:
        steps.append("or by hand: " + "; ".join(f"git lanes join {q(slug)} {q(t)}" for t in joinable))
    if held:
        steps.append("lanes of this clone: " + ", ".join(held) + " (in each: git lanes task, the work, "
                     "git lanes done, then git lanes push)")
    report["next_action"] = "This clone executes lanes of the coordinator's batch: " + "; ".join(steps) + "."
    return report
