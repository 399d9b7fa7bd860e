"""The board `git lanes watch` shows (SPEC §17.5), pure: a batch's facts as lines of plain text.

Per child: state, lane (its folder, or the machine of a remote lane), time in state, sessions (`(1 running)` while
one runs), failed attempts, corrections, last check (passed, failed, cached or flaky) and cost; then the
candidate window with each candidate's state, the landing metrics and the last events.
"""

from __future__ import annotations

import os
from typing import Any

from .stats import batch_stats, money, seconds
from .timeline import candidates, check_runs, events, secs, sessions, span, terminal

COLUMNS = ("task", "state", "lane", "in state", "sessions", "failed", "corrections", "last check", "cost")
EVENTS_SHOWN = 8


def _lane(child: dict[str, Any]) -> str:
    lane = child.get("lane") or {}
    remote = lane.get("remote")
    if isinstance(remote, dict):
        return f"{remote.get('host', '?')} ({str(remote.get('clone_id', ''))[:8]})"
    path = lane.get("path")
    return os.path.join(*path.rstrip("/").split("/")[-2:]) if path else "—"


def _last_check(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "—"
    last = runs[-1]
    word = "failed" if not last["passed"] else "flaky" if last["flaky"] else "cached" if last["cached"] else "passed"
    return f"{last['id']} {word}" if last.get("id") else word


def _own(task: str, check_id: Any) -> bool:
    """Whether a check of a candidate's rerun set is the task's own (siblings' are `<task>:<id>` too)."""
    text = str(check_id or "")
    return ":" not in text or text.startswith(f"{task}:")


def rows(facts: dict[str, Any], numbers: dict[str, Any]) -> list[tuple[str, ...]]:
    record = facts["record"]
    _, end = span(facts)
    evs = events(facts)
    start = secs(record.get("created_at")) or end
    runs = check_runs(facts)
    per_task = {t["task_id"]: t for t in numbers["per_task"]}
    found = []
    for child in record["children"]:
        task = child["task_id"]
        since = max([e["t"] for e in evs if e["task"] == task and e["t"] is not None], default=start)
        lane_sessions = sessions(facts["lanes"].get(task))
        running = sum(1 for s in lane_sessions if not s.get("ended"))
        n = per_task[task]
        found.append((task, child.get("state") or "", _lane(child), seconds(max(0.0, end - since)),
                      _n(n["sessions"]) + (" (1 running)" if running else ""), str(n["failed_attempts"]),
                      str(n["corrections"]), _last_check([r for r in runs if r["task"] == task and _own(task, r.get("id"))]), money(n["cost_usd"])))
    return found


def table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *body]]


def snapshot(facts: dict[str, Any], numbers: dict[str, Any] | None = None) -> list[str]:
    """The board as lines."""
    numbers = numbers or batch_stats(facts)
    record = facts["record"]
    start, end = span(facts)
    head = (f"batch {record['batch_id']} ({record['slug']}): {record['batch_state']}"
            + (f" — {record['reason']}" if record.get("reason") and record["batch_state"] != "running" else ""))
    lines = [head, f"{numbers['landed']} of {numbers['tasks']} landed · wall time {seconds(end - start)}"
                   + (" · over" if terminal(record) else ""), ""]
    lines += table(COLUMNS, rows(facts, numbers))
    now = secs(facts["now"]) or end
    window = candidates(record)
    lines.append("")
    if window:
        shown = []
        for item in window:
            at = secs(item.get("at"))
            since = f" for {seconds(max(0.0, now - at))}" if at is not None else ""
            done = [r for r in item.get("results") or [] if isinstance(r, dict)]
            checks = f" ({sum(1 for r in done if r.get('passed'))}/{len(done)} checks passed)" if done else ""
            shown.append(f"{item.get('task_id')} {item.get('state') or 'verifying'}{since}{checks}")
        lines.append("candidates: " + ", ".join(shown))
    else:
        lines.append("candidates: none")
    lat, ver, c = numbers["landing_latency_s"], numbers["verification_s"], numbers["checks"]
    lines.append(f"landing: lane commit to landing p50 {seconds(lat['p50'])}, p90 {seconds(lat['p90'])}, "
                 f"max {seconds(lat['max'])} · verification p50 {seconds(ver['p50'])}")
    lines.append(f"checks: {c['total']} ({c['cached']} cached, {c['flaky']} flaky, {c['failed']} failed) · "
                 f"sessions {_n(numbers['sessions']['total'])} · corrections {numbers['corrections']['total']} · "
                 f"cost {money(numbers['cost_usd']['total'])}")
    lines.append("")
    lines.append("last events:")
    for entry in facts["log"][-EVENTS_SHOWN:]:
        lines.append(f"  {entry['at'][11:23]}  {entry['actor']}: {entry['summary']}")
    return lines


def stats_lines(doc: dict[str, Any]) -> list[str]:
    """`git lanes stats` for a person: a block per batch, then the whole when there are several."""
    lines: list[str] = []
    blocks = [(f"batch {b['batch_id']} ({b['slug']}): {b['batch_state']}", b) for b in doc["batches"]]
    if len(doc["batches"]) != 1:
        blocks.append((f"all {doc['overall']['batches']} batches", doc["overall"]))
    for title, n in blocks:
        lat, ver, c = n["landing_latency_s"], n["verification_s"], n["checks"]
        rate = "—" if c["receipts_hit_rate"] is None else f"{c['receipts_hit_rate']:.0%}"
        lines += [title,
                  f"  tasks: {n['tasks']} ({n['landed']} landed, {n['parked']} parked) · wall time "
                  f"{seconds(n['wall_time_s'])}",
                  f"  lane commit to landing: p50 {seconds(lat['p50'])}, p90 {seconds(lat['p90'])}, "
                  f"max {seconds(lat['max'])} ({lat['n']} landed)",
                  f"  verification: {seconds(ver['total'])} in all ({ver['n']} candidates), p50 {seconds(ver['p50'])}, "
                  f"max {seconds(ver['max'])}",
                  f"  checks: {c['total']} ({c['run']} run, {c['cached']} cached, {c['flaky']} flaky, {c['failed']} "
                  f"failed) · check time {seconds(c['check_time_s'])} · receipts hit rate {rate}",
                  f"  per task: sessions {_n(n['sessions']['per_task'])}, failed attempts "
                  f"{_n(n['failed_attempts']['per_task'])}, corrections {_n(n['corrections']['per_task'])}, "
                  f"cost {money(n['cost_usd']['per_task'])}"
                  + (f" (total {money(n['cost_usd']['total'])})" if n["cost_usd"]["total"] is not None else ""),
                  ""]
    return lines[:-1] if lines else ["no batch in this repository"]


def _n(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"
