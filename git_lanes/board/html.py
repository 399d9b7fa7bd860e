"""`git lanes report`'s page (SPEC §17.5), pure: one self-contained HTML document — no script, no
network fetch, inline SVG and CSS — from a batch's facts, its timeline and its numbers.

Every text from the records is redacted (the secrets are handed in) and HTML-escaped. Each SVG carries
its own style, so `graph_svg` and `timeline_svg` stand alone too (the README's picture is one).
The numbers shown are `stats`' own: each totals cell holds its value in `data-stat`/`data-value`.
"""

from __future__ import annotations

from html import escape
from typing import Any, Iterable

from ..core.redact import redact
from .stats import money, seconds
from .timeline import events, waves

STATE_COLOURS = {"integrated": "#2e7d32", "released": "#388e3c", "needs_human": "#c62828", "skipped_blocked": "#9e9e9e",
                 "pending": "#b0bec5", "enrolled": "#1565c0", "settled": "#00838f", "lane_committed": "#6a1b9a"}
SVG_STYLE = """
text { font: 12px -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; fill: #222; }
.axis line { stroke: #ddd; } .axis text { fill: #777; font-size: 10px; }
.life { stroke: #999; stroke-width: 1; stroke-dasharray: 2 2; }
.bar.session { fill: #64b5f6; } .bar.session.crashed { fill: #ffb74d; }
.bar.attempt.passed { fill: #43a047; } .bar.attempt.failed { fill: #e53935; }
.bar.verification { fill: #8e24aa; } .bar.verification.parked { fill: #c62828; }
.bar.verification.dropped { fill: #bdbdbd; }
.mark.correction { fill: #fb8c00; } .mark.instruction { fill: #fdd835; }
.mark.landing { fill: #1b5e20; } .mark.park { fill: #b71c1c; }
.node rect { stroke: #333; stroke-width: 1; rx: 4; } .node text { fill: #fff; }
.edge { stroke: #777; stroke-width: 1.2; fill: none; }
.legend text { font-size: 11px; }
"""
PAGE_STYLE = """
body { font: 14px/1.4 -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin-top: 28px; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; } th, td { border-bottom: 1px solid #e0e0e0; padding: 3px 10px; text-align: left; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.fail { color: #c62828; } td.pass { color: #2e7d32; }
code, pre { font-size: 12px; } pre { white-space: pre-wrap; max-width: 640px; } svg { max-width: 100%; height: auto; }
.totals { display: flex; flex-wrap: wrap; gap: 8px; max-width: 980px; }
.tile { background: #f5f5f5; border-radius: 4px; padding: 6px 10px; min-width: 104px; }
.tile .v { font-size: 17px; font-weight: 600; font-variant-numeric: tabular-nums; }
.tile .k { color: #666; font-size: 11px; }
"""
WIDTH = 980
LABEL = 150
ROW = 36


