"""The only code that talks to Git.

`Git` discovers the repository with one `git rev-parse` call (honouring `git -C`,
`GIT_DIR`, `GIT_WORK_TREE`, `git -c` and linked worktrees), reads the configuration once
through `git config`, opens dulwich lazily with explicit paths, and runs the `git` binary
with the `-c` settings of SPEC §8 for what Git does better (merge-tree, worktrees,
status, ref transactions). Every ref update is a compare-and-swap with a reflog reason.
A failing Git call raises `GitError`, which quotes the command and its stderr.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ..errors import ExitCode, LanesError

if TYPE_CHECKING:  # dulwich is imported lazily: start-up must stay cheap
    from dulwich.repo import Repo as DulwichRepo

ZERO_OID = "0" * 40
SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgSign=false")
FALLBACK_IDENT = ("git-lanes", "git-lanes@localhost")
MIN_GIT = (2, 38)

# What `git -c` passes down; kept for our own git calls so configuration overrides apply.
_CONFIG_ENV_PREFIXES = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")


class GitError(LanesError):
    """A Git command failed: exit 128, quoting the command and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        shown = " ".join(a for a in argv if a not in SAFE_CONFIG and not a.startswith("core.") and a != "commit.gpgSign=false")
        detail = f"'{shown}' failed with exit code {returncode}"
        if self.stderr:
            detail += ": " + self.stderr.replace("\n", " | ")
        super().__init__(detail, exit_code=ExitCode.FATAL)


class RefRaceError(Exception):
    """A compare-and-swap lost: the ref no longer holds the expected value."""


@dataclass(frozen=True)
class Worktree:
    path: str
    head: str | None
    branch: str | None  # full ref name, e.g. refs/heads/imm/demo; None when detached
    bare: bool = False
    prunable: bool = False


@dataclass(frozen=True)
class StatusEntry:
    xy: str  # two status letters as in `git status --porcelain=v1`
    path: str


def _our_env(base: Mapping[str, str], local_vars: Iterable[str]) -> dict[str, str]:
    drop = {v for v in local_vars if not v.startswith(_CONFIG_ENV_PREFIXES)}
    env = {k: v for k, v in base.items() if k not in drop}
    env.setdefault("LC_ALL", "C")
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


