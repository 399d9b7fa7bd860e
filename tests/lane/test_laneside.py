"""The lane side (SPEC §5): real repositories, real linked worktrees, state built by hand."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from conftest import git
from git_lanes.core.canonical import sha256_digest
from git_lanes.core.errors import ExitCode, LanesError
from git_lanes.gitio import Git
from git_lanes.lane.side import LaneContext, done, give_up, inbox, task_info
from git_lanes.core.model import BatchRecord, Budget, Child, IntentIdentity, Intervention, Lane, LaneRecord, Revision
from git_lanes.plan.initiative import parse_intent
from git_lanes.domain.session import Session
from git_lanes.domain.snapshot import changed_paths, exclude_file, snapshot_tree, worktree_clean
from git_lanes.store import BatchStore, LaneStore

T = "2026-01-02T03:04:05.000Z"
BATCH_ID = "demo-20260102T030405Z-abcdef"
LANE_REF = "refs/notes/lanes/lane/demo/alpha"


def check_cmd(code: str) -> str:
    """An acceptance check running `code` with this Python, as one shlex-split string."""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


OUT_EXISTS = check_cmd("import pathlib,sys; sys.exit(0 if pathlib.Path('out.txt').exists() else 1)")
WRITES_FILE = check_cmd("open('gen.txt', 'w').write('generated')")


def intent_text(check: str, revision: int = 1, extra: str = "", scope: tuple[str, ...] = ("out.txt",)) -> str:
    return (f'task_id = "alpha"\nrevision = {revision}\ngoal = "Write out.txt"\nscope = {json.dumps(list(scope))}\n'
            f"[[acceptance]]\nid = \"A1\"\ntext = \"out.txt exists\"\ncheck = '''{check}'''\ntimeout = 60\n"
            + extra)


def make_lane(repo: Path, check: str = OUT_EXISTS, *, correction_due: str | None = None,
              interventions: list[Intervention] = (), revisions: list[Revision] = (),
              scope: tuple[str, ...] = ("out.txt",)) -> Path:
    """Commit the initiative `demo` on main, add the lane worktree of `alpha`, write the record."""
    folder = repo / ".lanes" / "demo"
    folder.mkdir(parents=True)
    (folder / "initiative.toml").write_text('title = "Demo"\ntasks = ["alpha", "beta"]\n')
    (folder / "alpha.toml").write_text(intent_text(check, scope=scope))
    (folder / "beta.toml").write_text('task_id = "beta"\nrevision = 1\ngoal = "B"\nscope = ["b"]\n'
                                      '[[acceptance]]\nid = "B1"\ntext = "b"\ncheck = "true"\n')
    git(repo, "add", ".lanes")
    git(repo, "commit", "-q", "-m", "plan demo")
    base = git(repo, "rev-parse", "HEAD").strip()
    lane_path = repo.parent / "lanes" / "alpha"
    git(repo, "worktree", "add", "-q", "-b", "imm-lane/demo/alpha", str(lane_path), base)
    lane = Lane(path=os.path.realpath(lane_path), branch="imm-lane/demo/alpha", base_head=base, run_id="r1")
    record = BatchRecord(
        batch_id=BATCH_ID, slug="demo", plan_digest="sha256:" + "0" * 64, base_head=base, branch="imm/demo",
        coordinator=str(repo), confirmation_time=T, budget=Budget(max_children=10, qa_failure_limit=2),
        max_parallel=1, created_at=T, updated_at=T,
        children=[Child(task_id="alpha", state="enrolled", lane=lane, correction_due=correction_due),
                  Child(task_id="beta")],
        interventions=list(interventions), revisions=list(revisions),
        # as `start` records them: what the intent-file exception of the scope rule compares against
        intent_identities={"alpha": IntentIdentity(**parse_intent(".lanes/demo/alpha.toml",
                                                                  intent_text(check, scope=scope).encode()).identity())})
    BatchStore(Git(repo)).write(None, record, summary="test", actor="test")
    return lane_path


def session(lane: Path) -> Session:
    return Session(cwd=str(lane), clock=lambda: T)


def lane_record(repo: Path) -> LaneRecord | None:
    return LaneStore(Git(repo)).read("demo", "alpha")[0]


def tree_files(repo: Path, tree: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", tree).split()


def refs(repo: Path) -> dict[str, str]:
    lines = git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    return dict(line.split(" ") for line in lines)


def intervention(at: str, task_id: str, text: str, kind: str = "instruction") -> Intervention:
    return Intervention(at=at, task_id=task_id, kind=kind, text=text, text_digest=sha256_digest(text))


# --- context ----------------------------------------------------------------------------------

def test_context_resolves_the_lane(repo):
    lane = make_lane(repo)
    ctx = LaneContext.load(session(lane))
    assert (ctx.slug, ctx.task_id, ctx.batch.batch_id, ctx.batch.task_id) == ("demo", "alpha", BATCH_ID, "alpha")
    assert ctx.lane_record is None and ctx.lane_commit is None
    assert os.path.realpath(ctx.worktree) == os.path.realpath(lane)


def test_context_refuses_a_worktree_that_is_not_the_recorded_lane(repo):
    make_lane(repo)
    other = repo.parent / "elsewhere"
    git(repo, "worktree", "add", "-q", "--detach", str(other))
    git(other, "checkout", "-q", "-b", "imm-lane/demo/beta")
    with pytest.raises(LanesError, match="beta has no lane"):
        LaneContext.load(session(other))
    git(repo, "worktree", "remove", "--force", str(repo.parent / "lanes" / "alpha"))
    git(other, "checkout", "-q", "imm-lane/demo/alpha")
    with pytest.raises(LanesError, match="is not the lane of alpha") as exc:
        LaneContext.load(session(other))
    assert exc.value.exit_code == ExitCode.USAGE


def test_context_needs_a_lane_branch_and_a_batch(repo):
    with pytest.raises(LanesError, match="not in a lane") as exc:
        LaneContext.load(session(repo))
    assert exc.value.exit_code == ExitCode.USAGE
    git(repo, "checkout", "-q", "-b", "imm-lane/demo/alpha")
    with pytest.raises(LanesError, match="no batch for demo") as exc:
        LaneContext.load(session(repo))
    assert exc.value.exit_code == ExitCode.USAGE


# --- task -------------------------------------------------------------------------------------

def test_task_info_shows_the_authorized_intent(repo):
    lane = make_lane(repo, interventions=[intervention(T, "alpha", "use tabs")])
    info = task_info(session(lane))
    assert info == {
        "task_id": "alpha", "slug": "demo", "batch_id": BATCH_ID, "run_id": "r1",
        "intent_path": ".lanes/demo/alpha.toml", "intent_revision": 1, "goal": "Write out.txt",
        "scope": ["out.txt"],
        "acceptance": [{"id": "A1", "text": "out.txt exists", "check": OUT_EXISTS, "timeout": 60}],
        "revision_approved": False,
        "unread": [{"at": T, "kind": "instruction", "text": "use tabs", "text_digest": sha256_digest("use tabs"),
                    "read": False}],
    }


def test_an_approved_revision_is_used_and_written_into_the_lane(repo):
    text = intent_text(OUT_EXISTS, revision=2, extra='[[acceptance]]\nid = "A2"\ntext = "more"\ncheck = "true"\n')
    rev = Revision(at=T, task_id="alpha", from_revision=1, to_revision=2, actor="executor", intent_text=text,
                   intent_content_hash=parse_intent(".lanes/demo/alpha.toml", text.encode()).content_hash)
    lane = make_lane(repo, revisions=[rev])
    info = task_info(session(lane))
    assert (info["intent_revision"], info["revision_approved"]) == (2, True)
    assert [a["id"] for a in info["acceptance"]] == ["A1", "A2"]
    (lane / "out.txt").write_text("x\n")
    result = done(session(lane))
    assert result["passed"] and [r["id"] for r in result["results"]] == ["A1", "A2"]
    assert (lane / ".lanes/demo/alpha.toml").read_text() == text
    assert git(repo, "show", f"{result['tree']}:.lanes/demo/alpha.toml") == text


def test_an_approved_revision_is_no_delivery_by_itself(repo):
    """SPEC §5: an empty delivery is refused before the approved intent is written into the lane, and
    a lane whose only change is that intent file delivers nothing either."""
    text = intent_text(OUT_EXISTS, revision=2, extra='[[acceptance]]\nid = "A2"\ntext = "more"\ncheck = "true"\n')
    rev = Revision(at=T, task_id="alpha", from_revision=1, to_revision=2, actor="executor", intent_text=text,
                   intent_content_hash=parse_intent(".lanes/demo/alpha.toml", text.encode()).content_hash)
    lane = make_lane(repo, revisions=[rev])
    before = (lane / ".lanes/demo/alpha.toml").read_text()
    with pytest.raises(LanesError, match="nothing to deliver"):
        done(session(lane))
    assert (lane / ".lanes/demo/alpha.toml").read_text() == before != text   # untouched
    (lane / ".lanes/demo/alpha.toml").write_text(text)   # the intent alone, as an earlier done wrote it
    with pytest.raises(LanesError, match="nothing to deliver"):
        done(session(lane))
    assert git(repo, "for-each-ref", "refs/notes/lanes/lane/") == ""   # no attempt recorded


def _tamper_child(repo: Path, change) -> None:
    """Rewrite alpha's child file of the stored record as a hostile lane could (any tool, SPEC §15)."""
    from adversary import record_files, rewrite_state

    path = next(p for p in record_files(repo, "demo") if p.startswith("children/") and p.endswith("/alpha.json"))
    doc = record_files(repo, "demo")[path]
    change(doc)
    rewrite_state(repo, "refs/notes/lanes/batch/demo", {path.encode(): json.dumps(doc).encode()})


