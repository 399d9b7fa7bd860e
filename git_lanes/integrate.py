"""The integration engine (SPEC §8): lane commit, candidate, identity gate, rerun, fast-forward.

Every function here either returns what it built or raises `Park(reason)`: the tick parks the
child with that reason, leaves the batch branch unmoved and goes on with disjoint siblings.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from .checks import CheckResult, child_env, run_checks, run_command
from .gitio import Git, RefRaceError
from .model import BatchRecord, Child, QaAttempt, parse_time
from .plan import Intent
from .session import Session


class Park(Exception):
    """Integration of one child stops here; `reason` is its park reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- per-path change identity ---------------------------------------------------------------

def _tree_of(git: Git, rev: str) -> bytes:
    obj = git.repo.object_store[rev.encode()]
    return obj.tree if obj.type_name == b"commit" else obj.id


def change_identity(git: Git, a: str, b: str) -> dict[str, tuple[str, str]]:
    """{path: (new mode, new blob)} of the change a -> b (commits or trees; deletions as
    ("000000", zeros)). In-process, skipping unchanged subtrees: work in proportion to the change."""
    from dulwich.diff_tree import tree_changes

    out: dict[str, tuple[str, str]] = {}
    for change in tree_changes(git.repo.object_store, _tree_of(git, a), _tree_of(git, b)):
        if change.new is not None and change.new.path is not None:
            out[change.new.path.decode("utf-8", "surrogateescape")] = (f"{change.new.mode:06o}", change.new.sha.decode())
        if change.old is not None and change.old.path is not None:
            path = change.old.path.decode("utf-8", "surrogateescape")
            if change.new is None or change.new.path is None or change.new.path != change.old.path:
                out.setdefault(path, ("000000", "0" * 40))
    return out


def paths_outside_scope(git: Git, base: str, tree: str, scope: list[str]) -> list[str]:
    """Changed paths base -> tree that Git's pathspec matching puts outside every scope entry."""
    changed = set(change_identity(git, base, tree))
    if not changed:
        return []
    specs = []
    for entry in scope:
        e = entry.strip().rstrip("/")
        specs += [f":(glob){e}", f":(glob){e}/**"]
    raw = git.run("diff-tree", "-r", "--no-renames", "--name-only", "-z", "--no-commit-id", base, tree, "--", *specs).stdout
    inside = {p for p in raw.decode("utf-8", "surrogateescape").split("\0") if p}
    return sorted(changed - inside)


# -- lane commit (§8.2) -----------------------------------------------------------------------

def _ident_bytes(ident: str | None) -> bytes | None:
    if ident and "<" in ident and ident.strip().endswith(">"):
        return ident.strip().encode()
    return None


def build_lane_commit(s: Session, record: BatchRecord, child: Child, attempt: QaAttempt, goal: str,
                      lane_tip: str) -> tuple[str, list[str]]:
    """(lane commit id, executor commits): deterministic, so a re-run builds the same commit."""
    from dulwich.objects import Commit

    lane = child.lane
    assert lane is not None
    git = s.git
    executor: list[str] = list(lane.executor_commits)
    if lane_tip != lane.base_head and lane_tip not in executor and git.has_object(lane_tip):
        listed = git.out("rev-list", "--reverse", f"{lane.base_head}..{lane_tip}")
        executor = [c for c in listed.split("\n") if c]
    author = None
    if executor:
        last = git.repo.object_store[executor[-1].encode()]
        author = last.author
    author = author or _ident_bytes(attempt.author_ident) or b"git-lanes <git-lanes@localhost>"
    name, email = git.ident("COMMITTER")
    stamp = int(parse_time(attempt.at).timestamp())
    c = Commit()
    c.tree = attempt.tree.encode()
    c.parents = [lane.base_head.encode()]
    c.author = author
    c.committer = f"{name} <{email}>".encode()
    c.author_time = c.commit_time = stamp
    c.author_timezone = c.commit_timezone = 0
    c.encoding = b"UTF-8"
    subject = goal.strip().splitlines()[0].strip() if goal.strip() else child.task_id
    c.message = (f"imm({child.task_id}): {subject}\n\nLanes-Batch: {record.batch_id}\n"
                 f"Lanes-Task: {child.task_id}\n").encode()
    git.repo.object_store.add_object(c)
    return c.id.decode(), executor


