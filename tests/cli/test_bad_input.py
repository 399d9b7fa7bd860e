"""Bad input (SPEC §1, §2, §2.1, §6, §6.1, §6.2, §16, §17.6): every malformed plan file, option, offer,
instruction, revision, final check, remote name, id and tampered record gets one clean answer and
changes nothing; the last tests are what the acceptance tests and an adversarial probe found.

Each case runs one `git lanes` command and asserts, from the SPEC:
- the documented exit code (§16: 1 refusal, 2 usage or invalid input, 128 fatal environment or
  corrupt record);
- exactly one `error:` line on stderr, no traceback, no `internal error`; nothing on stdout on
  exit 2 or 128 (§6);
- nothing changed: every ref, `git status` of the coordinator and of each lane, and the set of
  files below the folder that holds the repository and its lanes (so nothing is created outside
  the repository either).

Cases run in-process (`helpers.lanes`) for speed; those whose arguments carry bytes that are not
UTF-8 or lone surrogates, and a sample of the others, run the real executable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from adversary import (SLUG, World, child, child_path, deliver, lanes_proc, point_ref_at, record, rewrite_state,
                       step, toml)
from conftest import git
from helpers import all_refs, git_lanes, snapshot_state, write_initiative
from helpers import lanes as lanes_inprocess

# -- TOML plan files --------------------------------------------------------------------------------------

def good_intent(task: str, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"task_id": task, "revision": 1, "goal": f"Do {task}", "scope": [f"src/{task}"]}
    if task == "b":
        doc["blocked_by"] = ["a"]
    doc["acceptance"] = [{"id": "A1", "text": "works", "check": "python3 -c pass"}]
    for key, value in changes.items():
        if value is DELETE:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


DELETE = object()


def with_item(**changes: Any) -> list[dict[str, Any]]:
    item: dict[str, Any] = {"id": "A1", "text": "works", "check": "python3 -c pass"}
    for key, value in changes.items():
        if value is DELETE:
            item.pop(key)
        else:
            item[key] = value
    return [item]


@dataclass(frozen=True)
class PlanCase:
    name: str
    files: dict[str, str | bytes]      # file name -> content, in .lanes/<slug>/
    ok: bool = False                    # a positive control: accepted


def plan(name: str, *, initiative: dict | str | bytes | None = None, a: dict | str | bytes | None = None,
         b: dict | str | bytes | None = None, extra: dict[str, str | bytes] | None = None,
         drop: tuple[str, ...] = (), ok: bool = False) -> PlanCase:
    files: dict[str, str | bytes] = {
        "initiative.toml": toml({"title": "Bad input", "tasks": ["a", "b"]}) if initiative is None else
        (toml(initiative) if isinstance(initiative, dict) else initiative),
        "a.toml": toml(good_intent("a")) if a is None else (toml(a) if isinstance(a, dict) else a),
        "b.toml": toml(good_intent("b")) if b is None else (toml(b) if isinstance(b, dict) else b),
    }
    files.update(extra or {})
    for name_ in drop:
        files.pop(name_)
    return PlanCase(name, files, ok)


def initiative(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"title": "Bad input", "tasks": ["a", "b"]}
    for key, value in changes.items():
        if value is DELETE:
            doc.pop(key)
        else:
            doc[key] = value
    return doc


BAD_IDS = ["../x", "a/b", "-x", "x.lock", "a..b", "A" * 200, "", " a", "é", ".x", "x.", "a b", "a:b", "a*"]

PLAN_CASES: list[PlanCase] = [
    plan("no-initiative-file", drop=("initiative.toml",)),
    plan("initiative-invalid-toml", initiative="title = \n"),
    plan("initiative-not-utf8", initiative=b'title = "\xff\xfe"\ntasks = ["a", "b"]\n'),
    plan("initiative-unknown-key", initiative=initiative(colour="red")),
    plan("title-missing", initiative=initiative(title=DELETE)),
    plan("title-blank", initiative=initiative(title="   ")),
    plan("title-int", initiative=initiative(title=7)),
    plan("tasks-missing", initiative=initiative(tasks=DELETE)),
    plan("tasks-empty", initiative=initiative(tasks=[]), drop=("a.toml", "b.toml")),
    plan("tasks-string", initiative=initiative(tasks="a")),
    plan("tasks-int", initiative=initiative(tasks=[1, 2])),
    plan("task-listed-twice", initiative=initiative(tasks=["a", "a", "b"])),
    plan("task-reserved-initiative", initiative=initiative(tasks=["a", "b", "initiative"])),
    *[plan(f"task-id-{i}", initiative=initiative(tasks=["a", "b", bad])) for i, bad in enumerate(BAD_IDS)],
    plan("final-checks-string", initiative=initiative(final_checks="python3 -c pass")),
    plan("final-checks-int", initiative=initiative(final_checks=[1])),
    *[plan(f"final-check-char-{i}", initiative=initiative(final_checks=[f"python3 -c pass {c}x"]))
      for i, c in enumerate("|&;<>\\`$(){}\"'")],
    plan("final-checks-nine", initiative=initiative(final_checks=["python3 -c pass"] * 9)),
    plan("final-check-513", initiative=initiative(final_checks=["python3 " + "x" * 505])),
    plan("final-check-newline", initiative=initiative(final_checks=["python3\n-c pass"])),
    plan("final-check-cr", initiative=initiative(final_checks=["python3\r-c pass"])),
    plan("final-check-empty", initiative=initiative(final_checks=[""])),
    plan("final-check-blank", initiative=initiative(final_checks=["   "])),
    plan("final-check-control-char", initiative=initiative(final_checks=["python3 -c pass\x07"])),
    plan("final-check-escape-char", initiative=initiative(final_checks=["python3 -c pass\x1b[31m"])),
    plan("tracker-unknown-key", initiative=initiative(tracker={"github": "o/r", "gitlab": "x"})),
    plan("tracker-not-owner-repo", initiative=initiative(tracker={"github": "nope"})),
    plan("tracker-three-parts", initiative=initiative(tracker={"github": "a/b/c"})),
    plan("tracker-dotdot", initiative=initiative(tracker={"github": "a/.."})),
    plan("tracker-not-table", initiative=initiative(tracker="o/r")),
    plan("tracker-missing-github", initiative=initiative(tracker={})),
    # intents
    plan("intent-invalid-toml", a="task_id = 'a'\nrevision = \n"),
    plan("intent-not-utf8", a=b'task_id = "a"\nrevision = 1\ngoal = "\xc3\x28"\n'),
    plan("task-id-missing", a=good_intent("a", task_id=DELETE)),
    plan("task-id-not-stem", a=good_intent("a", task_id="b")),
    plan("task-id-int", a=good_intent("a", task_id=1)),
    plan("task-id-invalid", a=good_intent("a", task_id="../a")),
    plan("revision-missing", a=good_intent("a", revision=DELETE)),
    plan("revision-string", a=good_intent("a", revision="1")),
    plan("revision-zero", a=good_intent("a", revision=0)),
    plan("revision-negative", a=good_intent("a", revision=-1)),
    plan("revision-float", a=good_intent("a", revision=1.0)),
    plan("revision-bool", a=good_intent("a", revision=True)),
    plan("goal-missing", a=good_intent("a", goal=DELETE)),
    plan("goal-empty", a=good_intent("a", goal="")),
    plan("goal-blank", a=good_intent("a", goal=" \t ")),
    plan("goal-int", a=good_intent("a", goal=5)),
    plan("goal-list", a=good_intent("a", goal=["x"])),
    plan("scope-missing", a=good_intent("a", scope=DELETE)),
    plan("scope-empty", a=good_intent("a", scope=[])),
    plan("scope-string", a=good_intent("a", scope="src/a")),
    plan("scope-int-entry", a=good_intent("a", scope=[1])),
    *[plan(f"scope-entry-{i}", a=good_intent("a", scope=[entry])) for i, entry in enumerate(
        ["", "   ", "/src/a", "src\\a", "././src", "src/./a", "src/../a", "..", ".", "src/{a}", "src/}", "!src",
         "src/a/..", "src//../x", " ../x*", " /abs*", "src/.. ", "src/a\0*", "src/\na"])],
    plan("blocked-by-unknown", b=good_intent("b", blocked_by=["zz"])),
    plan("blocked-by-self", a=good_intent("a", blocked_by=["a"])),
    plan("blocked-by-duplicate", b=good_intent("b", blocked_by=["a", "a"])),
    plan("blocked-by-string", b=good_intent("b", blocked_by="a")),
    plan("blocked-by-int", b=good_intent("b", blocked_by=[1])),
    plan("blocked-by-invalid-id", b=good_intent("b", blocked_by=["../a"])),
    plan("blocker-after-dependent", initiative=initiative(tasks=["b", "a"])),
    plan("cycle", a=good_intent("a", blocked_by=["b"])),
    plan("owner-blank", a=good_intent("a", owner="  ")),
    plan("owner-int", a=good_intent("a", owner=3)),
    plan("risk-unknown", a=good_intent("a", risk="high")),
    plan("risk-int", a=good_intent("a", risk=1)),
    plan("spec-absolute", a=good_intent("a", spec="/etc/passwd")),
    plan("spec-dotdot", a=good_intent("a", spec="../x.md")),
    plan("spec-int", a=good_intent("a", spec=1)),
    plan("issue-zero", a=good_intent("a", issue=0)),
    plan("issue-negative", a=good_intent("a", issue=-4)),
    plan("issue-string", a=good_intent("a", issue="42")),
    plan("issue-float", a=good_intent("a", issue=4.2)),
    plan("review-string", a=good_intent("a", review="yes")),
    plan("review-int", a=good_intent("a", review=1)),
    plan("intent-unknown-key", a=good_intent("a", colour="red")),
    plan("acceptance-missing", a=good_intent("a", acceptance=DELETE)),
    plan("acceptance-empty", a="task_id = \"a\"\nrevision = 1\ngoal = \"g\"\nscope = [\"src/a\"]\nacceptance = []\n"),
    plan("acceptance-table", a="task_id = \"a\"\nrevision = 1\ngoal = \"g\"\nscope = [\"src/a\"]\n"
                               "[acceptance]\nid = \"A1\"\ntext = \"t\"\ncheck = \"true\"\n"),
    plan("acceptance-id-missing", a=good_intent("a", acceptance=with_item(id=DELETE))),
    plan("acceptance-text-missing", a=good_intent("a", acceptance=with_item(text=DELETE))),
    plan("acceptance-check-missing", a=good_intent("a", acceptance=with_item(check=DELETE))),
    plan("acceptance-id-blank", a=good_intent("a", acceptance=with_item(id=" "))),
    plan("acceptance-text-blank", a=good_intent("a", acceptance=with_item(text=""))),
    plan("acceptance-id-int", a=good_intent("a", acceptance=with_item(id=1))),
    plan("acceptance-duplicate-id", a=good_intent("a", acceptance=with_item() * 2)),
    plan("check-empty", a=good_intent("a", acceptance=with_item(check=""))),
    plan("check-blank", a=good_intent("a", acceptance=with_item(check="   "))),
    plan("check-unbalanced-quote", a=good_intent("a", acceptance=with_item(check="python3 -c 'pass"))),
    plan("check-int", a=good_intent("a", acceptance=with_item(check=1))),
    plan("timeout-zero", a=good_intent("a", acceptance=with_item(timeout=0))),
    plan("timeout-negative", a=good_intent("a", acceptance=with_item(timeout=-5))),
    plan("timeout-string", a=good_intent("a", acceptance=with_item(timeout="10"))),
    plan("timeout-float", a=good_intent("a", acceptance=with_item(timeout=1.5))),
    plan("timeout-bool", a=good_intent("a", acceptance=with_item(timeout=True))),
    plan("acceptance-unknown-key", a=good_intent("a", acceptance=with_item(weight=2))),
    plan("task-file-not-listed", extra={"c.toml": toml(good_intent("c"))}),
    plan("listed-task-without-file", initiative=initiative(tasks=["a", "b", "c"])),
    # SPEC §2 (v3): shell syntax outside quotes in a check's raw text
    *[plan(f"check-shell-{i}", a=good_intent("a", acceptance=with_item(check=check)))
      for i, check in enumerate(["python3 -c pass && false", "python3 -c pass || true", "python3 -c pass | cat",
                                 "python3 -c pass; false", "python3 -c pass ;false", "python3 -c pass & true",
                                 "python3 -c pass > out.txt", "python3 -c pass >> out.txt",
                                 "python3 -c pass < in.txt", "python3 -c pass 2>&1", "FOO=1 python3 -c pass",
                                 "python3 -c pass&&false", "python3 -c pass>out.txt", "true\nfalse",
                                 "python3 -c pass\r\npython3 -c 'exit(1)'"])],
    # positive controls: quoted shell words are ordinary arguments; other files are ignored
    plan("ok-quoted-and-and", a=good_intent("a", acceptance=with_item(check="python3 -c pass '&&'")), ok=True),
    plan("ok-quoted-pipe", a=good_intent("a", acceptance=with_item(check='python3 -c "print(1|2)"')), ok=True),
    plan("ok-trailing-line-break", a=good_intent("a", acceptance=with_item(check="python3 -c pass\n")), ok=True),
    plan("ok-quoted-line-break", a=good_intent("a", acceptance=with_item(check="python3 -c 'x = 1\nprint(x)'")),
         ok=True),
    plan("ok-other-files-ignored", extra={"notes.md": "# notes\n", "README": "x"}, ok=True),
]


# -- worlds --------------------------------------------------------------------------------------------

class Worlds:
    """One saved world per kind, restored in place only after a case changed it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.worlds: dict[str, World] = {}
        self.dirty: set[str] = set()

    def get(self, kind: str) -> World:
        if kind not in self.worlds:
            w = World(self.base / "worlds" / kind)
            BUILD[kind](w)
            w.save("pre")
            self.worlds[kind] = w
        elif kind in self.dirty:
            self.worlds[kind].restore("pre")
        self.dirty.discard(kind)
        return self.worlds[kind]