@pytest.mark.parametrize("field, value", [("base_head", "--output=/tmp/x"), ("run_id", 7), ("path", ["x"])])
def test_a_tampered_lane_field_is_a_corrupt_record_for_the_lane_too(repo, field, value):
    """The lane commands read the record as plain data, yet check every field they use as the models do:
    a value that would reach Git or a path is refused (exit 128), never used."""
    lane = make_lane(repo)
    _tamper_child(repo, lambda doc: doc["lane"].__setitem__(field, value))
    with pytest.raises(LanesError, match=f"corrupt batch record of demo at [0-9a-f]+: lane.{field}") as exc:
        task_info(session(lane))
    assert exc.value.exit_code == ExitCode.FATAL


def test_a_lane_record_of_another_contract_is_never_written_over(repo):
    """SPEC §6.3: a lane record this build cannot read is a contract error for the lane side too (exit 128,
    nothing written), not a record to append this build's attempts to."""
    from adversary import rewrite_state

    lane = make_lane(repo)
    (lane / "out.txt").write_text("x\n")
    done(session(lane))
    ref = "refs/notes/lanes/lane/demo/alpha"
    doc = json.loads(git(repo, "show", f"{ref}:lane.json"))
    rewrite_state(repo, ref, {b"lane.json": json.dumps({**doc, "contract": "git_lanes/lane_record/v2"}).encode()})
    tip = git(repo, "rev-parse", ref).strip()
    (lane / "out.txt").write_text("y\n")
    with pytest.raises(LanesError, match="lane.contract: 'git_lanes/lane_record/v2'") as exc:
        done(session(lane))
    assert exc.value.exit_code == ExitCode.FATAL
    assert git(repo, "rev-parse", ref).strip() == tip


