"""Shell completion scripts: bash, zsh and fish, for `git lanes` and `git-lanes`.

Every script is a small adapter around click's own completion protocol: it asks
`git-lanes` itself, with `_GIT_LANES_COMPLETE=<shell>_complete`, `COMP_WORDS` (the words
typed, starting with `git-lanes`) and `COMP_CWORD`, and turns the answer (`type,value`
lines for bash and fish, `type/value/help` triples for zsh) into the shell's completions.
So every TAB runs the CLI, and slugs, task ids and choices (`--kind`,
`--session-state`) come from the command tree and the repository.

Click's own scripts only cover the bare `git-lanes` form. Git's completion instead calls a
function named after the subcommand: bash's calls `_git_lanes` (loading the file
`git-lanes` on demand), zsh's `_git` calls `_git-lanes`, fish's `git` completions re-enter
the `git-lanes` completions. The adapters below serve both forms, follow Git's `-C DIR`
and expand aliases such as `git config alias.lt 'lanes tick'`.

The files in `completions/` (installed through `setup.cfg` data files) are these strings;
`python -m git_lanes.surface.completion` rewrites them, and a test checks they are current.
Nothing here imports more than the standard library: `git lanes completion SHELL` is a
start-up-time path.
"""

from __future__ import annotations

import sys

BASH = r"""# bash completion for git-lanes                              -*- shell-script -*-
#
# Serves both forms:
#   git lanes <TAB>   Git's completion calls _git_lanes (bash-completion loads this file,
#                     named git-lanes, on demand; or source it after Git's completion)
#   git-lanes <TAB>   completed by _git_lanes_bare
# Both ask git-lanes itself through click's protocol
# (_GIT_LANES_COMPLETE=bash_complete COMP_WORDS=... COMP_CWORD=...).
# Print it with `git lanes completion bash`; `source <(git lanes completion bash)` works too.

# __git_lanes_reply PREFIX SUFFIX -- RESPONSE
# Fill COMPREPLY from click's "type,value" lines, each value between PREFIX and SUFFIX.
# Returns 1 when the answer is "complete file (or directory) names" and nothing else.
__git_lanes_reply ()
{
	local prefix="$1" suffix="$2" response="$4" line type value files=
	local IFS=$'\n'
	COMPREPLY=()
	for line in $response; do
		type="${line%%,*}"
		value="${line#*,}"
		case "$type" in
		plain) COMPREPLY+=("$prefix$value$suffix") ;;
		dir|file) files="$type" ;;
		esac
	done
	if [ -n "$files" ] && [ ${#COMPREPLY[@]} -eq 0 ]; then
		__git_lanes_files="$files"
		return 1
	fi
	return 0
}

# __git_lanes_alias_words VALUE: the words an alias adds after "lanes", into alias_words
# ("lanes tick" -> tick; "!git lanes tick" -> tick; "!git-lanes tick" -> tick).
__git_lanes_alias_words ()
{
	local -a w
	local i=0 x
	alias_words=()
	read -r -a w <<< "$1"
	case "${w[0]-}" in
	lanes|git-lanes|'!git-lanes') i=1 ;;
	git|'!git') [ "${w[1]-}" = lanes ] && i=2 ;;
	esac
	[ $i -gt 0 ] || return 1
	for x in "${w[@]:i}"; do
		case "$x" in
		*[\;\|\&\$\(\)\<\>\{\}\"\'\`\\]*) break ;;
		esac
		alias_words+=("$x")
	done
	return 0
}

# _git_lanes: called by Git's completion for `git lanes ...` (and for an alias of it).
# Git has set __git_cmd_idx (where the subcommand is) and __git_C_args/__git_dir
# (`git -C DIR`, `--git-dir`), which the request below passes on.
_git_lanes ()
{
	local cur words cword prev
	# Read the words as typed: Git rewrites words[1] when it expands an alias.
	_get_comp_words_by_ref -n =: cur words cword prev
	local idx="${__git_cmd_idx:-1}" name alias_words=()
	name="${words[idx]}"
	if [ "$name" != lanes ] && [ "$name" != git-lanes ]; then
		__git_lanes_alias_words "$(git ${__git_C_args:+"${__git_C_args[@]}"} \
			${__git_dir:+--git-dir="$__git_dir"} config --get "alias.$name" 2>/dev/null)"
	fi
	local -a cw=(git-lanes "${alias_words[@]}" "${words[@]:idx+1:cword-idx}")
	local response __git_lanes_files=
	response="$(env COMP_WORDS="${cw[*]}" COMP_CWORD=$((${#cw[@]} - 1)) \
		_GIT_LANES_COMPLETE=bash_complete git ${__git_C_args:+"${__git_C_args[@]}"} \
		${__git_dir:+--git-dir="$__git_dir"} lanes 2>/dev/null)"
	# A value after "--opt=" replaces only what follows the "=" (a word break), so no
	# prefix; Git completes with -o nospace, hence the trailing space. No words but a file
	# type: leave COMPREPLY empty and Git's -o bashdefault -o default completes file names.
	__git_lanes_reply "" " " -- "$response" || COMPREPLY=()
}

# _git_lanes_bare: the completion function of the git-lanes command itself.
_git_lanes_bare ()
{
	# The words up to the cursor, split on blanks only (so "--kind=co" stays one word).
	local line="${COMP_LINE:0:COMP_POINT}" response __git_lanes_files=
	local -a cw
	read -r -a cw <<< "$line"
	case "$line" in
	''|*[[:space:]]) cw+=("") ;;
	esac
	cw[0]=git-lanes
	response="$(env COMP_WORDS="${cw[*]}" COMP_CWORD=$((${#cw[@]} - 1)) \
		_GIT_LANES_COMPLETE=bash_complete "$1" 2>/dev/null)"
	if ! __git_lanes_reply "" "" -- "$response"; then
		if [ "$__git_lanes_files" = dir ]; then
			compopt -o dirnames 2>/dev/null
		else
			compopt -o default 2>/dev/null
		fi
	fi
	return 0
}

complete -o nosort -F _git_lanes_bare git-lanes 2>/dev/null ||
	complete -F _git_lanes_bare git-lanes
"""