def build_plain(w: World) -> None:
    w.build()


def build_started(w: World) -> None:
    w.build()
    step(w.repo, "start", SLUG, "--yes", "--max-parallel", "3")
    for task in ("core", "docs"):
        step(w.repo, "provision", task)


def build_delivered(w: World) -> None:
    build_started(w)
    lane = Path(child(record(w.repo), "core")["lane"]["path"])
    deliver(lane, "core")
    step(lane, "done")


def build_planfiles(w: World) -> None:
    """Every bad plan of PLAN_CASES in one commit, each in its own folder `.lanes/<slug>/`."""
    w.build()
    for i, case in enumerate(PLAN_CASES):
        folder = w.repo / ".lanes" / plan_slug(i)
        folder.mkdir(parents=True)
        for name, content in case.files.items():
            (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)
    git(w.repo, "add", "-A")
    git(w.repo, "commit", "-q", "-m", "bad plans")


TOKEN = "ghp_adversarialTOKEN_0123456789"
PRINT_TOKEN = "python3 -c \"import os; print('token:', os.environ.get('GITHUB_TOKEN'))\""


def plan_slug(i: int) -> str:
    return f"bad{i:03d}"


def build_token(w: World) -> None:
    """core's check prints GITHUB_TOKEN (a secret a check may well print); core has a lane."""
    w.build(tasks=[{"id": "core", "scope": ["src/core"], "check": PRINT_TOKEN}])
    step(w.repo, "start", SLUG, "--yes")
    step(w.repo, "provision", "core")


BUILD: dict[str, Callable[[World], None]] = {"plain": build_plain, "started": build_started,
                                             "delivered": build_delivered, "planfiles": build_planfiles,
                                             "token": build_token}
