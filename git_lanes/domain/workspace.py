"""Worktrees git-lanes creates for work: where lanes go, how a new worktree is set up (lane and
scratch alike), and how a lane is created and removed (SPEC §6 provision/release, §8.3).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from typing import TYPE_CHECKING

from ..core.crash import crash_point
from ..core.errors import LanesError, refused, usage
from ..core.ids import shell_syntax_problem
from ..gitio import GitError, LaneBranch, RefRaceError, branch_ref
from ..gitio.tempnames import make_folders
from .checks import CheckResult, child_env, run_command, status_text
from .snapshot import half_removed, worktree_clean

if TYPE_CHECKING:
    from .session import Session

SETUP_TIMEOUT = 1800.0


def repo_id(s: "Session") -> str:
    """A stable, readable id of this repository: `<name>-<8 hex of the common dir>`."""
    common = os.path.realpath(s.git.common_dir)
    name = os.path.basename(os.path.dirname(common)) if os.path.basename(common) == ".git" else os.path.basename(common)
    return f"{name or 'repo'}-{hashlib.sha256(common.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def _default_root() -> str:
    from platformdirs import user_data_dir

    return user_data_dir("git-lanes", appauthor=False)


def lane_root(s: "Session") -> str:
    root = s.git.config_get("lanes.worktreeRoot")
    return os.path.expanduser(root) if root else _default_root()


def default_lane_path(s: "Session", slug: str, task_id: str) -> str:
    return os.path.join(lane_root(s), repo_id(s), slug, task_id)


def setup_command(s: "Session") -> str | None:
    """`lanes.setupCommand`, or None; shell syntax in it is a usage error (SPEC §2 v3)."""
    cmd = s.git.config_get("lanes.setupCommand")
    if not cmd:
        return None
    try:
        words = shlex.split(cmd)
    except ValueError as exc:   # as for a check: it could never run
        raise usage(f"lanes.setupCommand {cmd!r}: cannot be split into words: {exc}") from None
    problem = shell_syntax_problem(cmd) or (None if words else "must name a command")
    if problem:
        raise usage(f"lanes.setupCommand {cmd!r}: {problem}")
    return cmd


# what checks commonly need and Git ignores: a lane starts without them (SPEC §6 v3: committed files only)
ENVIRONMENTS = {"node_modules": None, ".venv": None, "venv": None, ".env": "git config --add lanes.copy .env"}


def setup_hint(worktree: str, found: str) -> str:
    """A `lanes.setupCommand` that fits the repository's files (SPEC §17.1 v4): `npm ci` only with a
    `package-lock.json`, else `npm install`; `uv sync --frozen` with a `uv.lock`; else a `.venv` made with
    `pip install -e .` (wrapped in `sh -c`: a setup command runs without a shell)."""
    has = lambda name: os.path.exists(os.path.join(worktree, name))   # noqa: E731
    if found == "node_modules":
        return "git config lanes.setupCommand " + ("'npm ci'" if has("package-lock.json") else "'npm install'")
    if found in (".venv", "venv"):
        if has("uv.lock"):
            return "git config lanes.setupCommand 'uv sync --frozen'"
        return ("git config lanes.setupCommand \"sh -c 'python3 -m venv .venv && .venv/bin/pip install -e .'\"")
    return ENVIRONMENTS[found] or ""


def environment_gap(s: "Session", worktree: str) -> str | None:
    """A warning when `worktree` holds an ignored environment (`node_modules/`, `.venv/`, `.env`) that no lane
    will get: neither `lanes.setupCommand` nor `lanes.copy` is set. None otherwise."""
    if s.git.config_get("lanes.setupCommand") or s.git.config_all("lanes.copy"):
        return None
    present = [name for name in ENVIRONMENTS if os.path.lexists(os.path.join(worktree, name))]
    ignored = s.git.work.ignored(worktree, present) if present else set()
    found = [name for name in present if name in ignored]
    if not found:
        return None
    names = ", ".join(name + ("/" if os.path.isdir(os.path.join(worktree, name)) else "") for name in found)
    it = "it" if len(found) == 1 else "them"
    return (f"{names}: ignored by Git, so no lane has {it} (a lane starts with the committed files); checks that "
            f"need {it} fail in every lane. Set lanes.setupCommand or lanes.copy, e.g. {setup_hint(worktree, found[0])}")


def log_base(s: "Session") -> str:
    """`lanes.logDir` (a relative one from the Git common dir, the same from every worktree and in none
    of them) or the user log folder."""
    configured = s.git.config_get("lanes.logDir")
    if not configured:
        from platformdirs import user_log_dir

        return os.path.abspath(user_log_dir("git-lanes", appauthor=False))
    return os.path.abspath(os.path.join(s.git.common_dir, os.path.expanduser(configured)))


def setup_log_path(s: "Session", batch_id: str, task_id: str) -> str:
    """`<log dir>/<task>-setup-<n>.log` (SPEC §17.1 v4), `n` one more than the last one there."""
    folder = os.path.join(log_base(s), repo_id(s), batch_id)
    name = task_id or "scratch"
    try:
        taken = [f for f in os.listdir(folder) if f.startswith(f"{name}-setup-") and f.endswith(".log")]
    except OSError:
        taken = []
    numbers = [int(f[len(name) + 7:-4]) for f in taken if f[len(name) + 7:-4].isdigit()]
    return os.path.join(folder, f"{name}-setup-{max(numbers, default=0) + 1}.log")


def run_setup(s: "Session", path: str, *, slug: str, batch_id: str, task_id: str) -> CheckResult | None:
    """`lanes.setupCommand` in a new worktree (None when there is none); its whole output (plain, redacted)
    goes to `setup_log_path`, which the result names (`.log`)."""
    cmd = setup_command(s)
    if cmd is None:
        return None
    env = child_env(os.environ, s.git.local_env_vars, slug=slug, batch=batch_id, task=task_id)
    from .setups import SetupResult, run_whole, setup_lines

    result, text = run_whole(cmd, path, env, SETUP_TIMEOUT)
    log = setup_log_path(s, batch_id, task_id)
    try:
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(f"$ {cmd}\n{text}" + ("" if text.endswith("\n") or not text else "\n")
                     + f"[{status_text(result.to_json())}]\n")
    except OSError:
        log = ""
    logged = SetupResult(*result)
    logged.log, logged.quoted = log, setup_lines(text)
    return logged


def setup_failure(result: CheckResult) -> str:
    """`<exit status>: <the telling lines>; whole output: <log>` of a failed setup: the same text as the
    scratch worktree's `batch_integration_setup_failed`."""
    log = getattr(result, "log", "")
    from .setups import setup_lines

    quoted = getattr(result, "quoted", "") or setup_lines(result.output_tail)
    return f"{status_text(result.to_json())}: " + (quoted or "(no output)") \
        + (f"; whole output: {log}" if log else "")


