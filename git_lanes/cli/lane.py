"""The lane side (run inside a lane): task, done, inbox — their options; the bodies are
`lanecmds.py`, which also runs their everyday command lines without click."""

from __future__ import annotations

import click

from . import lanecmds
from .app import cli
from .options import json_option


@cli.command("task")
@json_option
def task_cmd(as_json) -> None:
    """(In a lane) the effective intent, its checks and unread instructions."""
    lanecmds.task(as_json)


@cli.command("done")
@click.option("--give-up", is_flag=True, help="The executor cannot finish; the coordinator parks the child.")
@click.option("-m", "--message", default=None, help="Why (with --give-up).")
@click.option("--no-receipts", "no_receipts", is_flag=True, help="Run every check; keep no receipt.")
@click.option("--fail-fast", "fail_fast", is_flag=True, help="Stop at the first failing check (lanes.failFast).")
@click.option("--retry", is_flag=True, help="Run the checks again on the tree whose last attempt failed.")
@click.option("--usage", "used", default=None, metavar="KEY=VALUE,...",
              help="What this session used: input_tokens, output_tokens, cost_usd (recorded with the attempt).")
@json_option
def done_cmd(give_up, message, no_receipts, fail_fast, retry, used, as_json) -> None:
    """(In a lane) snapshot the delivery, run the acceptance checks, record the attempt."""
    lanecmds.done(give_up, message, as_json, no_receipts, fail_fast, retry=retry, used=used)


@cli.command("inbox")
@click.option("--ack", is_flag=True, help="Record everything shown as read.")
@json_option
def inbox_cmd(ack, as_json) -> None:
    """(In a lane) instructions and corrections for this lane, oldest first."""
    lanecmds.inbox(ack, as_json)