_WORLDS: Worlds | None = None


@pytest.fixture
def worlds(tmp_path_factory) -> Worlds:
    global _WORLDS
    if _WORLDS is None:
        _WORLDS = Worlds(tmp_path_factory.mktemp("bad-input"))
    return _WORLDS


# -- the witness: nothing changed ----------------------------------------------------------------------

def _ignored(rel: str) -> bool:
    """What a refused command may create without writing anything: Git's object store (content-
    addressed: unreferenced objects change nothing), git-lanes' lock folder with the `flock` files of
    valid ids, and its excludes file."""
    parts = rel.split("/")
    if ".git" not in parts:
        return False
    inner = parts[parts.index(".git") + 1:]
    if inner[:1] == ["objects"] or inner in (["lanes"], ["lanes", "locks"], ["lanes", "exclude"]):
        return True
    if inner[:2] == ["lanes", "locks"] and len(inner) > 2:
        # v4's lock folders and their files (SPEC §15 v4), and v3's lock files a v4 writer also takes
        names = inner[3:] if inner[2] in ("batch", "lane", "verify", "run", "ff", "fetch", "scratch") else \
            [n.rsplit(".", 1)[0] for n in inner[2:]]
        return len(names) <= 2 and all(
            re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9_-])?", n) and ".." not in n
            and not n.endswith(".lock") for n in names)
    return False


Fingerprint = dict[str, tuple[int, int]]


def fingerprint(root: Path) -> Fingerprint:
    """(size, mtime) of every file and folder below `root` but the object store and saved copies:
    every ref (loose or packed), every index, every working-tree file of the coordinator and the
    lanes. Stronger than comparing `for-each-ref` and `git status`, and taken without running Git
    (which could refresh an index itself)."""
    out: Fingerprint = {}

    def walk(path: str, rel: str) -> None:
        with os.scandir(path) as entries:
            for entry in entries:
                name = rel + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if (rel == "" and entry.name == "saves") or (entry.name == "objects" and rel.endswith(".git/")):
                        continue
                    if not _ignored(name):
                        out[name] = (0, 0)
                    walk(entry.path, name + "/")
                elif not _ignored(name):
                    st = entry.stat(follow_symlinks=False)
                    out[name] = (st.st_size, st.st_mtime_ns)

    walk(str(root), "")
    return out


def witness(w: World, root: Path) -> Fingerprint:
    """The world's fingerprint plus the names beside it (where an id that climbs out of
    `.git/lanes/locks/` lands)."""
    fp = fingerprint(w.base)
    for folder, prefix in ((w.base.parent, "../"), (root, "../../")):
        for p in folder.iterdir():
            fp[prefix + p.name] = (0, 0)
    return fp


def changes(a: Fingerprint, b: Fingerprint) -> list[str]:
    created = sorted(set(b) - set(a))
    removed = sorted(set(a) - set(b))
    modified = sorted(p for p in set(a) & set(b) if a[p] != b[p])
    out = []
    for label, items in (("created", created), ("removed", removed), ("modified", modified)):
        if items:
            out.append(f"{label}: {items[:8]}{' …' if len(items) > 8 else ''}")
    return out


# -- a case ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    world: str
    argv: tuple[Any, ...]              # str, or bytes for what is not valid UTF-8
    code: int
    cwd: str = "repo"                  # "repo", "lane:<task>", "repo/<sub>", "outside"
    setup: Callable[[World], None] | None = None    # changes made before the witness (tampering)
    real: bool = False                 # run the real executable (always for bytes and surrogates)
    env: dict[str, str] = field(default_factory=dict)


def needs_real(case: Case) -> bool:
    def odd(a: Any) -> bool:
        return isinstance(a, bytes) or (isinstance(a, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in a))
    return case.real or any(odd(a) for a in case.argv) or any(odd(v) for v in case.env.values())


def where(w: World, cwd: str, root: Path) -> Path:
    if cwd == "repo":
        return w.repo
    if cwd.startswith("lane:"):
        return Path(child(record(w.repo), cwd[5:])["lane"]["path"])
    if cwd.startswith("repo/"):
        sub = w.repo / cwd[5:]
        sub.mkdir(parents=True, exist_ok=True)
        return sub
    if cwd == "outside":
        out = root / "outside"
        out.mkdir(exist_ok=True)
        return out
    raise ValueError(cwd)


def run_case(worlds: Worlds, case: Case) -> None:
    w = worlds.get(case.world)
    root = worlds.base
    cwd = where(w, case.cwd, root)
    if case.setup is not None:
        worlds.dirty.add(case.world)
        case.setup(w)
    before = witness(w, root)
    if needs_real(case):
        env = {**os.environ, **case.env}
        proc = lanes_proc(cwd, *[to_bytes(a) for a in case.argv], env=env)
        code, out, err = proc.code, proc.out, proc.err
    else:
        code, out, err = lanes_inprocess(cwd, *case.argv, env=case.env or None)
    after = witness(w, root)
    changed = changes(before, after)
    if changed:
        worlds.dirty.add(case.world)
    shown = f"git lanes {' '.join(map(repr, case.argv))} (in {case.cwd}) -> exit {code}\nstdout: {out[-1500:]}\n" \
            f"stderr: {err[-1500:]}"
    assert "Traceback" not in err and "internal error" not in err, shown
    assert code == case.code, f"expected exit {case.code}: {shown}"
    errors = [line for line in err.splitlines() if line.startswith(("error:", "fatal:"))]
    if case.code != 0:
        assert len(errors) == 1 and errors[0].startswith("error:"), f"expected one error: line: {shown}"
    if case.code in (2, 128):
        assert out == "", f"stdout on exit {case.code}: {shown}"
    assert not changed, f"{shown}\n" + "\n".join(changed)


def to_bytes(a: Any) -> bytes:
    """An argument as the bytes a process receives: str with surrogate escapes becomes the raw
    bytes they stand for, a lone surrogate its (invalid) UTF-8 encoding."""
    if isinstance(a, bytes):
        return a
    try:
        return os.fsencode(a)
    except UnicodeEncodeError:
        return a.encode("utf-8", "surrogatepass")


# -- the cases ------------------------------------------------------------------------------------------

def plan_cases() -> list[Case]:
    out = []
    for i, pc in enumerate(PLAN_CASES):
        slug = plan_slug(i)
        out.append(Case(f"plan-file/{pc.name}/plan", "planfiles", ("plan", slug), 0 if pc.ok else 2))
        if not pc.ok:
            out.append(Case(f"plan-file/{pc.name}/start", "planfiles", ("start", slug, "--yes"), 2))
    return out


COMMANDS = ["plan", "start", "tick", "status", "show", "log", "task", "done", "inbox", "instruct", "review", "revise",
            "integrate", "verify", "resume", "retire", "provision", "release", "audit", "run", "demo", "push", "pull",
            "join", "contracts", "schema", "completion", "aliases"]
