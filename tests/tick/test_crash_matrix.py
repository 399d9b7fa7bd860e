"""Crash matrix (issue 13, deliverable 1; SPEC §15): a command killed after any change to Git state
is continued by the next command to the same batch branch and record.

For each command that writes — `start`, `provision`, `done`, a `tick` that integrates, `release`,
`retire`, `resume`, a tick that restores a leak or closes an issue, `run` — a small batch (the
chain core -> api plus the disjoint docs and tests, scripted lane work) is brought to the moment
before the command, saved, and then:

- the **reference**: the command, then the next command(s) a user or driver runs after it;
- the **named points**: the command dies of SIGKILL at `GIT_LANES_CRASH_AT=<point>` (every point
  `git_lanes/core/crash.py` lists);
- the **Git-call sweep**: the command dies of SIGKILL right after each Git call that writes a
  ref, a worktree or an index (and before the first write that follows in-process work), through
  the `killgit` wrapper — so points inside Git writes are reached whether or not they are named.

Each crash is followed by the same next command(s), and the result must equal the reference
(timestamps and random ids masked: commits compared by subject, `Lanes-Task` and tree; for `run`,
whose executors' timing decides which of two disjoint tasks lands first, up to that order), with
one commit per task on `imm/<slug>`, every lane's work kept and `git lanes audit` clean.
`GIT_LANES_CRASH_FULL=1` also kills before every writing Git call (the long run).
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from adversary import (SLUG, TASKS, World, assert_recovered, branch_history, child, deliver, lanes_proc,
                       landed_tasks, outcome, record, step, write_executor)
from conftest import git
from helpers import check_file
from killgit import GitCall, KillGit, was_killed
from test_tracker import ISSUE, REPO, TOKEN, gh  # noqa: F401  (the fake GitHub fixture)

FULL = os.environ.get("GIT_LANES_CRASH_FULL") == "1"

RESUME_TASKS = [
    {"id": "solo", "scope": ["src/solo"], "check": check_file("src/solo/solo.txt")},
    {"id": "after", "scope": ["src/after"], "blocked_by": ["solo"], "check": check_file("src/after/after.txt")},
]
TRACKED_TASKS = [
    {"id": "core", "scope": ["src/core"], "check": check_file("src/core/core.txt"), "extra": [f"issue = {ISSUE}"]},
    {"id": "docs", "scope": ["docs"], "check": check_file("docs/index.md")},
    {"id": "tests", "scope": ["tests"], "check": check_file("tests/t.txt")},   # keeps the batch running
]


# -- worlds ---------------------------------------------------------------------------------------------

def lane_path(w: World, task: str) -> Path:
    return Path(child(record(w.repo), task)["lane"]["path"])


def started(w: World) -> None:
    # a window of one candidate: the sweeps need the same Git calls in the same order every time, which
    # a wider window's concurrent verifications do not give (tests/tick/test_window.py kills one mid-window)
    step(w.repo, "start", SLUG, "--yes", "--max-parallel", "3", "--verify-window", "1")


def provisioned(w: World) -> None:
    started(w)
    for task in ("core", "docs"):
        step(w.repo, "provision", task)


def core_delivered_not_done(w: World) -> None:
    provisioned(w)
    deliver(lane_path(w, "core"), "core")


def delivered(w: World) -> None:
    provisioned(w)
    for task in ("core", "docs"):
        lane = lane_path(w, task)
        deliver(lane, task)
        step(lane, "done")


def integrated(w: World) -> None:
    delivered(w)
    step(w.repo, "tick")


def leaked(w: World) -> None:
    """core's delivered file also written into the coordinator (an executor writing in the wrong
    tree): provably core's, so the tick backs it up and restores the coordinator (SPEC §9)."""
    delivered(w)
    deliver(w.repo, "core")


def parked(w: World) -> None:
    """solo gave up; its dependent is skipped; the batch needs a human."""
    step(w.repo, "start", SLUG, "--yes")
    step(w.repo, "provision", "solo")
    step(lane_path(w, "solo"), "done", "--give-up", "-m", "cannot do it")
    report = step(w.repo, "tick")
    assert report["batch_state"] == "needs_human", report["reason"]


def tracked(w: World) -> None:
    """core (with an issue) and docs delivered; the tick under test integrates them and closes the issue."""
    step(w.repo, "start", SLUG, "--yes", "--max-parallel", "2", "--verify-window", "1")
    for task in ("core", "docs"):
        step(w.repo, "provision", task)
    for task in ("core", "docs"):
        lane = lane_path(w, task)
        deliver(lane, task)
        step(lane, "done")


# -- what a user (or a driver) runs after a command died ---------------------------------------------------

def must(proc, what: str) -> None:
    assert proc.code == 0, f"{what}: {proc}"


