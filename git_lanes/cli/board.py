"""Seeing the batch: watch, report, stats (SPEC §17.5). Read-only."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import PATH, json_option, required_slug, session, slug_arg


@cli.command("watch")
@slug_arg
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, metavar="S",
              help="Seconds between frames.")
@click.option("--remote", default=None, metavar="R",
              help="Fetch R's records (into refs/lanes-remotes/<R>/) before each frame and show those.")
@click.option("--once", is_flag=True, help="Print one plain snapshot and exit.")
def watch_cmd(slug, interval, remote, once) -> None:
    """A live board of a batch (full-screen on a terminal; q or Ctrl-C quits), from the records only."""
    from ..board.watch import watch

    code = watch(session(), slug, interval=interval, remote=remote, once=once, out=render.say)
    if code:
        raise render.Fail(code)


@cli.command("report")
@required_slug
@click.option("--html", "html_path", type=PATH, default=None, metavar="FILE",
              help="Write the page here (default: <log dir>/<batch id>/report.html, whose path is printed).")
def report_cmd(slug, html_path) -> None:
    """Write a self-contained HTML page of a batch: task graph, timeline per lane, check runs, totals."""
    from ..board import report

    path = report(session(), slug, html_path)
    if html_path is None:
        render.say(path)


@cli.command("stats")
@slug_arg
@json_option
def stats_cmd(slug, as_json) -> None:
    """Landing latency, verification time, checks, sessions, corrections and cost: per batch, or over every
    batch of the repository when no slug is named."""
    from ..board import stats_of
    from ..board.text import stats_lines

    doc = stats_of(session(), slug)
    if as_json:
        render.emit_json(doc)
        return
    for line in stats_lines(doc):
        render.say(line)