def option_cases() -> list[Case]:
    c: list[Case] = []
    for cmd in COMMANDS:
        c.append(Case(f"option/unknown/{cmd}", "started", (cmd, "--no-such-option"), 2))
    c += [
        Case("option/no-such-command", "started", ("no-such-command",), 2),
        Case("option/diff-stat-and-name-status", "started", ("diff", "core", "--stat", "--name-status"), 2),
        Case("option/diff-unknown-task", "started", ("diff", "zz"), 2),
        # missing arguments
        Case("option/missing/plan", "plain", ("plan",), 2),
        Case("option/missing/start", "plain", ("start",), 2),
        Case("option/missing/show", "started", ("show",), 2),
        Case("option/missing/instruct-session-state", "started", ("instruct", "core", "--message", "x"), 2),
        Case("option/missing/revise-intent", "started", ("revise", "core"), 2),
        Case("option/missing/run-executor", "plain", ("run", SLUG), 2),
        Case("option/missing/resume", "started", ("resume",), 2),
        Case("option/missing/retire", "started", ("retire",), 2),
        Case("option/missing/provision", "started", ("provision",), 2),
        Case("option/missing/join-task", "started", ("join", SLUG), 2),
        Case("option/missing/completion", "started", ("completion",), 2),
        Case("option/missing/release-task", "started", ("release",), 2),
        Case("option/missing/review-verdict", "started", ("review", "core"), 2),
        Case("option/missing/give-up-message", "started", ("done", "--give-up"), 2, cwd="lane:core"),
        Case("option/message-without-give-up", "started", ("done", "-m", "x"), 2, cwd="lane:core"),
        Case("option/give-up-empty", "started", ("done", "--give-up", "-m", ""), 2, cwd="lane:core"),
        Case("option/give-up-blank", "started", ("done", "--give-up", "-m", "   "), 2, cwd="lane:core"),
        Case("option/give-up-4001", "started", ("done", "--give-up", "-m", "x" * 4001), 2, cwd="lane:core"),
        # choices
        Case("option/choice/completion", "started", ("completion", "tcsh"), 2),
        Case("option/choice/schema", "started", ("schema", "bogus"), 2),
        Case("option/choice/kind", "started", ("instruct", "core", "-m", "x", "--kind", "bogus",
                                               "--session-state", "idle"), 2),
        Case("option/choice/session-state", "started", ("instruct", "core", "-m", "x", "--session-state", "bogus"), 2),
        # integers
        *[Case(f"option/int/start-max-parallel-{v or 'empty'}", "plain", ("start", SLUG, "--yes", "--max-parallel", v), 2)
          for v in ("0", "-1", "x", "1.5", "")],
        *[Case(f"option/int/start-max-children-{v}", "plain", ("start", SLUG, "--yes", "--max-children", v), 2)
          for v in ("0", "x")],
        *[Case(f"option/int/start-qa-failure-limit-{v}", "plain", ("start", SLUG, "--yes", "--qa-failure-limit", v), 2)
          for v in ("0", "-3", "x")],
        Case("option/int/plan-max-parallel-0", "plain", ("plan", SLUG, "--max-parallel", "0"), 2),
        Case("option/int/tick-max-parallel-0", "started", ("tick", "--max-parallel", "0"), 2),
        Case("option/int/run-max-parallel-0", "plain", ("run", SLUG, "--executor", "true", "--max-parallel", "0"), 2),
        # mutually exclusive (SPEC §6)
        Case("option/mutex/review-approve-reject", "started", ("review", "core", "--approve", "--reject"), 2),
        Case("option/mutex/aliases-install-uninstall", "started", ("aliases", "--install", "--uninstall"), 2),
        Case("option/mutex/instruct-message-and-file", "started", ("instruct", "core", "-m", "x", "--file", "README",
                                                                   "--session-state", "idle"), 2),
        Case("option/mutex/instruct-neither", "started", ("instruct", "core", "--session-state", "idle"), 2),
        # an empty value is a usage error, never "not given" (it would skip a check or pick the default)
        Case("option/empty/provision-path", "started", ("provision", "tests", "--path", ""), 2),
        Case("option/control/provision-path", "started", ("provision", "tests", "--path", "../ln\nx"), 2),
        Case("option/control/start-worktree", "plain", ("start", SLUG, "--yes", "--worktree", "../wt\nnl"), 2),
        Case("option/empty/start-worktree", "plain", ("start", SLUG, "--yes", "--worktree", ""), 2),
        Case("option/empty/start-executor-runtime", "plain", ("start", SLUG, "--yes", "--executor-runtime", ""), 2),
        # ids the batch does not have, slugs that have no batch (SPEC §6)
        Case("option/unknown-task/integrate", "started", ("integrate", SLUG, "zz"), 2),
        Case("option/unknown-task/show", "started", ("show", "zz"), 2),
        Case("option/unknown-slug/log", "started", ("log", "nope"), 2),
        Case("option/unknown-slug/audit", "started", ("audit", "nope"), 2),
        Case("option/unknown-slug/status", "started", ("status", "nope"), 2),
        Case("option/unknown-slug/tick", "started", ("tick", "nope"), 2),
        Case("option/unknown-slug/integrate", "started", ("integrate", "nope"), 2),
        Case("option/unknown-slug/verify", "started", ("verify", "nope"), 2),
        Case("option/no-batch/tick", "plain", ("tick",), 2),
        Case("option/no-batch/status", "plain", ("status",), 2),
        Case("option/no-batch/offer", "plain", ("tick", SLUG, "--offer", "core=."), 2),
        # refusals (exit 1, nothing written)
        Case("refusal/parallel-mismatch", "started", ("tick", "--max-parallel", "2"), 1),
        Case("refusal/confirmation-required", "plain", ("start", SLUG), 1),
        Case("refusal/already-active", "started", ("start", SLUG, "--yes"), 1),
        Case("refusal/not-toplevel", "plain", ("start", SLUG, "--yes"), 1, cwd="repo/sub"),
        Case("refusal/dirty", "plain", ("start", SLUG, "--yes"), 1, setup=lambda w: (w.repo / "stray").write_text("x")),
        Case("refusal/retire-in-flight", "started", ("retire", SLUG, "--yes"), 1),
        Case("refusal/retire-unknown-slug", "started", ("retire", "nope", "--yes"), 1),
        Case("refusal/resume-running", "started", ("resume", SLUG, "--yes"), 2),
        Case("refusal/review-not-open", "started", ("review", "core", "--approve"), 1),
        Case("refusal/release-in-flight", "started", ("release", "core"), 1),
        Case("refusal/provision-not-startable", "started", ("provision", "api"), 1),
        Case("refusal/done-nothing-to-deliver", "started", ("done",), 1, cwd="lane:core"),
        Case("refusal/verify-no-final-check-pass", "started", ("audit",), 0),
        # start --worktree
        Case("worktree/a-file", "plain", ("start", SLUG, "--yes", "--worktree", "README"), 2),
        Case("worktree/not-empty", "plain", ("start", SLUG, "--yes", "--worktree", ".lanes"), 2),
        Case("worktree/unwritable", "plain", ("start", SLUG, "--yes", "--worktree", "/proc/1/lanes-wt"), 2),
        # start --final-check (SPEC §2.1)
        *[Case(f"final-check/char-{i}", "plain", ("start", SLUG, "--yes", "--final-check", f"python3 -c pass {ch}x"), 2)
          for i, ch in enumerate("|&;<>\\`$(){}\"'")],
        Case("final-check/newline", "plain", ("start", SLUG, "--yes", "--final-check", "python3\n-c pass"), 2),
        Case("final-check/control", "plain", ("start", SLUG, "--yes", "--final-check", "python3 -c pass\x07"), 2),
        Case("final-check/513", "plain", ("start", SLUG, "--yes", "--final-check", "python3 " + "x" * 505), 2),
        Case("final-check/empty", "plain", ("start", SLUG, "--yes", "--final-check", ""), 2),
        Case("final-check/blank", "plain", ("start", SLUG, "--yes", "--final-check", "  "), 2),
        Case("final-check/nine", "plain", ("start", SLUG, "--yes", *["--final-check", "python3 -c pass"] * 9), 2),
        Case("final-check/run", "plain", ("run", SLUG, "--executor", "true", "--yes", "--final-check", "a|b"), 2),
        # executors (SPEC §2.1, §13)
        Case("executor/empty", "plain", ("run", SLUG, "--executor", "", "--yes"), 2),
        Case("executor/unbalanced", "plain", ("run", SLUG, "--executor", "python3 'x", "--yes"), 2),
        Case("executor/missing", "plain", ("run", SLUG, "--executor", "no-such-executor-here", "--yes"), 2),
        Case("executor/corrector-empty", "plain", ("run", SLUG, "--executor", "true", "--corrector", "", "--yes"), 2),
        Case("setup-command/shell-syntax", "started", ("provision", "tests"), 2,
             setup=lambda w: git(w.repo, "config", "lanes.setupCommand", "python3 -c pass && python3 -c pass")),
        # remotes (SPEC §14)
        Case("remote/push-unknown", "started", ("push", "no-such-remote"), 2),
        Case("remote/push-empty", "started", ("push", ""), 2),
        Case("remote/push-option", "started", ("push", "--", "-x"), 2),
        Case("remote/push-dotdot", "started", ("push", "../no-such-remote"), 2),
        Case("remote/pull-unknown", "started", ("pull", "no-such-remote"), 2),
        Case("remote/pull-space", "started", ("pull", "a b"), 2),
        Case("remote/join-no-origin", "started", ("join", SLUG, "tests"), 2),
        # outside a repository
        Case("env/outside/status", "plain", ("status", SLUG), 128, cwd="outside"),
        Case("env/outside/tick", "plain", ("tick",), 128, cwd="outside"),
        Case("env/outside/plan", "plain", ("plan", SLUG), 128, cwd="outside"),
        Case("env/git-dir-missing", "plain", ("status",), 128, env={"GIT_DIR": "/nonexistent/.git"}),
    ]
    return c


