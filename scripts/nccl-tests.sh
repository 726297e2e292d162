#!/usr/bin/env bash
# weft's libnccl.so.2 on a GPU machine: correctness first, then nccl-tests beside NCCL.
#
#   scripts/nccl-tests.sh [--max 128M] [--tests "all_reduce all_gather ..."]
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
#   3. each *_perf binary, -g <all GPUs> -c 1 (every iteration checked), on both builds;
#      the weft runs check with NCCL_DEBUG=INFO that weft's library answered;
#   4. a table: test, #wrong and average bus bandwidth for NCCL and for weft.
set -uo pipefail

# NVLink multicast must stay off on these machines (DESIGN.md), whatever runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOGS=/tmp/weft-nccl
mkdir -p "$LOGS"
MAX=128M
TESTS="all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall"
while [ $# -gt 0 ]; do
    case "$1" in
        --max) MAX=$2; shift 2 ;;
        --tests) TESTS=$2; shift 2 ;;
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
export WEFT_CACHE_DIR="$LOGS/kernel-cache"
status=0

echo "== 1. weft's libnccl GPU tests"
share=""
[ "$NGPUS" -lt 2 ] && share="WEFT_TEST_SHARE_GPU=1"
if env $share timeout 600 "$ROOT/.gpu/nccl-gpu-test" --nocapture --test-threads=1 >"$LOGS/gpu-test.log" 2>&1; then
    echo "   passed ($(grep -c '^test .* ok$' "$LOGS/gpu-test.log") tests)"
else
    echo "   FAILED (tail of $LOGS/gpu-test.log):"; tail -30 "$LOGS/gpu-test.log"; status=1
fi

echo "== 2. nccl-tests against the system NCCL and against weft"
# The system NCCL's headers (nccl_device.h for nccl-tests 2.28).
SYS_INC=""
for d in /usr/include /usr/local/include "$CUDA_HOME/include" \
    $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null); do
    [ -f "$d/nccl.h" ] && { SYS_INC=$d; break; }
done
[ -n "$SYS_INC" ] || { echo "   no system nccl.h found" >&2; exit 1; }
SYS_HOME="$LOGS/sys-home"
mkdir -p "$SYS_HOME"
ln -sfn "$SYS_INC" "$SYS_HOME/include"
SYS_LIB=$(dirname "$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}')")
ln -sfn "${SYS_LIB:-/usr/lib/x86_64-linux-gnu}" "$SYS_HOME/lib"
WEFT_HOME="$LOGS/weft-home"
rm -rf "$WEFT_HOME" && mkdir -p "$WEFT_HOME/include"
cp "$ROOT/.gpu/nccl/include/nccl.h" "$WEFT_HOME/include/"
[ -f "$SYS_INC/nccl_device.h" ] && cp -r "$SYS_INC/nccl_device.h" "$SYS_INC/nccl_device" "$WEFT_HOME/include/" 2>/dev/null
ln -sfn "$WEFT_LIB" "$WEFT_HOME/lib"
GENCODE="-gencode=arch=compute_90,code=sm_90"
for which in sys weft; do
    home="$LOGS/$which-home"
    [ "$which" = weft ] && home=$WEFT_HOME
    if ! make -C "$SRC" -j 16 MPI=0 NCCL_HOME="$home" CUDA_HOME="$CUDA_HOME" \
        NVCC_GENCODE="$GENCODE" BUILDDIR="$LOGS/build-$which" >"$LOGS/make-$which.log" 2>&1; then
        echo "   building nccl-tests against $which FAILED (tail of $LOGS/make-$which.log):"
        tail -20 "$LOGS/make-$which.log"; exit 1
    fi
    echo "   built against $which: $LOGS/build-$which"
done

echo "== 3. runs (-g $NGPUS -c 1, 8 B to $MAX)"
printf '%-16s %12s %12s %14s %14s\n' test "nccl #wrong" "weft #wrong" "nccl busbw" "weft busbw" >"$LOGS/summary.txt"
for t in $TESTS; do
    for which in sys weft; do
        bin="$LOGS/build-$which/${t}_perf"
        envs=()
        [ "$which" = weft ] && envs=(LD_LIBRARY_PATH="$WEFT_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=INFO)
        env "${envs[@]}" timeout 300 "$bin" -b 8 -e "$MAX" -f 4 -g "$NGPUS" -c 1 -n 5 -w 2 \
            >"$LOGS/$t-$which.log" 2>&1 || { echo "   $t on $which: exit $? (see $LOGS/$t-$which.log)"; status=1; }
    done
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
if [ -n "${OUT:-}" ]; then
    cp "$LOGS/summary.txt" "$OUT/"
    tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude 'build-*' --exclude 'kernel-cache' . 2>/dev/null
fi
exit $status
