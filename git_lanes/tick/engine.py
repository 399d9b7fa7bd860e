"""The integration engine (SPEC §8): lane commit, candidate, identity gate, fast-forward, claims.

Every function here either returns what it built or raises `Park(reason)`: the tick parks the
child with that reason, leaves the batch branch unmoved and goes on with disjoint siblings.
Lane commits and candidates are deterministic (dates from the attempt, committer from the
coordinator), so a re-run after a crash builds the same commits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.crash import crash_point
from ..core.model import parse_time
from ..gitio import RefRaceError, branch_ref, trailers

if TYPE_CHECKING:
    from ..core.model import BatchRecord, Child, QaAttempt
    from ..domain.checks import CheckResult
    from ..domain.session import Session
    from ..gitio import Git
    from ..plan.intent import Intent

FALLBACK_AUTHOR = "git-lanes <git-lanes@localhost>"


class Park(Exception):
    """Integration of one child stops here; `reason` is its park reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ident(ident: str | None) -> str | None:
    if ident and "<" in ident and ident.strip().endswith(">"):
        return ident.strip()
    return None


def build_lane_commit(git: "Git", record: "BatchRecord", child: "Child", attempt: "QaAttempt", goal: str,
                      lane_tip: str) -> tuple[str, list[str]]:
    """(lane commit id, executor commits) — SPEC §8.2."""
    lane = child.lane
    assert lane is not None
    executor: list[str] = list(lane.executor_commits)
    if lane_tip != lane.base_head and lane_tip not in executor and git.odb.has(lane_tip):
        executor = git.odb.commits(lane_tip, lane.base_head)
    author = git.odb.commit(executor[-1]).author if executor else None
    author = author or _ident(attempt.author_ident) or FALLBACK_AUTHOR
    name, email = git.ident("COMMITTER")
    stamp = int(parse_time(attempt.at).timestamp())
    subject = goal.strip().splitlines()[0].strip() if goal.strip() else child.task_id
    message = f"imm({child.task_id}): {subject}\n\nLanes-Batch: {record.batch_id}\nLanes-Task: {child.task_id}\n"
    commit = git.odb.write_commit(attempt.tree, [lane.base_head], message, author=author,
                                  committer=f"{name} <{email}>", author_time=stamp)
    return commit, executor


_REFRESHED: set[tuple[str | None, str]] = set()   # (lane, lane commit) whose index this process saw refreshed


def lane_branch_moves(s: "Session", child: "Child") -> list[tuple[str, str, str | None]]:
    """The compare-and-swap that moves the lane branch to its lane commit: none when it is there
    already, or when the executor moved on after settling (the lane is left alone; audit reports it)."""
    lane = child.lane
    assert lane is not None and lane.lane_commit
    ref = branch_ref(lane.branch)
    tip = s.git.refs.resolve(ref)
    if tip == lane.lane_commit or tip is not None and tip != lane.base_head and tip not in lane.executor_commits:
        return []
    return [(ref, lane.lane_commit, tip)]


def move_lane_branch(s: "Session", child: "Child", moved: bool = False) -> None:
    """Move the lane branch to its lane commit (compare-and-swap; the record's write moves it as a
    rule, this finishes a move a crash left undone) and refresh the lane's index (only when it does
    not hold the lane commit's tree already; `moved`: this process just moved it, so it cannot)."""
    lane = child.lane
    assert lane is not None and lane.lane_commit
    tip = s.git.refs.resolve(branch_ref(lane.branch))
    if moved and tip == lane.lane_commit:
        pass
    elif tip != lane.lane_commit:
        moves = lane_branch_moves(s, child)
        if not moves:
            return  # the executor moved on after settling; leave the lane alone (audit reports it)
        try:
            s.git.refs.update(moves, f"git-lanes: lane commit of {child.task_id}")
        except RefRaceError:
            return
    elif (lane.path, lane.lane_commit) in _REFRESHED:
        return
    elif not (lane.path and os.path.isdir(lane.path)) or s.git.work.index_matches(lane.path, lane.lane_commit):
        _REFRESHED.add((lane.path, lane.lane_commit))
        return
    # refreshed whenever the branch is found on its lane commit with another index: a kill between the
    # move and the refresh must not leave the lane dirty for ever (a lane of another clone refreshes on
    # its pull, §14). The index observation prepared for the settled tree saves a scan of the lane.
    crash_point("lane-branch-moved")
    if lane.path and os.path.isdir(lane.path):
        if s.git.work.install_index(lane.path, s.git.odb.tree_of(lane.lane_commit)):
            # that index was found to hold every file of the lane when the child settled: the lane is
            # clean (a stale answer is harmless, LocalLanes.clean says why), its release need not scan it
            from ..domain.lanehost import seen_clean

            seen_clean(lane.path, lane.lane_commit)
            _REFRESHED.add((lane.path, lane.lane_commit))
        elif s.git.work.refresh_index(lane.path):
            _REFRESHED.add((lane.path, lane.lane_commit))