BAD_SLUGS: list[Any] = ["../../x", "a/b", "x.lock", "a" * 200, "a..b", "../../../../../escaped", b"\xff\xfe", "x/"]
BAD_TASKS: list[Any] = ["../../x", "a/b", "x.lock", "a" * 200, "initiative", b"\xff"]


def id_cases() -> list[Case]:
    """Ids that are not valid (SPEC §1), through the commands that take one."""
    c: list[Case] = []
    for i, slug in enumerate(BAD_SLUGS):
        for argv in [("plan", slug), ("start", slug, "--yes"), ("status", slug), ("tick", slug), ("log", slug),
                     ("audit", slug), ("retire", slug, "--yes"), ("show", "core", "--slug", slug),
                     ("run", slug, "--executor", "true", "--yes")][:4 if isinstance(slug, bytes) else None]:
            c.append(Case(f"slug-{i}/{argv[0]}", "started", argv, 2))
    for i, task in enumerate(BAD_TASKS):
        offer = f"{task}=." if isinstance(task, str) else b"%s=." % task
        for argv in [("show", task), ("provision", task), ("tick", "--offer", offer),
                     ("instruct", task, "-m", "x", "--session-state", "idle"), ("integrate", SLUG, task),
                     ("review", task, "--approve")][:3 if isinstance(task, bytes) else None]:
            c.append(Case(f"task-{i}/{argv[0]}", "started", argv, 2))
    return c


def offer_cases() -> list[Case]:
    many = tuple(x for i in range(65) for x in ("--offer", f"t{i}=."))
    return [
        Case("offer/no-equals", "started", ("tick", "--offer", "tests"), 2),
        Case("offer/empty-task", "started", ("tick", "--offer", "=lanes"), 2),
        Case("offer/empty-path", "started", ("tick", "--offer", "tests="), 2),
        Case("offer/bad-task", "started", ("tick", "--offer", "../x=."), 2),
        Case("offer/slash-task", "started", ("tick", "--offer", "a/b=."), 2),
        Case("offer/path-4097", "started", ("tick", "--offer", "tests=" + "p" * 4097), 2),
        Case("offer/65", "started", ("tick", *many), 2),
        Case("offer/twice", "started", ("tick", "--offer", "tests=.", "--offer", "tests=.."), 2),
        # well-formed offers that are refused: reported in lane_refusals, nothing written, exit 0
        Case("offer/refused/unknown-child", "started", ("tick", "--offer", "zz=."), 0),
        Case("offer/refused/not-pending", "started", ("tick", "--offer", "core=."), 0),
        Case("offer/refused/missing-path", "started", ("tick", "--offer", "tests=/nonexistent/lane"), 0),
        Case("offer/refused/coordinator", "started", ("tick", "--offer", "tests=."), 0),
        Case("offer/refused/not-utf8-path", "started", ("tick", "--offer", b"tests=/nonexistent/\xff"), 0),
    ]


def instruct_json_cases() -> list[Case]:
    good = {"task_id": "core", "kind": "instruction", "text": "hello", "session_state": "idle"}

    def j(**changes: Any) -> str:
        doc = dict(good)
        for k, v in changes.items():
            if v is DELETE:
                doc.pop(k)
            else:
                doc[k] = v
        return json.dumps(doc)

    deep = "[" * 100_000 + "]" * 100_000
    deep_obj = '{"a":' * 100_000 + "1" + "}" * 100_000
    raw = [("not-json", "{"), ("word", "nope"), ("empty", ""), ("array", "[]"), ("string", '"x"'), ("number", "1"),
           ("null", "null"), ("object-empty", "{}"), ("extra-key", j(extra=1)), ("task-missing", j(task_id=DELETE)),
           ("task-int", j(task_id=1)), ("task-invalid", j(task_id="../x")), ("kind-bogus", j(kind="bogus")),
           ("kind-int", j(kind=1)), ("text-empty", j(text="")), ("text-blank", j(text="  ")),
           ("text-4001", j(text="x" * 4001)), ("text-int", j(text=1)), ("text-null", j(text=None)),
           ("state-bogus", j(session_state="bogus")), ("state-missing", j(session_state=DELETE)),
           ("nan", j(text=float("nan"))), ("bom", "\ufeff" + j()), ("huge-number", '{"text": 1e999999}')]
    c = [Case(f"instruct-json/{name}", "started", ("tick", "--instruct", value), 2) for name, value in raw]
    c += [
        Case("instruct-json/nested-100000", "started", ("tick", "--instruct", deep), 2),
        Case("instruct-json/nested-object-100000", "started", ("tick", "--instruct", deep_obj), 2),
        Case("instruct-json/escaped-lone-surrogate", "started", ("tick", "--instruct", j(text="\ud800")), 2,
             real=True),
        Case("instruct-json/raw-lone-surrogate", "started",
             ("tick", "--instruct", b'{"task_id":"core","text":"\xed\xa0\x80","session_state":"idle"}'), 2),
        Case("instruct-json/not-utf8", "started",
             ("tick", "--instruct", b'{"task_id":"core","text":"\xff","session_state":"idle"}'), 2),
        # well-formed but refused (SPEC §6.2): exit 1, nothing recorded
        Case("instruct-json/refused-no-lane", "started", ("tick", "--instruct", j(task_id="tests")), 1),
        Case("instruct-json/refused-working", "started", ("tick", "--instruct", j(session_state="working")), 1),
        Case("instruct-json/refused-correction", "started", ("tick", "--instruct", j(kind="correction")), 1),
    ]
    return c


def write_file(name: str, data: bytes) -> Callable[[World], None]:
    def setup(w: World) -> None:
        (w.base / name).write_bytes(data)
    return setup


def instruct_cases() -> list[Case]:
    base = ("instruct", "core", "--session-state", "idle")
    return [
        Case("instruct/empty", "started", (*base, "-m", ""), 2),
        Case("instruct/blank", "started", (*base, "-m", " \n "), 2),
        Case("instruct/4001", "started", (*base, "-m", "x" * 4001), 2),
        Case("instruct/file-missing", "started", (*base, "--file", "/nonexistent/f"), 2),
        Case("instruct/file-directory", "started", (*base, "--file", "."), 2),
        Case("instruct/file-not-utf8", "started", (*base, "--file", "../bad.txt"), 2,
             setup=write_file("bad.txt", b"caf\xe9\n")),
        Case("instruct/file-4001", "started", (*base, "--file", "../long.txt"), 2,
             setup=write_file("long.txt", b"y" * 4001)),
        Case("instruct/message-not-utf8", "started", (*base, "-m", b"caf\xe9"), 2),
        Case("instruct/message-lone-surrogate", "started", (*base, "-m", b"\xed\xa0\x80"), 2),
        Case("give-up/message-not-utf8", "started", ("done", "--give-up", "-m", b"caf\xe9"), 2, cwd="lane:core"),
        Case("give-up/message-lone-surrogate", "started", ("done", "--give-up", "-m", b"\xed\xa0\x80"), 2,
             cwd="lane:core"),
        Case("instruct/refused-no-lane", "started", ("instruct", "tests", "-m", "x", "--session-state", "idle"), 1),
        Case("instruct/refused-blocked", "started", ("instruct", "core", "-m", "x", "--session-state", "blocked"), 1),
        Case("instruct/refused-done", "started", ("instruct", "core", "-m", "x", "--session-state", "done"), 1),
    ]


