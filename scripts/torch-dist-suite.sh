#!/usr/bin/env bash
# PyTorch's own distributed test suite (test/distributed/test_distributed_spawn.py, backend
# nccl) on NVIDIA's NCCL and on weft's libnccl.so.2 in the same call: per test, NCCL's result,
# weft's, and weft's first error line where they differ (issue 27, item 2).
#
#   scripts/torch-dist-suite.sh [--world N] [-k EXPR] [--shard I/N] [--jobs J]
#                               [--sides "nccl weft"] [--per-test S] [--budget S]
#
#   --world N     ranks per test (WORLD_SIZE; default: every GPU, at least 2)
#   -k EXPR       pytest's -k, applied when collecting
#   --shard I/N   the I-th of N equal shards of the collected, sorted list (every N-th test
#                 from the I-th), so that N device calls cover the suite (about 281 tests of
#                 about 5 s each, per side)
#   --jobs J      pytest processes per side, each with its own TEMP_DIR and part of the list
#                 (default 4); both sides' jobs run at once. Each test of the suite meets its
#                 ranks through its own file store, so concurrent tests do not share ports
#   --sides S     "nccl weft" (default), "nccl" or "weft"
#   --per-test S  pytest-timeout's limit per test (default 120), --timeout-method=signal: the
#                 test fails with "Timeout", MultiProcessTestCase's tearDown terminates its
#                 ranks, and the job goes on to the next test (the thread method would end
#                 the whole pytest process, and the job's remaining tests with it). Before
#                 it, at S - 15 - 5 x world s, MultiProcessTestCase's own deadline
#                 (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT): it logs the hung ranks' stacks
#                 first; both are reported as "timeout"
#   --budget S    seconds for the whole script (default 540, under the device tool's 600 per
#                 command); a job still running when it is spent is killed, and the tests it
#                 had not finished are reported as "not run" (not as failures)
#   --file F      the suite's file (default third_party/pytorch-test/test_distributed_spawn.py)
#   --weft-lib L  weft's library (default .gpu/nccl/lib/libnccl.so.2)
#   (--file, --weft-lib and PYTHON=... also let the script run without a GPU on a stand-in
#   suite, which is how it was tested before its first GPU run)
#
# Builds nothing: run scripts/build-nccl-bundle.sh here first and carry `.gpu`; put PyTorch's
# test/distributed/test_distributed_spawn.py in third_party/pytorch-test/ (git-ignored, never
# committed) and expecttest's wheel (which torch's test helpers import and the GPU machines
# lack) in .whl/ (git-ignored). Through the device tool, kind nvidia-h200-x2:
#   run carry=[".gpu", ".whl", "third_party"] command="scripts/torch-dist-suite.sh --shard 1/2"
# (then --shard 2/2 in a second call).
#
# Steps (logs under /tmp/weft-torch-suite; $OUT gets summary.md, results.json and
# logs.tar.gz as steps end and on exit):
#   1. at once: pytest --collect-only (BACKEND=nccl), and on each side a two-rank all_reduce
#      under torchrun with NCCL_DEBUG=INFO that prints the libnccl the process mapped and the
#      version line (weft's says "+weft-"; weft prints nothing at NCCL_DEBUG=VERSION);
#   2. the jobs: pytest -p torch_dist_suite (scripts/torch_dist_suite.py as a plugin: one JSON
#      line per test as it ends, so a killed job keeps what it reached) on the node ids of
#      its part, NCCL_DEBUG=WARN on both sides; weft's with LD_PRELOAD (PyTorch finds
#      NVIDIA's libnccl.so.2 through an RPATH, which LD_LIBRARY_PATH cannot override) and
#      WEFT_CACHE_DIR=.gpu/kernel-cache;
#      where the machine has enough GPUs for several disjoint sets of --world, the jobs take
#      turns over them (CUDA_VISIBLE_DEVICES);
#   3. scripts/torch_dist_suite.py merge: the table, the tests where weft differs, the totals.
# Exit status: 1 when a test passes on NCCL and not on weft (failed, error, timeout or
# skipped there), or when the weft side's process mapped another libnccl; 2 when the suite
# cannot start.
set -uo pipefail

