"""The command line after issue 14 (SPEC §6 v3), through the installed `git lanes`: usage errors, --json for
contracts and schema, audit's error line, plan's conflicts once, show as a person reads it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import git
from flow import done, exists, intent, ok, provision, start, write_plan
from helpers import snapshot_state, write_initiative


def simple(task: str, scope: list[str] | None = None) -> str:
    return intent(task, scope=scope or [f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))])


def gl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=cwd, capture_output=True, text=True, input="")


@pytest.fixture
def running(repo: Path) -> Path:
    write_plan(repo, "demo", {"a": intent("a", scope=["src/a"], extra=["review = true"]), "b": simple("b")})
    start(repo, "demo", "--max-parallel", "2")
    return repo


@pytest.mark.parametrize("args, needle", [
    (("review", "a", "--approve", "--reject"), "--approve and --reject are mutually exclusive"),
    (("aliases", "--install", "--uninstall"), "--install and --uninstall are mutually exclusive"),
    (("integrate", "demo", "zz"), "not a child of batch"),
    (("log", "nosuch"), "no batch for nosuch"),
    (("status", "nosuch"), "no batch for nosuch"),
    (("audit", "nosuch"), "no batch and no lane branch for nosuch"),
    (("resume", "demo", "zz"), "zz is not a child"),
    (("show", "zz", "--slug", "demo"), "zz is not a child"),
    (("revise", "zz", "--slug", "demo", "--intent", "zz.toml"), "not a child of batch"),
])
def test_usage_errors_exit_2_and_write_nothing(running, args, needle):
    before = snapshot_state(running)
    config = git(running, "config", "--list", "--local")
    proc = gl(running, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and needle in proc.stderr
    assert snapshot_state(running) == before and git(running, "config", "--list", "--local") == config


def test_contracts_and_schema_take_json(repo):
    for args in (("contracts",), ("contracts", "--json")):
        proc = gl(repo, *args)
        assert proc.returncode == 0 and json.loads(proc.stdout)["contract"] == "git_lanes/contracts/v1"
    proc = gl(repo, "schema", "batch_record", "--json")
    schema = json.loads(proc.stdout)
    assert proc.returncode == 0 and "base_branch" in schema["properties"]
    child = schema["$defs"]["Child"]["properties"]
    assert "resumed_at" in child and "gate_results" in child


def test_audit_findings_end_with_an_error_line(running):
    git(running, "branch", "imm-lane/demo/ghost")
    proc = gl(running, "audit")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: audit_findings: 1 finding(s)"
    assert proc.stdout.startswith("unknown_lane_branch: imm-lane/demo/ghost")
    proc = gl(running, "audit", "--json")
    assert proc.returncode == 1 and len(json.loads(proc.stdout)["findings"]) == 1
    assert "error: audit_findings: 1 finding(s)" in proc.stderr


def test_plan_lists_each_conflict_once(repo):
    write_plan(repo, "demo", {"a": simple("a", ["src/shared"]), "b": simple("b", ["src/shared/x.py"]),
                              "c": simple("c", ["src/shared/y.py"]), "d": simple("d")})
    proc = gl(repo, "plan", "demo")
    conflicts = [line for line in proc.stdout.splitlines() if line.startswith("conflict:")]
    assert conflicts == ["conflict: a overlaps b, c"]
    doc = json.loads(gl(repo, "plan", "demo", "--json").stdout)     # the JSON keeps both directions (§3)
    assert [c["task_id"] for c in doc["scope_conflicts"]] == ["a", "b", "c"]


def test_show_prints_values_a_person_reads_and_the_gate_results(running):
    from git_lanes.core.model import CheckResultModel
    from git_lanes.domain.session import Session

    lane = provision(running, "b")
    assert done(lane, {"src/b/wrong.txt": "x\n"})["passed"] is False
    ok(running, "tick")
    proc = gl(running, "show", "b", "--slug", "demo")
    assert proc.returncode == 0
    text = proc.stdout
    for reprs in ("None", "{'", '{"', "[]", "True", "False"):
        assert reprs not in text, (reprs, text)
    assert text.startswith("b: enrolled (batch demo-")
    assert f"lane: {lane}" in text and "branch imm-lane/demo/b" in text
    assert "failed, tree" in text and "A1 (exit 1)" in text
    # a child parked by the gate keeps the failing rerun results in its record; show prints them
    s = Session(cwd=str(running))
    with s.transaction("demo", "test") as tx:
        tx.record.child("b").gate_results = [CheckResultModel(
            id="b:A1", command="python3 -m pytest", exit_code=1, signal=None, passed=False, duration_ms=5,
            output_tail="collected 3 items\nE   assert 'x' == 'y'\n1 failed\n")]
        tx.write("test: gate results")
    text = gl(running, "show", "b", "--slug", "demo").stdout
    assert "failed on the integration candidate:" in text
    assert "FAIL b:A1 (exit 1): python3 -m pytest" in text and "E   assert 'x' == 'y'" in text
    shown = json.loads(gl(running, "show", "b", "--slug", "demo", "--json").stdout)
    assert shown["child"]["gate_results"][0]["id"] == "b:A1"


def test_every_refusal_with_json_prints_one_document_and_the_error_line(running):
    """SPEC §6: on exit 1 with --json the document is the report (a rejected tick) or the refusal, and
    `error: <code>: <detail>` goes to stderr; a failed `done` prints its attempt, and nothing more."""
    from flow import cli

    for args, code in [(("start", "demo", "--yes"), "batch_already_active"),
                       (("release", "b", "--slug", "demo"), "batch_lane_release_refused"),
                       (("resume", "demo", "b", "--yes"), "batch_not_parked")]:
        proc = gl(running, *args, "--json")
        assert proc.returncode == 1, (args, proc.stderr)
        doc = json.loads(proc.stdout)   # exactly one document
        assert doc["refused"] is True and doc["code"] == code
        assert proc.stderr.splitlines()[0] == f"error: {doc['reason']}" and doc["reason"].startswith(code + ": ")
    rejected = gl(running, "tick", "--max-parallel", "3", "--json")   # a rejected tick: its report
    assert rejected.returncode == 1 and json.loads(rejected.stdout)["batch_state"] == "rejected"
    lane = provision(running, "b")
    status, doc, err = cli(lane, "done")                              # nothing delivered: a refusal
    assert status == 1 and doc["code"] == "nothing_to_deliver" and err.startswith("error: nothing_to_deliver: ")
    (lane / "src" / "b").mkdir(parents=True)
    (lane / "src" / "b" / "other.txt").write_text("not what the check wants\n")
    proc = gl(lane, "done", "--json")                                 # a failed attempt: its document only
    assert proc.returncode == 1 and json.loads(proc.stdout)["passed"] is False


def test_json_mode_is_the_parsed_option_not_a_word_of_argv(repo):
    """`--final-check --json` gives --final-check the value "--json": the refusal is human text, no
    JSON document; the real option prints the refusal as one document (SPEC §6)."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}])
    (repo / "untracked").write_text("dirty\n")
    proc = gl(repo, "start", "demo", "--yes", "--final-check", "--json")
    assert proc.returncode == 1 and proc.stdout == "" and "dirty_working_tree" in proc.stderr, proc
    proc = gl(repo, "start", "demo", "--yes", "--final-check", "true", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["reason"].startswith("dirty_working_tree"), proc
