"""Tampered records are corrupt, never normalised (issue 29 items 15 and 24; SPEC §4, §6.3, §15).

A batch record that fails validation as stored — a field missing that every build writes, a string
where a number belongs, `base_head` naming a tree, a file of another mode, a gap in a list, a relative
lane path — is one `error:` line and exit 128 for every command that reads it, and nothing is
written (the next tick never coerces it and writes it back). A batch ref holding garbage is a
corrupt record, not "no batch". A lane record that is JSON of the wrong shape is a record this build
cannot read: the child parks `batch_lane_contract_mismatch`, not `batch_lane_lost`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import git
from helpers import all_refs, git_lanes, lane_path, write_initiative

REF = "refs/notes/lanes/batch/demo"


def _started(repo: Path, provision: bool = True) -> None:
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    git_lanes(repo, "start", "demo", "--yes")
    if provision:
        json.loads(git_lanes(repo, "provision", "a", "--json").stdout)


def _rewrite(repo: Path, ref: str, changes: dict[str, tuple[str, bytes] | None]) -> None:
    """A new state commit on `ref` whose tree is the old one with `changes` ({path: (mode, bytes) or
    None to delete}), as a hand with plain Git would make it."""
    index = repo / ".git" / "tamper-index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "read-tree", ref], cwd=repo, env=env, check=True)
    for path, change in changes.items():
        if change is None:
            subprocess.run(["git", "update-index", "--force-remove", path], cwd=repo, env=env, check=True)
            continue
        mode, data = change
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
                              check=True).stdout.decode().strip()
        subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}"], cwd=repo, env=env,
                       check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    index.unlink()
    commit = git(repo, "commit-tree", tree, "-p", ref, "-m", "tampered").strip()
    git(repo, "update-ref", ref, commit)


def _file(repo: Path, path: str) -> dict:
    return json.loads(git(repo, "show", f"{REF}:{path}"))


def _child_path(repo: Path, task: str) -> str:
    return next(line for line in git(repo, "ls-tree", "-r", "--name-only", REF).splitlines()
                if line.startswith("children/") and line.endswith(f"/{task}.json"))


def _edit_batch(repo: Path, edit) -> None:
    data = _file(repo, "batch.json")
    edit(data)
    _rewrite(repo, REF, {"batch.json": ("100644", json.dumps(data).encode())})


def _edit_child(repo: Path, task: str, edit) -> None:
    path = _child_path(repo, task)
    data = _file(repo, path)
    edit(data)
    _rewrite(repo, REF, {path: ("100644", json.dumps(data).encode())})


def _tree_of_head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD^{tree}").strip()


TAMPERS = {
    "no-batch-state": lambda repo: _edit_batch(repo, lambda d: d.pop("batch_state")),
    "no-contract": lambda repo: _edit_batch(repo, lambda d: d.pop("contract")),
    "string-for-number": lambda repo: _edit_batch(repo, lambda d: d.update(max_parallel="1")),
    "float-for-number": lambda repo: _edit_batch(repo, lambda d: d["budget"].update(qa_failure_limit=2.0)),
    "base-head-is-a-tree": lambda repo: _edit_batch(repo, lambda d: d.update(base_head=_tree_of_head(repo))),
    "symlink-batch-json": lambda repo: _rewrite(repo, REF, {
        "batch.json": ("120000", git(repo, "show", f"{REF}:batch.json").encode())}),
    "executable-child": lambda repo: _rewrite(repo, REF, {
        _child_path(repo, "a"): ("100755", git(repo, "show", f"{REF}:{_child_path(repo, 'a')}").encode())}),
    "child-without-state": lambda repo: _edit_child(repo, "b", lambda d: d.pop("state")),
    "child-count-as-string": lambda repo: _edit_child(repo, "a", lambda d: d.update(qa_failures="0")),
    "relative-lane-path": lambda repo: _edit_child(repo, "a", lambda d: d["lane"].update(path="lanes/a")),
    "gap-in-a-list": lambda repo: _rewrite(repo, REF, {
        "adopted_heads/0000/000001.json": ("100644", json.dumps({"from": "a" * 40, "to": "b" * 40}).encode())}),
    "child-indexes-gap": lambda repo: _edit_child(repo, "b", lambda d: d.update(index=5)),
    "child-in-the-wrong-file": lambda repo: _rewrite(repo, REF, {
        _child_path(repo, "b"): None,
        "children/00/b.json": ("100644", git(repo, "show", f"{REF}:{_child_path(repo, 'b')}").encode())}),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_batch_record_is_corrupt_and_never_rewritten(repo, tamper):
    _started(repo)
    TAMPERS[tamper](repo)
    before = all_refs(repo)
    for args in (["status"], ["status", "--json"], ["tick"], ["integrate"], ["show", "a"], ["log", "demo"]):
        proc = subprocess.run(["git", "lanes", *args], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 128, (args, proc.returncode, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "corrupt batch record" in lines[0], (args,
                                                                                                            lines)
        assert "Traceback" not in proc.stderr
    assert all_refs(repo) == before   # nothing written, nothing "repaired"


def test_an_untampered_record_reads_as_before(repo):
    """(the control: the same commands on the record as written succeed)"""
    _started(repo)
    for args in (["status"], ["tick"], ["show", "a"]):
        assert subprocess.run(["git", "lanes", *args], cwd=repo, capture_output=True).returncode == 0, args


@pytest.mark.parametrize("content", ["garbage\n", "0123\n", ""])
def test_a_batch_ref_with_garbage_is_a_corrupt_record_not_no_batch(repo, content):
    _started(repo, provision=False)
    git(repo, "pack-refs", "--all")   # (a loose ref is what a hand edits: written below)
    (repo / ".git" / "refs" / "notes" / "lanes" / "batch").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / REF).write_text(content)
    for args in (["status", "demo"], ["tick", "demo"]):
        proc = subprocess.run(["git", "lanes", *args], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 128, (args, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "corrupt batch record of demo" in lines[0] and REF in lines[0], lines


def _write_lane_record(repo: Path, task: str, lane_json: bytes) -> None:
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=lane_json, capture_output=True,
                          check=True).stdout.decode().strip()
    tree = git(repo, "mktree", input=f"100644 blob {blob}\tlane.json\n").strip()
    commit = git(repo, "commit-tree", tree, "-m", "by hand").strip()
    git(repo, "update-ref", f"refs/notes/lanes/lane/demo/{task}", commit)


@pytest.mark.parametrize("lane_json", [b"[]", b'"lane"', b"42", b"null"])
def test_a_lane_record_of_the_wrong_shape_parks_contract_mismatch_not_lost(repo, lane_json):
    _started(repo)
    _write_lane_record(repo, "a", lane_json)
    report = json.loads(git_lanes(repo, "tick", "--json").stdout)
    child = next(c for c in report["children"] if c["task_id"] == "a")
    assert child["state"] == "needs_human"
    assert child["reason"].startswith("batch_lane_contract_mismatch: lane record demo/a: contract error: "), child
    assert "not a JSON object" in child["reason"]


def test_a_lane_record_without_its_contract_or_with_a_string_count_is_a_contract_mismatch(repo):
    _started(repo)
    report = json.loads(git_lanes(repo, "status", "--json").stdout)
    a = next(c for c in report["children"] if c["task_id"] == "a")
    base = {"contract": "git_lanes/lane_record/v1", "batch_id": report["batch_id"], "task_id": "a",
            "run_id": a["lane"]["run_id"], "record_revision": "1", "inbox_read": 0, "gave_up": None}
    _write_lane_record(repo, "a", json.dumps(base).encode())
    report = json.loads(git_lanes(repo, "tick", "--json").stdout)
    a = next(c for c in report["children"] if c["task_id"] == "a")
    assert a["reason"].startswith("batch_lane_contract_mismatch: ") and "record_revision" in a["reason"], a
    lane = lane_path(report, "a")
    proc = subprocess.run(["git", "lanes", "task"], cwd=lane, capture_output=True, text=True)
    assert proc.returncode == 128 and "contract error" in proc.stderr, proc.stderr
