"""The lane side's commands (`task`, `done`, `inbox`), without click: `lane.py` gives them their
click options, and `fast()` runs their everyday command lines with no option parser at all.

An agent runs these in its loop, many times a task; importing click is a third of what `done`
costs. `fast()` takes only the exact command lines below (nothing to parse, nothing to help
with); any other command line — `-h`, `--give-up`, a typo — goes through click as usual, and both
paths print through `render` and end in `render.failure`.
"""

from __future__ import annotations

from . import render

FAST = {
    ("task",): ("task", {}), ("task", "--json"): ("task", {"as_json": True}),
    ("done",): ("done", {}), ("done", "--json"): ("done", {"as_json": True}),
    ("done", "--retry"): ("done", {"retry": True}), ("done", "--json", "--retry"): ("done", {"as_json": True, "retry": True}),
    ("done", "--retry", "--json"): ("done", {"as_json": True, "retry": True}),
    ("inbox",): ("inbox", {}), ("inbox", "--json"): ("inbox", {"as_json": True}),
    ("inbox", "--ack"): ("inbox", {"ack": True}),
    ("inbox", "--ack", "--json"): ("inbox", {"ack": True, "as_json": True}),
    ("inbox", "--json", "--ack"): ("inbox", {"ack": True, "as_json": True}),
}


def fast(args: list[str], environ) -> int | None:
    """Run `args` when it is one of the lane side's plain command lines: its exit code; None
    otherwise (and for a shell's completion request)."""
    found = FAST.get(tuple(args))
    if found is None or environ.get("_GIT_LANES_COMPLETE"):
        return None
    name, kw = found
    render.begin()
    try:
        {"task": task, "done": done, "inbox": inbox}[name](**kw)
        return 0
    except (Exception, KeyboardInterrupt) as e:
        return render.failure(e, "--json" in args)


def session(**kw):
    """The repository as a command sees it (imported on first use: TAB stays light); its warnings are
    `warning:` lines on stderr. Every command's, here so that the click-free path has it too."""
    from ..domain.session import Session

    kw.setdefault("warn", lambda text: render.err("warning", text))
    return Session(**kw)


def task(as_json: bool = False) -> None:
    from ..lane.side import task_info

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


def done(give_up: bool = False, message: str | None = None, as_json: bool = False, no_receipts: bool = False,
         fail_fast: bool = False, retry: bool = False, used: str | None = None) -> None:
    from ..core.errors import usage
    from ..lane.side import done as done_fn, give_up as give_up_fn

    reported = None
    if used is not None:
        from ..batch.metering import parse_usage_option

        reported = parse_usage_option(used)
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
    doc = done_fn(s, receipts=not no_receipts, fail_fast=True if fail_fast else None, retry=retry, usage=reported)
    if as_json:
        render.emit_json(doc)
    else:
        render.attempt(doc)
    if not doc["passed"]:
        render.qa_failed(doc)
        raise render.Fail(1)


def inbox(ack: bool = False, as_json: bool = False) -> None:
    from ..lane.side import inbox as inbox_fn

    items = inbox_fn(session(lane_side=True), ack=ack)
    if as_json:
        render.emit_json(items)
        return
    if not items:
        render.say("inbox: empty (no instruction or correction for this lane)")
    for i in items:
        render.say(f"{'   ' if i['read'] else 'new'} {i['at']} {i['kind']}: {i['text']}")
