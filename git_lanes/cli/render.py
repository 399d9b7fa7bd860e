"""Everything `git lanes` prints: JSON documents, human text on stdout, `error:`/`hint:`/`warning:`
lines on stderr. Use cases return data or raise; only this module turns them into text."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]")   # C0 but tab, line feed and ESC; DEL; C1


_emitted = False   # whether this command printed its JSON document already (`failure` prints none then)
_json: bool | None = None   # the command's parsed `--json` (None: not parsed, e.g. a usage error before it)


class Fail(Exception):
    """Carry an exit code out of a command (what to print was printed)."""

    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code


def echo(text: str, err: bool = False) -> None:
    """One line on stdout (or stderr), flushed; terminal escape sequences dropped unless it is a
    terminal (as `click.echo` does; written here so the lane side can run without click)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if "\x1b" in text and not _isatty(stream):
        text = _CSI.sub("", text)
    if _CONTROL.search(text):   # a NUL, a bell, a carriage return from data is shown, never obeyed
        text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))
    stream.write(text + "\n")
    stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def failure(exc: Exception | KeyboardInterrupt, as_json: bool) -> int:
    """What a command that raised prints (never a traceback, unless GIT_LANES_DEBUG asks): its exit
    code. The click-specific errors are `app.main`'s."""
    from ..core.errors import LanesError
    from ..core.redact import redact

    if isinstance(exc, Fail):
        return exc.exit_code
    if isinstance(exc, LanesError):
        if as_json and exc.exit_code == 1 and not _emitted:
            # SPEC §6: on exit 1 with --json, one document on stdout: the report, else the refusal
            emit_json(exc.report if exc.report is not None else refusal(exc.code, exc.detail, exc.hint))
        err("error", redact(exc.message))
        if exc.hint:
            err("hint", exc.hint)
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        err("error", "interrupted")
        return 130
    if isinstance(exc, BrokenPipeError):
        return 0
    if os.environ.get("GIT_LANES_DEBUG"):
        raise exc
    err("fatal", redact(f"internal error: {type(exc).__name__}: {exc}"))
    return 128


def say(text: str = "") -> None:
    echo(text)


def err(kind: str, text: str) -> None:
    echo(f"{kind}: {text}", err=True)


def refusal(code: str | None, detail: str, hint: str | None = None) -> dict[str, Any]:
    """The document of a refusal that has no report: `{refused, code, detail, reason, hint}`, `reason`
    being what the `error:` line says."""
    return {"refused": True, "code": code, "detail": detail, "reason": f"{code}: {detail}" if code else detail,
            "hint": hint}


def begin() -> None:
    """A command starts: no document printed yet (an in-process caller may run several)."""
    global _emitted, _json
    _emitted = False
    _json = None


def asked_json(value: bool) -> bool:
    """The `--json` option's callback: what was parsed, not a word of argv (`-m --json` is a message)."""
    global _json
    _json = bool(value)
    return value


def json_mode(args: list[str]) -> bool:
    """Whether the command's failure prints a JSON document: its parsed `--json`, else the word."""
    return _json if _json is not None else "--json" in args


def emit_json(doc: Any) -> None:
    global _emitted
    _emitted = True
    echo(json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False))


def outcome(result, as_json: bool) -> None:
    """Print a tick outcome; exit 1 with `error:` when it was refused or rejected."""
    if as_json:
        emit_json(result.report)
    else:
        report(result.report)
    if result.error is not None:
        err("error", result.error.message)
        raise Fail(result.exit_code or 1)


