"""Running the `git` binary: the scrubbed environment, the safe `-c` settings, and the error
that quotes a failed command. Nothing here knows a repository; `git.Git` does."""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Callable, Iterable, Mapping, Sequence

from ..core.errors import ExitCode, LanesError

ZERO_OID = "0" * 40
# SPEC §8's three, and two a user's configuration would turn against a landing: `submodule.recurse`
# (a checkout of the scratch worktree then fails on the submodule's missing git dir) and directory-rename
# detection (a sibling's new file in a folder another task moved would be moved along: not the lane's change)
SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgSign=false",
               "-c", "submodule.recurse=false", "-c", "merge.directoryRenames=false")
FALLBACK_IDENT = ("git-lanes", "git-lanes@localhost")
MIN_GIT = (2, 38)

# What `git -c` passes down: kept for our own calls, so configuration overrides apply.
_CONFIG_ENV_PREFIXES = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
# Scope matching is exact and case-sensitive whatever the caller's environment (SPEC §8 v3).
PATHSPEC_VARS = ("GIT_ICASE_PATHSPECS", "GIT_LITERAL_PATHSPECS", "GIT_GLOB_PATHSPECS", "GIT_NOGLOB_PATHSPECS")


def is_oid(name: str) -> bool:
    """Whether `name` is a full object id (SHA-1 or SHA-256, lower-case hex)."""
    return len(name) in (40, 64) and not name.strip("0123456789abcdef")


class GitError(LanesError):
    """A Git command failed: exit 128, quoting the command and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        shown = " ".join(_shown(argv))
        detail = f"'{shown}' failed with exit code {returncode}"
        if self.stderr:
            detail += ": " + self.stderr.replace("\n", " | ")
        super().__init__(detail, exit_code=ExitCode.FATAL)


def _shown(argv: Sequence[str]) -> list[str]:
    """The command line without our own `-c` settings (they would only hide what was run)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "-c":
            skip = True
            continue
        if arg.startswith(("--git-dir=", "--work-tree=")):
            continue
        out.append(arg)
    return out


def scrubbed_env(base: Mapping[str, str], local_vars: Iterable[str]) -> dict[str, str]:
    """`base` minus the repository-local Git variables (but `git -c`'s) and the pathspec ones."""
    drop = {v for v in local_vars if not v.startswith(_CONFIG_ENV_PREFIXES)} | set(PATHSPEC_VARS)
    return {k: v for k, v in base.items() if k not in drop}


_FOUND: dict[tuple[str, str], str | None] = {}   # (program, PATH) -> the file the search finds


def _which(program: str, path: str) -> str | None:
    """The executable file `program` names on `path` (as the exec search finds it), looked up once
    per process: a run starts thousands of Git processes, each otherwise searching PATH again."""
    key = (program, path)
    if key not in _FOUND:
        found = None
        if "/" not in program:
            for folder in path.split(os.pathsep):
                if not os.path.isabs(folder):
                    break   # relative to each command's own folder: left to the search at each start
                candidate = os.path.join(folder, program)
                if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                    found = candidate
                    break
        _FOUND[key] = found
    return _FOUND[key]


def spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(list(argv), cwd=cwd, input=data, capture_output=True, env=dict(env),
                              executable=_which(argv[0], env.get("PATH", os.defpath)))
    except FileNotFoundError as exc:
        missing = "git" if exc.filename in ("git", None) else exc.filename
        raise LanesError(f"cannot run {argv[0]} in {cwd}: {missing}: not found", exit_code=ExitCode.FATAL) from None
    except NotADirectoryError:
        raise LanesError(f"cannot run {argv[0]}: {cwd} is not a directory", exit_code=ExitCode.FATAL) from None


def attached(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> int:
    """Run a command on the caller's own terminal (stdin, stdout, stderr inherited: Git's pager and
    colour decide as they would for the user); its exit code."""
    try:
        return subprocess.run(list(argv), cwd=cwd, env=dict(env)).returncode
    except FileNotFoundError:
        raise LanesError(f"cannot run {argv[0]} in {cwd}: not found", exit_code=ExitCode.FATAL) from None


def local_env_vars() -> tuple[str, ...]:
    """The repository-local variables Git lists (`git rev-parse --local-env-vars`, asked anywhere)."""
    proc = spawn(["git", "rev-parse", "--local-env-vars"], "/", os.environ)
    return tuple(proc.stdout.decode().split())


def init_repository(path: str, branch: str = "main") -> None:
    """`git init` a new repository at `path` (which must exist), blind to the caller's GIT_DIR & co."""
    argv = ["git", "init", "-q", "-b", branch, path]
    proc = spawn(argv, path, scrubbed_env(os.environ, local_env_vars()))
    if proc.returncode != 0:
        raise GitError(argv, proc.returncode, proc.stderr.decode("utf-8", "replace"))


# -- Git's own lock files (SPEC §15) -----------------------------------------------------------------

STALE_AFTER = 60.0     # seconds: a live Git command holds a lock far less
LOCK_POLL = 0.2
WAIT_NOTICE = 2.0      # seconds of waiting for a young lock before saying so (once)
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def locked_path(stderr: str) -> str | None:
    """The lock file a failed Git command met, if that is why it failed."""
    found = _LOCKED.search(stderr)
    return found.group(1) if found else None


class LockWait:
    """What to do about a Git `.lock` file in the way: remove it when it is stale (a dead process's:
    at once when `ours`, the caller holding the `flock` every writer takes, else once older than
    60 s) and retry, or wait for a young one to go. Raises GitError when one is held for good."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn = warn
        self.since: float | None = None
        self.told = False

    def __call__(self, path: str, ours: bool = False) -> None:
        self.since = self.since or time.monotonic()
        try:
            age = time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return   # its holder finished meanwhile
        if not ours and age < STALE_AFTER:
            waited = time.monotonic() - self.since
            if waited > STALE_AFTER + 5:   # it keeps being renewed: someone works
                raise GitError(["git"], 128, f"'{path}' is held by a running Git command")
            if waited >= WAIT_NOTICE and not self.told:   # a wait of up to a minute is not left silent
                self.told = True
                self.warn(f"waiting for {path}, a Git lock file {int(age)} s old: a running Git command "
                          f"holds it, or a killed one left it (then it is removed once {int(STALE_AFTER)} s old)")
            time.sleep(LOCK_POLL)
            return
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        self.warn(f"removed stale lock file {path}" + ("" if ours else f" ({int(age)} s old)"))