class Text:
    """Redacting and escaping, with the secrets of this run."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = list(secrets)

    def __call__(self, value: Any) -> str:
        return escape(redact("" if value is None else str(value), self.secrets), quote=True)


def page(facts: dict[str, Any], tl: dict[str, Any], checks: list[dict[str, Any]], numbers: dict[str, Any],
         secrets: Iterable[str] = ()) -> str:
    t = Text(secrets)
    record = facts["record"]
    reason = f" — {t(record.get('reason'))}" if record.get("reason") else ""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>git lanes report: {t(record['batch_id'])}</title>",
             f"<style>{PAGE_STYLE}</style></head><body>",
             f"<h1>Batch {t(record['batch_id'])}</h1>",
             f'<p class="meta">initiative <b>{t(record["slug"])}</b> · state <b class="batch-state">'
             f"{t(record['batch_state'])}</b>{reason} · created {t(record.get('created_at'))}"
             f" · base {t((record.get('base_head') or '')[:12])}</p>",
             '<section id="totals"><h2>Totals</h2>', totals_table(numbers, t), "</section>",
             '<section id="graph"><h2>Task graph by waves</h2>', graph_svg(record, t), "</section>",
             '<section id="timeline"><h2>Timeline per lane</h2>', timeline_svg(tl, t), "</section>",
             '<section id="tasks"><h2>Tasks</h2>', tasks_table(numbers, t), "</section>",
             '<section id="checks"><h2>Check runs</h2>', checks_table(checks, t), "</section>",
             '<section id="events"><h2>Events</h2>', events_table(facts, t), "</section>",
             "</body></html>"]
    return "\n".join(parts) + "\n"


def _stat_rows(numbers: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """(label, stat key, value, shown) for the totals table: the keys are `stats --json`'s paths."""
    c, lat, ver = numbers["checks"], numbers["landing_latency_s"], numbers["verification_s"]
    rate = c["receipts_hit_rate"]
    return [
        ("Wall time", "wall_time_s", numbers["wall_time_s"], seconds(numbers["wall_time_s"])),
        ("Tasks landed", "landed", numbers["landed"], f"{numbers['landed']} of {numbers['tasks']}"),
        ("Check time", "checks.check_time_s", c["check_time_s"], seconds(c["check_time_s"])),
        ("Checks run", "checks.run", c["run"], str(c["run"])),
        ("Checks cached", "checks.cached", c["cached"], str(c["cached"])),
        ("Checks flaky", "checks.flaky", c["flaky"], str(c["flaky"])),
        ("Checks failed", "checks.failed", c["failed"], str(c["failed"])),
        ("Receipts hit rate", "checks.receipts_hit_rate", rate, "—" if rate is None else f"{rate:.0%}"),
        ("Landing latency p50", "landing_latency_s.p50", lat["p50"], seconds(lat["p50"])),
        ("Landing latency p90", "landing_latency_s.p90", lat["p90"], seconds(lat["p90"])),
        ("Landing latency max", "landing_latency_s.max", lat["max"], seconds(lat["max"])),
        ("Verification time (total)", "verification_s.total", ver["total"], seconds(ver["total"])),
        ("Sessions", "sessions.total", numbers["sessions"]["total"], _count(numbers["sessions"]["total"])),
        ("Failed attempts", "failed_attempts.total", numbers["failed_attempts"]["total"],
         str(numbers["failed_attempts"]["total"])),
        ("Corrections", "corrections.total", numbers["corrections"]["total"], str(numbers["corrections"]["total"])),
        ("Cost", "cost_usd.total", numbers["cost_usd"]["total"], money(numbers["cost_usd"]["total"])),
    ]


def totals_table(numbers: dict[str, Any], t: Text) -> str:
    tiles = [f'<div class="tile"><div class="v" data-stat="{t(key)}" data-value="{t(_value(value))}">{t(shown)}'
             f'</div><div class="k">{t(label)}</div></div>' for label, key, value, shown in _stat_rows(numbers)]
    return '<div class="totals">' + "".join(tiles) + "</div>"


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def _value(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, float) else str(value)


def tasks_table(numbers: dict[str, Any], t: Text) -> str:
    head = ("<tr><th>task</th><th>state</th><th>sessions</th><th>failed attempts</th><th>corrections</th>"
            "<th>lane commit to landing</th><th>verification</th><th>cost</th></tr>")
    rows = [f'<tr data-task="{t(x["task_id"])}"><td>{t(x["task_id"])}</td><td>{t(x["state"])}</td>'
            f'<td class="num">{_count(x["sessions"])}</td><td class="num">{x["failed_attempts"]}</td>'
            f'<td class="num">{x["corrections"]}</td><td class="num">{t(seconds(x["landing_latency_s"]))}</td>'
            f'<td class="num">{t(seconds(x["verification_s"]))}</td><td class="num">{t(money(x["cost_usd"]))}</td>'
            "</tr>" for x in numbers["per_task"]]
    return '<table class="tasks">' + head + "".join(rows) + "</table>"


