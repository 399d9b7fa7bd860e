"""Generate `man/git-lanes.1` in Git's own man-page style.

Generated parts come from the code: SYNOPSIS and COMMANDS from the click command tree
(`git_lanes.cli.cli`: every command, argument and option with its help, choices and
default), the aliases from `git_lanes.surface.aliases`, REASON CODES from `git_lanes.core.reasons`.
Hand-written parts live in `man/sections/*.txt` (and `man/sections/commands/<name>.txt`,
appended to that command) in a small AsciiDoc-like markup:

- blank lines separate paragraphs;
- a line `term::` starts a labeled item; its text follows, indented by four spaces;
- lines between two `----` lines are shown verbatim (examples);
- `code` between backquotes is shown in bold.

`python -m git_lanes.cli.manpage [ROOT]` rewrites ROOT/man/git-lanes.1 (ROOT: the repository
root, default the current directory); `--check` exits 1 when the file is stale. The output
is deterministic: no date from the clock, only the package version.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click

from .. import __version__

MAN_PATH = "man/git-lanes.1"
SECTIONS_DIR = "man/sections"
SUMMARY = "Run many tasks at once in Git worktrees and land each as one verified commit"
WIDTH = 78


# -- roff -----------------------------------------------------------------------------------

def esc(text: str) -> str:
    """Escape plain text for roff (backslashes, hyphens, leading dots and quotes)."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return _protect_line_start(text)


