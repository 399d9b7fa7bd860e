"""Shared builders and witnesses for the adversarial suite of issue 13 (crash matrix, kill soak,
concurrency, bad input, fuzzing).

Everything here drives the real `git lanes` (a subprocess, in a session of its own so that a kill
takes only the command under test) against real repositories and real linked worktrees, and
reads the results back through Git: the batch record by its documented layout (SPEC §15,
`git show refs/notes/lanes/batch/<slug>:batch.json`), the batch branch's `Lanes-Task` trailers,
`git lanes audit`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from conftest import git
from helpers import check_file, write_initiative
from killgit import GIT_LANES  # noqa: F401  (the executable under test, for callers that start it directly)


SLUG = "adv"

# A small batch: a dependency chain (core -> api) and disjoint siblings (docs, tests).
TASKS: list[dict[str, Any]] = [
    {"id": "core", "scope": ["src/core"], "check": check_file("src/core/core.txt")},
    {"id": "api", "scope": ["src/api"], "blocked_by": ["core"],
     "check": "python3 -c \"import pathlib,sys; sys.exit(0 if pathlib.Path('src/core/core.txt').exists() and "
              "pathlib.Path('src/api/api.txt').exists() else 1)\""},
    {"id": "docs", "scope": ["docs"], "check": check_file("docs/index.md")},
    {"id": "tests", "scope": ["tests"], "check": check_file("tests/t.txt")},
]
FILES = {"core": "src/core/core.txt", "api": "src/api/api.txt", "docs": "docs/index.md", "tests": "tests/t.txt"}
FINAL_CHECKS = ["python3 -c pass"]


# -- running the real executable ------------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    code: int
    out: str
    err: str

    @property
    def killed(self) -> bool:
        return self.code in (-signal.SIGKILL, 128 + signal.SIGKILL)

    def json(self) -> Any:
        assert self.out.strip(), f"no JSON on stdout (exit {self.code}): {self.err}"
        return json.loads(self.out)

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def lanes_proc(cwd: Path | str, *args: str | bytes, env: dict[str, str] | None = None, timeout: float = 120,
               input: str | bytes | None = None) -> Proc:
    """`git lanes ARGS` in a subprocess of its own session; never raises for its exit code."""
    argv: list[str | bytes] = ["git", "lanes", *args]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=timeout, start_new_session=True,
                          input=input.encode() if isinstance(input, str) else (input if input is not None else b""))
    return Proc(proc.returncode, proc.stdout.decode("utf-8", "backslashreplace"),
                proc.stderr.decode("utf-8", "backslashreplace"))


# -- a repository with an initiative ------------------------------------------------------------

def make_repo(root: Path, *, slug: str = SLUG, tasks: list[dict[str, Any]] | None = None,
              final_checks: list[str] | None = None, lanes_root: Path | None = None,
              tracker: str | None = None) -> Path:
    """`root` as a repository with one commit and the initiative `slug` committed on main.
    Lanes go under `lanes_root` (`lanes.worktreeRoot`), so a world is two folders."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    (root / "README").write_text("adversarial tests\n")
    git(root, "add", "README")
    git(root, "commit", "-q", "-m", "initial")
    if lanes_root is not None:
        git(root, "config", "lanes.worktreeRoot", str(lanes_root))
    write_initiative(root, slug, tasks if tasks is not None else TASKS,
                     final_checks=FINAL_CHECKS if final_checks is None else final_checks, tracker=tracker)
    return root


