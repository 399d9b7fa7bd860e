"""Working trees: the worktree list, and every Git operation that reads or writes one.

A listing is taken once and asked many questions (`WorktreeList.at`, `.on`); a command that
must see what another process did meanwhile takes a new one (after taking its lock). A
delivery snapshot stages into a copy of the worktree's index, so the executor's own index is
never touched.

Every call that reads or writes a working tree undoes the drivers (filters, textconv, diff and
merge drivers) a worktree's own `config.worktree` sets, includes followed (`drivers.py`), so one
planted in a lane never runs in a coordinator's command (docs/security.md); `Git.run` runs
nothing in a worktree whose `.git` leads elsewhere; a stale `index.lock` a killed process left is
removed (60 s).
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

from .drivers import drivers_off
from .indexes import Indexes
from .process import STALE_AFTER, GitError, LockWait, is_oid, locked_path

if TYPE_CHECKING:
    from .git import Git


class Worktree(NamedTuple):   # (tuples: a command pays no dataclass build at start-up)
    path: str
    head: str | None
    branch: str | None  # full ref name, e.g. refs/heads/imm/demo; None when detached
    bare: bool = False
    prunable: bool = False
    locked: str | None = None   # the lock's reason ("initializing": a `git worktree add` that never finished)


class StatusEntry(NamedTuple):
    xy: str    # the two status letters of `git status --porcelain=v1`
    path: str


class WorktreeList(list):
    """`git worktree list --porcelain`, with look-ups by real path and by branch."""

    def __init__(self, items: Iterable[Worktree], by_path: dict[str, Worktree] | None = None) -> None:
        super().__init__(items)
        self._by_path = by_path if by_path is not None else {os.path.realpath(wt.path): wt for wt in self}
        self._by_branch = {wt.branch: wt for wt in self if wt.branch}

    def at(self, path: str | None) -> Worktree | None:
        """The worktree whose root is `path` (after resolving symbolic links), or None (also for no path:
        a lane of another clone has none here); a path as the list resolved it is found without `realpath`."""
        return (self._by_path.get(path) or self._by_path.get(os.path.realpath(path))) if path else None

    def on(self, branch_ref: str) -> Worktree | None:
        """The worktree checked out on the full ref `branch_ref`, or None."""
        return self._by_branch.get(branch_ref)


LIST_TRIES = 14   # about a second of 10..140 ms waits
_TRANSIENT = "failed to read "   # another worktree's metadata, half written by a concurrent `worktree add`
_SPLIT = ("-c", "core.splitIndex=true", "-c", "splitIndex.sharedIndexExpire=now")   # a worktree of ours alone
_UNREADABLE = re.compile(r"failed to read (\S+/worktrees/[^/\s]+/(?:commondir|gitdir|HEAD))")


def _gitfile(worktree: str) -> bool:
    """Whether `worktree/.git` is a whole `gitdir: …` file (a killed add or remove leaves it missing or
    half written)."""
    try:
        with open(os.path.join(worktree, ".git"), "rb") as f:
            return f.read(8) == b"gitdir: "
    except OSError:
        return False


# The last list of each repository (by common dir) with what it read: shared by every session of a
# process (`run` opens one per verifier and per lane).
_LISTED: dict[str, tuple[tuple, WorktreeList, dict[str, Worktree] | None]] = {}


class _Seen(NamedTuple):
    """What `git worktree list` reads of one worktree: its admin files, whether its folder is there,
    and the commit its checked-out branch points at."""
    admin: str                          # its admin folder (the common dir for the main worktree)
    files: tuple[bytes | None, ...]     # HEAD, gitdir, locked, commondir (None: absent)
    exists: bool | None
    branch: str | None                  # the full ref HEAD names, None when detached
    commit: str | None                  # where that branch points (None: nowhere)


def _linked_path(gitdir: bytes | None) -> str | None:
    """The worktree path Git lists for a linked worktree's `gitdir` file: its content, trailing
    white space and a final `/.git` cut off."""
    if gitdir is None:
        return None
    path = gitdir.decode("utf-8", "surrogateescape").rstrip()
    return path[:-len("/.git")] if path.endswith("/.git") else path


def _detached(head: bytes | None) -> str | None:
    """The commit a detached `HEAD` file names (None: not a plain object id, or the null one)."""
    oid = head.strip().decode("ascii", "replace") if head else ""
    return oid if is_oid(oid) and oid.strip("0") else None


def _attribute(seen: tuple[_Seen, ...], found: Sequence[Worktree]) -> dict[str, Worktree] | None:
    """{admin folder: its entry} of a list Git printed, matched by the path each `gitdir` names; None
    when they do not pair up one to one (the list saw a worktree come or go after the fingerprint)."""
    if len(found) != len(seen) or not found:
        return None
    by_path = {wt.path: wt for wt in found[1:]}
    admins = {seen[0].admin: found[0]}   # Git lists the main worktree first
    for s in seen[1:]:
        wt = by_path.pop(_linked_path(s.files[1]) or "", None)
        if wt is None:
            return None
        admins[s.admin] = wt
    return admins


def _derived(old: tuple[_Seen, ...], admins: dict[str, Worktree], new: tuple[_Seen, ...]
             ) -> dict[str, Worktree] | None:
    """{admin: entry} Git would list now, from the last list and what changed since, when every
    change is one Git's list plainly shows: a checked-out branch or a detached HEAD that moved (to a
    commit), a worktree gone, a worktree added and finished (on a branch that points at a commit, or
    detached; unlocked; its folder there). None when anything else changed: Git is asked then."""
    before = {s.admin: s for s in old}
    if not new or not old or new[0].admin != old[0].admin:
        return None
    now: dict[str, Worktree] = {}
    for s in new:
        prev = before.get(s.admin)
        if prev == s:
            now[s.admin] = admins[s.admin]
        elif prev is not None:
            detached = _detached(s.files[0]) if s.branch is None else None
            if prev._replace(commit=None) == s._replace(commit=None) and s.branch and prev.commit and s.commit:
                now[s.admin] = admins[s.admin]._replace(head=s.commit)   # its branch moved
            elif detached and prev.branch is None and prev._replace(files=(s.files[0], *prev.files[1:])) == s \
                    and _detached(prev.files[0]):
                now[s.admin] = admins[s.admin]._replace(head=detached)   # a detached HEAD moved
            else:
                return None
        else:
            head, gitdir, locked, commondir = s.files
            commit = s.commit if s.branch else _detached(head)
            if locked is not None or commondir is None or not s.exists or commit is None:
                return None   # an add under way, a half-made or a prunable one: as Git says
            now[s.admin] = Worktree(path=_linked_path(gitdir) or "", head=commit, branch=s.branch)
    return now


class WorkingTrees(Indexes):
    def __init__(self, git: "Git") -> None:
        self.git = git

    def _filters_off(self, worktree: str | None) -> list[str]:
        """`-c` settings undoing every driver the worktree's own configuration sets (`drivers.py`)."""
        admin = self.admin_dir(worktree) if worktree else None
        return drivers_off(self.git, worktree, admin) if worktree and admin else []

    def _run(self, *args: str, cwd: str | None = None, env=None, input: bytes | None = None, check: bool = True):
        """`git ARGS` in a working tree: a lane's filters undone, a stale index.lock removed (a young one waits)."""
        wait = LockWait(self.git.warn)
        argv = [*self._filters_off(cwd), *args]
        while True:
            proc = self.git.run(*argv, cwd=cwd, env=env, input=input, check=False)
            lock = locked_path(proc.stderr.decode("utf-8", "replace")) if proc.returncode else None
            if lock is None:
                break
            wait(lock)
        if check and proc.returncode != 0:
            raise GitError(["git", *args], proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc

    # -- the list ------------------------------------------------------------------------------

    def list(self) -> WorktreeList:
        """`git worktree list`. Git fails it now and then while another process adds or removes a
        worktree (`failed to read .../commondir`): an empty list would make every lane look gone, so a
        failure is retried for up to a second; then the metadata of a dead add is removed and the list
        tried again, or the failure is raised."""
        seen = self._fingerprint()
        listed = _LISTED.get(self.git.common_dir)
        if listed is not None and listed[0] == seen:
            return WorktreeList(listed[1], listed[1]._by_path)   # nothing `git worktree list` reads changed
        now = _derived(listed[0], listed[2], seen) if listed is not None and listed[2] is not None else None
        if now is not None:
            known = {wt.path: real for real, wt in listed[1]._by_path.items()}   # real paths resolved before
            derived = WorktreeList(now.values(), {known.get(wt.path) or os.path.realpath(wt.path): wt
                                                  for wt in now.values()})
            _LISTED[self.git.common_dir] = (seen, derived, now)
            return WorktreeList(derived, derived._by_path)
        attempt = 0
        while True:
            proc = self.git.run("worktree", "list", "--porcelain", "-z", check=False)
            if proc.returncode == 0:
                break
            err = proc.stderr.decode("utf-8", "replace")
            attempt += 1
            if attempt >= LIST_TRIES:
                if self._drop_dead_add(err):
                    attempt = 0
                    continue
                raise GitError(["git", "worktree", "list", "--porcelain", "-z"], proc.returncode, err)
            time.sleep(0.01 * attempt)
        text = proc.stdout.decode("utf-8", "surrogateescape")
        found: list[Worktree] = []
        for block in text.split("\0\0"):
            fields: dict[str, str] = {}
            for line in block.split("\0"):
                if line:
                    key, _, value = line.partition(" ")
                    fields[key] = value
            if "worktree" in fields:
                found.append(Worktree(path=fields["worktree"], head=fields.get("HEAD"), branch=fields.get("branch"),
                                      bare="bare" in fields, prunable="prunable" in fields,
                                      locked=fields.get("locked") if "locked" in fields else None))
        listed_now = WorktreeList(found)
        _LISTED[self.git.common_dir] = (seen, listed_now, _attribute(seen, found))
        return WorktreeList(found, listed_now._by_path)

    def _fingerprint(self) -> tuple[_Seen, ...]:
        """Everything `git worktree list` reads, read with no process, per worktree: its admin files
        (`HEAD`, `gitdir`, `locked`, `commondir`), the commit its branch points at, and whether its
        folder is still there. Two equal fingerprints mean the same list (a command lists worktrees
        after every lock; most of those lists are the one before, or it with a branch moved)."""
        common = self.git.common_dir
        root = os.path.join(common, "worktrees")
        try:
            admins = [common] + [os.path.join(root, n) for n in sorted(os.listdir(root))]
        except OSError:
            admins = [common]
        seen: list[_Seen] = []
        for admin in admins:
            files: list[bytes | None] = []
            for name in ("HEAD", "gitdir", "locked", "commondir"):
                try:
                    with open(os.path.join(admin, name), "rb") as fh:
                        files.append(fh.read())
                except OSError:
                    files.append(None)
            head, gitdir = files[0], files[1]
            branch = head[5:].strip().decode("utf-8", "surrogateescape") if head and head.startswith(b"ref: ") else None
            exists = os.path.exists(os.fsdecode(gitdir.strip())) if gitdir is not None else None
            seen.append(_Seen(admin, tuple(files), exists, branch, self.git.refs.resolve(branch) if branch else None))
        return tuple(seen)

    def _drop_dead_add(self, err: str) -> bool:
        """A `git worktree add` killed while it wrote the new worktree's metadata (an empty `commondir`)
        makes every later `git worktree list` fail. When the entry is still locked `initializing` and
        that lock is stale (older than a live add ever takes), nothing was checked out in it: its
        metadata and the folder holding nothing but its `.git` file are removed. True when it did."""
        found = _UNREADABLE.search(err)
        if not found:
            return False
        admin = os.path.dirname(found.group(1))
        common = os.path.join(self.git.common_dir, "worktrees")
        locked = os.path.join(admin, "locked")
        try:
            if os.path.realpath(os.path.dirname(admin)) != os.path.realpath(common):
                return False
            with open(locked, encoding="utf-8", errors="replace") as f:
                if f.read().strip() != "initializing":
                    return False
            if time.time() - os.stat(locked).st_mtime < STALE_AFTER:
                return False
            folder = ""
            if os.path.isfile(os.path.join(admin, "gitdir")):
                with open(os.path.join(admin, "gitdir"), encoding="utf-8", errors="replace") as f:
                    folder = os.path.dirname(f.read().strip())
        except OSError:
            return False
        self.git.warn(f"removing the metadata of a 'git worktree add' that was killed half-way ({admin})")
        import shutil

        shutil.rmtree(admin, ignore_errors=True)
        if folder and os.path.isdir(folder) and os.listdir(folder) == [".git"] and \
                os.path.isfile(os.path.join(folder, ".git")):
            shutil.rmtree(folder, ignore_errors=True)
        return True

    def add(self, path: str, target: str, *, detach: bool = False, split_index: bool = False) -> None:
        """`git worktree add` at `path` of a branch (short name) or, detached, a commit; with
        `split_index`, its index is split from the start (`checkout_detached` says why), so its first
        move does not rewrite every entry to split it.

        Git reads every other worktree's metadata first and fails (`failed to read
        .../commondir`) when another process is adding one at that moment; it has created nothing
        then, so that failure is retried like the list's."""
        args = (*(_SPLIT if split_index else ()), "worktree", "add", "-q", *(["--detach"] if detach else []),
                "--end-of-options", path, target)
        attempt = 0
        while True:
            proc = self._run(*args, check=False)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode("utf-8", "replace")
            untouched = not os.path.lexists(path) or (os.path.isdir(path) and not os.listdir(path))
            if not (_TRANSIENT in err and untouched):
                break
            attempt += 1
            if attempt >= LIST_TRIES:
                if self._drop_dead_add(err):
                    attempt = 0
                    continue
                break
            time.sleep(0.01 * attempt)
        raise GitError(["git", *args], proc.returncode, proc.stderr.decode("utf-8", "replace"))

    @staticmethod
    def gitfile_ok(worktree: str) -> bool:
        return _gitfile(worktree)

    def remove(self, path: str, *, force: bool = False, untracked: bool = False) -> None:
        """`git worktree remove` (never forced unless asked: a worktree with changes stays and Git says
        why; `force` only once those changes are kept elsewhere, and then a locked one goes too;
        `untracked` once what Git would call changes proved to be only files git-lanes excludes)."""
        import shutil

        flags = ["--force", "--force"] if force else (["--force"] if untracked else [])
        args = ("worktree", "remove", *flags, "--end-of-options", path)
        if force and os.path.isdir(path) and not _gitfile(path):
            shutil.rmtree(path)   # killed half-way, its `.git` file gone or half written: Git cannot check it
        args = (*self._filters_off(path), *args)   # Git checks the worktree's files (a `git status` there) first
        proc = self._run(*args, check=False)
        if proc.returncode != 0 and force and b"validation failed" in proc.stderr and os.path.isdir(path):
            shutil.rmtree(path)   # its metadata half written (a killed add): Git cannot check it either
            proc = self._run(*args, check=False)
        if proc.returncode != 0:
            raise GitError(["git", *args], proc.returncode, proc.stderr.decode("utf-8", "replace"))

    def prune(self) -> None:
        self.git.run("worktree", "prune")

    # -- reading a worktree --------------------------------------------------------------------

    def status(self, cwd: str | None = None, *, untracked: str = "all", excludes: str | None = None,
               paths: Sequence[str] | None = None, ignored: bool = False) -> list[StatusEntry]:
        """`git status --porcelain=v1 -z --no-renames`, parsed (never takes the index lock); with `paths`,
        only those (literal pathspecs: a folder stands for what is in it); `ignored`: ignored files too."""
        extra = ["-c", f"core.excludesFile={excludes}"] if excludes else []
        limit = (["--ignored=matching"] if ignored else []) + (["--", *paths] if paths is not None else [])
        proc = self._run("--no-optional-locks", *(["--literal-pathspecs"] if paths is not None else []), *extra,
                         "status", "--porcelain=v1", "-z", "--no-renames", f"--untracked-files={untracked}", *limit,
                         cwd=cwd)
        return [StatusEntry(xy=item[:2], path=item[3:])
                for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if item]

    def is_clean(self, cwd: str, excludes: str | None = None) -> bool:
        return not self.status(cwd, excludes=excludes)

    def matching(self, cwd: str, patterns: Sequence[str]) -> tuple[list[str], list[str]]:
        """(untracked, tracked) files of the worktree at `cwd` that match the gitignore-style `patterns`."""
        if not patterns:
            return [], []
        excludes = [f"--exclude={p}" for p in patterns]
        untracked = self._run("ls-files", "-z", "--others", "--ignored", *excludes, cwd=cwd).stdout
        tracked = self._run("ls-files", "-z", "--cached", "--ignored", *excludes, cwd=cwd).stdout
        split = lambda raw: [p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p]  # noqa: E731
        return split(untracked), split(tracked)

    def ignored(self, cwd: str, paths: Sequence[str]) -> set[str]:
        """Those of `paths` (untracked, relative to `cwd`) that Git's own ignore rules ignore."""
        if not paths:
            return set()
        data = b"".join(os.fsencode(p) + b"\0" for p in paths)
        proc = self.git.run("check-ignore", "-z", "--stdin", cwd=cwd, input=data, check=False)
        if proc.returncode not in (0, 1):
            raise GitError(["git", "check-ignore", "-z", "--stdin"], proc.returncode,
                           proc.stderr.decode("utf-8", "replace"))
        return {p.decode("utf-8", "surrogateescape") for p in proc.stdout.split(b"\0") if p}

    def ignored_top_level(self, worktree: str) -> list[str]:
        """The top-level names of the files and folders Git ignores in `worktree`."""
        out = self._run("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
                        cwd=worktree).stdout.decode("utf-8", "surrogateescape")
        return sorted({p.split("/", 1)[0] for p in out.split("\0") if p})

    def head_log(self, worktree: str) -> list[str]:
        """The subjects of the worktree's HEAD reflog, newest first ([] when it has none)."""
        proc = self.git.run("reflog", "show", "--format=%gs", "HEAD", "--", cwd=worktree, check=False)
        return proc.stdout.decode("utf-8", "replace").splitlines() if proc.returncode == 0 else []

    def flagged(self, cwd: str | None = None) -> list[str]:
        """Index entries marked assume-unchanged or skip-worktree (`git ls-files -v`)."""
        out = self.git.run("ls-files", "-v", "-z", cwd=cwd).stdout.decode("utf-8", "surrogateescape")
        return [f[2:] for f in out.split("\0") if f and (f[0].islower() or f[0] == "S")]

    def head_ref(self, worktree: str) -> str | None:
        """The full ref the worktree's HEAD names (None: detached), read from its HEAD file; the
        worktree list answers when the file cannot (a reftable repository's placeholder)."""
        admin = self.admin_dir(worktree)
        try:
            with open(os.path.join(admin or "", "HEAD"), encoding="utf-8") as fh:
                first = fh.readline().strip()
        except (OSError, UnicodeDecodeError):
            first = ""
        if first.startswith("ref: refs/") and first != "ref: refs/heads/.invalid":
            return first[5:]
        if admin is not None and is_oid(first):
            return None
        wt = self.list().at(worktree)
        return wt.branch if wt is not None else None

    def checkout_paths(self, worktree: str, paths: Sequence[str]) -> None:
        """Check `paths` out from the index (literally: no pathspec magic)."""
        if paths:
            data = b"".join(os.fsencode(p) + b"\0" for p in paths)
            self._run("--literal-pathspecs", "checkout", "--pathspec-from-file=-", "--pathspec-file-nul",
                         cwd=worktree, input=data)

    def checkout_detached(self, worktree: str, commit: str, *, split_index: bool = False) -> None:
        """Move a detached worktree to `commit` (a two-tree checkout: only changed files). With
        `split_index` (a worktree of ours alone), the index is written as a small split index over a
        shared one: a move of a few files in a large tree no longer rewrites every entry (a shared
        index it replaces goes at once: nobody else reads that worktree's index)."""
        self._run(*(_SPLIT if split_index else ()), "checkout", "-q", "-f", "--detach", commit, cwd=worktree)

    def clean(self, worktree: str, keep: Sequence[str] = ()) -> None:
        """Remove every untracked and ignored file except those matching `keep`."""
        excludes: list[str] = []
        for pattern in keep:
            excludes += ["-e", pattern]
        self._run("clean", "-q", "-ffdx", *excludes, cwd=worktree)

    def fast_forward(self, worktree: str, commit: str) -> None:
        """`git merge --ff-only` in `worktree` (Git's own compare-and-swap of its branch)."""
        self._run("-c", "maintenance.auto=false", "merge", "--ff-only", "--no-verify-signatures", "-q", commit,
                  cwd=worktree)

    def switch(self, worktree: str | None, branch: str) -> None:
        self._run("switch", "-q", branch, cwd=worktree)

    def commit_all(self, worktree: str, message: str) -> None:
        """Stage everything and commit (for repositories git-lanes builds itself: the demo)."""
        self._run("add", "-A", cwd=worktree)
        self._run("commit", "-q", "-m", message, cwd=worktree)
