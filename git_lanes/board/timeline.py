"""A batch's history from its records (SPEC §17.5), pure: facts (`board.records`) in, plain data out.

- `events`: the state-commit log read as events (`enrolled`, `lane_commit`, `candidate`, `integrated`,
  `parked`, …), one per phrase of each write's summary, with its time;
- `timeline`: one row per lane (plan order) with its bars — sessions (`sessions[]` of the lane record),
  attempts (passed or failed, ending at the attempt's `at`, as long as its checks took), candidate
  verification (from the `candidate` event to the landing, park or drop; `candidates[]` of a v4
  record fills in what the log does not say) — and its marks (corrections, instructions, landing, park);
- `check_runs`: every check run the records hold (lane attempts, candidate reruns from the evidence
  notes, parked candidates' `gate_results`, v4 `candidates[].results`, final verification).

Fields newer builds add are read with `dict.get`, so a record with or without them works.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.clock import parse_time

_PHRASES = [
    ("lane_commit", re.compile(r"lane commit (?P<task>\S+)$")),
    ("candidate_dropped", re.compile(r"candidate of (?P<task>\S+) dropped\b.*$")),
    ("candidate", re.compile(r"candidate (?P<task>\S+)(?: rebuilt)?$")),
    ("qa_failure", re.compile(r"\d+ QA failure\(s\) of (?P<task>\S+)$")),
    ("correction_due", re.compile(r"correction due for (?P<task>\S+)$")),
    ("correction", re.compile(r"correction for (?P<task>\S+)$")),
    ("instruction", re.compile(r"instruction for (?P<task>\S+)$")),
    ("review", re.compile(r"review \S+ (?P<task>\S+)$")),
    ("revision", re.compile(r"revision of (?P<task>\S+)$")),
]
_VERBS = ("enrolled", "settled", "integrated", "parked", "released", "adopted", "resealed")
ENDS_VERIFICATION = {"integrated": "landed", "parked": "parked", "candidate_dropped": "dropped"}


def secs(stamp: str | None) -> float | None:
    """A record time stamp as seconds since the epoch (None for none, or one that does not parse)."""
    if not stamp:
        return None
    try:
        return parse_time(stamp).timestamp()
    except ValueError:
        return None


def events(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The log as events, oldest first: `{t, at, kind, task, text, actor}` (`task` None for the batch's own)."""
    found = []
    for entry in facts["log"]:
        t = secs(entry["at"])
        for phrase in entry["summary"].split(", "):
            kind, task = _phrase(phrase)
            found.append({"t": t, "at": entry["at"], "kind": kind, "task": task, "text": phrase,
                          "actor": entry.get("actor", "")})
    return found


def _phrase(phrase: str) -> tuple[str, str | None]:
    word, _, rest = phrase.partition(" ")
    if word in _VERBS and rest and " " not in rest:
        return word, rest
    for kind, pattern in _PHRASES:
        found = pattern.match(phrase)
        if found:
            return kind, found.group("task")
    return "batch", None


def span(facts: dict[str, Any]) -> tuple[float, float]:
    """(start, end) of the batch in seconds: its creation to its last write (or now, while it runs: a parked
    batch waits for a person, and that wait is not the batch's time)."""
    record = facts["record"]
    times = [t for t in (secs(e["at"]) for e in facts["log"]) if t is not None]
    start = secs(record.get("created_at")) or (min(times) if times else 0.0)
    end = max(times) if times else start
    if record.get("batch_state") == "running":
        end = max(end, secs(facts["now"]) or end)
    for lane in facts["lanes"].values():
        for session in (lane or {}).get("sessions") or []:
            for key in ("started", "ended"):
                t = secs(session.get(key)) if isinstance(session, dict) else None
                if t is not None:
                    end = max(end, t)
    return start, max(end, start)


def terminal(record: dict[str, Any]) -> bool:
    return record.get("batch_state") in ("completed", "budget_stopped", "failed", "superseded")


