"""man/git-lanes.1 is current, complete and well-formed; `git lanes --help` opens it."""

from __future__ import annotations

import re
import shutil
import subprocess

import click
import pytest
from ergonomics_helpers import REPO_ROOT, env_with_bin, run

from git_lanes.cli import manpage
from git_lanes.core import reasons
from git_lanes.surface.aliases import ALIASES
from git_lanes.cli import cli

MAN = REPO_ROOT / manpage.MAN_PATH


@pytest.fixture(scope="module")
def page() -> str:
    return manpage.render(REPO_ROOT)


def plain(roff: str) -> str:
    """Roff source to comparable text: escapes undone, font changes dropped."""
    text = roff.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
    return re.sub(r"\\f[BIRP]", "", text)


def test_committed_man_page_is_current(page):
    assert MAN.read_text(encoding="utf-8") == page, (
        "man/git-lanes.1 is stale: run `python -m git_lanes.cli.manpage` and commit the result")


def test_generation_is_deterministic(page):
    assert manpage.render(REPO_ROOT) == page
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", page) is None   # no date from the clock


def test_check_mode_reports_staleness(tmp_path):
    shutil.copytree(REPO_ROOT / "man", tmp_path / "man")
    assert manpage.main([str(tmp_path)]) == 0
    assert manpage.main([str(tmp_path), "--check"]) == 0
    (tmp_path / manpage.MAN_PATH).write_text("stale\n")
    assert manpage.main([str(tmp_path), "--check"]) == 1
    assert manpage.main([str(tmp_path)]) == 0
    assert manpage.main([str(tmp_path), "--check"]) == 0


def test_every_command_and_option_is_documented(page):
    text = plain(page)
    ctx = click.Context(cli, info_name="git lanes")
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        assert f"git lanes {name}" in text, name
        for param in cmd.params:
            if isinstance(param, click.Option) and "--help" not in param.opts:
                for opt in param.opts:
                    if opt.startswith("--") and param.secondary_opts:
                        assert f"--[no-]{opt[2:]}" in text or opt in text, (name, opt)
                    else:
                        assert opt in text, (name, opt)


def test_sections_in_gits_order(page):
    heads = re.findall(r'^\.SH "([^"]+)"', page, flags=re.M)
    assert heads == ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "CONFIGURATION", "EXIT STATUS",
                     "REASON CODES", "FILES AND REFS", "ENVIRONMENT", "SHELL COMPLETION", "EXAMPLES", "NOTES",
                     "SEE ALSO", "GIT"]
    assert page.splitlines()[7].startswith('.TH "GIT\\-LANES" "1"')


def test_every_reason_code_config_key_and_alias_is_documented(page):
    text = plain(page)
    for code in list(reasons.REASONS) + list(reasons.TRACKER_STATUSES):
        assert code in text, code
    keys = {"lanes.lockTimeout", "lanes.worktreeRoot", "lanes.setupCommand", "lanes.exclude", "lanes.keep",
            "lanes.githubApiUrl", "lanes.installedAlias"}
    for path in (REPO_ROOT / "git_lanes").rglob("*.py"):  # every key the code reads
        keys |= set(re.findall(r'"(lanes\.[A-Za-z]+)"', path.read_text(encoding="utf-8")))
    for key in keys:
        assert f"\n.PP\n{key}\n.RS 4\n" in page, key   # its own entry under CONFIGURATION
    for name, value in ALIASES.items():
        assert re.search(rf"git {name} +\= git {value}", text), name
    for needle in ("git show refs/notes/lanes/batch/<slug>:batch.json",
                   "git log --notes=lanes/evidence imm/<slug>", "refs/notes/lanes/lane/<slug>/<task>",
                   "imm-lane/<slug>/<task>", "<git-common-dir>/lanes/locks/", "<git-common-dir>/lanes/restores/",
                   "<git-common-dir>/lanes/scratch/", "GIT_LANES_PROMPT", "GH_TOKEN", "NO_COLOR",
                   "GIT_LANES_DEBUG", "GIT_LANES_TASK"):
        assert needle in text, needle
    for code in ("\n0\n", "\n1\n", "\n2\n", "\n128\n"):
        assert f".PP{code}.RS 4" in page, code


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_groff_renders_without_warnings(page, tmp_path):
    proc = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_git_lanes_help_opens_the_man_page(repo, tmp_path):
    # what `pip install .` does with the data files: share/man/man1/git-lanes.1
    man1 = tmp_path / "share" / "man" / "man1"
    man1.mkdir(parents=True)
    shutil.copy(MAN, man1 / "git-lanes.1")
    env = env_with_bin(MANPATH=str(tmp_path / "share" / "man"), MANPAGER="cat", PAGER="cat",
                       MANWIDTH="80", MAN_KEEP_FORMATTING="0")
    proc = run(["git", "lanes", "--help"], repo, env=env, check=False)
    if proc.returncode != 0 and "No manual entry" in proc.stderr:
        pytest.skip("man could not find the page: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    text = re.sub(r".\x08", "", proc.stdout)
    assert "GIT-LANES(1)" in text and "REASON CODES" in text
    # `git lanes -h` reaches the program instead
    proc = run(["git", "lanes", "-h"], repo)
    assert "Usage: git lanes" in proc.stdout
