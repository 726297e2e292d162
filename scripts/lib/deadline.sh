# Deadlines for the scripts that run on a GPU machine, where the device tool stops a command
# at 600 s: each step gets its own cap, cut to what is left of the script's $BUDGET seconds
# (bash's $SECONDS counts from the script's start). Sourced, not run.

# step_timeout CAP: the seconds a step may take, or 0 when under 10 s are left (skip it).
step_timeout() {
    local left=$((BUDGET - SECONDS))
    [ "$left" -lt 10 ] && { echo 0; return; }
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

# bounded CAP COMMAND...: the command under step_timeout CAP (124 at once when no time is left).
bounded() {
    local t
    t=$(step_timeout "$1"); shift
    [ "$t" = 0 ] && { echo "   no time left: skipped $*" >&2; return 124; }
    timeout "$t" "$@"
}
