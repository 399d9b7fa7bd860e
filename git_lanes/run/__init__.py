"""`git lanes run`: the Parent in a box (SPEC §13), and `git lanes demo`.

One process drives a batch to its end. It starts the batch (or continues a running one; never a
`needs_human` one), ticks in-process, provisions the lanes the handoffs name, runs one executor
session per lane and, when the executor exits without `git lanes done`, runs `done` for it.
Ctrl-C leaves a batch that the next `run` continues. The result (the final report, the summary's
facts and the error, if any) goes back to the CLI, which prints it.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.errors import ExitCode, LanesError, usage
from ..core.ids import check_id, shell_syntax_problem
from ..domain.checks import split_command
from ..domain.procs import kill_all, stopping
from ..domain.session import Session
from ..domain.workspace import log_base, repo_id, setup_command
from ..gitio import BatchBranch
from ..store import run_lock
from ..tick import status_report
from .loop import TERMINAL, Driver, Stop
from .sessions import logged_sessions


@dataclass
class RunResult:
    report: dict[str, Any]
    exit_code: int
    error: str | None = None                              # printed as `error: <text>`
    summary: dict[str, Any] = field(default_factory=dict)   # what the human summary shows


def _passed(report: dict[str, Any]) -> bool:
    fv = report.get("final_verification")
    return report.get("batch_state") == "completed" and bool(fv) and bool(fv.get("passed"))


def _failed_attempts(s: Session, slug: str, batch_id: str, task_id: str, archived: list[str]) -> int:
    """Every failed attempt of the child in this batch (SPEC §13: all of them, not the counter
    corrections reset): its lane record's, and those of the lanes `resume --restart` archived
    (`archived`: their lane records' last state commits)."""
    failed = 0
    for tip in [None, *archived]:
        try:
            data = s.lanes.read_data(slug, task_id)[0] if tip is None else s.lanes.data_at(slug, task_id, tip)
        except LanesError:
            continue
        if isinstance(data, dict) and data.get("batch_id") == batch_id:
            failed += sum(1 for a in data.get("qa_attempts", []) if isinstance(a, dict) and a.get("passed") is False)
    return failed


def next_steps(s: Session, slug: str, record, executor: str = "...", again: str | None = None) -> list[str]:
    """What to do next, as commands to paste (SPEC §13 v3): land a completed batch; look at and free
    each parked child (resume it when Git can recover it, else restart it)."""
    from ..batch.resume import recover
    from ..core.report import land_command

    if record.batch_state == "completed":
        return [f"land it on {record.base_branch or 'your branch'}: {land_command(record)}"]
    steps = []
    for child in record.children:
        if child.state != "needs_human":
            continue
        found = recover(s, record, child)
        task = shlex.quote(child.task_id)
        look = f"git lanes show {task} --slug {shlex.quote(slug)}"
        restart = "--restart " + task
        if record.batch_state == "running":
            free = f"git lanes resume {shlex.quote(slug)} " + (task if found.state else restart)
        else:
            free = f"git lanes resume {shlex.quote(slug)} " + ("" if found.state else restart + " ") + "--yes"
        why = f" ({found.why})" if found.state is None else ""
        steps.append(f"{child.task_id}: {look}; then {free}{why}")
    if steps:
        steps.append("then continue with: " + (again or f"git lanes run {shlex.quote(slug)} --executor {executor}"))
    return steps


def executor_steps(slug: str, remote: str, state: str) -> list[str]:
    """What next, from an executor's clone: landing and freeing parked children are the coordinator's
    (this clone's view is the record as last pulled from `remote`)."""
    if state == "completed":
        return [f"nothing left for this clone: the coordinator lands {BatchBranch(slug).name} "
                f"(git fetch {shlex.quote(remote)} shows it)"]
    if state == "needs_human":
        return [f"the coordinator frees the parked children (git lanes status {shlex.quote(slug)} there); "
                f"then here again: git lanes work {shlex.quote(slug)} --remote {shlex.quote(remote)} ..."]
    return []


def summary_facts(s: Session, slug: str, report: dict[str, Any], driver: Driver | None, logs: str,
                  executor: str = "...", again: str | None = None) -> dict[str, Any]:
    """The summary's facts: the stored reason, the per-child table, the batch branch's log, what next."""
    snap = s.batches.read(slug)
    mine = snap is not None and snap.record.batch_id == report["batch_id"]
    stored = snap.record.reason if mine else None
    track = driver.track if driver else {}
    logged = logged_sessions(logs) if logs else {}   # the batch's sessions, earlier runs' too (SPEC §13)
    archived: dict[str, list[str]] = {}
    for a in snap.record.archived_lanes if mine else []:
        if a.record_tip:
            archived.setdefault(a.task_id, []).append(a.record_tip)
    rows = [(c["task_id"], c["state"],
             str(max(logged.get(c["task_id"], 0), track[c["task_id"]].sessions if c["task_id"] in track else 0)),
             str(_failed_attempts(s, slug, report["batch_id"], c["task_id"], archived.get(c["task_id"], []))),
             str(c.get("corrections", 0)), (c.get("commit") or "")[:12])
            for c in report["children"]]
    from ..batch.metering import totals

    used = totals(s, slug, report)   # SPEC §17.4: a cost column when any cost was reported
    costs = {t: u["cost_usd"] for t, u in (used or {}).get("children", {}).items() if "cost_usd" in u}
    if costs:
        rows = [(*r, f"${costs[r[0]]:.2f}" if r[0] in costs else "") for r in rows]
    base = snap.record.base_head if snap is not None else None
    branch = BatchBranch(slug)
    log = None
    if s.git.refs.resolve(branch.ref) is not None:
        log = s.git.odb.log_oneline(f"{base}..{branch.name}" if base else branch.name).rstrip("\n")
    steps = next_steps(s, slug, snap.record, executor, again) if mine else []
    return {"reason": stored or report.get("reason"), "rows": rows, "branch": branch.name, "base": base,
            "log": log or None, "log_dir": logs if logs and os.path.isdir(logs) else None, "next": steps,
            "usage": used, "cost": bool(costs)}


def log_dir(s: Session, batch_id: str) -> str:
    """Where the session logs of a batch go: `log_base`, then `<repo id>/<batch id>`."""
    return os.path.join(log_base(s), repo_id(s), batch_id)


def check_log_base(s: Session) -> None:
    """A `lanes.logDir` in the coordinator's worktree that Git does not ignore is a usage error: the logs
    would make it dirty (`working_tree_unstaged`), and the next tick would refuse."""
    base, top = log_base(s), s.git.toplevel
    real, inside = os.path.realpath(base), (lambda path, folder: os.path.commonpath([path, folder]) == folder)
    if top and inside(real, os.path.realpath(top)) and not inside(real, os.path.realpath(s.git.common_dir)):
        probe = os.path.relpath(os.path.join(real, "git-lanes.log"), os.path.realpath(top))
        if s.git.run("check-ignore", "-q", "--", probe, check=False).returncode != 0:
            raise usage(f"lanes.logDir: {base} is inside the worktree {top}, and Git does not ignore it: the "
                        f"session logs would make it dirty; use a folder outside it, or ignore it (.gitignore)")


def _shown(value: Any) -> str:
    """An option's value as typed: a list (of final checks) as shell words, `none` when empty."""
    return (" ".join(shlex.quote(v) for v in value) or "none") if isinstance(value, list) else str(value)


def _release_finished(s: Session, slug: str, say: Callable[[str], None]) -> None:
    """The integrated lanes a batch that ended outside `run` still has (e.g. by `resume`'s tick) go: before a
    new batch starts (they would be stale_lanes), and when `run` leaves a needs_human batch alone."""
    from ..batch.steward import release_gone, release_integrated

    report = status_report(s, slug)
    handoffs = [h for h in report["handoffs"] if h.get("action") == "release"]
    for item in release_integrated(s, slug, handoffs):
        if not item.get("failed"):
            say(f"{item['task_id']}: released its lane {item['path']} (integrated)")
    for task in release_gone(s, slug, report, {h["task_id"] for h in handoffs}):
        say(f"{task}: released what was left of its lane (integrated)")


def run(s: Session, slug: str, *, executor: str, corrector: str | None = None, opts=None,
        confirm: Callable[[str], bool] | None = None, as_json: bool = False,
        out: Callable[[str], None] = print, new: bool = False) -> RunResult:
    """Drive the batch of `slug` to its end; exit 0 only for `completed` with final verification passed."""
    from ..batch.start import StartOptions

    check_id(slug, "slug")
    argv = split_command(executor)
    corrector_argv = split_command(corrector) if corrector is not None else None
    for option, command in (("--executor", executor), ("--corrector", corrector)):
        problem = shell_syntax_problem(command) if command is not None else None
        if problem:   # run without a shell, as checks are (SPEC §2.1)
            raise usage(f"{option} {command!r}: {problem}")
    for option, words in (("--executor", argv), ("--corrector", corrector_argv)):
        # a bare name is looked up on PATH now; a path runs relative to the lane, so it is left to the lane
        if words and os.sep not in words[0] and shutil.which(words[0]) is None:
            raise usage(f"{option}: {words[0]}: command not found")
    setup_command(s)   # shell syntax in lanes.setupCommand: a usage error before anything starts
    check_log_base(s)  # so is a lanes.logDir that the logs would make dirty
    held = run_lock(s.git, slug)   # one driver per slug (one session per lane): a second run refuses at once
    try:
        return _run(s, slug, executor, corrector, argv, corrector_argv, opts or StartOptions(), confirm, as_json, out,
                    new)
    finally:
        held.release()


def _run(s: Session, slug: str, executor: str, corrector: str | None, argv: list[str],
         corrector_argv: list[str] | None, opts, confirm: Callable[[str], bool] | None, as_json: bool,
         out: Callable[[str], None], new: bool = False) -> RunResult:
    from ..batch.start import start

    again = f"git lanes run {slug} --executor {shlex.quote(executor)}" \
        + (f" --corrector {shlex.quote(corrector)}" if corrector is not None else "")
    snap = s.batches.read(slug)
    if snap is not None and snap.record.batch_state == "completed" and not new and _same_plan(s, slug, snap.record):
        # SPEC §17.6 v4: that batch is done; its summary and landing step, starting nothing
        record = snap.record
        _release_finished(s, slug, out if not as_json else s.warn)
        (s.warn if as_json else out)(f"batch {record.batch_id} already completed this plan; nothing to start "
                                     f"(git lanes run {slug} --new --executor {shlex.quote(executor)} starts a "
                                     "new batch)")
        report = status_report(s, slug)
        return ending(report, summary_facts(s, slug, report, None, log_dir(s, record.batch_id), again=again),
                      False, None, again)
    if snap is None or snap.record.terminal:
        if snap is not None:
            _release_finished(s, slug, out if not as_json else s.warn)
        record = start(s, slug, opts, confirm or (lambda text: True))
        how = "started"
    else:
        record = snap.record
        how = "continuing"
        if record.batch_state == "needs_human":
            _release_finished(s, slug, out if not as_json else s.warn)   # its way out too
            report = status_report(s, slug)
            return RunResult(report, 1, f"batch_needs_human: batch {record.batch_id} needs a human decision "
                                        f"({record.reason}); run never resumes it: see the commands above, "
                                        f"then run again",
                             summary_facts(s, slug, report, None, log_dir(s, record.batch_id), again=again))
        given = {"--max-parallel": (opts.max_parallel, record.max_parallel, 1),
                 "--qa-failure-limit": (opts.qa_failure_limit, record.budget.qa_failure_limit, 2),
                 "--max-children": (opts.max_children, record.budget.max_children, None),
                 "--verify-window": (opts.verify_window, record.verify_window or 1, None),
                 "--final-check": (opts.final_checks, record.final_checks, None)}
        for option, (value, recorded, default) in given.items():
            if value != default and value != recorded:
                s.warn(f"batch {record.batch_id} runs with {option} {_shown(recorded)} (fixed when it started); "
                       f"{option} {_shown(value)} does not apply")
    logs = log_dir(s, record.batch_id)
    driver = Driver(s, slug, record, argv, corrector_argv, as_json, out, logs)
    driver.progress.event(f"{how} batch {record.batch_id} (max parallel {record.max_parallel}); executor: {executor}")
    driver.progress.event(f"session logs: {logs}/<task>-<n>.log")
    _drive(driver, again)
    interrupted = driver.interrupted.is_set()
    coord = driver.cs
    coord.forget_worktrees()
    # the last tick's report when it is the latest word (a batch that ended); else the stored record's
    ended = driver.report.get("batch_state") in TERMINAL + ("needs_human",)
    final = driver.report if ended and not interrupted and not driver.removed else status_report(coord, slug)
    drop_scratch(coord, final, driver.progress.event)
    driver.progress.close()
    return ending(final, summary_facts(coord, slug, final, driver, logs, again=again), interrupted,
                  driver.stop_reason, again)


def _same_plan(s: Session, slug: str, record) -> bool:
    """Whether the plan at the coordinator's HEAD is the one the batch ran (its resealed `plan_digest`)."""
    head = s.git.rev_parse("HEAD")
    try:
        return head is not None and s.plan_at(head, slug).digest == record.plan_digest
    except LanesError:
        return False


def drop_scratch(coord: Session, final: dict[str, Any], event: Callable[[str], None]) -> None:
    """A loop that ended its batch removes the scratch pool when `lanes.keepScratch` is false (SPEC §13;
    `drop_scratch_pool` keeps it while another batch is active)."""
    if final["batch_state"] in TERMINAL and not coord.git.config_bool("lanes.keepScratch", True):
        from ..batch.steward import drop_scratch_pool

        for path in drop_scratch_pool(coord):
            event(f"removed scratch worktree {path} (lanes.keepScratch is false)")


def ending(final: dict[str, Any], facts: dict[str, Any], interrupted: bool, stop_reason: str | None,
           again: str) -> RunResult:
    """How a loop that drove a batch (`run`, `run --remote`) ends: exit 0 only for `completed` with
    final verification passed; else 1 with what went wrong, Ctrl-C included (SPEC §13). `again` continues it."""
    result = RunResult(final, 0, None, facts)
    if interrupted:
        result.exit_code, result.error = 1, f"interrupted; the batch is left as it is: {again} continues it"
    elif stop_reason:
        result.exit_code, result.error = 1, stop_reason
    elif final["batch_state"] == "needs_human":
        result.exit_code, result.error = 1, (f"batch_needs_human: {final.get('reason')}; a person decides (the "
                                             "commands are above)")
    elif not _passed(final):
        result.exit_code = 1
        result.error = ("the final verification did not pass" if final["batch_state"] == "completed"
                        else f"the batch ended {final['batch_state']}: {final.get('reason')}")
    return result


def _refused(exc: LanesError, again: str) -> str:
    """A refusal (a tick's `working_tree_unstaged`, ...) ends the run as a stop does: what to fix, then `again`."""
    if exc.exit_code != ExitCode.REFUSED:
        raise exc
    text = exc.message
    text = text[:-len(", then tick again")] if text.endswith(", then tick again") else text + "; fix that"
    return f"{text}, then run again: {again}"


def _drive(driver: Driver, again: str) -> None:
    """The loop, with Ctrl-C (and SIGTERM, SIGHUP) handled: sessions are stopped, spare lanes removed,
    the batch left as it is. A refusal stops it as a `Stop` does (summary, releases, exit 1)."""
    with stopping(driver.on_sigint):
        try:
            try:
                driver.drive()
            except Stop as stop:
                driver.stop_reason = str(stop)
            except LanesError as exc:
                if not driver.interrupted.is_set():
                    driver.stop_reason = _refused(exc, again)
            if not driver.interrupted.is_set() and driver.wait_all():
                try:  # what the last sessions delivered goes in before the summary
                    driver.tick()
                except Stop as stop:
                    driver.stop_reason = driver.stop_reason or str(stop)
                except LanesError as exc:
                    driver.stop_reason = driver.stop_reason or _refused(exc, again)
            if driver.interrupted.is_set():
                driver.sessions.wind_down()
                kill_all()
                if driver.verifier is not None:   # it finishes the step it is in (its checks were killed)
                    driver.verifier.join(60.0)
            driver.release_all()   # every way out (SPEC §13 v3): integrated lanes never stay behind
        except BaseException:
            driver.interrupted.set()
            driver.sessions.wind_down()
            kill_all()
            raise
        finally:
            driver.finish_preparing()
            driver.spares.drop_all()   # never admitted, they hold nothing; a new run makes new ones
