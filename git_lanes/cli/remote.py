"""Beyond one machine (SPEC §14): push, pull, join, work."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import complete_slugs, complete_tasks, json_option, path_option, session

REMOTE_HELP = "The remote the batch travels through (a configured remote)."


@cli.command("push")
@click.argument("remote", required=False, default="origin")
@json_option
def push_cmd(remote, as_json) -> None:
    """Push git-lanes state, batch and lane branches to REMOTE (atomic, with leases)."""
    from ..remote import push_retrying

    doc = push_retrying(session(), remote)
    for r in doc["refs"]:   # SPEC §14 v3: a lease that failed on every try is reported remote_moved
        if r["status"] == "rejected":
            r["status"] = "remote_moved"
    render.replication(doc, "pushed", as_json)


@cli.command("pull")
@click.argument("remote", required=False, default="origin")
@json_option
def pull_cmd(remote, as_json) -> None:
    """Fetch git-lanes state from REMOTE and fast-forward what has one writer elsewhere."""
    from ..remote import pull

    render.replication(pull(session(), remote), "pulled", as_json)


@cli.command("join")
@click.argument("first", metavar="[<slug>]", shell_complete=complete_slugs)
@click.argument("task", required=False, metavar="<task>", shell_complete=complete_tasks)
@click.option("--remote", default="origin", show_default=True, help=REMOTE_HELP)
@click.option("--slug", "slug_opt", default=None, shell_complete=complete_slugs, help="The initiative.")
@path_option
@json_option
def join_cmd(first, task, remote, slug_opt, path, as_json) -> None:
    """Claim, in this clone, the lane a pulled provision handoff names."""
    from ..core.errors import usage
    from ..remote.claims import join

    slug, task = (None, first) if task is None else (first, task)
    if slug_opt is not None:   # SPEC §6: every command that names a task takes --slug
        if slug is not None and slug != slug_opt:
            raise usage(f"--slug {slug_opt} and the slug argument {slug} differ")
        slug = slug_opt
    doc = join(session(), slug, task, path, remote=remote)
    if as_json:
        render.emit_json(doc)
        return
    render.say(f"joined {doc['task_id']}: {doc['lane_path']} on {doc['lane_branch']} at {doc['base_head'][:12]} "
               f"(clone {doc['claim']['clone_id']})")
    render.err("hint", "the coordinator admits the claim on its next pull and tick; 'git lanes pull "
                       f"{remote}' shows it, then work in the lane and run 'git lanes done'")


@cli.command("work")
@click.argument("slug", required=False, shell_complete=complete_slugs)
@click.option("--remote", default="origin", show_default=True, help=REMOTE_HELP)
@click.option("--executor", required=True, help="The executor command, run in each lane (no shell).")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Lanes this machine holds at once; the task the longest chain waits for is joined first.")
@click.option("--once", is_flag=True, help="Join at most --jobs lanes, finish their sessions, then exit.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between pulls while nothing ends.")
@json_option
def work_cmd(slug, remote, executor, jobs, once, interval, as_json) -> None:
    """The executor machine's loop: join lanes of a remote batch and run sessions in them."""
    from ..run.work import work

    render.run_result(work(session(), slug, remote=remote, executor=executor, jobs=jobs, once=once,
                           interval=interval, as_json=as_json, out=render.say), as_json)
