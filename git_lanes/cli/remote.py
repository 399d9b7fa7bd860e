"""Beyond one machine (SPEC §14): push, pull, join."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import json_option, path_option, required_slug, session, task_arg


@cli.command("push")
@click.argument("remote", required=False, default="origin")
@json_option
def push_cmd(remote, as_json) -> None:
    """Push git-lanes state, batch and lane branches to REMOTE (atomic, with leases)."""
    from ..remote import push

    render.replication(push(session(), remote), "pushed", as_json)


@cli.command("pull")
@click.argument("remote", required=False, default="origin")
@json_option
def pull_cmd(remote, as_json) -> None:
    """Fetch git-lanes state from REMOTE and fast-forward what has one writer elsewhere."""
    from ..remote import pull

    render.replication(pull(session(), remote), "pulled", as_json)


@cli.command("join")
@required_slug
@task_arg
@path_option
@json_option
def join_cmd(slug, task, path, as_json) -> None:
    """Create, in another clone, the lane a pulled provision handoff names."""
    from ..remote import join

    doc = join(session(), slug, task, path)
    if as_json:
        render.emit_json(doc)
    else:
        render.say(f"joined {doc['task_id']}: {doc['lane_path']} on {doc['lane_branch']} at {doc['base_head'][:12]}")
        render.err("hint", "commit in the lane and 'git lanes push'; the coordinator has not admitted it")
