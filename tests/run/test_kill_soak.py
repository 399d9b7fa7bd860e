"""Kill soak (issue 13, deliverable 2; SPEC §13, §15): `git lanes run` on a batch of 8 tasks (a
chain of three and five disjoint siblings, a scripted executor), killed with SIGKILL — its whole
process group, and the executor sessions it left running — at seeded random moments, then run
again, until the batch ends. Every batch must end `completed` with one commit per task and a clean
`audit`; no run that was not killed may fail; zero stuck batches is the bar.

Between a kill and the next run the soak lets "a minute pass" for the lock files the SPEC allows a
command to wait for (a `.lock` on `imm/*` or `imm-lane/*`, an `index.lock`): it ages them by 61 s
instead of sleeping. Every other lock file (a loose object's, a `refs/notes/lanes/*` one) is left
exactly as the kill left it: the next command must cope at once.

`GIT_LANES_SOAK_KILLS` sets the number of kills (default 30; the long run: 1000);
`GIT_LANES_SOAK_SEED` the seed (default 13).
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


from adversary import (age, aging_locks, branch_history, chain_and_siblings, kill_group, kill_orphans, lanes_proc,
                       make_repo, other_locks, record, write_executor)

KILLS = int(os.environ.get("GIT_LANES_SOAK_KILLS", "30"))
SEED = int(os.environ.get("GIT_LANES_SOAK_SEED", "13"))
TASKS = chain_and_siblings(8)
SLUG = "soak"
MAX_KILLS_PER_BATCH = 12      # then one run is let finish: a batch takes a handful of kills at most
MAX_RUNS_UNKILLED = 3         # runs in a row that end without finishing the batch: the batch is stuck
RUN_TIMEOUT = 120.0
WORKERS = 3                   # batches soaked at once (a run mostly waits: the kills are timed)



@dataclass
class Soak:
    kills: int = 0
    batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stuck: list[str] = field(default_factory=list)        # batches no later run could finish
    failed_runs: list[str] = field(default_factory=list)  # runs that were not killed and did not exit 0
    leftover_locks: set[str] = field(default_factory=set)

    def summary(self) -> str:
        return (f"{self.kills} kills over {self.batches} batches, {len(self.stuck)} stuck, "
                f"{len(self.failed_runs)} failed runs; lock files the kills left (not aged): "
                f"{sorted(self.leftover_locks) or 'none'}")


def run_argv(executor: str) -> list[str]:
    return ["git", "lanes", "run", SLUG, "--executor", executor, "--yes", "--max-parallel", "3"]


def one_batch(base: Path, rng: random.Random, soak: Soak, budget: int, number: int) -> None:
    """One batch, killed up to `budget` times, then run to its end (or found stuck)."""
    repo = make_repo(base / "repo", slug=SLUG, tasks=TASKS, final_checks=["python3 -c pass"],
                     lanes_root=base / "lanes")
    pids = base / "pids"
    pids.mkdir()
    env = {**os.environ, "EXEC_PIDS": str(pids)}
    executor = write_executor(base)
    kills_here = 0
    unkilled = 0
    log: list[str] = []
    while True:
        proc = subprocess.Popen(run_argv(executor), cwd=repo, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        kill_at = rng.uniform(0.05, 1.6) if kills_here < budget else None
        try:
            out, err = proc.communicate(timeout=kill_at if kill_at is not None else RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            if kill_at is None:
                kill_group(proc.pid)
                proc.communicate()
                soak.stuck.append(f"batch {number}: a run hung for {RUN_TIMEOUT} s; log: {log}")
                return
            kill_group(proc.pid)
            proc.communicate()
            kill_orphans(pids)
            git_dir = repo / ".git"
            soak.leftover_locks.update(str(p.relative_to(git_dir)) for p in other_locks(git_dir))
            age(aging_locks(git_dir))
            kills_here += 1
            with soak.lock:
                soak.kills += 1
            log.append(f"killed at {kill_at:.2f} s")
            continue
        text = err.decode("utf-8", "replace").strip().splitlines()
        log.append(f"exit {proc.returncode}: {text[-1] if text else ''}")
        if proc.returncode == 0:
            break
        said = [line for line in out.decode("utf-8", "replace").splitlines() if "provision" in line or "refus" in line]
        soak.failed_runs.append(f"batch {number}: run exited {proc.returncode}: {' | '.join(text[-3:])}; "
                                f"it said: {' | '.join(said[-6:])}")
        unkilled += 1
        if unkilled >= MAX_RUNS_UNKILLED:
            soak.stuck.append(f"batch {number}: {unkilled} runs in a row could not finish it; log: {log}")
            return
    rec = record(repo, SLUG)
    problems = []
    if rec["batch_state"] != "completed" or not (rec.get("final_verification") or {}).get("passed"):
        problems.append(f"ended {rec['batch_state']} ({rec.get('reason')})")
    # over main, not the latest batch's base: a run that follows a kill after `completed` starts a new
    # batch of the initiative, which carries every child over (SPEC §6 start)
    landed = [task for _s, task, _t in branch_history(repo, "main", f"imm/{SLUG}")]
    if sorted(landed) != [t["id"] for t in TASKS]:
        problems.append(f"landed {landed}, not each task once")
    audit = lanes_proc(repo, "audit")
    if audit.code != 0:
        problems.append(f"audit: {audit.out.strip()} {audit.err.strip()}")
    if problems:
        soak.stuck.append(f"batch {number}: {'; '.join(problems)}; log: {log}")


def worker(base: Path, index: int, soak: Soak) -> None:
    rng = random.Random(SEED * 1000 + index)
    while True:
        with soak.lock:
            left = KILLS - soak.kills
            if left <= 0:
                return
            number = soak.batches
            soak.batches += 1
        one_batch(base / f"b{number:04d}", rng, soak, min(MAX_KILLS_PER_BATCH, max(1, left // WORKERS)), number)


def test_run_survives_random_sigkills_and_every_batch_completes(tmp_path):
    soak = Soak()
    started = time.monotonic()
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            worker(tmp_path, index, soak)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    print(f"\nkill soak: {soak.summary()} in {time.monotonic() - started:.0f} s")
    assert soak.kills >= KILLS
    bad = soak.stuck + soak.failed_runs
    assert not bad, soak.summary() + "\n" + "\n".join(bad)
