"""Hints that work when pasted (SPEC §6.2, §7 step 16, §17.1, §17.6), through the installed `git lanes`:
every next_action and handoff line is a complete command (correction due, provisions, executor
handoffs); a refused option lists its choices; an accepted correction is reported as a correction; a
placeholder is never sent as a message; hints that need text name `--file <file>` (or `--edit` on a
terminal, the editor `git var GIT_EDITOR` names)."""

from __future__ import annotations

import os
import pty
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from flow import child_of, cli, done, exists, intent, ok, provision, start, write_plan
from helpers import snapshot_state


def simple(task: str) -> str:
    return intent(task, scope=[f"src/{task}"], acceptance=[("A1", "out", exists(f"src/{task}/out.txt"))])


def correction_due(repo: Path) -> Path:
    write_plan(repo, "demo", {"a": simple("a")})
    start(repo, "demo", "--qa-failure-limit", "1")
    lane = provision(repo, "a")
    assert done(lane, {"src/a/wrong.txt": "x\n"})["passed"] is False
    assert child_of(ok(repo, "tick"), "a")["correction_due"]
    return lane


def paste(cwd: Path, command: str, text: str = "make out.txt exist") -> subprocess.CompletedProcess:
    """Run a hint as a person does: the file it names (`<file>`) written first."""
    words = shlex.split(command)
    assert words[:2] == ["git", "lanes"], command
    if "<file>" in words:
        path = cwd.parent / "message.txt"
        path.write_text(text)
        words = [str(path) if w == "<file>" else w for w in words]
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, input="")


@pytest.mark.parametrize("text", ["…", "...", "  …  ", "<…>", "<text>", "<your correction here>", "'…'", "   ", ""])
def test_a_placeholder_or_blank_message_is_refused_and_nothing_is_sent(repo, text):
    correction_due(repo)
    before = snapshot_state(repo)
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                           "--message", text], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.startswith("error: --message: ")
    assert snapshot_state(repo) == before
    # the same through a file and through tick --instruct
    f = repo.parent / "m.txt"
    f.write_text(text + "\n")
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                           "--file", str(f)], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and "--file" in proc.stderr
    code, _, err = cli(repo, "tick", "--instruct",
                       '{"task_id": "a", "kind": "correction", "text": %s, "session_state": "idle"}'
                       % __import__("json").dumps(text))
    assert code == 2, err
    assert snapshot_state(repo) == before
    assert child_of(ok(repo, "status"), "a")["corrections"] == 0