def follow_start(w: World, env: dict[str, str]) -> None:
    again = lanes_proc(w.repo, "start", SLUG, "--yes", "--max-parallel", "3", "--verify-window", "1", env=env)
    if again.code == 0:
        return
    assert again.code == 1 and "batch_already_active" in again.err, f"start again: {again}"
    must(lanes_proc(w.repo, "tick", SLUG, env=env), "tick after start")


def follow_provision(w: World, env: dict[str, str]) -> None:
    if child(record(w.repo), "core")["state"] == "pending":
        must(lanes_proc(w.repo, "provision", "core", env=env), "provision again")
    must(lanes_proc(w.repo, "tick", env=env), "tick")


def follow_done(w: World, env: dict[str, str]) -> None:
    must(lanes_proc(lane_path(w, "core"), "done", env=env), "done again")
    must(lanes_proc(w.repo, "tick", env=env), "tick")


def follow_tick(w: World, env: dict[str, str]) -> None:
    must(lanes_proc(w.repo, "tick", env=env), "tick")


def follow_release(w: World, env: dict[str, str]) -> None:
    if child(record(w.repo), "core")["state"] != "released" or \
            git(w.repo, "for-each-ref", "refs/heads/imm-lane/adv/core").strip():
        must(lanes_proc(w.repo, "release", "core", env=env), "release again")
    must(lanes_proc(w.repo, "tick", env=env), "tick")


def follow_retire(w: World, env: dict[str, str]) -> None:
    if record(w.repo)["batch_state"] != "superseded":
        must(lanes_proc(w.repo, "retire", SLUG, "--yes", env=env), "retire again")
    must(lanes_proc(w.repo, "status", SLUG, env=env), "status")


def follow_resume(w: World, env: dict[str, str]) -> None:
    """Resume again if it did not happen; then release the restarted child's old lane (SPEC §6:
    it can always be released) and tick."""
    if record(w.repo)["batch_state"] == "needs_human":
        must(lanes_proc(w.repo, "resume", SLUG, "--restart", "solo", "--yes", env=env), "resume again")
    if git(w.repo, "for-each-ref", "refs/heads/imm-lane/adv/solo").strip():
        must(lanes_proc(w.repo, "release", "solo", env=env), "release the old lane")
    must(lanes_proc(w.repo, "tick", env=env), "tick")


def follow_run(w: World, env: dict[str, str]) -> None:
    rec = record(w.repo) if git(w.repo, "for-each-ref", f"refs/notes/lanes/batch/{SLUG}").strip() else None
    if rec is None or rec["batch_state"] != "completed":
        must(lanes_proc(w.repo, "run", SLUG, "--executor", env["ADV_EXECUTOR"], "--yes", "--max-parallel", "3", "--verify-window", "1",
                        env=env, timeout=180), "run again")


# -- scenarios ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[World], None]
    argv: tuple[str, ...]
    follow: Callable[[World, dict[str, str]], None]
    where: str | None = None            # the task whose lane the command runs in (else the coordinator)
    tasks: list | None = None           # the plan (default: core, api, docs, tests)
    tracker: str | None = None          # the initiative's `[tracker] github`
    sweep: tuple[int | None, int | None] = (None, None)   # which writing Git calls the sweep kills at (a slice)
    deterministic: bool = True          # one thread: the same Git calls in the same order every time
    before_all: bool = False            # kill before every swept call (in-process work precedes each)
    between: bool = False               # in-process writes (dulwich refs, files, network) between Git calls:
                                        # swept "before" too in the normal run
    workers: int = 2

    def cwd(self, w: World) -> Path:
        return lane_path(w, self.where) if self.where else w.repo


SCENARIOS = {s.name: s for s in [
    Scenario("start", lambda w: None, ("start", SLUG, "--yes", "--max-parallel", "3", "--verify-window", "1", "--json"), follow_start),
    Scenario("provision", started, ("provision", "core", "--json"), follow_provision, between=True),
    Scenario("done", core_delivered_not_done, ("done", "--json"), follow_done, where="core"),
    Scenario("tick", delivered, ("tick", "--json"), follow_tick, between=True),
    Scenario("release", integrated, ("release", "core", "--json"), follow_release),
    Scenario("retire", started, ("retire", SLUG, "--yes", "--json"), follow_retire),
    Scenario("resume", parked, ("resume", SLUG, "--restart", "solo", "--yes", "--json"), follow_resume,
             tasks=RESUME_TASKS),
    # the leak restore comes first in the tick: up to the write that records it (the integration that
    # follows is the tick scenario's)
    Scenario("leak", leaked, ("tick", "--json"), follow_tick, sweep=(0, 3), between=True),
    # the tracker writes last: kill around that write only (one worker: one fake GitHub)
    Scenario("tracker", tracked, ("tick", "--json"), follow_tick, tasks=TRACKED_TASKS, tracker=REPO,
             sweep=(-1, None),
             before_all=True, between=True, workers=1),
    Scenario("run", lambda w: None, ("run", SLUG, "--executor", "@EXECUTOR@", "--yes", "--max-parallel", "3", "--verify-window", "1"),
             follow_run, deterministic=False, workers=1),
]}


