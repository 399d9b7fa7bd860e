"""Revisions and reseal (SPEC §10.1-10.2): the pure bounds, reading the request, and the whole path
through the real CLI: revise -> the lane's next done -> gate -> reseal -> the next authorization."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from conftest import git
from flow import (child_of, cli, contains, done, exists, intent, ok, provision, reachable_from, record, start,
                  states, world, write_plan)
from git_lanes.decisions.revision import classify, decide, entry_covered, envelope_refusals, fixed_refusals
from git_lanes.core.errors import ExitCode, LanesError
from git_lanes.plan.initiative import parse_intent
from git_lanes.domain.revise import apply_revision, ask_first, read_request
from git_lanes.domain.session import Session


def parsed(text: str):
    return parse_intent(".lanes/demo/alpha.toml", text.encode()).intent


BASE = intent("alpha", scope=["src/alpha", "docs/alpha.md"], extra=['owner = "core"', "issue = 7"],
              acceptance=[("A1", "one", "true"), ("A2", "two", "true")])


def revised(**kw) -> str:
    args = dict(revision=2, scope=["src/alpha", "docs/alpha.md"], extra=['owner = "core"', "issue = 7"],
                acceptance=[("A1", "one", "true"), ("A2", "two", "true")])
    args.update(kw)
    return intent("alpha", **args)


# --- the pure bounds ------------------------------------------------------------------------------

def test_only_added_acceptance_items_are_compatible():
    change = classify(parsed(BASE), parsed(revised(acceptance=[("A1", "one", "true"), ("A2", "two", "true"),
                                                               ("A3", "three", "true")])))
    assert change.compatible and change.changed == ("acceptance",) and change.acceptance_added == ("A3",)
    assert decide("alpha", change, [], granted=False, yes=False, interactive=False).actor == "executor"


@pytest.mark.parametrize("acceptance, what", [
    ([("A1", "one", "false"), ("A2", "two", "true")], "acceptance_changed"),
    ([("A1", "one", "true")], "acceptance_removed"),
    ([("A2", "two", "true"), ("A1", "one", "true")], None),          # reordered
])
def test_changing_or_removing_acceptance_items_is_breaking_but_inside_the_envelope(acceptance, what):
    change = classify(parsed(BASE), parsed(revised(acceptance=acceptance)))
    assert not change.compatible and change.changed == ("acceptance",)
    if what:
        assert getattr(change, what)
    assert envelope_refusals(change) == []
    assert decide("alpha", change, [], granted=True, yes=False, interactive=False).actor == "batch-coordinator"


@pytest.mark.parametrize("kw, refusal", [
    ({"goal": "Something else"}, "goal changed"),
    ({"extra": ['owner = "docs"', "issue = 7"]}, "owner changed"),
    ({"extra": ["issue = 7"]}, "owner changed"),
    ({"extra": ['owner = "core"', "issue = 8"]}, "issue changed"),
    ({"extra": ['owner = "core"', "issue = 7", 'risk = "material"']}, "risk changed"),
    ({"extra": ['owner = "core"', "issue = 7", 'spec = "docs/spec.md"']}, "spec changed"),
    ({"extra": ['owner = "core"', "issue = 7", "review = true"]}, "review changed"),
    ({"scope": ["src"]}, "scope widened (src)"),
    ({"scope": ["src/alpha", "docs/alpha.md", "README"]}, "scope widened (README)"),
])
def test_envelope_refusals(kw, refusal):
    change = classify(parsed(BASE), parsed(revised(**kw)))
    assert not change.compatible
    assert refusal in envelope_refusals(change)
    d = decide("alpha", change, [], granted=True, yes=False, interactive=False)
    assert d.actor is None and refusal in d.refusal and "outside the delegated envelope" in d.refusal
    assert "--yes" in d.fallback
    # a person may still approve it
    assert decide("alpha", change, [], granted=True, yes=True, interactive=False).actor == "user"


def test_blocked_by_and_task_id_are_fixed_for_everyone():
    base = parsed(intent("alpha", blocked_by=["lexer"]))
    new = parsed(intent("alpha", revision=2))
    change = classify(base, new)
    fixed = fixed_refusals(base, new, change)
    assert fixed == ["blocked_by changed"] and "blocked_by changed" in envelope_refusals(change)
    d = decide("alpha", change, fixed, granted=True, yes=True, interactive=True)
    assert d.actor is None and "fixed for the whole batch" in d.refusal and "retire" in d.fallback


@pytest.mark.parametrize("entry, scope, covered", [
    ("src/a/b.py", ["src/a"], True),
    ("src/a/", ["src/a"], True),
    ("src/a", ["src/a/"], True),
    ("src/ab", ["src/a"], False),
    ("src", ["src/a"], False),
    ("src/x.py", ["src/*.py"], True),
    ("src/x.py/deep", ["src/*.py"], True),     # under what the glob matches (enforced as <e>/**)
    ("src/x.txt", ["src/*.py"], False),
    ("src/*.py", ["src/*"], True),
    ("src/*.py", ["src/*.py"], True),
    ("src/*", ["src/*.py"], False),
    ("src/a/b", ["src/**"], False),            # ** is only covered by itself
    ("SRC/a", ["src"], False),                 # case-sensitive, as enforcement is
])
def test_scope_narrowing_is_proved_or_counts_as_widening(entry, scope, covered):
    assert entry_covered(entry, scope) is covered


def test_breaking_without_grant_needs_a_person():
    change = classify(parsed(BASE), parsed(revised(scope=["src/alpha"])))
    refused = decide("alpha", change, [], granted=False, yes=False, interactive=False)
    assert refused.actor is None and "no revision-delegation grant" in refused.refusal
    assert "--delegate-revisions" in refused.fallback
    asked = decide("alpha", change, [], granted=False, yes=False, interactive=True)
    assert asked.actor == "user" and asked.needs_person
    assert decide("alpha", change, [], granted=False, yes=True, interactive=False).actor == "user"


# --- reading the request ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, needle", [
    ('task_id = "alpha"\nrevision = \n', "invalid TOML"),
    (BASE.replace("revision = 1", 'revision = "2"'), ": revision: "),
    ('colour = "red"\n' + BASE, ": colour: unknown key"),
    (BASE.replace('goal = "Make alpha"\n', ""), ": goal: required"),
    (BASE.replace('scope = ["src/alpha", "docs/alpha.md"]', 'scope = ["../etc"]'), ": scope: "),
])
def test_read_request_refuses_bad_input_naming_file_and_field(tmp_path, text, needle):
    path = tmp_path / "proposed.toml"
    path.write_text(text)
    with pytest.raises(LanesError) as exc:
        read_request("alpha", str(path))
    assert exc.value.exit_code == ExitCode.USAGE
    assert exc.value.detail.startswith(str(path)) and needle in exc.value.detail


def test_read_request_keeps_the_text_as_is(tmp_path):
    path = tmp_path / "anything.toml"
    path.write_bytes(revised().encode())
    req = read_request("alpha", str(path), yes=True)
    assert req.task_id == "alpha" and req.text == revised() and req.parsed.intent.revision == 2 and req.yes
    with pytest.raises(LanesError) as exc:
        read_request("alpha", str(tmp_path / "missing.toml"))
    assert exc.value.exit_code == ExitCode.USAGE and "missing.toml" in exc.value.detail


# --- the whole path through the CLI -------------------------------------------------------------------

ALPHA = intent("alpha", scope=["src/alpha"], acceptance=[("A1", "out exists", exists("src/alpha/out.txt"))])
BETA = intent("beta", scope=["src/beta"], acceptance=[("B1", "out exists", exists("src/beta/out.txt"))])


def two_lanes(repo: Path, *options: str) -> tuple[dict, Path, Path]:
    write_plan(repo, "demo", {"alpha": ALPHA, "beta": BETA})
    report = start(repo, "demo", "--max-parallel", "2", *options)
    return report, provision(repo, "alpha"), provision(repo, "beta")


def propose(tmp_path: Path, text: str, name: str = "proposal.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_delegated_revision_narrows_scope_changes_acceptance_integrates_and_reseals(repo, tmp_path):
    report, la, lb = two_lanes(repo, "--delegate-revisions")
    batch_id = report["batch_id"]
    narrowed = intent("alpha", revision=2, scope=["src/alpha/out.txt"],
                      acceptance=[("A1", "out says hello", contains("src/alpha/out.txt", "hello"))])
    code, report, err = cli(repo, "revise", "alpha", "--intent", propose(tmp_path, narrowed))
    assert code == 0, err
    assert report["lane_revision"] == {"task_id": "alpha", "accepted": True, "reason": None, "fallback": None,
                                       "actor": "batch-coordinator", "from_revision": 1, "to_revision": 2}
    granted = record(repo, "demo")["revision_delegation"]["confirmation_time"]
    [rev] = report["revisions"]
    assert rev["confirmation_ref"] == f"delegated-batch:{batch_id}@{granted}"
    assert rev["intent_text"] == narrowed and rev["actor"] == "batch-coordinator"
    # the lane sees the approved intent; its next done runs the new checks (the old check would pass)
    code, task, _ = cli(la, "task")
    assert task["intent_revision"] == 2 and task["scope"] == ["src/alpha/out.txt"]
    assert done(la, {"src/alpha/out.txt": "bye\n"})["passed"] is False
    assert (la / ".lanes/demo/alpha.toml").read_text() == narrowed   # done wrote the approved intent
    assert done(la, {"src/alpha/out.txt": "hello\n"})["passed"] is True
    digest_before = record(repo, "demo")["plan_digest"]
    report = ok(repo, "tick")
    assert states(report)["alpha"] == "integrated"
    commit = child_of(report, "alpha")["commit"]
    changed = git(repo, "diff-tree", "-r", "--name-only", "--no-commit-id", f"{commit}^", commit).split()
    assert changed == [".lanes/demo/alpha.toml", "src/alpha/out.txt"]
    assert git(repo, "show", f"{commit}:.lanes/demo/alpha.toml") == narrowed
    [reseal] = report["reseals"]
    plan = ok(repo, "plan", "demo")
    assert reseal["from_digest"] == digest_before and reseal["to_digest"] == plan["plan_digest"]
    assert reseal["intent_revision"] == 2 and record(repo, "demo")["plan_digest"] == plan["plan_digest"]
    ident = json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:identities/"
                       + _shard("alpha") + "/alpha.json"))
    assert ident["intent_revision"] == 2 and ident["intent_content_hash"] == rev["intent_content_hash"]
    # the commit's evidence note names the identity it carries: the revised intent, not the authorized one
    note = json.loads(git(repo, "notes", "--ref", "lanes/evidence", "show", commit))
    assert note["intent_identity"] == ident
    # the next tick's authorization passes; beta goes on to completion
    report = ok(repo, "tick")
    assert report["batch_state"] == "running" and states(report)["beta"] == "enrolled"
    assert done(lb, {"src/beta/out.txt": "b\n"})["passed"] is True
    report = ok(repo, "tick")
    assert report["batch_state"] == "completed", report["reason"]
    assert report["reason"] == "all enrollable children integrated"


def _shard(task: str) -> str:
    import hashlib

    return hashlib.sha1(task.encode()).hexdigest()[:2]


def test_a_lane_that_edits_its_own_intent_without_approval_is_refused_at_the_gate(repo):
    own = ".lanes/demo/alpha.toml"
    alpha = intent("alpha", scope=["src/alpha", own], acceptance=[("A1", "out", exists("src/alpha/out.txt"))])
    write_plan(repo, "demo", {"alpha": alpha, "beta": BETA})
    start(repo, "demo", "--max-parallel", "2", "--delegate-revisions")
    la, lb = provision(repo, "alpha"), provision(repo, "beta")
    head = git(repo, "rev-parse", "HEAD").strip()
    edited = alpha.replace("revision = 1", "revision = 2").replace('"src/alpha", ', "")
    assert done(la, {"src/alpha/out.txt": "x\n", own: edited})["passed"] is True
    assert done(lb, {"src/beta/out.txt": "b\n"})["passed"] is True
    report = ok(repo, "tick")
    alpha_child = child_of(report, "alpha")
    assert alpha_child["state"] == "needs_human"
    assert alpha_child["reason"] == "plan_changed: alpha: intent revision 1 -> 2 was not approved"
    assert states(report)["beta"] == "integrated"                  # a disjoint sibling goes on
    tip = git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "show", f"{tip}:{own}") == alpha and reachable_from(repo, head, tip)
    assert "reseals" not in report and "revisions" not in report


def test_compatible_revision_is_approved_as_executor_without_grant_or_yes(repo, tmp_path):
    _, la, _ = two_lanes(repo)
    added = intent("alpha", revision=2, scope=["src/alpha"],
                   acceptance=[("A1", "out exists", exists("src/alpha/out.txt")),
                               ("A2", "notes exist", exists("src/alpha/notes.txt"))])
    code, report, err = cli(repo, "revise", "alpha", "--intent", propose(tmp_path, added))
    assert code == 0, err
    assert report["lane_revision"] == {"task_id": "alpha", "accepted": True, "reason": None, "fallback": None,
                                       "actor": "executor", "from_revision": 1, "to_revision": 2}
    assert report["revisions"][0]["confirmation_ref"] is None
    result = done(la, {"src/alpha/out.txt": "x\n"})
    assert [r["id"] for r in result["results"]] == ["A1", "A2"] and result["passed"] is False
    assert done(la, {"src/alpha/notes.txt": "n\n"})["passed"] is True
    report = ok(repo, "tick")
    assert states(report)["alpha"] == "integrated" and report["reseals"][0]["intent_revision"] == 2


def test_breaking_revision_without_grant_and_without_yes_or_terminal_is_refused(repo, tmp_path):
    _, la, lb = two_lanes(repo)
    narrowed = intent("alpha", revision=2, scope=["src/alpha/out.txt"],
                      acceptance=[("A1", "out exists", exists("src/alpha/out.txt"))])
    before = world(repo, la, lb)
    path = propose(tmp_path, narrowed)
    code, report, err = cli(repo, "revise", "alpha", "--intent", path)
    assert code == 1
    refusal = report["lane_revision"]
    assert refusal["accepted"] is False and refusal["task_id"] == "alpha"
    assert refusal["reason"].startswith("batch_revision_refused: alpha: a breaking revision (scope narrowed)")
    # the fallback names the file given, so the command pastes as it is
    assert f"git lanes revise alpha --slug demo --intent {shlex.quote(str(path))}' at a terminal, or with --yes" \
        in refusal["fallback"]
    assert err.startswith("error: batch_revision_refused: alpha: a breaking revision")
    assert world(repo, la, lb) == before
    # the same file with --yes: approved as the user
    code, report, err = cli(repo, "revise", "alpha", "--intent", propose(tmp_path, narrowed), "--yes")
    assert code == 0, err
    assert report["lane_revision"]["actor"] == "user" and report["revisions"][0]["actor"] == "user"


def test_every_refusal_writes_nothing(repo, tmp_path):
    _, la, lb = two_lanes(repo, "--delegate-revisions")
    base = dict(revision=2, scope=["src/alpha"], acceptance=[("A1", "out exists", exists("src/alpha/out.txt"))])

    def variant(**kw):
        return intent("alpha", **{**base, **kw})

    cases = [
        (variant(goal="Another goal"), "alpha: outside the delegated envelope: goal changed", []),
        (variant(extra=['owner = "docs"']), "owner changed", []),
        (variant(extra=['risk = "material"']), "risk changed", []),
        (variant(extra=['spec = "docs/alpha.md"']), "spec changed", []),
        (variant(extra=["review = true"]), "review changed", []),
        (variant(extra=["issue = 3"]), "issue changed", []),
        (variant(scope=["src"]), "scope widened (src)", []),
        (variant(scope=["src/alpha", "src/beta"]), "scope widened (src/beta)", []),
        (variant(blocked_by=["beta"]), "blocked_by changed (fixed for the whole batch)", ["--yes"]),
        (intent("beta", revision=2, scope=["src/alpha"]), "alpha: task_id changed", ["--yes"]),
        (variant(revision=1), "alpha: revision 1 does not raise the current revision 1", ["--yes"]),
    ]
    before = world(repo, la, lb)
    for n, (text, needle, extra) in enumerate(cases):
        code, report, err = cli(repo, "revise", "alpha", "--intent", propose(tmp_path, text, f"p{n}.toml"), *extra)
        assert code == 1, (needle, err)
        refusal = report["lane_revision"]
        assert refusal["accepted"] is False and needle in refusal["reason"], (needle, refusal)
        assert refusal["reason"].startswith("batch_revision_refused: ") and refusal["fallback"]
        assert "revisions" not in report
        assert world(repo, la, lb) == before, needle
    # a task the batch does not have: a usage error (SPEC §6), nothing on stdout
    code, report, err = cli(repo, "revise", "gamma", "--intent", propose(tmp_path, variant(), "g.toml"))
    assert code == 2 and report is None and err.startswith("error: not a child of batch ") and "gamma" in err
    # bad input: exit 2, nothing on stdout, nothing written
    bad = propose(tmp_path, variant().replace("revision = 2", 'revision = "2"'), "bad.toml")
    code, report, err = cli(repo, "revise", "alpha", "--intent", bad)
    assert code == 2 and report is None and err.startswith(f"error: {bad}: revision: ")
    assert world(repo, la, lb) == before


def test_a_revision_of_a_child_that_is_not_enrolled_is_refused(repo, tmp_path):
    write_plan(repo, "demo", {"alpha": ALPHA, "beta": BETA})
    start(repo, "demo")
    before = world(repo)
    code, report, err = cli(repo, "revise", "beta", "--intent",
                            propose(tmp_path, intent("beta", revision=2, scope=["src/beta"]), "b.toml"), "--yes")
    assert code == 1 and report["lane_revision"]["reason"] == \
        "batch_revision_refused: beta is pending, not running in its Lane"
    assert world(repo) == before


def test_the_person_is_asked_before_the_slug_is_locked(repo, tmp_path):
    """A prompt under the slug's lock would hold every other command of the batch (SPEC §15: they wait
    `lanes.lockTimeout`, then batch_busy) for as long as the person reads it: `revise` asks first."""
    from git_lanes.tick import Request, run_tick

    two_lanes(repo)
    s = Session(cwd=str(repo))
    narrowed = propose(tmp_path, intent("alpha", revision=2, scope=["src/alpha/out.txt"]))
    free = []

    def answer(text):
        with s.batches.transaction("demo", actor="probe", clock=s.clock, timeout=0.5):
            free.append(True)   # another command gets the lock while the question is open
        return True

    req = ask_first(s, "demo", read_request("alpha", narrowed, interactive=True, confirm=answer))
    assert free == [True] and req.answer is True
    report = run_tick(s, "demo", Request(revision=req, actor="revise")).report
    assert report["lane_revision"]["accepted"] is True and report["lane_revision"]["actor"] == "user"
    assert report["revisions"][0]["confirmation_ref"] == f"terminal@{req.answered_at}"
    assert free == [True]   # asked once


def test_a_person_at_a_terminal_approves_or_declines(repo, tmp_path):
    _, la, lb = two_lanes(repo)
    s = Session(cwd=str(repo))
    rec = s.batches.read("demo").record
    narrowed = propose(tmp_path, intent("alpha", revision=2, scope=["src/alpha/out.txt"]))
    asked = []

    def no(text):
        asked.append(text)
        return False

    req = read_request("alpha", narrowed, interactive=True, confirm=no)
    item = apply_revision(s, rec, req, "2030-01-01T00:00:00.000Z")
    assert item["accepted"] is False and "declined at the terminal" in item["reason"]
    assert rec.revisions == [] and "revision 1 -> 2: scope narrowed" in asked[0]
    req = read_request("alpha", narrowed, interactive=True, confirm=lambda text: True)
    item = apply_revision(s, rec, req, "2030-01-01T00:00:00.000Z")
    assert item == {"task_id": "alpha", "accepted": True, "reason": None, "fallback": None, "actor": "user",
                    "from_revision": 1, "to_revision": 2}
    assert rec.revisions[0].confirmation_ref.startswith("terminal@")
    # a second revision must raise the now effective revision 2
    again = read_request("alpha", narrowed, yes=True)
    assert "does not raise the current revision 2" in apply_revision(s, rec, again, "2030-01-01T00:00:01.000Z")["reason"]


def test_a_passed_attempt_from_before_an_approved_revision_does_not_settle(repo, tmp_path):
    _, la, lb = two_lanes(repo, "--delegate-revisions")
    assert done(la, {"src/alpha/out.txt": "bye\n"})["passed"] is True
    narrowed = intent("alpha", revision=2, scope=["src/alpha/out.txt"],
                      acceptance=[("A1", "says hello", contains("src/alpha/out.txt", "hello"))])
    code, report, err = cli(repo, "revise", "alpha", "--intent", propose(tmp_path, narrowed))
    assert code == 0, err
    assert states(report)["alpha"] == "enrolled" and child_of(report, "alpha")["next_obligation"] == "implement"
    assert report["commits"] == []