def copy_ignored(s: "Session", source: str, target: str, *, missing_only: bool = False) -> list[str]:
    """Copy the ignored files of the worktree `source` that match `lanes.copy` into `target` (SPEC §6 v3);
    a tracked or non-ignored match is skipped with a warning (a copy must never become part of a
    delivery). With `missing_only`, a path `target` has already is left as it is. The paths that
    `target` has from `source` now, sorted."""
    patterns = s.git.config_all("lanes.copy")
    if not patterns:
        return []
    untracked, tracked = s.git.work.matching(source, patterns)
    for path in tracked:
        s.warn(f"lanes.copy: {path} is tracked; not copied (the lane has it from Git)")
    ignored = s.git.work.ignored(source, untracked)
    copied = []
    for path in sorted(untracked):
        if path not in ignored:
            s.warn(f"lanes.copy: {path} is not ignored by Git; not copied (it would become part of the delivery)")
            continue
        dest = os.path.join(target, path)
        if missing_only and os.path.lexists(dest):
            copied.append(path)
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(source, path), dest, follow_symlinks=False)
        copied.append(path)
    return copied


def create_lane(s: "Session", slug: str, task_id: str, base: str, batch_id: str, path: str | None = None,
                coordinator: str | None = None) -> str:
    """The lane branch at `base` (refusing an existing one), its worktree, the `lanes.copy` files of the
    coordinator, `lanes.setupCommand`; its path. A failing setup removes what was created and refuses
    `batch_lane_setup_failed` (SPEC §6 v3).

    Offering it (a tick) is the caller's business: `provision` offers one, `run` several at once.
    """
    branch = LaneBranch(slug, task_id)
    if s.git.refs.resolve(branch.ref) is not None:
        _clear_leftover(s, branch, base, task_id, slug)
    setup_command(s)   # shell syntax in it: refused before anything is created
    target = os.path.abspath(path) if path else default_lane_path(s, slug, task_id)
    _clear_half_made(s, target, branch)
    if path is None:
        _clear_orphan_folder(s, target)
    if os.path.exists(target) and (not os.path.isdir(target) or _listed(target)):
        raise usage(f"--path: {target} exists and is not empty")
    try:
        s.git.refs.create(branch.ref, base, f"git-lanes: provision {task_id}")
    except RefRaceError:
        raise refused("batch_lane_branch_exists", f"{branch.name} was created meanwhile") from None
    crash_point("lane-branch-created")
    try:
        # the slug's folder may go meanwhile (another lane's removal takes it once empty): made again;
        # `git worktree add` makes what goes after this (it retries a vanished parent itself)
        make_folders(os.path.dirname(target))
        s.git.work.add(target, branch.name)
        s.forget_worktrees()
        crash_point("worktree-added")
        copy_ignored(s, coordinator or s.git.toplevel or s.git.cwd, target)
        result = run_setup(s, target, slug=slug, batch_id=batch_id, task_id=task_id)
    except BaseException:
        _undo(s, target, branch)
        raise
    if result is not None and not result.passed:
        _undo(s, target, branch)
        raise refused("batch_lane_setup_failed", setup_failure(result))
    return target