@dataclass
class Prepared:
    """A scenario's saved world, its environment, its Git calls and its reference outcome."""
    world: World
    killgit: KillGit
    env: dict[str, str]
    calls: list[GitCall] = field(default_factory=list)
    want: dict | None = None
    record: dict | None = None          # the batch record the reference ended with


class Worlds:
    """Worlds built once per session (a world is restored in place before every use)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.built: dict[tuple[str, int], Prepared] = {}

    def get(self, sc: Scenario, i: int, env_extra: dict[str, str]) -> Prepared:
        key = (sc.name, i)
        if key not in self.built:
            w = World(self.base / f"{sc.name}-{i}")
            kw = {"tasks": sc.tasks} if sc.tasks else {}
            if sc.tracker:
                kw["tracker"] = sc.tracker
            w.build(**kw)
            sc.build(w)
            w.save("pre")
            self.built[key] = Prepared(w, KillGit(w.base / "killgit"), {})
        prep = self.built[key]
        prep.env = {**os.environ, **env_extra, "ADV_EXECUTOR": write_executor(prep.world.base)}
        return prep


_WORLDS: Worlds | None = None


@pytest.fixture
def worlds(tmp_path_factory) -> Worlds:
    global _WORLDS
    if _WORLDS is None:
        _WORLDS = Worlds(tmp_path_factory.mktemp("crash-worlds"))
    return _WORLDS


def fresh(worlds, name: str) -> tuple[Prepared, World]:
    """A scenario's world as it was before its command."""
    prep = worlds.get(SCENARIOS[name], 0, {})
    prep.world.restore("pre")
    return prep, prep.world


def argv_of(sc: Scenario, prep: Prepared) -> list[str]:
    return [prep.env["ADV_EXECUTOR"] if a == "@EXECUTOR@" else a for a in sc.argv]


def reference(sc: Scenario, prep: Prepared, setup: Callable[[Prepared], None]) -> None:
    """The uncrashed command (its Git calls counted), then the same next command(s)."""
    if prep.want is not None:
        return
    w = prep.world
    w.restore("pre")
    setup(prep)
    proc = prep.killgit.run(sc.cwd(w), *argv_of(sc, prep), env=prep.env, timeout=180)
    assert proc.returncode == 0, f"{sc.name}: the uncrashed command failed ({proc.returncode}): {proc.stderr}"
    prep.calls = prep.killgit.calls()
    sc.follow(w, prep.env)
    prep.want = outcome(w.repo)
    prep.record = record(w.repo)
    landed_tasks(w.repo)
    audit = lanes_proc(w.repo, "audit")
    assert audit.code == 0, f"{sc.name}: the uncrashed run leaves audit findings: {audit}"


def crash_then_follow(sc: Scenario, prep: Prepared, setup: Callable[[Prepared], None], *, at: int | None = None,
                      mode: str = "after", point: str | None = None) -> str | None:
    """Kill the command (at Git call `at`, or at the named `point`), run what follows, compare.
    Returns what went wrong, or None."""
    w = prep.world
    w.restore("pre")
    setup(prep)
    where = f"{sc.name}: killed {mode} Git call {at}" if point is None else f"{sc.name}: killed at {point}"
    if point is not None:
        proc = lanes_proc(sc.cwd(w), *argv_of(sc, prep), env={**prep.env, "GIT_LANES_CRASH_AT": point},
                          timeout=180)
        if not proc.killed:
            return f"{where}: the command did not die there (the point is not named): {proc}"
    else:
        run = prep.killgit.run(sc.cwd(w), *argv_of(sc, prep), at=at, mode=mode, env=prep.env, timeout=180)
        killed = prep.killgit.killed()
        if not was_killed(run) or killed is None:
            return f"{where}: not killed (exit {run.returncode}): {run.stderr[-2000:]}"
        n, _, argv = killed.partition(" ")
        where += f" (`git {GitCall(int(n), argv.split(' ')).label()}`)"
    if prep.want is None:      # the reference, computed only once a crash needs it
        w.save("crashed")
        reference(sc, prep, setup)
        w.restore("crashed")
    try:
        sc.follow(w, prep.env)
        assert prep.want is not None
        assert_recovered(w.repo, prep.want, context=where, any_order=not sc.deterministic)
    except AssertionError as exc:
        text = str(exc)
        return text if text.startswith(where) else f"{where}: {text}"
    return None


def no_setup(prep: Prepared) -> None:
    pass


# -- named crash points (GIT_LANES_CRASH_AT) -------------------------------------------------------------

