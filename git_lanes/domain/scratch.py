"""The scratch worktrees (SPEC §8.3, §10.3, §13 v3): where integration reruns and final checks run
on exactly the tree they judge, never in the coordinator.

A per-repository pool of detached worktrees under `<git-common-dir>/lanes/scratch/<n>`, each taken
with an `flock` (`…/lanes/locks/scratch/<n>`) for as long as one verification needs it, so two
batches never share one at once, and reused by every batch of any slug: only the first batch of a
clone pays a full checkout. A new worktree gets the coordinator's `lanes.copy` files, as a lane
does, then `lanes.setupCommand`. A taken worktree is moved to each commit with a two-tree checkout
(only changed files are touched) and cleaned of every untracked and ignored file except those
matching `lanes.keep` or `lanes.copy` and the ignored top-level paths `lanes.setupCommand` created
there; the copies are made again when one of them is missing, setup runs again when a kept path is.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import threading
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from ..gitio import GitError
from ..gitio.tempnames import make_folders
from ..store import flock_try, lock_path
from .checks import CheckResult, child_env
from .workspace import copy_ignored, run_setup, setup_failure

if TYPE_CHECKING:
    from .receipts import Receipts
    from .session import Session

POOL = ("lanes", "scratch")
_MAKING = threading.Lock()   # the pool's worktrees are made one at a time in a process (a window verifies at once)


class SetupFailed(Exception):
    """`lanes.setupCommand` failed in a scratch worktree."""

    def __init__(self, result: CheckResult) -> None:
        self.result = result
        super().__init__(setup_failure(result))


def exit_status(result: CheckResult) -> str:
    return f"exit {result.exit_code}" if result.exit_code is not None else (result.signal or "no exit status")


def pool_root(s: "Session") -> str:
    return os.path.join(s.git.common_dir, *POOL)


@contextmanager
def take(s: "Session", coordinator: str | None = None) -> Iterator["Scratch"]:
    """The first free worktree of the pool (a new one when all are taken), held until the block ends;
    its `lanes.copy` files come from the worktree `coordinator` (the batch's), else the session's."""
    slot = 0
    while True:
        held = flock_try(lock_path(s.git, "scratch", str(slot)))
        if held is not None:
            break
        slot += 1
    try:
        yield Scratch(s, os.path.join(pool_root(s), str(slot)), coordinator)
    finally:
        held.release()


def prepare(s: "Session", commit: str, *, slug: str, batch_id: str, coordinator: str | None = None) -> None:
    """Move a free worktree of the pool to `commit` before any candidate needs it (`run`, while its
    first lanes work): a new worktree's full checkout and `lanes.setupCommand` then leave the first
    landing's path, and the first candidate's move touches only its own files. A setup that fails
    here takes the worktree with it: the verification that needs one makes it again, runs setup
    again and parks the child with what setup said (SPEC §8.3)."""
    with take(s, coordinator) as sc:
        try:
            sc.move_to(commit, slug=slug, batch_id=batch_id)
        except SetupFailed:
            sc.discard()
            s.forget_worktrees()


def remove_pool(s: "Session") -> list[str]:
    """Remove every scratch worktree no one holds (`release --stale`; `run` with lanes.keepScratch
    false); the paths removed."""
    root = pool_root(s)
    removed = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not name.isdigit():
            continue   # a slot's .keep file goes with its slot
        held = flock_try(lock_path(s.git, "scratch", name))
        if held is None:
            continue   # in use right now
        try:
            path = os.path.join(root, name)
            Scratch(s, path).discard()
            s.git.work.forget_missing(path)
            removed.append(path)
        finally:
            held.release()
    if removed:
        s.forget_worktrees()
    with suppress(OSError):
        os.rmdir(root)   # the pool's own folder once it holds nothing (one still in use keeps it)
    return removed


class Scratch:
    def __init__(self, s: "Session", path: str, coordinator: str | None = None) -> None:
        self.s = s
        self.git = s.git
        self.path = path
        self.coordinator = coordinator
        self._kept_file = path + ".keep"
        self._copied_file = path + ".copied"   # the lanes.copy patterns copied, one path under each top name

    def discard(self) -> None:
        """Its folder, Git's registration of it (one a killed `git worktree add` left locked
        `initializing` too: the slot's flock, held, says nobody makes it now) and what setup left."""
        if self.git.work.drop_unfinished(self.path):   # an add killed before `commondir`: Git cannot remove it
            self.s.forget_worktrees()
        elif self.s.worktrees(refresh=True).at(self.path) is not None:
            self.git.work.remove(self.path, force=True)
        shutil.rmtree(self.path, ignore_errors=True)
        for name in (self._kept_file, self._copied_file):
            if os.path.exists(name):
                os.unlink(name)

    @staticmethod
    def _load(name: str):
        """The JSON value a `.keep` or `.copied` file holds (None: no file, or not JSON)."""
        try:
            with open(name, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def _setup_kept(self) -> list[str]:
        value = self._load(self._kept_file)
        return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []

    def _copy(self) -> None:
        """The coordinator's `lanes.copy` files, those missing here (SPEC §6 v3: kept as if listed in
        `lanes.keep`); the patterns and one copied path under each top-level name are remembered, to
        tell when to copy again."""
        source = self.coordinator if self.coordinator and os.path.isdir(self.coordinator) else None
        copied = copy_ignored(self.s, source or self.s.git.toplevel or self.s.git.cwd, self.path, missing_only=True)
        first: dict[str, str] = {}
        for path in copied:
            first.setdefault(path.split("/", 1)[0], path)
        with open(self._copied_file, "w", encoding="utf-8") as fh:
            json.dump({"patterns": self.git.config_all("lanes.copy"), "paths": sorted(first.values())}, fh)

    def _copies_stale(self) -> bool:
        """Whether `lanes.copy` changed since the copies were made, or a copied path is gone."""
        made = self._load(self._copied_file)
        if not isinstance(made, dict) or made.get("patterns") != self.git.config_all("lanes.copy"):
            return bool(self.git.config_all("lanes.copy")) or made is not None
        paths = made.get("paths")
        return not isinstance(paths, list) or any(
            not isinstance(p, str) or not os.path.lexists(os.path.join(self.path, p)) for p in paths)

    def _setup(self, slug: str, batch_id: str) -> None:
        """Run `lanes.setupCommand`; remember the ignored top-level paths it created."""
        before = set(self.git.work.ignored_top_level(self.path))
        result = run_setup(self.s, self.path, slug=slug, batch_id=batch_id, task_id="")
        if result is None:
            return
        if not result.passed:
            raise SetupFailed(result)
        created = sorted(set(self.git.work.ignored_top_level(self.path)) - before)
        kept = sorted(set(self._setup_kept()) | set(created))
        with open(self._kept_file, "w", encoding="utf-8") as fh:
            json.dump(kept, fh)

    def move_to(self, commit: str, *, slug: str, batch_id: str) -> str:
        """Check the worktree out at `commit`, touching only changed files, then clean it."""
        work = self.git.work
        admin = work.admin_dir(self.path) if work.gitfile_ok(self.path) else None
        whole = admin is not None and os.path.isfile(os.path.join(admin, "HEAD")) and not self.git.foreign(self.path)
        if whole:   # else none yet, half made (no list needed to say so), or one Git would not act in
            try:
                work.checkout_detached(self.path, commit, split_index=True)
            except GitError as exc:
                # a kill left it so that Git cannot check it out (a split index whose shared index is
                # gone): the pool's worktree is git-lanes' own, made anew
                self.git.warn(f"making the scratch worktree {self.path} anew: {exc.detail}")
                whole = False
        if not whole:
            with _MAKING:
                self.discard()   # none yet, or half made by a `git worktree add` killed before its `.git` file
                work.forget_missing(self.path)   # its registration only: never another process's add
                make_folders(os.path.dirname(self.path))   # the pool's folder goes once empty
                work.add(self.path, commit, detach=True, split_index=True)
            self.s.forget_worktrees()
            try:
                self._copy()
                self._setup(slug, batch_id)
            except BaseException:
                # never kept half set up: the next move makes it anew, setup included (a worktree kept
                # after a failed setup would run the next candidate's checks without it)
                self.discard()
                self.s.forget_worktrees()
                raise
            return self.path
        keep = self.git.config_all("lanes.keep") + [f"/{p}" for p in self._setup_kept()]
        work.clean(self.path, keep + self.git.config_all("lanes.copy"))   # copies are kept as lanes.keep
        if self._copies_stale():
            self._copy()   # a check removed one, lanes.copy changed, or a worktree of a build that did not copy
        literal = [p.strip().strip("/") for p in keep if p.strip() and not any(ch in p for ch in "*?[")]
        if any(not os.path.exists(os.path.join(self.path, p)) for p in literal):
            self._setup(slug, batch_id)
        return self.path

    def run(self, commit: str, items: list[tuple[str, str, str, float]], *, slug: str, batch_id: str,
            order: list[str], specs: Mapping[tuple[str, str], tuple[list[str] | None, bool]] | None = None,
            receipts: "Receipts | None" = None, fail_fast: bool = False, retries: int = 0,
            stop: Callable[[], bool] | None = None) -> list[CheckResult]:
        """Run (task, id, command, timeout) items at `commit`, each distinct command once (the longest
        timeout wins; a shared run gets `GIT_LANES_TASK` empty and `GIT_LANES_TASKS` = its tasks in plan
        order), in the order of the items; the result of each item is reported as `<task>:<id>`.

        v4 (SPEC §8.3, §8.7, §8.8): `specs` gives each (task, id) its declared `inputs` and whether it
        may have a receipt (`engine.rerun_specs`); with a `receipts` book (`receipts.book(where=
        "scratch")`) a check with a usable receipt does not run (`cached: true`) and each new pass is
        kept, all written in one write at the end; a failure is retried up to `retries` times
        (`lanes.gateFlakeRetries`), each after the worktree is cleaned again; `fail_fast` stops at
        the first failing check (a candidate rerun), and `stop()`, asked before each check, stops
        too (its candidate is gone): checks not run are left out of the results."""
        self.move_to(commit, slug=slug, batch_id=batch_id)
        from .checkrun import execute

        tree = self.git.odb.tree_of(commit) if receipts is not None else ""
        shared: dict[tuple[str, ...], CheckResult] = {}
        for key, spec, env in _runs(self.git, items, slug=slug, batch_id=batch_id, order=order, specs=specs):
            if stop is not None and stop():
                break
            shared[key] = execute(spec, cwd=self.path, env=env, tree=tree, book=receipts, retries=retries,
                                  before_retry=lambda: self.move_to(commit, slug=slug, batch_id=batch_id))
            if fail_fast and not shared[key].passed:
                break
        if receipts is not None:
            receipts.flush()
        return _reported(items, shared)


def cached(git, commit: str, items: list[tuple[str, str, str, float]], *, slug: str, batch_id: str,
           order: list[str], specs: Mapping[tuple[str, str], tuple[list[str] | None, bool]] | None,
           receipts: "Receipts") -> list[CheckResult] | None:
    """The results `Scratch.run` would report at `commit` when a usable passing receipt stands for every
    one of its runs (`cached: true`; nothing runs, no worktree is needed), else None. Not with
    `lanes.receiptKey`, whose output is taken where the check runs."""
    from .checkrun import look_up

    if receipts.key_command:
        return None
    tree = git.odb.tree_of(commit)
    shared: dict[tuple[str, ...], CheckResult] = {}
    for key, spec, env in _runs(git, items, slug=slug, batch_id=batch_id, order=order, specs=specs):
        found = look_up(spec, cwd=git.cwd, env=env, tree=tree, book=receipts)
        if found is None:
            return None
        shared[key] = found
    return _reported(items, shared)


def _runs(git, items: list[tuple[str, str, str, float]], *, slug: str, batch_id: str, order: list[str],
          specs: Mapping[tuple[str, str], tuple[list[str] | None, bool]] | None):
    """(command key, `checkrun.Spec`, environment) of each distinct command of the items, in their order
    (SPEC §8.3 v3: one run per command, the longest timeout, `GIT_LANES_TASKS` for a shared run)."""
    from .checkrun import Spec

    groups: dict[tuple[str, ...], list[tuple[str, str, str, float]]] = {}
    for item in items:
        groups.setdefault(_command_key(item[2]), []).append(item)
    rank = {task: i for i, task in enumerate(order)}
    for key, group in groups.items():
        tasks = sorted(dict.fromkeys(task for task, *_ in group), key=lambda t: rank.get(t, len(rank)))
        env = child_env(os.environ, git.local_env_vars, slug=slug, batch=batch_id,
                        task=tasks[0] if len(tasks) == 1 else "")
        if len(tasks) > 1:
            env["GIT_LANES_TASKS"] = " ".join(tasks)
        check_id, command = group[0][1], group[0][2]
        declared = [(specs or {}).get((task, cid), (None, True)) for task, cid, *_ in group]
        inputs = declared[0][0] if all(d[0] == declared[0][0] for d in declared) else None
        yield key, Spec(check_id, command, max(t for *_, t in group), inputs=inputs,
                        receipts=all(d[1] for d in declared), task=tasks[0] if len(tasks) == 1 else ""), env


def _reported(items: list[tuple[str, str, str, float]], shared: Mapping[tuple[str, ...], CheckResult]) -> list[CheckResult]:
    """Each item's result as `<task>:<id>` (items whose command did not run are left out)."""
    results = []
    for task, check_id, command, _ in items:
        r = shared.get(_command_key(command))
        if r is not None:
            results.append(r._replace(id=f"{task}:{check_id}" if task else check_id, command=command))
    return results


def _command_key(command: str) -> tuple[str, ...]:
    """What makes two checks the same run: their words (the working directory is always the root)."""
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return ("\0unsplittable", command)