def report(r: dict) -> None:
    say(f"batch {r.get('batch_id')} ({r['slug']}): {r['batch_state']}")
    if r.get("driver"):
        say(f"driven by git lanes run (pid {r['driver']['pid']}, since {r['driver']['since']})")
    if r.get("reason"):
        say(f"reason: {r['reason']}")
    width = max((len(c["task_id"]) for c in r["children"]), default=4)
    for c in r["children"]:
        extra = []
        if c.get("next_obligation"):
            extra.append(f"next: {c['next_obligation']}")
        if c.get("qa_failures"):
            extra.append(f"qa failures {c['qa_failures']}")
        if c.get("correction_due"):
            extra.append("correction due")
        if c.get("commit"):
            extra.append(c["commit"][:12])
        if c.get("tracker_closed"):
            extra.append("issue closed")
        if c.get("reason"):
            extra.append(c["reason"])
        if (c.get("lane") or {}).get("remote") and c["state"] not in ("released", "needs_human"):
            extra.append(remote_where(c))
        say(f"  {c['task_id']:<{width}}  {c['state']:<14} {'; '.join(extra)}".rstrip())
    for i, cand in enumerate(r.get("candidates", []), 1):   # the window (SPEC §8.9), in landing order
        on = "the head" if i == 1 else "the one before"
        say(f"candidate {i}: {cand['task_id']} {cand['state']} ({cand['commit'][:12]} on {on}, {cand['head'][:12]})")
    for key in ("lane_refusals", "tracker_observations"):
        for item in r.get(key, []):
            say(f"{key.replace('_', ' ')[:-1]}: " + ", ".join(f"{k}={v}" for k, v in item.items()))
    if r.get("lane_instruction"):
        li = r["lane_instruction"]
        verdict = "accepted" if li["accepted"] else li["reason"]
        say(f"{li.get('kind') or 'instruction'} for {li['task_id']}: {verdict}")
    if r.get("lane_revision"):
        lr = r["lane_revision"]
        say(f"revision of {lr['task_id']}: " + ("approved" if lr["accepted"] else lr["reason"]))
    fv = r.get("final_verification")
    if fv:
        say(f"final verification: {'passed' if fv['passed'] else 'FAILED'} at {fv['head'][:12]}")
    from ..core.report import handoff_command

    for h in r["handoffs"] if not r.get("driver") else []:   # a run that drives the batch takes them
        role = h.get("action") or h.get("next_obligation")
        say(f"handoff: {h['role']} {role} {h['task_id']}: {handoff_command(r['slug'], h)}")
    usage_line(r.get("usage"))
    say(f"next: {r['next_action']}")


def remote_where(c: dict) -> str:
    """A remote lane's machine and the age of its last heartbeat (SPEC §17.2)."""
    from ..core.clock import now, parse_time

    remote = c["lane"]["remote"]
    text = f"in clone {remote['clone_id']} on {remote['host']}"
    if c.get("heartbeat_at"):
        age = max(0.0, (parse_time(now()) - parse_time(c["heartbeat_at"])).total_seconds())
        text += f", heartbeat {age:.0f} s ago"
    return text


def usage_line(used: dict | None) -> None:
    """`usage: $1.25, 5300 tokens` (SPEC §17.4), when anything reported usage."""
    from ..batch.metering import cost_text

    if used and cost_text(used):
        say(f"usage: {cost_text(used)}")


