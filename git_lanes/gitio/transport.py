"""Talking to other repositories: a forced mirror fetch into a private namespace, and one
atomic push with an explicit lease on every ref (never a blind force)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from .process import GitError, LockWait, locked_path

if TYPE_CHECKING:
    from .git import Git


def fetch_mirror(git: "Git", target: str, specs: Sequence[str], guarded: str | None = None) -> None:
    """`git fetch --prune --atomic` of `specs` (`+src:dst` refspecs) from `target`, and nothing else:
    `--refmap=` keeps Git from also updating the remote's own tracking refs (`refs/remotes/<name>/…`)
    on the way, refs that are the user's, and that another fetch may be writing at that moment;
    `--no-auto-maintenance`: a loop fetches every few hundred milliseconds, and each fetch would
    otherwise start a `git maintenance run --auto` process.

    A Git `.lock` a killed process left in the way never stops it for good (SPEC §15): one under the
    ref prefix `guarded` (whose every writer holds the `flock` the caller holds) is removed at once,
    any other (`packed-refs.lock`) once it is stale (`process.LockWait`)."""
    argv = ["fetch", "--quiet", "--no-tags", "--prune", "--atomic", "--no-write-fetch-head",
            "--no-recurse-submodules", "--no-auto-maintenance", "--refmap=", "--", target, *specs]
    mine = os.path.join(git.common_dir, *guarded.rstrip("/").split("/")) + os.sep if guarded else None
    wait = LockWait(git.warn)
    while True:
        proc = git.run(*argv, check=False)
        if proc.returncode == 0:
            return
        err = proc.stderr.decode("utf-8", "replace")
        lock = locked_path(err)
        if lock is None:
            raise GitError(["git", *argv], proc.returncode, err)
        wait(lock, ours=mine is not None and os.path.abspath(lock).startswith(mine))


def push_atomic(git: "Git", target: str,
                sends: Sequence[tuple[str | None, str, str | None]]) -> dict[str, tuple[str, str]]:
    """Push (local oid or None: delete, remote ref, expected remote oid or None: absent) in ONE atomic
    push with a lease on every ref; {remote ref: (porcelain flag, summary)} as `git push --porcelain`
    says (`-` for a deletion, `!` for a rejection, `=` up to date)."""
    argv = ["push", "--atomic", "--porcelain", "--no-verify", "--no-follow-tags", "--no-signed",
            "--no-recurse-submodules"]
    argv += [f"--force-with-lease={ref}:{expected or ''}" for _, ref, expected in sends]
    argv += ["--", target] + [f"{oid or ''}:{ref}" for oid, ref, _ in sends]
    proc = git.run(*argv, check=False)
    lines = _porcelain(proc.stdout.decode("utf-8", "replace"))
    if proc.returncode != 0 and not lines:
        raise GitError(["git", *argv], proc.returncode, proc.stderr.decode("utf-8", "replace"))
    return lines


def _porcelain(text: str) -> dict[str, tuple[str, str]]:
    result = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1:
            result[parts[1].rpartition(":")[2]] = (parts[0], parts[2].strip())
    return result