def deliver(lane: Path | str, task: str, text: str | None = None) -> None:
    """The scripted executor's work for `task`: its one file, inside its scope."""
    path = Path(lane) / FILES.get(task, f"src/{task}.txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text is not None else f"work of {task}\n")


def child(report: dict, task: str) -> dict:
    """One child of a report or a record."""
    return next(c for c in report["children"] if c["task_id"] == task)


# -- a world that can be saved and put back in place ---------------------------------------------

class World:
    """The repository and its lanes (two folders under one tmp dir), saved and restored in place so
    every absolute path (worktree links, recorded lane paths) stays valid."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.repo = base / "repo"
        self.lanes = base / "lanes"
        self.saves = base / "saves"

    def build(self, **kw: Any) -> "World":
        make_repo(self.repo, lanes_root=self.lanes, **kw)
        self.lanes.mkdir(exist_ok=True)
        return self

    def save(self, name: str) -> None:
        target = self.saves / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        subprocess.run(["cp", "-a", str(self.repo), str(self.lanes), str(target)], check=True)

    def restore(self, name: str) -> None:
        """Put the saved copy back in place, exactly (every file, link and folder, object store
        included), touching only what differs: a command changes a handful of files."""
        source = self.saves / name
        for folder in (self.repo, self.lanes):
            _rewind(source / folder.name, folder)


def _entries(root: Path) -> dict[str, tuple[str, int, int]]:
    """{relative path: (kind, size, mtime_ns)} below `root` (kind: d, l or f)."""
    out: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            kind = "l" if os.path.islink(full) else "d" if name in dirnames else "f"
            out[os.path.relpath(full, root)] = (kind, 0, 0) if kind == "d" else (kind, st.st_size, st.st_mtime_ns)
    return out


def _rewind(source: Path, target: Path) -> None:
    if not target.exists():
        subprocess.run(["cp", "-a", str(source), str(target)], check=True)
        return
    want, have = _entries(source), _entries(target)
    for rel in sorted(set(have) - set(want), key=len, reverse=True):
        path = target / rel
        if have[rel][0] == "d" and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for rel in sorted(want, key=len):
        if have.get(rel) == want[rel]:
            continue
        src, dst = source / rel, target / rel
        if dst.is_dir() and not dst.is_symlink() and want[rel][0] != "d":
            shutil.rmtree(dst)
        elif (dst.exists() or dst.is_symlink()) and (want[rel][0] == "d") != (dst.is_dir() and not dst.is_symlink()):
            dst.unlink()
        if want[rel][0] == "d":
            dst.mkdir(exist_ok=True)
        elif want[rel][0] == "l":
            dst.unlink(missing_ok=True)
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


# -- witnesses --------------------------------------------------------------------------------------

def record_files(repo: Path, slug: str = SLUG, rev: str | None = None) -> dict[str, Any]:
    """{path: parsed JSON} of the batch record's state tree (SPEC §15 layout), at `rev` or the tip."""
    ref = rev or f"refs/notes/lanes/batch/{slug}"
    listing = git(repo, "ls-tree", "-r", "--full-tree", ref)
    files = {}
    entries = [line.split(None, 3) for line in listing.splitlines() if line]
    batch = "".join(f"{sha}\n" for _mode, kind, sha, _path in entries if kind == "blob")
    raw = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=batch.encode(), capture_output=True,
                         check=True).stdout
    pos = 0
    for _mode, kind, _sha, path in entries:
        if kind != "blob":
            continue
        header_end = raw.index(b"\n", pos)
        size = int(raw[pos:header_end].split()[2])
        files[path] = json.loads(raw[header_end + 1:header_end + 1 + size])
        pos = header_end + 1 + size + 1
    return files


def record(repo: Path, slug: str = SLUG, rev: str | None = None) -> dict[str, Any]:
    """The batch record: batch.json plus `children` in plan order (at state commit `rev`, or the tip)."""
    files = record_files(repo, slug, rev)
    rec = dict(files["batch.json"])
    children = sorted((v for k, v in files.items() if k.startswith("children/")), key=lambda c: c["index"])
    rec["children"] = children
    for name in ("restores", "interventions", "revisions", "reviews", "reseals", "adopted_heads", "archived_lanes"):
        rec[name] = [v for k, v in sorted(files.items()) if k.startswith(name + "/")]
    rec["final_verification"] = files.get("final_verification.json")
    return rec


def record_at(repo: Path, commit: str) -> dict[str, Any]:
    return record(repo, rev=commit)


def state_commits(repo: Path, slug: str = SLUG) -> list[str]:
    """Every state commit of the slug's record, oldest first (the first-parent audit trail)."""
    out = git(repo, "rev-list", "--first-parent", "--reverse", f"refs/notes/lanes/batch/{slug}")
    return out.split()


