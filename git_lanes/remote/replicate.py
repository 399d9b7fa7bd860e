"""Replication (SPEC §14): `git lanes push` and `git lanes pull`, the compare-and-swap movers.

Three ref families travel:

  refs/notes/lanes/*        batch records, lane records, evidence notes (receipts: only with
                            `lanes.shareReceipts`, by the rules of `sharing.py`)
  refs/heads/imm/*          batch branches
  refs/heads/imm-lane/*     lane branches

Each ref has exactly one writer (a batch record and the evidence: the coordinator; a lane
record: its lane; a batch branch: the coordinator; a lane branch: its lane, plus the
coordinator's lane commit, after which the coordinator owns it), so replication never merges:
a ref only moves to a value that descends from the one it replaces, or to one that a record
keeps reachable (so nothing is lost), and anything else is reported, never resolved.

Tracking namespace. Both commands first fetch the three families from the remote into
`refs/lanes-remotes/<name>/{notes/lanes,heads/imm,heads/imm-lane}/*` (`git fetch --prune
--atomic`, forced: it is a mirror of the remote and nothing else writes it). `<name>` is the
remote's name when REMOTE is a configured remote, else `url-<12 hex of sha256(REMOTE)>`.
Fetching there first is what makes pull safe (Git refuses to fetch into a branch checked out
in a worktree) and gives push an exact, local picture of the remote: its values for the
leases, its objects for the ancestry checks and its records for the lane rules below.

push [REMOTE] (default `origin`), per local ref of the three families, against the fetched
remote value:
  - `up_to_date`     equal; nothing is sent;
  - `pushed`         absent there, or an ancestor of ours: sent (fast-forward); also when the
                     remote value is one this very lane branch held before (it is in the local
                     ref's reflog: we wrote it, e.g. the coordinator's lane commit replacing the
                     executor's tip), reported with `"rewound": true` (a record, the evidence
                     or a batch branch only grows: diverged, it is `remote_moved`);
  - `remote_ahead`   ours is an ancestor of the remote's: nothing to send (pull it); also a lane
                     branch whose remote value is the lane commit the batch record names while
                     ours is its base or a recorded executor commit (the coordinator replaced it);
  - `remote_moved`   diverged (someone else wrote it): not sent, never forced;
  - `released`       a lane branch absent there whose child is released: never sent back;
  - `replaced`       a copy of a lane branch another clone writes now (a restarted lane joined
                     again), its value kept reachable by the fetched records: never sent back;
  - `deleted`        (the coordinator only) the branch of a released remote lane, still at its
                     lane commit: deleted there (with a lease on that value) and here;
  - `rejected`       Git or the remote refused it (`message` quotes Git's summary).
Everything sendable goes in ONE `git push --atomic --porcelain` carrying an explicit
`--force-with-lease=<ref>:<fetched value>` for every ref (an empty value: the ref must not
exist there), so a remote that moved between the fetch and the push fails the lease and,
the push being atomic, nothing at all is pushed (every ref is reported `rejected`); then push
pulls and tries again, at most 5 pushes in all (`"attempts"` in the document). Diverged
refs are filtered out before the push, so they never sink the refs that can go. Apart from
`deleted`, push never deletes a remote ref. After a successful push the tracking refs take
the pushed values.

pull [REMOTE], per fetched remote ref, against the local ref:
  - `up_to_date`     equal;
  - `pulled`         absent here, or an ancestor of the remote's: fast-forwarded; also a copy of a
                     lane branch this clone does not write (not checked out here) whose value the
                     fetched batch or lane record keeps reachable: replaced by its writer's value
                     (`"rewound": true`): the coordinator's lane commit, a restarted lane joined
                     again elsewhere. This clone writes a lane branch as the coordinator of a
                     lane that lives here or has its lane commit, or as the holder of its live
                     claim until the lane commit;
  - `local_ahead`    the remote's is an ancestor of ours: nothing to do (push it);
  - `remote_moved`   diverged: neither merged nor overwritten;
  - `checked_out`    a branch that would move but is checked out in a worktree here: never
                     moved, with one exception: a lane branch whose remote value is the lane
                     commit the batch record names for it, when the worktree's delivery equals
                     that commit's tree: the branch moves and the lane's index is refreshed, as the
                     coordinator does for a local lane (§8.2);
  - `released`       a lane branch absent here whose child is `released` (in the local or the
                     fetched batch record), or whose lane this clone released itself (its lane
                     record says so) before the coordinator recorded it: a released lane is not
                     recreated;
  - `elsewhere`      a lane branch absent here of a lane another clone holds, in a clone that does
                     not coordinate its batch: an executor's clone copies only its own lanes'
                     branches, so none keeps a copy that nothing would delete.
All moves are one `git update-ref --stdin` transaction, compare-and-swap against the local
values that were classified (a lost race re-reads and retries, then `batch_busy`). Pull never
deletes a local ref.
"""

