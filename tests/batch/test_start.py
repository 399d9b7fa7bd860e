"""plan / start / status / log / contracts / schema: issue 2's commands against real repositories."""

from __future__ import annotations

import json
import os

import pytest

from conftest import git
from helpers import all_refs, git_lanes, lanes, lanes_json, snapshot_state, write_initiative

TASKS = [
    {"id": "lexer", "scope": ["src/lexer"]},
    {"id": "parser", "scope": ["src/parser"], "blocked_by": ["lexer"]},
    {"id": "docs", "scope": ["docs"]},
    {"id": "docs2", "scope": ["docs/extra.md"]},
]


@pytest.fixture
def demo(repo):
    write_initiative(repo, "demo", TASKS, final_checks=["python3 -c pass"])
    return repo


def test_plan_json(demo):
    code, doc = lanes_json(demo, "plan", "demo", "--max-parallel", "2")
    assert code == 0
    assert set(doc) == {"slug", "plan_digest", "children", "waves", "scope_conflicts"}
    assert [c["task_id"] for c in doc["children"]] == ["lexer", "parser", "docs", "docs2"]
    assert doc["waves"] == [["lexer", "docs"], ["parser", "docs2"]]
    assert doc["scope_conflicts"] == [{"task_id": "docs", "overlaps_with": ["docs2"]},
                                      {"task_id": "docs2", "overlaps_with": ["docs"]}]
    assert doc["plan_digest"].startswith("sha256:")


def test_plan_warns_when_the_working_tree_differs(demo):
    (demo / ".lanes" / "demo" / "lexer.toml").write_text("garbage")
    code, out, err = lanes(demo, "plan", "demo")
    assert code == 0
    assert "warning:" in err and "HEAD" in err


def test_a_plan_not_yet_committed_is_named_with_the_commit_that_fixes_it(demo):
    (demo / ".lanes" / "fresh").mkdir()
    (demo / ".lanes" / "fresh" / "initiative.toml").write_text('title = "t"\ntasks = []\n')
    before = all_refs(demo)
    for command in (("plan", "fresh"), ("start", "fresh", "--yes")):
        code, out, err = lanes(demo, *command)
        assert code == 2 and out == ""
        assert err.splitlines()[0].endswith("(the plan is read from a commit, and the one in the working tree is "
                                            "not committed)")
        assert err.splitlines()[1] == "hint: git add .lanes/fresh && git commit -m 'plan: fresh'"
    assert all_refs(demo) == before
    code, out, err = lanes(demo, "plan", "nothing")
    assert code == 2 and "hint:" not in err

def test_start_warns_about_an_ignored_environment_no_lane_will_get(demo):
    """node_modules/ in the coordinator, ignored, and neither lanes.setupCommand nor lanes.copy: every lane
    would lack it (checks fail there for no reason of the task's); `start` says so, and how to fix it."""
    (demo / ".git" / "info" / "exclude").write_text("node_modules/\n")
    (demo / "node_modules" / "pkg").mkdir(parents=True)
    code, out, err = lanes(demo, "start", "demo", "--yes")
    assert code == 0, err
    warning = [line for line in err.splitlines() if "node_modules/" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: node_modules/: ignored by Git, so no lane has it")
    # no package-lock.json: `npm ci` would fail; the hint fits the repository (SPEC §17.1 v4)
    assert warning[0].endswith("e.g. git config lanes.setupCommand 'npm install'")


@pytest.mark.parametrize("config", [("lanes.setupCommand", "true"), ("lanes.copy", "node_modules/")])
def test_no_environment_warning_once_lanes_get_one(demo, config):
    (demo / ".git" / "info" / "exclude").write_text("node_modules/\n")
    (demo / "node_modules" / "pkg").mkdir(parents=True)
    git(demo, "config", *config)
    code, out, err = lanes(demo, "start", "demo", "--yes")
    assert code == 0 and "node_modules" not in err, err


def test_shell_syntax_in_the_setup_command_refuses_start_before_anything_is_written(demo):
    git(demo, "config", "lanes.setupCommand", "npm ci && npm run build")
    before = all_refs(demo)
    code, out, err = lanes(demo, "start", "demo", "--yes")
    assert code == 2 and out == "" and err.startswith("error: lanes.setupCommand 'npm ci && npm run build'"), err
    assert all_refs(demo) == before and git(demo, "branch", "--show-current").strip() == "main"


def test_a_material_risk_is_shown_by_plan_and_the_start_confirmation(repo):
    """SPEC §2: `risk = "material"` is shown, with no other effect."""
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "extra": ['risk = "material"']},
                                    {"id": "b", "scope": ["src/b"]}])
    code, out, err = lanes(repo, "plan", "demo")
    assert code == 0 and "  a: src/a [risk: material]" in out.splitlines() and "  b: src/b" in out.splitlines()
    code, out, err = lanes(repo, "start", "demo")   # no terminal: the confirmation is shown, then refused
    assert code == 1 and "  material risk: a" in err.splitlines(), err


