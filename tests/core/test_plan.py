"""Plan files (SPEC §1-§3): strict parsing, identities, digest vectors, waves, conflicts."""

from __future__ import annotations

import pytest

from git_lanes.core.canonical import canonical_digest
from git_lanes.core.errors import ExitCode, LanesError
from git_lanes.plan.initiative import (ID_RE, check_id, final_check_problem, intent_doc_hash, load_plan, parse_intent,
                                       plan_digest)

ZERO = "0" * 64
INIT = ".lanes/demo/initiative.toml"


def intent(task_id: str, *, scope: str = '["src/{id}"]', blocked_by: str = "[]",
           extra: str = "", acceptance: str | None = None) -> str:
    """An intent file body; `{id}` in `scope` is replaced by the task id."""
    if acceptance is None:
        acceptance = '[[acceptance]]\nid = "A1"\ntext = "works"\ncheck = "python -m pytest -q"\n'
    return (f'task_id = "{task_id}"\nrevision = 1\ngoal = "Do {task_id}"\n'
            f"scope = {scope.replace('{id}', task_id)}\nblocked_by = {blocked_by}\n{extra}\n"
            f"{acceptance}")


def files(tasks: dict[str, str], initiative: str | None = None) -> dict[str, bytes]:
    if initiative is None:
        listed = ", ".join(f'"{t}"' for t in tasks)
        initiative = f'title = "Demo"\ntasks = [{listed}]\n'
    out = {"initiative.toml": initiative.encode()}
    out.update({f"{t}.toml": body.encode() for t, body in tasks.items()})
    return out


def error_of(fn, *args) -> str:
    with pytest.raises(LanesError) as info:
        fn(*args)
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in info.value.message
    return info.value.message


def intent_error(body: str, path: str = ".lanes/demo/parser.toml") -> str:
    return error_of(parse_intent, path, body.encode())


# --- §2 digest test vectors ------------------------------------------------------------------

ENTRY_A = {"task_id": "task-a", "intent_path": "docs/plans/task-a.intent.json",
           "intent_revision": 1, "intent_content_hash": ZERO, "blocked_by": []}
ENTRY_B = {"task_id": "task-b", "intent_path": "docs/plans/task-b.intent.json",
           "intent_revision": 1, "intent_content_hash": ZERO, "blocked_by": ["task-a"]}


def test_digest_vector_one_task():
    assert plan_digest([ENTRY_A]) == \
        "sha256:91e6823fc7c68e23cd165b4ae81a60c67cb0c323c036a8bbfa24efda0543ad07"


def test_digest_vector_two_tasks():
    assert plan_digest([ENTRY_A, ENTRY_B]) == \
        "sha256:01e5c411488cfc10add9431e30a05a6f69e5e23de071ba94fc076c59a25ef9ca"


def test_digest_vector_reverse_order():
    assert plan_digest([ENTRY_B, ENTRY_A]) == \
        "sha256:03d6c482fb6f97816bd36e316deb645612e62edb87f118d2ba09c23aaa08c225"


# --- ids ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["a", "demo", "A1", "x.y_z-w", "a" * 128, "a-", "a_"])
def test_valid_ids(value):
    check_id(value, "slug")
    check_id(value, "task id")
    assert ID_RE.match(value)


@pytest.mark.parametrize("value", ["", "-a", ".a", "a.", "a b", "a/b", "a..b", "x.lock", "a" * 129, "é", "a\n"])
def test_invalid_ids(value):
    assert "invalid slug" in error_of(check_id, value, "slug")


def test_initiative_is_reserved_for_task_ids_only():
    check_id("initiative", "slug")
    assert "reserved" in error_of(check_id, "initiative", "task id")


# --- intents -----------------------------------------------------------------------------------

def test_good_intent_identity_and_hash():
    body = intent("parser", extra='owner = "core"\nrisk = "material"\nissue = 42\nreview = true\n'
                                  'spec = "docs/parser.md"\n',
                  acceptance='[[acceptance]]\nid = "A1"\ntext = "t"\ncheck = "true"\ntimeout = 600\n'
                             '[[acceptance]]\nid = "A2"\ntext = "u"\ncheck = "false"\n')
    parsed = parse_intent(".lanes/demo/parser.toml", body.encode())
    assert parsed.intent.risk == "material" and parsed.intent.issue == 42 and parsed.intent.review
    assert [a.timeout_s for a in parsed.intent.acceptance] == [600, 1800]
    assert parsed.doc["acceptance"][1] == {"id": "A2", "text": "u", "check": "false"}
    assert "timeout" not in parsed.doc["acceptance"][1]  # no defaults filled in
    assert parsed.content_hash == canonical_digest(parsed.doc) == intent_doc_hash(parsed.doc)
    assert parsed.identity() == {"task_id": "parser", "intent_path": ".lanes/demo/parser.toml",
                                 "intent_revision": 1, "intent_content_hash": parsed.content_hash}