def test_an_intent_whose_hash_the_batch_did_not_authorize_is_validated_in_full(repo, monkeypatch):
    """The lane trusts an intent by the hash the batch authorized; one that does not match (here the
    identity was rewritten under the plan) goes through the validating path instead."""
    import git_lanes.lane.view as laneview
    from adversary import record_files, rewrite_state

    lane = make_lane(repo)
    assert task_info(session(lane))["scope"] == ["out.txt"]
    long_way, original = [], laneview._validated
    monkeypatch.setattr(laneview, "_validated", lambda *a: long_way.append(a) or original(*a))
    files = record_files(repo, "demo")
    path = next(p for p in files if p.startswith("identities/"))
    rewrite_state(repo, "refs/notes/lanes/batch/demo",
                  {path.encode(): json.dumps({**files[path], "intent_content_hash": "sha256:" + "1" * 64}).encode()})
    info = task_info(session(lane))
    assert len(long_way) == 1
    assert (info["intent_path"], info["scope"], info["acceptance"][0]["timeout"]) == (".lanes/demo/alpha.toml",
                                                                                      ["out.txt"], 60)


def test_a_fresh_lane_record_has_the_models_shape():
    """The lane side writes records from JSON data; a fresh one is exactly what the model dumps."""
    from git_lanes.lane.side import fresh_lane_data

    assert fresh_lane_data(BATCH_ID, "alpha", "r1") == \
        LaneRecord(batch_id=BATCH_ID, task_id="alpha", run_id="r1").model_dump(mode="json")