NAMED = [
    # (scenario, point): every point after which Git state has changed, as `GIT_LANES_CRASH_AT` names it
    ("tick", "lane-commit-recorded"),       # the lane commit is recorded, its lane branch moved with it
    ("tick", "fast-forwarded"),             # the batch branch moved, the integration not recorded yet
    ("start", "record-written"),            # the record is written, imm/<slug> does not exist yet
    ("start", "branch-created"),            # imm/<slug> exists, the coordinator is not switched yet
    ("provision", "lane-branch-created"),   # the lane branch exists, no worktree yet
    ("provision", "worktree-added"),        # the worktree exists, not offered yet
    ("done", "attempt-recorded"),           # the attempt is in the lane record, nothing printed
    ("tick", "lane-branch-moved"),          # the lane branch is on its lane commit, the lane's index not refreshed
    ("tick", "candidate-recorded"),         # `candidate` is in the record, not verified yet (SPEC §8.6)
    ("tick", "candidate-verified"),         # the rerun passed, not fast-forwarded yet
    ("tick", "fast-forward-marked"),        # the fast-forward's mark is written, the merge not run yet
    ("tick", "evidence-recorded"),          # the integration and its evidence note are written
    ("release", "worktree-removed"),        # the worktree is gone, the branch and the record not yet
    ("release", "branch-deleted"),          # the branch is gone, the record does not say released yet
    ("retire", "retire-recorded"),          # superseded is written, nothing printed
    ("resume", "resume-recorded"),          # the resume is written, its tick not run yet
    ("leak", "leak-backed-up"),             # the backup is written, the coordinator not restored yet
    ("leak", "leak-restored"),              # the coordinator is restored, the restore not recorded yet
    ("tracker", "tracker-closed"),          # the issue is closed, tracker_closed not recorded yet
    ("run", "session-done"),                # a session's `done` recorded its attempt, no tick yet
]


def tracker_setup(gh_fake) -> Callable[[Prepared], None]:
    def setup(prep: Prepared) -> None:
        gh_fake.state, gh_fake.state_reason = "open", None
        gh_fake.comments.clear()
        gh_fake.requests.clear()
        git(prep.world.repo, "config", "lanes.githubApiUrl", gh_fake.url)
    return setup


@pytest.fixture
def scenario_env(request) -> Callable[[Scenario], tuple[dict[str, str], Callable[[Prepared], None]]]:
    """(extra environment, per-run setup) of a scenario; the tracker one talks to a fake GitHub."""
    def get(sc: Scenario):
        if sc.name == "tracker":
            fake = request.getfixturevalue("gh")
            return {"GH_TOKEN": TOKEN}, tracker_setup(fake)
        return {}, no_setup
    return get


def _named_point(worlds: Worlds, scenario_env, scenario: str, point: str) -> None:
    sc = SCENARIOS[scenario]
    extra, setup = scenario_env(sc)
    prep = worlds.get(sc, 0, extra)
    if setup is not no_setup:   # a fake service's state is not part of the saved world: reference first
        reference(sc, prep, setup)
    problem = crash_then_follow(sc, prep, setup, point=point)
    assert problem is None, problem


@pytest.mark.parametrize("scenario,point", NAMED)
def test_named_crash_point(worlds, scenario_env, scenario, point):
    _named_point(worlds, scenario_env, scenario, point)


# -- the Git-call sweep (killgit) ------------------------------------------------------------------------------

# Writes to the scratch worktree (a cache the next rerun rebuilds) are swept in the long run only.
SCRATCH_LABELS = ("worktree prune", "worktree add --detach", "checkout -f --detach", "clean -ffdx")


def cases(sc: Scenario, calls: list[GitCall], mode: str) -> list[int]:
    """Call numbers to kill at: after every writing call; before the writing calls that follow
    in-process work (a reading call in between) in commands that write in-process between Git
    calls, or before every one of them in the long run."""
    writes = [c for c in calls if c.writes][slice(*sc.sweep)]
    if not FULL:
        writes = [c for c in writes if c.label() not in SCRATCH_LABELS]
    if mode == "after":
        return [c.n for c in writes]
    by_n = {c.n: c for c in calls}
    return [c.n for c in writes if FULL or sc.before_all or c.n == 1 or not by_n.get(c.n - 1, c).writes]


