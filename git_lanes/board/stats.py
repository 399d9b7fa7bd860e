"""`git lanes stats` (SPEC §17.5), pure: a batch's numbers from its facts, and the same over many batches.

Per batch: landing latency (each landed child's `lane commit` write to its `integrated` write: p50, p90,
max), verification time (each finished candidate verification), checks (every check run the records
hold: how many, run, cached, flaky, failed, the time they ran, the receipts hit rate), sessions,
failed attempts and corrections per task, cost and tokens (from the lane records' `sessions[].usage`).
Seconds are rounded to the millisecond; a percentile is the nearest rank; a measure with no sample is null.
"""

from __future__ import annotations

import math
from typing import Any

from .timeline import attempts, check_runs, events, sessions, span, verifications


def percentiles(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return _r(ordered[max(0, math.ceil(q * len(ordered)) - 1)]) if ordered else None
    return {"n": len(ordered), "p50": rank(0.5), "p90": rank(0.9), "max": _r(ordered[-1]) if ordered else None,
            "total": _r(sum(ordered))}


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _per(total: float | None, n: int) -> float | None:
    return None if total is None or not n else _r(total / n)


def measures(facts: dict[str, Any]) -> dict[str, Any]:
    """The raw samples of one batch: what `summarize` turns into numbers (and pools across batches)."""
    record = facts["record"]
    evs = events(facts)
    committed: dict[str, float] = {}
    latency: dict[str, float] = {}
    for e in evs:
        if e["t"] is None:
            continue
        if e["kind"] == "lane_commit":
            committed.setdefault(e["task"], e["t"])
        elif e["kind"] == "integrated" and e["task"] in committed:
            latency[e["task"]] = e["t"] - committed[e["task"]]
    verifying: dict[str, float] = {}
    verified = []
    for v in verifications(facts, evs):
        if v["outcome"] != "verifying" and v["start"] is not None and v["end"] is not None:
            verified.append(v["end"] - v["start"])
            verifying[v["task"]] = verifying.get(v["task"], 0.0) + v["end"] - v["start"]
    tasks = []
    for child in record["children"]:
        task = child["task_id"]
        lane = facts["lanes"].get(task)
        usage = [s.get("usage") for s in sessions(lane) if isinstance(s.get("usage"), dict)]
        costs = [u["cost_usd"] for u in usage if isinstance(u.get("cost_usd"), (int, float))]
        # null where the lane record does not say (no lane, or written before `sessions[]`, SPEC §17.4)
        known = isinstance(lane, dict) and isinstance(lane.get("sessions"), list)
        tasks.append({"task_id": task, "state": child.get("state"), "sessions": len(sessions(lane)) if known else None,
                      "failed_attempts": sum(1 for a in attempts(lane) if not a.get("passed")),
                      "corrections": sum(1 for i in record.get("interventions") or []
                                         if i.get("task_id") == task and i.get("kind") == "correction"),
                      "cost_usd": _r(sum(costs), 6) if costs else None,
                      "input_tokens": sum(u.get("input_tokens") or 0 for u in usage),
                      "output_tokens": sum(u.get("output_tokens") or 0 for u in usage),
                      "landing_latency_s": _r(latency.get(task)), "verification_s": _r(verifying.get(task))})
    start, end = span(facts)
    return {"tasks": tasks, "latency": list(latency.values()), "verification": verified,
            "checks": check_runs(facts), "wall": end - start}


def summarize(m: dict[str, Any]) -> dict[str, Any]:
    tasks, checks = m["tasks"], m["checks"]
    n = len(tasks)
    cached = sum(1 for c in checks if c["cached"])
    costs = [t["cost_usd"] for t in tasks if t["cost_usd"] is not None]
    totals = {key: sum(t[key] for t in tasks) for key in ("failed_attempts", "corrections")}
    counted = [t["sessions"] for t in tasks if t["sessions"] is not None]
    totals["sessions"] = sum(counted) if counted else None
    cost = _r(sum(costs), 6) if costs else None
    return {
        "tasks": n,
        "landed": sum(1 for t in tasks if t["state"] in ("integrated", "released")),
        "parked": sum(1 for t in tasks if t["state"] == "needs_human"),
        "wall_time_s": _r(m["wall"]),
        "landing_latency_s": percentiles(m["latency"]),
        "verification_s": percentiles(m["verification"]),
        "checks": {"total": len(checks), "run": len(checks) - cached, "cached": cached,
                   "flaky": sum(1 for c in checks if c["flaky"]),
                   "failed": sum(1 for c in checks if not c["passed"]),
                   "check_time_s": _r(sum(c["duration_ms"] for c in checks if not c["cached"]) / 1000),
                   "receipts_hit_rate": _r(cached / len(checks)) if checks else None},
        "sessions": {"total": totals["sessions"], "per_task": _per(totals["sessions"], n)},
        "failed_attempts": {"total": totals["failed_attempts"], "per_task": _per(totals["failed_attempts"], n)},
        "corrections": {"total": totals["corrections"], "per_task": _per(totals["corrections"], n)},
        "cost_usd": {"total": cost, "per_task": _per(cost, n)},
        "tokens": {"input": sum(t["input_tokens"] for t in tasks), "output": sum(t["output_tokens"] for t in tasks)},
    }


def batch_stats(facts: dict[str, Any]) -> dict[str, Any]:
    """One batch's numbers, with its tasks'."""
    record = facts["record"]
    m = measures(facts)
    return {"batch_id": record["batch_id"], "slug": record["slug"], "batch_state": record["batch_state"],
            "created_at": record.get("created_at"), **summarize(m), "per_task": m["tasks"]}


def stats(all_facts: list[dict[str, Any]]) -> dict[str, Any]:
    """`{batches: [...], overall: {...}}`: each batch's numbers and the same pooled over all of them."""
    raw = [measures(f) for f in all_facts]
    pooled = {"tasks": [t for m in raw for t in m["tasks"]], "latency": [x for m in raw for x in m["latency"]],
              "verification": [x for m in raw for x in m["verification"]],
              "checks": [c for m in raw for c in m["checks"]], "wall": sum(m["wall"] for m in raw)}
    return {"batches": [batch_stats(f) for f in all_facts], "overall": {"batches": len(raw), **summarize(pooled)}}


def seconds(value: float | None) -> str:
    """A duration as a person reads it: `850 ms`, `4.2 s`, `3 min 5 s`, `—` for none."""
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(int(round(value)), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def money(value: float | None) -> str:
    return "—" if value is None else f"${value:.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


__all__ = ["batch_stats", "measures", "money", "percentiles", "seconds", "stats", "summarize"]
