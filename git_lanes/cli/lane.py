"""The lane side (run inside a lane): task, done, inbox, each in a lane-side session (fast start-up)."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import json_option, session


@cli.command("task")
@json_option
def task_cmd(as_json) -> None:
    """(In a lane) the effective intent, its checks and unread instructions."""
    from ..laneside import task_info

    info = task_info(session(lane_side=True))
    if as_json:
        render.emit_json(info)
        return
    render.say(f"{info['task_id']} (revision {info['intent_revision']}): {info['goal']}")
    render.say("scope: " + ", ".join(info["scope"]))
    for a in info["acceptance"]:
        render.say(f"  [{a['id']}] {a['text']}\n      check: {a['check']}")
    for item in info["unread"]:
        render.say(f"unread {item['kind']} ({item['at']}): {item['text']}")


@cli.command("done")
@click.option("--give-up", is_flag=True, help="The executor cannot finish; the coordinator parks the child.")
@click.option("-m", "--message", default=None, help="Why (with --give-up).")
@json_option
def done_cmd(give_up, message, as_json) -> None:
    """(In a lane) snapshot the delivery, run the acceptance checks, record the attempt."""
    from ..errors import usage
    from ..laneside import done, give_up as give_up_fn

    s = session(lane_side=True)
    if give_up:
        if message is None:
            raise usage("--give-up needs -m TEXT")
        doc = give_up_fn(s, message)
        if as_json:
            render.emit_json(doc)
        else:
            render.say(f"{doc['task_id']}: gave up; the coordinator parks it at its next tick")
        return
    if message is not None:
        raise usage("-m only goes with --give-up")
    doc = done(s)
    if as_json:
        render.emit_json(doc)
    else:
        render.attempt(doc)
    if not doc["passed"]:
        render.qa_failed(doc)
        raise render.Fail(1)


@cli.command("inbox")
@click.option("--ack", is_flag=True, help="Record everything shown as read.")
@json_option
def inbox_cmd(ack, as_json) -> None:
    """(In a lane) instructions and corrections for this lane, oldest first."""
    from ..laneside import inbox

    items = inbox(session(lane_side=True), ack=ack)
    if as_json:
        render.emit_json(items)
        return
    if not items:
        render.say("inbox: empty (no instruction or correction for this lane)")
    for i in items:
        render.say(f"{'   ' if i['read'] else 'new'} {i['at']} {i['kind']}: {i['text']}")
