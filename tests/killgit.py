"""A Git wrapper that SIGKILLs the calling git-lanes command at its N-th Git call.

`KillGit(folder)` writes a tiny POSIX shell script named `git` into `folder/bin`. Put that
folder first on PATH (`KillGit.env`) and every `git` the command runs goes through it:

- each call is numbered (an `flock`-guarded counter, so the threads of `git lanes run` count
  right) and logged as `<n>\\t<argv>` in `folder/log`;
- at call number `KILLGIT_AT` (or at the first call whose arguments contain `KILLGIT_MATCH`, for
  commands whose threads make the numbering vary) it SIGKILLs its own process group — the whole
  command under test, which the caller started in a session of its own — either *before*
  running the real Git (`KILLGIT_MODE=before`) or right *after* the real Git finished (`after`),
  so the points between two Git writes and right after each Git write are both reached;
- `git lanes …` itself is passed through uncounted.

Git prepends its exec-path to PATH for the external commands it starts (`git lanes` finds
`/usr/lib/git-core/git` first), so the command under test is the `git-lanes` executable
itself (`GIT_LANES`, run by `KillGit.run`), exactly what `git lanes` would have run. The wrapper
needs `flock(1)` and `/proc` (Linux).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The console script installed beside the interpreter that runs the tests.
GIT_LANES = str(Path(sys.executable).parent / "git-lanes")

_SCRIPT = r"""#!/bin/sh
# killgit: number this git call; at call $KILLGIT_AT (or one matching $KILLGIT_MATCH) kill the
# caller's process group, before or after running the real git ($KILLGIT_MODE).
real='@REAL@'
d="${KILLGIT_DIR:?}"
case "$1" in lanes) exec "$real" "$@";; esac
n=$(flock "$d/count.lock" sh -c '
  n=$(cat "$1" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$1"
  printf "%s\t%s\n" "$n" "$2" >> "$3"; echo "$n"' _ "$d/count" "$*" "$d/log")
hit=
[ "$n" = "${KILLGIT_AT:-0}" ] && hit=1
case "$*" in *"${KILLGIT_MATCH:-@@never@@}"*) hit=1;; esac
if [ -n "$hit" ]; then
  if [ "${KILLGIT_MODE:-after}" = after ]; then "$real" "$@"; fi
  echo "$n $*" > "$d/killed"
  pg=$(cut -d' ' -f5 /proc/$$/stat)
  kill -s KILL -- "-$pg"
  sleep 5
  exit 137
fi
exec "$real" "$@"
"""

# Git subcommands that change refs, a worktree, an index or the worktree list (object writes are
# content-addressed and left out: a half-written object is never referenced).
WRITE_COMMANDS = frozenset({"update-ref", "worktree", "switch", "checkout", "merge", "reset", "clean", "read-tree",
                            "update-index", "commit", "branch", "notes", "stash", "symbolic-ref", "restore",
                            "apply", "rm", "mv"})


@dataclass(frozen=True)
class GitCall:
    n: int
    argv: list[str]

    @property
    def subcommand(self) -> str:
        """The Git subcommand, after global options (`-c k=v`, `--git-dir=…`, `-C dir`)."""
        args = iter(self.argv)
        for word in args:
            if word in ("-c", "-C"):
                next(args, None)
            elif not word.startswith("-"):
                return word
        return ""

    @property
    def writes(self) -> bool:
        sub = self.subcommand
        if sub == "worktree":
            return "list" not in self.argv
        if sub == "branch":
            return any(a in self.argv for a in ("-d", "-D", "-m", "-M", "-f", "--force")) or \
                not any(a.startswith("-") for a in self.argv[self.argv.index("branch") + 1:])
        if sub in ("stash", "notes"):
            return "list" not in self.argv and "show" not in self.argv
        return sub in WRITE_COMMANDS

    def label(self) -> str:
        """A short readable name: `update-ref --stdin`, `merge --ff-only`, `worktree add` …"""
        words = [w for w in self.argv if not w.startswith(("--git-dir=", "--work-tree=", "core.", "commit.gpgSign",
                                                           "maintenance."))]
        words = [w for w in words if w not in ("-c", "-q")]
        sub = self.subcommand
        rest = words[words.index(sub) + 1:] if sub in words else words
        flags = [w for w in rest if w.startswith("-")][:2]
        verb = [w for w in rest if not w.startswith("-")][:1] if sub in ("worktree", "notes", "stash") else []
        return " ".join([sub, *verb, *flags])


class KillGit:
    """The wrapper, its counter and its log, in one folder of the test's tmp dir."""

    def __init__(self, folder: Path, real_git: str | None = None) -> None:
        self.folder = folder
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        real = real_git or shutil.which("git")
        assert real, "no git on PATH"
        script = self.bin / "git"
        script.write_text(_SCRIPT.replace("@REAL@", real))
        script.chmod(0o755)
        self.reset()

    def reset(self) -> None:
        for name in ("count", "log", "killed"):
            (self.folder / name).unlink(missing_ok=True)

    def env(self, at: int | None = None, mode: str = "after", base: dict[str, str] | None = None,
            match: str | None = None) -> dict[str, str]:
        """The environment of a command run through the wrapper (`at` and `match` None: count and
        log only)."""
        assert mode in ("before", "after")
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["KILLGIT_DIR"] = str(self.folder)
        env["KILLGIT_AT"] = str(at or 0)
        env["KILLGIT_MODE"] = mode
        if match:
            env["KILLGIT_MATCH"] = match
        else:
            env.pop("KILLGIT_MATCH", None)
        return env

    def calls(self) -> list[GitCall]:
        log = self.folder / "log"
        if not log.exists():
            return []
        out = []
        for line in log.read_text(errors="surrogateescape").splitlines():
            n, _, argv = line.partition("\t")
            out.append(GitCall(int(n), argv.split(" ")))
        return sorted(out, key=lambda c: c.n)

    def killed(self) -> str | None:
        """`<n> <argv>` of the call that killed the command, or None."""
        path = self.folder / "killed"
        return path.read_text().strip() if path.exists() else None

    def run(self, cwd: Path, *args: str, at: int | None = None, mode: str = "after",
            env: dict[str, str] | None = None, timeout: float = 120,
            match: str | None = None) -> subprocess.CompletedProcess:
        """`git-lanes ARGS` through the wrapper, in a session of its own (the kill takes only it)."""
        self.reset()
        return subprocess.run([GIT_LANES, *args], cwd=cwd, env=self.env(at, mode, env, match), capture_output=True,
                              text=True, start_new_session=True, timeout=timeout, stdin=subprocess.DEVNULL)


def was_killed(proc: subprocess.CompletedProcess) -> bool:
    """The command died of SIGKILL (directly, or as reported by `git` for its subcommand)."""
    return proc.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
