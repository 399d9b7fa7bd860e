"""Seeing the batch (SPEC §17.5), the pure views: facts written by hand with known timings (and the v4
fields: sessions with usage, cached and flaky results, a candidate window) in, numbers, timeline rows,
the board's lines and the report page out."""

from __future__ import annotations

import pytest

from board_world import Page, parked_batch, running_batch, shown, stat_value

from git_lanes.board import render_report
from git_lanes.board.html import Text, page
from git_lanes.board.stats import batch_stats, percentiles, stats
from git_lanes.board.text import snapshot, stats_lines
from git_lanes.board.timeline import check_runs, events, timeline, verifications, waves


def test_percentiles_are_nearest_rank_and_null_without_samples():
    assert percentiles([]) == {"n": 0, "p50": None, "p90": None, "max": None, "total": 0}
    assert percentiles([3.0, 1.0, 2.0, 10.0]) == {"n": 4, "p50": 2.0, "p90": 10.0, "max": 10.0, "total": 16.0}
    ten = [float(i) for i in range(1, 11)]
    assert percentiles(ten)["p50"] == 5.0 and percentiles(ten)["p90"] == 9.0


def test_the_log_reads_as_events():
    kinds = [(e["kind"], e["task"]) for e in events(parked_batch())]
    assert ("qa_failure", "b") in kinds and ("correction_due", "b") in kinds and ("correction", "b") in kinds
    assert kinds.index(("settled", "a")) + 1 == kinds.index(("lane_commit", "a"))
    assert ("parked", "b") in kinds and ("released", "a") in kinds and kinds[0] == ("batch", None)


def test_stats_of_a_batch_with_known_timings():
    n = batch_stats(parked_batch())
    assert (n["tasks"], n["landed"], n["parked"]) == (3, 1, 1)
    assert n["wall_time_s"] == 18.2               # parked: created to its last write (running: to now)
    assert n["landing_latency_s"] == {"n": 1, "p50": 4.0, "p90": 4.0, "max": 4.0, "total": 4.0}
    assert n["verification_s"] == {"n": 2, "p50": 3.5, "p90": 3.5, "max": 3.5, "total": 7.0}
    assert n["checks"] == {"total": 7, "run": 5, "cached": 2, "flaky": 1, "failed": 2, "check_time_s": 4.8,
                           "receipts_hit_rate": 0.286}
    assert n["sessions"] == {"total": 3, "per_task": 1.0}
    assert n["failed_attempts"] == {"total": 1, "per_task": 0.333}
    assert n["corrections"] == {"total": 1, "per_task": 0.333}
    assert n["cost_usd"] == {"total": 1.0, "per_task": 0.333}
    assert n["tokens"] == {"input": 2000, "output": 400}
    per = {t["task_id"]: t for t in n["per_task"]}
    assert per["a"]["landing_latency_s"] == 4.0 and per["b"]["landing_latency_s"] is None
    assert (per["b"]["sessions"], per["b"]["cost_usd"], per["c"]["sessions"]) == (2, 0.5, None)


def test_stats_over_batches_pool_the_samples():
    doc = stats([parked_batch(), running_batch()])
    assert [b["batch_id"][0] for b in doc["batches"]] == ["s", "w"]
    overall = doc["overall"]
    assert overall["batches"] == 2 and overall["tasks"] == 6
    assert overall["checks"]["total"] == 8                          # e's passed candidate ran one more
    assert overall["verification_s"]["n"] == 3                      # d is still verifying: not a sample
    assert overall["sessions"]["total"] == 4 and overall["cost_usd"]["total"] == 1.1
    assert "all 2 batches" in "\n".join(stats_lines(doc))


def test_a_record_without_the_v4_fields_says_unknown_not_zero():
    facts = parked_batch()
    for lane in facts["lanes"].values():
        if lane:
            del lane["sessions"]
    n = batch_stats(facts)
    assert n["sessions"] == {"total": None, "per_task": None} and n["cost_usd"]["total"] is None
    assert "sessions —" in "\n".join(stats_lines({"batches": [n], "overall": n}))


