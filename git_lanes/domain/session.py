"""One command's view of the repository: the gateway, the stores, the clock, batch choice."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Callable

from ..core.clock import now
from ..core.errors import ExitCode, LanesError, usage
from ..core.ids import check_id
from ..gitio import (BATCH_BRANCH_PREFIX, LANE_BRANCH_PREFIX, BatchBranch, Git, LaneBranch, Worktree, WorktreeList,
                     branch_ref, is_oid)
from ..store import BatchStore, EvidenceNotes, LaneStore

if TYPE_CHECKING:   # the models load on first use: a lane command never needs them (issue 15)
    from ..core.model import BatchRecord
    from ..plan.initiative import Plan

LANE_PREFIX = LANE_BRANCH_PREFIX
BATCH_PREFIX = BATCH_BRANCH_PREFIX
# Plans are pure functions of immutable objects: cached by (slug, tree id of .lanes/<slug>) and by
# (slug, commit) so that the many effective-intent look-ups of a tick cost no object reads.
_PLANS: dict[tuple[str, str], "Plan"] = {}
_PLAN_OF_COMMIT: dict[tuple[str, str], "Plan"] = {}


def batch_branch(slug: str) -> str:
    return BatchBranch(slug).name


def lane_branch(slug: str, task_id: str) -> str:
    return LaneBranch(slug, task_id).name


def _warn_stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


class Session:
    """The repository as seen by one command, plus the clock and the warning sink."""

    def __init__(self, cwd: str | None = None, *, warn: Callable[[str], None] = _warn_stderr,
                 clock: Callable[[], str] = now, environ=None, lane_side: bool = False) -> None:
        # a lane command's session: the gateway picks its cheapest way to start (issue 15)
        self.git = Git(cwd, environ, warn=warn, lean=lane_side)
        self.warn = warn
        self.clock = clock
        self.batches = BatchStore(self.git)
        self.lanes = LaneStore(self.git)
        self.evidence = EvidenceNotes(self.git)
        self._worktrees: WorktreeList | None = None

    def transaction(self, slug: str, actor: str, expect: str | None | bool = False):
        """The slug's record transaction (`with s.transaction(slug, actor) as tx:`)."""
        return self.batches.transaction(slug, actor=actor, clock=self.clock, warn=self.warn, expect=expect)

    # -- plan ---------------------------------------------------------------------------------

    def plan_tree(self, commit: str, slug: str) -> str | None:
        """The tree id of `.lanes/<slug>` at `commit` (None: no such folder)."""
        entry = self.git.odb.entry_at(commit, f".lanes/{slug}")
        return entry.oid if entry is not None and entry.mode == 0o040000 else None

    def plan_files(self, commit: str, slug: str) -> dict[str, bytes] | None:
        """Bare file name -> bytes for the files of `.lanes/<slug>/` at `commit` (None: no folder)."""
        tree = self.plan_tree(commit, slug)
        if tree is None:
            return None
        odb = self.git.odb
        return {e.name: odb.blob(e.oid) for e in odb.entries(tree) if e.mode in (0o100644, 0o100755)}

    def plan_at(self, commit: str, slug: str) -> "Plan":
        """The initiative `.lanes/<slug>/` as committed at `commit` (validated; cached)."""
        from ..plan.initiative import load_plan

        cached = _PLAN_OF_COMMIT.get((slug, commit))
        if cached is not None:
            return cached
        tree = self.plan_tree(commit, slug)
        plan = _PLANS.get((slug, tree)) if tree is not None else None
        if plan is None:
            files = self.plan_files(commit, slug)
            if files is None:
                raise self._no_plan(slug, commit)
            plan = load_plan(slug, files)
            if tree is not None:
                if len(_PLANS) >= 64:
                    _PLANS.clear()
                _PLANS[(slug, tree)] = plan
        if is_oid(commit):   # an object id, not a ref
            if len(_PLAN_OF_COMMIT) >= 1024:
                _PLAN_OF_COMMIT.clear()
            _PLAN_OF_COMMIT[(slug, commit)] = plan
        return plan

    def _no_plan(self, slug: str, commit: str) -> LanesError:
        """No `.lanes/<slug>/` at `commit`; when the working tree has it, the hint commits it."""
        toplevel = self.git.toplevel
        if toplevel and os.path.isfile(os.path.join(toplevel, ".lanes", slug, "initiative.toml")):
            return LanesError(f"no initiative .lanes/{slug}/ at {commit[:12]} (the plan is read from a commit, "
                              f"and the one in the working tree is not committed)", exit_code=ExitCode.USAGE,
                              hint=f"git add .lanes/{slug} && git commit -m 'plan: {slug}'")
        return usage(f"no initiative .lanes/{slug}/ at {commit[:12]}")

    # -- worktrees ----------------------------------------------------------------------------

    def worktrees(self, refresh: bool = False) -> WorktreeList:
        """`git worktree list`, read once per command (`refresh`: after taking a lock, or after a
        worktree was added or removed)."""
        if self._worktrees is None or refresh:
            self._worktrees = self.git.worktrees()
        return self._worktrees

    def forget_worktrees(self) -> None:
        """Drop the list read so far (after a lock was taken, or a worktree added or removed): the
        next `worktrees()` lists again, when — and only if — something asks."""
        self._worktrees = None

    def worktree_at(self, path: str) -> Worktree | None:
        return self.worktrees().at(path) or self._main_elsewhere(path)

    def _main_elsewhere(self, path: str) -> Worktree | None:
        """The main worktree of a repository whose `.git` is a file (a submodule's checkout, `git init
        --separate-git-dir`): Git lists it by its git dir, so it is found at `path` when `path/.git`
        names that dir."""
        listed = self.worktrees() if path else []
        if not listed or listed[0].bare:
            return None
        named = self.git.work.admin_dir(path)   # what its `.git` names (itself, for a `.git` folder)
        if named is None or os.path.realpath(named) != os.path.realpath(listed[0].path):
            return None
        return listed[0]._replace(path=os.path.realpath(path))

    def worktree_on(self, branch: str) -> Worktree | None:
        """The worktree checked out on the branch `branch` (short name)."""
        return self.worktrees().on(branch_ref(branch))

    def current_branch(self) -> str | None:
        """The full ref of the branch this worktree is on (None: detached, or no worktree)."""
        if self.git.toplevel is None:
            return None
        return self.git.work.head_ref(self.git.toplevel)

    # -- choosing the batch ---------------------------------------------------------------------

    def choose_slug(self, slug: str | None) -> str:
        """SPEC §6: the slug of the current branch, else the only active batch, else the latest
        batch of the only slug, else exit 2 listing the candidates."""
        if slug is not None:
            check_id(slug, "slug")
            return slug
        branch = self.current_branch()
        batch = BatchBranch.of_ref(branch)
        if batch is not None:
            return batch.slug
        if branch and branch.startswith(LANE_PREFIX):
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
        lane = LaneBranch.of_ref(self.current_branch())
        if lane is None:
            raise usage("not in a lane (the current branch is not imm-lane/<slug>/<task>)")
        return lane.slug, lane.task

    def record(self, slug: str) -> "BatchRecord":
        snap = self.batches.read(slug)
        if snap is None:
            raise LanesError(f"no batch for {slug}", exit_code=ExitCode.USAGE)
        return snap.record
