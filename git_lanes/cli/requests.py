"""Requests carried by a tick: instruct, review, revise."""

from __future__ import annotations

import sys

import click

from . import render
from .app import cli
from .options import json_option, session, slug_option, task_arg


@cli.command("instruct")
@task_arg
@slug_option
@click.option("--message", "-m", default=None, help="The text.")
@click.option("--file", "file", type=click.File("rb"), default=None, help="Read the text from F ('-': standard input).")
@click.option("--edit", "edit", is_flag=True,
              help="Write the text in Git's editor (git var GIT_EDITOR), on a template quoting the failing checks.")
@click.option("--kind", type=click.Choice(["instruction", "correction"]), default="instruction", show_default=True)
@click.option("--session-state", type=click.Choice(["idle", "working", "blocked", "done"]), required=True,
              help="The lane session's state as you observed it.")
@json_option
def instruct_cmd(task, slug, message, file, edit, kind, session_state, as_json) -> None:
    """Send an instruction or correction to an idle lane session (a tick carrying it)."""
    from ..core.errors import usage
    from ..decisions.instruction import parse_instruction
    from ..tick import Request, run_tick

    if sum(x is not None and x is not False for x in (message, file, edit)) != 1:
        raise usage("give exactly one of --message, --file and --edit")
    s = None
    if edit:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise usage("--edit needs a terminal; write the text to a file and pass --file FILE")
        from ..batch.compose import edit_text
        from ..core.ids import check_id

        check_id(task, "task id")
        s = session()
        slug = s.choose_slug(slug)
        text = edit_text(s, slug, task, kind)
    elif message is None:
        try:
            text = file.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise usage(f"--file {file.name}: not valid UTF-8 (byte {exc.start})") from None
    else:
        text = message
    req = parse_instruction({"task_id": task, "kind": kind, "text": text, "session_state": session_state},
                            {"text": "--edit" if edit else "--message" if file is None else f"--file {file.name}",
                             "kind": "--kind", "session_state": "--session-state"})
    s = s or session()
    render.outcome(run_tick(s, s.choose_slug(slug), Request(instruction=req, actor="instruct")), as_json)


@cli.command("review")
@task_arg
@slug_option
@click.option("--approve", is_flag=True, help="Approve the passed delivery.")
@click.option("--reject", is_flag=True, help="Reject it; the text goes to the lane's inbox.")
@click.option("-m", "--message", default=None, help="The verdict's text.")
@json_option
def review_cmd(task, slug, approve, reject, message, as_json) -> None:
    """Give a review verdict on a lane whose intent asks for one."""
    from ..batch.status import check_tasks
    from ..core.errors import usage
    from ..core.ids import check_id
    from ..tick import Request, run_tick

    if approve and reject:
        raise usage("--approve and --reject are mutually exclusive")
    if not (approve or reject):
        raise usage("give --approve or --reject")
    if message is not None:
        from ..decisions.instruction import is_placeholder

        if is_placeholder(message):
            raise usage(f"--message: {message.strip()!r} is a placeholder, not a reason; write the text")
    verdict = "approve" if approve else "reject"
    check_id(task, "task id")
    s = session()
    slug = s.choose_slug(slug)
    check_tasks(s, slug, [task])
    render.outcome(run_tick(s, slug, Request(review=(task, verdict, message), actor="review")), as_json)


@cli.command("revise")
@task_arg
@slug_option
@click.option("--intent", "intent_file", type=click.Path(dir_okay=False), required=True,
              help="The revised intent TOML.")
@click.option("--yes", is_flag=True, help="Approve a breaking revision as the user.")
@json_option
def revise_cmd(task, slug, intent_file, yes, as_json) -> None:
    """Propose a revised intent for an enrolled child (a tick carrying it)."""
    from ..batch.status import check_tasks
    from ..core.ids import check_id
    from ..domain.revise import ask_first, read_request
    from ..tick import Request, run_tick

    check_id(task, "task id")
    s = session()
    slug = s.choose_slug(slug)
    check_tasks(s, slug, [task])   # a task the batch does not have: exit 2 (SPEC §6), before any prompt
    req = read_request(task, intent_file, yes=yes, interactive=sys.stdin.isatty() and sys.stderr.isatty(),
                       confirm=lambda text: click.confirm(text, default=False, err=True))
    req = ask_first(s, slug, req)   # a prompt never holds the slug's lock
    render.outcome(run_tick(s, slug, Request(revision=req, actor="revise")), as_json)