def revision_cases() -> list[Case]:
    def intent_file(name: str, text: bytes) -> Callable[[World], None]:
        return write_file(name, text)

    core = toml(good_intent("core", scope=["src/core"], revision=2)).replace('"Do core"', '"Make core"').encode()
    return [
        Case("revision/verify-unknown", "started", ("verify", "--commit", "nope"), 2),
        Case("revision/verify-option-like", "started", ("verify", "--commit", "--output=x"), 2),
        Case("revision/verify-too-far", "started", ("verify", "--commit", "HEAD~999"), 2),
        Case("revision/verify-blob", "started", ("verify", "--commit", "HEAD:README"), 2),
        Case("revision/verify-tree", "started", ("verify", "--commit", "HEAD^{tree}"), 2),
        Case("revision/verify-empty", "started", ("verify", "--commit", ""), 2),
        Case("revision/verify-not-a-task-commit", "started", ("verify", "--commit", "HEAD"), 2),
        Case("revision/revise-missing-file", "started", ("revise", "core", "--intent", "/nonexistent.toml"), 2),
        Case("revision/revise-directory", "started", ("revise", "core", "--intent", "."), 2),
        Case("revision/revise-not-utf8", "started", ("revise", "core", "--intent", "../r1.toml"), 2,
             setup=intent_file("r1.toml", b'task_id = "core"\nrevision = 2\ngoal = "\xff"\n')),
        Case("revision/revise-invalid-toml", "started", ("revise", "core", "--intent", "../r2.toml"), 2,
             setup=intent_file("r2.toml", b"task_id = \n")),
        Case("revision/revise-schema", "started", ("revise", "core", "--intent", "../r3.toml"), 2,
             setup=intent_file("r3.toml", core.replace(b"revision = 2", b'revision = "2"'))),
        Case("revision/revise-other-task", "started", ("revise", "core", "--intent", "../r4.toml"), 1,
             setup=intent_file("r4.toml", core.replace(b'task_id = "core"', b'task_id = "docs"'))),
        Case("revision/revise-same-revision", "started", ("revise", "core", "--intent", "../r5.toml"), 1,
             setup=intent_file("r5.toml", core.replace(b"revision = 2", b"revision = 1"))),
        Case("revision/revise-pending-child", "started", ("revise", "tests", "--intent", "../r6.toml"), 1,
             setup=intent_file("r6.toml", toml(good_intent("tests", revision=2, scope=["tests"])).encode())),
    ]


def demo_cases() -> list[Case]:
    return [
        Case("demo/impossible-folder", "plain", ("demo", "/proc/1/git-lanes-demo"), 2, real=True),
        Case("demo/a-file", "plain", ("demo", "README"), 2, real=True),
        Case("demo/not-empty", "plain", ("demo", ".lanes"), 2, real=True),
    ]


# -- tampered state (SPEC §4, §15, §16: a corrupt record is exit 128, nothing written) -------------------

BATCH = f"refs/notes/lanes/batch/{SLUG}"
LANE = f"refs/notes/lanes/lane/{SLUG}/core"
EVIDENCE = "refs/notes/lanes/evidence"


def tamper_batch_json(data: bytes) -> Callable[[World], None]:
    return lambda w: rewrite_state(w.repo, BATCH, {b"batch.json": data})


def tamper_batch_field(**fields: Any) -> Callable[[World], None]:
    def setup(w: World) -> None:
        doc = json.loads(git(w.repo, "show", f"{BATCH}:batch.json"))
        doc.update(fields)
        rewrite_state(w.repo, BATCH, {b"batch.json": json.dumps(doc).encode()})
    return setup


def tamper_child(data: bytes) -> Callable[[World], None]:
    return lambda w: rewrite_state(w.repo, BATCH, {child_path(w.repo, BATCH, "core"): data})


def tamper_lane_json(data: bytes) -> Callable[[World], None]:
    return lambda w: rewrite_state(w.repo, LANE, {b"lane.json": data})


def tamper_cases() -> list[Case]:
    c: list[Case] = []
    readers = [("status", ("status", SLUG), "repo"), ("tick", ("tick",), "repo"), ("done", ("done",), "lane:core")]
    for what in ("blob", "tree", "missing"):
        for name, argv, cwd in readers:
            c.append(Case(f"tamper/record-ref-{what}/{name}", "started", argv, 128, cwd=cwd,
                          setup=lambda w, what=what: point_ref_at(w.repo, BATCH, what)))
    for label, data in [("array", b"[]"), ("string", b'"x"'), ("number", b"1"), ("null", b"null"),
                        ("not-json", b"{"), ("not-utf8", b'{"slug": "\xff"}')]:
        for name, argv, cwd in readers[:2]:
            c.append(Case(f"tamper/batch-json-{label}/{name}", "started", argv, 128, cwd=cwd,
                          setup=tamper_batch_json(data)))
    c.append(Case("tamper/batch-json-missing/status", "started", ("status", SLUG), 128,
                  setup=lambda w: rewrite_state(w.repo, BATCH, {b"batch.json": None})))
    for label, data in [("array", b"[]"), ("string", b'"x"'), ("null", b"null"), ("not-json", b"{"),
                        ("bad-state", b'{"index": 0, "task_id": "core", "state": "bogus"}')]:
        for name, argv, cwd in readers[:2]:
            c.append(Case(f"tamper/child-{label}/{name}", "started", argv, 128, cwd=cwd,
                          setup=tamper_child(data)))
    c.append(Case("tamper/non-utf8-name/status", "started", ("status", SLUG), 128,
                  setup=lambda w: rewrite_state(w.repo, BATCH, {b"children/ff/\xff\xfe.json": b"{}"})))
    c.append(Case("tamper/non-utf8-name/tick", "started", ("tick",), 128,
                  setup=lambda w: rewrite_state(w.repo, BATCH, {b"interventions/0000/\xff.json": b"{}"})))
    # SPEC §4: "a v1 reader ignores what it does not know" — a field from a newer writer is no corruption
    c.append(Case("tamper/unknown-field-ignored/status", "started", ("status", SLUG), 0,
                  setup=tamper_batch_field(written_by_a_newer_version={"x": 1})))
    c.append(Case("tamper/unknown-child-field-ignored/status", "started", ("status", SLUG), 0,
                  setup=lambda w: rewrite_state(w.repo, BATCH, {child_path(w.repo, BATCH, "core"): json.dumps(
                      {**json.loads(git(w.repo, "show", f"{BATCH}:{child_path(w.repo, BATCH, 'core').decode()}")),
                       "newer_field": True}).encode()})))
    c.append(Case("tamper/base-head-option/tick", "started", ("tick",), 128,
                  setup=tamper_batch_field(base_head="--output=x")))
    c.append(Case("tamper/base-head-option/status", "started", ("status", SLUG), 128,
                  setup=tamper_batch_field(base_head="--output=x")))
    for what in ("blob", "tree", "missing"):
        c.append(Case(f"tamper/evidence-ref-{what}/tick", "delivered", ("tick",), 128,
                      setup=lambda w, what=what: point_ref_at(w.repo, EVIDENCE, what)))
    lane_readers = [("done", ("done",)), ("task", ("task",)), ("inbox", ("inbox",))]
    for label, data in [("array", b"[]"), ("string", b'"x"'), ("not-json", b"{")]:
        for name, argv in lane_readers:
            c.append(Case(f"tamper/lane-json-{label}/{name}", "delivered", argv, 128, cwd="lane:core",
                          setup=tamper_lane_json(data)))
    for what in ("blob", "tree", "missing"):
        c.append(Case(f"tamper/lane-ref-{what}/done", "delivered", ("done",), 128, cwd="lane:core",
                      setup=lambda w, what=what: point_ref_at(w.repo, LANE, what)))
    return c