def test_defaults_are_not_hashed():
    minimal = intent("parser").replace("blocked_by = []\n", "")
    explicit = minimal.replace('goal', 'risk = "low"\nreview = false\ngoal')
    a = parse_intent(".lanes/demo/parser.toml", minimal.encode())
    b = parse_intent(".lanes/demo/parser.toml", explicit.encode())
    assert a.intent == b.intent
    assert a.content_hash != b.content_hash


@pytest.mark.parametrize("body, field, reason", [
    (intent("parser").replace("revision = 1", 'revision = "1"'), "revision", "valid integer"),
    (intent("parser").replace("revision = 1", "revision = true"), "revision", "valid integer"),
    (intent("parser").replace("revision = 1", "revision = 1.0"), "revision", "valid integer"),
    (intent("parser").replace("revision = 1", "revision = 0"), "revision", "greater than or equal to 1"),
    (intent("parser").replace("revision = 1\n", ""), "revision", "required"),
    (intent("parser", extra="colour = 1"), "colour", "unknown key"),
    (intent("parser").replace('goal = "Do parser"', 'goal = "  "'), "goal", "blank"),
    (intent("parser", scope="[]"), "scope", "empty"),
    (intent("parser", scope='"src"'), "scope", "valid list"),
    (intent("parser", scope='["src", ""]'), "scope", "empty"),
    (intent("parser", scope='["/etc"]'), "scope", "absolute"),
    (intent("parser", scope='["src\\\\x"]'), "scope", "\\"),
    (intent("parser", scope='["src/../x"]'), "scope", "'..' segment"),
    (intent("parser", scope='["././src"]'), "scope", "'.' or '..' segment"),
    (intent("parser", scope='["src/{a,b}"]'), "scope", "'{'"),
    (intent("parser", scope='["src/a}"]'), "scope", "'}'"),
    (intent("parser", scope='["!src"]'), "scope", "'!'"),
    (intent("parser", scope="[1]"), "scope[0]", "valid string"),
    (intent("parser", blocked_by='["parser"]'), "blocked_by", "itself"),
    (intent("parser", blocked_by='["a", "a"]'), "blocked_by", "duplicate task id 'a'"),
    (intent("parser", blocked_by='["bad id"]'), "blocked_by", "not a valid id"),
    (intent("parser", extra='risk = "high"'), "risk", "'low', 'material' or 'critical'"),
    (intent("parser", extra="issue = 0"), "issue", "greater than or equal to 1"),
    (intent("parser", extra='issue = "42"'), "issue", "valid integer"),
    (intent("parser", extra="review = 1"), "review", "valid boolean"),
    (intent("parser", extra="owner = 3"), "owner", "valid string"),
    (intent("parser", extra='spec = "/abs.md"'), "spec", "absolute"),
    (intent("parser", acceptance=""), "acceptance", "required"),
    (intent("parser", acceptance="acceptance = []"), "acceptance", "at least one"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "c"\n' * 2),
     "acceptance", "duplicate id 'A'"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\n'),
     "acceptance[0].check", "required"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "  "\n'),
     "acceptance[0].check", "must name a command"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "echo \'x"\n'),
     "acceptance[0].check", "cannot be split"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "c"\ntimeout = 0\n'),
     "acceptance[0].timeout", "greater than or equal to 1"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "c"\ntimeout = true\n'),
     "acceptance[0].timeout", "valid integer"),
    (intent("parser", acceptance='[[acceptance]]\nid = "A"\ntext = "t"\ncheck = "c"\nx = 1\n'),
     "acceptance[0].x", "unknown key"),
    (intent("initiative"), "task_id", "reserved"),
    (intent("lexer"), "task_id", "file stem 'parser'"),
])
def test_intent_strictness(body, field, reason):
    message = intent_error(body)
    assert message.startswith(f".lanes/demo/parser.toml: {field}: "), message
    assert reason in message


def test_toml_syntax_error_names_file():
    message = intent_error('task_id = "parser"\nrevision = \n')
    assert message.startswith(".lanes/demo/parser.toml: invalid TOML: ")