def test_timeline_has_a_row_per_lane_and_a_bar_per_session_attempt_and_verification():
    tl = timeline(parked_batch())
    rows = {r["task"]: r for r in tl["rows"]}
    assert list(rows) == ["a", "b"]                                  # c never had a lane
    kinds = {t: sorted(b["kind"] for b in r["bars"]) for t, r in rows.items()}
    assert kinds == {"a": ["attempt", "session", "verification"],
                     "b": ["attempt", "attempt", "session", "session", "verification"]}
    assert sorted(m["kind"] for m in rows["b"]["marks"]) == ["correction", "park"]
    assert [m["kind"] for m in rows["a"]["marks"]] == ["landing"]
    failed = [b for b in rows["b"]["bars"] if b["kind"] == "attempt" and not b["passed"]]
    assert len(failed) == 1 and failed[0]["end"] - failed[0]["start"] == pytest.approx(0.4)


def test_a_window_of_candidates_fills_in_what_the_log_does_not_say():
    v = {x["task"]: x["outcome"] for x in verifications(running_batch())}
    assert v == {"d": "verifying", "e": "passed"}
    runs = check_runs(running_batch())
    assert [(r["task"], r["where"]) for r in runs] == [("e", "scratch")]


def test_the_board_shows_each_child_the_window_and_the_metrics():
    lines = snapshot(parked_batch())
    text = "\n".join(lines)
    assert lines[0] == "batch s-20260101T000000Z-abcdef (s): needs_human — batch_integration_check_failed: b"
    row = {line.split()[0]: line for line in lines[3:7]}
    assert row["a"].split()[1:3] == ["released", "s/a"] and "A2 cached" in row["a"] and "$0.50" in row["a"]
    assert "A1 flaky" not in row["b"] and "b:A1 failed" in row["b"]        # the gate's rerun came last
    assert row["c"].split()[1] == "skipped_blocked"
    assert "candidates: none" in text and "p50 4.0 s" in text and "last events:" in text
    assert lines[-1].endswith("release: released a")
    live = "\n".join(snapshot(running_batch()))
    assert "candidates: d verifying for 4.0 s, e passed for 4.0 s (1/1 checks passed)" in live
    assert "1 (1 running)" in live


def test_the_page_is_self_contained_and_holds_the_timeline_and_the_numbers():
    facts = parked_batch()
    text = render_report(facts)
    doc = Page(text)
    assert "script" not in doc.tags and "link" not in doc.tags and "img" not in doc.tags
    assert not [(k, v) for k, v in doc.attrs if k in ("src", "href") or "url(http" in v]
    assert doc.rows == {"a": ["session", "attempt+", "verification", "landing!"],
                        "b": ["session", "session", "attempt-", "attempt+", "verification", "correction!", "park!"]}
    assert doc.nodes == {"a": "released", "b": "needs_human", "c": "skipped_blocked"}
    assert doc.checks == 7
    numbers = batch_stats(facts)
    assert doc.stats and all(shown(stat_value(numbers, key)) == value for key, value in doc.stats.items())


def test_the_page_escapes_and_redacts_what_the_records_say(monkeypatch):
    facts = parked_batch()
    facts["lanes"]["a"]["qa_attempts"][0]["results"][0]["command"] = "curl -H 'x: hunter2-secret' <script>alert(1)"
    text = page(facts, timeline(facts), check_runs(facts), batch_stats(facts), ["hunter2-secret"])
    assert "hunter2" not in text and "<script>" not in text and "&lt;script&gt;alert(1)" in text
    assert "fix &lt;b&gt; &amp; go" in text                           # an intervention's text, in a tooltip
    assert Text(["secret1"])("a<secret1>") == "a&lt;***&gt;"
    facts["lanes"]["b"]["qa_attempts"][0]["results"][0]["output_tail"] = "FAILED: hunter2-secret </pre><b>x"
    text = page(facts, timeline(facts), check_runs(facts), batch_stats(facts), ["hunter2-secret"])
    assert "FAILED: *** &lt;/pre&gt;&lt;b&gt;x</pre></details>" in text      # a failed check's tail, folded
    monkeypatch.setenv("MY_API_TOKEN", "tok-123456")
    facts["lanes"]["b"]["qa_attempts"][0]["results"][0]["command"] = "echo tok-123456"
    assert "tok-123456" not in render_report(facts)


def test_waves_follow_the_dependencies():
    record = {"children": [{"task_id": t, "blocked_by": b} for t, b in
                           (("x", []), ("y", ["x"]), ("z", ["y", "x"]), ("w", []))]}
    assert waves(record) == [["x", "w"], ["y"], ["z"]]