def verifications(facts: dict[str, Any], evs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every candidate verification: `{task, start, end, outcome}` (outcome `landed`, `parked`, `dropped`,
    `passed` (waiting to land) or `verifying`), oldest first."""
    evs = events(facts) if evs is None else evs
    _, end_of_batch = span(facts)
    open_: dict[str, dict[str, Any]] = {}
    done = []
    for e in evs:
        task = e["task"]
        if e["kind"] == "candidate":
            if task in open_:
                done.append({**open_.pop(task), "end": e["t"], "outcome": "dropped"})
            open_[task] = {"task": task, "start": e["t"]}
        elif e["kind"] in ENDS_VERIFICATION and task in open_:
            done.append({**open_.pop(task), "end": e["t"], "outcome": ENDS_VERIFICATION[e["kind"]]})
    for item in candidates(facts["record"]):
        task = item.get("task_id")
        passed_at = secs(item.get("passed_at"))
        if task not in open_ and secs(item.get("at")) is not None:
            open_[task] = {"task": task, "start": secs(item.get("at"))}
        if task in open_ and passed_at is not None:
            done.append({**open_.pop(task), "end": passed_at, "outcome": "passed"})
    for task, item in open_.items():
        done.append({**item, "end": end_of_batch, "outcome": "verifying"})
    return sorted(done, key=lambda v: (v["start"] or 0.0, v["task"]))


def candidates(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidate window: v4 `candidates[]`, else v3's one `candidate` (SPEC §8.9)."""
    window = record.get("candidates")
    if isinstance(window, list):
        return [c for c in window if isinstance(c, dict)]
    one = record.get("candidate")
    return [{**one, "state": one.get("state", "verifying")}] if isinstance(one, dict) else []


def sessions(lane: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [s for s in ((lane or {}).get("sessions") or []) if isinstance(s, dict)]


def attempts(lane: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [a for a in ((lane or {}).get("qa_attempts") or []) if isinstance(a, dict)]


def results(items: Any) -> list[dict[str, Any]]:
    return [r for r in (items or []) if isinstance(r, dict)]


def timeline(facts: dict[str, Any]) -> dict[str, Any]:
    """`{start, end, rows: [{task, state, life: (start, end), bars: [...], marks: [...]}]}`: one row per
    child that had a lane, in plan order. A bar is `{kind: session|attempt|verification, start, end,
    label, …}`; a mark `{kind: correction|instruction|landing|park, t, label}`."""
    record = facts["record"]
    start, end = span(facts)
    evs = events(facts)
    checks_done = verifications(facts, evs)
    rows = []
    for child in record["children"]:
        task = child["task_id"]
        lane = facts["lanes"].get(task)
        mine = [e for e in evs if e["task"] == task]
        if child.get("lane") is None and lane is None and not any(e["kind"] == "enrolled" for e in mine):
            continue
        bars: list[dict[str, Any]] = []
        for s in sessions(lane):
            s_start = secs(s.get("started"))
            if s_start is None:
                continue
            s_end = secs(s.get("ended"))
            bars.append({"kind": "session", "start": s_start, "end": s_end if s_end is not None else end,
                         "open": s_end is None, "exit": s.get("exit"), "n": s.get("n"),
                         "label": f"session {s.get('n', '?')}" + (f" (exit {s.get('exit')})"
                                                                  if s.get("exit") not in (None, 0) else "")})
        for i, a in enumerate(attempts(lane), 1):
            a_end = secs(a.get("at"))
            if a_end is None:
                continue
            took = sum(r.get("duration_ms") or 0 for r in results(a.get("results")) if not r.get("cached")) / 1000
            bars.append({"kind": "attempt", "start": a_end - took, "end": a_end, "passed": bool(a.get("passed")),
                         "n": i, "label": f"attempt {i} {'passed' if a.get('passed') else 'failed'}"})
        for v in checks_done:
            if v["task"] == task:
                bars.append({"kind": "verification", "start": v["start"], "end": v["end"], "outcome": v["outcome"],
                             "label": f"candidate verification ({v['outcome']})"})
        marks = [{"kind": i["kind"], "t": secs(i.get("at")), "label": f"{i['kind']}: {i.get('text', '')}"}
                 for i in record.get("interventions") or []
                 if i.get("task_id") == task and i.get("kind") in ("correction", "instruction")]
        marks += [{"kind": "landing" if e["kind"] == "integrated" else "park", "t": e["t"], "label": e["text"]}
                  for e in mine if e["kind"] in ("integrated", "parked")]
        begun = [e["t"] for e in mine if e["kind"] == "enrolled" and e["t"] is not None]
        finished = [e["t"] for e in mine if e["kind"] in ("integrated", "parked") and e["t"] is not None]
        life_start = min(begun + [b["start"] for b in bars]) if begun or bars else start
        life_end = max(finished) if finished and child.get("state") not in ("enrolled", "settled",
                                                                            "lane_committed") else end
        rows.append({"task": task, "state": child.get("state"), "life": (life_start, max(life_start, life_end)),
                     "bars": bars, "marks": [m for m in marks if m["t"] is not None]})
    return {"start": start, "end": end, "rows": rows}


def check_runs(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Every check run the records hold: `{task, where: lane|scratch, context, id, command, passed,
    duration_ms, cached, flaky, at, output_tail}`."""
    record = facts["record"]
    found = []

    def add(task: str | None, where: str, context: str, items: Any, at: str | None) -> None:
        for r in results(items):
            found.append({"task": task, "where": where, "context": context, "id": r.get("id"),
                          "command": r.get("command") or "", "passed": bool(r.get("passed")),
                          "duration_ms": r.get("duration_ms") or 0, "cached": bool(r.get("cached")),
                          "flaky": bool(r.get("flaky")), "at": at, "output_tail": r.get("output_tail") or ""})

    landed = set()
    for child in record["children"]:
        task = child["task_id"]
        for i, a in enumerate(attempts(facts["lanes"].get(task)), 1):
            add(task, "lane", f"attempt {i}", a.get("results"), a.get("at"))
        note = facts["evidence"].get(task)
        if note is not None:
            landed.add(task)
            add(task, "scratch", "candidate", note.get("rerun"), None)
        add(task, "scratch", "candidate (parked it)", child.get("gate_results"), None)
    for item in candidates(record):
        if item.get("task_id") not in landed:
            add(item.get("task_id"), "scratch", "candidate", item.get("results"), item.get("passed_at"))
    final = record.get("final_verification") or {}
    add(None, "scratch", "final", final.get("results"), None)
    return found


def waves(record: dict[str, Any]) -> list[list[str]]:
    """The task graph by waves: a task's wave is one after its latest blocker's (plan order within)."""
    depth: dict[str, int] = {}
    children = {c["task_id"]: c for c in record["children"]}

    def of(task: str, seen: tuple[str, ...] = ()) -> int:
        if task not in depth:
            blockers = [b for b in children[task].get("blocked_by") or [] if b in children and b not in seen]
            depth[task] = 1 + max((of(b, seen + (task,)) for b in blockers), default=-1)
        return depth[task]

    for task in children:
        of(task)
    grouped: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for task in children:
        grouped[depth[task]].append(task)
    return grouped
