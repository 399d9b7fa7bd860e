"""SPEC §8.7 v4, `lanes.shareReceipts`: `git lanes push`/`pull` carry every clone's receipts ref.

Two clones of one bare remote, through the installed CLI: clone A runs a batch `demo`, clone B a batch
`twin` of the same tasks on the same base, so the same delivery is the same input. A's receipts reach B
by push and pull and stand there for `done`, never for a candidate rerun or a final check; each clone
writes only its own ref there and here; without the setting nothing about receipts moves; a pulled
receipt that does not hold is ignored with a warning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import git
from helpers import git_lanes, lane_path, write_initiative

PY = sys.executable
RECEIPTS = "refs/notes/lanes/receipts/"


@pytest.fixture
def world(repo: Path, tmp_path: Path) -> dict:
    """A (the `repo`, with `origin`) and B (a clone of the bare `origin`), both on the same main with the
    initiatives `demo` and `twin` (one task `a`, scope `src`, one check that logs where it ran, and the
    same check as the final check)."""
    log = tmp_path / "runs.log"
    script = tmp_path / "check.py"
    script.write_text(f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(os.getcwd() + '\\n')\n")
    check = f"{PY} {script}"
    for slug in ("demo", "twin"):
        write_initiative(repo, slug, [{"id": "a", "scope": ["src"], "check": check}], final_checks=[check])
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(bare), str(b))
    return {"a": repo, "b": b, "bare": bare, "log": log}


def cli_json(cwd: Path, *args: str, code: int = 0) -> dict:
    proc = git_lanes(cwd, *args, "--json", check=False)
    assert proc.returncode == code, proc.stderr
    doc = json.loads(proc.stdout)
    doc["_stderr"] = proc.stderr
    return doc


def share(*clones: Path) -> None:
    for clone in clones:
        git(clone, "config", "lanes.shareReceipts", "true")


def deliver_and_done(clone: Path, slug: str, text: str = "x\n") -> dict:
    cli_json(clone, "start", slug, "--yes")
    lane = Path(lane_path(cli_json(clone, "provision", "a", "--slug", slug), "a"))
    (lane / "src").mkdir(exist_ok=True)
    (lane / "src" / "x").write_text(text)
    doc = cli_json(lane, "done")
    assert doc["passed"], doc
    doc["_lane"] = str(lane)
    return doc


def refs(root: Path, prefix: str = RECEIPTS) -> dict[str, str]:
    out = git(root, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ") for line in out.splitlines())


def statuses(doc: dict) -> dict[str, str]:
    return {r["ref"]: r["status"] for r in doc["refs"]}


def clone_id(root: Path) -> str:
    return git(root, "config", "lanes.cloneId").strip()


def lines(world: dict) -> list[str]:
    """Where the check ran (its working directory), every run, in order."""
    return world["log"].read_text().splitlines() if world["log"].exists() else []


def test_a_pulled_receipt_stands_for_done_in_another_clone_never_for_its_gate(world):
    a, b, bare = world["a"], world["b"], world["bare"]
    share(a, b)
    first = deliver_and_done(a, "demo")
    assert "cached" not in first["results"][0]
    tick = cli_json(a, "tick")
    assert tick["batch_state"] == "completed", tick.get("reason")
    assert len(lines(world)) == 3            # A: the lane's done, the candidate rerun, the final check
    ref_a = RECEIPTS + clone_id(a)
    pushed = cli_json(a, "push")
    assert statuses(pushed)[ref_a] == "pushed"
    assert refs(bare) == {ref_a: refs(a)[ref_a]}
    pulled = cli_json(b, "pull")
    assert statuses(pulled)[ref_a] == "pulled"
    assert refs(b) == {ref_a: refs(a)[ref_a]}

    # B's done on the same input: A's receipt stands for it (the key has no clone id), nothing runs
    before = len(lines(world))
    second = deliver_and_done(b, "twin")
    result = second["results"][0]
    assert result["cached"] is True   # the receipt that stood for it is A's, pulled:
    assert git(b, "cat-file", "-t", f"{ref_a}:{result['receipt'][:2]}/{result['receipt']}.json").strip() == "blob"
    assert RECEIPTS + clone_id(b) not in refs(b)   # and B wrote none of its own for a cached result
    assert len(lines(world)) == before

    # B's gate: A's scratch receipts of the very same keys (A's candidate and final check ran on this
    # tree) do not stand for B's candidate rerun nor its final check, even with lanes.gateTrustsLane
    git(b, "config", "lanes.gateTrustsLane", "true")
    tick = cli_json(b, "tick")
    assert tick["batch_state"] == "completed", tick.get("reason")
    ran = lines(world)[before:]
    assert len(ran) == 2 and all(line.startswith(str(b)) for line in ran), ran   # in B's scratch worktree
    note = json.loads(git(b, "notes", "--ref=lanes/evidence", "show", tick["children"][0]["commit"]))
    assert not note["rerun"][0].get("cached")
    assert not any(r.get("cached") for r in tick["final_verification"]["results"])
    head_a, head_b = git(a, "rev-parse", "imm/demo").strip(), tick["final_verification"]["head"]
    assert git(b, "rev-parse", f"{head_b}^{{tree}}") == git(a, "rev-parse", f"{head_a}^{{tree}}")


def test_push_sends_only_this_clones_ref_and_pull_never_replaces_it(world):
    a, b, bare = world["a"], world["b"], world["bare"]
    share(a, b)
    deliver_and_done(a, "demo")
    cli_json(a, "push")
    cli_json(b, "pull")
    deliver_and_done(b, "twin", "other\n")          # another input: B makes a receipt of its own
    ref_a, ref_b = RECEIPTS + clone_id(a), RECEIPTS + clone_id(b)
    doc = cli_json(b, "push")
    assert statuses(doc)[ref_b] == "pushed" and ref_a not in statuses(doc)
    assert refs(bare) == {ref_a: refs(a)[ref_a], ref_b: refs(b)[ref_b]}

    # A holds a stale (here: forged) copy of B's ref: A's push never sends it; A's pull replaces it
    forged = git(a, "commit-tree", git(a, "mktree", input="").strip(), "-m", "forged").strip()
    git(a, "update-ref", ref_b, forged)
    doc = cli_json(a, "push")
    assert ref_b not in statuses(doc)
    assert refs(bare)[ref_b] == refs(b)[ref_b]
    doc = cli_json(a, "pull")
    assert statuses(doc)[ref_b] == "pulled" and doc["refs"][[r["ref"] for r in doc["refs"]].index(ref_b)]["rewound"]
    assert refs(a)[ref_b] == refs(b)[ref_b]

    # someone rewrote A's ref on the remote: pull leaves A's own alone (local_ahead), push replaces it
    # under a lease on the value it saw (the ref has no history: never a fast-forward)
    ours = refs(a)[ref_a]
    git(bare, "update-ref", ref_a, git(bare, "commit-tree", git(bare, "mktree", input="").strip(), "-m", "x").strip())
    doc = cli_json(a, "pull")
    assert statuses(doc)[ref_a] == "local_ahead" and refs(a)[ref_a] == ours
    doc = cli_json(a, "push")
    assert statuses(doc)[ref_a] == "pushed" and refs(bare)[ref_a] == ours
    assert statuses(cli_json(a, "push"))[ref_a] == "up_to_date"


def test_without_share_receipts_nothing_about_receipts_moves(world):
    a, b, bare = world["a"], world["b"], world["bare"]
    first = deliver_and_done(a, "demo")
    doc = cli_json(a, "push")
    assert refs(bare) == {} and not any(r["ref"].startswith(RECEIPTS) for r in doc["refs"])
    # a receipts ref on the remote (another clone shares them) is not even fetched by a clone without it
    git(a, "push", "-q", str(bare), f"{RECEIPTS}{clone_id(a)}:{RECEIPTS}{clone_id(a)}")
    doc = cli_json(b, "pull")
    assert not any(r["ref"].startswith(RECEIPTS) for r in doc["refs"])
    assert refs(b, "refs/notes/lanes/") == {k: v for k, v in refs(b, "refs/notes/lanes/").items()
                                             if not k.startswith(RECEIPTS)}
    assert "receipts" not in git(b, "for-each-ref", "--format=%(refname)")
    # and a receipt of A that B holds anyway stands for nothing: without sharing the key names the clone
    git(b, "fetch", "-q", str(bare), f"{RECEIPTS}*:{RECEIPTS}*")
    before = len(lines(world))
    second = deliver_and_done(b, "twin")
    assert "cached" not in second["results"][0] and len(lines(world)) == before + 1
    assert first["passed"] and refs(a)                   # A's pass was kept, in A only
    # sharing turned on in B alone: push and pull now carry receipts
    share(b)
    doc = cli_json(b, "push")
    assert statuses(doc)[RECEIPTS + clone_id(b)] == "pushed"


def test_a_tampered_pulled_receipt_is_ignored_with_a_warning_and_the_check_runs(world):
    a, b, bare = world["a"], world["b"], world["bare"]
    share(a, b)
    first = deliver_and_done(a, "demo")
    cli_json(a, "push")
    ref_a = RECEIPTS + clone_id(a)
    (key,) = [path.rsplit("/", 1)[1][:-5] for path in
              git(bare, "ls-tree", "-r", "--name-only", ref_a).splitlines()]
    # on the remote, the receipt now says another argv (a forger's): the key no longer matches it
    stored = json.loads(git(bare, "show", f"{ref_a}:{key[:2]}/{key}.json"))
    stored["argv"] = ["true"]
    blob = git(bare, "hash-object", "-w", "--stdin", input=json.dumps(stored)).strip()
    inner = git(bare, "mktree", input=f"100644 blob {blob}\t{key}.json\n").strip()
    top = git(bare, "mktree", input=f"040000 tree {inner}\t{key[:2]}\n").strip()
    git(bare, "update-ref", ref_a, git(bare, "commit-tree", top, "-m", "forged").strip())
    cli_json(b, "pull")
    before = len(lines(world))
    second = deliver_and_done(b, "twin")
    assert "cached" not in second["results"][0] and len(lines(world)) == before + 1
    assert f"warning: receipt {key} of clone {clone_id(a)} ignored: its argv is not the check's" in second["_stderr"]
    assert first["passed"]


def test_an_executor_loop_counts_its_own_receipts_ref_among_the_refs_it_writes(world):
    """`work` pushes only the refs this clone writes (`claims.own_refs`): with sharing, its receipts ref."""
    from git_lanes.remote.claims import own_refs
    from git_lanes.domain.session import Session

    a, b = world["a"], world["b"]
    deliver_and_done(a, "demo")
    cli_json(a, "push")
    cli_json(b, "pull")
    git(b, "config", "lanes.cloneId", "bee")
    assert own_refs(Session(cwd=str(b)), "demo") == set()
    share(b)
    assert own_refs(Session(cwd=str(b)), "demo") == {RECEIPTS + "bee"}
