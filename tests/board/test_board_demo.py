"""`git lanes demo` ends by printing the path of its batch's report (SPEC §17.5), written under DIR with the
session logs; the page holds a row per lane, a bar per attempt and verification, and `stats`' numbers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from board_world import Page, shown, stat_value

from git_lanes.run.demo import CORRECTED_TASK, SLUG, TASKS


def test_demo_prints_its_report_and_the_page_matches_stats(tmp_path):
    home = tmp_path / "demo"
    proc = subprocess.run(["git", "lanes", "demo", str(home)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.rstrip().splitlines()[-1]
    assert last.startswith("report: ")
    page = Path(last[len("report: "):])
    assert page.is_file() and page.is_relative_to(home / "logs") and page.name == "report.html"
    root = home / SLUG
    numbers = json.loads(subprocess.run(["git", "lanes", "stats", SLUG, "--json"], cwd=root, capture_output=True,
                                        text=True, check=True).stdout)["batches"][0]
    assert page.parent.name == numbers["batch_id"]
    doc = Page(page.read_text(encoding="utf-8"))
    tasks = [t[0] for t in TASKS]
    assert sorted(doc.rows) == sorted(tasks)
    for task, kinds in doc.rows.items():
        assert kinds.count("verification") == 1 and kinds.count("landing!") == 1
        assert [k for k in kinds if k.startswith("attempt")] == (["attempt-", "attempt+"] if task == CORRECTED_TASK
                                                                 else ["attempt+"])
    assert doc.rows[CORRECTED_TASK].count("correction!") == 1
    assert set(doc.nodes.values()) == {"released"}
    assert doc.stats and {k: shown(stat_value(numbers, k)) for k in doc.stats} == doc.stats   # equal, all of them
    assert numbers["landed"] == len(tasks) and numbers["corrections"]["total"] == 1
