#!/usr/bin/env bash
# weft's libnccl.so.2 on a GPU machine: correctness first, then nccl-tests beside NCCL.
#
#   scripts/nccl-tests.sh [--max 128M] [--min 8] [--tests "all_reduce all_gather ..."] [--threads]
#                         [--skip-gpu-test] [--args "-m 8 -n 200 -w 20"]
#
#   --threads   one rank per GPU, each in its own thread (nccl-tests' -t <GPUs> -g 1: every
#               thread calls ncclCommInitRank for its GPU, as one process per GPU would),
#               instead of one thread driving every GPU (-g <GPUs>, ncclCommInitAll)
#   --args      more nccl-tests options for every run, after the script's own (which they
#               override: nccl-tests takes the last), e.g. -m 8 (8 calls per group, which NCCL
#               and weft fuse) or -n 200 -w 20 for latency (the default -n 5 -w 2 only checks)
#   --skip-gpu-test  skip step 1 (weft's libnccl GPU tests)
#
# Builds nothing of weft's: run scripts/build-nccl-bundle.sh here first and carry `.gpu`;
# carry `third_party/nccl-tests` too (NVIDIA/nccl-tests source, git-ignored, never committed).
# Through the device tool, kind nvidia-h200-x2:
#   run carry=[".gpu", "third_party"] command="scripts/nccl-tests.sh"
# Steps (logs under /tmp/weft-nccl; $OUT, when set, gets summary.txt and logs.tar.gz):
#   1. .gpu/nccl-gpu-test (nccl/tests/gpu.rs): every call through weft's exports, checked
#      element by element (two ranks on one GPU where there is only one);
#   2. nccl-tests built twice with `make MPI=0`: against the system NCCL, and against weft's
#      nccl.h and libnccl.so.2 (nccl-tests 2.28 also includes nccl_device.h, which weft does
#      not provide: the system NCCL's is put beside weft's nccl.h; the device API it declares
#      is weak-linked by nccl-tests and unused by the *_perf runs below);
#   3. each *_perf binary, -g <all GPUs> (or -t <all GPUs> -g 1) -c 1 (every iteration
#      checked), on both builds;
#      the weft runs check with NCCL_DEBUG=INFO that weft's library answered;
#   4. a table: test, #wrong and average bus bandwidth for NCCL and for weft.
# The device tool stops a command at 600 s: every step has its own timeout, capped by what is
# left of a 560 s budget (a step with under 10 s left is skipped, and says so), and the logs
# are copied to $OUT after each step and on exit, so a run cut short still brings them back.
# Without a system NCCL (ldconfig, then python's nvidia.nccl package) the NCCL side is
# skipped and reported, the weft side still runs.
set -uo pipefail

# NVLink multicast must stay off on these machines (DESIGN.md), whatever runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOGS=/tmp/weft-nccl
mkdir -p "$LOGS"
BUDGET=${NCCL_TESTS_BUDGET:-560}
# shellcheck source=scripts/lib/deadline.sh
source "$ROOT/scripts/lib/deadline.sh"
save_logs() {
    [ -n "${OUT:-}" ] || return 0
    [ -f "$LOGS/summary.txt" ] && cp "$LOGS/summary.txt" "$OUT/"
    tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude 'build-*' --exclude 'kernel-cache' \
        --exclude 'sys-home' --exclude 'weft-home' . 2>/dev/null
}
trap save_logs EXIT
MAX=128M
TESTS="all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall"
THREADS=0
MIN=8
EXTRA=""
SKIP_GPU_TEST=0
while [ $# -gt 0 ]; do
    case "$1" in
        --max) MAX=$2; shift 2 ;;
        --tests) TESTS=$2; shift 2 ;;
        --threads) THREADS=1; shift ;;
        --min) MIN=$2; shift 2 ;;
        --args) EXTRA=$2; shift 2 ;;
        --skip-gpu-test) SKIP_GPU_TEST=1; shift ;;
        *) echo "nccl-tests: unknown option $1" >&2; exit 2 ;;
    esac
