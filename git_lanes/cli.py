"""The `git lanes` command line: thin click commands that parse, call one use case, render.

Only click is imported at start-up; everything heavier (dulwich, pydantic, the use cases)
is imported inside the command that needs it, so `--version`, `completion` and every TAB
stay cheap.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import click

from . import __version__

EXIT_DOC = "Exit codes: 0 done, 1 refusal or negative result, 2 usage or invalid input, 128 fatal."


# -- output -----------------------------------------------------------------------------------

def _say(text: str = "") -> None:
    click.echo(text)


def _err(kind: str, text: str) -> None:
    click.echo(f"{kind}: {text}", err=True)


def _emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False))


class Fail(Exception):
    """Carry an exit code and optional JSON document out of a command."""

    def __init__(self, exit_code: int, doc: Any = None) -> None:
        self.exit_code = exit_code
        self.doc = doc


def _session(**kw):
    from .session import Session

    return Session(**kw)


def _finish(outcome, as_json: bool, render: Callable[[dict], None] | None = None) -> None:
    """Print a tick outcome; exit 1 with `error:` when it was refused or rejected."""
    if as_json:
        _emit_json(outcome.report)
    else:
        (render or render_report)(outcome.report)
    if outcome.error is not None:
        _err("error", outcome.error.message)
        raise Fail(outcome.exit_code or 1)


# -- human rendering ----------------------------------------------------------------------------

def render_report(r: dict) -> None:
    _say(f"batch {r.get('batch_id')} ({r['slug']}): {r['batch_state']}")
    if r.get("reason"):
        _say(f"reason: {r['reason']}")
    width = max((len(c["task_id"]) for c in r["children"]), default=4)
    for c in r["children"]:
        extra = []
        if c.get("next_obligation"):
            extra.append(f"next: {c['next_obligation']}")
        if c.get("qa_failures"):
            extra.append(f"qa failures {c['qa_failures']}")
        if c.get("correction_due"):
            extra.append("correction due")
        if c.get("commit"):
            extra.append(c["commit"][:12])
        if c.get("tracker_closed"):
            extra.append("issue closed")
        if c.get("reason"):
            extra.append(c["reason"])
        _say(f"  {c['task_id']:<{width}}  {c['state']:<14} {'; '.join(extra)}".rstrip())
    for key in ("lane_refusals", "tracker_observations"):
        for item in r.get(key, []):
            _say(f"{key.replace('_', ' ')[:-1]}: " + ", ".join(f"{k}={v}" for k, v in item.items()))
    if r.get("lane_instruction"):
        li = r["lane_instruction"]
        _say(f"instruction for {li['task_id']}: " + ("accepted" if li["accepted"] else li["reason"]))
    if r.get("lane_revision"):
        lr = r["lane_revision"]
        _say(f"revision of {lr['task_id']}: " + ("approved" if lr["accepted"] else lr["reason"]))
    fv = r.get("final_verification")
    if fv:
        _say(f"final verification: {'passed' if fv['passed'] else 'FAILED'} at {fv['head'][:12]}")
    for h in r["handoffs"]:
        role = h.get("action") or h.get("next_obligation")
        where = h.get("lane_path") or h.get("base_head", "")[:12]
        _say(f"handoff: {h['role']} {role} {h['task_id']} {where}".rstrip())
    _say(f"next: {r['next_action']}")


# -- the group ---------------------------------------------------------------------------------

class LanesGroup(click.Group):
    def list_commands(self, ctx):
        return list(self.commands)  # keep the order of definition (the man page order)


@click.group(cls=LanesGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_DOC)
@click.version_option(__version__, "--version", prog_name="git-lanes", message="git-lanes version %(version)s")
def cli() -> None:
    """Run many tasks at once in Git worktrees; land each as one verified commit."""


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")(f)


def slug_arg(f):
    return click.argument("slug", required=False, shell_complete=_complete_slugs)(f)


def _complete_slugs(ctx, param, incomplete):
    try:
        from .gitio import Git

        git = Git()
        names = git.out("for-each-ref", "--format=%(refname)", "refs/notes/lanes/batch/").split("\n")
        return [n.rsplit("/", 1)[-1] for n in names if n and n.rsplit("/", 1)[-1].startswith(incomplete)]
    except Exception:
        return []


def _complete_tasks(ctx, param, incomplete):
    try:
        from .gitio import Git

        git = Git()
        names = git.out("for-each-ref", "--format=%(refname)", "refs/heads/imm-lane/").split("\n")
        tasks = {n.rsplit("/", 1)[-1] for n in names if n}
        for path in git.out("ls-tree", "-r", "--name-only", "HEAD", ".lanes").split("\n"):
            if path.endswith(".toml") and not path.endswith("/initiative.toml"):
                tasks.add(path.rsplit("/", 1)[-1][:-5])
        return sorted(t for t in tasks if t.startswith(incomplete))
    except Exception:
        return []


# -- plan / start / tick / status / log ---------------------------------------------------------

@cli.command("plan")
@click.argument("slug")
@click.option("--max-parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pack waves at most this wide.")
@json_option
def plan_cmd(slug: str, max_parallel: int, as_json: bool) -> None:
    """Show an initiative's plan (read from HEAD): digest, waves, scope conflicts."""
    from .plan import check_id

    check_id(slug, "slug")
    s = _session()
    head = s.git.rev_parse("HEAD")
    if head is None:
        from .errors import usage

        raise usage("HEAD has no commit yet; the plan is read from HEAD")
    plan = s.plan_at(head, slug)
    doc = plan.to_json(max_parallel)
    if s.git.toplevel and any(e.path.startswith(f".lanes/{slug}/") for e in s.git.status()):
        _err("warning", f"the working tree differs from HEAD under .lanes/{slug}/; the plan shown is HEAD's")
    if as_json:
        _emit_json(doc)
        return
    _say(f"{slug}: {plan.title}")
    _say(f"plan digest {doc['plan_digest']}")
    for c in doc["children"]:
        deps = f" (after {', '.join(c['blocked_by'])})" if c["blocked_by"] else ""
        _say(f"  {c['task_id']}{deps}: {', '.join(c['scope'])}")
    for i, wave in enumerate(doc["waves"], 1):
        _say(f"wave {i}: {', '.join(wave)}")
    for c in doc["scope_conflicts"]:
        _say(f"conflict: {c['task_id']} overlaps {', '.join(c['overlaps_with'])}")