@pytest.mark.parametrize("field, value", [("inbox_read", -1), ("record_revision", True), ("claim", "x"),
                                          ("run_id", None)])
def test_a_tampered_lane_record_is_corrupt_for_the_lane(repo, field, value):
    """A lane write builds on its own record: a field it builds on that is not what the model allows is
    refused (exit 128) before anything is written."""
    lane = make_lane(repo)
    data = {**LaneRecord(batch_id=BATCH_ID, task_id="alpha", run_id="r1").model_dump(mode="json"), field: value}
    LaneStore(Git(repo)).write_data("demo", data, None, "forged")
    before = refs(repo)
    with pytest.raises(LanesError, match=f"lane record demo/alpha: contract error: lane.{field}") as exc:
        inbox(session(lane), ack=True)
    assert exc.value.exit_code == ExitCode.FATAL and refs(repo) == before


# --- done -------------------------------------------------------------------------------------

def test_done_passing_records_the_attempt(repo):
    lane = make_lane(repo)
    (lane / "out.txt").write_text("x\n")
    result = done(session(lane))
    assert set(result) == {"task_id", "passed", "tree", "results"}
    assert result["task_id"] == "alpha" and result["passed"] is True
    assert tree_files(repo, result["tree"]) == [".lanes/demo/alpha.toml", ".lanes/demo/beta.toml",
                                                ".lanes/demo/initiative.toml", "README", "out.txt"]
    (item,) = result["results"]
    assert set(item) == {"id", "command", "exit_code", "signal", "passed", "duration_ms", "output_tail"}
    assert (item["id"], item["exit_code"], item["passed"]) == ("A1", 0, True)
    rec = lane_record(repo)
    assert (rec.batch_id, rec.task_id, rec.run_id, rec.record_revision) == (BATCH_ID, "alpha", "r1", 1)
    (attempt,) = rec.qa_attempts
    assert (attempt.at, attempt.tree, attempt.passed, attempt.note) == (T, result["tree"], True, None)
    assert attempt.author_ident == "Ada Author <ada@example.com>"
    assert attempt.results[0].model_dump() == item


def test_done_failing_check(repo):
    # (v3: a delivery outside the scope fails before any check runs; this one is inside it)
    lane = make_lane(repo, check=check_cmd("import sys; print('nope'); sys.exit(1)"))
    (lane / "out.txt").write_text("x\n")
    result = done(session(lane))
    assert result["passed"] is False and result["results"][0]["exit_code"] == 1
    assert lane_record(repo).qa_attempts[0].passed is False


def test_checks_run_with_the_lane_environment(repo, monkeypatch):
    code = ("import os,pathlib; pathlib.Path(os.environ['OUT']).write_text(' '.join("
            "[os.environ[k] for k in ('GIT_LANES_SLUG','GIT_LANES_BATCH','GIT_LANES_TASK')] + [os.getcwd()]"
            " + [str('GIT_DIR' in os.environ)]))")
    lane = make_lane(repo, check=check_cmd(code))
    out = repo.parent / "env.txt"
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    (lane / "out.txt").write_text("x\n")
    assert done(Session(cwd=str(lane), clock=lambda: T, environ={k: v for k, v in os.environ.items()
                                                                   if k != "GIT_DIR"}))["passed"]
    assert out.read_text() == f"demo {BATCH_ID} alpha {os.path.realpath(lane)} False"