def move_lane_branch(s: Session, child: Child) -> None:
    """Move the lane branch to its lane commit (compare-and-swap) and refresh the lane's index."""
    lane = child.lane
    assert lane is not None and lane.lane_commit
    git = s.git
    ref = "refs/heads/" + lane.branch
    tip = git.resolve(ref)
    if tip == lane.lane_commit:
        return
    if tip is not None and tip != lane.base_head and tip not in lane.executor_commits:
        return  # the executor moved on after settling; leave the lane alone (audit reports it)
    try:
        git.update_ref(ref, lane.lane_commit, tip, f"git-lanes: lane commit of {child.task_id}")
    except RefRaceError:
        return
    if os.path.isdir(lane.path):
        git.run("reset", "-q", "--mixed", cwd=lane.path, check=False)


# -- candidate (§8.3) ---------------------------------------------------------------------------

def build_candidate(git: Git, head: str, lane_commit: str, base: str) -> str:
    """The lane commit itself when its base is the head; else merge-tree + commit-tree."""
    if base == head:
        return lane_commit
    proc = git.run("merge-tree", "--write-tree", "--no-messages", head, lane_commit, check=False)
    if proc.returncode == 1:
        raise Park(f"batch_integration_conflict: lane commit {lane_commit} does not apply cleanly onto batch head {head}")
    if proc.returncode != 0:
        from .gitio import GitError

        raise GitError(["git", "merge-tree", "--write-tree", head, lane_commit], proc.returncode,
                       proc.stderr.decode("utf-8", "replace"))
    tree = proc.stdout.decode().split("\n", 1)[0].strip()
    from dulwich.objects import Commit

    lc = git.repo.object_store[lane_commit.encode()]
    c = Commit()
    c.tree = tree.encode()
    c.parents = [head.encode()]
    c.author, c.author_time, c.author_timezone = lc.author, lc.author_time, lc.author_timezone
    c.committer, c.commit_time, c.commit_timezone = lc.committer, lc.commit_time, lc.commit_timezone
    c.encoding = b"UTF-8"
    c.message = lc.message
    git.repo.object_store.add_object(c)
    return c.id.decode()


def check_identity(git: Git, base: str, lane_commit: str, head: str, candidate: str) -> dict[str, tuple[str, str]]:
    change = change_identity(git, base, lane_commit)
    if not change or change != change_identity(git, head, candidate):
        raise Park(f"batch_integration_conflict: candidate {candidate} does not carry the lane commit {lane_commit} change")
    return change


# -- the scratch worktree ------------------------------------------------------------------------