def test_start_status_log_end_to_end_through_git(demo):
    before = git(demo, "status", "--porcelain")
    proc = git_lanes(demo, "start", "demo", "--max-parallel", "2", "--yes", "--json")
    report = json.loads(proc.stdout)
    assert report["contract"] == "git_lanes/batch_report/v1"
    assert report["batch_state"] == "running" and report["max_parallel"] == 2
    provisions = [h for h in report["handoffs"] if h.get("action") == "provision"]
    assert [h["task_id"] for h in provisions] == ["lexer", "docs"]
    head = git(demo, "rev-parse", "HEAD").strip()
    assert all(h["base_head"] == head and h["lane_branch"] == f"imm-lane/demo/{h['task_id']}" for h in provisions)
    assert git(demo, "symbolic-ref", "HEAD").strip() == "refs/heads/imm/demo"
    assert git(demo, "status", "--porcelain") == before == ""  # no state files in the working tree
    refs = all_refs(demo)
    assert "refs/notes/lanes/batch/demo" in refs
    status1 = git_lanes(demo, "status", "--json")
    status2 = git_lanes(demo, "status", "--json")
    assert all_refs(demo) == refs  # status never writes
    assert json.loads(status1.stdout) == json.loads(status2.stdout)
    assert json.loads(status1.stdout)["batch_id"] == report["batch_id"]
    log = git_lanes(demo, "log").stdout.splitlines()
    assert len(log) == 1 and "started" in log[0]
    batch = json.loads(git(demo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    assert batch["contract"] == "git_lanes/batch_record/v1"
    assert batch["final_checks"] == ["python3 -c pass"]


def test_start_in_a_new_worktree(demo, tmp_path):
    coord = tmp_path / "coord"
    code, doc = lanes_json(demo, "start", "demo", "--worktree", str(coord), "--yes")
    assert code == 0
    assert git(coord, "symbolic-ref", "HEAD").strip() == "refs/heads/imm/demo"
    assert git(demo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    record = json.loads(git(demo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    assert record["coordinator"] == os.path.realpath(coord)
    # every command works from anywhere in the repository
    code, status = lanes_json(demo, "status", "demo")
    assert code == 0 and status["batch_state"] == "running"


def test_status_without_slug_chooses_the_only_batch(demo):
    lanes(demo, "start", "demo", "--yes")
    git(demo, "switch", "-q", "main")
    code, doc = lanes_json(demo, "status")
    assert code == 0 and doc["slug"] == "demo"


def refusal(root, *args):
    before = snapshot_state(root)
    code, out, err = lanes(root, "start", "demo", "--yes", *args)
    assert code == 1, (out, err)
    assert snapshot_state(root) == before, "a refused start wrote something"
    assert err.count("error:") == 1
    return err


def test_start_refusals(demo, tmp_path):
    (demo / "sub").mkdir()
    before = snapshot_state(demo)
    code, _, err = lanes(demo / "sub", "start", "demo", "--yes")
    assert code == 1 and "error: batch_not_toplevel:" in err and snapshot_state(demo) == before

    (demo / "untracked").write_text("x")
    assert "error: dirty_working_tree:" in refusal(demo)
    (demo / "untracked").unlink()

    git(demo, "update-index", "--skip-worktree", "README")
    assert "error: batch_index_flags:" in refusal(demo)
    git(demo, "update-index", "--no-skip-worktree", "README")

    git(demo, "branch", "imm")
    assert "error: batch_branch_exists:" in refusal(demo)
    git(demo, "branch", "-D", "imm")

    git(demo, "branch", "imm/demo")   # e.g. from a clone of a repository whose HEAD was a batch branch
    err = refusal(demo)
    assert err.splitlines() == ["error: batch_branch_exists: imm/demo exists and no finished batch of demo owns it",
                                "hint: keep it under another name (git branch -m imm/demo demo-before-lanes), "
                                "or start under another slug"]
    git(demo, "branch", "-D", "imm/demo")

    for clash in ("imm-lane", "imm-lane/demo"):   # no lane branch imm-lane/demo/<task> could be created
        git(demo, "branch", clash)
        assert f"error: batch_branch_exists: the branch {clash} blocks the lane branches {clash}/…" in refusal(demo)
        git(demo, "branch", "-D", clash)

    git(demo, "branch", "imm-lane/demo/lexer")
    assert "error: stale_lanes: imm-lane/demo/lexer" in refusal(demo)
    git(demo, "branch", "-D", "imm-lane/demo/lexer")

    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"contract": "git_lanes/contracts/v1", "batch_record": "git_lanes/batch_record/v2",
                                    "lane_record": "git_lanes/lane_record/v1",
                                    "batch_report": "git_lanes/batch_report/v1",
                                    "store_layout": "git_lanes/store_layout/v2"}))
    err = refusal(demo, "--executor-runtime", str(manifest))
    assert "error: batch_runtime_contract_mismatch: coordinator runtime" in err
    assert "batch_record: git_lanes/batch_record/v1 != git_lanes/batch_record/v2" in err

    code, _, _ = lanes(demo, "start", "demo", "--yes")
    assert code == 0
    assert "error: batch_already_active:" in refusal(demo)


def test_start_needs_confirmation_without_a_terminal(demo):
    before = snapshot_state(demo)
    proc = git_lanes(demo, "start", "demo", check=False, stdin=open(os.devnull))
    assert proc.returncode == 1
    assert "error: batch_confirmation_required:" in proc.stderr
    assert proc.stdout == ""
    assert snapshot_state(demo) == before


def test_start_refuses_critical_tasks(repo):
    write_initiative(repo, "demo", [{"id": "a", "extra": ['risk = "critical"']}])
    assert "error: batch_child_critical:" in refusal(repo)


def test_start_on_an_unborn_head(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    git(root, "init", "-q")
    code, _, err = lanes(root, "start", "demo", "--yes")
    assert code == 1 and "error: batch_head_unborn:" in err


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: (d / "lexer.toml").write_text((d / "lexer.toml").read_text().replace("revision = 1", 'revision = "1"')),
     "lexer.toml: revision:"),
    (lambda d: (d / "lexer.toml").write_text((d / "lexer.toml").read_text() + "colour = 1\n"), "lexer.toml: acceptance[0].colour: unknown key"),
    (lambda d: (d / "stray.toml").write_text('task_id = "stray"\n'), "initiative.toml: tasks:"),
    (lambda d: (d / "docs.toml").unlink(), "initiative.toml: tasks:"),
    (lambda d: (d / "lexer.toml").write_text((d / "lexer.toml").read_text().replace('"src/lexer"', '"../x"')),
     "lexer.toml: scope"),
])
def test_bad_plans_exit_2_with_one_error_and_write_nothing(demo, mutate, needle):
    mutate(demo / ".lanes" / "demo")
    git(demo, "add", "-A")
    git(demo, "commit", "-q", "-m", "break the plan")
    for args in (["plan", "demo"], ["start", "demo", "--yes"]):
        before = snapshot_state(demo)
        code, out, err = lanes(demo, *args)
        assert code == 2, err
        assert out == ""
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and needle in err
        assert snapshot_state(demo) == before