def checks_table(checks: list[dict[str, Any]], t: Text) -> str:
    head = ("<tr><th>task</th><th>where</th><th>run</th><th>check</th><th>command</th><th>result</th>"
            "<th>duration</th><th>cached</th><th>flaky</th><th>output</th></tr>")
    rows = []
    for c in checks:
        result = "passed" if c["passed"] else "failed"
        rows.append(f'<tr class="check"><td>{t(c["task"] or "(final)")}</td><td>{t(c["where"])}</td>'
                    f'<td>{t(c["context"])}</td><td>{t(c["id"])}</td><td><code>{t(c["command"])}</code></td>'
                    f'<td class="{"pass" if c["passed"] else "fail"}">{result}</td>'
                    f'<td class="num">{t(seconds(c["duration_ms"] / 1000))}</td>'
                    f'<td>{"yes" if c["cached"] else ""}</td><td>{"yes" if c["flaky"] else ""}</td>'
                    f"<td>{_tail(c, t)}</td></tr>")
    if not rows:
        rows.append('<tr><td colspan="10">no check has run yet</td></tr>')
    return '<table class="checks">' + head + "".join(rows) + "</table>"


def _tail(check: dict[str, Any], t: Text) -> str:
    """A failed check's last output lines, folded (a `<details>`: no script needed to open it)."""
    if check["passed"] or not check["output_tail"].strip():
        return ""
    return f"<details><summary>last lines</summary><pre>{t(check['output_tail'])}</pre></details>"


def events_table(facts: dict[str, Any], t: Text) -> str:
    rows = [f"<tr><td>{t(e['at'])}</td><td>{t(e['actor'])}</td><td>{t(e['text'])}</td></tr>" for e in events(facts)]
    return '<table class="events"><tr><th>at</th><th>by</th><th>event</th></tr>' + "".join(rows) + "</table>"


# -- the pictures ------------------------------------------------------------------------------------

