"""The coordinator's commands: plan, start, tick, status, show, log, integrate, verify, resume, retire."""

from __future__ import annotations

import json
import os

import click

from . import render
from .app import LanesCommand, cli
from .options import (complete_slugs, complete_tasks, confirm_fn, json_option, required_slug, session, slug_arg,
                      slug_option, start_options, start_opts, task_arg)


@cli.command("plan")
@click.argument("slug")
@click.option("--max-parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pack waves at most this wide.")
@json_option
def plan_cmd(slug: str, max_parallel: int, as_json: bool) -> None:
    """Show an initiative's plan (read from HEAD): digest, waves, scope conflicts."""
    from ..batch.status import plan_view
    from ..core.ids import check_id

    check_id(slug, "slug")
    doc, title, differs, risks = plan_view(session(), slug, max_parallel)
    if differs:
        render.err("warning", f"the working tree differs from HEAD under .lanes/{slug}/; the plan shown is HEAD's")
    if as_json:
        render.emit_json(doc)
        return
    render.say(f"{slug}: {title}")
    render.say(f"plan digest {doc['plan_digest']}")
    for c in doc["children"]:
        deps = f" (after {', '.join(c['blocked_by'])})" if c["blocked_by"] else ""
        risk = f" [risk: {risks[c['task_id']]}]" if c["task_id"] in risks else ""
        render.say(f"  {c['task_id']}{deps}: {', '.join(c['scope'])}{risk}")
        for check in c.get("checks", []):
            render.say(f"    {check['id']} reads " + (", ".join(check["inputs"]) if check["inputs"] else "the whole tree"))
    for i, wave in enumerate(doc["waves"], 1):
        render.say(f"wave {i}: {', '.join(wave)}")
    seen: set[str] = set()
    for c in doc["scope_conflicts"]:   # each pair once (the JSON lists both directions)
        others = [o for o in c["overlaps_with"] if o not in seen]
        seen.add(c["task_id"])
        if others:
            render.say(f"conflict: {c['task_id']} overlaps {', '.join(others)}")


@cli.command("start")
@click.argument("slug")
@start_options
@json_option
def start_cmd(slug, as_json, yes, **kw) -> None:
    """Authorize and start a batch of an initiative on imm/<slug>, then tick."""
    from ..batch.start import start_batch

    render.outcome(start_batch(session(), slug, start_opts(yes=yes, **kw), confirm_fn(yes)), as_json)


@cli.command("tick")
@slug_arg
@click.option("--offer", "offers", multiple=True, metavar="TASK=PATH", help="Offer a lane (repeatable).")
@click.option("--instruct", "instruct", metavar="JSON", default=None,
              help='{"task_id", "kind", "text", "session_state"}')
@click.option("--max-parallel", type=click.IntRange(min=1), default=None,
              help="Assert the recorded --max-parallel.")
@click.option("--no-receipts", "no_receipts", is_flag=True, help="No receipt stands for a check, none is written.")
@json_option
def tick_cmd(slug, offers, instruct, max_parallel, no_receipts, as_json) -> None:
    """Reconcile once: observe lanes, integrate, admit offers, hand off."""
    from ..core.errors import usage
    from ..decisions.instruction import parse_instruction
    from ..tick import Request, parse_offers, run_tick

    s = session()
    slug = s.choose_slug(slug)
    parsed_offers = parse_offers(list(offers), os.getcwd())
    instruction = None
    if instruct is not None:
        try:
            value = json.loads(instruct, object_pairs_hook=_unique_keys)
        except _DuplicateKey as exc:
            raise usage(f"invalid --instruct: duplicate key {exc.args[0]!r} (which one is meant?)") from None
        except (ValueError, RecursionError) as exc:
            raise usage(f"invalid --instruct: not JSON ({exc})") from None
        instruction = parse_instruction(value)
    render.outcome(run_tick(s, slug, Request(offers=parsed_offers, instruction=instruction,
                                             max_parallel=max_parallel, receipts=not no_receipts)), as_json)


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are all different (`json` would keep the last of two silently)."""
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _view(name: str, slug: str | None, *args):
    """A read-only view of `status.py` for the chosen batch."""
    from ..batch import status

    s = session()
    return getattr(status, name)(s, s.choose_slug(slug), *args)


@cli.command("status")
@slug_arg
@json_option
def status_cmd(slug, as_json) -> None:
    """The report of the latest batch, from the stored record (never writes)."""
    report = _view("status", slug)
    if as_json:
        render.emit_json(report)
        return
    render.report(report)
    from ..batch.flakes import flakes  # (v4, SPEC §8.8) the batch's flaky checks, for people

    for f in flakes(session(), [report["slug"]]):
        render.say(f"flaky: {f['task'] + ':' if f['task'] else ''}{f['check']} ({f['count']}x, last {f['last_seen']})")


@cli.command("show")
@task_arg
@slug_option
@json_option
def show_cmd(task, slug, as_json) -> None:
    """One child with its lane record."""
    doc = _view("show", slug, task)
    render.emit_json(doc) if as_json else render.show(doc)


@cli.command("diff")
@task_arg
@slug_option
@click.option("--stat", "stat", is_flag=True, help="A diffstat, as git diff --stat.")
@click.option("--name-status", "name_status", is_flag=True, help="Paths with Git's status letters.")
@json_option
def diff_cmd(task, slug, stat, name_status, as_json) -> None:
    """A child's change against its lane base (its lane commit, last attempt, or lane), as git diff shows it."""
    from ..batch.diffview import diff_view, show_diff
    from ..core.errors import usage

    if stat and name_status:
        raise usage("--stat and --name-status are mutually exclusive")
    s = session()
    view = diff_view(s, s.choose_slug(slug), task)
    if as_json:
        render.emit_json(view)
        return
    code = show_diff(s, view, "name-status" if name_status else "stat" if stat else None)
    if view["outside_scope"]:
        render.err("warning", f"{task} changes paths outside its scope: " + ", ".join(view["outside_scope"]))
    if code:
        raise render.Fail(code)