from __future__ import annotations

import copy
import hashlib
import os
from typing import Any, Callable

from ..core.errors import refused, usage
from ..domain.session import Session
from ..gitio import LANE_BRANCH_PREFIX, Git, RefRaceError, branch_ref
from ..gitio.transport import fetch_mirror, push_atomic
from ..store import fetch_lock
from .records import Records
from .sharing import Sharing, pull_item, push_status, sharing

FAMILIES = ("refs/notes/lanes/", "refs/heads/imm/", "refs/heads/imm-lane/")
TRACKING_ROOT = "refs/lanes-remotes/"

# Per-ref statuses of `push` / `pull` (public interface: scripts match on them).
PUSH_STATUSES: dict[str, str] = {
    "pushed": "sent: absent on the remote, a fast-forward there, or a value this ref held before here",
    "up_to_date": "the remote holds the same value; nothing sent",
    "remote_ahead": "the remote's value descends from ours, or is the lane commit that replaced it; nothing sent "
                    "(pull it)",
    "remote_moved": "diverged: someone else wrote the remote's value; not sent, never forced",
    "released": "the lane branch of a released child is not sent back",
    "replaced": "a copy of a lane branch another clone writes now (the records keep it); never sent (pull it)",
    "deleted": "the coordinator deleted the branch of a released remote lane (there and here)",
    "rejected": "Git or the remote refused the atomic push (a lease failed, a hook, a permission)",
}
PULL_STATUSES: dict[str, str] = {
    "pulled": "created, fast-forwarded, or a copy of a lane branch replaced by its writer's value (the records "
              "keep the old one reachable)",
    "up_to_date": "the local ref holds the remote's value",
    "local_ahead": "the local value descends from the remote's, or is this clone's own receipts ref (which only "
                   "it writes); nothing to do (push it)",
    "remote_moved": "diverged: neither merged nor overwritten",
    "checked_out": "a branch checked out in a worktree here is never moved (pull it with git there)",
    "released": "the lane branch of a released child is not recreated",
    "elsewhere": "the lane branch of a lane another clone holds is not copied into an executor's clone",
}
NEGATIVE = frozenset({"remote_moved", "rejected"})   # statuses that make the command exit 1
# Verdicts of pull that depend on refs alone (a `checked_out` one also on a worktree's files): when neither
# the fetched nor the local refs changed since a pull that gave only these, the next pull gives them again
# without judging anything (a loop's idle poll). {(repository, tracking prefix): (theirs, local, items)}
_STILL = frozenset({"up_to_date", "local_ahead", "released", "elsewhere"})
_SETTLED: dict[tuple[str, str], tuple[dict[str, str], dict[str, str], list[dict[str, Any]]]] = {}
ATTEMPTS = 5   # pushes a lease failure retries (pulling again between them) before it stays `rejected`


# -- the remote and its tracking namespace ---------------------------------------------------------

def resolve_remote(git: Git, remote: str) -> tuple[str, str]:
    """(what to hand git push/fetch, tracking prefix `refs/lanes-remotes/<name>/`); exit 2 for a remote
    that is neither configured nor a repository path."""
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