def _listed(folder: str) -> list[str]:
    """What `folder` holds; nothing once it is gone (an empty folder removed meanwhile)."""
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _clear_leftover(s: "Session", branch: LaneBranch, base: str, task_id: str, slug: str) -> None:
    """The lane of a provision that was killed before its offer (the child is still pending, so nothing
    was ever admitted in it): removed, so the provision starts afresh. A branch with commits of its own,
    or a worktree with changes (files missing aside: a removal killed half-way), is someone's work:
    refused, untouched."""
    tip = s.git.refs.resolve(branch.ref)
    wt = s.worktrees(refresh=True).on(branch.ref)
    half_made = wt is not None and (wt.locked == "initializing" or not os.path.isdir(wt.path))
    own_work = tip != base and not s.git.odb.is_ancestor(tip, base)
    dirty = wt is not None and not half_made and not half_removed(s.git, wt.path) and \
        not s.git.work.is_clean(wt.path) and not _moving_to(s, wt.path, tip, base)
    if own_work or dirty:
        what = "commits of its own" if own_work else \
            "changes in " + ", ".join(f"{e.xy.strip()} {e.path}" for e in s.git.work.status(wt.path)[:3])
        raise refused("batch_lane_branch_exists", f"{branch.name} exists already, with work of its own ({what}); "
                                                  f"release it first (git lanes release {task_id} --slug {slug})")
    if not _provisioned(s, branch, task_id):   # SPEC §6: provision refuses an existing branch not its own
        undo = (f"git worktree remove {shlex.quote(wt.path)} && " if wt is not None else "") + \
            f"git branch -D {branch.name}"
        raise refused("batch_lane_branch_exists", f"{branch.name} exists already and no provision made it",
                      hint=undo)
    s.warn(f"removing the lane {branch.name} an interrupted provision left" + (f" at {wt.path}" if wt else ""))
    remove_lane(s, wt.path if wt is not None else "", branch.name, force=True)


def _provisioned(s: "Session", branch: LaneBranch, task_id: str) -> bool:
    """Whether a provision made the branch: the oldest entry of its reflog is the one `create_lane`
    writes (no reflog, `core.logAllRefUpdates=false`: not provably ours)."""
    subjects = s.git.refs.reflog(branch.ref, "%gs")
    return bool(subjects) and subjects[-1] == f"git-lanes: provision {task_id}"


def _moving_to(s: "Session", path: str, tip: str | None, base: str) -> bool:
    """A spare lane's fast-forward toward the batch head killed inside its checkout or after its index
    write: every change at a path that differs between its tip and `base` (no executor ever ran in a
    lane that was never admitted, so nothing else can have written there)."""
    if tip is None:
        return False
    entries = s.git.work.status(path)
    if not entries:
        return False
    moved = set(s.git.odb.diff_paths(tip, base))
    return all(e.path in moved for e in entries)


def _clear_half_made(s: "Session", target: str, branch: LaneBranch) -> None:
    """A `git worktree add` killed before it checked out leaves the worktree at `target` registered,
    locked `initializing`, with no HEAD of its own yet (or our branch): nothing of anyone's is in it."""
    wt = s.worktrees().at(target)   # a kill's leftover predates this command: no fresh list needed
    if wt is None or wt.locked != "initializing" or wt.branch not in (None, branch.ref):
        return
    s.warn(f"removing the half-made worktree an interrupted provision left at {target}")
    s.git.work.remove(target, force=True)
    s.forget_worktrees()


def _clear_orphan_folder(s: "Session", target: str) -> None:
    """git-lanes' own lane folder left by a removal killed half-way and then pruned (its `.git` file
    and registration gone, some files left): no worktree, so nothing of anyone's; removed."""
    if not os.path.isdir(target) or not os.listdir(target) or s.worktrees().at(target) is not None:
        return
    dot_git = os.path.join(target, ".git")
    if os.path.lexists(dot_git) and (not os.path.isfile(dot_git) or s.git.work.gitfile_ok(target)):
        return   # a repository, or a worktree Git knows of elsewhere: not ours to touch
    s.warn(f"removing {target}, what an interrupted removal of a lane left (no worktree is registered there)")
    shutil.rmtree(target)