def test_nothing_to_deliver(repo):
    lane = make_lane(repo)
    with pytest.raises(LanesError) as exc:
        done(session(lane))
    assert (exc.value.code, exc.value.detail, exc.value.exit_code) == (
        "nothing_to_deliver", "nothing to deliver", ExitCode.REFUSED)
    (lane / "__pycache__").mkdir()
    (lane / "__pycache__" / "x.pyc").write_bytes(b"\0")
    git(repo, "config", "--add", "lanes.exclude", "__pycache__/")
    with pytest.raises(LanesError, match="nothing to deliver"):
        done(session(lane))
    assert lane_record(repo) is None


def test_done_refused_while_a_correction_is_due(repo):
    lane = make_lane(repo, correction_due="A1 failed twice")
    (lane / "out.txt").write_text("x\n")
    with pytest.raises(LanesError) as exc:
        done(session(lane))
    assert exc.value.message == "correction_due: wait for the coordinator's correction"
    assert exc.value.exit_code == ExitCode.REFUSED
    assert lane_record(repo) is None


def test_checks_that_change_the_delivery_fail_the_attempt(repo):
    lane = make_lane(repo, check=WRITES_FILE)
    (lane / "out.txt").write_text("x\n")
    result = done(session(lane))
    assert result["passed"] is False and result["results"][0]["passed"] is True
    assert result["note"] == "checks changed the delivery: gen.txt"
    (attempt,) = lane_record(repo).qa_attempts
    assert attempt.note == "checks changed the delivery: gen.txt" and attempt.passed is False
    assert "gen.txt" not in tree_files(repo, attempt.tree)


