"""Bad input found by the acceptance tests and an adversarial probe (issue 29 items 17, 23), through
the installed `git lanes`: one `error:` line, the documented exit code, nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import all_refs, git_lanes, snapshot_state, write_initiative


def _lanes(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _one_error(proc: subprocess.CompletedProcess, code: int, *said: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for text in said:
        assert text in lines[0], lines[0]
    return lines[0]


# -- (v4) a scope entry with one leading ./ --------------------------------------------------------------

def test_a_scope_entry_with_one_leading_dot_slash_means_the_entry_without_it(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["./src/a", " ./src/b/"], "check": "true"}])
    doc = json.loads(git_lanes(repo, "plan", "demo", "--json").stdout)
    assert doc["children"][0]["scope"] == ["src/a", "src/b/"]
    raw = git(repo, "show", "HEAD:.lanes/demo/a.toml")
    assert '"./src/a"' in raw   # the file is as written; its content hash is of the document as parsed
    write_initiative(repo, "other", [{"id": "a", "scope": ["src/a", " ./src/b/"], "check": "true"}])
    other = json.loads(git_lanes(repo, "plan", "other", "--json").stdout)
    assert other["children"][0]["intent_content_hash"] != doc["children"][0]["intent_content_hash"]


@pytest.mark.parametrize("entry", ["././src", "./", "./../x", "./.", " ./ "])
def test_only_one_leading_dot_slash_is_stripped(repo, entry):
    write_initiative(repo, "demo", [{"id": "a", "scope": [entry], "check": "true"}])
    _one_error(_lanes(repo, "plan", "demo"), 2, "scope")


# -- lanes.setupCommand that cannot be split, --executor with shell syntax ----------------------------------

@pytest.mark.parametrize("command", ["sh -c 'unterminated", "npm ci && npm test", 'echo "half'])
@pytest.mark.parametrize("verb", ["plan", "start", "run"])
def test_a_setup_command_that_could_never_run_is_refused_by_plan_start_and_run(repo, verb, command):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git(repo, "config", "lanes.setupCommand", command)
    before = snapshot_state(repo)
    args = {"plan": ["plan", "demo"], "start": ["start", "demo", "--yes"],
            "run": ["run", "demo", "--executor", "true", "--yes"]}[verb]
    _one_error(_lanes(repo, *args), 2, "lanes.setupCommand")
    assert snapshot_state(repo) == before


@pytest.mark.parametrize("option", ["--executor", "--corrector"])
@pytest.mark.parametrize("command", ["a && b", "echo hi > out", "FOO=1 true"])
def test_run_refuses_shell_syntax_in_its_commands_as_checks_are(repo, option, command):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    before = snapshot_state(repo)
    args = ["run", "demo", "--yes", *(["--executor", "true"] if option == "--corrector" else []), option, command]
    _one_error(_lanes(repo, *args), 2, option, "without a shell")
    assert snapshot_state(repo) == before


def test_a_quoted_operator_is_an_ordinary_argument_for_run(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    proc = _lanes(repo, "run", "demo", "--yes", "--executor", "definitely-missing-xyz '&&' b")
    assert "without a shell" not in proc.stderr and "command not found" in proc.stderr


# -- --instruct JSON with duplicate keys ----------------------------------------------------------------------

def test_duplicate_keys_in_instruct_json_are_refused(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    before = all_refs(repo)
    doc = '{"task_id": "a", "kind": "instruction", "text": "one", "text": "two", "session_state": "idle"}'
    _one_error(_lanes(repo, "tick", "--instruct", doc), 2, "--instruct", "duplicate key 'text'")
    assert all_refs(repo) == before


# -- .git/lanes/locks replaced by a file ----------------------------------------------------------------------

@pytest.mark.parametrize("verb", [["tick"], ["provision", "a"], ["status"]])
def test_a_locks_folder_replaced_by_a_file_is_one_error_line(repo, verb):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    locks = repo / ".git" / "lanes" / "locks"
    shutil.rmtree(locks)
    locks.write_text("not a folder\n")
    proc = _lanes(repo, *verb)
    if verb == ["status"]:   # status takes no lock
        assert proc.returncode == 0, proc.stderr
        return
    _one_error(proc, 128, str(locks))


# -- control characters in plan text -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("goal", '"Make a\\u0000 thing"'),
    ("goal", '"escape \\u001b[31mred"'),
    ("goal", '"carriage\\rreturn"'),
    ("owner", '"del\\u007f"'),
])
def test_a_control_character_in_plan_text_is_refused_by_plan_and_never_printed_raw(repo, field, value):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "goal": "placeholder"}])
    path = repo / ".lanes" / "demo" / "a.toml"
    text = path.read_text()
    if field == "goal":
        text = text.replace('goal = "placeholder"', f"goal = {value}")
    else:
        text = text.replace("scope =", f"{field} = {value}\nscope =")
    path.write_text(text)
    git(repo, "commit", "-qam", "control")
    before = snapshot_state(repo)
    for args in (["plan", "demo"], ["start", "demo", "--yes"]):
        line = _one_error(_lanes(repo, *args), 2, field, "control character")
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in line), repr(line)
    assert snapshot_state(repo) == before


def test_tabs_and_line_breaks_in_plan_text_are_fine(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "goal": "one\\tline\\nand more"}])
    assert _lanes(repo, "plan", "demo").returncode == 0


# -- start --worktree that Git cannot create ---------------------------------------------------------------

def test_start_with_a_worktree_git_cannot_create_writes_nothing(repo, tmp_path):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    gone = tmp_path / "gone"
    git(repo, "worktree", "add", "-q", "--detach", str(gone))
    shutil.rmtree(gone)   # registered but missing: `git worktree add` there refuses
    before = snapshot_state(repo)
    proc = _lanes(repo, "start", "demo", "--yes", "--worktree", str(gone))
    assert proc.returncode == 128, proc.stderr
    assert "worktree add" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot_state(repo) == before   # no record, no imm/demo
    assert not gone.exists()
    ok = _lanes(repo, "start", "demo", "--yes", "--worktree", str(tmp_path / "fine"))   # and nothing is in the way
    assert ok.returncode == 0, ok.stderr


# -- a provision refused for a failing setup leaves no folder ------------------------------------------------

@pytest.mark.parametrize("where", ["configured-root", "path"])
def test_a_provision_refused_for_a_failing_setup_leaves_no_empty_folder(repo, tmp_path, where):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    git_lanes(repo, "start", "demo", "--yes")
    git(repo, "config", "lanes.setupCommand", "false")
    root = tmp_path / "lanes-root"
    if where == "configured-root":
        git(repo, "config", "lanes.worktreeRoot", str(root))
        args = ["provision", "a"]
    else:
        args = ["provision", "a", "--path", str(root / "deep" / "a")]
    proc = _lanes(repo, *args)
    assert proc.returncode == 1 and "batch_lane_setup_failed" in proc.stderr, proc.stderr
    assert not root.exists(), list(root.rglob("*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_control_characters_in_human_output_are_shown_escaped(capsys):
    from git_lanes.cli import render

    render.say("goal\x00 with a bell\x07, a return\rand\x9b C1;\ttab\nline\r\n")
    render.err("error", "nul\x00")
    out, err = capsys.readouterr()
    assert out == "goal\\x00 with a bell\\x07, a return\\x0dand\\x9b C1;\ttab\nline\n\n"
    assert err == "error: nul\\x00\n"
