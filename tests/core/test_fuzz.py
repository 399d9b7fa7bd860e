"""Fuzzing every parser (issue 13, deliverable 4; SPEC §2, §6.1, §6.2, §4, §16): whatever the input,
a clean answer — a parsed value, or one error with the documented exit code — never a crash.

- intents and plans (`git_lanes.plan.initiative.parse_intent`, `load_plan`): arbitrary bytes, arbitrary TOML,
  and valid intents with one field replaced by an arbitrary value: a result or a usage error (2);
- offers (`git lanes tick --offer`) and instructions (`git lanes tick --instruct JSON`), through the
  command line on a running batch: exit 0, 1 or 2 with one `error:` line, and nothing written
  unless the answer is 0;
- batch records read back from Git: the record's files with one replaced by arbitrary JSON or
  bytes (`git_lanes.store.record_from_files`), and the same written into the record ref and read by
  `git lanes status`: a record or a corrupt-record error (128).

Bounded and deterministic (`derandomize=True`): the same examples on every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adversary import SLUG, World, record_files, rewrite_state, step, toml
from conftest import git
from helpers import lanes as lanes_inprocess

from git_lanes.core.errors import ExitCode, LanesError

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# JSON-like values: what a TOML or JSON document may hold
scalars = st.one_of(st.booleans(), st.integers(min_value=-2**70, max_value=2**70), st.floats(allow_nan=True),
                    st.text(max_size=40))
json_values = st.recursive(st.one_of(st.none(), scalars), lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)
toml_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(min_size=1, max_size=10), inner, max_size=3)), max_leaves=10)

INTENT: dict[str, Any] = {"task_id": "a", "revision": 1, "goal": "Do a", "scope": ["src/a"],
                          "acceptance": [{"id": "A1", "text": "works", "check": "python3 -c pass"}]}
FIELDS = ["task_id", "revision", "goal", "scope", "blocked_by", "owner", "risk", "spec", "issue", "review",
          "acceptance", "extra"]


def clean(exc: LanesError, code: ExitCode) -> None:
    assert exc.exit_code == code, (exc.exit_code, exc.message)
    assert exc.message and "\n" not in exc.message, repr(exc.message)


# -- plan files ---------------------------------------------------------------------------------------------

def parse(data: bytes) -> None:
    from git_lanes.plan.initiative import parse_intent

    try:
        parse_intent(".lanes/s/a.toml", data)
    except LanesError as exc:
        clean(exc, ExitCode.USAGE)


@settings(max_examples=150, **SETTINGS)
@given(st.binary(max_size=300))
def test_intent_from_arbitrary_bytes(data):
    parse(data)


@settings(max_examples=150, **SETTINGS)
@given(st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), toml_values, max_size=8))
def test_intent_from_arbitrary_toml(doc):
    try:
        text = toml(doc)
    except TypeError:
        return
    parse(text.encode())


@settings(max_examples=200, **SETTINGS)
@given(st.sampled_from(FIELDS), toml_values)
@example("scope", ["src/a"] * 3)
@example("acceptance", [{"id": "A1", "text": "t", "check": "'"}])
def test_valid_intent_with_one_field_replaced(field, value):
    doc = dict(INTENT)
    doc[field] = value
    try:
        text = toml(doc)
    except TypeError:
        return
    parse(text.encode())


def test_deeply_nested_toml_is_a_usage_error():
    parse(b"task_id = " + b"[" * 100_000 + b"]" * 100_000 + b"\n")


@settings(max_examples=100, **SETTINGS)
@given(st.dictionaries(st.sampled_from(["initiative.toml", "a.toml", "b.toml", "c.toml", "notes.md"]),
                       st.binary(max_size=120) | st.dictionaries(st.sampled_from(["title", "tasks", "final_checks",
                                                                                   "tracker", "task_id"]),
                                                                 toml_values, max_size=4).map(lambda d: toml(d).encode()),
                       max_size=4))
def test_plan_from_arbitrary_files(files):
    from git_lanes.plan.initiative import load_plan

    try:
        load_plan("s", files)
    except LanesError as exc:
        clean(exc, ExitCode.USAGE)


# -- offers and instructions, through the command line --------------------------------------------------------

@pytest.fixture
def running(tmp_path) -> World:
    w = World(tmp_path / "w").build()
    step(w.repo, "start", SLUG, "--yes", "--max-parallel", "3")
    step(w.repo, "provision", "core")
    return w


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def one_clean_answer(repo: Path, *argv: str, allowed: tuple[int, ...] = (0, 1, 2)) -> None:
    before = refs(repo)
    code, out, err = lanes_inprocess(repo, *argv)
    assert "internal error" not in err and "Traceback" not in err, err
    assert code in allowed, (code, err)
    errors = [line for line in err.splitlines() if line.startswith(("error:", "fatal:"))]
    if code != 0:
        assert len(errors) == 1 and errors[0].startswith("error:"), err
        assert refs(repo) == before, f"exit {code} wrote: {err}"


offer_task = st.sampled_from(["core", "api", "docs", "tests", "zz", "", "../x", "a/b", "x.lock"]) | st.text(max_size=12)
offer_path = st.sampled_from([".", "..", "/", "/nonexistent", "lanes", ""]) | st.text(max_size=30)


@settings(max_examples=60, **SETTINGS)
@given(st.lists(st.tuples(offer_task, st.sampled_from(["=", "", "=="]), offer_path), max_size=4))
def test_offers_get_one_clean_answer(running, offers):
    argv = ["tick"]
    for task, sep, path in offers:
        item = f"{task}{sep}{path}"
        if "\x00" in item:
            continue
        argv += ["--offer", item]
    one_clean_answer(running.repo, *argv)


@settings(max_examples=80, **SETTINGS)
@given(json_values | st.fixed_dictionaries(
    {"task_id": st.sampled_from(["core", "docs", "zz", "../x"]) | st.text(max_size=6),
     "text": st.text(max_size=50) | json_values, "session_state": st.sampled_from(["idle", "working", "x"])},
    optional={"kind": st.sampled_from(["instruction", "correction", "x"]) | json_values, "extra": json_values}))
def test_instruct_json_gets_one_clean_answer(running, value):
    text = json.dumps(value, ensure_ascii=False)
    if "\x00" in text:
        return
    one_clean_answer(running.repo, "tick", "--instruct", text)


@settings(max_examples=40, **SETTINGS)
@given(st.text(max_size=60))
def test_instruct_text_gets_one_clean_answer(running, text):
    if "\x00" in text:
        return
    one_clean_answer(running.repo, "tick", "--instruct", text)


# -- records read back from Git ----------------------------------------------------------------------------------

def valid_files(w: World) -> dict[str, bytes]:
    return {path: (json.dumps(value) + "\n").encode() for path, value in record_files(w.repo).items()}


@settings(max_examples=200, **SETTINGS)
@given(data=st.data())
def test_record_files_with_one_replaced_parse_or_are_corrupt(running, data):
    from git_lanes.store import CorruptRecord, record_from_files

    files = dict(VALID.setdefault("files", valid_files(running)))   # read once: the examples only replace
    path = data.draw(st.sampled_from(sorted(files)))
    replacement = data.draw(json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40))
    files[path] = replacement
    try:
        record_from_files(files)
    except CorruptRecord as exc:
        clean(exc, ExitCode.FATAL)


VALID: dict[str, dict[str, bytes]] = {}


@settings(max_examples=25, **SETTINGS)
@given(data=st.data())
def test_tampered_record_in_git_gets_a_clean_answer(running, data):
    ref = f"refs/notes/lanes/batch/{SLUG}"
    names = git(running.repo, "ls-tree", "-r", "--name-only", ref).split()
    path = data.draw(st.sampled_from(sorted(names)))
    value = data.draw(json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=30))
    tip = git(running.repo, "rev-parse", ref).strip()
    try:
        rewrite_state(running.repo, ref, {path.encode(): value})
        code, out, err = lanes_inprocess(running.repo, "status", SLUG)
        assert "internal error" not in err and "Traceback" not in err, err
        assert code in (0, 128), (code, err)
        if code == 128:
            assert out == "" and len([l for l in err.splitlines() if l.startswith("error:")]) == 1, err
    finally:
        git(running.repo, "update-ref", ref, tip)


def test_a_control_character_in_a_key_with_a_line_break_is_named_on_one_line():
    """Found by the fuzzer under xdist: a key `"\\n\\b"` put its line break into the one-line error."""
    parse(b'task_id = []\n"\\n\\b" = []\n')
    parse(b'[acceptance]\n"a\\tb\\u0000" = "x"\n')
