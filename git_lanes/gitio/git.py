"""`Git`: one discovered repository, and the one process runner for the `git` binary.

Discovery is one `git rev-parse` call (honouring `git -C`, `GIT_DIR`, `GIT_WORK_TREE`, `git -c`
and linked worktrees). Every later call runs with the repository-local variables Git lists
(`--local-env-vars`) and the pathspec variables removed, with the safe `-c` settings of SPEC §8,
and quotes itself in the error when it fails. The configuration is read once.

The object database (`odb`), the refs (`refs`) and the working trees (`work`) are components
of a `Git`, created on first use; the few methods below that delegate to them are the names
the rest of the code (and the tests) use most.
"""

from __future__ import annotations

import os
import subprocess
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from ..core.errors import ExitCode, LanesError
from .process import FALLBACK_IDENT, MIN_GIT, SAFE_CONFIG, GitError, scrubbed_env, spawn

if TYPE_CHECKING:
    from .objects import ObjectDB
    from .refs import Refs
    from .worktrees import StatusEntry, WorkingTrees, WorktreeList

class Git:
    """A discovered repository, seen from one worktree (or a bare repository)."""

    def __init__(self, cwd: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None,
                 *, warn: Callable[[str], None] | None = None, lean: bool = False) -> None:
        self._environ = dict(os.environ if environ is None else environ)
        start = os.fspath(cwd) if cwd is not None else os.getcwd()
        argv = ["git", "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir",
                "--is-bare-repository", "--show-object-format", "--show-toplevel", "--local-env-vars"]
        proc = spawn(argv, start, self._environ)
        if proc.returncode != 0 and b"must be run in a work tree" in proc.stderr:
            argv.remove("--show-toplevel")
            proc = spawn(argv, start, self._environ)
        if proc.returncode != 0:
            failed = GitError(argv, proc.returncode, proc.stderr.decode("utf-8", "replace"))
            if b"not a git repository" in proc.stderr:   # said first; the Git command and its stderr after
                raise LanesError(f"not a git repository (or any of the parent directories): {failed.detail}",
                                 exit_code=ExitCode.FATAL)
            raise failed
        lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
        self.git_dir = lines[0]
        self.common_dir = lines[1]
        self.is_bare = lines[2] == "true"
        if lines[3] != "sha1":   # object ids are 40 hex digits in records, refs and trees alike
            raise LanesError(f"{self.git_dir}: a {lines[3]} repository; git-lanes works with SHA-1 repositories "
                             "only", exit_code=ExitCode.FATAL)
        rest = lines[4:]
        self.toplevel: str | None = rest.pop(0) if rest and rest[0].startswith("/") else None
        self.local_env_vars: tuple[str, ...] = tuple(rest)
        self.env = scrubbed_env(self._environ, self.local_env_vars)
        self.env.setdefault("LC_ALL", "C")
        self.env["GIT_TERMINAL_PROMPT"] = "0"
        self.cwd = start
        self.warn = warn or (lambda text: None)
        self.lean = lean     # read objects through `git cat-file --batch`: no dulwich to import
        self._idents: dict[str, tuple[str, str] | None] = {}

    # -- components ------------------------------------------------------------------------

    @cached_property
    def odb(self) -> "ObjectDB":
        from .objects import ObjectDB

        return ObjectDB(self, lean=self.lean)

    @cached_property
    def refs(self) -> "Refs":
        from .refs import Refs

        return Refs(self)

    @cached_property
    def work(self) -> "WorkingTrees":
        from .worktrees import WorkingTrees

        return WorkingTrees(self)

    # -- running git -------------------------------------------------------------------------

    def run(self, *args: str, cwd: str | None = None, input: bytes | str | None = None,
            check: bool = True, env: Mapping[str, str] | None = None, safe: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run `git ARGS` on this repository (or in the worktree `cwd`), bytes in and out."""
        argv = ["git"]
        if safe:
            argv += SAFE_CONFIG
        if cwd is None:
            argv.append(f"--git-dir={self.git_dir}")
            if self.toplevel:
                argv.append(f"--work-tree={self.toplevel}")
            run_cwd = self.toplevel or self.git_dir
        else:
            run_cwd = cwd
        argv += args
        data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
        foreign = self.foreign(cwd) if cwd is not None else None
        if foreign is not None:   # never run: as if Git had failed there
            proc = subprocess.CompletedProcess(argv, 128, b"", f"fatal: {foreign}".encode("utf-8", "replace"))
        else:
            proc = spawn(argv, run_cwd, dict(env) if env is not None else self.env, data)
        if check and proc.returncode != 0:
            raise GitError(argv, proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc

    def foreign(self, worktree: str) -> str | None:
        """Why Git run in `worktree` would not act on this repository (None: it would). A lane writes
        its own `.git` file: pointed at a repository it made, Git would run that repository's filters
        with the coordinator's environment (docs/security.md), so git-lanes runs nothing there. Read
        with no process: this worktree itself, the main one (`.git` is the common dir) or a linked one
        whose admin folder is under `<common dir>/worktrees/` and names the common dir back."""
        real = os.path.realpath(worktree)
        if self.toplevel is not None and real == self._real_top:
            return None
        common = self._real_common
        dot_git = os.path.join(real, ".git")
        try:
            if os.path.isdir(dot_git) and not os.path.islink(dot_git):
                if os.path.realpath(dot_git) == common:
                    return None
            else:
                with open(dot_git, "rb") as fh:
                    first = fh.readline().rstrip(b"\r\n").decode("utf-8", "surrogateescape")
                if first.startswith("gitdir: "):
                    admin = os.path.realpath(os.path.join(real, first[len("gitdir: "):]))
                    with open(os.path.join(admin, "commondir"), "rb") as fh:
                        named = fh.read().strip().decode("utf-8", "surrogateescape")
                    if os.path.dirname(admin) == os.path.join(common, "worktrees") and \
                            os.path.realpath(os.path.join(admin, named)) == common:
                        return None
        except (OSError, ValueError):
            pass
        return f"{worktree}: its .git does not lead to this repository ({self.common_dir}): git-lanes runs no Git command there"

    @cached_property
    def exec_path(self) -> str:
        """`git --exec-path` (real path): Git puts it first on PATH for the `git lanes` it runs, and
        exports it as `GIT_EXEC_PATH`, which `git --exec-path` prints when set: no process then."""
        return os.path.realpath(self.env.get("GIT_EXEC_PATH") or self.out("--exec-path"))

    @cached_property
    def _real_top(self) -> str:
        return os.path.realpath(self.toplevel or "")

    @cached_property
    def _real_common(self) -> str:
        return os.path.realpath(self.common_dir)

    def out(self, *args: str, cwd: str | None = None, input: bytes | str | None = None) -> str:
        """Stdout of a successful git call as text, without the trailing newline."""
        return self.run(*args, cwd=cwd, input=input).stdout.decode("utf-8", "surrogateescape").rstrip("\n")

    def edit(self, path: str) -> int:
        """Open `path` in the editor `git var GIT_EDITOR` names, on the user's terminal, as `git commit`
        does (the editor string is run by the shell, the file as its argument); the editor's exit code."""
        from .process import attached

        editor = self.out("var", "GIT_EDITOR")
        if editor.strip() == ":":
            return 0
        env = scrubbed_env(self._environ, self.local_env_vars)   # the user's terminal settings, as for a pager
        return attached(["sh", "-c", f'{editor} "$@"', editor, path], self.toplevel or self.git_dir, env)

    def version(self) -> tuple[int, int]:
        parts = self.out("version").split()[2].split(".")   # "git version 2.39.5"
        return int(parts[0]), int(parts[1])

    def require_version(self) -> None:
        have = self.version()
        if have < MIN_GIT:
            raise LanesError(f"git-lanes needs git >= {MIN_GIT[0]}.{MIN_GIT[1]} (found {have[0]}.{have[1]})",
                             exit_code=ExitCode.FATAL)

    # -- configuration -------------------------------------------------------------------------

    @cached_property
    def config(self) -> dict[str, list[str]]:
        """Every configuration value, read once (`git config --list --null`)."""
        proc = self.run("config", "--list", "--null", check=False, safe=False)
        values: dict[str, list[str]] = {}
        for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if item:
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

    def config_values(self, *args: str, scope: str | None = None) -> list[str]:
        """`git config [--<scope>] ARGS` for a read: the values printed ([] when the key is absent)."""
        argv = ["config"] + ([f"--{scope}"] if scope else []) + list(args)
        proc = self.run(*argv, check=False, safe=False)
        if proc.returncode == 1 and not proc.stderr.strip():
            return []
        if proc.returncode != 0:
            raise GitError(["git", *argv], proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc.stdout.decode("utf-8", "surrogateescape").splitlines()

    def config_write(self, *args: str, scope: str = "local") -> None:
        """`git config --<scope> ARGS` for a write; the cached configuration is read again next time."""
        self.run("config", f"--{scope}", *args, safe=False)
        self.__dict__.pop("config", None)

    def ident(self, kind: str = "COMMITTER") -> tuple[str, str]:
        """(name, email) of `git var GIT_<kind>_IDENT`, else git-lanes (asked once)."""
        return self.ident_or_none(kind) or FALLBACK_IDENT

    def ident_or_none(self, kind: str = "COMMITTER") -> tuple[str, str] | None:
        if kind not in self._idents:
            self._idents[kind] = self._ident(kind)
        return self._idents[kind]

    def _ident(self, kind: str) -> tuple[str, str] | None:
        """Read from the environment and the configuration as Git does when both are given there
        (`GIT_<kind>_NAME`, `<kind>.name`, `user.name`; the same for the email, then `EMAIL`), with
        nothing Git would trim or drop in them; else asked of `git var`, which may guess them."""
        low = kind.lower()
        given = [next((v for v in candidates if v is not None), None) for candidates in (
            (self.env.get(f"GIT_{kind}_NAME"), self.config_get(f"{low}.name"), self.config_get("user.name")),
            (self.env.get(f"GIT_{kind}_EMAIL"), self.config_get(f"{low}.email"), self.config_get("user.email"),
             self.env.get("EMAIL")))]
        if all(v and _plain_ident(v) for v in given):
            return given[0], given[1]
        proc = self.run("var", f"GIT_{kind}_IDENT", check=False, safe=False)
        text = proc.stdout.decode("utf-8", "replace").strip()
        if proc.returncode != 0 or "<" not in text:
            return None
        name, _, rest = text.partition(" <")
        email = rest.split(">", 1)[0]
        if not name.strip() or not email.strip():
            return None
        return name.strip(), email.strip()

    # -- the names used everywhere (delegating to the components) -------------------------------

    def resolve(self, ref: str) -> str | None:
        """The object id a full ref name points at, or None."""
        return self.refs.resolve(ref)

    def rev_parse(self, rev: str, cwd: str | None = None) -> str | None:
        """The commit `rev` names (in the worktree `cwd`, e.g. its HEAD), or None."""
        proc = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
                        cwd=cwd, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def refs_under(self, prefix: str) -> dict[str, str]:
        return self.refs.under(prefix)

    def update_ref(self, ref: str, new: str | None, old: str | None, reason: str) -> None:
        self.refs.update([(ref, new, old)], reason)

    def update_refs(self, updates: Sequence[tuple[str, str | None, str | None]], reason: str) -> None:
        self.refs.update(updates, reason)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.odb.is_ancestor(ancestor, descendant)

    def has_object(self, oid: str) -> bool:
        return self.odb.has(oid)

    def worktrees(self) -> "WorktreeList":
        return self.work.list()

    def status(self, cwd: str | None = None, untracked: str = "all") -> list["StatusEntry"]:
        return self.work.status(cwd, untracked=untracked)


def _plain_ident(value: str) -> bool:
    """Whether Git takes an identity's name or email as it is: no character it drops (`<`, `>`, a
    newline), nothing it trims at either end (white space, control characters, `.,:;"'\\`)."""
    crud = " .,:;<>\"\\'"
    return not any(c in value for c in "<>\n") and value[0] not in crud and value[-1] not in crud and \
        ord(value[0]) > 32 and ord(value[-1]) > 32


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
    return os.path.realpath(path)