@pytest.mark.parametrize("args", [
    ["start", "demo", "--max-parallel", "0", "--yes"],
    ["start", "demo", "--final-check", "make test | tee log", "--yes"],
    ["start", "bad..slug", "--yes"],
    ["tick", "demo", "--offer", "nonsense"],
    ["tick", "demo", "--instruct", "{not json"],
    ["plan"],
    ["no-such-command"],
])
def test_bad_options_exit_2(demo, args):
    before = snapshot_state(demo)
    code, out, err = lanes(demo, *args)
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert snapshot_state(demo) == before


def test_not_a_repository_is_fatal(tmp_path):
    code, out, err = lanes(tmp_path, "status")
    assert code == 128 and err.startswith("error: not a git repository")
    # SPEC §16: a fatal error quotes the failing Git command and its stderr
    assert "'git rev-parse " in err and "fatal: not a git repository" in err and len(err.splitlines()) == 1


def test_contracts_and_schema(demo):
    code, out, _ = lanes(demo, "contracts")
    assert json.loads(out) == {"contract": "git_lanes/contracts/v1", "batch_record": "git_lanes/batch_record/v1",
                               "lane_record": "git_lanes/lane_record/v1", "batch_report": "git_lanes/batch_report/v1",
                               "store_layout": "git_lanes/store_layout/v2", "receipt": "git_lanes/receipt/v1"}
    code, out, _ = lanes(demo, "schema", "batch_record")
    schema = json.loads(out)
    assert "children" in schema["properties"] and "adopted_heads" in schema["properties"]


def test_log_json(demo):
    lanes(demo, "start", "demo", "--yes")
    code, doc = lanes_json(demo, "log")
    assert code == 0 and len(doc) == 1 and set(doc[0]) == {"at", "actor", "summary", "commit"}