def show(doc: dict) -> None:
    """`git lanes show`: one child and its lane record, as a person reads them (no reprs)."""
    from ..batch.metering import cost_text
    from ..domain.checks import failure_line

    c = doc["child"]
    say(f"{c['task_id']}: {c['state']} (batch {doc['batch_id']})")
    rows = [("reason", c.get("reason")), ("blocked by", ", ".join(c.get("blocked_by") or [])),
            ("commit", c.get("commit")), ("settled at", c.get("settled_at")),
            ("correction due", c.get("correction_due")), ("resumed at", c.get("resumed_at")),
            ("next obligation", c.get("next_obligation"))]
    counts = f"{c.get('qa_failures', 0)} QA failure(s) counted, {c.get('qa_attempts_seen', 0)} attempt(s) seen, " \
             f"{c.get('corrections', 0)} of 2 corrections used"
    for key, value in rows:
        if value:
            say(f"  {key}: {value}")
    say(f"  counters: {counts}")
    if c.get("tracker_closed"):
        say("  tracker issue: closed")
    lane = c.get("lane")
    if lane:
        say(f"  lane: {lane['path'] or remote_where(c)}" + (" (removed)" if doc.get("lane_removed") else ""))
        say(f"    branch {lane['branch']}, base {lane['base_head'][:12]}, run {lane['run_id']}")
        if lane.get("lane_commit"):
            say(f"    lane commit {lane['lane_commit'][:12]}")
        if lane.get("executor_commits"):
            say(f"    executor commits: {', '.join(x[:12] for x in lane['executor_commits'])}")
    if c.get("gate_results"):
        say("  failed on the integration candidate:")
        _failing(c["gate_results"], everything=True)
    if doc.get("lane_record_error"):
        say(f"  lane record: unreadable ({doc['lane_record_error']})")
    lr = doc.get("lane_record")
    if lr:
        say(f"  lane record: revision {lr['record_revision']}, {len(lr['qa_attempts'])} attempt(s), "
            f"{lr.get('inbox_read', 0)} inbox item(s) read")
        for a in lr["qa_attempts"]:
            failed = [failure_line(r, telling=True) for r in a["results"] if not r["passed"]]
            why = "; ".join(([a["note"]] if a.get("note") else []) + failed)
            flaky = [r["id"] for r in a["results"] if r.get("flaky")]
            say(f"    {a['at']} {'passed' if a['passed'] else 'failed'}, tree {a['tree'][:12]}"
                + (f": {why}" if why else "") + (f" (flaky: {', '.join(flaky)})" if flaky else ""))
        last = next((a for a in reversed(lr["qa_attempts"]) if not a["passed"]), None)
        if last is not None:
            say(f"  last failed attempt ({last['at']}, tree {last['tree'][:12]}):")
            if last.get("note"):
                say(f"    {last['note']}")
            _failing(last["results"])
        if lr.get("gave_up"):
            say(f"  gave up at {lr['gave_up']['at']}: {lr['gave_up']['text']}")
    for item in doc.get("inbox", []):
        say(f"  {item['kind']} sent {item['at']} ({'read' if item['read'] else 'unread'}):")
        for line in item["text"].rstrip().splitlines() or [""]:
            say(f"    | {line}")
        for e in lr.get("sessions") or []:
            say(f"  session {e['n']}: {e['started']} .. {e['ended']}, exit {e['exit']}"
                + (f", {cost_text(e['usage'])}" if e.get("usage") and cost_text(e["usage"]) else ""))
    usage_line(doc.get("usage"))


def _failing(results: list[dict], everything: bool = False) -> None:
    """Each failing result (every result with `everything`) with its status, command and whole output tail."""
    from ..domain.checks import status_text

    for r in results:
        if r["passed"]:
            if everything:
                say(f"    ok   {r['id']}: {r['command']}")
            continue
        say(f"    FAIL {r['id']} ({status_text(r)}): {r['command']}")
        for line in (r.get("output_tail") or "").rstrip().splitlines():
            say(f"        {line}")


def check_results(results: list[dict], limit: int | None = None) -> None:
    """`ok   <id>: <command>` / `FAIL <id> (<status>): <command>` (and, with `limit`, a failure's last lines)."""
    from ..domain.checks import status_text, tail_lines

    for r in results:
        if r["passed"]:
            how = " (cached: receipt " + r["receipt"][:12] + ")" if r.get("cached") and r.get("receipt") else ""
            how += f" (flaky: passed on run {len(r.get('attempts') or [])})" if r.get("flaky") else ""
            say(f"ok   {r['id']}: {r['command']}{how}")
            continue
        say(f"FAIL {r['id']} ({status_text(r)}): {r['command']}")
        for line in tail_lines(r["output_tail"], limit or 1):
            say(f"      {line}")


def attempt(doc: dict) -> None:
    """`git lanes done`: each check (a failure with its status and last lines), the note, the verdict."""
    check_results(doc["results"], limit=10)
    if doc.get("note"):
        say(doc["note"])
    say(f"{doc['task_id']}: {'passed' if doc['passed'] else 'failed'} (tree {doc['tree'][:12]})")


def qa_failed(doc: dict) -> None:
    """`error: qa_failed: <failing check ids, or the note>`."""
    from ..domain.checks import failed_summary

    err("error", "qa_failed: " + failed_summary(doc["results"], doc.get("note")))


