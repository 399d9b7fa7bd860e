"""A smoke run of every benchmark (`python -m bench --quick`): that each runs and emits a
well-formed ratio. Thresholds are the suite's business, never the tests'."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench.__main__ import FAMILIES, _print_row
from bench.common import critical_path, spread

ROOT = Path(__file__).resolve().parents[2]


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


def test_text_mode_prints_each_ratio_with_its_spread(capsys):
    entry = {"name": "idle_tick", "ratio": {"median": 1.5, "min": 1.25, "max": 2.0}, "runs": 5,
             "detail": {"target": 3.0, "what": "a tick", "baseline": "another tick"}}
    _print_row(entry)
    _print_row({"name": "startup", "error": "it broke"})
    out = capsys.readouterr().out
    assert "idle_tick" in out and "1.50x  [1.25-2.00]  n=5  target <= 3.0" in out and "baseline: another tick" in out
    assert "startup" in out and "ERROR: it broke" in out


def test_unknown_benchmark_is_a_usage_error():
    proc = bench("--only", "nope")
    assert proc.returncode != 0 and "unknown benchmark" in proc.stderr


def test_helpers():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    durations = {"a": 1.0, "b": 2.0, "c": 0.5, "d": 1.0}
    assert critical_path(durations, {"c": ["a"], "d": ["b", "c"]}) == 3.0