def build_candidate(git: "Git", head: str, lane_commit: str, base: str) -> str:
    """The lane commit itself when its base is the head; else merge-tree + commit-tree (§8.3)."""
    if base == head:
        return lane_commit
    tree = git.odb.merge_tree(head, lane_commit)
    if tree is None:
        raise Park(f"batch_integration_conflict: lane commit {lane_commit} does not apply cleanly onto batch head {head}")
    lc = git.odb.commit(lane_commit)
    return git.odb.write_commit(tree, [head], lc.message, author=lc.author, committer=lc.committer,
                                author_time=lc.author_time, commit_time=lc.commit_time)


def check_identity(git: "Git", base: str, lane_commit: str, head: str, candidate: str) -> None:
    """The per-path change base -> lane commit equals head -> candidate (and is not empty)."""
    change = git.odb.change_identity(base, lane_commit)
    if not change or change != git.odb.change_identity(head, candidate):
        raise Park(f"batch_integration_conflict: candidate {candidate} does not carry the lane commit {lane_commit} change")


def rerun_items(intents: list[tuple[str, "Intent"]]) -> list[tuple[str, str, str, float]]:
    """(task, check id, command, timeout) of every acceptance check of the given intents."""
    return [(task, a.id, a.check, float(a.timeout_s)) for task, intent in intents for a in intent.acceptance]


def rerun_specs(intents: list[tuple[str, "Intent"]]) -> dict[tuple[str, str], tuple[list[str] | None, bool]]:
    """{(task, check id): (declared `inputs` or None, whether it may have a receipt)} (SPEC §8.7 v4)."""
    return {(task, a.id): (list(a.inputs) if a.inputs else None, a.receipts is not False)
            for task, intent in intents for a in intent.acceptance}


def fast_forward(git: "Git", coordinator: str, branch: str, head: str, candidate: str, mark: str) -> None:
    """`merge --ff-only` in the coordinator, only from the head we checked (Git's own CAS). The file
    `mark` (`store.fast_forward_mark`) exists from just before the merge until it succeeded: a kill
    inside it (or a merge that failed) leaves the file for the next hold's repair
    (`repair.ensure_branch`)."""
    ref = branch_ref(branch)
    # the coordinator's HEAD read from its files (no process) while it is on the branch, as it should be
    current = git.refs.resolve(ref) if git.work.head_ref(coordinator) == ref else git.rev_parse("HEAD", cwd=coordinator)
    if current != head:
        raise Park(f"batch_head_lineage_broken: the batch head moved from {head} to {current} during integration")
    os.makedirs(os.path.dirname(mark), exist_ok=True)
    with open(mark, "w") as fh:
        fh.write(candidate + "\n")
    crash_point("fast-forward-marked")
    git.work.fast_forward(coordinator, candidate)
    os.unlink(mark)   # kept when the merge failed: it may have written the index before it did
    if git.refs.resolve(ref) != candidate:
        raise Park(f"batch_head_lineage_broken: the fast-forward to {candidate} did not land")


def evidence_note(record: "BatchRecord", child: "Child", attempt: "QaAttempt | None", rerun: list["CheckResult"],
                  identity: dict[str, Any] | None) -> dict[str, Any]:
    lane = child.lane
    passed = attempt.model_dump(mode="json") if attempt else None   # results as recorded: 4 KiB tails (§2.1)
    note = {
        "batch_id": record.batch_id, "task_id": child.task_id,
        "lane_base": lane.base_head if lane else None, "lane_commit": lane.lane_commit if lane else None,
        "executor_commits": list(lane.executor_commits) if lane else [],
        "attempt": passed, "rerun": [r.to_json() for r in rerun], "intent_identity": identity,
    }
    # (v4, SPEC §8.8) the commit is flagged when a check passed only on a retry, in its lane or on it
    flaky = [r["id"] for r in (passed or {}).get("results", []) if r.get("flaky")] + [r.id for r in rerun if r.flaky]
    if flaky:
        note["flaky"] = flaky
    return note


@dataclass
class Claim:
    """A commit on the batch branch that says it integrates a task of this batch."""
    commit: str
    task_id: str


def claims_between(git: "Git", batch_id: str, expected: str, head: str) -> list[Claim]:
    """Commits in expected..head carrying this batch's `Lanes-Batch` trailer."""
    found = []
    for sha, message in git.odb.messages(expected, head):
        t = trailers(message)
        if t.get("Lanes-Batch") == batch_id:
            found.append(Claim(sha, t.get("Lanes-Task", "")))
    return found

