"""A smoke run of every benchmark (`python -m bench --quick`): that each runs and emits a
well-formed ratio. Thresholds are the suite's business, never the tests'."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench.__main__ import FAMILIES
from bench.common import critical_path, spread

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_every_benchmark_runs_and_emits_a_ratio():
    proc = bench("--quick", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    entries = {e["name"]: e for e in doc["benchmarks"]}
    assert set(entries) == {name for f in FAMILIES for name in f.results}
    for name, e in entries.items():
        r = e["ratio"]
        assert set(r) == {"median", "min", "max"}, name
        assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in r.values()), (name, r)
        assert r["min"] <= r["median"] <= r["max"], (name, r)
        assert e["runs"] == 1, name
        assert isinstance(e["detail"], dict) and e["detail"].get("baseline"), name


def test_only_selects_and_text_mode_prints_each_ratio():
    proc = bench("--quick", "--only", "lane_task_json,done_startup")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines() if line and not line.startswith(" ")]
    assert names == ["lane_task_json", "done_startup"]
    assert "x  [" in proc.stdout


def test_unknown_benchmark_is_a_usage_error():
    proc = bench("--only", "nope")
    assert proc.returncode != 0 and "unknown benchmark" in proc.stderr


def test_helpers():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    durations = {"a": 1.0, "b": 2.0, "c": 0.5, "d": 1.0}
    assert critical_path(durations, {"c": ["a"], "d": ["b", "c"]}) == 3.0