@cli.command("log")
@slug_arg
@json_option
def log_cmd(slug, as_json) -> None:
    """The audit trail: one line per state write, oldest first."""
    entries = _view("audit_trail", slug)
    if as_json:
        render.emit_json(entries)
        return
    for e in entries:
        render.say(f"{e['commit'][:12]} {e['at']} {e['actor']}: {e['summary']}")


@cli.command("integrate")
@slug_arg
@click.argument("tasks", nargs=-1, shell_complete=complete_tasks)
@click.option("--slug", "slug_named", default=None, shell_complete=complete_slugs,
              help="The initiative (then every word is a TASK).")
@json_option
def integrate_cmd(slug, tasks, slug_named, as_json) -> None:
    """Integrate settled lanes (the tick's own steps); admits and schedules nothing."""
    from ..batch.status import check_tasks
    from ..tick import INTEGRATE, Request, run_tick

    if slug_named is not None:   # SPEC §6: every command that names a task takes --slug
        slug, tasks = slug_named, ((slug,) if slug else ()) + tuple(tasks)
    s = session()
    slug = s.choose_slug(slug)
    check_tasks(s, slug, list(tasks))
    only = set(tasks) if tasks else None
    request = Request(only=only, actor="integrate", closes_issues=False)   # step 10 is not one of its steps
    render.outcome(run_tick(s, slug, request, steps=INTEGRATE), as_json)


@cli.command("verify")
@slug_arg
@click.option("--commit", "rev", default=None, metavar="REV",
              help="Run the acceptance checks of the task REV integrated, on REV.")
@click.option("--receipts", "receipts", is_flag=True, help="Let this clone's scratch receipts stand for runs.")
@json_option
def verify_cmd(slug, rev, receipts, as_json) -> None:
    """Run the final checks on the batch head (or one task's checks on its commit); never writes."""
    from ..batch.verify import verify

    s = session()
    doc = verify(s, s.choose_slug(slug), rev, receipts=receipts)
    if as_json:
        render.emit_json(doc)
    else:
        render.check_results(doc["results"])
        render.say(f"{'passed' if doc['passed'] else 'failed'} at {doc['head']}")
    if not doc["passed"]:   # SPEC §16: exit 1 says why on stderr, in either mode
        from ..domain.checks import failed_summary

        render.err("error", f"verification_failed: {failed_summary(doc['results'], None)} at {doc['head']}")
        raise render.Fail(1)


class _ListOption(click.Option):
    """An option whose value is the list of words after it (`restart_words`); the manual says so."""
    takes_list = True


class _RestartList(LanesCommand):
    """`resume <slug> [TASK…] [--restart TASK…]` (SPEC §6): after the slug, the bare words that follow
    `--restart` (up to the next option) are all restarted; `--restart` may also be repeated."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, restart_words(args))


def restart_words(args: list[str]) -> list[str]:
    """`args` with `--restart a b` spelled `--restart a --restart b` (every other option is a flag)."""
    out: list[str] = []
    positional, greedy, i = 0, False, 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return out + args[i:]
        if word.startswith("-"):
            out.append(word)
            greedy = word.startswith("--restart") and positional > 0
            if word == "--restart" and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
        elif greedy:
            out += ["--restart", word]
        else:
            out.append(word)
            positional += 1
        i += 1
    return out


@cli.command("resume", cls=_RestartList)
@required_slug
@click.argument("tasks", nargs=-1, shell_complete=complete_tasks)
@click.option("--restart", "restart", multiple=True, metavar="TASK", shell_complete=complete_tasks, cls=_ListOption,
              help="Send parked children back to pending: the TASKs after it (or repeat it).")
@click.option("--yes", is_flag=True, help="Confirm without a prompt.")
@click.option("--delegate-revisions/--no-delegate-revisions", default=None,
              help="Grant or withdraw revision delegation.")
@click.option("--budget-usd", type=click.FloatRange(min=0), default=None, metavar="X",
              help="Raise the batch's cost budget to X USD.")
@click.option("--budget-tokens", type=click.IntRange(min=0), default=None, metavar="N",
              help="Raise the batch's token budget to N.")
@json_option
def resume_cmd(slug, tasks, restart, yes, delegate_revisions, budget_usd, budget_tokens, as_json) -> None:
    """Free parked children: every one of a needs_human batch (after a confirmation), or the TASKs named
    on a running batch; then tick."""
    from ..batch.resume import resume_batch

    render.outcome(resume_batch(session(), slug, list(restart), delegate_revisions, confirm_fn(yes), list(tasks),
                                (budget_usd, budget_tokens)), as_json)


@cli.command("retire")
@required_slug
@click.option("--yes", is_flag=True, help="Confirm without a prompt.")
@json_option
def retire_cmd(slug, yes, as_json) -> None:
    """Turn a batch with nothing in flight into superseded."""
    from ..batch.resume import retire_batch

    report = retire_batch(session(), slug, confirm_fn(yes))
    render.emit_json(report) if as_json else render.report(report)