BATCH_STATES = {"running", "needs_human", "completed", "budget_stopped", "failed", "superseded"}
CHILD_STATES = {"pending", "enrolled", "settled", "lane_committed", "integrated", "released", "needs_human",
                "skipped_blocked"}
IN_FLIGHT = {"enrolled", "settled", "lane_committed"}
DONE = {"integrated", "released"}


def valid_record_problems(rec: dict[str, Any]) -> list[str]:
    """What makes a stored batch record invalid by SPEC §4 (an independent reading, not the product's)."""
    out = []
    state = rec.get("batch_state")
    if state not in BATCH_STATES:
        out.append(f"batch_state {state!r}")
    if rec.get("branch") != f"imm/{rec.get('slug')}":
        out.append(f"branch {rec.get('branch')!r}")
    ids = [c.get("task_id") for c in rec["children"]]
    if len(ids) != len(set(ids)):
        out.append(f"a task twice in children: {ids}")
    commits = [c["commit"] for c in rec["children"] if c.get("commit")]
    if len(commits) != len(set(commits)):
        out.append("two children with one commit")
    for c in rec["children"]:
        s, name = c.get("state"), c.get("task_id")
        if s not in CHILD_STATES:
            out.append(f"{name}: state {s!r}")
        if s in ("needs_human", "skipped_blocked") and not c.get("reason"):
            out.append(f"{name}: {s} without a reason")
        if bool(c.get("commit")) != (s in DONE):
            out.append(f"{name}: {s} with commit {c.get('commit')!r}")
        if s in ("pending", "skipped_blocked") and c.get("lane"):
            out.append(f"{name}: {s} with a lane")
        if (s in IN_FLIGHT or s in DONE) and not c.get("lane"):
            out.append(f"{name}: {s} without a lane")
        if c.get("qa_failures", 0) < 0 or not 0 <= c.get("corrections", 0) <= 2:
            out.append(f"{name}: counters {c.get('qa_failures')}, {c.get('corrections')}")
        if c.get("correction_due") and s != "enrolled":
            out.append(f"{name}: correction_due while {s}")
        if c.get("tracker_closed") not in (None, True) or (c.get("tracker_closed") and s not in DONE):
            out.append(f"{name}: tracker_closed {c.get('tracker_closed')!r} while {s}")
    if state in ("failed", "budget_stopped", "superseded") and any(c.get("state") in IN_FLIGHT for c in rec["children"]):
        out.append(f"{state} with a child in flight")
    if state == "completed" and any(c.get("state") not in DONE for c in rec["children"]):
        out.append("completed with a child not integrated")
    return out


def tree_of(repo: Path, commit: str | None) -> str | None:
    return git(repo, "rev-parse", f"{commit}^{{tree}}").strip() if commit else None


def branch_history(repo: Path, base: str, branch: str) -> list[tuple[str, str, str]]:
    """(subject, Lanes-Task, tree) of each commit base..branch, oldest first; fails on a merge."""
    assert git(repo, "rev-list", "--merges", f"{base}..{branch}").strip() == "", f"{branch} has merges"
    out = git(repo, "log", "--reverse", "--format=%s%x00%(trailers:key=Lanes-Task,valueonly,separator=%x2C)%x00%T%x01",
              f"{base}..{branch}")
    rows = []
    for item in out.split("\x01"):
        item = item.strip("\n")
        if item:
            subject, task, tree = item.split("\x00")
            rows.append((subject, task.strip(), tree))
    return rows


def landed_tasks(repo: Path, slug: str = SLUG) -> list[str]:
    """Lanes-Task of every commit the batch branch holds beyond the batch base; each exactly once."""
    rec = record(repo, slug)
    tasks = [task for _s, task, _t in branch_history(repo, rec["base_head"], f"imm/{slug}")]
    assert len(tasks) == len(set(tasks)), f"a task landed twice on imm/{slug}: {tasks}"
    return tasks