# NVLink multicast must stay off on these machines (DESIGN.md), whatever runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
HELPER="$ROOT/scripts/torch_dist_suite.py"
WORLD=""
K=""
SHARD=1/1
JOBS=4
SIDES="nccl weft"
PER_TEST=120
BUDGET=540
FILE="$ROOT/third_party/pytorch-test/test_distributed_spawn.py"
LIB="$ROOT/.gpu/nccl/lib/libnccl.so.2"
while [ $# -gt 0 ]; do
    case "$1" in
        --world) WORLD=$2; shift 2 ;;
        -k) K=$2; shift 2 ;;
        --shard) SHARD=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --sides) SIDES=$2; shift 2 ;;
        --per-test) PER_TEST=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --file) FILE=$(realpath "$2"); shift 2 ;;
        --weft-lib) LIB=$(realpath "$2"); shift 2 ;;
        *) echo "torch-dist-suite: unknown option $1" >&2; exit 2 ;;
    esac
done
if ! [[ "$SHARD" =~ ^([0-9]+)/([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ] ||
    [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
    echo "torch-dist-suite: --shard I/N with 1 <= I <= N, not $SHARD" >&2; exit 2
fi
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "torch-dist-suite: --jobs takes a count, not $JOBS" >&2; exit 2; }
# shellcheck source=scripts/lib/deadline.sh
source "$ROOT/scripts/lib/deadline.sh"

LOGS=/tmp/weft-torch-suite
rm -rf "$LOGS" && mkdir -p "$LOGS"
save_logs() {
    [ -n "${OUT:-}" ] || return 0
    for f in summary.md results.json; do [ -f "$LOGS/$f" ] && cp "$LOGS/$f" "$OUT/"; done
    tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude 'tmp-*' . 2>/dev/null
    return 0
}
# A job's processes (pytest, its tests' ranks) are the process group its `timeout` leads
# (group id in <side>-<j>.pgid): whatever of it is left when the script ends goes with it.
# shellcheck disable=SC2317  # run by the EXIT trap
end_jobs() {
    local f
    for f in "$LOGS"/*.pgid; do [ -f "$f" ] && kill -9 -- "-$(cat "$f")" 2>/dev/null; done
    save_logs
}
trap end_jobs EXIT

for s in $SIDES; do
    case "$s" in nccl|weft) ;; *) echo "torch-dist-suite: --sides takes nccl and/or weft, not $s" >&2; exit 2 ;; esac
done
[ -f "$FILE" ] || { echo "torch-dist-suite: $FILE missing: put PyTorch's test/distributed/test_distributed_spawn.py there (git-ignored) and carry third_party" >&2; exit 2; }
case " $SIDES " in *" weft "*)
    [ -f "$LIB" ] || { echo "torch-dist-suite: $LIB missing: run scripts/build-nccl-bundle.sh and carry .gpu" >&2; exit 2; } ;;
esac
NGPUS=0
GPU_NAME=none
if command -v nvidia-smi >/dev/null; then
    NGPUS=$(nvidia-smi -L | wc -l)
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
if [ -z "$WORLD" ]; then
    WORLD=$NGPUS
    [ "$WORLD" -ge 2 ] || { echo "torch-dist-suite: $NGPUS GPU(s): the suite needs two or more (NVIDIA's NCCL refuses two ranks on one GPU); --world N to force" >&2; exit 2; }
fi
SELECTION=${K:+, -k \"$K\"}
echo "== $(uname -n): $NGPUS GPU(s) ($GPU_NAME); world $WORLD, shard $SHARD$SELECTION, $JOBS job(s) per side, sides: $SIDES; budget $BUDGET s"

# expecttest (torch's test helpers import it) from the carried wheel, where it is missing.
SITE=/tmp/weft-torch-suite-site
if ! "$PY" -c 'import expecttest' 2>/dev/null; then
    if compgen -G "$ROOT/.whl/expecttest-*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$ROOT"/.whl/expecttest-*.whl >"$LOGS/pip.log" 2>&1 ||
            { echo "   installing expecttest failed:"; tail -5 "$LOGS/pip.log"; }
    else
        echo "   expecttest is missing and .whl/ has no wheel of it: collection will likely fail (carry .whl)"
    fi
fi
# scripts/ for the plugin, $SITE for expecttest; the tests' spawned ranks inherit both.
export PYTHONPATH="$ROOT/scripts:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache"
FILE_DIR=$(dirname "$FILE")
FILE_NAME=$(basename "$FILE")
# The environment of one side, in SIDE_ENV: weft's loads weft's library first.
side_env() {
    SIDE_ENV=(TORCH_DIST_SUITE_SIDE="$1")
    if [ "$1" = weft ]; then SIDE_ENV+=(LD_PRELOAD="$LIB"); fi
}

echo "== 1. collecting the tests; which libnccl each side loads (a two-rank all_reduce)"
status=0
t=$(step_timeout 150)
mkdir -p "$LOGS/tmp-collect" && touch "$LOGS/tmp-collect/barrier"
(
    cd "$FILE_DIR" && env BACKEND=nccl WORLD_SIZE="$WORLD" TEMP_DIR="$LOGS/tmp-collect" \
        INIT_METHOD="file://$LOGS/tmp-collect/" \
        timeout "$t" "$PY" -m pytest --collect-only -q -p no:cacheprovider --rootdir . \
        ${K:+-k "$K"} "$FILE_NAME"
) >"$LOGS/collect.log" 2>&1 &
collect_pid=$!
HAVE_TORCH=0
"$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' && HAVE_TORCH=1
declare -A CHECK_PID
if [ "$HAVE_TORCH" = 1 ] && [ "$NGPUS" -ge 2 ]; then
    t_check=$(step_timeout 60)
    for side in $SIDES; do
        side_env "$side"
        env "${SIDE_ENV[@]}" NCCL_DEBUG=INFO timeout "$t_check" "$PY" -m torch.distributed.run --standalone \
            --nproc_per_node=2 "$HELPER" lib-check >"$LOGS/lib-check-$side.log" 2>&1 &
        CHECK_PID[$side]=$!
    done
else
    echo "   no torch or fewer than two GPUs here: the library check is skipped"
fi
TORCH_VERSION=$([ "$HAVE_TORCH" = 1 ] && "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
declare -A VERSION_LINE
for side in $SIDES; do
    [ -n "${CHECK_PID[$side]:-}" ] || continue
    wait "${CHECK_PID[$side]}"
    rc=$?
    log="$LOGS/lib-check-$side.log"
    VERSION_LINE[$side]=$(grep -m1 -o 'NCCL version .*' "$log")
    echo "   $side: exit $rc; ${VERSION_LINE[$side]:-no NCCL version line}"
    grep -m2 '^rank [0-9]*: libnccl mapped' "$log" | sed 's/^/   /'
    if [ "$side" = weft ] && grep -q '^rank [0-9]*: libnccl mapped' "$log" &&
        ! grep '^rank [0-9]*: libnccl mapped' "$log" | grep -qF "$(realpath "$LIB")"; then
        echo "   the weft side mapped another libnccl.so.2 than $LIB: its results would be NCCL's; stopping" >&2
        exit 1
    fi
    if [ "$side" = weft ] && [ "$rc" = 0 ] && ! grep -q '+weft-' "$log"; then
        echo "   the weft side's log has no weft version line: NVIDIA's libnccl answered; stopping" >&2
        exit 1
    fi
    [ "$rc" = 0 ] || { echo "   (tail of $log)"; tail -15 "$log" | sed 's/^/   | /'; }
done
wait "$collect_pid"
rc=$?
if ! "$PY" "$HELPER" plan --collected "$LOGS/collect.log" --shard "$SHARD" --jobs "$JOBS" --out "$LOGS" | sed 's/^/   /'; then
    echo "   nothing to run (collection exit $rc; tail of $LOGS/collect.log):"
    tail -25 "$LOGS/collect.log" | sed 's/^/   | /'
    exit 2
fi
save_logs

# Disjoint sets of $WORLD GPUs where the machine has several: job k takes set k mod sets.
SETS=1
[ "$NGPUS" -ge $((2 * WORLD)) ] && SETS=$((NGPUS / WORLD))
gpu_set() {
    local first=$(($1 % SETS * WORLD)) g list=""
    for ((g = first; g < first + WORLD; g++)); do list="$list${list:+,}$g"; done
    echo "$list"
}

# The jobs end with 25 s of the budget left for the merge and the logs.
t=$((BUDGET - SECONDS - 25))
echo "== 2. the tests: $(wc -l <"$LOGS/tests.txt") per side, $PER_TEST s each at most, every job ${t} s at most"
[ "$t" -ge 30 ] || { echo "   no time left for the tests" >&2; exit 2; }
# MultiProcessTestCase's own deadline comes first, pytest-timeout's after it: the former
# logs each hung rank's Python stack (5 s per rank to get it) before it fails the test.
RANK_DEADLINE=$((PER_TEST - 15 - 5 * WORLD))
k=0
JOB_PIDS=()
for side in $SIDES; do
    for list in "$LOGS"/job-*.txt; do
        j=${list##*/job-}; j=${j%.txt}
        mapfile -t ids <"$list"
        tmp="$LOGS/tmp-$side-$j"
        mkdir -p "$tmp" && touch "$tmp/barrier"
        side_env "$side"
        # NCCL_DEBUG=WARN on both sides: a rank that dies or hangs leaves its library's
        # warnings in the captured output, where the merge looks for its error line.
        # PYTORCH_PRINT_REPRO_ON_FAILURE=0: no "To execute this test, run ..." after each failure.
        # INIT_METHOD as PyTorch's run_test.py sets it for this file's init-file run: the
        # test class's name depends on it (…NCCLNoInitFile under env://), and each test's
        # setUp (initialize_temp_directories) sets a file:// one before spawning its ranks,
        # which then look for the class under the other name and fail to start (2026-11-27,
        # two H100: every test failed so on both sides).
        envs=("${SIDE_ENV[@]}" BACKEND=nccl WORLD_SIZE="$WORLD" TEMP_DIR="$tmp" INIT_METHOD="file://$tmp/"
            TORCH_DIST_SUITE_LOG="$LOGS/$side-$j.jsonl" NCCL_DEBUG=WARN PYTORCH_PRINT_REPRO_ON_FAILURE=0)
        [ "$SETS" -gt 1 ] && envs+=(CUDA_VISIBLE_DEVICES="$(gpu_set "$k")")
        [ "$RANK_DEADLINE" -ge 20 ] && envs+=(DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="$RANK_DEADLINE")
        : >"$LOGS/$side-$j.jsonl"
        (
            cd "$FILE_DIR" || exit 2
            env "${envs[@]}" timeout -k 15 "$t" "$PY" -m pytest -p no:cacheprovider -p torch_dist_suite \
                -q --tb=short --rootdir . --timeout="$PER_TEST" --timeout-method=signal "${ids[@]}" \
                >"$LOGS/$side-$j.log" 2>&1 &
            echo $! >"$LOGS/$side-$j.pgid"
            wait $!
            echo $? >"$LOGS/$side-$j.rc"
        ) &
        JOB_PIDS+=($!)
        k=$((k + 1))
    done
done
running() {
    local p
    for p in "${JOB_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done
    return 1
}
# A line a minute while they run: the tests each side has finished.
last=$SECONDS
while running; do
    sleep 2
    [ $((SECONDS - last)) -ge 60 ] || continue
    last=$SECONDS
    line="   ${SECONDS} s:"
    for side in $SIDES; do
        line="$line $side $(cat "$LOGS/$side"-*.jsonl | grep -c '"when": "teardown"'),"
    done
    echo "${line%,} of $(wc -l <"$LOGS/tests.txt") done"
    save_logs
done
wait
for side in $SIDES; do
    for f in "$LOGS/$side"-*.rc; do
        rc=$(cat "$f")
        [ "$rc" = 0 ] || [ "$rc" = 1 ] || echo "   ${f##*/}: pytest exit $rc$([ "$rc" = 124 ] && echo ' (out of time: the rest of its list is "not run")')"
    done
done
save_logs

echo "== 3. results"
"$PY" "$HELPER" merge --logs "$LOGS" --sides "$SIDES" --out "$LOGS" \
    --meta date="$(date -u +%Y-%m-%d)" --meta gpu="$NGPUS x $GPU_NAME" --meta world="$WORLD" \
    --meta shard="$SHARD" --meta k="$K" --meta jobs="$JOBS" --meta per_test="$PER_TEST" \
    --meta torch="$TORCH_VERSION" --meta file="$FILE_NAME" \
    --meta nccl_lib="${VERSION_LINE[nccl]:-}" --meta weft_lib="${VERSION_LINE[weft]:-}" || status=1
echo "   ${SECONDS} s of the ${BUDGET} s budget; logs in $LOGS"
exit $status
