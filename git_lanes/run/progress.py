"""What `run` shows while it drives (SPEC §13): a line per child redrawn in place on a terminal,
one plain line per event otherwise (stderr when stdout carries the JSON document)."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .sessions import Sess

REDRAW = 0.25   # seconds between redraws of the live progress on a terminal


@dataclass
class Track:
    """What the driver knows about one child beyond the record."""
    sessions: int = 0              # sessions started in this run
    first_start: float | None = None
    finished: float | None = None
    empty: int = 0                 # sessions in a row that delivered nothing
    idle: int = 0                  # sessions in a row that left the lane asking for the same work
    mark: tuple[int, int] | None = None   # (QA failures, corrections) after the last session's tick
    errors: int = 0
    provision_failures: int = 0
    log_base: int | None = None    # the highest session number in the log folder when the run began


class Progress:
    def __init__(self, out: Callable[[str], None], tty: bool, quiet_stdout: bool) -> None:
        self.out = out if not quiet_stdout else (lambda text: print(text, file=sys.stderr, flush=True))
        self.tty = tty and not quiet_stdout
        self.drawn = 0
        self.rows: Callable[[], list[str]] = lambda: []
        self.last_draw = 0.0

    def _erase(self) -> str:
        return f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""

    def event(self, text: str) -> None:
        if not self.tty:
            self.out(text)
            return
        self.out(self._erase() + text)
        self.drawn = 0
        self.draw()

    def draw(self, force: bool = True) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self.last_draw < REDRAW:
            return
        self.last_draw = now
        rows = self.rows()
        height = shutil.get_terminal_size((80, 24)).lines - 2
        if len(rows) > height:
            rows = rows[:max(1, height - 1)] + [f"... {len(rows) - max(1, height - 1)} more"]
        if not rows:
            return
        prefix = self._erase()
        for i, row in enumerate(rows):
            self.out((prefix if i == 0 else "") + row)
        self.drawn = len(rows)

    def close(self) -> None:
        """Leave the last drawing on the screen; what follows goes below it."""
        self.drawn = 0


def child_rows(report: dict[str, Any], track: dict[str, Track], active: dict[str, Any], now: float) -> list[str]:
    """The live line of each child: state, elapsed time, QA failures, corrections, session, reason."""
    children = report.get("children", [])
    if not children:
        return []
    width = max(len(c["task_id"]) for c in children)
    rows = []
    for c in children:
        task = c["task_id"]
        tr = track.get(task)
        state = c["state"]
        if state == "enrolled":
            state = "working" if task in active else ("correction due" if c.get("correction_due") else "idle")
        elif state in ("settled", "lane_committed"):
            state = "done"
        elapsed = f"{(tr.finished or now) - tr.first_start:6.1f}s" if tr and tr.first_start is not None else ""
        extra = []
        if c.get("qa_failures"):
            extra.append(f"QA failures {c['qa_failures']}")
        if c.get("corrections"):
            extra.append(f"corrections {c['corrections']}")
        if task in active:
            extra.append(f"session {active[task].n}")
        if c.get("reason") and c["state"] in ("needs_human", "skipped_blocked"):
            extra.append(c["reason"])
        rows.append(f"  {task:<{width}}  {state:<14} {elapsed:>8}  {'; '.join(extra)}".rstrip())
    return rows


def flaky_note(task: str, results: list[dict[str, Any]]) -> str:
    """`; flaky: <task>:<id>, …` for the flaky passes among a `done`'s results (SPEC §8.8 v4), else ""."""
    flaky = [f"{task}:{r['id']}" for r in results if r.get("flaky")]
    return "; flaky: " + ", ".join(flaky) if flaky else ""


def stalled(tr: Track, sess: "Sess", report: dict[str, Any]) -> int:
    """How many sessions of a lane in a row left it where it was: after the tick that observed the
    session, its child still asks its executor to implement, with no failed attempt counted and no
    correction due since the last session (a failed attempt is progress: the QA limit bounds those)."""
    child = next((c for c in report.get("children", []) if c["task_id"] == sess.task_id), None)
    mark = (child or {}).get("qa_failures", 0), (child or {}).get("corrections", 0)
    again = child is not None and report.get("batch_state") == "running" and child["state"] == "enrolled" \
        and child.get("next_obligation") == "implement" and not child.get("correction_due")
    if again and mark == tr.mark and sess.outcome != "interrupted" and not sess.outcome.startswith("error"):
        tr.idle += 1
    else:
        tr.idle = 0
    tr.mark = mark
    return tr.idle