done
WEFT_LIB="$ROOT/.gpu/nccl/lib"
SRC="$ROOT/third_party/nccl-tests"
for f in "$WEFT_LIB/libnccl.so.2" "$ROOT/.gpu/nccl/include/nccl.h" "$ROOT/.gpu/nccl-gpu-test"; do
    [ -e "$f" ] || { echo "nccl-tests: $f missing: run scripts/build-nccl-bundle.sh and carry .gpu" >&2; exit 2; }
done
[ -f "$SRC/Makefile" ] || { echo "nccl-tests: $SRC missing: put NVIDIA/nccl-tests there (git-ignored) and carry third_party" >&2; exit 2; }
NGPUS=$(nvidia-smi -L | wc -l)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
echo "== $(uname -n): $NGPUS GPU(s); weft's libnccl: $(ls -la "$WEFT_LIB/libnccl.so.2" | awk '{print $5}') bytes"
# The kernel cache scripts/build-gpu-bundle.sh filled (weft kernels), carried with .gpu:
# without it every run on a fresh machine compiles every module first (minutes).
export WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache"
status=0

echo "== 1. weft's libnccl GPU tests"
share=""
[ "$NGPUS" -lt 2 ] && share="WEFT_TEST_SHARE_GPU=1"
# WEFT_REQUIRE_GPU=1: a test that finds no GPU fails instead of passing by skipping.
if [ "$SKIP_GPU_TEST" = 1 ]; then
    echo "   skipped (--skip-gpu-test)"
elif env WEFT_REQUIRE_GPU=1 $share timeout "$(step_timeout 150)" "$ROOT/.gpu/nccl-gpu-test" --nocapture --test-threads=1 >"$LOGS/gpu-test.log" 2>&1; then
    echo "   passed ($(grep -c '^test .* ok$' "$LOGS/gpu-test.log") tests)"
else
    echo "   FAILED or timed out (tail of $LOGS/gpu-test.log):"; tail -30 "$LOGS/gpu-test.log"; status=1
fi
save_logs

echo "== 2. nccl-tests against the system NCCL and against weft"
# The system NCCL's headers (nccl_device.h for nccl-tests 2.28).
SYS_INC=""
for d in /usr/include /usr/local/include "$CUDA_HOME/include" \
    $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null); do
    [ -f "$d/nccl.h" ] && { SYS_INC=$d; break; }
done
SIDES="sys weft"
SYS_LIB=$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}')
SYS_LIB=${SYS_LIB:+$(dirname "$SYS_LIB")}
if [ -z "$SYS_LIB" ]; then
    # pip's nvidia-nccl-cu12 (what PyTorch uses) is not in ldconfig.
    SYS_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    [ -f "$SYS_LIB/libnccl.so.2" ] || SYS_LIB=""
fi
if [ -z "$SYS_INC" ] || [ -z "$SYS_LIB" ]; then
    echo "   NVIDIA's NCCL not found (nccl.h: ${SYS_INC:-none}; libnccl.so.2 in ldconfig or python's nvidia.nccl: ${SYS_LIB:-none}): the NCCL side is skipped, FAILED"
    SIDES="weft"; status=1
fi
SYS_HOME="$LOGS/sys-home"
mkdir -p "$SYS_HOME"
[ -n "$SYS_INC" ] && ln -sfn "$SYS_INC" "$SYS_HOME/include"
[ -n "$SYS_LIB" ] && ln -sfn "$SYS_LIB" "$SYS_HOME/lib"
WEFT_HOME="$LOGS/weft-home"
rm -rf "$WEFT_HOME" && mkdir -p "$WEFT_HOME/include"
cp "$ROOT/.gpu/nccl/include/nccl.h" "$WEFT_HOME/include/"
[ -n "$SYS_INC" ] && [ -f "$SYS_INC/nccl_device.h" ] && cp -r "$SYS_INC/nccl_device.h" "$SYS_INC/nccl_device" "$WEFT_HOME/include/" 2>/dev/null
ln -sfn "$WEFT_LIB" "$WEFT_HOME/lib"
GENCODE="-gencode=arch=compute_90,code=sm_90"
BUILT=""
# Both builds at once (the machine has 16 cores or more): each make -j 16.
t=$(step_timeout 150)
declare -A MAKE_PID
for which in $SIDES; do
    home="$LOGS/$which-home"
    [ "$which" = weft ] && home=$WEFT_HOME
    [ "$t" -eq 0 ] && { echo "   building against $which skipped: out of time"; status=1; continue; }
    timeout "$t" make -C "$SRC" -j 16 MPI=0 NCCL_HOME="$home" CUDA_HOME="$CUDA_HOME" \
        NVCC_GENCODE="$GENCODE" BUILDDIR="$LOGS/build-$which" >"$LOGS/make-$which.log" 2>&1 &
    MAKE_PID[$which]=$!