def fetch(git: Git, target: str, prefix: str, share: Sharing | None = None) -> dict[str, str]:
    """Mirror the three families of the remote into the tracking namespace (receipts refs only with
    `lanes.shareReceipts`); {remote ref: oid}. One fetch into it at a time (`store.fetch_lock`)."""
    share = share if share is not None else sharing(git)
    specs = [f"+{fam}*:{_tracking(prefix, fam)}*" for fam in FAMILIES] + share.refspecs()
    with fetch_lock(git, prefix):
        fetch_mirror(git, target, specs, guarded=prefix)
        return seen(git, prefix, share)


def seen(git: Git, prefix: str, share: Sharing | None = None) -> dict[str, str]:
    """The remote's refs as the last fetch (or push) left them in the tracking namespace, without the
    network; {remote ref: oid}."""
    share = share if share is not None else sharing(git)
    mirrored = git.refs.under(prefix.rstrip("/"))
    return {"refs/" + name[len(prefix):]: oid for name, oid in mirrored.items()
            if name.startswith(prefix) and share.carried("refs/" + name[len(prefix):], local=False)}


def _local(git: Git, share: Sharing | None) -> dict[str, str]:
    """The local refs of the three families that push may send (`share`), or (None) all of them, other
    clones' receipts included: what pull compares the remote's values with."""
    values = git.refs.under(*(fam.rstrip("/") for fam in FAMILIES))
    return {ref: oid for ref, oid in values.items()
            if ref.startswith(FAMILIES) and (share is None or share.carried(ref, local=True))}


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

def unsent(s: Session, remote: str, only: Callable[[str], bool] | None = None) -> bool:
    """Whether a push could have anything to do, judged without the network: a local ref differs
    from the remote as last fetched, or a released remote lane's branch waits to be deleted."""
    git = s.git
    _, prefix = resolve_remote(git, remote)
    share = sharing(git)
    last = seen(git, prefix, share)
    local = _local(git, share)
    if any(oid != last.get(ref) for ref, oid in local.items() if only is None or only(ref)):
        return True
    return bool(_deletions(Records(s, last), local, last, only)[0])


def push(s: Session, remote: str = "origin", only: Callable[[str], bool] | None = None,
         fetched: bool = False) -> dict[str, Any]:
    """One atomic push with a lease on every ref (`only`: the refs to consider); see the module docstring.
    `fetched`: judge against the tracking namespace as the last fetch or push left it instead of
    fetching first (a loop that just pulled); the leases still hold the push to what the remote holds."""
    git = s.git
    target, prefix = resolve_remote(git, remote)
    share = sharing(git)
    theirs_all = seen(git, prefix, share) if fetched else fetch(git, target, prefix, share)
    records = Records(s, theirs_all)
    local = _local(git, share)
    items, drop = _deletions(records, local, theirs_all, only)
    handled = {i["ref"] for i in items}
    for ref, ours in sorted(local.items()):
        if ref in handled or (only is not None and not only(ref)):
            continue
        theirs = theirs_all.get(ref)
        own = push_status(share, ref, ours, theirs)   # this clone's receipts: no history, replaced under its lease
        relation = _relation(git, ours, theirs) if own is None else ""
        if own is not None:
            item = _item(ref, own, ours, theirs)
        elif relation == "ahead" and theirs is None and records.released(ref):
            item = _item(ref, "released", ours, theirs)
        elif relation == "diverged" and records.replaced_by_lane_commit(ref, ours, theirs):
            item = _item(ref, "remote_ahead", ours, theirs)
        elif relation in ("ahead", "diverged") and theirs is not None and records.replaced_elsewhere(ref, ours):
            item = _item(ref, "replaced", ours, theirs)
        elif relation == "diverged" and ref.startswith(LANE_BRANCH_PREFIX) and git.refs.held_before(ref, theirs):
            # only a lane branch is ever replaced by its writer (the lane commit over the executor's
            # tip); a record, the evidence or a batch branch only grows: diverged is remote_moved
            item = _item(ref, "pushed", ours, theirs, rewound=True)
        else:
            status = {"same": "up_to_date", "ahead": "pushed", "behind": "remote_ahead"}.get(relation, "remote_moved")
            item = _item(ref, status, ours, theirs)
        items.append(item)
    send = [i for i in items if i["status"] == "pushed" or (i["status"] == "deleted" and i["remote"])]
    if send:
        _atomic_push(git, target, prefix, send)
    gone = [(ref, None, oid) for ref, oid in drop.items()
            if next(i for i in items if i["ref"] == ref)["status"] == "deleted"]
    if gone:
        try:
            git.refs.update(gone, "git-lanes: released remote lane")
        except RefRaceError:
            pass   # moved meanwhile: the next push looks again
    items.sort(key=lambda i: i["ref"])
    return {"remote": remote, "refs": items}


