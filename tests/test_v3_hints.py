"""Runnable hints (SPEC §6.2, §7 step 16 v3), through the installed `git lanes`: every next_action and handoff
line is a complete command that works when pasted; a refused option lists its choices; an accepted correction
is reported as a correction."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, write_plan


def paste(cwd: Path, command: str, message: str = "make out.txt exist") -> subprocess.CompletedProcess:
    """Run a hint as a person pastes it into a shell, with the message (and the file it names) filled in."""
    text_file = cwd.parent / "hint-message.txt"
    text_file.write_text(message)
    argv = [str(text_file) if word == "<file>" else word for word in shlex.split(command)]
    assert argv[:2] == ["git", "lanes"], command
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, input="")


def simple(task: str) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))])


def test_the_correction_hint_works_when_pasted_and_is_reported_as_a_correction(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo", "--qa-failure-limit", "1")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/wrong.txt": "x\n"})["passed"] is False
    report = ok(repo, "tick")
    hint = ("git lanes instruct a --kind correction --session-state idle --file <file> --slug demo")
    assert hint in report["next_action"]
    assert "git lanes show a --slug demo" in report["next_action"]
    proc = paste(repo, hint)
    assert proc.returncode == 0, proc.stderr
    assert "correction for a: accepted" in proc.stdout
    assert child_of(ok(repo, "status"), "a")["corrections"] == 1
    # the human report shows every handoff with the command that carries it out
    proc = subprocess.run(["git", "lanes", "status", "demo"], cwd=repo, capture_output=True, text=True)
    assert f"handoff: executor implement a: git -C {shlex.quote(str(lane))} lanes task" in proc.stdout


def test_a_missing_or_refused_option_lists_its_choices(repo):
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind", "correction", "-m", "x"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == ("error: Missing option '--session-state'. Choose from: idle, working, "
                                           "blocked, done.")
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind", "bogus", "--session-state", "idle"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "'instruction', 'correction'" in proc.stderr.splitlines()[0]
    # an option given without its value (click raises that with no context): its choices and the -h hint
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: Option '--kind' requires an argument. Choose from: instruction, "
                                        "correction.", "hint: see 'git lanes instruct -h'"]
    proc = subprocess.run(["git", "lanes", "review", "a", "--approve", "-m"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.splitlines()[0] == "error: Option '-m' requires an argument."


def test_provision_and_release_hints_work_when_pasted(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    report = start(repo, "demo", "--max-parallel", "2")
    assert report["next_action"] == ("Provide a lane for each provision handoff: git lanes provision a --slug demo; "
                                     "git lanes provision b --slug demo.")
    for command in report["next_action"].split(": ", 1)[1].rstrip(".").split("; "):
        assert paste(repo, command).returncode == 0
    report = ok(repo, "status")
    for task in "ab":
        assert done(Path(child_of(report, task)["lane"]["path"]), {f"src/{task}/out.txt": "x\n"})["passed"]
    report = ok(repo, "tick")
    assert report["batch_state"] == "completed"
    assert report["next_action"].startswith("Batch completed; release the integrated lanes: "
                                            "git lanes release a --slug demo; git lanes release b --slug demo; "
                                            "then land it: git switch main && git merge --ff-only imm/demo")
    assert paste(repo, "git lanes release a --slug demo").returncode == 0
    assert paste(repo, "git lanes release b --slug demo").returncode == 0
    report = ok(repo, "status")
    assert report["next_action"] == "Batch completed; land it: git switch main && git merge --ff-only imm/demo."
    git(repo, "switch", "-q", "main")
    git(repo, "merge", "-q", "--ff-only", "imm/demo")
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "imm/demo")


def test_a_parked_batch_names_the_show_and_resume_commands(repo):
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo")
    lane = provision(repo, "a")
    git(lane, "switch", "-q", "-c", "elsewhere")
    report = ok(repo, "tick")
    assert report["batch_state"] == "needs_human"
    action = report["next_action"]
    assert ("git lanes show a --slug demo, then git lanes resume demo --yes (or git lanes resume demo "
            "--restart a --yes)") in action
    assert "git lanes retire demo --yes" in action
    proc = paste(repo, "git lanes show a --slug demo")
    assert proc.returncode == 0 and "batch_lane_lost" in proc.stdout
    git(lane, "switch", "-q", "imm-lane/demo/a")
    proc = paste(repo, "git lanes resume demo --yes")
    assert proc.returncode == 0, proc.stderr


def test_start_without_a_terminal_shows_what_it_would_confirm(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    proc = subprocess.run(["git", "lanes", "start", "demo"], cwd=repo, capture_output=True, text=True, input="")
    assert proc.returncode == 1
    err = proc.stderr
    assert err.index("Start a batch of demo") < err.index("waves:") < err.index("error: batch_confirmation_required")
    assert "pass --yes" in err and proc.stdout == ""
    code, doc, err = cli(repo, "start", "demo")     # --json: nothing on stdout but the (absent) report
    assert code == 1 and "batch_confirmation_required" in err
