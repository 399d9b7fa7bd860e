"""One command's view of the repository: the gateway, the stores, the clock, batch choice."""

from __future__ import annotations

import os
import sys
from typing import Callable

from .errors import ExitCode, LanesError, usage
from .gitio import Git, Worktree
from .model import BatchRecord, now
from .plan import Plan, check_id, load_plan
from .store import BatchStore, EvidenceNotes, LaneStore

LANE_PREFIX = "refs/heads/imm-lane/"
BATCH_PREFIX = "refs/heads/imm/"
# Plans are pure functions of immutable objects: cached by (slug, tree id of .lanes/<slug>) and by
# (slug, commit) so that the many effective-intent look-ups of a tick cost no object reads.
_PLANS: dict[tuple[str, bytes], Plan] = {}
_PLAN_OF_COMMIT: dict[tuple[str, str], Plan] = {}


def batch_branch(slug: str) -> str:
    return f"imm/{slug}"


def lane_branch(slug: str, task_id: str) -> str:
    return f"imm-lane/{slug}/{task_id}"


def _warn_stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


class Session:
    """The repository as seen by one command, plus the clock and the warning sink."""

    def __init__(self, cwd: str | None = None, *, warn: Callable[[str], None] = _warn_stderr,
                 clock: Callable[[], str] = now, environ=None) -> None:
        self.git = Git(cwd, environ)
        self.warn = warn
        self.clock = clock
        self.batches = BatchStore(self.git)
        self.lanes = LaneStore(self.git)
        self.evidence = EvidenceNotes(self.git)
        self._worktrees: list[Worktree] | None = None
        self._by_path: dict[str, Worktree] = {}

    # -- plan ---------------------------------------------------------------------------------

    def plan_files(self, commit: str, slug: str) -> dict[str, bytes] | None:
        """Bare file name -> bytes for the blobs of `.lanes/<slug>/` at `commit` (None: no folder)."""
        from dulwich.object_store import tree_lookup_path

        store = self.git.repo.object_store
        try:
            root = store[commit.encode()].tree
            mode, sha = tree_lookup_path(store.__getitem__, root, f".lanes/{slug}".encode())
        except KeyError:
            return None
        if mode != 0o040000:
            return None
        files = {}
        for entry in store[sha].iteritems():
            if entry.mode in (0o100644, 0o100755):
                files[entry.path.decode("utf-8", "surrogateescape")] = store[entry.sha].data
        return files

    def plan_at(self, commit: str, slug: str) -> Plan:
        cached = _PLAN_OF_COMMIT.get((slug, commit))
        if cached is not None:
            return cached
        plan = self._plan_at(commit, slug)
        if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit):   # an object id, not a ref
            if len(_PLAN_OF_COMMIT) >= 1024:
                _PLAN_OF_COMMIT.clear()
            _PLAN_OF_COMMIT[(slug, commit)] = plan
        return plan

    def _plan_at(self, commit: str, slug: str) -> Plan:
        from dulwich.object_store import tree_lookup_path

        store = self.git.repo.object_store
        try:
            _mode, sha = tree_lookup_path(store.__getitem__, store[commit.encode()].tree, f".lanes/{slug}".encode())
        except KeyError:
            sha = None
        plan = _PLANS.get((slug, sha)) if sha is not None else None
        if plan is not None:
            return plan
        files = self.plan_files(commit, slug)
        if files is None:
            raise usage(f"no initiative .lanes/{slug}/ at {commit[:12]}")
        plan = load_plan(slug, files)
        if sha is not None:
            if len(_PLANS) >= 64:
                _PLANS.clear()
            _PLANS[(slug, sha)] = plan
        return plan

    # -- worktrees ----------------------------------------------------------------------------

    def worktrees(self, refresh: bool = False) -> list[Worktree]:
        """`git worktree list`, read once per command (`refresh` after adding or removing one)."""
        if self._worktrees is None or refresh:
            self._worktrees = self.git.worktrees()
            self._by_path = {os.path.realpath(wt.path): wt for wt in self._worktrees}
        return self._worktrees

    def worktree_at(self, path: str) -> Worktree | None:
        self.worktrees()
        return self._by_path.get(os.path.realpath(path))

    def worktree_on(self, branch: str) -> Worktree | None:
        ref = "refs/heads/" + branch
        for wt in self.worktrees():
            if wt.branch == ref:
                return wt
        return None

    def current_branch(self) -> str | None:
        if self.git.toplevel is None:
            return None
        wt = self.worktree_at(self.git.toplevel)
        return wt.branch if wt else None

    # -- choosing the batch ---------------------------------------------------------------------

    def choose_slug(self, slug: str | None) -> str:
        """SPEC §6: the slug of the current branch, else the only active batch, else the latest
        batch of the only slug, else exit 2 listing the candidates."""
        if slug is not None:
            check_id(slug, "slug")
            return slug
        branch = self.current_branch() or ""
        if branch.startswith(BATCH_PREFIX):
            return branch[len(BATCH_PREFIX):]
        if branch.startswith(LANE_PREFIX):
            return branch[len(LANE_PREFIX):].split("/", 1)[0]
        slugs = self.batches.slugs()
        if not slugs:
            raise usage("no batch in this repository (start one with 'git lanes start <slug>')")
        if len(slugs) == 1:
            return slugs[0]
        active = []
        for candidate in slugs:
            snap = self.batches.read(candidate)
            if snap is not None and not snap.record.terminal:
                active.append(candidate)
        if len(active) == 1:
            return active[0]
        raise usage("more than one batch; name one of: " + ", ".join(active or slugs))

    def lane_task(self) -> tuple[str, str]:
        """(slug, task id) of the lane the command runs in, from its branch."""
        branch = self.current_branch() or ""
        if not branch.startswith(LANE_PREFIX):
            raise usage("not in a lane (the current branch is not imm-lane/<slug>/<task>)")
        slug, _, task = branch[len(LANE_PREFIX):].partition("/")
        return slug, task

    def record(self, slug: str) -> BatchRecord:
        snap = self.batches.read(slug)
        if snap is None:
            raise LanesError(f"no batch for {slug}", exit_code=ExitCode.USAGE)
        return snap.record
