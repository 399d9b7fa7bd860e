"""The Parent in a box: run, demo."""

from __future__ import annotations

import sys

import click

from . import render
from .app import cli
from .options import PATH, confirm_fn, json_option, required_slug, session, start_options, start_opts


@cli.command("run")
@required_slug
@click.option("--executor", default=None, help="The executor command, run in each lane (no shell); "
                                               "required unless --remote.")
@click.option("--corrector", default=None, help="A command fed the failing checks' output on stdin.")
@click.option("--remote", default=None, help="Coordinate executors on other machines through this remote "
                                             "(they run 'git lanes work'); no local executor.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="With --remote: seconds between pull, tick, push rounds.")
@click.option("--new", "new", is_flag=True, help="Start a new batch even when the last one completed this plan.")
@start_options
@json_option
def run_cmd(slug, executor, corrector, remote, interval, new, as_json, yes, **kw) -> None:
    """Drive a batch unattended: provision, run executors, tick, correct, release."""
    from ..core.errors import usage
    from ..run import run

    if remote is not None:
        if executor is not None or corrector is not None:
            raise usage("--remote runs no local executor: --executor and --corrector go to 'git lanes work'")
        from ..run.coordinate import run_remote

        result = run_remote(session(), slug, remote=remote, opts=start_opts(yes=yes, **kw), confirm=confirm_fn(yes),
                            interval=interval, as_json=as_json, out=render.say)
        return render.run_result(result, as_json)
    if executor is None:
        raise usage("Missing option '--executor' (or --remote to coordinate 'git lanes work' machines)")
    result = run(session(), slug, executor=executor, corrector=corrector, opts=start_opts(yes=yes, **kw),
                 confirm=confirm_fn(yes), as_json=as_json, out=render.say, new=new)
    render.run_result(result, as_json)


@cli.command("demo")
@click.argument("directory", required=False, type=PATH)
@json_option
def demo_cmd(directory, as_json) -> None:
    """Build a sample project and run a whole batch on it, offline."""
    from ..run.demo import demo

    result = demo(directory, as_json=as_json, out=render.say)
    render.run_result(result, as_json, result.summary.get("after"))
    sys.stdout.flush()