def delivery(path: Path | str) -> tuple[str, str] | None:
    """(tree of the lane's delivery — HEAD plus every change, as `done` snapshots it —, `git status`),
    without touching the lane's index; None when the lane folder is gone."""
    path = Path(path)
    if not path.is_dir():
        return None
    index = path.parent / f".{path.name}.witness-index"
    try:
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        subprocess.run(["git", "read-tree", "HEAD"], cwd=path, env=env, check=True, capture_output=True)
        subprocess.run(["git", "add", "-A"], cwd=path, env=env, check=True, capture_output=True)
        tree = subprocess.run(["git", "write-tree"], cwd=path, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    status = git(path, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all")
    return tree, status


def lane_change(repo: Path, lane: dict[str, Any]) -> str | None:
    """The lane commit's change on its lane base (its tree also holds the base, which in a run
    depends on when the lane was made)."""
    if not lane.get("lane_commit"):
        return None
    return git(repo, "diff-tree", "-r", lane["base_head"], lane["lane_commit"])


def outcome(repo: Path, slug: str = SLUG) -> dict[str, Any]:
    """What a crash must not change, with timestamps and random ids masked: the batch branch (by
    subjects, tasks and trees), the record's states and counters, every lane's work."""
    rec = record(repo, slug)
    children = []
    for c in rec["children"]:
        lane = c.get("lane")
        children.append({
            "task_id": c["task_id"], "state": c["state"], "reason": c.get("reason"),
            "commit_tree": tree_of(repo, c.get("commit")), "qa_failures": c.get("qa_failures", 0),
            "corrections": c.get("corrections", 0), "correction_due": c.get("correction_due"),
            "tracker_closed": c.get("tracker_closed"),
            "lane": None if not lane else {"branch": lane["branch"],
                                           "lane_commit_tree": tree_of(repo, lane.get("lane_commit")),
                                           "lane_change": lane_change(repo, lane)},
        })
    lanes = {}
    for c in rec["children"]:
        if c.get("lane") and c["lane"].get("path"):
            lanes[c["task_id"]] = delivery(c["lane"]["path"])
    branches = git(repo, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/imm-lane/")
    fv = rec.get("final_verification")
    return {
        "batch_state": rec["batch_state"], "reason": rec.get("reason"), "plan_digest": rec["plan_digest"],
        "branch": branch_history(repo, rec["base_head"], f"imm/{slug}"), "children": children,
        "restores": [sorted((p["path"], p["kind"]) for p in r["paths"]) for r in rec["restores"]],
        "interventions": [(i["task_id"], i["kind"], i["text"]) for i in rec["interventions"]],
        "adopted_heads": len(rec["adopted_heads"]),
        "final_verification": None if fv is None else fv["passed"],
        "lanes": lanes,
        "lane_branches": sorted(line.split()[0] for line in branches.splitlines()),
        "coordinator_status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "coordinator_branch": git(repo, "symbolic-ref", "-q", "HEAD").strip(),
        "evidence": evidence_tasks(repo, rec),
        "changes": {c["task_id"]: git(repo, "diff-tree", "-r", "--no-commit-id", c["commit"])
                    for c in rec["children"] if c.get("commit")},
    }


def order_free(o: dict[str, Any]) -> dict[str, Any]:
    """An outcome without the order of integration (for runs, where the executors' timing decides
    which of two disjoint tasks lands first, and so the head a later lane starts from): subjects and
    tasks as a set, each task's change kept (on the batch branch and in its lane commit)."""
    return {**o, "branch": sorted((subject, task) for subject, task, _ in o["branch"]),
            "children": [{**c, "commit_tree": None,
                          "lane": c["lane"] and {**c["lane"], "lane_commit_tree": None}} for c in o["children"]]}


def evidence_tasks(repo: Path, rec: dict[str, Any]) -> list[str]:
    """The task of each evidence note on the batch's integrated commits (SPEC §8.5)."""
    tasks = []
    for c in rec["children"]:
        if c.get("commit"):
            proc = subprocess.run(["git", "notes", "--ref=lanes/evidence", "show", c["commit"]], cwd=repo,
                                  capture_output=True, text=True)
            if proc.returncode == 0:
                tasks.append(json.loads(proc.stdout).get("task_id"))
    return sorted(tasks)


def differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Readable differences of two outcomes, key by key."""
    out = []
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            out.append(f"{key}:\n    got  {got.get(key)!r}\n    want {want.get(key)!r}")
    return out


def assert_recovered(repo: Path, want: dict[str, Any], *, slug: str = SLUG, context: str = "",
                     any_order: bool = False) -> None:
    """The invariants after a crash and the next command: same outcome (`any_order`: up to the order
    of integration), one commit per task, every lane's work kept, `audit` clean."""
    got = outcome(repo, slug)
    diff = differences(order_free(got), order_free(want)) if any_order else differences(got, want)
    assert not diff, f"{context}: the batch differs from the uncrashed run:\n" + "\n".join(diff)
    landed_tasks(repo, slug)
    audit = lanes_proc(repo, "audit")
    assert audit.code == 0, f"{context}: audit: {audit}"


def shell_words(*argv: str) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def python_command(script: Path, *args: str) -> str:
    """A command string (no shell) running `script` with this interpreter."""
    return shell_words(sys.executable, str(script), *args)


# -- building worlds fast: the CLI in-process --------------------------------------------------------

def step(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> Any:
    """`git lanes ARGS --json` in-process (for building a world only: what is tested runs as a
    subprocess); fails the test unless it exits 0."""
    from helpers import lanes

    code, out, err = lanes(Path(cwd), *args, "--json", env=env)
    assert code == 0, f"git lanes {' '.join(args)} exited {code}: {err}"
    return json.loads(out) if out.strip() else None


# -- a scripted executor (SPEC §13: a command run in each lane, no shell) ----------------------------------

EXECUTOR = r'''
import os, pathlib, sys, time
task = os.environ["GIT_LANES_TASK"]
pids = os.environ.get("EXEC_PIDS")
if pids:   # the test kills what a killed `run` leaves running (sessions live in groups of their own)
    pathlib.Path(pids, str(os.getpid())).touch()
files = {"core": "src/core/core.txt", "api": "src/api/api.txt", "docs": "docs/index.md", "tests": "tests/t.txt"}
time.sleep(float(os.environ.get("EXEC_SLEEP", "0")))
path = pathlib.Path(files.get(task, f"src/{task}/{task}.txt"))
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(f"work of {task}\n")
if pids:
    pathlib.Path(pids, str(os.getpid())).unlink(missing_ok=True)
'''


def write_executor(folder: Path) -> str:
    """The scripted executor in `folder`; returns the `--executor` command string."""
    script = folder / "executor.py"
    script.write_text(EXECUTOR)
    return python_command(script)


def chain_and_siblings(n: int, chain: int = 3) -> list[dict[str, Any]]:
    """n tasks: t00 -> t01 -> … (a chain of `chain`), the rest disjoint; each writes
    src/<id>/<id>.txt and checks it exists."""
    tasks = []
    for i in range(n):
        tid = f"t{i:02d}"
        task: dict[str, Any] = {"id": tid, "scope": [f"src/{tid}"], "check": check_file(f"src/{tid}/{tid}.txt")}
        if 0 < i < chain:
            task["blocked_by"] = [f"t{i - 1:02d}"]
        tasks.append(task)
    return tasks


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_orphans(pids_dir: Path) -> None:
    """SIGKILL the executor sessions a killed `run` left (each leads a group of its own)."""
    for entry in pids_dir.iterdir():
        kill_group(int(entry.name))
        entry.unlink(missing_ok=True)


# Lock files the SPEC lets a command wait up to a minute for (§15: `.lock` on imm/* and imm-lane/*,
# index.lock of the coordinator, a lane or the scratch worktree).
def aging_locks(git_dir: Path) -> list[Path]:
    found = []
    for sub in ("refs/heads/imm", "refs/heads/imm-lane"):
        base = git_dir / sub
        if base.is_dir():
            found += base.rglob("*.lock")
        if (git_dir / f"{sub}.lock").exists():
            found.append(git_dir / f"{sub}.lock")
    found += [p for p in [git_dir / "index.lock"] if p.exists()]
    found += (git_dir / "worktrees").glob("*/index.lock") if (git_dir / "worktrees").is_dir() else []
    # the `initializing` lock of a `git worktree add` (a dead one's is cleared once stale)
    found += (git_dir / "worktrees").glob("*/locked") if (git_dir / "worktrees").is_dir() else []
    return found


def other_locks(git_dir: Path) -> list[Path]:
    """Git lock files that are neither age-gated nor git-lanes' own `flock` files."""
    aging = set(aging_locks(git_dir))
    own = git_dir / "lanes" / "locks"
    return [p for p in git_dir.rglob("*.lock") if p not in aging and own not in p.parents]


def age(paths: Iterable[Path], seconds: float = 61) -> None:
    """Make lock files look `seconds` old: the minute the SPEC lets a command wait, passed at once."""
    import time

    then = time.time() - seconds
    for p in paths:
        try:
            os.utime(p, (then, then))
        except FileNotFoundError:
            pass


# -- tampering with stored state (the plumbing a hostile or broken tool would use) -----------------------

def _git_bytes(repo: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    proc = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, env=env)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def write_blob(repo: Path, data: bytes) -> str:
    return _git_bytes(repo, "hash-object", "-w", "--stdin", input=data).decode().strip()


def rewrite_state(repo: Path, ref: str, changes: dict[bytes, bytes | None]) -> str:
    """A new state commit on `ref` (a child of its tip) whose tree is the tip's with `changes`
    applied (path -> blob content, None deletes; paths are bytes, so they need not be UTF-8)."""
    index = repo / ".git" / "tamper-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    try:
        _git_bytes(repo, "read-tree", ref, env=env)
        lines = b""
        for path, data in changes.items():
            if data is None:
                lines += b"0 " + b"0" * 40 + b"\t" + path + b"\0"
            else:
                lines += b"100644 " + write_blob(repo, data).encode() + b"\t" + path + b"\0"
        _git_bytes(repo, "update-index", "-z", "--index-info", input=lines, env=env)
        tree = _git_bytes(repo, "write-tree", env=env).decode().strip()
    finally:
        index.unlink(missing_ok=True)
    commit = _git_bytes(repo, "commit-tree", tree, "-p", ref, "-m", "tampered").decode().strip()
    _git_bytes(repo, "update-ref", ref, commit)
    return commit


def child_path(repo: Path, ref: str, task: str) -> bytes:
    """The path of a child's blob in the state tree (`children/<2 hex>/<task>.json`)."""
    names = _git_bytes(repo, "ls-tree", "-r", "--name-only", "-z", ref).split(b"\0")
    return next(n for n in names if n.startswith(b"children/") and n.endswith(b"/" + task.encode() + b".json"))


def point_ref_at(repo: Path, ref: str, what: str) -> None:
    """Make `ref` name a blob, a tree or a missing object (a loose ref file written directly)."""
    if what == "blob":
        oid = write_blob(repo, b"not a record\n")
    elif what == "tree":
        oid = _git_bytes(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    else:
        oid = "0123456789abcdef0123456789abcdef01234567"
    path = repo / ".git" / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    packed = repo / ".git" / "packed-refs"
    if packed.exists():
        packed.write_text("".join(l for l in packed.read_text().splitlines(True) if not l.rstrip().endswith(" " + ref)))
    path.write_text(oid + "\n")


# -- TOML plan files ------------------------------------------------------------------------------------------

def toml_key(k: str) -> str:
    import re

    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml(doc: dict[str, Any]) -> str:
    """A small TOML writer: scalars and arrays first, then tables and arrays of tables."""
    lines, tables = [], []
    for k, v in doc.items():
        if isinstance(v, dict) or (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)):
            tables.append((k, v))
        else:
            lines.append(f"{toml_key(k)} = {toml_value(v)}")
    for k, v in tables:
        for item in (v if isinstance(v, list) else [v]):
            lines.append(f"[[{toml_key(k)}]]" if isinstance(v, list) else f"[{toml_key(k)}]")
            lines += [f"{toml_key(ik)} = {toml_value(iv)}" for ik, iv in item.items()]
    return "\n".join(lines) + "\n"