def test_non_utf8_names_file():
    message = error_of(parse_intent, ".lanes/demo/parser.toml", b"\xff")
    assert message == ".lanes/demo/parser.toml: not valid UTF-8"


def test_a_byte_order_mark_is_no_toml_error():
    """Some editors start a UTF-8 file with a BOM: the intent is the same as without it."""
    body = intent("parser")
    with_bom = parse_intent(".lanes/demo/parser.toml", b"\xef\xbb\xbf" + body.encode())
    assert with_bom == parse_intent(".lanes/demo/parser.toml", body.encode())


# --- initiatives -------------------------------------------------------------------------------

def test_good_plan_round_trip():
    plan = load_plan("demo", {
        **files({
            "lexer": intent("lexer"),
            "parser": intent("parser", blocked_by='["lexer"]'),
            "docs": intent("docs", scope='["docs/"]', blocked_by='["parser", "lexer"]'),
        }, initiative='title = "Streaming parser"\ntasks = ["lexer", "parser", "docs"]\n'
                      'final_checks = ["python -m pytest -q"]\n[tracker]\ngithub = "owner/repo"\n'),
        "notes.md": b"ignored",
        "README": b"\xff ignored",
    })
    assert plan.slug == "demo" and plan.title == "Streaming parser"
    assert [t.task_id for t in plan.tasks] == ["lexer", "parser", "docs"]
    assert plan.final_checks == ["python -m pytest -q"]
    assert plan.tracker_github == "owner/repo"
    assert plan.by_id("parser").path == ".lanes/demo/parser.toml"
    assert plan.by_id("nope") is None
    entries = plan.entries()
    assert entries[2] == {**plan.tasks[2].identity(), "blocked_by": ["parser", "lexer"]}
    assert sorted(entries[0]) == ["blocked_by", "intent_content_hash", "intent_path",
                                  "intent_revision", "task_id"]
    assert plan.digest == plan_digest(entries)
    doc = plan.to_json(2)
    assert doc == {
        "slug": "demo",
        "plan_digest": plan.digest,
        "children": [{**e, "scope": list(t.intent.scope)} for e, t in zip(entries, plan.tasks)],
        "waves": [["lexer"], ["parser"], ["docs"]],
        "scope_conflicts": [],
    }


def test_plan_defaults():
    plan = load_plan("demo", files({"a": intent("a")}))
    assert plan.final_checks == [] and plan.tracker_github is None
    assert plan.waves(1) == [["a"]]


def test_waves_and_conflicts():
    plan = load_plan("demo", files({
        "a": intent("a", scope='["src/a"]'),
        "b": intent("b", scope='["src/a/b.py"]'),
        "c": intent("c", scope='["src/ab"]'),
        "d": intent("d", scope='["docs"]', blocked_by='["a"]'),
        "e": intent("e", scope='["tests/*.py"]'),
        "f": intent("f", scope='["TESTS/unit"]'),
    }))
    assert plan.scope_conflicts() == [
        {"task_id": "a", "overlaps_with": ["b"]},
        {"task_id": "b", "overlaps_with": ["a"]},
        {"task_id": "e", "overlaps_with": ["f"]},
        {"task_id": "f", "overlaps_with": ["e"]},
    ]
    assert plan.waves(1) == [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]
    assert plan.waves(3) == [["a", "c", "e"], ["b", "d", "f"]]
    assert plan.waves(10) == [["a", "c", "e"], ["b", "d", "f"]]
    assert plan.to_json()["waves"] == plan.waves(1)


def test_digest_tracks_content_and_order():
    base = files({"a": intent("a"), "b": intent("b")})
    plan = load_plan("demo", base)
    swapped = load_plan("demo", {**base, "initiative.toml": b'title = "Demo"\ntasks = ["b", "a"]\n'})
    edited = load_plan("demo", {**base, "a.toml": intent("a", extra='owner = "me"').encode()})
    assert len({plan.digest, swapped.digest, edited.digest}) == 3


def test_missing_initiative():
    assert error_of(load_plan, "demo", {"a.toml": b""}) == "no initiative .lanes/demo/initiative.toml"


def test_invalid_slug():
    assert "invalid slug" in error_of(load_plan, "a..b", files({"a": intent("a")}))