class Git:
    """A discovered repository, seen from one worktree (or a bare repository)."""

    def __init__(self, cwd: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> None:
        self._environ = dict(os.environ if environ is None else environ)
        start = os.fspath(cwd) if cwd is not None else os.getcwd()
        argv = ["git", "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir",
                "--is-bare-repository", "--show-toplevel", "--local-env-vars"]
        proc = subprocess.run(argv, cwd=start, env=self._environ, capture_output=True, text=True)
        if proc.returncode != 0 and "must be run in a work tree" in proc.stderr:
            argv.remove("--show-toplevel")
            proc = subprocess.run(argv, cwd=start, env=self._environ, capture_output=True, text=True)
        if proc.returncode != 0:
            if "not a git repository" in proc.stderr:
                raise LanesError("not a git repository (or any of the parent directories)", exit_code=ExitCode.FATAL)
            raise GitError(argv, proc.returncode, proc.stderr)
        lines = proc.stdout.splitlines()
        self.git_dir = lines[0]
        self.common_dir = lines[1]
        self.is_bare = lines[2] == "true"
        rest = lines[3:]
        self.toplevel: str | None = rest.pop(0) if rest and rest[0].startswith("/") else None
        self.local_env_vars: tuple[str, ...] = tuple(rest)
        self.env = _our_env(self._environ, self.local_env_vars)
        self.cwd = start
        self._idents: dict[str, tuple[str, str]] = {}

    # -- running git -------------------------------------------------------------------

    def run(self, *args: str, cwd: str | None = None, input: bytes | str | None = None,
            check: bool = True, env: Mapping[str, str] | None = None, safe: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run `git` on this repository (or in worktree `cwd`), bytes in and out."""
        argv = ["git"]
        if safe:
            argv += SAFE_CONFIG
        if cwd is None:
            argv += [f"--git-dir={self.git_dir}"]
            if self.toplevel:
                argv += [f"--work-tree={self.toplevel}"]
            run_cwd = self.toplevel or self.git_dir
        else:
            run_cwd = cwd
        argv += args
        data = input.encode() if isinstance(input, str) else input
        proc = subprocess.run(argv, cwd=run_cwd, input=data, capture_output=True,
                              env=dict(env) if env is not None else self.env)
        if check and proc.returncode != 0:
            raise GitError(argv, proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc

    def out(self, *args: str, cwd: str | None = None, input: bytes | str | None = None) -> str:
        """Stdout of a successful git call as text, without the trailing newline."""
        return self.run(*args, cwd=cwd, input=input).stdout.decode("utf-8", "surrogateescape").rstrip("\n")

    def version(self) -> tuple[int, int]:
        text = self.out("version")  # "git version 2.39.5"
        parts = text.split()[2].split(".")
        return int(parts[0]), int(parts[1])

    def require_version(self) -> None:
        have = self.version()
        if have < MIN_GIT:
            raise LanesError(f"git-lanes needs git >= {MIN_GIT[0]}.{MIN_GIT[1]} (found {have[0]}.{have[1]})",
                             exit_code=ExitCode.FATAL)

    # -- configuration -----------------------------------------------------------------

    @cached_property
    def config(self) -> dict[str, list[str]]:
        """Every configuration value, read once (`git config --list --null`)."""
        proc = self.run("config", "--list", "--null", check=False, safe=False)
        values: dict[str, list[str]] = {}
        for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if not item:
                continue
            key, _, value = item.partition("\n")
            values.setdefault(_config_key(key), []).append(value)
        return values

    def config_get(self, key: str, default: str | None = None) -> str | None:
        vals = self.config.get(_config_key(key))
        return vals[-1] if vals else default

    def config_all(self, key: str) -> list[str]:
        return list(self.config.get(_config_key(key), []))

    def config_bool(self, key: str, default: bool) -> bool:
        raw = self.config_get(key)
        if raw is None:
            return default
        low = raw.strip().lower()
        if low in ("true", "yes", "on", "1", ""):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise LanesError(f"bad boolean config value '{raw}' for '{key}'", exit_code=ExitCode.USAGE)

    def config_int(self, key: str, default: int) -> int:
        raw = self.config_get(key)
        if raw is None:
            return default
        try:
            return int(raw.strip())
        except ValueError:
            raise LanesError(f"bad numeric config value '{raw}' for '{key}'", exit_code=ExitCode.USAGE) from None

    def ident(self, kind: str = "COMMITTER") -> tuple[str, str]:
        """(name, email) for GIT_COMMITTER_IDENT / GIT_AUTHOR_IDENT, else git-lanes (asked once)."""
        if kind not in self._idents:
            self._idents[kind] = self._ident(kind)
        return self._idents[kind]

    def _ident(self, kind: str) -> tuple[str, str]:
        proc = self.run("var", f"GIT_{kind}_IDENT", check=False, safe=False)
        text = proc.stdout.decode("utf-8", "replace").strip()
        if proc.returncode != 0 or "<" not in text:
            return FALLBACK_IDENT
        name, _, rest = text.partition(" <")
        email = rest.split(">", 1)[0]
        if not name.strip() or not email.strip():
            return FALLBACK_IDENT
        return name.strip(), email.strip()

    # -- objects and refs (dulwich for in-process reads and writes) ---------------------

    @cached_property
    def repo(self) -> "DulwichRepo":
        from dulwich.repo import Repo

        return Repo(self.common_dir, bare=True)

    def resolve(self, ref: str) -> str | None:
        """The object id a full ref name points at (peeling symbolic refs), or None."""
        try:
            value = self.repo.refs[ref.encode()]
        except KeyError:
            return None
        return value.decode()

    def rev_parse(self, rev: str, cwd: str | None = None) -> str | None:
        proc = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", cwd=cwd, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def refs_under(self, prefix: str) -> dict[str, str]:
        """{full ref: oid} for every ref under `prefix` (e.g. `refs/notes/lanes/`)."""
        proc = self.run("for-each-ref", "--format=%(refname) %(objectname)", prefix)
        result = {}
        for line in proc.stdout.decode().splitlines():
            name, _, oid = line.rpartition(" ")
            result[name] = oid
        return result

    def update_ref(self, ref: str, new: str | None, old: str | None, reason: str) -> None:
        """Compare-and-swap one ref: `old` None means the ref must not exist; `new` None deletes."""
        self.update_refs([(ref, new, old)], reason)

    def update_refs(self, updates: Sequence[tuple[str, str | None, str | None]], reason: str) -> None:
        """One `git update-ref --stdin` transaction; raises RefRaceError when any old value moved."""
        lines = ["start"]
        for ref, new, old in updates:
            expect = old or ZERO_OID
            if new is None:
                lines.append(f"delete {ref} {expect}")
            else:
                lines.append(f"update {ref} {new} {expect}")
        lines += ["prepare", "commit", ""]
        proc = self.run("update-ref", "-m", reason, "--stdin", input="\n".join(lines), check=False)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            if "but expected" in err or "reference already exists" in err or "unable to resolve reference" in err \
                    or "cannot lock ref" in err and ("is at" in err or "exists" in err):
                raise RefRaceError(err.strip())
            raise GitError(["git", "update-ref", "-m", reason, "--stdin"], proc.returncode, err)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        proc = self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        raise GitError(["git", "merge-base", "--is-ancestor", ancestor, descendant], proc.returncode,
                       proc.stderr.decode("utf-8", "replace"))

    def has_object(self, oid: str) -> bool:
        return oid.encode() in self.repo.object_store

    # -- worktrees and working-tree state -------------------------------------------------

    def worktrees(self) -> list[Worktree]:
        """`git worktree list --porcelain`, parsed."""
        text = self.run("worktree", "list", "--porcelain", "-z", check=False).stdout.decode("utf-8", "surrogateescape")
        result: list[Worktree] = []
        for block in text.split("\0\0"):
            fields: dict[str, str] = {}
            for line in block.split("\0"):
                if line:
                    key, _, value = line.partition(" ")
                    fields[key] = value
            if "worktree" in fields:
                result.append(Worktree(path=fields["worktree"], head=fields.get("HEAD"),
                                       branch=fields.get("branch"), bare="bare" in fields,
                                       prunable="prunable" in fields))
        return result

    def status(self, cwd: str | None = None, untracked: str = "all") -> list[StatusEntry]:
        """`git status --porcelain=v1 -z --no-renames`, parsed (never touches the index lock)."""
        proc = self.run("--no-optional-locks", "status", "--porcelain=v1", "-z", "--no-renames",
                        f"--untracked-files={untracked}", cwd=cwd)
        entries = []
        for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if item:
                entries.append(StatusEntry(xy=item[:2], path=item[3:]))
        return entries



def _config_key(key: str) -> str:
    """Section and variable names are case-insensitive, subsections are not."""
    section, dot, rest = key.partition(".")
    if not dot:
        return key.lower()
    sub, dot2, name = rest.rpartition(".")
    if not dot2:
        return f"{section.lower()}.{rest.lower()}"
    return f"{section.lower()}.{sub}.{name.lower()}"


def real_path(path: str | os.PathLike[str]) -> str:
    return str(Path(path).resolve())
