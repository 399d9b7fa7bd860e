"""SPEC §2 v4: an acceptance item's optional `inputs` (what its check reads, validated as scope
entries are) and `receipts = false`; `git lanes plan` shows what each check reads."""

from __future__ import annotations

import json

import pytest

from conftest import git
from helpers import all_refs, lanes, lanes_json, write_initiative


def plan_with(repo, extra: str) -> None:
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src"]}])
    path = repo / ".lanes" / "demo" / "a.toml"
    path.write_text(path.read_text() + extra)
    git(repo, "commit", "-qam", "acceptance extra")


@pytest.mark.parametrize("value, reason", [
    ('[]', "acceptance[0].inputs: must not be empty"),
    ('["/etc"]', "acceptance[0].inputs: entry '/etc' must not be absolute"),
    ('["src/../x"]', "acceptance[0].inputs: entry 'src/../x' must not contain a '.' or '..' segment"),
    ('["src/{a,b}"]', "acceptance[0].inputs: entry 'src/{a,b}' must not contain '{'"),
    ('[""]', "acceptance[0].inputs: an entry must not be empty"),
    ('"src"', "acceptance[0].inputs: Input should be a valid list"),
    ("[1]", "acceptance[0].inputs[0]: Input should be a valid string"),
])
def test_bad_inputs_are_refused_naming_file_field_and_reason(repo, value, reason):
    plan_with(repo, f"inputs = {value}\n")
    before = all_refs(repo)
    for command in (("plan", "demo"), ("start", "demo", "--yes")):
        code, out, err = lanes(repo, *command)
        assert code == 2 and out == ""
        assert err.strip() == f"error: .lanes/demo/a.toml: {reason}", err
    assert all_refs(repo) == before


def test_receipts_must_be_a_boolean(repo):
    plan_with(repo, 'receipts = "no"\n')
    code, out, err = lanes(repo, "plan", "demo")
    assert code == 2 and "acceptance[0].receipts" in err


def test_plan_shows_per_check_whether_it_declares_inputs(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"]}, {"id": "b", "scope": ["src/b"]}])
    path = repo / ".lanes" / "demo" / "a.toml"
    path.write_text(path.read_text() + 'inputs = ["src/a", "tests/*.py"]\n')
    git(repo, "commit", "-qam", "inputs")
    code, doc = lanes_json(repo, "plan", "demo")
    assert code == 0
    assert set(doc) == {"slug", "plan_digest", "children", "waves", "scope_conflicts"}
    checks = {c["task_id"]: c["checks"] for c in doc["children"]}
    assert checks == {"a": [{"id": "A1", "inputs": ["src/a", "tests/*.py"]}], "b": [{"id": "A1", "inputs": None}]}
    assert all({"task_id", "scope", "blocked_by", "intent_content_hash"} <= set(c) for c in doc["children"])
    code, out, err = lanes(repo, "plan", "demo")
    assert code == 0
    assert "    A1 reads src/a, tests/*.py" in out and "    A1 reads the whole tree" in out


def test_the_inputs_key_is_part_of_the_intent_identity_and_task_shows_it(repo):
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src"]}])
    code, before = lanes_json(repo, "plan", "demo")
    path = repo / ".lanes" / "demo" / "a.toml"
    path.write_text(path.read_text() + 'inputs = ["src"]\n')
    git(repo, "commit", "-qam", "inputs")
    code, after = lanes_json(repo, "plan", "demo")
    assert before["children"][0]["intent_content_hash"] != after["children"][0]["intent_content_hash"]
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    code, report = lanes_json(repo, "provision", "a")
    lane = next(h["lane_path"] for h in report["handoffs"] if h.get("lane_path"))
    code, out, err = lanes(lane, "task", "--json")
    assert json.loads(out)["acceptance"][0]["inputs"] == ["src"]


def test_input_entries_match_as_the_scope_rule_does(repo):
    """The receipt key's inputs: `[path, mode, oid]` of the files below a literal entry or matched by
    a glob entry (`*` not crossing `/`), plus `[entry, null]` for an entry matching nothing."""
    from git_lanes.gitio import Git
    from git_lanes.domain.receipts import input_entries

    for rel in ("src/a/x.py", "src/a/deep/y.py", "src/b.txt", "tests/t1.py", "tests/sub/t2.py"):
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")
    g = Git(str(repo))
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    found = input_entries(g, tree, ["src/a/", "tests/*.py", "run.sh", "nope", "nothing/*.c"])
    paths = [e[0] for e in found]
    assert paths == ["run.sh", "src/a/deep/y.py", "src/a/x.py", "tests/t1.py", "nope", "nothing/*.c"]
    assert found[0][1] == "100755" and found[-1] == ["nothing/*.c", None]
    blob = git(repo, "rev-parse", "HEAD:src/a/x.py").strip()
    assert ["src/a/x.py", "100644", blob] in found
