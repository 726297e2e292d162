#!/usr/bin/env bash
# The GPU path on a GPU machine: correctness first, then the benchmark against NCCL.
#
#   scripts/gpu-test.sh [--quick] [--skip-tests] [--test-args "--skip at_256_mib"] [--max 1G]
#                       [--colls "all_reduce all_gather reduce_scatter"]
#
#   --test-args  more arguments for the GPU test binary (libtest's: names to run, --skip NAME):
#                the whole suite takes about 8 minutes on two H200 (its 256 MiB tests 2 of them),
#                more than one device call leaves beside the benchmark; run it alone, or in parts
#
# Builds nothing of weft's: run scripts/build-gpu-bundle.sh here first, and carry `.gpu`
# (the weft binary and the GPU test binary) and `third_party/nccl-tests` (fetched source of
# NVIDIA/nccl-tests, git-ignored, built there against the system NCCL for the comparison).
# Through the device tool, kind nvidia-h200-x2:
#   run carry=[".gpu", "third_party"] command="scripts/gpu-test.sh"
# Steps, each logged under /tmp/weft-gpu; at the end $OUT (when set: the device tool brings
# back at most 8 files) gets tables.txt (every comparison table) and logs.tar.gz (every log):
#   1. the GPU tests (driver/tests/gpu.rs): every collective, type and op on 1 GPU and on
#      every GPU (one thread per GPU), send/recv, a rank that never joins;
#   2. `weft perf --device cuda -c` (one process per GPU, every iteration checked) for every
#      collective on a few sizes, in several types and ops; then small sizes with LL forced
#      (NCCL_PROTO=LL), whose kernels had never run on a GPU when this step was added;
#   3. the benchmark: weft perf --device cuda --threads and nccl-tests -g N (one process, all
#      GPUs), 8 B to --max, for each collective in --colls; then weft with a process per GPU,
#      and both with CUDA graphs (-G 10) up to 256 KiB (all-reduce only with --quick); a table
#      per run (bench/compare_gpu.py).
set -uo pipefail

# NVLink multicast must stay off on these machines (DESIGN.md), whatever runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
export PYTHONUNBUFFERED=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=/tmp/weft-gpu
mkdir -p "$OUTDIR"
MAX=1G
COLLS="all_reduce all_gather reduce_scatter"
QUICK=0
SKIP_TESTS=0
TEST_ARGS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --max) MAX=$2; shift 2 ;;
        --colls) COLLS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --skip-tests) SKIP_TESTS=1; shift ;;
        --test-args) TEST_ARGS=$2; shift 2 ;;
        *) echo "gpu-test: unknown option $1" >&2; exit 2 ;;
    esac
done
WEFT="$ROOT/.gpu/weft"
GPU_TEST="$ROOT/.gpu/gpu-test"
for f in "$WEFT" "$GPU_TEST" "$ROOT/.gpu/cuda-test"; do
    [ -x "$f" ] || { echo "gpu-test: $f missing: run scripts/build-gpu-bundle.sh and carry .gpu" >&2; exit 2; }
done
NGPUS=$(nvidia-smi -L | wc -l)
echo "== $(uname -n): $NGPUS GPU(s), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
# On a one-GPU machine two ranks share the GPU (WEFT_TEST_SHARE_GPU=1: weft allows it, NCCL
# does not), so every multi-rank kernel still runs; its timings are not NVLink's.
RANKS=$NGPUS
MODE=()
if [ "$NGPUS" -lt 2 ]; then
    export WEFT_TEST_SHARE_GPU=1
    RANKS=2
    # Threads of one process: processes sharing a GPU time-slice it, and every step of a
    # ring would wait for the other's slice.
    MODE=(--threads)
    echo "   one GPU: 2 ranks share it (WEFT_TEST_SHARE_GPU=1); the benchmark compares 1 rank with NCCL's 1 rank"
fi
# The device tool stops a command at 600 s: each step has its own cap, cut to what is left of
# a 570 s budget, and the logs reach $OUT after every step, so a run cut short still returns them.
BUDGET=${GPU_TEST_BUDGET:-570}
# shellcheck source=scripts/lib/deadline.sh
source "$ROOT/scripts/lib/deadline.sh"
save_logs() {
    [ -n "${OUT:-}" ] || return 0
    cat "$OUTDIR"/table-*.txt >"$OUT/tables.txt" 2>/dev/null
    tar czf "$OUT/logs.tar.gz" -C "$OUTDIR" --exclude 'nccl-tests-build.log' . 2>/dev/null
}
trap save_logs EXIT
nvidia-smi topo -m 2>&1 | head -5
# The kernel cache scripts/build-gpu-bundle.sh filled (weft kernels), carried with .gpu:
# without it every run on a fresh machine compiles every module first (minutes).
export WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache"
STATUS=0
# nccl-tests (for step 3) builds on the CPUs while the GPU tests run: about a minute and a
# half of the budget otherwise.
NT="$ROOT/third_party/nccl-tests"
NT_BUILD=""
if [ "$NGPUS" -ge 2 ] && [ -d "$NT" ]; then
    (cd "$NT" && timeout 300 make -j16 MPI=0 NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >"$OUTDIR/nccl-tests-build.log" 2>&1) &
    NT_BUILD=$!