def push_retrying(s: Session, remote: str = "origin", only: Callable[[str], bool] | None = None,
                  attempts: int = ATTEMPTS, fetched: bool = False) -> dict[str, Any]:
    """`push`; when a lease failed (the remote moved between our fetch and our push) pull and push
    again, at most `attempts` pushes in all; the last push's document, with `attempts`. `fetched`: the
    first push judges against the last fetch (`push(fetched=True)`); a ref it finds diverged or a lease
    that fails is judged again after a fresh fetch, so an old picture never decides what is reported."""
    for attempt in range(1, attempts + 1):
        stale = fetched and attempt == 1
        doc = push(s, remote, only, fetched=stale)
        again = ("rejected", "remote_moved") if stale else ("rejected",)
        if attempt == attempts or not any(r["status"] in again for r in doc["refs"]):
            doc["attempts"] = attempt
            return doc
        if any(r["status"] == "rejected" for r in doc["refs"]):
            pull(s, remote)
    raise AssertionError("unreachable")


def _deletions(records: Records, local: dict[str, str], theirs_all: dict[str, str],
               only: Callable[[str], bool] | None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The coordinator deletes the branch of a released remote lane that is still its lane commit, on
    the remote (a lease on that value) and here (§14: it owns the branch once it has a lane commit)."""
    items: list[dict[str, Any]] = []
    drop: dict[str, str] = {}
    for rec in records.coordinated():
        for c in rec.children:
            lane = c.lane
            if c.state != "released" or lane is None or lane.remote is None or not lane.lane_commit:
                continue
            ref = branch_ref(lane.branch)
            ours, theirs = local.get(ref), theirs_all.get(ref)
            if (only is not None and not only(ref)) or (ours is None and theirs is None):
                continue
            if theirs not in (None, lane.lane_commit) or ours not in (None, lane.lane_commit):
                continue   # someone moved it after release: the ordinary rules report it
            items.append(_item(ref, "deleted", ours, theirs))
            if ours is not None:
                drop[ref] = ours
    return items, drop


def _atomic_push(git: Git, target: str, prefix: str, send: list[dict[str, Any]]) -> None:
    sends = [(None if i["status"] == "deleted" else i["local"], i["ref"], i["remote"]) for i in send]
    lines = push_atomic(git, target, sends)
    for item in send:
        flag, summary = lines.get(item["ref"], ("!", "not reported by git push"))
        if flag == "!":
            item["status"] = "rejected"
            item["message"] = summary
        elif flag == "=":
            item["status"] = "up_to_date"
    done = [i for i in send if i["status"] in ("pushed", "deleted")]
    if done:  # the tracking namespace mirrors what the remote now holds
        updates = [(_tracking(prefix, i["ref"]), None if i["status"] == "deleted" else i["local"], i["remote"])
                   for i in done]
        with fetch_lock(git, prefix):   # a fetch reading these refs meanwhile would fail on them
            try:
                git.refs.update(updates, "git-lanes: push")
            except RefRaceError:
                pass  # another fetch wrote it meanwhile: the next fetch mirrors the remote again


# -- pull -------------------------------------------------------------------------------------------

def pull(s: Session, remote: str = "origin", attempts: int = 5) -> dict[str, Any]:
    """Fetch into the tracking namespace, then move local refs; see the module docstring."""
    git = s.git
    target, prefix = resolve_remote(git, remote)
    share = sharing(git)
    theirs_all = fetch(git, target, prefix, share)
    local: dict[str, str] | None = _local(git, None)
    settled = _SETTLED.get((git.common_dir, prefix))
    if settled is not None and settled[0] == theirs_all and settled[1] == local:
        return {"remote": remote, "refs": copy.deepcopy(settled[2])}   # a loop's idle poll: nothing to judge
    _prune_remote_tracking(git, remote, theirs_all)
    records = Records(s, theirs_all)
    for _ in range(attempts):
        worktrees = s.worktrees(refresh=True)
        checked_out = {wt.branch: wt.path for wt in worktrees if wt.branch}
        local = local if local is not None else _local(git, None)
        items = []
        refresh: list[str] = []
        for ref, theirs in sorted(theirs_all.items()):
            ours = local.get(ref)
            item = pull_item(share, ref, ours, theirs) or _classify_pull(s, records, ref, ours, theirs,
                                                                         checked_out.get(ref))
            if item.pop("refresh", None):
                refresh.append(checked_out[ref])
            items.append(item)
        moves = [(i["ref"], i["remote"], i["local"]) for i in items if i["status"] == "pulled"]
        if not moves:
            if all(i["status"] in _STILL for i in items):
                _SETTLED[(git.common_dir, prefix)] = (theirs_all, local, copy.deepcopy(items))
            return {"remote": remote, "refs": items}
        try:
            git.refs.update(moves, f"git-lanes: pull from {remote}")
        except RefRaceError:
            local = None
            continue  # a local writer moved one meanwhile: classify again
        for path in refresh:
            git.work.refresh_index(path)
        return {"remote": remote, "refs": items}
    raise refused("batch_busy", "local git-lanes refs kept moving while pulling; run the command again")


def _prune_remote_tracking(git: Git, remote: str, theirs_all: dict[str, str]) -> None:
    """(v4) `refs/remotes/<remote>/imm-lane/*` of lane branches the remote no longer has (released lanes
    the coordinator deleted there) go, as `git fetch --prune` would remove them (SPEC §17.2)."""
    if git.config_get(f"remote.{remote}.url") is None:
        return
    root = f"refs/remotes/{remote}/imm-lane"
    gone = [(ref, None, oid) for ref, oid in git.refs.under(root).items()
            if ref.startswith(root + "/") and "refs/heads/imm-lane/" + ref[len(root) + 1:] not in theirs_all]
    if gone:
        try:
            git.refs.update(gone, f"git-lanes: pull from {remote} prunes released lanes")
        except RefRaceError:
            pass   # moved meanwhile: the next pull looks again


def _classify_pull(s: Session, records: Records, ref: str, ours: str | None, theirs: str,
                   worktree: str | None) -> dict[str, Any]:
    relation = _relation(s.git, ours, theirs)
    if relation == "same":
        return _item(ref, "up_to_date", ours, theirs)
    replaced = worktree is None and ours is not None and relation != "behind" and records.replaced_elsewhere(ref, ours)
    if relation == "ahead":
        return _item(ref, "pulled", ours, theirs, rewound=True) if replaced else _item(ref, "local_ahead", ours, theirs)
    rewound = {"rewound": True} if relation == "diverged" else {}
    if worktree is not None:
        if _lane_commit_arrives(s, records, ref, theirs, worktree):
            return _item(ref, "pulled", ours, theirs, refresh=True, **rewound)
        return _item(ref, "checked_out" if relation == "behind" else "remote_moved", ours, theirs)
    if relation == "diverged":
        return _item(ref, "pulled", ours, theirs, **rewound) if replaced else _item(ref, "remote_moved", ours, theirs)
    if ours is None and records.released(ref):
        return _item(ref, "released", ours, theirs)
    if ours is None and not records.wanted_here(ref):
        return _item(ref, "elsewhere", ours, theirs)
    return _item(ref, "pulled", ours, theirs)


def _lane_commit_arrives(s: Session, records: Records, ref: str, theirs: str, worktree: str) -> bool:
    """A lane branch checked out here may move to the lane commit the record names for it when the
    worktree delivers exactly that commit's tree (nothing in the worktree changes)."""
    from ..domain.snapshot import snapshot_tree

    if records.lane_commit_of(ref) != theirs or not s.git.odb.has(theirs):
        return False
    return snapshot_tree(s.git, worktree) == s.git.odb.tree_of(theirs)