def run_result(result, as_json: bool, after: str | None = None) -> None:
    """`run`, `work`, `demo`: the final report (or summary), the error, what to try next; its exit code."""
    if as_json:
        emit_json(result.report)
    else:
        run_summary(result.report, result.summary)
    if result.error:
        err("error", result.error)
    if after:
        echo(f"\n{after}", err=as_json)
    if result.exit_code:
        raise Fail(result.exit_code)


def run_summary(report: dict, facts: dict) -> None:
    """`git lanes run`'s summary: the state, the per-child table, the batch branch's log."""
    fv = report.get("final_verification")
    verdict = "; final verification " + ("passed" if fv["passed"] else "FAILED") if fv else ""
    say(f"batch {report['batch_id']} ({report['slug']}): {report['batch_state']}{verdict}")
    if facts.get("reason"):
        say(f"reason: {facts['reason']}")
    rows = [("task", "state", "sessions", "failed attempts", "corrections", "commit")
            + (("cost",) if facts.get("cost") else ())] + facts["rows"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    for c in report["children"]:
        if c.get("reason") and c["state"] in ("needs_human", "skipped_blocked"):
            say(f"{c['task_id']}: {c['reason']}")
    usage_line(facts.get("usage"))
    if facts.get("log"):   # never an empty section (SPEC §17.1 v4)
        base = facts.get("base")
        say(f"\n$ git log --oneline {facts['branch']}" + (f" ^{base[:12]}" if base else ""))
        say(facts["log"])
    if facts.get("log_dir"):   # only a folder that exists
        say(f"\nexecutor logs: {facts['log_dir']}")
    steps = facts.get("next") or []
    if steps:
        say("\nnext:")
        for step in steps:
            say(f"  {step}")


def released(doc: dict) -> None:
    """`release`: what was removed (stdout), what was kept and why (`warning:`)."""
    for item in doc.get("released", []):
        if item.get("failed"):
            err("warning", f"lane of {item['task_id']} not removed: {item['reason']}")
            continue
        what = [f"removed lane {item['task_id']}: {item['path']}" if item.get("path") else
                f"removed lane {item['task_id']}"]
        what.append(f"branch {item['branch']} " + ("kept" if item.get("branch_kept") else "deleted"))
        if item.get("snapshot"):
            what.append(f"uncommitted work kept as {item['snapshot'][:12]}")
        if item.get("archived"):   # SPEC §17.1 v4: each archive commit, in full
            what.append(f"archived as {item['archived']}")
        if item.get("ignored"):
            what.append("ignored files not kept: " + ", ".join(item["ignored"]))
        say(" (".join([what[0], "; ".join(what[1:])]) + ")")
    for path in doc.get("scratch", []):
        say(f"removed scratch worktree {path}")
    for item in doc.get("skipped", []):
        err("warning", f"kept the lane of {item['task_id']}: {item['reason']}")
    # nothing removed: nothing on stdout (SPEC §6: what they removed, and nothing else)


def replication(doc: dict, verb: str, as_json: bool) -> None:
    """push/pull: one line per ref, hints for what is left to do; exit 1 when a ref diverged."""
    if as_json:
        emit_json(doc)
    else:
        for r in doc["refs"]:
            say(f"{r['status']}: {r['ref']}")
    statuses = [r["status"] for r in doc["refs"]]
    for r in doc["refs"]:
        if r["status"] == "checked_out":   # git lanes pull never moves it: the command that does, there
            err("hint", f"{r['ref']} is checked out in a worktree here; in that worktree: "
                        f"git merge --ff-only {r['remote']}")
    if "remote_ahead" in statuses:
        err("hint", "the remote holds newer values of some refs; run 'git lanes pull' first")
    bad = [r["ref"] for r in doc["refs"] if r["status"] in ("remote_moved", "rejected")]
    if bad:
        err("error", f"remote_moved: {len(bad)} ref(s) not {verb} (diverged or rejected): " + ", ".join(bad))
        raise Fail(1)
