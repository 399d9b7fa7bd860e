"""The `git lanes` group: parse, call one use case, print, exit.

Only click is imported at start-up; the use cases and their heavy dependencies are imported inside the
command that needs them, so `--version`, `completion` and every TAB stay cheap. Errors never
reach the user as a traceback: a `LanesError` is one `error:` line with its exit code (SPEC §16).
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from . import render

EXIT_DOC = "Exit codes: 0 done, 1 refusal or negative result, 2 usage or invalid input, 128 fatal."
# The order `git lanes -h` and the man page list the commands in.
ORDER = ("plan", "start", "tick", "status", "show", "diff", "log", "task", "done", "inbox", "instruct", "review",
         "revise", "integrate", "verify", "resume", "retire", "provision", "release", "audit", "run", "demo", "push",
         "pull", "join", "work", "watch", "report", "stats", "contracts", "schema", "completion", "aliases", "help")


class LanesCommand(click.Command):
    """A command whose parse errors know their context: click raises an option given without its value
    with none, so the error could neither list the option's choices (SPEC §6.2) nor point at `-h`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            if e.ctx is None:
                e.ctx = ctx
            raise


class LanesGroup(click.Group):
    command_class = LanesCommand

    def list_commands(self, ctx):
        return [name for name in ORDER if name in self.commands] + \
            sorted(name for name in self.commands if name not in ORDER)


@click.group(cls=LanesGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_DOC)
@click.version_option(__version__, "--version", prog_name="git-lanes", message="git-lanes version %(version)s")
def cli() -> None:
    """Run many tasks at once in Git worktrees; land each as one verified commit."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    render.begin()
    try:
        cli.main(args=args, prog_name="git lanes", complete_var="_GIT_LANES_COMPLETE", standalone_mode=False)
        return 0
    except click.UsageError as e:
        _usage_error(e)
        return 2
    except click.exceptions.Abort:
        if render.json_mode(args):
            render.emit_json(render.refusal(None, "aborted"))
        render.err("error", "aborted")
        return 1
    except click.exceptions.Exit as e:
        return e.exit_code
    except (Exception, KeyboardInterrupt) as e:
        return render.failure(e, render.json_mode(args))


def _usage_error(e: click.UsageError) -> None:
    """One `error:` line; click's multi-line messages (a missing option's "Choose from:" list) joined."""
    msg = e.format_message()
    choices = _option_choices(e)
    if choices and "Choose from" not in msg and "is not one of" not in msg:
        msg = f"{msg} Choose from: {', '.join(choices)}."
    lines = [line.strip() for line in msg.splitlines() if line.strip()]
    render.err("error", _choices_joined(lines) if lines else "usage error")
    if e.ctx is not None:
        click.echo(f"hint: see '{e.ctx.command_path} -h'", err=True)


def _option_choices(e: click.UsageError) -> list[str]:
    """The choices of the click.Choice option a `BadOptionUsage` (`--kind` given without a value) names."""
    if not isinstance(e, click.BadOptionUsage) or e.ctx is None:
        return []
    for param in e.ctx.command.params:
        if e.option_name in (*param.opts, *param.secondary_opts) and isinstance(param.type, click.Choice):
            return [str(choice) for choice in param.type.choices]
    return []


def _choices_joined(lines: list[str]) -> str:
    """`Missing option '--x'. Choose from:` + `a,` `b` lines -> `... Choose from: a, b.`"""
    head, rest = lines[0], lines[1:]
    if head.endswith("Choose from:") and rest:
        return head + " " + " ".join(rest).rstrip(".") + "."
    return " ".join(lines)


