"""Concurrency (issue 13, deliverable 3; SPEC §15): many `git lanes` commands at once never lose an
update, integrate twice, park a healthy lane or leave a record that does not validate.

Each round starts 8 commands at the same instant — a plain tick, `integrate`, `status`, a
`release` of an integrated lane, up to two `provision`s (of children that have a free slot) and
`done`s in lanes whose work was just delivered (one delivery in three fails its check first), more
`status` for the rest — and waits for all of them. A command
may lose the race only cleanly: exit 0, or exit 1 with `batch_busy` (or `qa_failed` for a
failing delivery), one `error:` line, no traceback. After the rounds the batch is ticked quiet
and checked: each child counted exactly the attempts its `done`s reported (`qa_attempts_seen`,
`qa_failures`), no task landed twice, no child was parked (nothing here deserves a park), and
every state commit of the record (its whole first-parent history) holds a valid record.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


from adversary import (GIT_LANES, Proc, child, landed_tasks, lanes_proc, make_repo, record,
                       record_at, state_commits, valid_record_problems)
from conftest import git

SLUG = "adv"
ROUNDS = int(os.environ.get("GIT_LANES_CONCURRENCY_ROUNDS", "15"))   # more for a long run
N_TASKS = 40
MAX_PARALLEL = 3


def right(task: str) -> str:
    """Passes when the task's file starts with `right` (grep: a check far cheaper than Python)."""
    return f"grep -q ^right src/{task}/out.txt"


TASKS = [{"id": f"c{i:02d}", "scope": [f"src/c{i:02d}"], "check": right(f"c{i:02d}")} for i in range(N_TASKS)]



@dataclass
class Launched:
    what: str
    popen: subprocess.Popen
    expect_fail: bool = False     # a delivery made to fail its check


@dataclass
class Ledger:
    attempts: Counter = field(default_factory=Counter)   # done runs that reported an attempt, per task
    failures: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    outcomes: Counter = field(default_factory=Counter)
    passed: set[str] = field(default_factory=set)          # tasks whose delivery passed
    parked: set[str] = field(default_factory=set)


