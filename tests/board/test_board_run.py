"""`git lanes stats`, `report` and `watch --once` on a real batch driven by `git lanes run` (SPEC §17.5):
one child lands, one fails once and is corrected, one gives up (a park) and its dependent is skipped.
The numbers are checked against the records themselves (`log --json`, `show --json`, the evidence
notes), the page against them too, and nothing these commands do moves a ref — also while `run` runs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from board_world import Page, shown, stat_value
from conftest import git
from test_run import executor, make_repo, run, run_cmd  # noqa: F401  (executor is a fixture)

from git_lanes.board.timeline import secs


def lanes(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "lanes", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def refs(root: Path) -> str:
    return git(root, "for-each-ref", "--format=%(objectname) %(refname)")


@pytest.fixture
def parked(tmp_path, executor):  # noqa: F811
    """A finished `run`: ok lands, fix is corrected once and lands, stuck parks, after is skipped; then the
    v4 fields other parts of git-lanes write (`sessions[]` with usage, a cached and a flaky result) are
    added to ok's lane record through the store, as `run` and `done` would."""
    root = make_repo(tmp_path / "repo", ["ok", "fix", "stuck", "after"], blocked={"after": ["stuck"]})
    proc = run(root, "drv", executor, "--max-parallel", "3", "--qa-failure-limit", "1",
               env={"EXEC_GIVE_UP": "stuck", "EXEC_FAIL_FIRST": "fix"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    from git_lanes.domain.session import Session

    s = Session(cwd=str(root))
    data, tip = s.lanes.read_data("drv", "ok")
    data["sessions"] = [{"n": 1, "started": "2026-01-01T00:00:01.000Z", "ended": "2026-01-01T00:00:03.500Z",
                         "exit": 0, "usage": {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.42}}]
    first = data["qa_attempts"][-1]["results"][0]
    first.update(cached=True, receipt="f" * 64)
    data["qa_attempts"][-1]["results"].append({**first, "id": "A9", "cached": False, "flaky": True,
                                               "attempts": [{"exit_code": 1, "output_tail": "flake"}]})
    s.lanes.write_data("drv", data, tip, "test: the v4 fields")
    return root


def test_stats_report_and_watch_read_the_records_and_write_nothing(parked, tmp_path):
    root = parked
    before = refs(root)
    got = lanes(root, "stats", "drv", "--json")
    assert got.returncode == 0, got.stderr
    (numbers,) = json.loads(got.stdout)["batches"]
    page_file = tmp_path / "out" / "page.html"
    page_file.parent.mkdir()
    assert lanes(root, "report", "drv", "--html", str(page_file)).returncode == 0
    default = lanes(root, "report", "drv")
    assert default.returncode == 0, default.stderr
    watched = lanes(root, "watch", "drv", "--once")
    assert watched.returncode == 0, watched.stderr
    assert refs(root) == before                                 # read-only, all of them

    # the numbers, from the records themselves
    log = json.loads(lanes(root, "log", "drv", "--json").stdout)
    shows = {t: json.loads(lanes(root, "show", t, "--slug", "drv", "--json").stdout)
             for t in ("ok", "fix", "stuck", "after")}
    when: dict[tuple[str, str], float] = {}
    for entry in log:
        for phrase in entry["summary"].split(", "):
            when.setdefault(tuple(phrase.rsplit(" ", 1)), secs(entry["at"]))
    latencies = sorted(when[("integrated", t)] - when[("lane commit", t)] for t in ("ok", "fix"))
    assert numbers["landing_latency_s"]["n"] == 2
    assert numbers["landing_latency_s"]["max"] == round(latencies[-1], 3)
    assert numbers["landing_latency_s"]["p50"] == round(latencies[0], 3)
    attempts = {t: (d["lane_record"] or {}).get("qa_attempts", []) for t, d in shows.items()}
    assert numbers["failed_attempts"]["total"] == sum(not a["passed"] for v in attempts.values() for a in v) == 1
    assert numbers["corrections"]["total"] == shows["fix"]["child"]["corrections"] == 1
    reruns = 0
    for t in ("ok", "fix"):
        note = git(root, "notes", "--ref=lanes/evidence", "show", shows[t]["child"]["commit"])
        reruns += len(json.loads(note)["rerun"])
    lane_results = [r for v in attempts.values() for a in v for r in a["results"]]
    assert numbers["checks"]["total"] == len(lane_results) + reruns
    assert (numbers["checks"]["cached"], numbers["checks"]["flaky"]) == (1, 1)
    assert numbers["checks"]["check_time_s"] == round(
        sum(r["duration_ms"] for r in lane_results if not r.get("cached")) / 1000 + sum(
            r["duration_ms"] for t in ("ok", "fix") for r in json.loads(git(
                root, "notes", "--ref=lanes/evidence", "show", shows[t]["child"]["commit"]))["rerun"]) / 1000, 3)
    # run records each session (SPEC §17.4); ok's were replaced by the fixture's one, with its cost
    sessions = sum(len((d["lane_record"] or {}).get("sessions") or []) for d in shows.values())
    assert len(shows["ok"]["lane_record"]["sessions"]) == 1 and sessions >= 4
    assert numbers["sessions"]["total"] == sessions and numbers["cost_usd"]["total"] == 0.42
    assert numbers["tokens"] == {"input": 1200, "output": 300}
    assert (numbers["tasks"], numbers["landed"], numbers["parked"]) == (4, 2, 1)
    assert numbers["wall_time_s"] == round(secs(log[-1]["at"]) - secs(log[0]["at"]), 3)

    # the page: a row per lane, a bar per session, attempt and verification, stats' own numbers
    for text in (page_file.read_text(), Path(default.stdout.strip()).read_text()):
        doc = Page(text)
        assert sorted(doc.rows) == ["fix", "ok", "stuck"]           # after never had a lane
        for task, kinds in doc.rows.items():
            assert sum(k.startswith("attempt") for k in kinds) == len(attempts[task])
            assert kinds.count("session") == len((shows[task]["lane_record"] or {}).get("sessions") or [])
            candidates = sum(1 for e in log for p in e["summary"].split(", ") if p == f"candidate {task}")
            assert kinds.count("verification") == candidates
        assert "park!" in doc.rows["stuck"] or shows["stuck"]["child"]["state"] == "needs_human"
        assert "correction!" in doc.rows["fix"]
        assert doc.nodes["after"] == "skipped_blocked" and doc.nodes["stuck"] == "needs_human"
        assert all(shown(stat_value(numbers, k)) == v for k, v in doc.stats.items())
    assert default.stdout.strip().endswith(f"{numbers['batch_id']}/report.html")

    board = watched.stdout
    assert board.startswith(f"batch {numbers['batch_id']} (drv): needs_human")
    assert all(f"\n{t} " in board for t in ("ok", "fix", "stuck", "after")) and "\x1b" not in board


def test_every_batch_of_the_repository_when_no_slug_is_named(parked):
    doc = json.loads(lanes(parked, "stats", "--json").stdout)
    assert len(doc["batches"]) == 1 and doc["overall"]["batches"] == 1
    assert doc["overall"]["landing_latency_s"] == doc["batches"][0]["landing_latency_s"]
    human = lanes(parked, "stats")
    assert human.returncode == 0 and "lane commit to landing: p50" in human.stdout


def test_bad_input_is_a_usage_error_that_writes_nothing(parked, tmp_path):
    before = refs(parked)
    for args, text in ((("report", "nope"), "no batch for nope"), (("stats", "no/pe"), "slug"),
                       (("watch", "--interval", "0"), "--interval"),
                       (("report", "drv", "--html", str(tmp_path / "no" / "such" / "x.html")), "--html"),
                       (("watch", "drv", "--once", "--remote", "nowhere"), "nowhere")):
        got = lanes(parked, *args)
        assert got.returncode == 2 and got.stdout == "", (args, got.stdout, got.stderr)
        assert got.stderr.startswith("error:") and text in got.stderr and "Traceback" not in got.stderr
    assert refs(parked) == before and not (tmp_path / "no").exists()


HOOK = """#!/bin/sh
if [ -n "$BOARD_MARK" ]; then { echo "$1"; cat; } >> "$BOARD_LOG"; fi
exit 0
"""


def test_watch_report_and_stats_during_a_run_move_no_ref(tmp_path, executor):  # noqa: F811
    root = make_repo(tmp_path / "repo", ["p", "q", "r"], blocked={"r": ["p"]})
    hook = Path(git(root, "rev-parse", "--git-path", "hooks").strip())
    hook = hook if hook.is_absolute() else root / hook
    hook.mkdir(exist_ok=True)
    (hook / "reference-transaction").write_text(HOOK)
    (hook / "reference-transaction").chmod(0o755)
    marked = tmp_path / "board-ref-updates.txt"
    mark = {"BOARD_MARK": "1", "BOARD_LOG": str(marked)}
    git(root, "update-ref", "refs/probe", "HEAD")                  # unmarked: not logged
    subprocess.run(["git", "update-ref", "-d", "refs/probe"], cwd=root, env={**os.environ, **mark}, check=True)
    assert "refs/probe" in marked.read_text()                       # the hook sees what a marked process writes
    marked.unlink()
    proc = subprocess.Popen(run_cmd("drv", executor, "--max-parallel", "2"), cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "EXEC_SLEEP": "0.6"})
    seen = set()
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if not git(root, "for-each-ref", "refs/notes/lanes/batch/").strip():
                time.sleep(0.1)
                continue
            once = lanes(root, "watch", "drv", "--once", env=mark)
            assert once.returncode == 0, once.stderr
            seen.add(once.stdout.splitlines()[0].split(": ", 1)[1].split()[0])
            assert lanes(root, "report", "drv", "--html", str(tmp_path / "r.html"), env=mark).returncode == 0
            assert lanes(root, "stats", "drv", "--json", env=mark).returncode == 0
        assert proc.wait(timeout=120) == 0, proc.stdout.read().decode() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "running" in seen                                        # it did look while the batch ran
    assert not marked.exists()                                      # and moved no ref meanwhile


def test_an_older_batch_keeps_its_lane_records_in_the_numbers(tmp_path, executor):  # noqa: F811
    """A later batch's lane record starts from the earlier one's tip: `stats` over the repository finds
    the older batch's attempts down that line, so its numbers do not change when a new batch runs."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("two batches\n")
    marker = tmp_path / "scratch-is-broken"
    marker.write_text("")
    check = ("python3 -c \"import os,sys; t = os.path.exists('src/a.txt'); bad = os.sep + 'scratch' + os.sep in "
             f"os.getcwd() + os.sep and os.path.exists({str(marker)!r}); sys.exit(0 if t and not bad else 1)\"")
    from helpers import write_initiative

    write_initiative(root, "mb", [{"id": "a", "check": check}])
    assert run(root, "mb", executor).returncode == 1                # a passes in its lane, parks on its candidate
    first = json.loads(lanes(root, "stats", "--json").stdout)["batches"]
    assert [b["batch_state"] for b in first] == ["needs_human"]
    assert lanes(root, "retire", "mb", "--yes").returncode == 0
    released = lanes(root, "release", "--stale", "mb")
    assert released.returncode == 0, released.stderr
    marker.unlink()
    second = run(root, "mb", executor)
    assert second.returncode == 0, second.stdout + second.stderr
    both = json.loads(lanes(root, "stats", "--json").stdout)
    assert [b["batch_state"] for b in both["batches"]] == ["superseded", "completed"]
    old = both["batches"][0]
    assert old["checks"] == first[0]["checks"] and old["checks"]["total"] >= 2   # its lane attempt and the rerun
    assert [t["failed_attempts"] for t in old["per_task"]] == [0]
    assert both["overall"]["checks"]["total"] == old["checks"]["total"] + both["batches"][1]["checks"]["total"]


def test_a_restarted_child_keeps_its_earlier_lanes_in_the_numbers(parked):
    """`resume --restart` archives the lane (its record's tip kept in `archived_lanes[]`): the attempts and
    sessions of that earlier lane still count, before the new lane's."""
    root = parked
    from git_lanes.domain.session import Session

    s = Session(cwd=str(root))
    data, tip = s.lanes.read_data("drv", "stuck")
    data["sessions"] = [{"n": 1, "started": "2026-01-01T00:00:01.000Z", "ended": "2026-01-01T00:00:02.000Z",
                         "exit": 0, "usage": {"cost_usd": 0.25}}]
    s.lanes.write_data("drv", data, tip, "test: a session of the lane that gave up")
    before = json.loads(lanes(root, "stats", "drv", "--json").stdout)["batches"][0]
    restarted = lanes(root, "resume", "drv", "--restart", "stuck", "--yes")
    assert restarted.returncode == 0, restarted.stderr
    assert lanes(root, "show", "stuck", "--slug", "drv", "--json").returncode == 0
    assert git(root, "for-each-ref", "refs/notes/lanes/lane/drv/stuck").strip() == ""   # its record was archived
    after = json.loads(lanes(root, "stats", "drv", "--json").stdout)["batches"][0]
    per = {t["task_id"]: t for t in after["per_task"]}
    assert per["stuck"]["state"] == "pending" and per["stuck"]["sessions"] == 1 and per["stuck"]["cost_usd"] == 0.25
    assert after["cost_usd"]["total"] == before["cost_usd"]["total"] == 0.67
