"""Shell completion: `git lanes <TAB>` inside Git's own completion, and `git-lanes <TAB>`.

Bash is driven for real: Git's completion plus ours, sourced in `bash`, with COMP_WORDS,
COMP_CWORD, COMP_LINE and COMP_POINT set as readline sets them, calling the function that
`complete -p` names (so `git lanes <TAB>` goes through Git's `__git_main`, which calls our
`_git_lanes`). zsh is driven with its completion builtins stubbed (they only work inside
a completion widget); fish for real with `complete -C`. The zsh and fish results are
compared with golden files in tests/golden/ (`UPDATE_GOLDEN=1` rewrites them).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from ergonomics_helpers import REPO_ROOT, completable_repo, env_with_bin, run

from git_lanes.surface import completion

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
GIT_BASH_COMPLETION = next((p for p in ("/usr/share/bash-completion/completions/git",
                                        "/usr/share/git-core/contrib/completion/git-completion.bash",
                                        "/etc/bash_completion.d/git")
                            if Path(p).is_file()), None)
BASH_COMPLETION = next((p for p in ("/usr/share/bash-completion/bash_completion",)
                        if Path(p).is_file()), None)

needs_git_bash = pytest.mark.skipif(shutil.which("bash") is None or GIT_BASH_COMPLETION is None,
                                    reason="bash or Git's bash completion is not installed "
                                           "(.ci/run installs bash-completion)")


# -- the scripts ---------------------------------------------------------------------------

@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_installed_files_are_the_scripts(shell):
    path = REPO_ROOT / completion.FILES[shell]
    assert path.read_text(encoding="utf-8") == completion.script(shell), (
        f"{path} is stale; run: python -m git_lanes.surface.completion")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_command_prints_the_script(tmp_path, shell):
    proc = run(["git-lanes", "completion", shell], tmp_path)
    assert proc.stdout == completion.script(shell)


def test_unknown_shell_is_a_usage_error(tmp_path):
    proc = run(["git-lanes", "completion", "tcsh"], tmp_path, check=False)
    assert proc.returncode == 2 and proc.stdout == ""


def test_scripts_use_the_names_git_looks_for():
    assert "_git_lanes ()" in completion.BASH
    assert "complete -o nosort -F _git_lanes_bare git-lanes" in completion.BASH
    assert completion.ZSH.startswith("#compdef git-lanes\n") and "_git-lanes() {" in completion.ZSH
    assert "complete --command git-lanes" in completion.FISH


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_script_parses():
    subprocess.run(["bash", "-n", "-c", completion.BASH], check=True)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_zsh_script_parses():
    subprocess.run(["zsh", "-n", "-c", completion.ZSH], check=True)


@pytest.mark.skipif(shutil.which("fish") is None, reason="no fish")
def test_fish_script_parses():
    subprocess.run(["fish", "--no-execute", "-c", completion.FISH], check=True)


# -- the protocol ---------------------------------------------------------------------------

def _request(cwd: Path, words: str, cword: int, shell: str = "bash") -> list[str]:
    env = env_with_bin(_GIT_LANES_COMPLETE=f"{shell}_complete", COMP_WORDS=words, COMP_CWORD=str(cword))
    return [line for line in run(["git-lanes"], cwd, env=env).stdout.splitlines() if line]


def test_click_protocol_answers(tmp_path):
    assert _request(tmp_path, "git-lanes ti", 1) == ["plain,tick"]
    assert _request(tmp_path, "git-lanes instruct x --kind ", 4) == ["plain,instruction", "plain,correction"]
    assert _request(tmp_path, "git-lanes instruct x --session-state w", 4) == ["plain,working"]


def test_dynamic_slugs_and_tasks(repo):
    completable_repo(repo)
    assert _request(repo, "git-lanes status ", 2) == ["plain,demo"]
    assert _request(repo, "git-lanes show ", 2) == ["plain,lexer", "plain,parser"]
    assert _request(repo, "git-lanes show p", 2) == ["plain,parser"]
    assert _request(repo, "git-lanes resume ", 2) == ["plain,demo"]


def test_dynamic_completion_outside_a_repository_is_empty(tmp_path):
    assert _request(tmp_path, "git-lanes status ", 2) == []


# -- bash, for real -------------------------------------------------------------------------

BASH_DRIVER = r"""
__lanes_complete_line () {
	COMP_LINE="$1"
	COMP_POINT=${#COMP_LINE}
	read -r -a COMP_WORDS <<< "$COMP_LINE"
	case "$COMP_LINE" in *' ') COMP_WORDS+=("") ;; esac
	COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
	COMPREPLY=()
	if declare -F _completion_loader >/dev/null && ! complete -p "${COMP_WORDS[0]}" >/dev/null 2>&1; then
		_completion_loader "${COMP_WORDS[0]}"
	fi
	local spec fn
	spec=$(complete -p "${COMP_WORDS[0]}") || { echo "no completion for ${COMP_WORDS[0]}"; return; }
	fn=${spec##*-F }
	fn=${fn%% *}
	"$fn" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
	printf '%s\t' "$1"
	[ ${#COMPREPLY[@]} -eq 0 ] || printf '<%s>' "${COMPREPLY[@]}"
	printf '\n'
}
"""


def _bash_complete(cwd: Path, lines: list[str], *, framework: bool, tmp_path: Path) -> dict[str, list[str]]:
    """Complete each line in one bash; {line: COMPREPLY}."""
    script = []
    env = env_with_bin()
    if framework:
        # bash-completion loads Git's completion, and ours on demand, from completion dirs
        user_dir = tmp_path / "bash-completion"
        (user_dir / "completions").mkdir(parents=True, exist_ok=True)
        (user_dir / "completions" / "git-lanes").write_text(completion.BASH)
        env["BASH_COMPLETION_USER_DIR"] = str(user_dir)
        script.append(f"source {shlex.quote(BASH_COMPLETION)}")
    else:
        # no framework: Git's completion, then ours, as a ~/.bashrc would source them
        ours = tmp_path / "git-lanes.bash"
        ours.write_text(completion.BASH)
        script += [f"source {shlex.quote(GIT_BASH_COMPLETION)}", f"source {shlex.quote(str(ours))}"]
    script.append(BASH_DRIVER)
    script += [f"__lanes_complete_line {shlex.quote(line)}" for line in lines]
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for row in proc.stdout.splitlines():
        line, _, reply = row.partition("\t")
        out[line] = reply[1:-1].split("><") if reply else []
    assert set(out) == set(lines), proc.stdout + proc.stderr
    return out


@needs_git_bash
@pytest.mark.parametrize("framework", [True, False], ids=["bash-completion", "git-completion-only"])
def test_bash_git_lanes_tab(repo, tmp_path, framework):
    if framework and BASH_COMPLETION is None:
        pytest.skip("bash-completion is not installed (.ci/run installs it)")
    completable_repo(repo)
    subprocess.run(["git", "config", "alias.lt", "lanes tick"], cwd=repo, check=True)
    subprocess.run(["git", "config", "alias.lst", "!git lanes status"], cwd=repo, check=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    lines = [
        "git lanes ",
        "git lanes ti",
        f"git -C {repo} lanes tick --",
        f"git -C {repo} lanes status ",
        f"git -C {repo} lanes show p",
        f"git -C {repo} lanes instruct lexer --kind ",
        f"git -C {repo} lanes instruct lexer --session-state=w",
        f"git -C {repo} lt --j",
        f"git -C {repo} lst ",
        "git la",
        f"git -C {repo} lanes provision lexer --path ",
    ]
    got = _bash_complete(outside, lines, framework=framework, tmp_path=tmp_path)
    commands = got["git lanes "]
    assert {"tick ", "status ", "start ", "completion ", "aliases "} <= set(commands), commands
    assert got["git lanes ti"] == ["tick "]
    assert {"--offer ", "--instruct ", "--max-parallel ", "--json "} <= set(got[f"git -C {repo} lanes tick --"])
    assert got[f"git -C {repo} lanes status "] == ["demo "]
    assert got[f"git -C {repo} lanes show p"] == ["parser "]
    assert got[f"git -C {repo} lanes instruct lexer --kind "] == ["instruction ", "correction "]
    assert got[f"git -C {repo} lanes instruct lexer --session-state=w"] == ["working "]
    assert got[f"git -C {repo} lt --j"] == ["--json "]          # the alias's "tick" is put back
    assert got[f"git -C {repo} lst "] == ["demo "]              # a !-alias of git lanes status
    assert "lanes " in got["git la"]                            # git lists git-lanes from PATH
    assert got[f"git -C {repo} lanes provision lexer --path "] == []  # file names: Git's -o default


@needs_git_bash
def test_bash_bare_git_lanes_tab(repo, tmp_path):
    if BASH_COMPLETION is None:
        pytest.skip("bash-completion is not installed (.ci/run installs it)")
    completable_repo(repo)
    got = _bash_complete(repo, ["git-lanes ti", "git-lanes instruct lexer --kind=c", "git-lanes show ",
                                "git-lanes completion "],
                         framework=True, tmp_path=tmp_path)
    assert got["git-lanes ti"] == ["tick"]
    assert got["git-lanes instruct lexer --kind=c"] == ["correction"]
    assert got["git-lanes show "] == ["lexer", "parser"]
    assert got["git-lanes completion "] == ["bash", "zsh", "fish"]


# -- zsh and fish: golden results ---------------------------------------------------------

def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing; run the tests with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it)"


ZSH_DRIVER = r"""
fpath=($ZFUNC $fpath)
autoload -Uz _git-lanes
# The completion builtins only work inside a completion widget: record what they get.
compadd () { print -r -- "compadd ${(j: :)${(@P)${@[-1]}}}"; }
_describe () { print -r -- "describe ${(j: :)${(@)${(@P)4}%%:*}}"; }
compset () { print -r -- "compset $*"; }
_path_files () { print -r -- "path_files $*"; }
lanes_complete () {
  print -r -- "# ${(j: :)@}"
  local -a words; local CURRENT
  words=("$@"); CURRENT=${#words}
  _git-lanes
}
"""

ZSH_CASES = [
    # as `git-lanes ...`
    (None, ["git-lanes", "ti"]),
    (None, ["git-lanes", "instruct", "lexer", "--kind="]),
    (None, ["git-lanes", "instruct", "lexer", "--session-state", ""]),
    (None, ["git-lanes", "completion", ""]),
    (None, ["git-lanes", "show", ""]),
    (None, ["git-lanes", "provision", "lexer", "--path", ""]),
    # as zsh's _git calls it for `git -C repo lanes ...` (words start at the subcommand)
    ("repo", ["lanes", "status", ""]),
    ("repo", ["lanes", "tick", "--j"]),
]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (.ci/run installs it)")
def test_zsh_golden(repo, tmp_path):
    completable_repo(repo)
    zfunc = tmp_path / "zfunc"
    zfunc.mkdir()
    (zfunc / "_git-lanes").write_text(completion.ZSH)
    script = [ZSH_DRIVER]
    for c_dir, words in ZSH_CASES:
        cd = "cd " + shlex.quote(str(repo)) if c_dir is None else "cd " + shlex.quote(str(tmp_path))
        opt = (f"typeset -gA opt_args; opt_args=(-C {shlex.quote(str(repo))})" if c_dir
               else "unset opt_args")
        script.append(f"{cd}; {opt}; lanes_complete " + " ".join(shlex.quote(w) for w in words))
    env = env_with_bin(ZFUNC=str(zfunc))
    proc = subprocess.run(["zsh", "-f", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    _golden("zsh-completions.txt", proc.stdout)


FISH_CASES = [
    "git-lanes ti",
    "git-lanes instruct lexer --kind=",
    "git-lanes instruct lexer --session-state ",
    "git-lanes completion ",
    "git-lanes show ",
    "git lanes st",
    "git -C repo lanes status ",
    "git -C repo lanes show p",
    "git -C repo lt --j",
]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (.ci/run installs it)")
def test_fish_golden(repo, tmp_path):
    completable_repo(repo)
    subprocess.run(["git", "config", "alias.lt", "lanes tick"], cwd=repo, check=True)
    config = tmp_path / "config"
    (config / "fish" / "completions").mkdir(parents=True)
    # the bare form autoloads from a completions directory; the git form needs it sourced
    (config / "fish" / "completions" / "git-lanes.fish").write_text(completion.FISH)
    (config / "fish" / "config.fish").write_text("git-lanes completion fish | source\n")
    lines = []
    for case in FISH_CASES:
        cwd = repo if case.startswith("git-lanes") else tmp_path
        lines.append(f"echo '# {case}'; cd {shlex.quote(str(cwd))}; "
                     f"complete -C {shlex.quote(case)} | string replace -r '\\t.*' ''")
    env = env_with_bin(XDG_CONFIG_HOME=str(config), XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.run(["fish", "-c", "\n".join(lines)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # fish's own git completions may add generic candidates (e.g. --help); keep ours
    kept = [line for line in proc.stdout.splitlines() if line.startswith("#") or line != "--help"]
    _golden("fish-completions.txt", "\n".join(kept) + "\n")