class Scratch:
    """One detached worktree per batch under the Git common dir, for reruns and final checks."""

    def __init__(self, s: Session, record: BatchRecord) -> None:
        self.s = s
        self.git = s.git
        self.record = record
        self.path = os.path.join(s.git.common_dir, "lanes", "scratch", record.batch_id)

    def _keep(self) -> list[str]:
        return self.git.config_all("lanes.keep")

    def _setup(self) -> None:
        cmd = self.git.config_get("lanes.setupCommand")
        if not cmd:
            return
        env = child_env(os.environ, self.git.local_env_vars, slug=self.record.slug,
                        batch=self.record.batch_id, task="")
        result = run_command("setup", cmd, cwd=self.path, env=env, timeout=1800)
        if not result.passed:
            self.s.warn(f"lanes.setupCommand failed in the scratch worktree (exit {result.exit_code}): "
                        f"{result.output_tail.strip().splitlines()[-1] if result.output_tail.strip() else ''}")

    def move_to(self, commit: str) -> str:
        """Check the scratch worktree out at `commit`, touching only changed files, then clean it."""
        git = self.git
        registered = self.s.worktree_at(self.path) is not None
        if not registered or not os.path.isdir(self.path):
            if os.path.exists(self.path):
                shutil.rmtree(self.path)
            git.run("worktree", "prune")
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            git.run("worktree", "add", "--detach", "-q", self.path, commit)
            self.s.worktrees(refresh=True)
            self._setup()
            return self.path
        git.run("checkout", "-q", "-f", "--detach", commit, cwd=self.path)
        excludes = []
        for pattern in self._keep():
            excludes += ["-e", pattern]
        git.run("clean", "-q", "-ffdx", *excludes, cwd=self.path)
        if any(not os.path.exists(os.path.join(self.path, p.strip().rstrip("/"))) for p in self._keep()
               if p.strip() and not any(ch in p for ch in "*?[")):
            self._setup()
        return self.path

    def run(self, commit: str, items: list[tuple[str, str, str, float]]) -> list[CheckResult]:
        """Run (task, id, command, timeout) items at `commit`; each result id is `<task>:<id>`."""
        self.move_to(commit)
        results = []
        for task, check_id, command, timeout in items:
            env = child_env(os.environ, self.git.local_env_vars, slug=self.record.slug,
                            batch=self.record.batch_id, task=task)
            r = run_checks([(check_id, command, timeout)], cwd=self.path, env=env)[0]
            results.append(CheckResult(f"{task}:{r.id}" if task else r.id, r.command, r.exit_code, r.signal,
                                       r.passed, r.duration_ms, r.output_tail))
        return results


def rerun_items(intents: list[tuple[str, Intent]]) -> list[tuple[str, str, str, float]]:
    return [(task, a.id, a.check, float(a.timeout_s)) for task, intent in intents for a in intent.acceptance]


def fast_forward(git: Git, coordinator: str, branch: str, head: str, candidate: str) -> None:
    """`merge --ff-only` in the coordinator, only from the head we checked (Git's own CAS)."""
    current = git.rev_parse("HEAD", cwd=coordinator)
    if current != head:
        raise Park(f"batch_head_lineage_broken: the batch head moved from {head} to {current} during integration")
    git.run("-c", "maintenance.auto=false", "merge", "--ff-only", "--no-verify-signatures", "-q", candidate,
            cwd=coordinator)
    if git.resolve("refs/heads/" + branch) != candidate:
        raise Park(f"batch_head_lineage_broken: the fast-forward to {candidate} did not land")


def evidence_note(record: BatchRecord, child: Child, attempt: QaAttempt | None, rerun: list[CheckResult],
                  identity: dict[str, Any] | None) -> dict[str, Any]:
    lane = child.lane
    return {
        "batch_id": record.batch_id, "task_id": child.task_id,
        "lane_base": lane.base_head if lane else None, "lane_commit": lane.lane_commit if lane else None,
        "executor_commits": list(lane.executor_commits) if lane else [],
        "attempt": attempt.model_dump(mode="json") if attempt else None,
        "rerun": [r.to_json() for r in rerun], "intent_identity": identity,
    }


@dataclass
class Claim:
    """A commit on the batch branch that says it integrates a task of this batch."""
    commit: str
    task_id: str


def claims_between(git: Git, batch_id: str, expected: str, head: str) -> list[Claim]:
    """Commits in expected..head carrying this batch's `Lanes-Batch` trailer."""
    if expected == head:
        return []
    raw = git.out("log", "--format=%H%x00%B%x01", f"{expected}..{head}")
    out = []
    for item in raw.split("\x01"):
        item = item.strip("\n")
        if not item:
            continue
        sha, _, body = item.partition("\0")
        lines = body.splitlines()
        trailers = dict(l.split(": ", 1) for l in lines if l.startswith("Lanes-") and ": " in l)
        if trailers.get("Lanes-Batch") == batch_id:
            out.append(Claim(sha.strip(), trailers.get("Lanes-Task", "")))
    return out