ZSH = r"""#compdef git-lanes
# zsh completion for git-lanes
#
# Serves both forms:
#   git-lanes <TAB>   this function, autoloaded from $fpath (site-functions/_git-lanes)
#   git lanes <TAB>   zsh's own _git calls _git-lanes for the subcommand (it has already
#                     expanded aliases and recorded `git -C DIR` in opt_args)
# Both ask git-lanes itself through click's protocol
# (_GIT_LANES_COMPLETE=zsh_complete COMP_WORDS=... COMP_CWORD=...).
# Print it with `git lanes completion zsh`; `source <(git lanes completion zsh)` after
# compinit works too. To list `lanes` under `git <TAB>`:
#   zstyle ':completion:*:*:git:*' user-commands lanes:'run tasks in lanes'

_git-lanes() {
  local -a response described plain cw
  local type key descr dir=
  # words[1] is `git-lanes`, or `lanes` when _git calls us; the rest are its arguments
  cw=(git-lanes "${(@)words[2,CURRENT]}")
  (( ${+opt_args} )) && [[ -n ${opt_args[-C]-} ]] && dir=${(Q)~opt_args[-C]}
  # "--kind=co": click answers with the values; complete after the "="
  [[ ${words[CURRENT]} == -*=* ]] && compset -P '*='
  response=("${(@f)$(
    [[ -n $dir ]] && builtin cd -q -- $dir 2>/dev/null
    env COMP_WORDS="${cw[*]}" COMP_CWORD=$(( ${#cw} - 1 )) \
      _GIT_LANES_COMPLETE=zsh_complete git-lanes 2>/dev/null
  )}")
  for type key descr in "${response[@]}"; do
    case $type in
      (plain)
        if [[ $descr == _ ]]; then
          plain+=("$key")
        else
          described+=("$key:$descr")
        fi
        ;;
      (dir) _path_files -/ ;;
      (file) _path_files -f ;;
    esac
  done
  (( ${#described} )) && _describe -V unsorted git-lanes described -U
  (( ${#plain} )) && compadd -U -V unsorted -a plain
  return 0
}

if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
  _git-lanes "$@"
else
  compdef _git-lanes git-lanes
fi
"""

