"""What git-lanes knows about the checks it ran (SPEC §8.7, §8.8 v4): `receipts`, `flakes`."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import json_option, session


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


@cli.command("receipts")
@click.option("--prune", "prune_days", type=click.FloatRange(min=0), default=None, metavar="DAYS",
              help="Drop this clone's receipts older than DAYS.")
@json_option
def receipts_cmd(prune_days, as_json) -> None:
    """List this clone's receipts (key, check, task, where, tree, age); --prune DAYS drops old ones."""
    from ..domain.receipts import receipts_view

    doc = receipts_view(session(), prune_days)
    if as_json:
        render.emit_json(doc)
        return
    items, dropped = doc["receipts"], doc.get("pruned")
    if dropped is not None:
        render.say(f"pruned {len(dropped)} receipt(s) older than {prune_days:g} day(s)")
    for i in items:
        tree = (i["tree"] or "?")[:12]
        render.say(f"{i['key'][:12]} {i['where'] or '?':7} {i['task'] or '-'} {tree} {_age(i['age'])} ago: {i['check']}")
    if not items:
        render.say("receipts: none in this clone")


@cli.command("flakes")
@json_option
def flakes_cmd(as_json) -> None:
    """List checks with flaky results across the repository's batches (check, task, count, last seen)."""
    from ..batch.flakes import flakes

    items = flakes(session())
    if as_json:
        render.emit_json({"flakes": items})
        return
    for i in items:
        render.say(f"{i['count']:4} {i['slug']} {i['task'] or '-'}:{i['check']} (last seen {i['last_seen'] or '?'})")
    if not items:
        render.say("flakes: no flaky check in this repository's records")
