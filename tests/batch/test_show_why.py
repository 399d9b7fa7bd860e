"""`show` shows why (SPEC §17.1 v4), through the installed `git lanes`: the last failed attempt's failing checks
with their output tails, every instruction and correction sent to the lane in full (read/unread), `(removed)`
after a lane path that is gone; a session's failure line quotes the telling line, and a stored output tail
starts at a line boundary with no half escape sequence."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import git
from flow import done, intent, ok, provision, start, write_plan

CHECK_PY = r'''
import pathlib, sys
if pathlib.Path("src/a/out.txt").exists():
    sys.exit(0)
print("collected 3 items")
print("tests/test_a.py::test_one PASSED")
print("FAILED tests/test_a.py::test_two - AssertionError: out.txt is missing")
print("1 failed, 2 passed")
print("")
print("Duration: 19ms")
sys.exit(1)
'''

NOISY_PY = r'''
import sys
for n in range(3000):
    print(f"\x1b[31mline {n} of noise\x1b[0m")
sys.exit(1)
'''


def setup_repo(repo: Path) -> None:
    (repo / "check.py").write_text(CHECK_PY)
    (repo / "noisy.py").write_text(NOISY_PY)
    git(repo, "add", "check.py", "noisy.py")
    git(repo, "commit", "-q", "-m", "checks")
    write_plan(repo, "demo", {
        "a": intent("a", acceptance=[("A1", "the tests pass", "python3 check.py")]),
        "n": intent("n", acceptance=[("N1", "noise", "python3 noisy.py")]),
    })


def show(repo: Path, task: str) -> str:
    proc = subprocess.run(["git", "lanes", "show", task, "--slug", "demo"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_show_prints_the_failing_checks_the_inbox_in_full_and_a_removed_lane(repo):
    setup_repo(repo)
    start(repo, "demo", "--qa-failure-limit", "3")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/wrong.txt": "x\n"})["passed"] is False
    ok(repo, "tick")
    text = "First line of the instruction.\nSecond line: look at test_two.\n"
    ok(repo, "instruct", "a", "--session-state", "idle", "-m", text)
    out = show(repo, "a")
    # the attempt line quotes the telling line, never the trailing statistics
    assert "A1 (exit 1): 1 failed, 2 passed" in out
    assert "Duration: 19ms" in out   # ... which the whole output tail below still shows
    assert "  last failed attempt (" in out
    assert "    FAIL A1 (exit 1): python3 check.py" in out
    assert "        collected 3 items" in out
    # the instruction, in full, unread
    assert "  instruction sent " in out and "(unread):" in out
    assert "    | First line of the instruction." in out and "    | Second line: look at test_two." in out
    subprocess.run(["git", "lanes", "inbox", "--ack"], cwd=lane, capture_output=True, check=True)
    assert "(read):" in show(repo, "a")
    doc = ok(repo, "show", "a")
    assert doc["inbox"] == [{"at": doc["inbox"][0]["at"], "kind": "instruction", "text": text, "read": True}]
    # a lane path that no longer exists says so
    assert "(removed)" not in out
    shutil.rmtree(lane)
    assert f"  lane: {lane} (removed)" in show(repo, "a")


def test_a_long_output_tail_starts_at_a_line_with_no_escape_sequence(repo):
    setup_repo(repo)
    start(repo, "demo", "--qa-failure-limit", "3", "--max-parallel", "2")
    ok(repo, "provision", "a")
    lane = provision(repo, "n")
    doc = done(lane, {"src/n/x.txt": "x\n"})
    tail = doc["results"][0]["output_tail"]
    assert len(tail.encode()) <= 4096
    assert "\x1b" not in tail and "[31m" not in tail and "[0m" not in tail
    assert tail.startswith("line ") and tail.endswith("line 2999 of noise\n")
    assert all(line.startswith("line ") and line.endswith(" of noise") for line in tail.splitlines())


def test_telling_line_rule():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from git_lanes.domain.checks import telling_line

    assert telling_line("a\nFAILED x\nDuration: 19ms\n") == "FAILED x"
    assert telling_line("not ok 3 - adds\n# tests 4\n# pass 3\n") == "not ok 3 - adds"
    assert telling_line("✘ renders\n\n  1 passing\n") == "✘ renders"
    assert telling_line("fatal: bad object\nbye\n") == "fatal: bad object"
    assert telling_line("E   assert 1 == 2\n====\n") == "E   assert 1 == 2"
    assert telling_line("all quiet\nDuration: 19ms\n\n") == "Duration: 19ms"
    assert telling_line("") == ""


def test_a_run_session_line_quotes_the_telling_line(repo, tmp_path):
    (repo / "check.py").write_text(CHECK_PY)
    git(repo, "add", "check.py")
    git(repo, "commit", "-q", "-m", "check")
    write_plan(repo, "demo", {"a": intent("a", acceptance=[("A1", "the tests pass", "python3 check.py")])})
    script = tmp_path / "exec.py"
    script.write_text("import pathlib\np = pathlib.Path('src/a'); p.mkdir(parents=True, exist_ok=True)\n"
                      "(p / 'wrong.txt').write_text('x')\n")
    proc = subprocess.run(["git", "lanes", "run", "demo", "--executor", f"{sys.executable} {script}", "--yes",
                           "--qa-failure-limit", "1"], cwd=repo, capture_output=True, text=True, timeout=240)
    assert "done: failed A1 (exit 1): 1 failed, 2 passed" \
        in proc.stdout, proc.stdout + proc.stderr
    assert "): Duration: 19ms" not in proc.stdout