fi
summary=()

echo "== 1. GPU tests"
# run_tests NAME BINARY PATTERN CAP [ARGS...]: one test binary (ARGS for libtest), its log
# under $OUTDIR, the lines that matter.
run_tests() {
    local t name=$1 binary=$2 pattern=$3
    t=$(step_timeout "$4")
    shift 4
    if [ "$t" = 0 ]; then summary+=("$name: skipped, no time left"); STATUS=1; return; fi
    if timeout "$t" "$binary" --test-threads 1 --nocapture "$@" >"$OUTDIR/$name.log" 2>&1; then
        summary+=("$name: $(grep -E '^test result' "$OUTDIR/$name.log" | tail -1)")
    else
        STATUS=1
        summary+=("$name: FAILED or timed out after ${t}s ($name.log)")
    fi
    grep -E "$pattern|skipped|panicked|FAILED|test result" "$OUTDIR/$name.log" | head -40
    save_logs
}
if [ "$SKIP_TESTS" = 1 ]; then
    echo "   skipped (--skip-tests)"
else
    run_tests cuda-tests "$ROOT/.gpu/cuda-test" "GPU" 60
    # shellcheck disable=SC2086 # TEST_ARGS is a list of words
    run_tests gpu-tests "$GPU_TEST" "GPU\(s\)|gave up" 480 $TEST_ARGS
fi

if [ $STATUS != 0 ]; then
    # Timing kernels that give wrong results is time lost.
    echo "== the GPU tests failed: no benchmark"
    printf '   %s\n' "${summary[@]}"
    [ -n "${OUT:-}" ] && tar czf "$OUT/logs.tar.gz" -C "$OUTDIR" .
    exit 1
fi

# check NAME [VAR=VALUE ...] -- PERF-ARGS...: one `weft perf --device cuda -c 1` run (at
# most 60 s), every iteration checked; counts it in $checks or $bad and shows the end of a
# failing log.
checks=0; bad=0
check() {
    local name=$1 log envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    log="$OUTDIR/check-$name.log"
    if bounded 60 env "${envs[@]}" "$WEFT" perf "$@" --device cuda "${MODE[@]}" --ranks "$RANKS" \
        -n 3 -w 1 -c 1 >"$log" 2>&1 && grep -q "Out of bounds values : 0 OK" "$log"; then
        checks=$((checks + 1))
    else
        bad=$((bad + 1)); STATUS=1
        echo "   FAILED: ${envs[*]} $* ($log)"; tail -5 "$log"
    fi
}
# check_step TITLE: the end of a step's checks: its line in the summary, counters reset.
check_step() {
    summary+=("$1: $checks runs correct, $bad failed")
    echo "   $checks correct, $bad failed"
    checks=0; bad=0
    save_logs
}
COLLECTIVES="all-reduce reduce-scatter all-gather broadcast reduce sendrecv"

echo "== 2. weft perf --device cuda -c (every iteration checked)"
for coll in $COLLECTIVES; do
    for spec in "float sum" "half avg" "bfloat16 max" "int32 prod" "double min" "uint8 sum" "int64 avg" "f8e4m3 sum"; do
        set -- $spec
        [ "$(step_timeout 60)" = 0 ] && { echo "   no time left: skipped"; break 2; }
        check "$coll-$1-$2" -- "$coll" -d "$1" -o "$2" -b 4 -e 64M -f 16 -r $((RANKS - 1))
        [ "$QUICK" = 1 ] && break
    done
done
check_step "weft perf -c"

echo "== 2b. the same with LL forced (NCCL_PROTO=LL; send/recv: NCCL_P2P_LL_THRESHOLD past every size)"
for coll in $COLLECTIVES; do
    for spec in "float sum" "half avg" "int64 prod" "uint8 max" "f8e4m3 sum"; do
        set -- $spec
        [ "$(step_timeout 60)" = 0 ] && { echo "   no time left: skipped"; break 2; }
        check "ll-$coll-$1-$2" NCCL_PROTO=LL NCCL_P2P_LL_THRESHOLD=1073741824 -- \
            "$coll" -d "$1" -o "$2" -b 4 -e 4M -f 16 -r $((RANKS - 1))
        [ "$QUICK" = 1 ] && break
    done
done
check_step "weft perf -c, LL"

