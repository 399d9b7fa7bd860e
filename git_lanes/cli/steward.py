"""The built-in steward and the audit: provision, release, audit."""

from __future__ import annotations

import click

from . import render
from .app import cli
from .options import complete_tasks, json_option, path_option, session, slug_arg, slug_option, task_arg


@cli.command("provision")
@task_arg
@slug_option
@path_option
@json_option
def provision_cmd(task, slug, path, as_json) -> None:
    """Create the lane a provision handoff names, then tick with the offer."""
    from ..batch.steward import provision

    s = session()
    render.outcome(provision(s, s.choose_slug(slug), task, path), as_json)


@cli.command("release")
@click.argument("task", required=False, shell_complete=complete_tasks)
@slug_option
@click.option("--keep-branch", is_flag=True, help="Keep the lane branch.")
@click.option("--stale", is_flag=True, help="Remove clean lanes of terminal batches.")
@click.option("--remote", default="origin", show_default=True,
              help="Where the release of a lane joined in this clone is pushed.")
@json_option
def release_cmd(task, slug, keep_branch, stale, remote, as_json) -> None:
    """Remove a lane that a release handoff names (or --stale lanes of finished batches)."""
    from ..core.errors import usage
    from ..remote.claims import outside_lane, release
    from ..remote.stale import release_stale  # the steward's, or an executor clone's lost lanes

    s = outside_lane(session())
    if stale:
        doc = release_stale(s, s.choose_slug(slug or task), remote)
    else:
        if task is None:
            raise usage("name the task to release (or use --stale)")
        doc = release(s, s.choose_slug(slug), task, keep_branch=keep_branch, remote=remote)
    if as_json:
        render.emit_json(doc)
        return
    render.released(doc)


@cli.command("audit")
@slug_arg
@json_option
def audit_cmd(slug, as_json) -> None:
    """Check every imm-lane/* branch against the records; exit 1 on findings."""
    from ..batch.audit import audit

    findings = audit(session(), slug)
    if as_json:
        render.emit_json({"findings": findings})
    else:
        for f in findings:
            render.say(f"{f['kind']}: {f['branch']}: {f['detail']}")
        if not findings:
            render.say("audit: nothing found")
    if findings:
        render.err("error", f"audit_findings: {len(findings)} finding(s)")
        raise render.Fail(1)
