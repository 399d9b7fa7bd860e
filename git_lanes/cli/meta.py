"""Introspection and ergonomics: contracts, schema, completion, aliases."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import session


@cli.command("contracts")
def contracts_cmd() -> None:
    """Print the contract manifest (batch record, lane record, report, store layout)."""
    from ..model import contracts_manifest

    render.emit_json(contracts_manifest())


@cli.command("schema")
@click.argument("which", required=False, type=click.Choice(["batch_record", "lane_record", "batch_report"]))
def schema_cmd(which) -> None:
    """Print the JSON schemas of the records and the report."""
    from ..model import schemas

    docs = schemas()
    render.emit_json(docs[which] if which else docs)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell) -> None:
    """Print the completion script for SHELL."""
    from ..completion import script

    click.echo(script(shell), nl=False)


@cli.command("aliases")
@click.option("--install", "action", flag_value="install", help="Add the short aliases.")
@click.option("--uninstall", "action", flag_value="uninstall", help="Remove the aliases git-lanes installed.")
def aliases_cmd(action) -> None:
    """List, install or uninstall short Git aliases (git lt = git lanes tick, ...)."""
    from ..aliases import aliases

    for line in aliases(session(), action):
        render.say(line)
