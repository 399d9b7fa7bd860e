"""Introspection and ergonomics: contracts, schema, completion, aliases."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import PATH, json_option, session


@cli.command("contracts")
@json_option
def contracts_cmd(as_json) -> None:
    """Print the contract manifest (batch record, lane record, report, store layout) as JSON."""
    from ..core.model import contracts_manifest

    render.emit_json(contracts_manifest())


@cli.command("schema")
@click.argument("which", required=False, type=click.Choice(["batch_record", "lane_record", "batch_report"]))
@json_option
def schema_cmd(which, as_json) -> None:
    """Print the JSON schemas of the records and the report (JSON, with or without --json)."""
    from ..core.model import schemas

    docs = schemas()
    render.emit_json(docs[which] if which else docs)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell) -> None:
    """Print the completion script for SHELL."""
    from ..surface.completion import script

    click.echo(script(shell), nl=False)


@cli.command("aliases")
@click.option("--install", is_flag=True, help="Add the short aliases.")
@click.option("--uninstall", is_flag=True, help="Remove the aliases git-lanes installed.")
def aliases_cmd(install, uninstall) -> None:
    """List, install or uninstall short Git aliases (git lt = git lanes tick, ...)."""
    from ..core.errors import usage
    from ..surface.aliases import aliases

    if install and uninstall:
        raise usage("--install and --uninstall are mutually exclusive")
    action = "install" if install else "uninstall" if uninstall else None

    for line in aliases(session(), action):
        render.say(line)


@cli.command("help")
@click.argument("command", required=False)
def help_cmd(command) -> None:
    """Show the help of COMMAND (of git lanes without one): the man page on a terminal, as git help does."""
    import sys

    from ..core.errors import usage

    ctx = click.get_current_context()
    group = ctx.parent.command if ctx.parent is not None else cli
    target = group.get_command(ctx, command) if command else None
    if command and target is None:
        raise usage(f"no such command: {command} (git lanes help lists them)")
    if sys.stdin.isatty() and sys.stdout.isatty():
        from ..surface.helpdoc import open_manual

        if open_manual():
            return
    if target is None:
        click.echo(group.get_help(ctx.parent or ctx))
        return
    click.echo(target.get_help(click.Context(target, info_name=command, parent=ctx.parent)))


@cli.command("mcp")
@click.option("--lane", "lane", type=PATH, default=None,
              help="Serve the lane-side tools (task, done, give_up, inbox) of the lane at PATH too.")
@click.option("--allow-yes", is_flag=True,
              help="Honour a tool's yes argument as the confirmation of start, resume and revise when the "
                   "client cannot ask its user (recorded as the agent's).")
def mcp_cmd(lane, allow_yes) -> None:
    """Serve the commands as Model Context Protocol tools on stdin/stdout (needs git-lanes[mcp])."""
    import os

    from ..core.errors import usage
    from ..mcp import INSTALL_HINT, available

    if not available():
        raise usage(f"git lanes mcp needs the MCP SDK: {INSTALL_HINT}")
    from ..mcp.server import serve

    serve(os.getcwd(), lane, allow_yes)