def test_done_leaves_the_lane_index_untouched(repo):
    lane = make_lane(repo)
    (lane / "staged.txt").write_text("staged\n")
    git(lane, "add", "staged.txt")
    (lane / "README").write_text("changed, not staged\n")
    (lane / "out.txt").write_text("untracked\n")
    git(lane, "status")  # let Git refresh its index first
    index = Path(git(lane, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
    before, cached = index.read_bytes(), git(lane, "diff", "--cached", "--name-status")
    result = done(session(lane))
    assert index.read_bytes() == before and git(lane, "diff", "--cached", "--name-status") == cached
    assert git(repo, "show", f"{result['tree']}:README") == "changed, not staged\n"
    assert {"staged.txt", "out.txt"} <= set(tree_files(repo, result["tree"]))


def test_excluded_and_ignored_files_stay_out_of_the_delivery(repo, hermetic):
    lane = make_lane(repo, scope=("out.txt", ".gitignore"))   # (v3: done refuses paths outside the scope)
    git(repo, "config", "--add", "lanes.exclude", "__pycache__/")
    git(repo, "config", "--add", "lanes.exclude", "*.tmp")
    (hermetic / ".config" / "git").mkdir(parents=True)
    (hermetic / ".config" / "git" / "ignore").write_text("*.log")
    (lane / ".gitignore").write_text("build/\n")
    for name in ("out.txt", "__pycache__/m.pyc", "pkg/__pycache__/n.pyc", "a.tmp", "debug.log", "build/x"):
        (lane / name).parent.mkdir(parents=True, exist_ok=True)
        (lane / name).write_text("x\n")
    result = done(session(lane))
    assert result["passed"]
    files = tree_files(repo, result["tree"])
    assert "out.txt" in files and ".gitignore" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith((".tmp", ".log")) or f.startswith("build/")]


def test_a_second_done_increments_record_revision(repo):
    lane = make_lane(repo)
    (lane / "other.txt").write_text("x\n")
    assert done(session(lane))["note"] == "delivery_outside_scope: other.txt"
    (lane / "other.txt").unlink()
    (lane / "out.txt").write_text("x\n")
    assert done(session(lane))["passed"]
    rec = lane_record(repo)
    assert rec.record_revision == 2 and [a.passed for a in rec.qa_attempts] == [False, True]


def test_a_restarted_lane_starts_a_fresh_record(repo):
    lane = make_lane(repo)
    store = LaneStore(Git(repo))
    store.write("demo", LaneRecord(batch_id=BATCH_ID, task_id="alpha", run_id="r0", record_revision=5,
                                   inbox_read=3), None, "old run")
    (lane / "out.txt").write_text("x\n")
    done(session(lane))
    rec = lane_record(repo)
    assert (rec.run_id, rec.record_revision, rec.inbox_read, len(rec.qa_attempts)) == ("r1", 1, 0, 1)


def test_done_changes_only_the_lane_record_ref(repo):
    lane = make_lane(repo)
    (lane / "out.txt").write_text("x\n")
    before = refs(repo)
    done(session(lane))
    after = refs(repo)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # (v4, SPEC §8.7) and this clone's receipts of the checks that passed
    assert {k for k in changed if not k.startswith("refs/notes/lanes/receipts/")} == {LANE_REF}


# --- give up ----------------------------------------------------------------------------------

def test_give_up(repo):
    lane = make_lane(repo)
    for bad in ("", "   \n", "x" * 4001):
        with pytest.raises(LanesError) as exc:
            give_up(session(lane), bad)
        assert exc.value.exit_code == ExitCode.USAGE
    assert lane_record(repo) is None
    result = give_up(session(lane), "the parser needs a new grammar")
    assert result == {"task_id": "alpha", "gave_up": {"at": T, "text": "the parser needs a new grammar"}}
    rec = lane_record(repo)
    assert rec.gave_up.text == "the parser needs a new grammar" and rec.record_revision == 1


# --- inbox ------------------------------------------------------------------------------------

def test_inbox_and_ack(repo):
    items = [intervention("2026-01-02T03:04:06.000Z", "alpha", "first"),
             intervention("2026-01-02T03:04:07.000Z", "beta", "not yours"),
             intervention("2026-01-02T03:04:08.000Z", "alpha", "second", kind="correction")]
    lane = make_lane(repo, interventions=items)
    listed = inbox(session(lane))
    assert [(i["text"], i["kind"], i["read"]) for i in listed] == [
        ("first", "instruction", False), ("second", "correction", False)]
    assert set(listed[0]) == {"at", "kind", "text", "text_digest", "read"}
    assert lane_record(repo) is None
    assert [i["text"] for i in task_info(session(lane))["unread"]] == ["first", "second"]
    inbox(session(lane), ack=True)
    rec = lane_record(repo)
    assert (rec.inbox_read, rec.record_revision) == (2, 1)
    tip = refs(repo)[LANE_REF]
    assert [i["read"] for i in inbox(session(lane), ack=True)] == [True, True]
    assert refs(repo)[LANE_REF] == tip  # nothing changed, nothing written
    assert task_info(session(lane))["unread"] == []


# --- snapshot helpers ---------------------------------------------------------------------------

def test_worktree_clean_and_changed_paths(repo):
    git(repo, "config", "lanes.exclude", "*.tmp")
    g = Git(repo)
    assert worktree_clean(g, str(repo))
    (repo / "a.tmp").write_text("x")
    assert worktree_clean(g, str(repo))
    base = snapshot_tree(g, str(repo))
    assert base == git(repo, "rev-parse", "HEAD^{tree}").strip()
    (repo / "z.txt").write_text("z")
    (repo / "README").write_text("changed\n")
    assert not worktree_clean(g, str(repo))
    assert changed_paths(g, base, snapshot_tree(g, str(repo))) == ["README", "z.txt"]


def test_exclude_file_holds_the_user_excludes_and_is_rewritten_only_on_change(repo, tmp_path):
    user = tmp_path / "my-ignore"
    user.write_text("*.log")
    git(repo, "config", "core.excludesFile", str(user))
    git(repo, "config", "--add", "lanes.exclude", "__pycache__/")
    path = exclude_file(Git(repo))
    assert path == os.path.join(Git(repo).common_dir, "lanes", "exclude")
    assert Path(path).read_text() == "*.log\n__pycache__/\n"
    inode = os.stat(path).st_ino
    exclude_file(Git(repo))
    assert os.stat(path).st_ino == inode
    git(repo, "config", "--add", "lanes.exclude", "*.tmp")
    assert Path(exclude_file(Git(repo))).read_text() == "*.log\n__pycache__/\n*.tmp\n"
