"""The cheap paths stay cheap: `--version`, `completion SHELL` and every TAB import neither
dulwich nor pydantic (proved with `python -X importtime`; timings live in bench/startup.py,
never in tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ergonomics_helpers import env_with_bin

HEAVY = ("dulwich", "pydantic", "pydantic_core")

# The console script's body, so the measurement does not depend on where it is installed.
ENTRY = "import sys; from git_lanes.cli import entry; sys.argv[0] = 'git-lanes'; entry()"


def imported_modules(args: list[str], cwd, ok: bool = True, **env: str) -> tuple[set[str], str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, *args], cwd=cwd,
                          env=env_with_bin(**env), capture_output=True, text=True, timeout=60)
    modules = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    assert proc.returncode == 0 or not ok, proc.stderr[-2000:]
    assert modules, "python -X importtime reported nothing"
    return modules, proc.stdout


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_version_is_light(tmp_path):
    modules, out = imported_modules(["--version"], tmp_path)
    assert out.startswith("git-lanes version ")
    assert "click" in modules and "git_lanes.cli" in modules
    assert heavy(modules) == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_is_light(tmp_path, shell):
    modules, out = imported_modules(["completion", shell], tmp_path)
    assert out
    assert heavy(modules) == []


def test_completion_request_is_light(tmp_path):
    modules, out = imported_modules([], tmp_path, _GIT_LANES_COMPLETE="bash_complete",
                                    COMP_WORDS="git-lanes ti", COMP_CWORD="1")
    assert out.split() == ["plain,tick"]
    assert heavy(modules) == []


def test_dynamic_completion_request_is_light(repo):
    # a slug and a task to complete, without a whole batch: completion reads refs only
    subprocess.run(["git", "update-ref", "refs/notes/lanes/batch/demo", "HEAD"], cwd=repo, check=True)
    subprocess.run(["git", "branch", "imm-lane/demo/lexer"], cwd=repo, check=True)
    modules, out = imported_modules([], repo, _GIT_LANES_COMPLETE="bash_complete",
                                    COMP_WORDS="git-lanes status ", COMP_CWORD="2")
    assert out.split() == ["plain,demo"]
    assert heavy(modules) == []
    modules, out = imported_modules([], repo, _GIT_LANES_COMPLETE="zsh_complete",
                                    COMP_WORDS="git-lanes show ", COMP_CWORD="2")
    assert out.split() == ["plain", "lexer", "_"]
    assert heavy(modules) == []


def test_a_real_command_does_import_them(repo):
    # the check above would pass vacuously if importtime missed lazy imports
    modules, _ = imported_modules(["status"], repo, ok=False)   # no batch: exit 2, after the imports
    assert heavy(modules) != []


def test_a_coordinator_command_skips_pydantic_plugin_discovery(tmp_path):
    """A record validated, a report built: no `importlib.metadata` (pydantic's plugin discovery), and
    the plugin loader still answers what else is asked of it (pydantic's own, loaded then)."""
    code = ("import sys; from git_lanes.core.model import Lane; "
            "Lane(path='/x', branch='imm-lane/s/a', base_head='0' * 40, run_id='r'); "
            "assert 'importlib.metadata' not in sys.modules, 'discovered plugins'; "
            "from pydantic.plugin._loader import get_plugins, PYDANTIC_ENTRY_POINT_GROUP; "
            "print(PYDANTIC_ENTRY_POINT_GROUP)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "pydantic"

def test_lane_commands_are_light(repo):
    """`task`, `inbox` and `done` run in every agent's loop: they read the records as plain data
    (no model, no pydantic) and objects through `git cat-file` (no dulwich), and answer the same."""
    from flow import intent, provision, start, write_plan
    from helpers import deliver

    write_plan(repo, "demo", {"a": intent("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    modules, out = imported_modules(["task", "--json"], lane)
    assert heavy(modules) == []
    doc = json.loads(out)
    assert (doc["task_id"], doc["scope"], doc["revision_approved"]) == ("a", ["src/a"], False)
    assert [a["timeout"] for a in doc["acceptance"]] == [1800]
    modules, out = imported_modules(["inbox", "--json"], lane)
    assert heavy(modules) == [] and json.loads(out) == []
    deliver(str(lane), {"src/a/out.txt": "a\n"})
    modules, out = imported_modules(["done", "--json"], lane)
    assert heavy(modules) == []
    done = json.loads(out)
    assert done["passed"] is True
    lane_git = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=lane, capture_output=True,
                              text=True, check=True).stdout.strip()
    # only the index of the passed delivery, for the tick that settles it
    assert [n for n in os.listdir(lane_git) if n.startswith("index.git-lanes-")] == [f"index.git-lanes-{done['tree']}"]