def launch(what: str, cwd: Path | str, *args: str, expect_fail: bool = False) -> Launched:
    popen = subprocess.Popen([GIT_LANES, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    return Launched(what, popen, expect_fail)


def settle(item: Launched, ledger: Ledger) -> Proc:
    """Wait for a launched command and account for how it ended; its output comes back."""
    out, err = item.popen.communicate(timeout=120)
    proc = Proc(item.popen.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    _account(item, proc, ledger)
    return proc


def _account(item: Launched, proc: Proc, ledger: Ledger) -> None:
    errors = [line for line in proc.err.splitlines() if line.startswith(("error:", "fatal:"))]
    clean = "Traceback" not in proc.err and "internal error" not in proc.err
    if item.what.startswith("done "):
        task = item.what.split()[1]
        if proc.code in (0, 1) and proc.out.strip() and clean:
            doc = json.loads(proc.out)
            ledger.attempts[task] += 1
            ledger.failures[task] += 0 if doc["passed"] else 1
            if doc["passed"]:
                ledger.passed.add(task)
            if doc["passed"] == item.expect_fail:
                ledger.problems.append(f"{item.what}: passed={doc['passed']} for a delivery made to "
                                       f"{'fail' if item.expect_fail else 'pass'}")
            ledger.outcomes["done"] += 1
            return
    if proc.code == 0 and clean:
        ledger.outcomes[item.what.split()[0]] += 1
        return
    if proc.code == 1 and clean and len(errors) == 1 and errors[0].startswith("error: batch_busy:"):
        ledger.outcomes["batch_busy"] += 1
        return
    ledger.problems.append(f"{item.what}: {proc}")


def quiet_tick(repo: Path) -> dict:
    for _ in range(5):
        before = git(repo, "rev-parse", f"refs/notes/lanes/batch/{SLUG}").strip()
        proc = lanes_proc(repo, "tick", "--json")
        assert proc.code == 0, proc
        if git(repo, "rev-parse", f"refs/notes/lanes/batch/{SLUG}").strip() == before:
            return proc.json()
    return proc.json()


def one_round(repo: Path, n: int, ledger: Ledger) -> None:
    """Plan from the stored record (read through Git: no command), then 8 commands at once."""
    rec = record(repo, SLUG)
    by_state: dict[str, list[dict]] = {}
    for c in rec["children"]:
        by_state.setdefault(c["state"], []).append(c)
    in_flight = sum(len(by_state.get(s, [])) for s in ("enrolled", "settled", "lane_committed"))
    batch: list[Launched] = [launch("tick", repo, "tick", "--json"), launch("integrate", repo, "integrate", "--json"),
                             launch("status", repo, "status", "--json")]
    for c in by_state.get("integrated", [])[:1]:     # released lanes keep every command cheap
        batch.append(launch(f"release {c['task_id']}", repo, "release", c["task_id"], "--json"))
    for c in by_state.get("pending", [])[:max(0, min(2, MAX_PARALLEL - in_flight))]:
        batch.append(launch(f"provision {c['task_id']}", repo, "provision", c["task_id"], "--json"))
    for c in by_state.get("enrolled", []):
        task = c["task_id"]
        if len(batch) == 8 or task in ledger.passed:
            continue
        fail = ledger.attempts[task] == 0 and int(task[1:]) % 3 == 0
        lane = Path(c["lane"]["path"])
        out = lane / "src" / task / "out.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(("wrong" if fail else "right") + f" round {n}\n")
        batch.append(launch(f"done {task}", lane, "done", "--json", expect_fail=fail))
    while len(batch) < 8:
        batch.append(launch("status", repo, "status", "--json"))
    for item in batch:
        settle(item, ledger)
    for c in record(repo, SLUG)["children"]:
        if c["state"] in ("needs_human", "skipped_blocked") and c["task_id"] not in ledger.parked:
            ledger.parked.add(c["task_id"])
            ledger.problems.append(f"round {n}: {c['task_id']} parked: {c.get('reason')}")


def test_eight_commands_at_once_for_many_rounds(tmp_path):
    repo = make_repo(tmp_path / "repo", tasks=TASKS, final_checks=[], lanes_root=tmp_path / "lanes")
    start = lanes_proc(repo, "start", SLUG, "--yes", "--max-parallel", str(MAX_PARALLEL),
                       "--qa-failure-limit", "100")
    assert start.code == 0, start
    ledger = Ledger()
    began = time.monotonic()
    for n in range(ROUNDS):
        one_round(repo, n, ledger)
    final = quiet_tick(repo)
    took = time.monotonic() - began
    rec = record(repo, SLUG)
    print(f"\nconcurrency: {ROUNDS} rounds in {took:.0f} s; outcomes {dict(ledger.outcomes)}; "
          f"{sum(ledger.attempts.values())} attempts")
    problems = list(ledger.problems)
    # every QA attempt counted exactly once
    for c in rec["children"]:
        task = c["task_id"]
        if c["state"] in ("enrolled", "settled", "lane_committed", "integrated", "released"):
            got = (c.get("qa_attempts_seen", 0), c.get("qa_failures", 0))
            if c["state"] == "enrolled" and got[0] < ledger.attempts[task]:
                continue    # not observed yet only if the quiet tick missed it: checked just below
            if got != (ledger.attempts[task], ledger.failures[task]):
                problems.append(f"{task}: counted {got} (seen, failures), its lane reported "
                                f"{(ledger.attempts[task], ledger.failures[task])}")
    # no task landed twice; every landed task is recorded integrated (or released) with that commit
    landed = landed_tasks(repo, SLUG)
    done = {c["task_id"] for c in rec["children"] if c["state"] in ("integrated", "released")}
    if set(landed) != done:
        problems.append(f"landed {sorted(landed)} but the record says {sorted(done)}")
    assert len(landed) >= 10, f"too little happened in {ROUNDS} rounds: {landed}"
    # every record ever written is valid
    for commit in state_commits(repo, SLUG):
        problems += [f"state commit {commit[:12]}: {p}" for p in valid_record_problems(record_at(repo, commit))]
    if final["batch_state"] not in ("running", "completed") and not ledger.parked:
        problems.append(f"the batch ended {final['batch_state']}: {final.get('reason')}")
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def hold_slug_lock(repo: Path) -> int:
    """Take the slug's `flock` (SPEC §15: `<git-common-dir>/lanes/locks/`) as another command would."""
    folder = repo / ".git" / "lanes" / "locks" / "batch"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / SLUG, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def waits_for(pid: int, lock: Path, timeout: float = 30) -> None:
    """Until process `pid` has the lock file open (it polls the `flock` then: past everything it
    does before taking the lock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(lock) for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except (FileNotFoundError, ProcessLookupError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never waited for {lock}")


def test_a_tick_waiting_for_the_lock_never_parks_a_lane_provisioned_meanwhile(tmp_path):
    """A tick has listed the worktrees and waits for the slug's lock (another command holds it); a
    provision makes its lane and waits too. When the provision gets the lock first, the tick that
    follows must still see the lane: it is never parked. Trials go on until the provision has won
    three times (each trial is a coin toss between the two waiting commands)."""
    tasks = [{"id": f"p{i:02d}", "scope": [f"src/p{i:02d}"], "check": right(f"p{i:02d}")} for i in range(20)]
    repo = make_repo(tmp_path / "repo", tasks=tasks, final_checks=[], lanes_root=tmp_path / "lanes")
    assert lanes_proc(repo, "start", SLUG, "--yes", "--max-parallel", "20").code == 0
    lock = repo / ".git" / "lanes" / "locks" / "batch" / SLUG
    parked, provision_first = [], 0
    for i in range(20):
        task = f"p{i:02d}"
        fd = hold_slug_lock(repo)
        try:
            tick = launch("tick", repo, "tick", "--json")
            waits_for(tick.popen.pid, lock)
            provision = launch(f"provision {task}", repo, "provision", task, "--json")
            waits_for(provision.popen.pid, lock)
        finally:
            os.close(fd)
        ledger = Ledger()
        ticked = settle(tick, ledger)
        settle(provision, ledger)
        assert not ledger.problems, ledger.problems
        # who held the lock first: the tick saw the lane enrolled only when the provision had gone before
        provision_first += child(json.loads(ticked.out), task)["state"] == "enrolled"
        c = child(record(repo, SLUG), task)
        if c["state"] != "enrolled":
            parked.append(f"{task}: {c['state']} ({c.get('reason')})")
            break
        if provision_first >= 3:
            break
    assert not parked, parked
    assert provision_first >= 1, "the provision never got the lock first: the race was not run"
