"""SPEC §8.7 v4: receipts. A check runs once per input in one kind of place; a receipt never turns a
failure into a pass; a changed input, argv or receipt environment always runs it again; a lane's
receipt never stands for a candidate rerun unless `lanes.gateTrustsLane`; a receipt that does not
hold is ignored with a warning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import git
from helpers import git_lanes, lane_path, lanes, lanes_json, write_initiative

PY = sys.executable


def counter(repo: Path, name: str, *, fail_in_scratch: bool = False) -> str:
    """A check that appends `<place>|<GIT_LANES_TASK>|<GIT_LANES_TASKS>|<digest of src/>` to a log
    outside every tree (place: lane or scratch), and fails in a scratch worktree when asked to."""
    log = repo.parent / f"{name}.log"
    script = repo.parent / f"{name}.py"
    script.write_text(
        "import hashlib, os, pathlib, sys\n"
        "h = hashlib.sha256()\n"
        "for p in sorted(pathlib.Path('src').rglob('*')) if pathlib.Path('src').exists() else []:\n"
        "    if p.is_file():\n"
        "        h.update(str(p).encode() + b'\\0' + p.read_bytes())\n"
        "place = 'scratch' if '/lanes/scratch/' in os.getcwd().replace(os.sep, '/') else 'lane'\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write('|'.join([place, os.environ.get('GIT_LANES_TASK', ''), os.environ.get('GIT_LANES_TASKS', ''),"
        " h.hexdigest()[:12]]) + '\\n')\n"
        + (f"sys.exit(1 if place == 'scratch' else 0)\n" if fail_in_scratch else ""))
    return f"{PY} {script}"


def runs(repo: Path, name: str) -> list[str]:
    log = repo.parent / f"{name}.log"
    return log.read_text().splitlines() if log.exists() else []


def provision(repo: Path, task: str) -> Path:
    code, report = lanes_json(repo, "provision", task)
    assert code == 0, report
    return Path(lane_path(report, task))


def put(lane: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = lane / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def done(lane: Path, *args: str) -> dict:
    code, out, err = lanes(lane, "done", "--json", *args)
    doc = json.loads(out)
    doc["_stderr"] = err
    doc["_code"] = code
    return doc


def child(report: dict, task: str) -> dict:
    return next(c for c in report["children"] if c["task_id"] == task)


def receipts(repo: Path) -> list[dict]:
    code, doc = lanes_json(repo, "receipts")
    assert code == 0
    return doc["receipts"]


def one_task(repo: Path, check: str, *, extra: list[str] | None = None, scope=("src",), **kw) -> None:
    write_initiative(repo, "demo", [{"id": "a", "scope": list(scope), "check": check, "extra": extra or []}], **kw)


def acceptance_inputs(repo: Path, task: str, inputs: list[str]) -> None:
    path = repo / ".lanes" / "demo" / f"{task}.toml"
    path.write_text(path.read_text() + "inputs = " + json.dumps(inputs) + "\n")
    git(repo, "commit", "-qam", "inputs")


def test_a_pass_is_kept_and_stands_for_the_same_check_on_the_same_delivery(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    first = done(lane)
    assert first["passed"] and "cached" not in first["results"][0]
    assert len(runs(repo, "c")) == 1
    second = done(lane)
    assert second["passed"] and second["results"][0]["cached"] is True
    key = second["results"][0]["receipt"]
    assert len(runs(repo, "c")) == 1                     # nothing ran
    listed = receipts(repo)
    assert [(r["key"], r["where"], r["task"]) for r in listed] == [(key, "lane", "a")]
    # the ref is one parentless commit holding <2 hex>/<key>.json
    clone = git(repo, "config", "lanes.cloneId").strip()
    ref = f"refs/notes/lanes/receipts/{clone}"
    assert git(repo, "rev-list", "--count", ref).strip() == "1"
    stored = json.loads(git(repo, "show", f"{ref}:{key[:2]}/{key}.json"))
    assert stored["contract"] == "git_lanes/receipt/v1" and stored["key"] == key and stored["where"] == "lane"
    assert stored["tree"] == first["tree"] and stored["inputs"] == first["tree"]
    assert set(stored) == {"contract", "key", "where", "argv", "inputs", "env", "tree", "duration_ms",
                           "output_tail", "at", "batch_id", "task_id"}
    # a changed input runs it again
    put(lane, {"src/x": "2"})
    third = done(lane)
    assert "cached" not in third["results"][0] and len(runs(repo, "c")) == 2
    # --no-receipts runs it, and keeps nothing new
    before = [r["key"] for r in receipts(repo)]
    fourth = done(lane, "--no-receipts")
    assert "cached" not in fourth["results"][0] and len(runs(repo, "c")) == 3
    assert [r["key"] for r in receipts(repo)] == before


def test_a_receipt_never_turns_a_failure_into_a_pass(repo):
    flag = repo.parent / "pass-now"
    check = f"{PY} -c \"import pathlib,sys; sys.exit(0 if pathlib.Path({str(flag)!r}).exists() else 3)\""
    one_task(repo, check)
    git(repo, "config", "lanes.flakeRetries", "0")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"] is False
    assert receipts(repo) == []                           # only passes are kept
    again = done(lane, "--retry")   # the same tree: SPEC §17.6 wants --retry
    assert again["passed"] is False and "cached" not in again["results"][0]


def test_declared_inputs_make_the_key_only_what_the_check_reads(repo):
    one_task(repo, counter(repo, "c"))
    acceptance_inputs(repo, "a", ["src/a", "src/missing/"])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/a/x": "1", "src/b/y": "1"})
    first = done(lane)
    assert first["passed"] and len(runs(repo, "c")) == 1
    key = first["results"][0]["receipt"] if "receipt" in first["results"][0] else receipts(repo)[0]["key"]
    clone = git(repo, "config", "lanes.cloneId").strip()
    stored = json.loads(git(repo, "show", f"refs/notes/lanes/receipts/{clone}:{key[:2]}/{key}.json"))
    blob = git(lane, "hash-object", "src/a/x").strip()
    assert stored["inputs"] == [["src/a/x", "100644", blob], ["src/missing", None]]
    put(lane, {"src/b/y": "2"})                           # outside the inputs: a look-up
    assert done(lane)["results"][0]["cached"] is True and len(runs(repo, "c")) == 1
    put(lane, {"src/a/x": "2"})                           # inside: runs
    assert "cached" not in done(lane)["results"][0] and len(runs(repo, "c")) == 2


def test_a_changed_receipt_environment_or_argv_runs_the_check_again(repo):
    one_task(repo, counter(repo, "c"))
    git(repo, "config", "lanes.receiptEnv", "TOOLCHAIN")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    env = {"TOOLCHAIN": "1.0"}
    assert lanes(lane, "done", env=env)[0] == 0
    assert lanes(lane, "done", env=env)[0] == 0
    assert len(runs(repo, "c")) == 1
    assert lanes(lane, "done", env={"TOOLCHAIN": "2.0"})[0] == 0
    assert len(runs(repo, "c")) == 2
    # lanes.receiptKey: its output is part of the environment; a failing one turns receipts off
    git(repo, "config", "lanes.receiptKey", f"{PY} -c \"print('k1')\"")
    assert lanes(lane, "done", env=env)[0] == 0 and len(runs(repo, "c")) == 3
    assert lanes(lane, "done", env=env)[0] == 0 and len(runs(repo, "c")) == 3
    git(repo, "config", "lanes.receiptKey", f"{PY} -c \"import sys; sys.exit(1)\"")
    code, out, err = lanes(lane, "done", env=env)
    assert code == 0 and "warning: lanes.receiptKey" in err and len(runs(repo, "c")) == 4
    # another argv is another key (pure: the key is the hash of {argv, inputs, env})
    from git_lanes.domain.receipts import key_of

    assert key_of(["a"], "t", "e") != key_of(["a", "b"], "t", "e") != key_of(["a"], "t2", "e")
    assert key_of(["a"], "t", "e") != key_of(["a"], "t", "e2")


def test_a_tampered_receipt_is_ignored_with_a_warning_and_the_check_runs(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    key = None
    assert done(lane)["passed"]
    key = receipts(repo)[0]["key"]
    clone = git(repo, "config", "lanes.cloneId").strip()
    ref = f"refs/notes/lanes/receipts/{clone}"
    for bad in ("not json", json.dumps({"contract": "git_lanes/receipt/v1", "key": "0" * 64})):
        blob = git(repo, "hash-object", "-w", "--stdin", input=bad).strip()
        tree = git(repo, "mktree", input=f"100644 blob {blob}\t{key}.json\n").strip()
        top = git(repo, "mktree", input=f"040000 tree {tree}\t{key[:2]}\n").strip()
        commit = git(repo, "commit-tree", top, "-m", "forged").strip()
        git(repo, "update-ref", ref, commit)
        before = len(runs(repo, "c"))
        code, out, err = lanes(lane, "done")
        assert code == 0 and err.count(f"warning: receipt {key} of clone {clone} ignored") == 1, err
        assert len(runs(repo, "c")) == before + 1


def test_a_lane_receipt_never_stands_for_a_candidate_rerun_unless_the_gate_trusts_lanes(repo):
    check = counter(repo, "c")
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": check},
                                    {"id": "b", "scope": ["src/b"], "check": check}])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    put(la, {"src/a/x": "1"})
    assert done(la)["passed"]
    report = lanes_json(repo, "tick")[1]
    assert child(report, "a")["state"] == "integrated"
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane", "scratch"]
    git(repo, "config", "lanes.gateTrustsLane", "true")
    put(lb, {"src/b/x": "1"})
    assert done(lb)["passed"]
    report = lanes_json(repo, "tick")[1]
    assert child(report, "b")["state"] == "integrated"
    # b's candidate is its own delivery (nothing landed after its base… but a did): the rerun of b on
    # the candidate a+b is not the lane's tree, so it runs; with gateTrustsLane a receipt made where
    # the tree was the same would stand — the key decides, the where rule lets it
    lines = runs(repo, "c")
    assert lines[2].startswith("lane|b|")
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "b")["commit"]))
    assert {r["id"] for r in note["rerun"]} == {"b:A1", "a:A1"}


def test_with_gate_trusts_lane_the_lane_receipt_stands_for_the_rerun_of_the_same_tree(repo):
    check = counter(repo, "c")
    one_task(repo, check, scope=("src",))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    git(repo, "config", "lanes.gateTrustsLane", "true")
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane"]     # the candidate is the lane's tree
    note = json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, "a")["commit"]))
    assert note["rerun"][0]["cached"] is True and len(note["rerun"][0]["receipt"]) == 64


def test_without_gate_trusts_lane_the_same_tree_runs_again_in_scratch(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane", "scratch"]
    assert [r["where"] for r in receipts(repo)] == ["scratch"]   # the same key: the scratch one replaced it


def test_no_check_runs_twice_on_the_same_input_in_the_same_kind_of_place(repo):
    """A small batch whose final check is one of the task checks: every execution of a check (counted
    by the check itself, outside the repository) is on an input no other execution in the same kind
    of place had; a sibling check whose declared inputs did not change is a receipt look-up."""
    ca, cb = counter(repo, "ca"), counter(repo, "cb")
    write_initiative(repo, "demo", [{"id": "a", "scope": ["src/a"], "check": ca},
                                    {"id": "b", "scope": ["src/b"], "check": cb}], final_checks=[cb])
    acceptance_inputs(repo, "a", ["src/a"])
    acceptance_inputs(repo, "b", ["src/b"])
    assert lanes(repo, "start", "demo", "--yes", "--max-parallel", "2")[0] == 0
    la, lb = provision(repo, "a"), provision(repo, "b")
    put(la, {"src/a/x": "1"})
    put(lb, {"src/b/x": "1"})
    assert done(la)["passed"] and done(lb)["passed"]
    assert done(la)["results"][0]["cached"] is True         # done again: nothing runs
    report = lanes_json(repo, "tick")[1]
    assert report["batch_state"] == "completed", report.get("reason")
    assert report["final_verification"]["passed"]
    a_runs, b_runs = runs(repo, "ca"), runs(repo, "cb")
    assert len(a_runs) == len(set(a_runs)) and len(b_runs) == len(set(b_runs))
    # each: once in its lane, once on its own candidate; the second candidate's rerun of the first
    # child's check (its inputs unchanged) is a receipt look-up
    assert [r.split("|")[:2] for r in a_runs] == [["lane", "a"], ["scratch", "a"]], (a_runs, b_runs)
    # b's check once more as the final check (another environment: GIT_LANES_TASK is empty)
    assert [r.split("|")[:2] for r in b_runs] == [["lane", "b"], ["scratch", "b"], ["scratch", ""]], (a_runs, b_runs)
    notes = [json.loads(git(repo, "notes", "--ref=lanes/evidence", "show", child(report, t)["commit"])) for t in "ab"]
    second = next(n for n in notes if len(n["rerun"]) == 2)
    sibling = next(r for r in second["rerun"] if not r["id"].startswith(second["task_id"] + ":"))
    assert sibling["cached"] is True and len(sibling["receipt"]) == 64


def test_start_no_receipts_is_recorded_and_obeyed_by_done_and_ticks(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes", "--no-receipts")[0] == 0
    rec = json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    assert rec["receipts"] is False
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"] and done(lane)["passed"]
    assert len(runs(repo, "c")) == 2 and receipts(repo) == []


def test_a_batch_without_the_option_records_no_receipts_field(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    rec = json.loads(git(repo, "show", "refs/notes/lanes/batch/demo:batch.json"))
    assert "receipts" not in rec


def test_lanes_receipts_false_turns_them_off_for_the_repository(repo):
    one_task(repo, counter(repo, "c"))
    git(repo, "config", "lanes.receipts", "false")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"] and done(lane)["passed"]
    assert len(runs(repo, "c")) == 2


def test_receipts_false_on_an_acceptance_item_keeps_none_for_it(repo):
    one_task(repo, counter(repo, "c"), extra=[])
    path = repo / ".lanes" / "demo" / "a.toml"
    path.write_text(path.read_text() + "receipts = false\n")
    git(repo, "commit", "-qam", "no receipts for a")
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"] and done(lane)["passed"]
    assert len(runs(repo, "c")) == 2 and receipts(repo) == []


def test_checks_that_change_the_delivery_keep_no_receipt(repo):
    writes = f"{PY} -c \"import pathlib; pathlib.Path('src/made').write_text('x')\""
    one_task(repo, writes)
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    doc = done(lane)
    assert doc["passed"] is False and doc["note"].startswith("checks changed the delivery")
    assert receipts(repo) == []


def test_verify_ignores_receipts_unless_asked_and_never_writes_one(repo):
    check = counter(repo, "c")
    one_task(repo, check, final_checks=[check])
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    assert lanes_json(repo, "tick")[1]["batch_state"] == "completed"
    ran = len(runs(repo, "c"))
    before = [r["key"] for r in receipts(repo)]
    code, doc = lanes_json(repo, "verify")
    assert code == 0 and "cached" not in doc["results"][0] and len(runs(repo, "c")) == ran + 1
    code, doc = lanes_json(repo, "verify", "--receipts")
    assert code == 0 and doc["results"][0]["cached"] is True and len(runs(repo, "c")) == ran + 1
    assert [r["key"] for r in receipts(repo)] == before


def test_receipts_prune_drops_old_ones_and_their_objects_go_unreachable(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    clone = git(repo, "config", "lanes.cloneId").strip()
    ref = f"refs/notes/lanes/receipts/{clone}"
    old_tip = git(repo, "rev-parse", ref).strip()
    code, doc = lanes_json(repo, "receipts", "--prune", "1")
    assert code == 0 and doc["pruned"] == [] and len(doc["receipts"]) == 1
    code, doc = lanes_json(repo, "receipts", "--prune", "0")
    assert code == 0 and len(doc["pruned"]) == 1 and doc["receipts"] == []
    assert git(repo, "rev-list", "--count", ref).strip() == "1"     # still parentless: no history
    assert old_tip not in git(repo, "rev-list", "--all")
    code, out, err = lanes(repo, "receipts")
    assert code == 0 and "none" in out


def test_contracts_lists_the_receipt_contract(repo):
    proc = git_lanes(repo, "contracts", "--json")
    assert json.loads(proc.stdout)["receipt"] == "git_lanes/receipt/v1"


def test_through_the_installed_cli_a_second_done_is_a_receipt_lookup(repo):
    one_task(repo, counter(repo, "c"))
    git_lanes(repo, "start", "demo", "--yes")
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    git_lanes(lane, "done")
    proc = git_lanes(lane, "done")
    assert "(cached: receipt" in proc.stdout and len(runs(repo, "c")) == 1


def test_a_receipt_lookup_is_cheap_in_process(repo):
    """Speed sanity: with a few hundred receipts stored, computing a key and looking it up costs well
    under a millisecond or so each (one ref read, two tree reads, one blob), and one write stores them all."""
    import time

    from git_lanes.domain.checks import CheckResult
    from git_lanes.gitio import Git
    from git_lanes.domain.receipts import Receipts

    g = Git(str(repo))
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    book = Receipts(g, where="scratch", batch_id="b", clock=lambda: "2026-01-02T03:04:05.000Z", warn=print)
    env = {"PATH": "/bin", "GIT_LANES_TASK": "t"}
    keys = [book.key(["check", str(n)], None, tree, cwd=str(repo), env=env) for n in range(300)]
    ok = CheckResult("A1", "check", 0, None, True, 5, "fine")
    for k in keys:
        book.add(k, ok, tree=tree, task_id="t")
    start = time.perf_counter()
    assert book.flush() == 300
    wrote = time.perf_counter() - start
    reader = Receipts(g, where="scratch", batch_id="b", clock=lambda: "x", warn=print)
    start = time.perf_counter()
    found = [reader.lookup(reader.key(["check", str(n)], None, tree, cwd=str(repo), env=env)) for n in range(300)]
    looked = time.perf_counter() - start
    assert all(f is not None and f["output_tail"] == "fine" for f in found)
    assert wrote < 5.0 and looked < 3.0, (wrote, looked)


def test_release_stale_drops_receipts_older_than_receipt_days(repo):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    assert lanes_json(repo, "tick")[1]["batch_state"] == "completed"
    assert len(receipts(repo)) == 1
    code, doc = lanes_json(repo, "release", "--stale")
    assert code == 0 and "receipts_pruned" not in doc and len(receipts(repo)) == 1   # younger than 30 days
    git(repo, "config", "lanes.receiptDays", "0")
    code, doc = lanes_json(repo, "release", "--stale")
    assert code == 0 and doc["receipts_pruned"] == 1 and receipts(repo) == []


def test_push_leaves_this_clones_receipts_here(repo, tmp_path):
    one_task(repo, counter(repo, "c"))
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"] and receipts(repo)
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    code, doc = lanes_json(repo, "push")
    assert code == 0, doc
    assert "refs/notes/lanes/lane/demo/a" in git(bare, "for-each-ref")
    assert "receipts" not in git(bare, "for-each-ref") and not any("receipts" in r["ref"] for r in doc["refs"])


def test_tick_no_receipts_runs_the_gate_checks_for_that_tick_only(repo):
    one_task(repo, counter(repo, "c"))
    git(repo, "config", "lanes.gateTrustsLane", "true")   # a lane receipt would otherwise stand for the rerun
    assert lanes(repo, "start", "demo", "--yes")[0] == 0
    lane = provision(repo, "a")
    put(lane, {"src/x": "1"})
    assert done(lane)["passed"]
    code, report = lanes_json(repo, "tick", "--no-receipts")
    assert report["batch_state"] == "completed", report.get("reason")
    assert [r.split("|")[0] for r in runs(repo, "c")] == ["lane", "scratch"]
    assert [r["where"] for r in receipts(repo)] == ["lane"]     # nothing written by that tick