def test_review_refuses_a_placeholder_reason(repo):
    proc = subprocess.run(["git", "lanes", "review", "a", "--reject", "-m", "…"], cwd=repo, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "placeholder" in proc.stderr


def test_the_v3_placeholder_wording_is_gone_from_code_docs_and_man_page():
    root = Path(__file__).resolve().parents[2]
    found = []
    for folder in ("git_lanes", "docs", "man"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".md", ".txt", ".1"):
                text = path.read_text(encoding="utf-8", errors="replace")
                if "--message '…'" in text or "-m '…'" in text:
                    found.append(str(path))
    assert found == []


def test_the_correction_hint_names_a_file_and_works_when_pasted(repo):
    correction_due(repo)
    report = ok(repo, "status")
    hint = "git lanes instruct a --kind correction --session-state idle --file <file> --slug demo"
    assert hint in report["next_action"] and "--edit" in report["next_action"]
    proc = subprocess.run(["git", "lanes", "status", "demo"], cwd=repo, capture_output=True, text=True)
    assert f"handoff: coordinator correct a: {hint}" in proc.stdout
    proc = paste(repo, hint, "Write src/a/out.txt, not wrong.txt.\n")
    assert proc.returncode == 0, proc.stderr
    assert "correction for a: accepted" in proc.stdout
    status = ok(repo, "status")
    assert child_of(status, "a")["corrections"] == 1
    assert status["interventions"][-1]["text"] == "Write src/a/out.txt, not wrong.txt.\n"


def test_provision_and_executor_hints_work_when_pasted(repo):
    write_plan(repo, "demo", {"a": simple("a"), "b": simple("b")})
    report = start(repo, "demo", "--max-parallel", "2")
    provisions = [h for h in report["handoffs"] if h.get("action") == "provision"]
    assert [h["task_id"] for h in provisions] == ["a", "b"]
    assert "git lanes provision a --slug demo" in report["next_action"]
    human = subprocess.run(["git", "lanes", "status", "demo"], cwd=repo, capture_output=True, text=True).stdout
    line = next(x for x in human.splitlines() if x.startswith("handoff: lane-steward provision a: "))
    proc = paste(repo, line.split(": ", 2)[2], "")
    assert proc.returncode == 0, proc.stderr
    assert child_of(ok(repo, "status"), "a")["state"] == "enrolled"
    # the executor handoff: `git -C <lane> lanes task, then work there and run git -C <lane> lanes done`
    human = subprocess.run(["git", "lanes", "status", "demo"], cwd=repo, capture_output=True, text=True).stdout
    line = next(x for x in human.splitlines() if x.startswith("handoff: executor implement a: "))
    command = line.split(": ", 2)[2]
    task_cmd, done_cmd = command.split(", then work there and run ")
    assert subprocess.run(shlex.split(task_cmd), cwd=repo, capture_output=True, text=True).returncode == 0
    lane = Path(child_of(ok(repo, "status"), "a")["lane"]["path"])
    (lane / "src" / "a").mkdir(parents=True)
    (lane / "src" / "a" / "out.txt").write_text("ok\n")
    proc = subprocess.run(shlex.split(done_cmd), cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "git lanes provision b --slug demo" in ok(repo, "status")["next_action"]
    assert child_of(ok(repo, "tick", "demo"), "a")["state"] == "integrated"


def _pty_run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run `argv` on a pseudo-terminal (stdin and stdout), as a person at a terminal does."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def _editor(tmp: Path, body: str) -> str:
    script = tmp / "editor.py"
    script.write_text("import sys, shutil, pathlib\n"
                      "p = pathlib.Path(sys.argv[1])\n"
                      f"shutil.copy(p, {str(tmp / 'seen.txt')!r})\n"
                      f"p.write_text({body!r} + p.read_text())\n")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def test_edit_opens_gits_editor_on_a_template_quoting_the_failing_checks(repo, tmp_path):
    correction_due(repo)
    env = dict(os.environ, GIT_EDITOR=_editor(tmp_path, "Use out.txt.\n# a comment the user wrote\n"))
    code, out = _pty_run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                          "--edit"], repo, env)
    assert code == 0, out
    assert "correction for a: accepted" in out
    seen = (tmp_path / "seen.txt").read_text()
    assert seen.startswith("\n# Write the correction for a above.")
    assert "FAIL A1 (exit 1)" in seen
    assert ok(repo, "status")["interventions"][-1]["text"] == "Use out.txt."


def test_edit_with_the_template_unchanged_sends_nothing_and_without_a_terminal_is_usage(repo, tmp_path):
    correction_due(repo)
    before = snapshot_state(repo)
    env = dict(os.environ, GIT_EDITOR=_editor(tmp_path, ""))
    code, out = _pty_run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                          "--edit"], repo, env)
    assert code == 2 and "nothing sent" in out
    env = dict(os.environ, GIT_EDITOR=_editor(tmp_path, "# only a comment\n\n"))
    code, out = _pty_run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                          "--edit"], repo, env)
    assert code == 2 and "nothing sent" in out
    proc = subprocess.run(["git", "lanes", "instruct", "a", "--kind", "correction", "--session-state", "idle",
                           "--edit"], cwd=repo, capture_output=True, text=True, input="")
    assert proc.returncode == 2 and "--edit needs a terminal" in proc.stderr
    assert snapshot_state(repo) == before
    assert not (repo / ".git" / "LANES_EDITMSG").exists()


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