def graph_svg(record: dict[str, Any], t: Text) -> str:
    """The task graph: a column per wave, a box per task coloured by its state, an arrow per dependency."""
    grouped = waves(record)
    states = {c["task_id"]: c.get("state") or "pending" for c in record["children"]}
    box_w, box_h, gap_x, gap_y = 170, 40, 60, 14
    where: dict[str, tuple[int, int]] = {}
    for col, tasks in enumerate(grouped):
        for row, task in enumerate(tasks):
            where[task] = (20 + col * (box_w + gap_x), 30 + row * (box_h + gap_y))
    width = 40 + max(1, len(grouped)) * (box_w + gap_x) - gap_x
    height = 36 + max((len(w) for w in grouped), default=1) * (box_h + gap_y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="task graph by waves">',
           f"<style>{SVG_STYLE}</style>",
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>']
    out += [f'<text x="{20 + col * (box_w + gap_x)}" y="18">wave {col + 1}</text>' for col in range(len(grouped))]
    for child in record["children"]:
        x2, y2 = where[child["task_id"]]
        for dep in child.get("blocked_by") or []:
            if dep in where:
                x1, y1 = where[dep]
                out.append(f'<path class="edge" marker-end="url(#arrow)" d="M{x1 + box_w},{y1 + box_h // 2} '
                           f'C{x1 + box_w + gap_x // 2},{y1 + box_h // 2} {x2 - gap_x // 2},{y2 + box_h // 2} '
                           f'{x2},{y2 + box_h // 2}"/>')
    for task, (x, y) in where.items():
        state = states[task]
        out.append(f'<g class="node" data-task="{t(task)}" data-state="{t(state)}"><title>{t(task)}: {t(state)}'
                   f'</title><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" '
                   f'fill="{STATE_COLOURS.get(state, "#607d8b")}"/>'
                   f'<text x="{x + 8}" y="{y + 16}" font-weight="bold">{t(_cut(task, 22))}</text>'
                   f'<text x="{x + 8}" y="{y + 32}">{t(state)}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _ticks(length: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400):
        if length / step <= 10:
            return step
    return length / 10


def timeline_svg(tl: dict[str, Any], t: Text) -> str:
    """One row per lane: sessions (top), attempts passed/failed (middle), candidate verification (bottom),
    a dashed line for the lane's life, and marks for corrections, instructions, landing and park."""
    start, end = tl["start"], tl["end"]
    length = max(end - start, 0.001)
    plot = WIDTH - LABEL - 20
    rows = tl["rows"]
    height = 60 + max(1, len(rows)) * ROW + 30

    def x(value: float) -> float:
        return round(LABEL + (min(max(value, start), end) - start) / length * plot, 1)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="timeline per lane">',
           f"<style>{SVG_STYLE}</style>", '<g class="axis">']
    step = _ticks(length)
    k = 0
    while k * step <= length + 1e-9:
        px = x(start + k * step)
        out.append(f'<line x1="{px}" y1="20" x2="{px}" y2="{30 + len(rows) * ROW}"/>'
                   f'<text x="{px}" y="14" text-anchor="middle">{t(seconds(k * step) if k else "0")}</text>')
        k += 1
    out.append("</g>")
    for i, row in enumerate(rows):
        y = 30 + i * ROW
        out.append(f'<g class="row" data-task="{t(row["task"])}" data-state="{t(row["state"])}">'
                   f'<text x="8" y="{y + 20}">{t(_cut(row["task"], 20))}</text>'
                   f'<line class="life" x1="{x(row["life"][0])}" y1="{y + 17}" x2="{x(row["life"][1])}" '
                   f'y2="{y + 17}"/>')
        for bar in row["bars"]:
            out.append(_bar(bar, x, y, t, start))
        for mark in row["marks"]:
            out.append(_mark(mark, x(mark["t"]), y, t, start))
        out.append("</g>")
    out.append(_legend(20 + 30 + len(rows) * ROW))
    out.append("</svg>")
    return "\n".join(out)


def _bar(bar: dict[str, Any], x, y: int, t: Text, start: float) -> str:
    kind = bar["kind"]
    extra = {"session": "crashed" if bar.get("exit") not in (None, 0) else "",
             "attempt": "passed" if bar.get("passed") else "failed",
             "verification": bar.get("outcome", "")}[kind]
    top, h = {"session": (3, 10), "attempt": (14, 8), "verification": (24, 7)}[kind]
    x1, x2 = x(bar["start"]), x(bar["end"])
    width = max(2.0, round(x2 - x1, 1))
    when = f"{seconds(bar['start'] - start)} to {seconds(bar['end'] - start)}"
    cls = f"bar {kind} {extra}".strip()
    return (f'<rect class="{cls}" data-kind="{kind}" x="{x1}" y="{y + top}" width="{width}" height="{h}">'
            f'<title>{t(bar["label"])}: {t(when)}</title></rect>')


def _mark(mark: dict[str, Any], px: float, y: int, t: Text, start: float) -> str:
    kind = mark["kind"]
    shape = {"correction": f"M{px - 5},{y + 2} L{px + 5},{y + 2} L{px},{y + 10} z",
             "instruction": f"M{px - 4},{y + 2} L{px + 4},{y + 2} L{px},{y + 9} z",
             "landing": f"M{px},{y + 10} L{px + 6},{y + 17} L{px},{y + 24} L{px - 6},{y + 17} z",
             "park": f"M{px - 5},{y + 12} L{px + 5},{y + 22} M{px + 5},{y + 12} L{px - 5},{y + 22}"}[kind]
    style = ' stroke="#b71c1c" stroke-width="2.5"' if kind == "park" else ""
    return (f'<path class="mark {kind}" data-kind="{kind}" d="{shape}"{style}><title>{t(mark["label"])} '
            f'(at {t(seconds(mark["t"] - start))})</title></path>')


def _legend(y: int) -> str:
    items = [("#64b5f6", "session"), ("#43a047", "attempt passed"), ("#e53935", "attempt failed"),
             ("#8e24aa", "candidate verification"), ("#fb8c00", "correction"), ("#1b5e20", "landing"),
             ("#b71c1c", "park")]
    out, px = ['<g class="legend">'], LABEL
    for colour, label in items:
        out.append(f'<rect x="{px}" y="{y}" width="12" height="10" fill="{colour}"/>'
                   f'<text x="{px + 16}" y="{y + 9}">{label}</text>')
        px += 24 + 7 * len(label)
    out.append("</g>")
    return "".join(out)
