"""Everything `git lanes` prints: JSON documents, human text on stdout, `error:`/`hint:`/`warning:`
lines on stderr. Use cases return data or raise; only this module turns them into text."""

from __future__ import annotations

import json
from typing import Any

import click


class Fail(Exception):
    """Carry an exit code out of a command (what to print was printed)."""

    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code


def say(text: str = "") -> None:
    click.echo(text)


def err(kind: str, text: str) -> None:
    click.echo(f"{kind}: {text}", err=True)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False))


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
        say(f"  {c['task_id']:<{width}}  {c['state']:<14} {'; '.join(extra)}".rstrip())
    for key in ("lane_refusals", "tracker_observations"):
        for item in r.get(key, []):
            say(f"{key.replace('_', ' ')[:-1]}: " + ", ".join(f"{k}={v}" for k, v in item.items()))
    if r.get("lane_instruction"):
        li = r["lane_instruction"]
        say(f"instruction for {li['task_id']}: " + ("accepted" if li["accepted"] else li["reason"]))
    if r.get("lane_revision"):
        lr = r["lane_revision"]
        say(f"revision of {lr['task_id']}: " + ("approved" if lr["accepted"] else lr["reason"]))
    fv = r.get("final_verification")
    if fv:
        say(f"final verification: {'passed' if fv['passed'] else 'FAILED'} at {fv['head'][:12]}")
    for h in r["handoffs"]:
        role = h.get("action") or h.get("next_obligation")
        where = h.get("lane_path") or h.get("base_head", "")[:12]
        say(f"handoff: {h['role']} {role} {h['task_id']} {where}".rstrip())
    say(f"next: {r['next_action']}")


def show(doc: dict) -> None:
    for key, value in doc["child"].items():
        say(f"{key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    lr = doc.get("lane_record")
    if lr:
        say(f"lane record revision {lr['record_revision']}, {len(lr['qa_attempts'])} attempt(s)")
        for a in lr["qa_attempts"]:
            say(f"  {a['at']} {'passed' if a['passed'] else 'failed'} {a['tree'][:12]}")


def check_results(results: list[dict], limit: int | None = None) -> None:
    """`ok  <id>: <command>` / `FAIL <id>: <command>` (and, with `limit`, a failure's last lines)."""
    for r in results:
        say(f"{'ok  ' if r['passed'] else 'FAIL'} {r['id']}: {r['command']}")
        if limit and not r["passed"] and r["output_tail"].strip():
            for line in r["output_tail"].rstrip().splitlines()[-limit:]:
                say(f"      {line}")


def run_summary(report: dict, facts: dict) -> None:
    """`git lanes run`'s summary: the state, the per-child table, the batch branch's log."""
    fv = report.get("final_verification")
    verdict = "; final verification " + ("passed" if fv["passed"] else "FAILED") if fv else ""
    say(f"batch {report['batch_id']} ({report['slug']}): {report['batch_state']}{verdict}")
    if facts.get("reason"):
        say(f"reason: {facts['reason']}")
    rows = [("task", "state", "sessions", "QA failures", "corrections", "commit")] + facts["rows"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    for c in report["children"]:
        if c.get("reason") and c["state"] in ("needs_human", "skipped_blocked"):
            say(f"{c['task_id']}: {c['reason']}")
    if facts.get("log") is not None:
        base = facts.get("base")
        say(f"\n$ git log --oneline {facts['branch']}" + (f" ^{base[:12]}" if base else ""))
        if facts["log"]:
            say(facts["log"])
    say(f"\nexecutor logs: {facts['log_dir']}")


def replication(doc: dict, verb: str, as_json: bool) -> None:
    """push/pull: one line per ref, hints for what is left to do; exit 1 when a ref diverged."""
    if as_json:
        emit_json(doc)
    else:
        for r in doc["refs"]:
            say(f"{r['status']}: {r['ref']}")
    statuses = [r["status"] for r in doc["refs"]]
    if "checked_out" in statuses:
        err("hint", "a branch checked out in a worktree is never moved by git lanes pull; "
                    "pull it with git in that worktree")
    if "remote_ahead" in statuses:
        err("hint", "the remote holds newer values of some refs; run 'git lanes pull' first")
    bad = [r["ref"] for r in doc["refs"] if r["status"] in ("remote_moved", "rejected")]
    if bad:
        err("error", f"{len(bad)} ref(s) not {verb} (diverged or rejected): " + ", ".join(bad))
        raise Fail(1)
