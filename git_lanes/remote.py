"""Beyond one machine (SPEC §14): `git lanes push`, `git lanes pull`, `git lanes join`.

Git remotes are the distributed engine. Three ref families travel:

  refs/notes/lanes/*        batch records, lane records, evidence notes
  refs/heads/imm/*          batch branches
  refs/heads/imm-lane/*     lane branches

Each ref has exactly one writer (a batch record and the evidence: the coordinator; a lane
record: its lane; a batch branch: the coordinator; a lane branch: its lane, plus the
coordinator's lane commit), so replication never merges: a ref only ever moves forward to a
value that descends from the one it replaces, and anything else is reported, never resolved.

Tracking namespace. Both commands first fetch the three families from the remote into
`refs/lanes-remotes/<name>/{notes/lanes,heads/imm,heads/imm-lane}/*` (`git fetch --prune
--atomic`, forced: it is a mirror of the remote and nothing else writes it). `<name>` is the
remote's name when REMOTE is a configured remote, else `url-<12 hex of sha256(REMOTE)>`.
Fetching there first is what makes pull safe (Git refuses to fetch into a branch checked out
in a worktree) and gives push an exact, local picture of the remote: its values for the
leases and its objects for the ancestry checks.

push [REMOTE] (default `origin`), per local ref of the three families, against the fetched
remote value:
  - `up_to_date`     equal; nothing is sent;
  - `pushed`         absent there, or an ancestor of ours: sent (fast-forward); also when the
                     remote value is one this very ref held before (it is in the local ref's
                     reflog: we wrote it, e.g. the coordinator's lane commit replacing the
                     executor's tip), reported with `"rewound": true`;
  - `remote_ahead`   ours is an ancestor of the remote's: nothing to send (pull it);
  - `remote_moved`   diverged (someone else wrote it): not sent, never forced;
  - `rejected`       Git or the remote refused it (`message` quotes Git's summary).
Everything sendable goes in ONE `git push --atomic --porcelain` carrying an explicit
`--force-with-lease=<ref>:<fetched value>` for every ref (an empty value: the ref must not
exist there), so a remote that moved between the fetch and the push fails the lease and,
the push being atomic, nothing at all is pushed (every ref is reported `rejected`). Diverged
refs are filtered out before the push, so they never sink the refs that can go. Push never
deletes a remote ref. After a successful push the tracking refs take the pushed values.

pull [REMOTE], per fetched remote ref, against the local ref:
  - `up_to_date`     equal;
  - `pulled`         absent here, or an ancestor of the remote's: fast-forwarded;
  - `local_ahead`    the remote's is an ancestor of ours: nothing to do (push it);
  - `remote_moved`   diverged: neither merged nor overwritten;
  - `checked_out`    a branch that would move but is checked out in a worktree here: git-lanes
                     never moves it (pull it with git in that worktree);
  - `released`       a lane branch absent here whose child is `released` (in the local or the
                     fetched batch record): a released lane is not recreated.
All fast-forwards are one `git update-ref --stdin` transaction, compare-and-swap against the
local values that were classified (a lost race re-reads and retries, then `batch_busy`).
Pull never deletes a local ref.

join <slug> <task> [--path DIR] — in a clone that is not the coordinator's repository, after
a pull: creates the lane a provision handoff of the pulled batch record names (the branch
`imm-lane/<slug>/<task>` at the handoff's base, a worktree at DIR, default as for
`provision`, `lanes.setupCommand` run in it). It only creates the lane: no tick runs (the
coordinator is elsewhere) and nothing is offered. Until the coordinator can admit a lane from
refs alone (a tick.py change, see docs/design.md), the lane commands (`task`, `done`) refuse in
a joined lane because the batch record holds no lane for the child yet; what a joined lane can
do today is commit on its branch and `push` it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .errors import LanesError, refused, usage
from .gitio import Git, RefRaceError
from .gitio.transport import fetch_mirror, push_atomic
from .ids import check_id
from .session import Session, lane_branch

FAMILIES = ("refs/notes/lanes/", "refs/heads/imm/", "refs/heads/imm-lane/")
TRACKING_ROOT = "refs/lanes-remotes/"
LANE_PREFIX = "refs/heads/imm-lane/"

# Per-ref statuses of `push` / `pull` (public interface: scripts match on them).
PUSH_STATUSES: dict[str, str] = {
    "pushed": "sent: absent on the remote, a fast-forward there, or a value this ref held before here",
    "up_to_date": "the remote holds the same value; nothing sent",
    "remote_ahead": "the remote's value descends from ours; nothing sent (pull it)",
    "remote_moved": "diverged: someone else wrote the remote's value; not sent, never forced",
    "rejected": "Git or the remote refused the atomic push (a lease failed, a hook, a permission)",
}
PULL_STATUSES: dict[str, str] = {
    "pulled": "created, or fast-forwarded to the remote's value",
    "up_to_date": "the local ref holds the remote's value",
    "local_ahead": "the local value descends from the remote's; nothing to do (push it)",
    "remote_moved": "diverged: neither merged nor overwritten",
    "checked_out": "a branch checked out in a worktree here is never moved (pull it with git there)",
    "released": "the lane branch of a released child is not recreated",
}
NEGATIVE = frozenset({"remote_moved", "rejected"})   # statuses that make the command exit 1


# -- the remote and its tracking namespace ---------------------------------------------------------

def _remote(git: Git, remote: str) -> tuple[str, str]:
    """(what to hand git push/fetch, tracking prefix `refs/lanes-remotes/<name>/`)."""
    if not remote or remote.startswith("-"):
        raise usage(f"invalid remote '{remote}'")
    if git.config_get(f"remote.{remote}.url") is not None:
        name = remote
        if git.refs.valid_name(f"{TRACKING_ROOT}{name}/x"):
            return remote, f"{TRACKING_ROOT}{name}/"
        return remote, f"{TRACKING_ROOT}url-{hashlib.sha256(remote.encode()).hexdigest()[:12]}/"
    target = remote
    if "://" not in remote and not _scp_like(remote):
        # a path: relative to where the command was run, not to the worktree root git runs in
        target = os.path.abspath(os.path.join(git.cwd, remote))
        if not os.path.exists(target):
            raise usage(f"no remote '{remote}': neither a configured remote nor a repository path "
                        "(add one with 'git remote add')")
    return target, f"{TRACKING_ROOT}url-{hashlib.sha256(target.encode()).hexdigest()[:12]}/"


def _scp_like(text: str) -> bool:
    head, colon, _ = text.partition(":")
    return bool(colon) and "/" not in head and len(head) > 1


def _tracking(prefix: str, ref: str) -> str:
    return prefix + ref[len("refs/"):]


def _fetch(git: Git, target: str, prefix: str) -> dict[str, str]:
    """Mirror the three families of the remote into the tracking namespace; {remote ref: oid}."""
    specs = [f"+{fam}*:{_tracking(prefix, fam)}*" for fam in FAMILIES]
    fetch_mirror(git, target, specs)
    mirrored = git.refs.under(prefix.rstrip("/"))
    return {"refs/" + name[len(prefix):]: oid for name, oid in mirrored.items()
            if name.startswith(prefix)}


def _local(git: Git) -> dict[str, str]:
    values: dict[str, str] = {}
    for fam in FAMILIES:
        values.update(git.refs.under(fam.rstrip("/")))
    return {ref: oid for ref, oid in values.items() if ref.startswith(FAMILIES)}


def _relation(git: Git, ours: str | None, theirs: str | None) -> str:
    """`same`, `ahead` (ours descends from theirs, or theirs is absent), `behind`, or `diverged`
    (incl. an unknown object)."""
    if ours == theirs:
        return "same"
    if theirs is None:
        return "ahead"
    if ours is None:
        return "behind"
    if not (git.odb.has(ours) and git.odb.has(theirs)):
        return "diverged"
    if git.odb.is_ancestor(theirs, ours):
        return "ahead"
    if git.odb.is_ancestor(ours, theirs):
        return "behind"
    return "diverged"


def _item(ref: str, status: str, local: str | None, remote: str | None, **extra: Any) -> dict[str, Any]:
    return {"ref": ref, "status": status, "local": local, "remote": remote, **extra}


# -- push -------------------------------------------------------------------------------------------

def push(s: Session, remote: str = "origin") -> dict[str, Any]:
    """One atomic push with a lease on every ref; see the module docstring."""
    git = s.git
    target, prefix = _remote(git, remote)
    theirs_all = _fetch(git, target, prefix)
    items: list[dict[str, Any]] = []
    send: list[dict[str, Any]] = []
    for ref, ours in sorted(_local(git).items()):
        theirs = theirs_all.get(ref)
        relation = _relation(git, ours, theirs)
        if relation == "diverged" and git.refs.held_before(ref, theirs):
            item = _item(ref, "pushed", ours, theirs, rewound=True)
        else:
            status = {"same": "up_to_date", "ahead": "pushed", "behind": "remote_ahead"}.get(relation, "remote_moved")
            item = _item(ref, status, ours, theirs)
        items.append(item)
        if item["status"] == "pushed":
            send.append(item)
    if send:
        _atomic_push(git, target, prefix, send)
    return {"remote": remote, "refs": items}


def _atomic_push(git: Git, target: str, prefix: str, send: list[dict[str, Any]]) -> None:
    lines = push_atomic(git, target, [(i["local"], i["ref"], i["remote"]) for i in send])
    for item in send:
        flag, summary = lines.get(item["ref"], ("!", "not reported by git push"))
        if flag == "!":
            item["status"] = "rejected"
            item["message"] = summary
        elif flag == "=":
            item["status"] = "up_to_date"
    pushed = [i for i in send if i["status"] == "pushed"]
    if pushed:  # the tracking namespace mirrors what the remote now holds
        try:
            git.refs.update([(_tracking(prefix, i["ref"]), i["local"], i["remote"]) for i in pushed], "git-lanes: push")
        except RefRaceError:
            pass  # another fetch wrote it meanwhile: the next fetch mirrors the remote again


# -- pull -------------------------------------------------------------------------------------------

def pull(s: Session, remote: str = "origin", attempts: int = 5) -> dict[str, Any]:
    """Fetch into the tracking namespace, then fast-forward local refs; see the module docstring."""
    git = s.git
    target, prefix = _remote(git, remote)
    theirs_all = _fetch(git, target, prefix)
    for _ in range(attempts):
        checked_out = {wt.branch for wt in s.worktrees(refresh=True) if wt.branch}
        local = _local(git)
        items = []
        for ref, theirs in sorted(theirs_all.items()):
            ours = local.get(ref)
            relation = _relation(git, ours, theirs)
            if relation != "behind":
                status = {"same": "up_to_date", "ahead": "local_ahead"}.get(relation, "remote_moved")
            elif ref in checked_out:
                status = "checked_out"
            elif ours is None and _released_lane(s, ref, theirs_all):
                status = "released"
            else:
                status = "pulled"
            items.append(_item(ref, status, ours, theirs))
        moves = [(i["ref"], i["remote"], i["local"]) for i in items if i["status"] == "pulled"]
        if not moves:
            return {"remote": remote, "refs": items}
        try:
            git.refs.update(moves, f"git-lanes: pull from {remote}")
        except RefRaceError:
            continue  # a local writer moved one meanwhile: classify again
        return {"remote": remote, "refs": items}
    raise refused("batch_busy", "local git-lanes refs kept moving while pulling; run the command again")


def _released_lane(s: Session, ref: str, theirs_all: dict[str, str]) -> bool:
    """Whether `ref` is the lane branch of a child released in the local or the fetched record."""
    if not ref.startswith(LANE_PREFIX):
        return False
    slug, _, task_id = ref[len(LANE_PREFIX):].partition("/")
    record_ref = s.batches.ref(slug)
    for commit in (s.git.refs.resolve(record_ref), theirs_all.get(record_ref)):
        if commit is None:
            continue
        try:
            snap = s.batches.read(slug, commit=commit)
        except (LanesError, ValueError):  # an unreadable record decides nothing here
            continue
        child = snap.record.child(task_id) if snap else None
        if child is not None and child.state == "released" and child.lane is not None \
                and child.lane.branch == lane_branch(slug, task_id):
            return True
    return False


# -- join -------------------------------------------------------------------------------------------

def join(s: Session, slug: str, task_id: str, path: str | None = None) -> dict[str, Any]:
    """Create, in this clone, the lane a provision handoff of the pulled batch record names."""
    from .tick import status_report
    from .workspace import create_lane

    check_id(slug, "slug")
    check_id(task_id, "task id")
    snap = s.batches.read(slug)
    if snap is None:
        raise usage(f"no batch for {slug} in this repository (run 'git lanes pull' first)")
    rec = snap.record
    coordinator = s.worktree_at(rec.coordinator)
    if coordinator is not None and coordinator.branch == "refs/heads/" + rec.branch:
        raise usage(f"this repository holds the coordinator of {slug}; "
                    f"create the lane with 'git lanes provision {task_id}'")
    report = status_report(s, slug)
    handoff = next((h for h in report["handoffs"]
                    if h.get("action") == "provision" and h["task_id"] == task_id), None)
    if handoff is None:
        child = rec.child(task_id)
        state = "not a child of this batch" if child is None else child.state
        raise refused("batch_lane_unknown_child",
                      f"{task_id} has no provision handoff in batch {rec.batch_id} as last pulled "
                      f"(it is {state}); run 'git lanes pull' for the latest record")
    target = create_lane(s, slug, task_id, handoff["base_head"], rec.batch_id, path)
    return {"slug": slug, "batch_id": rec.batch_id, "task_id": task_id,
            "lane_branch": lane_branch(slug, task_id), "lane_path": target,
            "base_head": handoff["base_head"], "admitted": False,
            "next_action": "Commit the work on the lane branch and 'git lanes push' it; the coordinator "
                           "admits a lane from another clone only once it can observe lanes from refs."}
