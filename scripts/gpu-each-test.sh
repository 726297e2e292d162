#!/usr/bin/env bash
# Runs each test of a Rust test binary on its own, with a deadline, on a GPU machine: a test
# that hangs costs its deadline and no more, and leaves the backtraces of its threads
# (cuda-gdb, the one debugger the GPU machines have) beside its log.
#
#   scripts/gpu-each-test.sh BINARY [--deadline S] [--budget S] [--only REGEX] [--logs DIR] [-- ENV=V ...]
#
# A line per test: ok / FAILED / HUNG, seconds; the logs (DIR, default /tmp/weft-each) and,
# when $OUT is set, DIR as $OUT/<DIR's name>.tar.gz. Exit 1 if any test failed or hung. Tests start
# only while the budget (default 540 s, under the device tool's 600 s) leaves a deadline.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
BIN=${1:?usage: gpu-each-test.sh BINARY [--deadline S] [--budget S] [--only REGEX] [--logs DIR] [-- ENV=V ...]}
shift
DEADLINE=60
BUDGET=540
ONLY=.
LOGS=/tmp/weft-each
ENVS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --deadline) DEADLINE=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --logs) LOGS=$2; shift 2 ;;
        --) shift; ENVS=("$@"); break ;;
        *) echo "gpu-each-test: unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$LOGS"
save() {
    [ -n "${OUT:-}" ] && tar czf "$OUT/$(basename "$LOGS").tar.gz" -C "$LOGS" . 2>/dev/null
    return 0
}
trap save EXIT
status=0
for t in $("$BIN" --list 2>/dev/null | sed -n 's/: test$//p' | grep -E "$ONLY"); do
    # 40 s of the budget stay for a backtrace of a test that hangs.
    left=$((BUDGET - SECONDS - 40))
    if [ "$left" -lt 15 ]; then
        echo "SKIPPED  $t (no time left)"; status=1; continue
    fi
    d=$DEADLINE
    [ "$d" -gt "$left" ] && d=$left
    log="$LOGS/$t.log"
    start=$SECONDS
    # Its own process group, so that a kill also ends the rank processes it started.
    setsid env "${ENVS[@]}" "$BIN" --exact "$t" --nocapture --test-threads 1 >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - start)) -lt "$d" ]; do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
        # Where every thread is (host stacks; cuda-gdb also lists the device's kernels).
        timeout 35 cuda-gdb -batch -p "$pid" -ex "info cuda kernels" -ex "thread apply all bt 25" \
            >"$LOGS/$t.backtrace" 2>&1
        kill -9 -- "-$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        echo "HUNG     $t (killed after ${d}s; $t.backtrace)"; status=1
    elif wait "$pid"; then
        echo "ok       $t ($((SECONDS - start))s)"
    else
        echo "FAILED   $t ($((SECONDS - start))s):"
        grep -E "panicked|wrong|gave up|Error|error" "$log" | head -6 | sed 's/^/         /'
        status=1
    fi
    save
done
exit $status