done
for which in "${!MAKE_PID[@]}"; do
    if ! wait "${MAKE_PID[$which]}"; then
        echo "   building nccl-tests against $which FAILED or timed out (${t} s; tail of $LOGS/make-$which.log):"
        tail -20 "$LOGS/make-$which.log"; status=1; continue
    fi
    BUILT="$BUILT $which"
    echo "   built against $which: $LOGS/build-$which"
done
# The order of the runs below: NCCL first, as before.
BUILT=$(for w in $SIDES; do case " $BUILT " in *" $w "*) echo -n "$w ";; esac; done)
save_logs

if [ "$THREADS" = 1 ]; then GPU_ARGS=(-t "$NGPUS" -g 1); else GPU_ARGS=(-g "$NGPUS"); fi
echo "== 3. runs (${GPU_ARGS[*]} -c 1 $EXTRA, $MIN B to $MAX)"
printf '%-16s %12s %12s %14s %14s\n' test "nccl #wrong" "weft #wrong" "nccl busbw" "weft busbw" >"$LOGS/summary.txt"
for t in $TESTS; do
    for which in $BUILT; do
        bin="$LOGS/build-$which/${t}_perf"
        envs=()
        if [ "$which" = weft ]; then
            envs=(LD_LIBRARY_PATH="$WEFT_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=INFO)
        else
            envs=(LD_LIBRARY_PATH="$SYS_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        fi
        lim=$(step_timeout 40)
        [ "$lim" -eq 0 ] && { echo "   $t on $which skipped: out of time" | tee "$LOGS/$t-$which.log"; status=1; continue; }
        # shellcheck disable=SC2086  # EXTRA is a list of options, split on purpose
        env "${envs[@]}" timeout "$lim" "$bin" -b "$MIN" -e "$MAX" -f 4 "${GPU_ARGS[@]}" -c 1 -n 5 -w 2 $EXTRA \
            >"$LOGS/$t-$which.log" 2>&1 || { echo "   $t on $which: exit $? (124: over its ${lim} s; see $LOGS/$t-$which.log)"; status=1; }
        save_logs
    done
    touch "$LOGS/$t-sys.log" "$LOGS/$t-weft.log"
    if ! grep -q "weft" "$LOGS/$t-weft.log"; then
        echo "   $t: weft's NCCL_DEBUG=INFO lines are missing: another libnccl.so.2 answered"; status=1
    fi
    # nccl-tests' "#wrong" columns: the sum of every row's, out-of-place and in-place.
    wrong() { awk '/^ +[0-9]+ +[0-9]+ / {for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && (i == 9 || i == NF)) s += $i} END {print s + 0}' "$1"; }
    bw() { sed -n 's/.*Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' "$1" | head -1; }
    printf '%-16s %12s %12s %14s %14s\n' "$t" "$(wrong "$LOGS/$t-sys.log")" "$(wrong "$LOGS/$t-weft.log")" \
        "$(bw "$LOGS/$t-sys.log")" "$(bw "$LOGS/$t-weft.log")" >>"$LOGS/summary.txt"
done
echo "== 4. summary (busbw in GB/s; #wrong summed over sizes; logs in $LOGS)"
cat "$LOGS/summary.txt"
echo "   ${SECONDS} s of the ${BUDGET} s budget"
exit $status