@pytest.mark.parametrize("initiative, field, reason", [
    ('tasks = ["a"]\n', "title", "required"),
    ('title = ""\ntasks = ["a"]\n', "title", "blank"),
    ('title = "T"\n', "tasks", "required"),
    ('title = "T"\ntasks = []\n', "tasks", "at least one"),
    ('title = "T"\ntasks = ["a", "a"]\n', "tasks", "listed twice"),
    ('title = "T"\ntasks = ["initiative"]\n', "tasks", "reserved"),
    ('title = "T"\ntasks = "a"\n', "tasks", "valid list"),
    ('title = "T"\ntasks = ["a"]\nmore = 1\n', "more", "unknown key"),
    ('title = "T"\ntasks = ["a"]\nfinal_checks = "make"\n', "final_checks", "valid list"),
    ('title = "T"\ntasks = ["a"]\nfinal_checks = ["make | tee"]\n', "final_checks", "refused: |"),
    ('title = "T"\ntasks = ["a"]\nfinal_checks = ["make"]\n[tracker]\ngithub = "owner"\n',
     "tracker.github", "owner/repo"),
    ('title = "T"\ntasks = ["a"]\n[tracker]\ngithub = "o/r/x"\n', "tracker.github", "owner/repo"),
    ('title = "T"\ntasks = ["a"]\n[tracker]\ngithub = "o/r\\n"\n', "tracker.github", "owner/repo"),
    ('title = "T"\ntasks = ["a"]\n[tracker]\ngithub = "o/.."\n', "tracker.github", "owner/repo"),
    ('title = "T"\ntasks = ["a"]\n[tracker]\n', "tracker.github", "required"),
    ('title = "T"\ntasks = ["a"]\n[tracker]\ngithub = "o/r"\njira = "x"\n', "tracker.jira", "unknown key"),
])
def test_initiative_strictness(initiative, field, reason):
    message = error_of(load_plan, "demo", files({"a": intent("a")}, initiative))
    assert message.startswith(f"{INIT}: {field}: "), message
    assert reason in message


def test_initiative_toml_syntax_error():
    message = error_of(load_plan, "demo", files({"a": intent("a")}, "title = \n"))
    assert message.startswith(f"{INIT}: invalid TOML: ")


def test_task_file_not_listed():
    message = error_of(load_plan, "demo", {**files({"a": intent("a")}), "b.toml": b""})
    assert message == f"{INIT}: tasks: task file .lanes/demo/b.toml is not listed"


def test_listed_task_without_file():
    message = error_of(load_plan, "demo", files({"a": intent("a")}, 'title = "T"\ntasks = ["a", "b"]\n'))
    assert message == f"{INIT}: tasks: no file .lanes/demo/b.toml for task 'b'"


def test_intent_errors_inside_plan_name_the_intent_file():
    message = error_of(load_plan, "demo", files({"a": intent("a", extra="revision = 2")}))
    assert message.startswith(".lanes/demo/a.toml: invalid TOML: ")


def test_unknown_blocker():
    message = error_of(load_plan, "demo", files({"a": intent("a", blocked_by='["zz"]')}))
    assert message == ".lanes/demo/a.toml: blocked_by: unknown task 'zz'"


def test_blocker_listed_after_dependent():
    message = error_of(load_plan, "demo", files({"a": intent("a", blocked_by='["b"]'), "b": intent("b")}))
    assert message.startswith(".lanes/demo/a.toml: blocked_by: 'b' is listed after 'a'")


def test_cycle():
    message = error_of(load_plan, "demo", files({
        "a": intent("a"),
        "b": intent("b", blocked_by='["a", "d"]'),
        "c": intent("c", blocked_by='["b"]'),
        "d": intent("d", blocked_by='["c"]'),
    }))
    assert message == ".lanes/demo/b.toml: blocked_by: dependency cycle b -> d -> c -> b"


def test_self_blocking_in_plan():
    message = error_of(load_plan, "demo", files({"a": intent("a", blocked_by='["a"]')}))
    assert message == ".lanes/demo/a.toml: blocked_by: a task cannot block itself"


# --- final checks ------------------------------------------------------------------------------

def test_final_check_rules():
    assert final_check_problem("python -m pytest -q") is None
    assert final_check_problem("   ") == "must not be empty"
    assert final_check_problem("make\nmake") == "must be one line"
    assert "512" in final_check_problem("x" * 513)
    for char in "|&;<>`$(){}\"'\\":
        assert final_check_problem(f"make {char}x") is not None, char
    too_many = 'title = "T"\ntasks = ["a"]\nfinal_checks = [' + ", ".join(['"make"'] * 9) + "]\n"
    message = error_of(load_plan, "demo", files({"a": intent("a")}, too_many))
    assert message == f"{INIT}: final_checks: at most 8 commands"
