# fish completion for git-lanes
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
