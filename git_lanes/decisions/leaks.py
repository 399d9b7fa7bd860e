"""Leak restore (SPEC §9), the decision: which coordinator changes are provably a lane's.

Facts in, verdict out; nothing here touches Git or the file system. A coordinator entry is a
lane write only when it is untracked (`??`) or modified in the worktree only (` M`), its
current version (kind and bytes) equals one of that lane's versions (its worktree, or a commit
of `base..imm-lane/<slug>/<task>`) and its bytes differ from the lane base's version (absent at
the base counts as different). Any entry that is not provable refuses the whole restore.
"""

from __future__ import annotations

from dataclasses import dataclass

UNTRACKED = "??"
MODIFIED = " M"


@dataclass(frozen=True)
class Version:
    """A file as Git sees it: `kind` is `file`, `exec` or `link`; `blob` the object id of its bytes."""
    kind: str
    blob: str


@dataclass(frozen=True)
class LaneVersions:
    """What one lane holds at one path."""
    task_id: str
    base: Version | None              # the lane base's version (None: absent at the base)
    versions: tuple[Version, ...]     # its worktree's and its commits' versions (absent ones left out)


@dataclass(frozen=True)
class LeakFacts:
    """One entry of the coordinator's `git status`, with what every lane holds at its path."""
    path: str
    xy: str
    current: Version | None                 # the coordinator's file; None: not a file or symbolic link
    head: Version | None = None             # HEAD's version (for modified entries)
    lanes: tuple[LaneVersions, ...] = ()    # in plan order


@dataclass(frozen=True)
class Proven:
    path: str
    kind: str          # untracked | modified
    lane_task_id: str


@dataclass(frozen=True)
class Verdict:
    proven: tuple[Proven, ...] = ()
    refusal: tuple[str, str] | None = None  # (path, detail) of the first entry that is not provable


def needs_versions(xy: str) -> bool:
    """Only these entries can be lane writes; the others are refused without looking at lanes."""
    return xy in (UNTRACKED, MODIFIED)


def entry_refusal(xy: str) -> str | None:
    """Why an entry, by its status letters alone, can never be a lane write (None: it may be)."""
    if needs_versions(xy):
        return None
    index, work = xy[0], xy[1]
    if xy == "!!":
        return "ignored by Git"
    if index in "UDA" and work in "UDA" and (index == "U" or work == "U" or index == work):
        return f"unmerged (status '{xy}'); finish or abort the merge in the coordinator yourself"
    if index not in " ?":
        return (f"staged in the coordinator's index (status '{xy}'); git-lanes only restores unstaged lane "
                "writes, so it leaves staged changes to you")
    if work == "D":
        return "deleted in the coordinator (status ' D'); a deletion is never proven to be a lane's write"
    if work == "T":
        return "its type changed in the coordinator (status ' T'); that is never proven to be a lane's write"
    return f"status '{xy}' is not an unstaged lane write"


def prove(entry: LeakFacts) -> Proven | str:
    """The lane that wrote this entry, or why that cannot be proven."""
    why = entry_refusal(entry.xy)
    if why is not None:
        return why
    current = entry.current
    if current is None:
        return "not a regular file or symbolic link in the coordinator"
    kind = "untracked" if entry.xy == UNTRACKED else "modified"
    equal_to_base: list[str] = []
    other_mode: list[str] = []
    for lane in entry.lanes:
        if current in lane.versions:
            if lane.base is not None and lane.base.blob == current.blob:
                equal_to_base.append(lane.task_id)
                continue
            return Proven(entry.path, kind, lane.task_id)
        if any(v.blob == current.blob for v in lane.versions):
            other_mode.append(lane.task_id)
    if entry.head is not None and entry.head.blob == current.blob and entry.head.kind != current.kind:
        return ("only its mode changed in the coordinator; a mode change is never proven to be a lane's write; "
                "restore the mode yourself, then tick again")
    if other_mode:
        return (f"its content equals {other_mode[0]}'s version but its mode does not "
                f"(a mode change of its own); stash or move it, then tick again")
    if equal_to_base:
        return (f"it equals the lane base's version of {equal_to_base[0]}, so no lane changed it; "
                "stash or move it, then tick again")
    return ("its content matches no lane's version (a change of your own?); stash or move it, "
            "then tick again")


def decide(entries: list[LeakFacts] | tuple[LeakFacts, ...]) -> Verdict:
    """Every entry proven -> restore them all; the first unprovable one refuses everything."""
    proven = []
    for entry in entries:
        result = prove(entry)
        if isinstance(result, str):
            return Verdict(refusal=(entry.path, result))
        proven.append(result)
    return Verdict(proven=tuple(proven))
