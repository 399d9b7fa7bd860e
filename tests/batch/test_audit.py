"""`git lanes audit` (SPEC §6): lane branches checked against the records, never writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from git_lanes.batch.audit import audit
from git_lanes.core.errors import LanesError
from git_lanes.domain.session import Session
from test_leaks import child, cli, cli_json, finish, make_batch, provision


def refs(root: Path) -> str:
    return git(root, "for-each-ref", "--format=%(refname) %(objectname)")


def run_audit(root: Path, *args: str) -> tuple[int, list[dict]]:
    before = refs(root)
    code, doc = cli_json(root, "audit", *args, check=False)
    assert refs(root) == before  # audit never writes
    return code, doc["findings"]


def kinds(findings: list[dict]) -> list[tuple[str, str]]:
    return [(f["kind"], f["branch"]) for f in findings]


def completed_batch(tmp_path) -> Path:
    """A batch of two lanes, both integrated, neither released yet."""
    root = make_batch(tmp_path / "repo")
    alpha, beta = provision(root, "alpha"), provision(root, "beta")
    (alpha / "a.txt").write_text("a\n")
    (beta / "b.txt").write_text("b\n")
    finish(root, alpha)
    report = finish(root, beta)
    assert report["batch_state"] == "completed", report
    return root


def test_a_clean_completed_batch_with_released_lanes_reports_nothing(tmp_path):
    root = completed_batch(tmp_path)
    cli(root, "release", "alpha")
    cli(root, "release", "beta")
    assert git(root, "for-each-ref", "refs/heads/imm-lane/") == ""
    assert run_audit(root) == (0, [])
    assert run_audit(root, "demo") == (0, [])
    proc = cli(root, "audit")
    assert proc.returncode == 0 and "nothing found" in proc.stdout


def test_a_running_batch_with_healthy_lanes_reports_nothing(tmp_path):
    root = make_batch(tmp_path / "repo")
    alpha, _ = provision(root, "alpha"), provision(root, "beta")   # beta: a healthy lane beside
    (alpha / "a.txt").write_text("a\n")
    git(alpha, "add", "a.txt")
    git(alpha, "commit", "-q", "-m", "executor work")  # an executor commit inside the scope is fine
    report = finish(root, alpha)
    assert child(report, "alpha")["state"] == "integrated"
    assert run_audit(root) == (0, [])


def test_a_stray_lane_branch_is_reported_and_exit_is_1(tmp_path):
    root = make_batch(tmp_path / "repo")
    provision(root, "alpha")
    git(root, "branch", "imm-lane/x/y")
    git(root, "branch", "imm-lane/demo/ghost")
    git(root, "branch", "imm-lane/demo/beta")   # beta is pending: it has no lane
    code, findings = run_audit(root)
    assert code == 1
    assert kinds(findings) == [("unknown_lane_branch", "imm-lane/demo/beta"),
                               ("unknown_lane_branch", "imm-lane/demo/ghost"),
                               ("unknown_lane_branch", "imm-lane/x/y")]
    assert "no batch record for x" in findings[2]["detail"]
    # with a slug, only that slug's branches
    code, findings = run_audit(root, "demo")
    assert code == 1 and [b for _, b in kinds(findings)] == ["imm-lane/demo/beta", "imm-lane/demo/ghost"]
    code, findings = run_audit(root, "x")
    assert code == 1 and kinds(findings) == [("unknown_lane_branch", "imm-lane/x/y")]
    # human output: one line per finding, exit 1
    proc = cli(root, "audit", check=False)
    assert proc.returncode == 1
    assert "unknown_lane_branch: imm-lane/x/y: no batch record for x" in proc.stdout


def test_a_tampered_lane_branch_is_reported(tmp_path):
    root = make_batch(tmp_path / "repo")
    alpha = provision(root, "alpha")
    (alpha / "a.txt").write_text("a\n")
    report = finish(root, alpha)
    lane_commit = child(report, "alpha")["lane"]["lane_commit"]
    assert git(root, "rev-parse", "imm-lane/demo/alpha").strip() == lane_commit
    assert run_audit(root) == (0, [])
    (alpha / "elsewhere.txt").write_text("not in scope\n")
    git(alpha, "add", "elsewhere.txt")
    git(alpha, "commit", "-q", "-m", "after the lane commit")
    code, findings = run_audit(root)
    assert code == 1
    assert kinds(findings) == [("lane_moved", "imm-lane/demo/alpha"), ("outside_scope", "imm-lane/demo/alpha")]
    assert lane_commit[:12] in findings[0]["detail"]
    assert "elsewhere.txt" in findings[1]["detail"]
    # the Python API agrees with the CLI
    assert audit(Session(cwd=str(root)), None) == findings
    with pytest.raises(LanesError) as unknown:   # (v3) an unknown slug is a usage error
        audit(Session(cwd=str(root)), "other")
    assert unknown.value.exit_code == 2


def test_a_lane_branch_off_its_recorded_base_is_reported(tmp_path):
    root = make_batch(tmp_path / "repo")
    provision(root, "alpha")
    tree = git(root, "rev-parse", "HEAD^{tree}").strip()
    orphan = git(root, "commit-tree", tree, "-m", "unrelated root").strip()
    old = git(root, "rev-parse", "imm-lane/demo/alpha").strip()
    git(root, "update-ref", "refs/heads/imm-lane/demo/alpha", orphan, old)
    code, findings = run_audit(root)
    assert code == 1
    assert kinds(findings) == [("lane_base_mismatch", "imm-lane/demo/alpha")]


def test_lanes_of_a_terminal_batch_not_released_are_stale(tmp_path):
    root = completed_batch(tmp_path)
    cli(root, "release", "alpha")
    code, findings = run_audit(root)
    assert code == 1
    assert kinds(findings) == [("stale_lane", "imm-lane/demo/beta")]
    assert "release --stale demo" in findings[0]["detail"]
    proc = cli(root, "audit", "--json", check=False)
    assert proc.returncode == 1 and json.loads(proc.stdout)["findings"] == findings
    assert "error:" not in proc.stdout