def _undo(s: "Session", target: str, branch: LaneBranch) -> None:
    """Remove a lane that was never offered (it holds nothing but what setup made)."""
    try:
        remove_lane(s, target, branch.name, force=True)
    except LanesError as exc:
        s.warn(f"could not remove the lane {target}: {exc.message}")


def remove_lane(s: "Session", path: str, branch: str, keep_branch: bool = False, force: bool = False) -> None:
    """Remove a lane's worktree (forced only when its work is kept elsewhere) and, unless kept, its
    branch (compare-and-swap); then the folders above it that git-lanes made and that are now empty."""
    tip = s.git.refs.resolve(branch_ref(branch))
    if path and os.path.isdir(path):
        if not force and _marked_work(s, path):
            # `git worktree remove` looks past entries marked assume-unchanged or skip-worktree
            raise refused("batch_lane_release_refused", f"{path} has uncommitted work behind index entries "
                                                        "marked assume-unchanged or skip-worktree")
        try:
            s.git.work.remove(path, force=force)
        except GitError:
            if force:
                raise
            if half_removed(s.git, path):
                s.git.work.remove(path, force=True)   # a removal killed half-way: finish it
            elif worktree_clean(s.git, path):
                # Git counts files only `lanes.exclude` ignores (a check's `__pycache__/`) as changes;
                # git-lanes does not: nothing of the lane's work is in them (SPEC §5)
                s.git.work.remove(path, untracked=True)
            else:
                raise
    else:
        s.git.work.prune()
    s.forget_worktrees()
    crash_point("worktree-removed")
    if not keep_branch and tip is not None:
        try:
            s.git.refs.delete(branch_ref(branch), tip, "git-lanes: release lane")
        except RefRaceError:
            now = s.git.refs.resolve(branch_ref(branch))
            if now is not None:   # moved meanwhile (not by us): someone's work, kept
                raise refused("batch_lane_release_refused", f"{branch} moved to {now[:12]} while its lane was "
                                                            "removed; the branch is kept") from None
            # deleted meanwhile by another release of the same lane: the same end
        crash_point("branch-deleted")
    if path:
        remove_empty_parents(s, path)


def _marked_work(s: "Session", path: str) -> bool:
    """Whether the lane holds work behind index entries marked assume-unchanged or skip-worktree (which
    `git worktree remove` looks past). A worktree Git cannot read (a removal killed half-way) has none."""
    try:
        return s.git.work.marked(path) and not worktree_clean(s.git, path)
    except GitError:
        return False


def drop_left_branch(s: "Session", branch: str, lane_commit: str | None, keep: bool = False) -> bool:
    """The branch of a lane whose worktree is gone, as a release killed between the two removals left
    it: deleted (unless `keep`) when it is still on its lane commit and checked out nowhere (a
    worktree entry whose folder is gone does not count: it is pruned). True
    when the lane's branch is gone now or kept on request; False when it moved on, is checked out or
    moved meanwhile (someone's, not ours to drop)."""
    ref = branch_ref(branch)
    wt = s.worktrees(refresh=True).on(ref)
    if wt is not None:
        if not wt.prunable or os.path.lexists(wt.path):
            return False
        # a `git worktree remove` killed after the folder went, before Git's own entry did: that entry
        # still "checks the branch out"; pruned, as the removal would have finished
        s.git.work.prune()
        s.forget_worktrees()
        if s.worktrees().on(ref) is not None:
            return False
    tip = s.git.refs.resolve(ref)
    if tip is None or keep and tip == lane_commit:
        return True
    if tip != lane_commit:
        return False
    try:
        s.git.refs.delete(ref, tip, "git-lanes: release lane")
    except RefRaceError:
        return False
    return True


def missing_folders(path: str) -> list[str]:
    """The folders above `path` that do not exist yet, the deepest first: what creating a lane at
    `path` (a `--path`) makes, and all that undoing it may remove (an empty folder that was there
    before is the user's)."""
    missing, folder = [], os.path.dirname(os.path.abspath(path))
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


def remove_if_empty(folders: list[str]) -> None:
    """Remove `folders` (deepest first, as `missing_folders` lists them) while they are empty."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue   # removed already (with the lane's own empty parents)
        except OSError:
            return


def remove_empty_parents(s: "Session", path: str) -> None:
    """Remove the now-empty folders between a removed lane and the lane root (the root too when it is
    git-lanes's own default folder); never anything outside the root."""
    root = os.path.realpath(lane_root(s))
    keep_root = os.path.realpath(_default_root()) != root
    folder = os.path.dirname(os.path.realpath(os.path.abspath(path)))
    while folder.startswith(root + os.sep) or (folder == root and not keep_root):
        try:
            os.rmdir(folder)
        except OSError:
            return
        if folder == root:
            return
        folder = os.path.dirname(folder)
