"""Options and arguments shared by the commands, their completion, and the session they open."""

from __future__ import annotations

import sys

import click

from .lanecmds import session  # noqa: F401  (click-free: the lane side's fast path opens sessions too)


def complete_slugs(ctx, param, incomplete):
    from ..surface.complete import slugs

    return slugs(incomplete)


def complete_tasks(ctx, param, incomplete):
    from ..surface.complete import tasks

    return tasks(incomplete)


def json_option(f):
    from . import render

    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.",
                        callback=lambda ctx, param, value: render.asked_json(value))(f)


def slug_arg(f):
    return click.argument("slug", required=False, shell_complete=complete_slugs)(f)


def required_slug(f):
    return click.argument("slug", shell_complete=complete_slugs)(f)


def task_arg(f):
    return click.argument("task", shell_complete=complete_tasks)(f)


def slug_option(f):
    return click.option("--slug", default=None, shell_complete=complete_slugs, help="The initiative.")(f)


class _NonEmptyPath(click.Path):
    """A path that is not the empty string (an empty value is a usage error, never "not given") and holds
    no control character (Git's line-based answers about it, and every printed line, would break)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("must not be empty", param, ctx)
        from ..core.ids import has_control

        if isinstance(value, str) and has_control(value):
            self.fail("must not contain a control character (a newline, a tab, ...)", param, ctx)
        return super().convert(value, param, ctx)


PATH = _NonEmptyPath()


def path_option(f):
    return click.option("--path", "path", type=PATH, default=None, help="Where the lane worktree goes.")(f)


def start_options(f):
    opts = [
        click.option("--max-parallel", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Lanes running at once."),
        click.option("--verify-window", type=click.IntRange(min=1), default=None,
                     help="Candidates verified at once (default: lanes.verifyWindow, else min(4, max parallel))."),
        click.option("--max-children", type=click.IntRange(min=1), default=None,
                     help="Children that may ever get a lane (default: every task)."),
        click.option("--qa-failure-limit", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Failed attempts before a design-level correction is due."),
        click.option("--final-check", "final_checks", multiple=True,
                     help="A final check command (repeatable; default: the initiative's final_checks)."),
        click.option("--delegate-revisions/--no-delegate-revisions", default=False,
                     help="Grant the coordinator approval of breaking revisions inside the envelope."),
        click.option("--executor-runtime", type=PATH, default=None,
                     help="A contract manifest or git-lanes installation the lanes will run."),
        click.option("--worktree", type=PATH, default=None,
                     help="Create the coordinator as a new worktree at DIR."),
        click.option("--no-receipts", "no_receipts", is_flag=True,
                     help="No receipts in this batch (recorded: every tick and done obeys it)."),
        click.option("--budget-usd", type=click.FloatRange(min=0), default=None, metavar="X",
                     help="Start no session once the reported cost reaches X USD."),
        click.option("--budget-tokens", type=click.IntRange(min=0), default=None, metavar="N",
                     help="Start no session once the reported tokens reach N."),
        click.option("--yes", is_flag=True, help="Confirm without a prompt."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def start_opts(max_parallel, max_children, qa_failure_limit, final_checks, delegate_revisions, executor_runtime,
               worktree, yes, no_receipts=False, verify_window=None, budget_usd=None, budget_tokens=None):
    from ..batch.start import StartOptions

    return StartOptions(max_parallel=max_parallel, max_children=max_children, qa_failure_limit=qa_failure_limit,
                        final_checks=list(final_checks) or None, delegate_revisions=delegate_revisions,
                        executor_runtime=executor_runtime, worktree=worktree, yes=yes,
                        receipts=not no_receipts, verify_window=verify_window, budget_usd=budget_usd,
                        budget_tokens=budget_tokens)


def confirm_fn(yes: bool):
    """Ask at a terminal (stderr), or take `--yes`; no terminal and no `--yes` shows what it would have
    confirmed (stderr) and refuses."""
    def confirm(text: str) -> bool:
        from ..core.errors import refused

        if yes:
            return True
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            click.echo(text, err=True)
            raise refused("batch_confirmation_required", "no terminal to confirm on; read the above and pass --yes "
                                                         "to confirm it")
        click.echo(text, err=True)
        return click.confirm("Proceed?", default=False, err=True)
    return confirm