def sweep(worlds: Worlds, scenario_env, sc: Scenario, mode: str) -> list[str]:
    extra, setup = scenario_env(sc)
    preps = [worlds.get(sc, i, extra) for i in range(sc.workers)]
    errors: list[str] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported on the main thread
                errors.append(f"{type(exc).__name__}: {exc}")
        return run

    threads = [threading.Thread(target=guarded(lambda p=p: reference(sc, p, setup))) for p in preps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    labels = [[c.label() for c in p.calls] for p in preps]
    for other in labels[1:]:
        at = next((i for i, (x, y) in enumerate(zip(labels[0], other)) if x != y), min(len(labels[0]), len(other)))
        assert other == labels[0], (f"{sc.name}: the Git calls differ between two identical worlds at call {at + 1}: "
                                    f"{labels[0][at:at + 3]} vs {other[at:at + 3]}")
    todo: queue.Queue[int] = queue.Queue()
    numbers = cases(sc, preps[0].calls, mode)
    assert numbers, f"{sc.name}: no writing Git call to kill at"
    for n in numbers:
        todo.put(n)
    problems: list[str] = []

    def worker(prep: Prepared) -> None:
        while True:
            try:
                n = todo.get_nowait()
            except queue.Empty:
                return
            problem = crash_then_follow(sc, prep, setup, at=n, mode=mode)
            if problem:
                problems.append(problem)

    threads = [threading.Thread(target=guarded(lambda p=p: worker(p))) for p in preps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return sorted(problems)


def sweep_param(name: str, mode: str):
    return pytest.param(name, mode, id=f"{name}-{mode}")


SWEEPS = [
    *(sweep_param(name, "after") for name in ("start", "provision", "done", "tick", "release", "retire", "resume",
                                                "leak", "tracker")),
    # the long run also kills before the lane's `git reset`, i.e. right after the lane branch moved
    *(sweep_param(name, "before") for name in ("provision", "tick", "leak", "tracker")),
    # commands with no in-process write between their Git calls: "before" equals "after the previous call"
    *((sweep_param(name, "before") for name in ("start", "release", "done", "retire", "resume")) if FULL else ()),
]


@pytest.mark.parametrize("name,mode", SWEEPS)
def test_killed_at_each_writing_git_call_then_continued(worlds, scenario_env, name, mode):
    sc = SCENARIOS[name]
    assert sc.deterministic
    problems = sweep(worlds, scenario_env, sc, mode)
    assert not problems, f"{len(problems)} crash(es) not continued to the same result:\n\n" + "\n\n".join(problems)


def test_the_reference_runs_land_one_commit_per_task(worlds, scenario_env):
    """The uncrashed references themselves: what every crash is compared with is right."""
    sc = SCENARIOS["tick"]
    prep = worlds.get(sc, 0, {})
    reference(sc, prep, no_setup)
    want = prep.want
    assert want is not None
    assert [task for _s, task, _t in want["branch"]] == ["core", "docs"]
    assert {c["task_id"]: c["state"] for c in want["children"]} == \
        {"core": "integrated", "api": "pending", "docs": "integrated", "tests": "pending"}
    assert want["evidence"] == ["core", "docs"]


# -- lock files a kill leaves behind (SPEC §15 v3) --------------------------------------------------------

def object_lock(prep: Prepared, task: str) -> Path:
    """The `.lock` of the loose object of `task`'s lane commit (deterministic: the tick builds the
    same commit again), as dulwich leaves it when killed mid-write."""
    assert prep.record is not None
    oid = child(prep.record, task)["lane"]["lane_commit"]
    return prep.world.repo / ".git" / "objects" / oid[:2] / f"{oid[2:]}.lock"


def git_path(cwd: Path, name: str) -> Path:
    return Path(git(cwd, "rev-parse", "--path-format=absolute", "--git-path", name).strip())


@dataclass(frozen=True)
class Stale:
    """A lock file a killed command left, and whether the SPEC wants a warning for it."""
    name: str
    scenario: str
    path: Callable[[Prepared], Path]
    age: float              # seconds: 0 for locks that are stale at once, 61 for the ones that must age
    warns: bool = True


STALE = [
    Stale("loose-object", "tick", lambda p: object_lock(p, "core"), 0, warns=False),
    Stale("batch-record-ref", "tick", lambda p: p.world.repo / ".git/refs/notes/lanes/batch/adv.lock", 0),
    Stale("evidence-ref", "tick", lambda p: p.world.repo / ".git/refs/notes/lanes/evidence.lock", 0),
    Stale("lane-record-ref", "done", lambda p: p.world.repo / ".git/refs/notes/lanes/lane/adv/core.lock", 0),
    Stale("batch-branch-ref", "tick", lambda p: p.world.repo / ".git/refs/heads/imm/adv.lock", 61),
    Stale("lane-branch-ref", "tick", lambda p: p.world.repo / ".git/refs/heads/imm-lane/adv/core.lock", 61),
    Stale("coordinator-index", "tick", lambda p: git_path(p.world.repo, "index.lock"), 61),
    Stale("lane-index", "tick", lambda p: git_path(lane_path(p.world, "core"), "index.lock"), 61),
]


@pytest.mark.parametrize("stale", [pytest.param(s, id=s.name) for s in STALE])
def test_a_lock_file_left_by_a_kill_never_stops_the_next_command(worlds, scenario_env, stale):
    sc = SCENARIOS[stale.scenario]
    extra, setup = scenario_env(sc)
    prep = worlds.get(sc, 0, extra)
    reference(sc, prep, setup)
    w = prep.world
    w.restore("pre")
    lock = stale.path(prep)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_bytes(b"")
    old = time.time() - stale.age
    os.utime(lock, (old, old))
    proc = lanes_proc(sc.cwd(w), *argv_of(sc, prep), env=prep.env)
    assert proc.code == 0 and "internal error" not in proc.err, f"{stale.name}: {proc}"
    if stale.scenario == "done":
        must(lanes_proc(w.repo, "tick", env=prep.env), "tick")
    assert prep.want is not None
    assert_recovered(w.repo, prep.want, context=stale.name)
    if stale.warns:
        assert not lock.exists(), f"{lock} is still there"
        assert any(line.startswith("warning:") and "lock" in line for line in proc.err.splitlines()), \
            f"{stale.name}: no warning about the removed lock: {proc.err}"


def test_a_young_index_lock_is_waited_for_not_failed_on(worlds, scenario_env):
    """A live Git command holds the coordinator's index.lock for longer than a whole tick takes:
    the tick must wait for it (up to a minute), then integrate."""
    sc = SCENARIOS["tick"]
    prep = worlds.get(sc, 0, {})
    reference(sc, prep, no_setup)
    w = prep.world
    w.restore("pre")
    began = time.monotonic()
    assert lanes_proc(w.repo, "tick", "--json", env=prep.env).code == 0
    hold = 3 * (time.monotonic() - began) + 1.0        # the tick meets the lock whatever the machine's speed
    w.restore("pre")
    lock = git_path(w.repo, "index.lock")
    lock.write_bytes(b"")
    timer = threading.Timer(hold, lambda: lock.unlink(missing_ok=True))
    timer.start()
    try:
        proc = lanes_proc(w.repo, "tick", "--json", env=prep.env)
    finally:
        timer.cancel()
        lock.unlink(missing_ok=True)
    assert proc.code == 0, proc
    assert prep.want is not None
    assert_recovered(w.repo, prep.want, context="young index.lock")


# -- crashes the sweeps cannot reach by number ------------------------------------------------------------------

def lane_branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/imm-lane/").split()


@pytest.mark.parametrize("then", ["as-killed", "one-worktree-gone"])
def test_a_run_killed_after_completing_the_batch_is_continued_by_the_next_run(worlds, then):
    """`run` is threaded, so the kill is placed by what the Git call says: right after the write
    that records `completed` (its reflog message), before the lanes are released. Or a release
    killed after its worktree went: only the branch is left (found by the kill soak)."""
    sc = SCENARIOS["run"]
    prep = worlds.get(sc, 0, {})
    w = prep.world
    w.restore("pre")
    killed = prep.killgit.run(w.repo, *argv_of(sc, prep), env=prep.env, match="completed", timeout=180)
    assert was_killed(killed) and prep.killgit.killed(), killed.stderr
    assert record(w.repo)["batch_state"] == "completed"
    assert lane_branches(w.repo), "the kill came after every lane was released: nothing to continue"
    if then == "one-worktree-gone":
        lane = next(c["lane"]["path"] for c in record(w.repo)["children"]
                    if c["state"] == "integrated" and c["lane"].get("path") and Path(c["lane"]["path"]).is_dir())
        git(w.repo, "worktree", "remove", "--force", lane)
    again = lanes_proc(w.repo, *argv_of(sc, prep), env=prep.env, timeout=180)
    assert again.code == 0, again
    assert lane_branches(w.repo) == [] and not any(w.lanes.rglob(".git")), "lanes left behind"
    tasks = [task for _s, task, _t in branch_history(w.repo, "main", f"imm/{SLUG}")]
    assert sorted(tasks) == sorted(t["id"] for t in TASKS) and len(tasks) == len(set(tasks)), tasks
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_provision_killed_inside_git_worktree_add_is_continued(worlds):
    """What Git leaves when killed inside `git worktree add`: the branch (git-lanes made it), the
    worktree registered and locked `initializing`, nothing checked out."""
    prep, w = fresh(worlds, "provision")
    rec = record(w.repo)
    base = git(w.repo, "rev-parse", f"imm/{SLUG}").strip()
    path = w.lanes / "half-made" / "core"
    git(w.repo, "update-ref", "-m", "git-lanes: provision core", f"refs/heads/imm-lane/{SLUG}/core", base, "")
    git(w.repo, "worktree", "add", "--no-checkout", str(path), f"imm-lane/{SLUG}/core")
    git(w.repo, "worktree", "lock", "--reason", "initializing", str(path))
    assert child(rec, "core")["state"] == "pending"
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    lane = Path(child(record(w.repo), "core")["lane"]["path"])
    assert child(record(w.repo), "core")["state"] == "enrolled"
    assert git(lane, "status", "--porcelain", "--untracked-files=all") == ""
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_worktree_add_killed_before_its_head_is_continued_at_the_same_path(worlds):
    """Killed a step earlier (found by the kill soak): the worktree at the lane's own path is
    registered, locked `initializing`, its HEAD still Git's null placeholder with `HEAD.lock` held,
    and the branch already gone (an earlier command cleared it). The next provision reuses the path."""
    prep, w = fresh(worlds, "provision")
    path = w.lanes / "half-made" / "core"
    base = git(w.repo, "rev-parse", f"imm/{SLUG}").strip()
    git(w.repo, "worktree", "add", "--detach", str(path), base)
    admin = Path(git(path, "rev-parse", "--absolute-git-dir").strip())
    (admin / "locked").write_text("initializing")
    (admin / "HEAD").write_text("0" * 40 + "\n")
    (admin / "HEAD.lock").write_text("")
    for item in path.iterdir():
        if item.name != ".git":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    proc = lanes_proc(w.repo, "provision", "core", "--path", str(path), "--json", env=prep.env)
    assert proc.code == 0, proc
    assert "half-made worktree" in proc.err
    assert Path(child(record(w.repo), "core")["lane"]["path"]) == path
    assert git(path, "status", "--porcelain", "--untracked-files=all") == ""
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


@pytest.mark.parametrize("dot_git", ["kept", "gone", "half-written", "not-a-repository"])
def test_a_lane_removal_killed_half_way_is_cleared_by_the_next_provision(worlds, dot_git):
    """`git worktree remove` deletes the files first, then the registration: killed between, the
    never-admitted lane of a pending child is registered with files missing (its `.git` file too,
    perhaps). That is no one's work."""
    prep, w = fresh(worlds, "provision")
    base = git(w.repo, "rev-parse", f"imm/{SLUG}").strip()
    path = w.lanes / "half-removed" / "core"
    git(w.repo, "update-ref", "-m", "git-lanes: provision core", f"refs/heads/imm-lane/{SLUG}/core", base, "")
    git(w.repo, "worktree", "add", "-q", str(path), f"imm-lane/{SLUG}/core")   # as create_lane made it
    tracked = git(path, "ls-files").split()
    assert tracked
    for name in tracked[: max(1, len(tracked) // 2)]:
        (path / name).unlink()
    if dot_git == "gone":
        (path / ".git").unlink()
    elif dot_git == "half-written":
        (path / ".git").write_text("")
    elif dot_git == "not-a-repository":   # its metadata half written: Git's "is not a .git file, error code 7"
        admin = Path(git(path, "rev-parse", "--absolute-git-dir").strip())
        (admin / "commondir").unlink()
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    assert "an interrupted provision left" in proc.err
    assert child(record(w.repo), "core")["state"] == "enrolled"
    assert not path.exists()
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_worktree_add_killed_while_writing_its_metadata_does_not_wedge_every_command(worlds):
    """Killed between creating and writing `commondir`, a `git worktree add` leaves an entry that makes
    every later `git worktree list` fail ("failed to read …/commondir"). Once its `initializing` lock
    is stale, the next command removes it (and the folder holding only its `.git` file)."""
    prep, w = fresh(worlds, "provision")
    base = git(w.repo, "rev-parse", f"imm/{SLUG}").strip()
    path = w.lanes / "dead-add" / "core"
    git(w.repo, "worktree", "add", "--detach", str(path), base)
    admin = Path(git(path, "rev-parse", "--absolute-git-dir").strip())
    (admin / "locked").write_text("initializing")
    (admin / "commondir").write_text("")
    for item in path.iterdir():
        if item.name != ".git":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    assert subprocess.run(["git", "worktree", "list"], cwd=w.repo, capture_output=True).returncode != 0
    young = lanes_proc(w.repo, "tick", "--json", env=prep.env)   # a live add may still be writing
    assert young.code == 128 and "commondir" in young.err and admin.exists()
    then = time.time() - 61
    os.utime(admin / "locked", (then, then))
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    assert "killed half-way" in proc.err
    assert not path.exists()
    lane = Path(child(record(w.repo), "core")["lane"]["path"])
    assert str(lane) in git(w.repo, "worktree", "list") and str(path) not in git(w.repo, "worktree", "list")
    assert child(record(w.repo), "core")["state"] == "enrolled"
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_release_killed_half_way_through_the_worktree_removal_is_finished(worlds):
    """The same kill in the release of an integrated lane: files gone, the lane still registered and
    on its lane commit. The next tick hands it out for release all the same, and `release` finishes."""
    prep, w = fresh(worlds, "release")
    rec = record(w.repo)
    task = next(c["task_id"] for c in rec["children"] if c["state"] == "integrated" and c["lane"].get("path"))
    path = Path(child(rec, task)["lane"]["path"])
    tracked = git(path, "ls-files").split()
    for name in tracked[: max(1, len(tracked) // 2)]:
        (path / name).unlink()
    (path / ".git").unlink()
    proc = lanes_proc(w.repo, "release", task, "--json", env=prep.env)
    assert proc.code == 0, proc
    assert child(record(w.repo), task)["state"] == "released" and not path.exists()
    assert git(w.repo, "for-each-ref", f"refs/heads/imm-lane/{SLUG}/{task}") == ""
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


@pytest.mark.parametrize("killed", ["after-the-index", "inside-the-checkout"])
def test_a_spare_lane_fast_forward_killed_after_its_index_write_is_cleared(worlds, killed):
    """`run` moves a spare lane to the new batch head with `merge --ff-only`; killed after the index
    write, the lane has the head's new files staged on its old tip; killed inside the checkout, some
    of them on its old index (both found by the kill soak)."""
    prep, w = fresh(worlds, "provision")
    head = git(w.repo, "rev-parse", f"imm/{SLUG}").strip()
    old = git(w.repo, "rev-parse", f"imm/{SLUG}~1").strip()   # the spare lane was made one commit ago
    path = w.lanes / "spare" / "core"
    # made as create_lane makes a lane (its branch's reflog starts with the provision's entry)
    git(w.repo, "update-ref", "-m", "git-lanes: provision core", f"refs/heads/imm-lane/{SLUG}/core", old, "")
    git(w.repo, "worktree", "add", "-q", str(path), f"imm-lane/{SLUG}/core")
    git(path, "read-tree", "-m", "-u", old, head)   # what the merge did before it died
    if killed == "inside-the-checkout":
        git(path, "read-tree", old)                  # the files written, the index not yet
    assert git(path, "status", "--porcelain").strip()
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    assert child(record(w.repo), "core")["state"] == "enrolled"
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_pruned_half_removed_lane_folder_is_cleared_at_the_default_path(worlds):
    """A removal killed after the `.git` file went, then `git worktree prune`: the lane's default
    folder holds some files and no worktree. It is git-lanes' own folder: cleared, and reused."""
    prep, w = fresh(worlds, "provision")
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    path = Path(child(record(w.repo), "core")["lane"]["path"])
    w.restore("pre")
    path.mkdir(parents=True, exist_ok=True)
    (path / "left-over.txt").write_text("a file the killed removal did not reach\n")
    proc = lanes_proc(w.repo, "provision", "core", "--json", env=prep.env)
    assert proc.code == 0, proc
    assert "an interrupted removal of a lane" in proc.err
    assert Path(child(record(w.repo), "core")["lane"]["path"]) == path and not (path / "left-over.txt").exists()


def test_a_release_killed_after_the_worktree_went_leaves_no_branch_once_a_tick_records_it(worlds):
    """Killed between removing the worktree and deleting the branch, a release leaves an integrated
    child with no lane and its branch on the lane commit. A tick (not only `release`) records it
    released, and the branch goes with it: it would be `stale_lanes` for the next batch (kill soak)."""
    prep, w = fresh(worlds, "release")
    rec = record(w.repo)
    task = next(c["task_id"] for c in rec["children"] if c["state"] == "integrated" and c["lane"].get("path"))
    killed = lanes_proc(w.repo, "release", task, "--json", env={**prep.env, "GIT_LANES_CRASH_AT": "worktree-removed"})
    assert killed.code != 0
    assert git(w.repo, "for-each-ref", f"refs/heads/imm-lane/{SLUG}/{task}") != ""
    must(lanes_proc(w.repo, "tick", "--json", env=prep.env), "tick")
    assert child(record(w.repo), task)["state"] == "released"
    assert git(w.repo, "for-each-ref", f"refs/heads/imm-lane/{SLUG}/{task}") == ""
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")


def test_a_release_killed_after_the_folder_went_but_before_gits_entry_leaves_no_stale_branch(worlds):
    """`git worktree remove` deletes the folder, then its own entry: killed between, the entry (now
    prunable) still has the lane branch checked out. The tick records the child released, and the
    branch goes all the same: left, it would be `stale_lanes` for every next batch (kill soak)."""
    prep, w = fresh(worlds, "release")
    rec = record(w.repo)
    task = next(c["task_id"] for c in rec["children"] if c["state"] == "integrated" and c["lane"].get("path"))
    path = Path(child(rec, task)["lane"]["path"])
    shutil.rmtree(path)
    assert "prunable" in git(w.repo, "worktree", "list", "--porcelain")
    must(lanes_proc(w.repo, "tick", "--json", env=prep.env), "tick")
    assert child(record(w.repo), task)["state"] == "released"
    assert git(w.repo, "for-each-ref", f"refs/heads/imm-lane/{SLUG}/{task}") == ""
    assert str(path) not in git(w.repo, "worktree", "list", "--porcelain")
    must(lanes_proc(w.repo, "audit", env=prep.env), "audit")