ALL: list[Case] = [*plan_cases(), *option_cases(), *id_cases(), *offer_cases(), *instruct_json_cases(),
                   *instruct_cases(), *revision_cases(), *demo_cases(), *tamper_cases()]
# a sample of the in-process cases also runs the real executable (through `git lanes`)
SAMPLE = {case.id for case in ALL[::80]}


def params() -> list[Any]:
    return [pytest.param(dataclasses.replace(case, real=case.real or case.id in SAMPLE), id=case.id) for case in ALL]


def test_the_table_is_big_enough():
    assert len(ALL) >= 300, len(ALL)
    assert len({c.id for c in ALL}) == len(ALL), "duplicate case ids"


@pytest.mark.parametrize("case", params())
def test_bad_input_gets_one_clean_answer_and_changes_nothing(worlds, case):
    run_case(worlds, case)


# -- hostile state and environment (issue 13, defects 2, 5 and 7) ------------------------------------------------

def hostile(worlds: Worlds, kind: str = "started") -> World:
    """A saved world this test may change (it is put back before the next use)."""
    w = worlds.get(kind)
    worlds.dirty.add(kind)
    return w


def lane_path(w: World, task: str) -> Path:
    return Path(child(record(w.repo), task)["lane"]["path"])


def clean_exit(proc, allowed: tuple[int, ...]) -> None:
    assert "Traceback" not in proc.err and "internal error" not in proc.err, proc
    assert proc.code in allowed, proc


def test_a_refused_tick_after_the_batch_branch_was_deleted_writes_nothing(worlds):
    w = hostile(worlds, "delivered")
    step(w.repo, "tick")
    git(w.repo, "update-ref", "-d", "refs/heads/imm/adv")        # deleted under the coordinator
    before = (git(w.repo, "for-each-ref"), git(w.repo, "status", "--porcelain"))
    proc = lanes_proc(w.repo, "tick")
    clean_exit(proc, (1,))
    assert (git(w.repo, "for-each-ref"), git(w.repo, "status", "--porcelain")) == before


def test_a_refused_provision_leaves_nothing_behind(worlds):
    w = hostile(worlds)
    # a setup that passes but leaves an untracked file: the offer is refused batch_lane_dirty
    git(w.repo, "config", "lanes.setupCommand", "python3 -c \"open('stray.txt', 'w').write('x')\"")
    refs_before = git(w.repo, "for-each-ref", "refs/heads/", "refs/notes/")
    worktrees = git(w.repo, "worktree", "list", "--porcelain")
    proc = lanes_proc(w.repo, "provision", "tests", "--json")
    clean_exit(proc, (1,))   # SPEC §16: a refusal with a reason code is exit 1, the report still printed
    assert proc.err.startswith("error: batch_lane_dirty: ") and "(the lane was removed)" in proc.err
    assert json.loads(proc.out)["lane_refusals"][0]["reason"].startswith("batch_lane_dirty")
    assert child(record(w.repo), "tests")["state"] == "pending"
    assert git(w.repo, "for-each-ref", "refs/heads/", "refs/notes/") == refs_before
    assert git(w.repo, "worktree", "list", "--porcelain") == worktrees
    assert not any(w.lanes.rglob("tests")), "the lane folder stayed"


def test_git_icase_pathspecs_never_widens_a_scope(worlds):
    w = hostile(worlds)
    lane = lane_path(w, "core")
    deliver(lane, "core")
    (lane / "SRC" / "CORE").mkdir(parents=True)
    (lane / "SRC" / "CORE" / "evil.txt").write_text("outside the scope, but for case\n")
    env = {**os.environ, "GIT_ICASE_PATHSPECS": "1"}
    clean_exit(lanes_proc(lane, "done", env=env), (0, 1))
    clean_exit(lanes_proc(w.repo, "tick", env=env), (0,))
    assert child(record(w.repo), "core")["state"] not in ("integrated", "released")
    assert "SRC/CORE/evil.txt" not in git(w.repo, "ls-tree", "-r", "--name-only", "imm/adv")


def test_git_literal_pathspecs_never_parks_an_in_scope_delivery(worlds):
    w = hostile(worlds)
    lane = lane_path(w, "core")
    deliver(lane, "core")
    env = {**os.environ, "GIT_LITERAL_PATHSPECS": "1"}
    clean_exit(lanes_proc(lane, "done", env=env), (0,))
    clean_exit(lanes_proc(w.repo, "tick", env=env), (0,))
    assert child(record(w.repo), "core")["state"] == "integrated", child(record(w.repo), "core")


def blobs_text(repo: Path, ref: str) -> str:
    """Every blob of the tree at `ref`, as text (what a record or a note stores)."""
    names = git(repo, "ls-tree", "-r", "--name-only", ref).split()
    return "".join(git(repo, "cat-file", "-p", f"{ref}:{n}") for n in names)


def test_a_secret_a_check_prints_is_never_recorded(worlds):
    w = hostile(worlds, "token")
    lane = lane_path(w, "core")
    deliver(lane, "core")
    env = {**os.environ, "GITHUB_TOKEN": TOKEN}
    done = lanes_proc(lane, "done", "--json", env=env)
    clean_exit(done, (0,))
    tick = lanes_proc(w.repo, "tick", "--json", env=env)
    clean_exit(tick, (0,))
    commit = child(record(w.repo), "core")["commit"]
    note = git(w.repo, "notes", "--ref=lanes/evidence", "show", commit)
    stored = blobs_text(w.repo, f"refs/notes/lanes/lane/{SLUG}/core") + note + blobs_text(w.repo, f"refs/notes/lanes/batch/{SLUG}")
    for where, text in (("done --json", done.out + done.err), ("tick", tick.out + tick.err), ("records", stored)):
        assert TOKEN not in text, f"the token is in {where}"
    assert "token: ***" in done.out


def test_an_edited_plan_digest_stops_the_batch(worlds):
    w = hostile(worlds)
    tamper_batch_field(plan_digest="sha256:" + "0" * 64)(w)
    proc = lanes_proc(w.repo, "tick", "--json")
    clean_exit(proc, (0, 1))
    rec = record(w.repo)
    assert rec["batch_state"] == "needs_human" and rec["reason"].startswith("plan_changed"), rec["reason"]


def test_a_lane_path_that_is_not_utf8_is_handled_like_any_other(worlds):
    w = hostile(worlds)
    lane = lane_path(w, "core")
    deliver(lane, "core")
    (lane / os.fsdecode(b"outside-\xff.txt")).write_bytes(b"x\n")
    clean_exit(lanes_proc(lane, "done"), (0, 1))
    tick = lanes_proc(w.repo, "tick", "--json")
    clean_exit(tick, (0,))
    assert child(record(w.repo), "core")["state"] not in ("integrated", "released")
    assert "outside-" not in git(w.repo, "ls-tree", "-r", "--name-only", "imm/adv")


def test_a_coordinator_path_that_is_not_utf8_is_refused_cleanly(worlds):
    w = hostile(worlds)
    (w.repo / os.fsdecode(b"leak-\xfe.txt")).write_bytes(b"not a lane's\n")
    before = (git(w.repo, "for-each-ref"), git(w.repo, "status", "--porcelain"))
    proc = lanes_proc(w.repo, "tick")
    clean_exit(proc, (1,))
    assert one_error(proc.err).startswith("error: working_tree_unstaged:")
    assert (git(w.repo, "for-each-ref"), git(w.repo, "status", "--porcelain")) == before


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(("error:", "fatal:"))]
    assert len(lines) == 1, err
    return lines[0]


