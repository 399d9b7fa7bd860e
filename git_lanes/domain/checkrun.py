"""One check as git-lanes runs it (SPEC §8.7, §8.8 v4): a receipt look-up first, then the run, then
flaky retries on the same tree, then the receipt of a pass.

Used by `done` (in the lane), the candidate reruns (`scratch.Scratch.run`) and the final checks;
`verify` runs its checks the same way, with a book that never writes.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Sequence

from .checks import MISSING_EXIT_CODE, CheckResult, run_command, told

if TYPE_CHECKING:
    from .receipts import Receipts


class Spec(NamedTuple):
    """A check to run: its id (as reported), command, timeout, and what its receipt needs."""
    id: str
    command: str
    timeout: float
    argv: Sequence[str] | None = None       # its words (default: the command split with shlex)
    inputs: Sequence[str] | None = None     # declared `inputs` (None: the whole tree)
    receipts: bool = True                   # false: `receipts = false` on its acceptance item
    task: str = ""                          # the task the receipt names


class _Running:
    """A check this process is running now on one input, in one kind of place (SPEC §8.7)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: CheckResult | None = None


# Verifiers of a window (`tick`, `run`) are threads of one process: a check that one of them runs on
# an input is waited for by the others that need it on the same input, not run again beside it.
_running: dict[tuple[str, str], _Running] = {}
_running_lock = threading.Lock()


def _join(where: str, key: str) -> tuple[_Running, bool]:
    """(the run of `key` at `where`, whether this thread is the one to run it)."""
    with _running_lock:
        found = _running.get((where, key))
        if found is not None:
            return found, False
        found = _running[(where, key)] = _Running()
        return found, True


def _leave(where: str, key: str, run: _Running, result: CheckResult | None) -> None:
    run.result = result
    with _running_lock:
        _running.pop((where, key), None)
    run.done.set()


def retriable(result: CheckResult) -> bool:
    """A failure worth running again (SPEC §8.8): a non-zero exit other than 127; a timeout or a
    signal never."""
    return result.exit_code not in (None, 0, MISSING_EXIT_CODE)


def flake_retries(git, gate: bool) -> int:
    """`lanes.gateFlakeRetries` (default 0) for candidate reruns, else `lanes.flakeRetries` (default 1)."""
    value = git.config_int("lanes.gateFlakeRetries", 0) if gate else git.config_int("lanes.flakeRetries", 1)
    return max(0, value)


def execute(spec: Spec, *, cwd: str, env: Mapping[str, str], tree: str, book: "Receipts | None" = None,
            retries: int = 0, before_retry: Callable[[], None] | None = None) -> CheckResult:
    """The result of `spec` on `tree` (checked out at `cwd`): a usable receipt's (`cached: true`,
    nothing runs), else the run's, retried up to `retries` times after a failure that may be flaky
    (each after `before_retry()`); a pass on a retry is `flaky: true` with its `attempts` and gets no
    receipt; a first-time pass is handed to `book` to keep."""
    key = _key(spec, cwd=cwd, env=env, tree=tree, book=book)
    if key is None:
        return _run(spec, cwd=cwd, env=env, retries=retries, before_retry=before_retry)
    hit = _hit(spec, key, book)
    if hit is not None:
        return hit
    run, mine = _join(book.where, key.key)
    if not mine:
        run.done.wait(spec.timeout)
        other = run.result
        if other is not None and other.passed and not other.flaky:   # its receipt stands for this run
            book.add(key, other, tree=tree, task_id=spec.task)           # (the same receipt: kept either way)
            return other._replace(id=spec.id, command=spec.command, cached=True, receipt=key.key)
        run, mine = _join(book.where, key.key)   # it failed (a failure always runs again) or is gone
    result = None
    try:
        result = _run(spec, cwd=cwd, env=env, retries=retries, before_retry=before_retry)
        if result.passed and not result.flaky:
            book.add(key, result, tree=tree, task_id=spec.task)
        return result
    finally:
        if mine:
            _leave(book.where, key.key, run, result)


def look_up(spec: Spec, *, cwd: str, env: Mapping[str, str], tree: str, book: "Receipts") -> CheckResult | None:
    """The result a usable passing receipt gives `spec` on `tree` (`cached: true`), else None (nothing
    runs: a miss is the caller's to run)."""
    key = _key(spec, cwd=cwd, env=env, tree=tree, book=book)
    return _hit(spec, key, book) if key is not None else None


def _key(spec: Spec, *, cwd: str, env: Mapping[str, str], tree: str, book: "Receipts | None"):
    """The receipt key of `spec` on `tree`, or None (no book, `receipts = false`, receipts off)."""
    from .checks import split_command

    if book is None or not spec.receipts:
        return None
    try:
        argv = list(spec.argv) if spec.argv is not None else split_command(spec.command)
    except Exception:
        return None
    return book.key(argv, spec.inputs, tree, cwd=cwd, env=env) if argv else None


def _hit(spec: Spec, key, book: "Receipts") -> CheckResult | None:
    hit = book.lookup(key)
    if hit is None:
        return None
    return CheckResult(spec.id, spec.command, 0, None, True, hit["duration_ms"], hit["output_tail"], cached=True,
                       receipt=key.key)


def _run(spec: Spec, *, cwd: str, env: Mapping[str, str], retries: int,
         before_retry: Callable[[], None] | None) -> CheckResult:
    """Run `spec`, retried up to `retries` times after a failure that may be flaky (SPEC §8.8)."""
    result = run_command(spec.id, spec.command, cwd=cwd, env=env, timeout=spec.timeout, argv=spec.argv)
    failed: list[dict] = []
    while not result.passed and retriable(result) and len(failed) < retries:
        failed.append({"exit_code": result.exit_code, "signal": result.signal, "output_tail": result.output_tail})
        if before_retry is not None:
            before_retry()
        result = run_command(spec.id, spec.command, cwd=cwd, env=env, timeout=spec.timeout, argv=spec.argv)
    if failed and result.passed:
        runs = (*failed, {"exit_code": result.exit_code, "signal": result.signal, "output_tail": result.output_tail})
        return result._replace(flaky=True, attempts=runs)
    return result


def execute_all(specs: Sequence[Spec], *, cwd: str, env_of: Callable[[Spec], Mapping[str, str]], tree: str,
                book: "Receipts | None" = None, retries: int = 0, fail_fast: bool = False,
                before_retry: Callable[[], None] | None = None) -> list[CheckResult]:
    """Every spec in order (`execute`); with `fail_fast`, none after the first failure."""
    results = []
    for spec in specs:
        result = execute(spec, cwd=cwd, env=env_of(spec), tree=tree, book=book, retries=retries,
                         before_retry=before_retry)
        results.append(result)
        told(len(results), result)   # an MCP call's progress notification (SPEC §17.6)
        if fail_fast and not result.passed:
            break
    return results
