"""Contracts (SPEC §6.3): the manifest, `start --executor-runtime`, and lane records this build
cannot read (`batch_lane_contract_mismatch`, not `batch_lane_lost`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, states, world, write_plan

MANIFEST = {"contract": "git_lanes/contracts/v1", "batch_record": "git_lanes/batch_record/v1",
            "lane_record": "git_lanes/lane_record/v1", "batch_report": "git_lanes/batch_report/v1",
            "store_layout": "git_lanes/store_layout/v2"}
# the git_lanes that `git lanes` runs (installed beside this interpreter), not the one this test imported
SRC = subprocess.run([sys.executable, "-c", "import git_lanes, os; print(os.path.dirname(os.path.abspath("
                      "git_lanes.__file__)))"], cwd="/", capture_output=True, text=True, check=True).stdout.strip()


def plan(repo):
    write_plan(repo, "demo", {
        "alpha": intent("alpha", scope=["src/alpha"], acceptance=[("A1", "out", exists("src/alpha/out.txt"))]),
        "beta": intent("beta", scope=["src/beta"], acceptance=[("B1", "out", exists("src/beta/out.txt"))]),
    })


def test_contracts_prints_the_manifest(repo):
    import subprocess

    proc = subprocess.run(["git", "lanes", "contracts"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout) == {**MANIFEST, "receipt": "git_lanes/receipt/v1"}   # (v4) §17.6


def test_a_matching_manifest_file_starts_and_versions_are_not_compared(repo, tmp_path):
    plan(repo)
    manifest = tmp_path / "contracts.json"
    manifest.write_text(json.dumps({**MANIFEST, "version": "99.0", "git_lanes_version": "0.0.1"}))
    report = start(repo, "demo", "--executor-runtime", str(manifest))
    assert report["batch_state"] == "running"


def test_a_git_lanes_source_tree_is_read_for_its_contracts(repo):
    plan(repo)
    tree = Path(SRC).parent      # the directory that holds git_lanes/core/contracts.py
    assert (tree / "git_lanes" / "core" / "contracts.py").is_file()
    assert start(repo, "demo", "--executor-runtime", str(tree))["batch_state"] == "running"


def expected_refusal(path, diffs: str) -> str:
    return (f"error: batch_runtime_contract_mismatch: coordinator runtime {SRC} and Lane runtime {path} disagree "
            f"({diffs}); load the same runtime on both sides before starting the batch")


def test_a_mismatching_manifest_refuses_start_and_writes_nothing(repo, tmp_path):
    plan(repo)
    manifest = tmp_path / "lane-runtime.json"
    manifest.write_text(json.dumps({**MANIFEST, "lane_record": "git_lanes/lane_record/v2",
                                    "store_layout": "git_lanes/store_layout/v3"}))
    before = world(repo)
    code, doc, err = cli(repo, "start", "demo", "--yes", "--executor-runtime", str(manifest))
    assert code == 1 and doc["refused"] is True and doc["code"] == "batch_runtime_contract_mismatch"   # SPEC §6
    assert err.strip() == "error: " + doc["reason"]
    assert err.strip() == expected_refusal(manifest, "lane_record: git_lanes/lane_record/v1 != "
                                                     "git_lanes/lane_record/v2; store_layout: "
                                                     "git_lanes/store_layout/v2 != git_lanes/store_layout/v3")
    assert world(repo) == before
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_a_mismatching_source_tree_of_the_older_flat_layout_refuses(repo, tmp_path):
    """A runtime from before the package had folders: `git_lanes/contracts.py` (and `model.py`)."""
    plan(repo)
    other = tmp_path / "other-runtime"
    (other / "git_lanes").mkdir(parents=True)
    text = Path(SRC, "core", "contracts.py").read_text().replace('"git_lanes/batch_report/v1"', '"git_lanes/batch_report/v2"')
    (other / "git_lanes" / "contracts.py").write_text(text)
    (other / "git_lanes" / "model.py").write_text(Path(SRC, "core", "model.py").read_text())
    before = world(repo)
    code, doc, err = cli(repo, "start", "demo", "--yes", "--executor-runtime", str(other))
    assert code == 1
    assert err.strip() == expected_refusal(other, "batch_report: git_lanes/batch_report/v1 != "
                                                  "git_lanes/batch_report/v2")
    assert world(repo) == before


@pytest.mark.parametrize("content", ["not json at all", "[1, 2"])
def test_an_unreadable_runtime_manifest_refuses(repo, tmp_path, content):
    plan(repo)
    manifest = tmp_path / "broken.json"
    manifest.write_text(content)
    before = world(repo)
    code, doc, err = cli(repo, "start", "demo", "--yes", "--executor-runtime", str(manifest))
    assert code == 1 and err.startswith("error: batch_runtime_contract_mismatch: ")
    assert world(repo) == before


def write_lane_record_by_hand(repo: Path, slug: str, task: str, lane_json: str) -> None:
    blob = git(repo, "hash-object", "-w", "--stdin", input=lane_json).strip()
    tree = git(repo, "mktree", input=f"100644 blob {blob}\tlane.json\n").strip()
    commit = git(repo, "commit-tree", tree, "-m", "written by another runtime").strip()
    git(repo, "update-ref", f"refs/notes/lanes/lane/{slug}/{task}", commit)


def test_a_lane_record_this_build_cannot_read_parks_with_contract_mismatch(repo):
    plan(repo)
    report = start(repo, "demo", "--max-parallel", "2")
    _, lb = provision(repo, "alpha"), provision(repo, "beta")
    run_id = child_of(ok(repo, "status"), "alpha")["lane"]["run_id"]
    write_lane_record_by_hand(repo, "demo", "alpha", json.dumps({
        "contract": "git_lanes/lane_record/v9", "batch_id": report["batch_id"], "task_id": "alpha",
        "run_id": run_id, "record_revision": 1, "inbox_read": 0, "gave_up": None}))
    assert done(lb, {"src/beta/out.txt": "b\n"})["passed"] is True
    report = ok(repo, "tick")
    alpha = child_of(report, "alpha")
    assert alpha["state"] == "needs_human"
    assert alpha["reason"].startswith("batch_lane_contract_mismatch: ")
    assert "lane_record/v1" in alpha["reason"] and "batch_lane_lost" not in alpha["reason"]
    assert states(report)["beta"] == "integrated"            # the sibling is not stopped
    assert report["batch_state"] == "needs_human" and report["reason"] == alpha["reason"]


def test_a_lane_record_that_is_not_json_is_lost_not_a_contract_mismatch(repo):
    plan(repo)
    start(repo, "demo")
    provision(repo, "alpha")
    write_lane_record_by_hand(repo, "demo", "alpha", "{ this is not json")
    report = ok(repo, "tick")
    assert child_of(report, "alpha")["reason"] == "batch_lane_lost"


def fake_installation(root: Path, *, batch_report: str = "git_lanes/batch_report/v1") -> Path:
    """A prefix as pip lays it out: `<root>/lib/python3.X/site-packages/git_lanes/`; the package folder."""
    package = root / "lib" / "python3.99" / "site-packages" / "git_lanes"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text(Path(SRC, "__init__.py").read_text())
    (package / "core" / "model.py").write_text(Path(SRC, "core", "model.py").read_text())
    text = Path(SRC, "core", "contracts.py").read_text()
    (package / "core" / "contracts.py").write_text(text.replace('"git_lanes/batch_report/v1"', f'"{batch_report}"'))
    return package


@pytest.mark.parametrize("given", ["prefix", "package", "venv", "executable"])
def test_a_git_lanes_installation_is_read_for_its_contracts(repo, tmp_path, given):
    """SPEC §6.3: PATH is a manifest file or a git-lanes installation: a prefix (a venv), the package
    folder in its site-packages, or the `git-lanes` executable (asked `contracts --json`)."""
    plan(repo)
    package = fake_installation(tmp_path / "prefix")
    venv = Path(sys.executable).parent.parent   # this venv: git_lanes installed editable, bin/git-lanes
    path = {"prefix": tmp_path / "prefix", "package": package, "venv": venv,
            "executable": venv / "bin" / "git-lanes"}[given]
    assert start(repo, "demo", "--executor-runtime", str(path))["batch_state"] == "running"


@pytest.mark.parametrize("given", ["prefix", "package", "executable"])
def test_a_mismatching_installation_refuses(repo, tmp_path, given):
    plan(repo)
    package = fake_installation(tmp_path / "prefix", batch_report="git_lanes/batch_report/v2")
    script = tmp_path / "bin" / "git-lanes"
    script.parent.mkdir()
    manifest = {**MANIFEST, "batch_report": "git_lanes/batch_report/v2"}
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(manifest)}\nEOF\n")
    script.chmod(0o755)
    path = {"prefix": tmp_path / "prefix", "package": package, "executable": script}[given]
    before = world(repo)
    code, doc, err = cli(repo, "start", "demo", "--yes", "--executor-runtime", str(path))
    assert code == 1
    assert err.strip() == expected_refusal(path, "batch_report: git_lanes/batch_report/v1 != "
                                                 "git_lanes/batch_report/v2")
    assert world(repo) == before


@pytest.mark.parametrize("given", ["empty folder", "failing executable", "missing"])
def test_a_runtime_with_no_manifest_is_refused_in_the_specs_words(repo, tmp_path, given):
    plan(repo)
    path = tmp_path / "runtime"
    if given == "empty folder":
        path.mkdir()
    elif given == "failing executable":
        path.write_text("#!/bin/sh\necho 'no such command' >&2\nexit 2\n")
        path.chmod(0o755)
    before = world(repo)
    code, doc, err = cli(repo, "start", "demo", "--yes", "--executor-runtime", str(path))
    assert code == 1 and doc["code"] == "batch_runtime_contract_mismatch", err
    assert err.startswith(f"error: batch_runtime_contract_mismatch: coordinator runtime {SRC} and Lane runtime "
                          f"{path} disagree ("), err
    assert err.strip().endswith("); load the same runtime on both sides before starting the batch"), err
    assert ("no such command" in err) if given == "failing executable" else True
    assert world(repo) == before