def test_a_sha256_repository_is_refused_in_one_line(tmp_path):
    """Object ids are 40 hex digits in records, refs and trees: a SHA-256 repository gets one clear
    `error:` (exit 128), not a plan "missing" at a commit that has it."""
    repo = tmp_path / "sha256"
    subprocess.run(["git", "init", "-q", "--object-format=sha256", str(repo)], check=True)
    proc = subprocess.run([sys.executable, "-m", "git_lanes", "plan", "demo"], cwd=repo, capture_output=True,
                          text=True)
    assert proc.returncode == 128 and proc.stdout == ""
    assert proc.stderr.strip().endswith("a sha256 repository; git-lanes works with SHA-1 repositories only")
    assert len(proc.stderr.strip().splitlines()) == 1


def _lanes(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _one_error(proc: subprocess.CompletedProcess, code: int, *said: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for text in said:
        assert text in lines[0], lines[0]
    return lines[0]


# -- (v4) a scope entry with one leading ./ --------------------------------------------------------------

def test_a_scope_entry_with_one_leading_dot_slash_means_the_entry_without_it(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["./src/a", " ./src/b/"], "check": "true"}])
    doc = json.loads(git_lanes(repo, "plan", "demo", "--json").stdout)
    assert doc["children"][0]["scope"] == ["src/a", "src/b/"]
    raw = git(repo, "show", "HEAD:.lanes/demo/a.toml")
    assert '"./src/a"' in raw   # the file is as written; its content hash is of the document as parsed
    write_initiative(repo, "other", [{"id": "a", "scope": ["src/a", " ./src/b/"], "check": "true"}])
    other = json.loads(git_lanes(repo, "plan", "other", "--json").stdout)
    assert other["children"][0]["intent_content_hash"] != doc["children"][0]["intent_content_hash"]


@pytest.mark.parametrize("entry", ["././src", "./", "./../x", "./.", " ./ "])
def test_only_one_leading_dot_slash_is_stripped(repo, entry):
    write_initiative(repo, "demo", [{"id": "a", "scope": [entry], "check": "true"}])
    _one_error(_lanes(repo, "plan", "demo"), 2, "scope")


# -- lanes.setupCommand that cannot be split, --executor with shell syntax ----------------------------------

@pytest.mark.parametrize("command", ["sh -c 'unterminated", "npm ci && npm test", 'echo "half'])
@pytest.mark.parametrize("verb", ["plan", "start", "run"])
def test_a_setup_command_that_could_never_run_is_refused_by_plan_start_and_run(repo, verb, command):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git(repo, "config", "lanes.setupCommand", command)
    before = snapshot_state(repo)
    args = {"plan": ["plan", "demo"], "start": ["start", "demo", "--yes"],
            "run": ["run", "demo", "--executor", "true", "--yes"]}[verb]
    _one_error(_lanes(repo, *args), 2, "lanes.setupCommand")
    assert snapshot_state(repo) == before


@pytest.mark.parametrize("option", ["--executor", "--corrector"])
@pytest.mark.parametrize("command", ["a && b", "echo hi > out", "FOO=1 true"])
def test_run_refuses_shell_syntax_in_its_commands_as_checks_are(repo, option, command):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    before = snapshot_state(repo)
    args = ["run", "demo", "--yes", *(["--executor", "true"] if option == "--corrector" else []), option, command]
    _one_error(_lanes(repo, *args), 2, option, "without a shell")
    assert snapshot_state(repo) == before


def test_a_quoted_operator_is_an_ordinary_argument_for_run(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    proc = _lanes(repo, "run", "demo", "--yes", "--executor", "definitely-missing-xyz '&&' b")
    assert "without a shell" not in proc.stderr and "command not found" in proc.stderr


# -- --instruct JSON with duplicate keys ----------------------------------------------------------------------

def test_duplicate_keys_in_instruct_json_are_refused(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    before = all_refs(repo)
    doc = '{"task_id": "a", "kind": "instruction", "text": "one", "text": "two", "session_state": "idle"}'
    _one_error(_lanes(repo, "tick", "--instruct", doc), 2, "--instruct", "duplicate key 'text'")
    assert all_refs(repo) == before


# -- .git/lanes/locks replaced by a file ----------------------------------------------------------------------

@pytest.mark.parametrize("verb", [["tick"], ["provision", "a"], ["status"]])
def test_a_locks_folder_replaced_by_a_file_is_one_error_line(repo, verb):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    locks = repo / ".git" / "lanes" / "locks"
    shutil.rmtree(locks)
    locks.write_text("not a folder\n")
    proc = _lanes(repo, *verb)
    if verb == ["status"]:   # status takes no lock
        assert proc.returncode == 0, proc.stderr
        return
    _one_error(proc, 128, str(locks))


# -- control characters in plan text -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("goal", '"Make a\\u0000 thing"'),
    ("goal", '"escape \\u001b[31mred"'),
    ("goal", '"carriage\\rreturn"'),
    ("owner", '"del\\u007f"'),
])
def test_a_control_character_in_plan_text_is_refused_by_plan_and_never_printed_raw(repo, field, value):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "goal": "placeholder"}])
    path = repo / ".lanes" / "demo" / "a.toml"
    text = path.read_text()
    if field == "goal":
        text = text.replace('goal = "placeholder"', f"goal = {value}")
    else:
        text = text.replace("scope =", f"{field} = {value}\nscope =")
    path.write_text(text)
    git(repo, "commit", "-qam", "control")
    before = snapshot_state(repo)
    for args in (["plan", "demo"], ["start", "demo", "--yes"]):
        line = _one_error(_lanes(repo, *args), 2, field, "control character")
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in line), repr(line)
    assert snapshot_state(repo) == before


def test_tabs_and_line_breaks_in_plan_text_are_fine(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "goal": "one\\tline\\nand more"}])
    assert _lanes(repo, "plan", "demo").returncode == 0


# -- start --worktree that Git cannot create ---------------------------------------------------------------

def test_start_with_a_worktree_git_cannot_create_writes_nothing(repo, tmp_path):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    gone = tmp_path / "gone"
    git(repo, "worktree", "add", "-q", "--detach", str(gone))
    shutil.rmtree(gone)   # registered but missing: `git worktree add` there refuses
    before = snapshot_state(repo)
    proc = _lanes(repo, "start", "demo", "--yes", "--worktree", str(gone))
    assert proc.returncode == 128, proc.stderr
    assert "worktree add" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot_state(repo) == before   # no record, no imm/demo
    assert not gone.exists()
    ok = _lanes(repo, "start", "demo", "--yes", "--worktree", str(tmp_path / "fine"))   # and nothing is in the way
    assert ok.returncode == 0, ok.stderr


# -- a provision refused for a failing setup leaves no folder ------------------------------------------------

@pytest.mark.parametrize("where", ["configured-root", "path"])
def test_a_provision_refused_for_a_failing_setup_leaves_no_empty_folder(repo, tmp_path, where):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    git(repo, "config", "lanes.setupCommand", "false")
    root = tmp_path / "lanes-root"
    if where == "configured-root":
        git(repo, "config", "lanes.worktreeRoot", str(root))
        args = ["provision", "a"]
    else:
        args = ["provision", "a", "--path", str(root / "deep" / "a")]
    proc = _lanes(repo, *args)
    assert proc.returncode == 1 and "batch_lane_setup_failed" in proc.stderr, proc.stderr
    assert not root.exists(), list(root.rglob("*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_control_characters_in_human_output_are_shown_escaped(capsys):
    from git_lanes.cli import render

    render.say("goal\x00 with a bell\x07, a return\rand\x9b C1;\ttab\nline\r\n")
    render.err("error", "nul\x00")
    out, err = capsys.readouterr()
    assert out == "goal\\x00 with a bell\\x07, a return\\x0dand\\x9b C1;\ttab\nline\n\n"
    assert err == "error: nul\\x00\n"