echo "== 2c. all-reduce with each peer algorithm forced (WEFT_ALGO), every iteration checked"
for algo in oneshot twoshot nvls; do
    for spec in "float sum" "bfloat16 max" "int32 prod"; do
        set -- $spec
        [ "$(step_timeout 60)" = 0 ] && { echo "   no time left: skipped"; break 2; }
        check "algo-$algo-$1-$2" WEFT_ALGO=$algo -- all-reduce -d "$1" -o "$2" -b 4 -e 16M -f 16
        [ "$QUICK" = 1 ] && break
    done
done
check_step "weft perf -c, WEFT_ALGO forced"

echo "== 3. benchmark: weft vs NCCL (nccl-tests), 8 B to $MAX"
if [ "$NGPUS" -lt 2 ]; then
    # One rank on each side: a copy (NCCL's in place: nothing), which says nothing of either.
    echo "   skipped: one GPU (the comparison needs two)"
    COLLS=""
elif [ -n "$NT_BUILD" ]; then
    # Started in the background at the top; wait for it at most 120 s more.
    bounded 120 tail --pid="$NT_BUILD" -f /dev/null
    # Not done by now: stopped (timeout passes the signal on to make), so that it does not
    # run beside the timings below.
    pkill -P "$NT_BUILD" 2>/dev/null
    if [ -x "$NT/build/all_reduce_perf" ]; then
        # Brought back, so that a later call can carry the binaries instead of building them.
        [ -n "${OUT:-}" ] && tar czf "$OUT/nccl-tests-build.tar.gz" -C "$NT" build
    else
        echo "   nccl-tests did not build (nccl-tests-build.log)"; tail -5 "$OUTDIR/nccl-tests-build.log"
    fi
fi
# One process driving every GPU (weft --threads, nccl-tests -g N); for all-reduce, weft with
# a process per GPU too, and both with CUDA graphs (-G 10) up to 256 KiB (the latency goal).
for coll in $COLLS; do
    wcoll=${coll//_/-}
    bounded 90 "$WEFT" perf "$wcoll" --device cuda --threads -b 8 -e "$MAX" -f 2 -n 20 -w 5 >"$OUTDIR/weft-$coll.txt" 2>&1 || STATUS=1
    if [ ! -x "$NT/build/${coll}_perf" ]; then
        echo "   no nccl-tests binary for $coll: weft alone"; grep -v "^#" "$OUTDIR/weft-$coll.txt" | tail -30
        continue
    fi
    bounded 90 "$NT/build/${coll}_perf" -b 8 -e "$MAX" -f 2 -n 20 -w 5 -g "$NGPUS" >"$OUTDIR/nccl-$coll.txt" 2>&1 || true
    python3 "$ROOT/bench/compare_gpu.py" --name "$coll" --weft "$OUTDIR/weft-$coll.txt" --nccl "$OUTDIR/nccl-$coll.txt" \
        | tee "$OUTDIR/table-$coll.txt" || STATUS=1
    [ "$coll" = all_reduce ] || [ "$QUICK" = 0 ] || continue
    bounded 90 "$WEFT" perf "$wcoll" --device cuda -b 8 -e "$MAX" -f 2 -n 20 -w 5 >"$OUTDIR/weft-$coll-procs.txt" 2>&1 || STATUS=1
    python3 "$ROOT/bench/compare_gpu.py" --name "$coll (weft: a process per GPU)" --weft "$OUTDIR/weft-$coll-procs.txt" \
        --nccl "$OUTDIR/nccl-$coll.txt" >"$OUTDIR/table-$coll-procs.txt" 2>&1 || STATUS=1
    bounded 90 "$NT/build/${coll}_perf" -b 8 -e 256K -f 2 -n 20 -w 5 -g "$NGPUS" -G 10 >"$OUTDIR/nccl-$coll-graph.txt" 2>&1 || true
    bounded 90 "$WEFT" perf "$wcoll" --device cuda --threads -b 8 -e 256K -f 2 -n 20 -w 5 -G 10 >"$OUTDIR/weft-$coll-graph.txt" 2>&1 || STATUS=1
    python3 "$ROOT/bench/compare_gpu.py" --name "$coll (CUDA graphs)" --weft "$OUTDIR/weft-$coll-graph.txt" \
        --nccl "$OUTDIR/nccl-$coll-graph.txt" | tee "$OUTDIR/table-$coll-graph.txt" || STATUS=1
done
echo "== summary"
printf '   %s\n' "${summary[@]}"
if [ -n "${OUT:-}" ]; then
    cat "$OUTDIR"/table-*.txt >"$OUT/tables.txt" 2>/dev/null
    tar czf "$OUT/logs.tar.gz" -C "$OUTDIR" .
fi
exit $STATUS