FISH = r"""# fish completion for git-lanes
#
# Serves both forms:
#   git-lanes <TAB>   autoloaded from a completions directory (vendor_completions.d)
#   git lanes <TAB>   fish's git completions re-enter these ones (complete -C "git-lanes ...")
#                     where they can; the rule for `git` below does it everywhere once this
#                     script is loaded (`git lanes completion fish | source` in config.fish),
#                     expanding aliases (git lt = lanes tick) and following `git -C DIR`
# Both ask git-lanes itself through click's protocol
# (_GIT_LANES_COMPLETE=fish_complete COMP_WORDS=... COMP_CWORD=...).

# Parse the command line into __git_lanes_dirs (git -C) and __git_lanes_args (the words
# after `lanes`); false when it is not `git-lanes ...` or `git [options] lanes ...`.
function __git_lanes_parse
    set -l tokens (commandline -opc)
    set -g __git_lanes_dirs
    set -g __git_lanes_args
    switch "$tokens[1]"
        case git-lanes '*/git-lanes'
            set -g __git_lanes_args $tokens[2..-1]
            return 0
        case git '*/git'
        case '*'
            return 1
    end
    set -e tokens[1]
    while set -q tokens[1]
        switch $tokens[1]
            case -C
                set -a __git_lanes_dirs $tokens[2]
                set -e tokens[1..2]
            case -c --git-dir --work-tree --namespace
                set -e tokens[1..2]
            case '-*'
                set -e tokens[1]
            case '*'
                break
        end
    end
    set -q tokens[1]; or return 1
    if test "$tokens[1]" = lanes
        set -g __git_lanes_args $tokens[2..-1]
        return 0
    end
    # an alias: "lanes tick", "!git lanes tick", "!git-lanes tick"
    set -l expansion (string split ' ' -- (
        for d in $__git_lanes_dirs
            builtin cd -- $d 2>/dev/null
        end
        git config --get alias.$tokens[1] 2>/dev/null))
    set -l i 0
    switch "$expansion[1]"
        case lanes git-lanes '!git-lanes'
            set i 2
        case git '!git'
            test "$expansion[2]" = lanes; and set i 3
    end
    test $i -gt 0; or return 1
    set -l extra
    for w in $expansion[$i..-1]
        string match -qr '[;|&$()<>{}"\'`\\\\]' -- $w; and break
        test -n "$w"; and set -a extra $w
    end
    set -g __git_lanes_args $extra $tokens[2..-1]
    return 0
end

function __git_lanes_complete --description 'Ask git-lanes for completions'
    __git_lanes_parse; or return
    set -l current (commandline -ct)
    set -l response (
        for d in $__git_lanes_dirs
            builtin cd -- $d 2>/dev/null
        end
        env _GIT_LANES_COMPLETE=fish_complete COMP_WORDS="git-lanes $__git_lanes_args $current" \
            COMP_CWORD="$current" git-lanes 2>/dev/null)
    # "--kind=co": click answers with the values; fish wants whole tokens
    set -l prefix (string match -r -- '^-[^=]*=' $current)
    for line in $response
        set -l kind (string split -m 1 , -- $line)
        switch $kind[1]
            case plain
                printf '%s%s\n' "$prefix" $kind[2]
            case dir
                __fish_complete_directories $current
            case file
                __fish_complete_path $current
        end
    end
end

complete --command git-lanes --no-files --arguments '(__git_lanes_complete)'
complete --command git --no-files --condition __git_lanes_parse --arguments '(__git_lanes_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}

# Where each script is installed from (setup.cfg data files), relative to the repository.
FILES = {"bash": "completions/git-lanes", "zsh": "completions/_git-lanes", "fish": "completions/git-lanes.fish"}


def script(shell: str) -> str:
    """The completion script for `shell` (bash, zsh or fish)."""
    try:
        return SCRIPTS[shell]
    except KeyError:
        raise ValueError(f"no completion script for {shell!r} (bash, zsh, fish)") from None


def main(argv: list[str] | None = None) -> int:
    """`python -m git_lanes.surface.completion [ROOT]`: rewrite ROOT/completions/* (ROOT: cwd)."""
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path.cwd()
    for shell, rel in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SCRIPTS[shell], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
