"""Shared by the board tests (watch, report, stats): a batch's facts written by hand with known timings
(with the v4 fields — `sessions[]` with usage, cached and flaky results, `candidates[]`), a reader of
the report page, and a PNG reader for the browser test."""

from __future__ import annotations

import struct
import zlib
from html.parser import HTMLParser
from typing import Any

OID = "a" * 40
T0 = "2026-01-01T00:00:"


def at(sec: float) -> str:
    """The time stamp `sec` seconds after 2026-01-01T00:00:00Z (under a minute)."""
    return f"{T0}{int(sec):02d}.{int(round((sec - int(sec)) * 1000)):03d}Z"


def result(check_id: str, passed: bool, ms: int, **extra: Any) -> dict[str, Any]:
    return {"id": check_id, "command": f"run {check_id}", "exit_code": 0 if passed else 1, "signal": None,
            "passed": passed, "duration_ms": ms, "output_tail": "", **extra}


def session(n: int, start: float, end: float | None, cost: float, tokens: int = 500) -> dict[str, Any]:
    return {"n": n, "started": at(start), "ended": at(end) if end is not None else None, "exit": 0,
            "usage": {"input_tokens": tokens, "output_tokens": tokens // 5, "cost_usd": cost}}


def lane(path: str) -> dict[str, Any]:
    return {"path": path, "branch": "imm-lane/s/x", "base_head": OID, "run_id": "r", "lane_commit": OID,
            "executor_commits": []}


def parked_batch() -> dict[str, Any]:
    """Three children: `a` lands (one session, a cached check), `b` fails once, is corrected, passes with a
    flaky check and parks on its candidate, `c` (after b) is skipped. The batch needs a human; now is 20 s.

    Known numbers: landing latency [4.0] (a: lane commit 10 -> integrated 14); verifications [3.5 landed,
    3.5 parked]; checks 7 (2 cached, 1 flaky, 2 failed), check time 4.8 s; sessions 1 + 2; cost 0.5 + 0.5."""
    record = {
        "batch_id": "s-20260101T000000Z-abcdef", "slug": "s", "batch_state": "needs_human",
        "reason": "batch_integration_check_failed: b", "created_at": at(0), "updated_at": at(18),
        "base_head": OID,
        "children": [
            {"task_id": "a", "blocked_by": [], "state": "released", "commit": "c" * 40, "lane": lane("/l/s/a"),
             "corrections": 0},
            {"task_id": "b", "blocked_by": [], "state": "needs_human", "reason": "batch_integration_check_failed",
             "lane": lane("/l/s/b"), "corrections": 1,
             "gate_results": [result("b:A1", False, 2000)]},
            {"task_id": "c", "blocked_by": ["b"], "state": "skipped_blocked", "reason": "dependency b parked",
             "lane": None},
        ],
        "interventions": [{"at": at(7), "task_id": "b", "kind": "correction", "text": "fix <b> & go",
                           "text_digest": "sha256:x"}],
        "candidates": [],
    }
    log = [(0, "start", "batch s-20260101T000000Z-abcdef started"), (1, "run", "enrolled a"),
           (2, "run", "enrolled b"), (6, "run", "1 QA failure(s) of b, correction due for b"),
           (7, "run", "correction for b"), (10, "run", "settled a, lane commit a"), (10.5, "run", "candidate a"),
           (12, "run", "settled b, lane commit b"), (14, "run", "integrated a"), (14.5, "run", "candidate b"),
           (18, "run", "parked b"), (18.2, "release", "released a")]
    lanes = {
        "a": {"batch_id": record["batch_id"], "task_id": "a", "sessions": [session(1, 1.2, 9, 0.5, 1000)],
              "qa_attempts": [{"at": at(9.8), "tree": OID, "passed": True,
                               "results": [result("A1", True, 600), result("A2", True, 300, cached=True,
                                                                          receipt="k" * 64)]}]},
        "b": {"batch_id": record["batch_id"], "task_id": "b",
              "sessions": [session(1, 2.1, 5.5, 0.25), session(2, 7.2, 11.5, 0.25)],
              "qa_attempts": [{"at": at(5.9), "tree": OID, "passed": False, "results": [result("A1", False, 400)]},
                              {"at": at(11.9), "tree": OID, "passed": True,
                               "results": [result("A1", True, 800, flaky=True,
                                                  attempts=[{"exit_code": 1, "output_tail": "boom"}])]}]},
        "c": None,
    }
    evidence = {"a": {"rerun": [result("a:A1", True, 1000), result("a:A2", True, 300, cached=True)]}}
    return {"record": record, "lanes": lanes, "evidence": evidence, "now": at(20),
            "log": [{"at": at(t), "actor": actor, "summary": text, "commit": OID} for t, actor, text in log]}


def running_batch() -> dict[str, Any]:
    """A running batch with a window of two candidates (d verifying since 5 s, e passed at 7 s) and a
    session still running in f's lane."""
    record = {"batch_id": "w-20260101T000000Z-abcdef", "slug": "w", "batch_state": "running", "reason": None,
              "created_at": at(0), "updated_at": at(6), "base_head": OID,
              "children": [{"task_id": t, "blocked_by": [], "state": s, "lane": lane(f"/l/w/{t}"), "corrections": 0}
                           for t, s in (("d", "lane_committed"), ("e", "lane_committed"), ("f", "enrolled"))],
              "interventions": [],
              "candidates": [{"task_id": "d", "commit": OID, "head": OID, "at": at(5), "state": "verifying",
                              "passed_at": None, "results": []},
                             {"task_id": "e", "commit": OID, "head": OID, "at": at(5), "state": "passed",
                              "passed_at": at(7), "results": [result("e:A1", True, 1500)]}]}
    log = [(0, "start", "batch w started"), (1, "run", "enrolled d, enrolled e, enrolled f"),
           (4, "run", "settled d, lane commit d, settled e, lane commit e")]
    lanes = {"d": None, "e": None,
             "f": {"batch_id": record["batch_id"], "task_id": "f", "sessions": [session(1, 2, None, 0.1)],
                   "qa_attempts": []}}
    return {"record": record, "lanes": lanes, "evidence": {}, "now": at(9),
            "log": [{"at": at(t), "actor": a, "summary": s, "commit": OID} for t, a, s in log]}


class Page(HTMLParser):
    """What the tests read of a report page: timeline rows and their bars and marks, the totals'
    `data-stat` values, the graph's nodes, the check rows, and whatever a page must not hold."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}     # task -> the kinds of its bars and marks, in order
        self.stats: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        self.checks = 0
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str]] = []
        self._row: str | None = None
        self._depth = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.attrs += [(k, v or "") for k, v in attrs]
        classes = (a.get("class") or "").split()
        if tag == "g" and "row" in classes:
            self._row, self._depth = a["data-task"], 0
            self.rows[self._row] = []
        elif tag == "g" and self._row is not None:
            self._depth += 1
        if self._row is not None and ("bar" in classes or "mark" in classes):
            self.rows[self._row].append(a["data-kind"] + ("" if "bar" in classes else "!")
                                        + ("+" if "passed" in classes else "-" if "failed" in classes else ""))
        if tag == "g" and "node" in classes:
            self.nodes[a["data-task"]] = a["data-state"]
        if "data-stat" in a:
            self.stats[a["data-stat"]] = a["data-value"]
        if tag == "tr" and "check" in classes:
            self.checks += 1

    def handle_endtag(self, tag):
        if tag == "g" and self._row is not None:
            if self._depth == 0:
                self._row = None
            else:
                self._depth -= 1


def stat_value(doc: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        doc = doc[key]
    return doc


def shown(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, float) else str(value)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGBA/RGB bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and colour in (2, 6), (depth, colour, interlace)
            bpp = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) for r in rows] if bpp == 3 else [
        b"".join(r[i:i + 3] for i in range(0, len(r), 4)) for r in rows]