def _protect_line_start(text: str) -> str:
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def inline(text: str) -> str:
    """Escape text and turn `code` into bold, as Git's pages show literal text."""
    parts = re.split(r"`([^`]*)`", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append("\\fB" + esc(part).replace("\\&", "") + "\\fR")
        else:
            out.append(esc(part).replace("\\&", ""))
    return _protect_line_start("".join(out))


def render_markup(text: str) -> list[str]:
    """Turn the hand-written markup (see the module doc) into roff lines."""
    lines = text.rstrip("\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.strip() == "----":
            j = i + 1
            block = []
            while j < len(lines) and lines[j].strip() != "----":
                block.append(lines[j])
                j += 1
            out += [".sp", ".if n \\{\\", ".RS 4", ".\\}", ".nf"]
            out += [esc(b) if b else "" for b in block]
            out += [".fi", ".if n \\{\\", ".RE", ".\\}"]
            i = j + 1
            continue
        if line.endswith("::") and not line.startswith(" "):
            out += [".PP", inline(line[:-2])]
            j = i + 1
            body = []
            while j < len(lines) and lines[j].startswith(" ") and lines[j].strip():
                body.append(lines[j].strip())
                j += 1
            out += [".RS 4", inline(" ".join(body)), ".RE"]
            i = j
            continue
        j = i
        para = []
        while j < len(lines) and lines[j].strip() and lines[j].strip() != "----" and not lines[j].endswith("::"):
            para.append(lines[j].strip())
            j += 1
        out += [".sp", inline(" ".join(para))]
        i = j
    return out


# -- the click tree ------------------------------------------------------------------------

def _long_name(opt: click.Option) -> str:
    longs = [o for o in opt.opts if o.startswith("--")]
    return (longs[0] if longs else opt.opts[0]).lstrip("-")


def _placeholder(opt: click.Option) -> str:
    if opt.is_flag or opt.count:
        return ""
    if opt.metavar:
        return opt.metavar
    t = opt.type
    if isinstance(t, click.Choice):
        return "(" + "|".join(str(c) for c in t.choices) + ")"
    if isinstance(t, click.IntRange) or t is click.INT:
        return "<n>"
    if isinstance(t, click.File):
        return "<file>"
    if isinstance(t, click.Path):
        return "<path>"
    return f"<{_long_name(opt)}>"


def _option_forms(opt: click.Option) -> str:
    """`-m, --message <message>` or `--[no-]delegate-revisions`."""
    if opt.is_flag and opt.secondary_opts:
        first = opt.opts[-1]
        second = opt.secondary_opts[0]
        if second == "--no-" + first[2:]:
            return f"--[no-]{first[2:]}"
        return f"{first}, {second}"
    forms = ", ".join(sorted(opt.opts, key=lambda o: (o.startswith("--"), o)))
    ph = _placeholder(opt)
    return f"{forms} {ph}" if ph else forms


def _synopsis_option(opt: click.Option) -> str:
    if opt.is_flag and opt.secondary_opts:
        text = _option_forms(opt)
    else:
        longs = [o for o in opt.opts if o.startswith("--")]
        name = longs[0] if longs else opt.opts[0]
        ph = _placeholder(opt)
        text = f"{name} {ph}" if ph else name
    if getattr(opt, "takes_list", False):
        return f"[{text}...]"
    if opt.required:
        return text + ("..." if opt.multiple else "")
    return f"[{text}]" + ("..." if opt.multiple else "")


def _argument(arg: click.Argument) -> str:
    if arg.metavar:   # arguments parsed by hand (an optional one before a required one) spell their usage
        return arg.metavar
    if isinstance(arg.type, click.Choice):
        text = "(" + "|".join(str(c) for c in arg.type.choices) + ")"
    else:
        name = arg.name or "arg"
        if arg.nargs == -1 and name.endswith("s"):
            name = name[:-1]
        text = f"<{name.replace('_', '-')}>"
    if arg.nargs == -1:
        text += "..."
    return text if arg.required else f"[{text}]"


def _is_help(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and "--help" in param.opts


def usage_words(name: str, cmd: click.Command) -> list[str]:
    words = ["git", "lanes", name]
    params = [p for p in cmd.params if not _is_help(p)]
    words += [_argument(p) for p in params if isinstance(p, click.Argument)]
    options = [p for p in params if isinstance(p, click.Option)]
    done: set[str] = set()
    for p in options:
        group = [q for q in options if _is_alternative(q) and q.name == p.name] if _is_alternative(p) else []
        if len(group) > 1:
            if p.name not in done:
                done.add(p.name)
                words.append("[" + " | ".join(q.opts[-1] for q in group) + "]")
            continue
        words.append(_synopsis_option(p))
    return words


def _is_alternative(opt: click.Option) -> bool:
    """One of several flags setting the same parameter to different values (--approve/--reject)."""
    return opt.is_flag and not opt.secondary_opts and not isinstance(opt.flag_value, bool)


def wrap_usage(words: list[str]) -> list[str]:
    """Lay a usage out like Git's SYNOPSIS: continuation lines under the first argument."""
    head = " ".join(words[:3])
    indent = " " * (len(head) + 1)
    lines = [head]
    for w in words[3:]:
        if len(lines[-1]) + 1 + len(w) > WIDTH and lines[-1].strip() != "":
            lines.append(indent + w)
        else:
            lines[-1] += " " + w
    return lines


def _help_text(cmd: click.Command) -> str:
    return inspect.cleandoc(cmd.help or "").strip()


def _option_help(opt: click.Option) -> str:
    text = (opt.help or "").strip()
    if text and text[-1].isalnum():
        text += "."
    if not text and isinstance(opt.type, click.Choice):
        text = "One of " + ", ".join(f"`{c}`" for c in opt.type.choices) + "."
    if opt.multiple and "repeat" not in text.lower():
        text += " Repeatable."
    if opt.show_default and opt.default is not None and not opt.is_flag:
        text += f" Default: `{opt.default}`."
    return text.strip()


# -- the page --------------------------------------------------------------------------------

def _section(root: Path, name: str) -> str:
    path = root / SECTIONS_DIR / f"{name}.txt"
    return path.read_text(encoding="utf-8")


def _command_extra(root: Path, name: str) -> str | None:
    path = root / SECTIONS_DIR / "commands" / f"{name}.txt"
    return path.read_text(encoding="utf-8") if path.exists() else None


def _sentence(text: str) -> str:
    """`the index has ...` -> `The index has ....`; a leading code or ref keeps its case."""
    first = text.split(" ", 1)[0]
    if first.isalpha() and first.islower():
        text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _head(title: str) -> list[str]:
    return [f'.SH "{title}"']


def render(root: Path | str | None = None) -> str:
    """The whole man page as text (deterministic)."""
    from ..core.reasons import GROUPS, REASON_TEXTS, TRACKER_STATUSES
    from ..surface.aliases import ALIASES
    from . import cli

    root = Path(root) if root is not None else Path.cwd()
    ctx = click.Context(cli, info_name="git lanes")
    commands = [(name, cli.get_command(ctx, name)) for name in cli.list_commands(ctx)]
    version = esc(__version__).replace(".", "\\&.")

    out = [
        "'\\\" t",
        '.\\"     Title: git-lanes',
        '.\\"    Manual: Git Manual',
        f'.\\"    Source: git-lanes {__version__}',
        '.\\"  Language: English',
        '.\\" Generated by `python -m git_lanes.cli.manpage` from git_lanes/cli/, git_lanes/core/reasons.py',
        '.\\" and man/sections/; edit those, not this file.',
        f'.TH "GIT\\-LANES" "1" "" "git\\-lanes {version}" "Git Manual"',
        ".ie \\n(.g .ds Aq \\(aq",
        ".el       .ds Aq '",
        ".nh",
        ".ad l",
    ]
    out += _head("NAME") + [f"git-lanes \\- {esc(SUMMARY)}"]

    out += _head("SYNOPSIS") + [".sp", ".nf", "\\fIgit lanes\\fR [\\-\\-version] [\\-h | \\-\\-help] <command> [<args>]"]
    for name, cmd in commands:
        words = usage_words(name, cmd)
        lines = wrap_usage(words)
        lines[0] = "\\fIgit lanes\\fR " + esc(lines[0][len("git lanes "):])
        out += [lines[0]] + [esc(line) for line in lines[1:]]
    out += [".fi", ".sp"]

    out += _head("DESCRIPTION") + render_markup(_section(root, "description"))

    out += _head("COMMANDS")
    out += [".sp", inline("Every command takes `-h` (or `--help`) for a short usage. "
                          "Commands that report take `--json`.")]
    for name, cmd in commands:
        usage = " ".join(usage_words(name, cmd)[2:])
        out += [".PP", "\\fB" + esc(usage) + "\\fR"]
        out += [".RS 4"]
        help_text = _help_text(cmd)
        if help_text:
            out += render_markup(help_text)
        extra = _command_extra(root, name)
        if extra:
            out += render_markup(extra)
        if name == "aliases":
            out += [".sp", "The aliases:", ".sp", ".if n \\{\\", ".RS 4", ".\\}", ".nf"]
            width = max(len(a) for a in ALIASES)
            out += [esc(f"git {a:<{width}}  = git {v}") for a, v in ALIASES.items()]
            out += [".fi", ".if n \\{\\", ".RE", ".\\}"]
        for p in cmd.params:
            if isinstance(p, click.Option) and not _is_help(p):
                out += [".PP", inline(f"`{_option_forms(p)}`"), ".RS 4", inline(_option_help(p) or "(no help)"), ".RE"]
        out += [".RE"]

    out += _head("CONFIGURATION") + render_markup(_section(root, "configuration"))

    out += _head("EXIT STATUS") + render_markup(_section(root, "exit-status"))

    out += _head("REASON CODES")
    out += [".sp", inline("Reason codes are stable strings; scripts and agents match on them. A refusal "
                          "prints `error: <code>: <detail>` (exit 1); a parked child's `reason` is "
                          "`<code>: <detail>`; lane refusals, instructions and revisions carry them in "
                          "the report. They are listed in `git_lanes/core/reasons.py`.")]
    for title, group in GROUPS:
        out += [".SS " + f'"{esc(title)}"']
        for code, meaning in group.items():
            out += [".PP", f"\\fB{esc(code)}\\fR", ".RS 4", inline(_sentence(meaning)), ".RE"]
    out += ['.SS "Tracker statuses (tracker_observations[].status)"']
    for code, meaning in TRACKER_STATUSES.items():
        out += [".PP", f"\\fB{esc(code)}\\fR", ".RS 4", inline(_sentence(meaning)), ".RE"]
    out += ['.SS "Reason texts"', ".sp", "These fixed texts appear as a reason without a code:"]
    for text, meaning in REASON_TEXTS.items():
        out += [".PP", f"\\fB{esc(text)}\\fR", ".RS 4", inline(_sentence(meaning)), ".RE"]

    out += _head("FILES AND REFS") + render_markup(_section(root, "files"))
    out += _head("ENVIRONMENT") + render_markup(_section(root, "environment"))
    out += _head("SHELL COMPLETION") + render_markup(_section(root, "completion"))
    out += _head("EXAMPLES") + render_markup(_section(root, "examples"))
    out += _head("NOTES") + render_markup(_section(root, "notes"))
    out += _head("SEE ALSO") + render_markup(_section(root, "see-also"))
    out += _head("GIT") + [".sp", inline("A Git extension: `git lanes` runs `git-lanes` from `PATH`, and "
                                         "`git lanes --help` opens this page. Not part of the git(1) suite.")]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    root = Path(args[0]) if args else Path.cwd()
    if not (root / SECTIONS_DIR).is_dir():
        print(f"error: {root / SECTIONS_DIR} not found; run from the repository root or name it", file=sys.stderr)
        return 2
    text = render(root)
    path = root / MAN_PATH
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if check:
        if current != text:
            print(f"error: {path} is stale; run: python -m git_lanes.cli.manpage", file=sys.stderr)
            return 1
        return 0
    if current != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
