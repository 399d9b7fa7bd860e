"""`git lanes watch` (SPEC §17.5): the board of a batch, live.

On a terminal it is full-screen and redrawn in place every `--interval` seconds (standard library
`curses`, imported only here); `q` or Ctrl-C quits with exit 0 and `curses` restores the terminal.
Without one (or with `--once`) it prints plain snapshots: one per interval until the batch is over
(`--once`: one). It reads records only; `--remote R` fetches R's records into
`refs/lanes-remotes/<R>/…` before each frame and reads them there.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable

from ..core.errors import LanesError
from .records import facts, fetcher
from .text import snapshot
from .timeline import terminal

if TYPE_CHECKING:
    from ..domain.session import Session

ASCII = {"—": "-", "·": "|", "…": "...", "→": "->"}


class Board:
    """One batch's frames: fetch (with a remote), read the records, lay out the board."""

    def __init__(self, s: "Session", slug: str | None, remote: str | None) -> None:
        self.src, self.fetch = fetcher(s, remote)
        self.fetch()
        self.slug = self.src.choose_slug(slug)
        self.over = False

    def frame(self) -> list[str]:
        found = facts(self.src, self.slug)
        self.over = terminal(found["record"])
        return snapshot(found)

    def next_frame(self) -> list[str]:
        self.fetch()
        return self.frame()


def watch(s: "Session", slug: str | None, *, interval: float, remote: str | None, once: bool,
          out: Callable[[str], None], terminal_ui: bool | None = None) -> int:
    """The watch command's loop; its exit code (0)."""
    board = Board(s, slug, remote)
    first = board.frame()   # a batch that cannot be read fails here, before the screen is taken
    if terminal_ui is None:
        terminal_ui = sys.stdout.isatty() and sys.stdin.isatty()
    try:
        if not once and terminal_ui:
            try:
                return _screen(board, first, interval)
            except _NoScreen as exc:   # no curses here, or a terminal it does not know (TERM=dumb)
                s.warn(f"no full-screen board on this terminal ({exc}); plain snapshots instead")
        return _plain(board, first, interval, once, out)
    except KeyboardInterrupt:
        return 0


class _NoScreen(Exception):
    """curses cannot take this terminal."""


def _plain(board: Board, lines: list[str], interval: float, once: bool, out: Callable[[str], None]) -> int:
    while True:
        for line in lines:
            out(line)
        if once or board.over:
            return 0
        out("")
        time.sleep(interval)
        lines = board.next_frame()


def _screen(board: Board, first: list[str], interval: float) -> int:
    try:
        import curses
    except ImportError as exc:
        raise _NoScreen(str(exc)) from None
    import locale

    locale.setlocale(locale.LC_ALL, "")
    plain = "utf" not in locale.getpreferredencoding(False).lower().replace("-", "")

    def main(stdscr) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        lines, problem, due = first, None, time.monotonic() + interval
        while True:
            _draw(stdscr, lines, problem, interval, plain)
            stdscr.timeout(max(10, int((due - time.monotonic()) * 1000)))
            key = stdscr.getch()
            if key in (ord("q"), ord("Q")):
                return
            if time.monotonic() >= due:
                try:
                    lines, problem = board.next_frame(), None
                except LanesError as exc:   # a fetch or a read failed this time: say so, keep watching
                    problem = exc.message
                due = time.monotonic() + interval

    try:
        curses.setupterm()
    except curses.error as exc:
        raise _NoScreen(str(exc)) from None
    curses.wrapper(main)
    return 0


def _draw(stdscr, lines: list[str], problem: str | None, interval: float, plain: bool) -> None:
    import curses

    height, width = stdscr.getmaxyx()
    footer = f"q quits · refreshed {time.strftime('%H:%M:%S')} every {interval:g} s"
    if problem:
        footer = f"error: {problem} · {footer}"
    stdscr.erase()
    shown = lines[:max(0, height - 2)]
    for row, line in enumerate(shown + [""] * (height - 2 - len(shown)) + [footer]):
        if plain:
            line = "".join(ASCII.get(ch, ch if ord(ch) < 128 else "?") for ch in line)
        try:
            stdscr.addnstr(row, 0, line, max(0, width - 1))
        except curses.error:
            pass
    stdscr.refresh()