def _confirm_fn(yes: bool, code: str = "batch_confirmation_required"):
    def confirm(text: str) -> bool:
        from .errors import refused

        if yes:
            return True
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise refused(code if code else "batch_confirmation_required",
                          "no terminal to confirm on; pass --yes to confirm")
        click.echo(text, err=True)
        return click.confirm("Proceed?", default=False, err=True)
    return confirm


def start_options(f):
    opts = [
        click.option("--max-parallel", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Lanes running at once."),
        click.option("--max-children", type=click.IntRange(min=1), default=None,
                     help="Children that may ever get a lane (default: every task)."),
        click.option("--qa-failure-limit", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Failed attempts before a design-level correction is due."),
        click.option("--final-check", "final_checks", multiple=True,
                     help="A final check command (repeatable; default: the initiative's final_checks)."),
        click.option("--delegate-revisions/--no-delegate-revisions", default=False,
                     help="Grant the coordinator approval of breaking revisions inside the envelope."),
        click.option("--executor-runtime", type=click.Path(), default=None,
                     help="A contract manifest or git-lanes installation the lanes will run."),
        click.option("--worktree", type=click.Path(), default=None,
                     help="Create the coordinator as a new worktree at DIR."),
        click.option("--yes", is_flag=True, help="Confirm without a prompt."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _start_opts(max_parallel, max_children, qa_failure_limit, final_checks, delegate_revisions,
                executor_runtime, worktree, yes):
    from .start import StartOptions

    return StartOptions(max_parallel=max_parallel, max_children=max_children, qa_failure_limit=qa_failure_limit,
                        final_checks=list(final_checks) or None, delegate_revisions=delegate_revisions,
                        executor_runtime=executor_runtime, worktree=worktree, yes=yes)


@cli.command("start")
@click.argument("slug")
@start_options
@json_option
def start_cmd(slug, as_json, yes, **kw) -> None:
    """Authorize and start a batch of an initiative on imm/<slug>, then tick."""
    from .start import start
    from .tick import Request, Tick

    s = _session()
    opts = _start_opts(yes=yes, **kw)
    record = start(s, slug, opts, _confirm_fn(yes))
    s2 = _session(cwd=record.coordinator)
    _finish(Tick(s2, slug, Request(actor="start")).run(), as_json)


@cli.command("tick")
@slug_arg
@click.option("--offer", "offers", multiple=True, metavar="TASK=PATH", help="Offer a lane (repeatable).")
@click.option("--instruct", "instruct", metavar="JSON", default=None,
              help='{"task_id", "kind", "text", "session_state"}')
@click.option("--max-parallel", type=click.IntRange(min=1), default=None,
              help="Assert the recorded --max-parallel.")
@json_option
def tick_cmd(slug, offers, instruct, max_parallel, as_json) -> None:
    """Reconcile once: observe lanes, integrate, admit offers, hand off."""
    from .decisions.instruction import parse_instruction
    from .errors import usage
    from .tick import Request, Tick, parse_offers

    s = _session()
    slug = s.choose_slug(slug)
    parsed_offers = parse_offers(list(offers), os.getcwd())
    instruction = None
    if instruct is not None:
        try:
            value = json.loads(instruct)
        except ValueError as exc:
            raise usage(f"invalid --instruct: not JSON ({exc})") from None
        instruction = parse_instruction(value)
    _finish(Tick(s, slug, Request(offers=parsed_offers, instruction=instruction, max_parallel=max_parallel)).run(),
            as_json)


@cli.command("status")
@slug_arg
@json_option
def status_cmd(slug, as_json) -> None:
    """The report of the latest batch, from the stored record (never writes)."""
    from .status import status

    s = _session()
    report = status(s, s.choose_slug(slug))
    if as_json:
        _emit_json(report)
    else:
        render_report(report)


@cli.command("show")
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@json_option
def show_cmd(task, slug, as_json) -> None:
    """One child with its lane record."""
    from .status import show

    s = _session()
    doc = show(s, s.choose_slug(slug), task)
    if as_json:
        _emit_json(doc)
        return
    for key, value in doc["child"].items():
        _say(f"{key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    lr = doc.get("lane_record")
    if lr:
        _say(f"lane record revision {lr['record_revision']}, {len(lr['qa_attempts'])} attempt(s)")
        for a in lr["qa_attempts"]:
            _say(f"  {a['at']} {'passed' if a['passed'] else 'failed'} {a['tree'][:12]}")


@cli.command("log")
@slug_arg
@json_option
def log_cmd(slug, as_json) -> None:
    """The audit trail: one line per state write, oldest first."""
    s = _session()
    slug = s.choose_slug(slug)
    entries = s.batches.log(slug)
    if as_json:
        _emit_json([{k: e[k] for k in ("at", "actor", "summary", "commit")} for e in entries])
        return
    for e in entries:
        _say(f"{e['commit'][:12]} {e['at']} {e['actor']}: {e['summary']}")


# -- lane side ------------------------------------------------------------------------------------

@cli.command("task")
@json_option
def task_cmd(as_json) -> None:
    """(In a lane) the effective intent, its checks and unread instructions."""
    from .laneside import task_info

    info = task_info(_session())
    if as_json:
        _emit_json(info)
        return
    _say(f"{info['task_id']} (revision {info['intent_revision']}): {info['goal']}")
    _say("scope: " + ", ".join(info["scope"]))
    for a in info["acceptance"]:
        _say(f"  [{a['id']}] {a['text']}\n      check: {a['check']}")
    for item in info["unread"]:
        _say(f"unread {item['kind']} ({item['at']}): {item['text']}")


@cli.command("done")
@click.option("--give-up", is_flag=True, help="The executor cannot finish; the coordinator parks the child.")
@click.option("-m", "--message", default=None, help="Why (with --give-up).")
@json_option
def done_cmd(give_up, message, as_json) -> None:
    """(In a lane) snapshot the delivery, run the acceptance checks, record the attempt."""
    from .errors import usage
    from .laneside import done, give_up as give_up_fn

    s = _session()
    if give_up:
        if message is None:
            raise usage("--give-up needs -m TEXT")
        doc = give_up_fn(s, message)
        if as_json:
            _emit_json(doc)
        else:
            _say(f"{doc['task_id']}: gave up; the coordinator parks it at its next tick")
        return
    if message is not None:
        raise usage("-m only goes with --give-up")
    doc = done(s)
    if as_json:
        _emit_json(doc)
    else:
        for r in doc["results"]:
            _say(f"{'ok  ' if r['passed'] else 'FAIL'} {r['id']}: {r['command']}")
            if not r["passed"] and r["output_tail"].strip():
                for line in r["output_tail"].rstrip().splitlines()[-10:]:
                    _say(f"      {line}")
        if doc.get("note"):
            _say(doc["note"])
        _say(f"{doc['task_id']}: {'passed' if doc['passed'] else 'failed'} (tree {doc['tree'][:12]})")
    if not doc["passed"]:
        raise Fail(1)


@cli.command("inbox")
@click.option("--ack", is_flag=True, help="Record everything shown as read.")
@json_option
def inbox_cmd(ack, as_json) -> None:
    """(In a lane) instructions and corrections for this lane, oldest first."""
    from .laneside import inbox

    items = inbox(_session(), ack=ack)
    if as_json:
        _emit_json(items)
        return
    for i in items:
        _say(f"{'   ' if i['read'] else 'new'} {i['at']} {i['kind']}: {i['text']}")


# -- coordinator requests ---------------------------------------------------------------------

@cli.command("instruct")
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@click.option("--message", "-m", default=None, help="The text.")
@click.option("--file", "file", type=click.File("r", encoding="utf-8"), default=None, help="Read the text from F.")
@click.option("--kind", type=click.Choice(["instruction", "correction"]), default="instruction", show_default=True)
@click.option("--session-state", type=click.Choice(["idle", "working", "blocked", "done"]), required=True,
              help="The lane session's state as you observed it.")
@json_option
def instruct_cmd(task, slug, message, file, kind, session_state, as_json) -> None:
    """Send an instruction or correction to an idle lane session (a tick carrying it)."""
    from .decisions.instruction import parse_instruction
    from .errors import usage
    from .tick import Request, Tick

    if (message is None) == (file is None):
        raise usage("give exactly one of --message and --file")
    text = message if message is not None else file.read()
    req = parse_instruction({"task_id": task, "kind": kind, "text": text, "session_state": session_state})
    s = _session()
    _finish(Tick(s, s.choose_slug(slug), Request(instruction=req, actor="instruct")).run(), as_json)


@cli.command("review")
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@click.option("--approve", "verdict", flag_value="approve", help="Approve the passed delivery.")
@click.option("--reject", "verdict", flag_value="reject", help="Reject it; the text goes to the lane's inbox.")
@click.option("-m", "--message", default=None, help="The verdict's text.")
@json_option
def review_cmd(task, slug, verdict, message, as_json) -> None:
    """Give a review verdict on a lane whose intent asks for one."""
    from .errors import usage
    from .tick import Request, Tick

    if verdict is None:
        raise usage("give --approve or --reject")
    s = _session()
    _finish(Tick(s, s.choose_slug(slug), Request(review=(task, verdict, message), actor="review")).run(), as_json)


@cli.command("revise")
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@click.option("--intent", "intent_file", type=click.Path(dir_okay=False), required=True,
              help="The revised intent TOML.")
@click.option("--yes", is_flag=True, help="Approve a breaking revision as the user.")
@json_option
def revise_cmd(task, slug, intent_file, yes, as_json) -> None:
    """Propose a revised intent for an enrolled child (a tick carrying it)."""
    from .revise import read_request
    from .tick import Request, Tick

    s = _session()
    req = read_request(task, intent_file, yes=yes, interactive=sys.stdin.isatty() and sys.stderr.isatty(),
                       confirm=lambda text: click.confirm(text, default=False, err=True))
    _finish(Tick(s, s.choose_slug(slug), Request(revision=req, actor="revise")).run(), as_json)


@cli.command("integrate")
@slug_arg
@click.argument("tasks", nargs=-1, shell_complete=_complete_tasks)
@json_option
def integrate_cmd(slug, tasks, as_json) -> None:
    """Integrate settled lanes (the tick's own steps); admits and schedules nothing."""
    from .tick import Request, Tick

    s = _session()
    slug = s.choose_slug(slug)
    only = set(tasks) if tasks else None
    _finish(Tick(s, slug, Request(integrate_only=True, only=only, actor="integrate")).run(), as_json)


@cli.command("verify")
@slug_arg
@click.option("--commit", "rev", default=None, metavar="REV",
              help="Run the acceptance checks of the task REV integrated, on REV.")
@json_option
def verify_cmd(slug, rev, as_json) -> None:
    """Run the final checks on the batch head (or one task's checks on its commit); never writes."""
    from .verify import verify

    s = _session()
    doc = verify(s, s.choose_slug(slug), rev)
    if as_json:
        _emit_json(doc)
    else:
        for r in doc["results"]:
            _say(f"{'ok  ' if r['passed'] else 'FAIL'} {r['id']}: {r['command']}")
        _say(f"{'passed' if doc['passed'] else 'failed'} at {doc['head']}")
    if not doc["passed"]:
        raise Fail(1)


@cli.command("resume")
@click.argument("slug", shell_complete=_complete_slugs)
@click.option("--restart", "restart", multiple=True, metavar="TASK", help="Send a parked child back to pending.")
@click.option("--yes", is_flag=True, help="Confirm without a prompt.")
@click.option("--delegate-revisions/--no-delegate-revisions", default=None,
              help="Grant or withdraw revision delegation.")
@json_option
def resume_cmd(slug, restart, yes, delegate_revisions, as_json) -> None:
    """Continue a needs_human batch with a new confirmation."""
    from .resume import resume
    from .tick import Request, Tick

    s = _session()
    resume(s, slug, list(restart), delegate_revisions, _confirm_fn(yes))
    _finish(Tick(s, slug, Request(actor="resume")).run(), as_json)


@cli.command("retire")
@click.argument("slug", shell_complete=_complete_slugs)
@click.option("--yes", is_flag=True, help="Confirm without a prompt.")
@json_option
def retire_cmd(slug, yes, as_json) -> None:
    """Turn a batch with nothing in flight into superseded."""
    from .resume import retire
    from .status import status

    s = _session()
    retire(s, slug, _confirm_fn(yes))
    report = status(s, slug)
    if as_json:
        _emit_json(report)
    else:
        render_report(report)


# -- steward ------------------------------------------------------------------------------------

@cli.command("provision")
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@click.option("--path", "path", type=click.Path(), default=None, help="Where the lane worktree goes.")
@json_option
def provision_cmd(task, slug, path, as_json) -> None:
    """Create the lane a provision handoff names, then tick with the offer."""
    from .steward import provision

    s = _session()
    _finish(provision(s, s.choose_slug(slug), task, path), as_json)


@cli.command("release")
@click.argument("task", required=False, shell_complete=_complete_tasks)
@click.option("--slug", default=None, shell_complete=_complete_slugs, help="The initiative.")
@click.option("--keep-branch", is_flag=True, help="Keep the lane branch.")
@click.option("--stale", is_flag=True, help="Remove clean lanes of terminal batches.")
@json_option
def release_cmd(task, slug, keep_branch, stale, as_json) -> None:
    """Remove a lane that a release handoff names (or --stale lanes of finished batches)."""
    from .errors import usage
    from .steward import release, release_stale

    s = _session()
    if stale:
        doc = release_stale(s, s.choose_slug(slug or task))
    else:
        if task is None:
            raise usage("name the task to release (or use --stale)")
        doc = release(s, s.choose_slug(slug), task, keep_branch=keep_branch)
    if as_json:
        _emit_json(doc)
    else:
        for item in doc.get("released", []):
            _say(f"released {item['task_id']} ({item['path']})")
        for item in doc.get("skipped", []):
            _say(f"kept {item['task_id']}: {item['reason']}")


@cli.command("audit")
@slug_arg
@json_option
def audit_cmd(slug, as_json) -> None:
    """Check every imm-lane/* branch against the records; exit 1 on findings."""
    from .audit import audit

    s = _session()
    findings = audit(s, slug)
    if as_json:
        _emit_json({"findings": findings})
    else:
        for f in findings:
            _say(f"{f['kind']}: {f['branch']}: {f['detail']}")
        if not findings:
            _say("audit: nothing found")
    if findings:
        raise Fail(1)


# -- run / demo ----------------------------------------------------------------------------------

@cli.command("run")
@click.argument("slug", shell_complete=_complete_slugs)
@click.option("--executor", required=True, help="The executor command, run in each lane (no shell).")
@click.option("--corrector", default=None, help="A command fed the failing checks' output on stdin.")
@start_options
@json_option
def run_cmd(slug, executor, corrector, as_json, yes, **kw) -> None:
    """Drive a batch unattended: provision, run executors, tick, correct, release."""
    from .driver import run

    s = _session()
    code = run(s, slug, executor=executor, corrector=corrector, opts=_start_opts(yes=yes, **kw),
               confirm=_confirm_fn(yes), as_json=as_json, out=_say)
    if code:
        raise Fail(code)


@cli.command("demo")
@click.argument("directory", required=False, type=click.Path())
@json_option
def demo_cmd(directory, as_json) -> None:
    """Build a sample project and run a whole batch on it, offline."""
    from .demo import demo

    code = demo(directory, as_json=as_json, out=_say)
    if code:
        raise Fail(code)


# -- replication (SPEC §14) -----------------------------------------------------------------------

@cli.command("push")
@click.argument("remote", required=False, default="origin")
@json_option
def push_cmd(remote, as_json) -> None:
    """Push git-lanes state, batch and lane branches to REMOTE (atomic, with leases)."""
    from .remote import push

    doc = push(_session(), remote)
    _emit_json(doc) if as_json else [_say(f"{r['status']}: {r['ref']}") for r in doc["refs"]]
    _replication_outcome(doc, "pushed")


@cli.command("pull")
@click.argument("remote", required=False, default="origin")
@json_option
def pull_cmd(remote, as_json) -> None:
    """Fetch git-lanes state from REMOTE and fast-forward what has one writer elsewhere."""
    from .remote import pull

    doc = pull(_session(), remote)
    _emit_json(doc) if as_json else [_say(f"{r['status']}: {r['ref']}") for r in doc["refs"]]
    _replication_outcome(doc, "pulled")


def _replication_outcome(doc: dict, verb: str) -> None:
    """Hints for what is left to do; exit 1 when a ref diverged or was rejected."""
    statuses = [r["status"] for r in doc["refs"]]
    if "checked_out" in statuses:
        _err("hint", "a branch checked out in a worktree is never moved by git lanes pull; "
                     "pull it with git in that worktree")
    if "remote_ahead" in statuses:
        _err("hint", "the remote holds newer values of some refs; run 'git lanes pull' first")
    bad = [r["ref"] for r in doc["refs"] if r["status"] in ("remote_moved", "rejected")]
    if bad:
        _err("error", f"{len(bad)} ref(s) not {verb} (diverged or rejected): " + ", ".join(bad))
        raise Fail(1)


@cli.command("join")
@click.argument("slug", shell_complete=_complete_slugs)
@click.argument("task", shell_complete=_complete_tasks)
@click.option("--path", "path", type=click.Path(), default=None, help="Where the lane worktree goes.")
@json_option
def join_cmd(slug, task, path, as_json) -> None:
    """Create, in another clone, the lane a pulled provision handoff names."""
    from .remote import join

    doc = join(_session(), slug, task, path)
    if as_json:
        _emit_json(doc)
    else:
        _say(f"joined {doc['task_id']}: {doc['lane_path']} on {doc['lane_branch']} at {doc['base_head'][:12]}")
        _err("hint", "commit in the lane and 'git lanes push'; the coordinator has not admitted it")


# -- introspection -------------------------------------------------------------------------------

@cli.command("contracts")
def contracts_cmd() -> None:
    """Print the contract manifest (batch record, lane record, report, store layout)."""
    from .model import contracts_manifest

    _emit_json(contracts_manifest())


@cli.command("schema")
@click.argument("which", required=False, type=click.Choice(["batch_record", "lane_record", "batch_report"]))
def schema_cmd(which) -> None:
    """Print the JSON schemas of the records and the report."""
    from .model import schemas

    docs = schemas()
    _emit_json(docs[which] if which else docs)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell) -> None:
    """Print the completion script for SHELL."""
    from .completion import script

    click.echo(script(shell), nl=False)


@cli.command("aliases")
@click.option("--install", "action", flag_value="install", help="Add the short aliases.")
@click.option("--uninstall", "action", flag_value="uninstall", help="Remove the aliases git-lanes installed.")
def aliases_cmd(action) -> None:
    """List, install or uninstall short Git aliases (git lt = git lanes tick, ...)."""
    from .aliases import aliases

    for line in aliases(_session(), action):
        _say(line)


# -- entry point ----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    from .errors import LanesError

    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    try:
        cli.main(args=args, prog_name="git lanes", complete_var="_GIT_LANES_COMPLETE", standalone_mode=False)
        return 0
    except Fail as f:
        return f.exit_code
    except LanesError as e:
        if as_json and e.report is not None and e.exit_code == 1:
            _emit_json(e.report)
        _err("error", e.message)
        return int(e.exit_code)
    except click.exceptions.NoSuchOption as e:
        _usage_error(e)
        return 2
    except click.UsageError as e:
        _usage_error(e)
        return 2
    except click.exceptions.Abort:
        _err("error", "aborted")
        return 1
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        _err("error", "interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # never a traceback, unless asked for
        if os.environ.get("GIT_LANES_DEBUG"):
            raise
        _err("fatal", f"internal error: {type(e).__name__}: {e}")
        return 128


def _usage_error(e: click.UsageError) -> None:
    msg = e.format_message()
    _err("error", msg.splitlines()[0] if msg else "usage error")
    if e.ctx is not None:
        click.echo(f"hint: see '{e.ctx.command_path} -h'", err=True)


def entry() -> None:
    sys.exit(main())
