#!/usr/bin/env bash
# A tuning sweep on a GPU machine: weft's GPU all-reduce (or another collective) over a grid
# of settings, and NCCL beside it with what it chose, in one call, to find what limits weft.
#
#   scripts/gpu-sweep.sh [--coll all_reduce] [-b 1M] [-e 1G] [-f 4] [-G 10] [--time] [-n 20] [-w 5] ["LABEL VAR=VALUE ..." ...]
#
# -G N: CUDA-graph mode on both sides (nccl-tests' -G: N launches captured in one graph);
# --time: each row gives the out-of-place time in us instead of the busbw (for latency);
# -n / -w: timed and warm-up iterations of every run, weft's and nccl-tests' alike (latency
# wants a few hundred: twenty leave a launch's jitter in the mean).
#
# Each quoted argument is one weft configuration: a label, then environment settings
# (WEFT_NCHANNELS, NCCL_BUFFSIZE, WEFT_KERNEL_UNROLL, ...); without any, a default grid.
# Every run is one process driving every GPU (`--threads`, as nccl-tests -g N), every element
# checked before timing. Prints one line per configuration: out-of-place busbw (GB/s) per size.
# NCCL runs three ways: as it chooses (NCCL_DEBUG=INFO shows its channels and protocols),
# forced to the SIMPLE protocol, and forced to SIMPLE on 32 channels.
# Needs what scripts/gpu-test.sh needs (.gpu from scripts/build-gpu-bundle.sh, third_party).
# With $OUT set (the device tool), leaves sweep.txt and sweep-logs.tar.gz there.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WEFT="$ROOT/.gpu/weft"
NT="$ROOT/third_party/nccl-tests"
LOGS=/tmp/weft-sweep
mkdir -p "$LOGS"
# The kernel cache scripts/build-gpu-bundle.sh filled (weft kernels), carried with .gpu:
# without it every run on a fresh machine compiles every module first (minutes).
export WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache"
COLL=all_reduce MINB=1M MAXB=1G FACTOR=4 GRAPH=() FIELD=8 UNIT="busbw GB/s" ITERS=20 WARMUP=5
configs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --coll) COLL=$2; shift 2 ;;
        -b) MINB=$2; shift 2 ;;
        -e) MAXB=$2; shift 2 ;;
        -f) FACTOR=$2; shift 2 ;;
        -G) GRAPH=(-G "$2"); shift 2 ;;
        --time) FIELD=6; UNIT="time us"; shift ;;
        -n) ITERS=$2; shift 2 ;;
        -w) WARMUP=$2; shift 2 ;;
        *) configs+=("$1"); shift ;;
    esac
done
if [ ${#configs[@]} -eq 0 ]; then
    configs=(
        "default"
        "ch16 WEFT_NCHANNELS=16"
        "ch32 WEFT_NCHANNELS=32"
        "ch48 WEFT_NCHANNELS=48"
        "unroll2 WEFT_KERNEL_UNROLL=2"
        "unroll8 WEFT_KERNEL_UNROLL=8"
        "buff2M NCCL_BUFFSIZE=2097152"
        "buff8M NCCL_BUFFSIZE=8388608"
        "ch32-unroll8 WEFT_NCHANNELS=32 WEFT_KERNEL_UNROLL=8"
        "threads768 WEFT_KERNEL_THREADS=768"
        "threads1024 WEFT_KERNEL_THREADS=1024"
        "ch32-threads768 WEFT_NCHANNELS=32 WEFT_KERNEL_THREADS=768"
    )
fi
NGPUS=$(nvidia-smi -L | wc -l)
wcoll=${COLL//_/-}
SUMMARY="$LOGS/sweep.txt"
: >"$SUMMARY"

# One line: the label, then the out-of-place busbw of every size in an nccl-tests table.
row() {
    awk -v label="$1" -v f="$FIELD" '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ { bw = bw sprintf(" %7.2f", $f); if ($9 != "0" && $9 != "N/A") bad = 1 }
        END { printf "%-22s%s%s\n", label, bw, bad ? "   WRONG RESULTS" : "" }' "$2"
}
header() {
    awk -v unit="$UNIT" '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ { s = $1; u = "";
        if (s >= 1073741824) { s /= 1073741824; u = "G" } else if (s >= 1048576) { s /= 1048576; u = "M" } else if (s >= 1024) { s /= 1024; u = "K" }
        h = h sprintf(" %7s", s u) } END { printf "%-22s%s\n", unit, h }' "$1"
}

echo "== $COLL on $NGPUS GPU(s), $MINB to $MAXB" | tee -a "$SUMMARY"
first=1
for c in "${configs[@]}"; do
    read -r label settings <<<"$c"
    log="$LOGS/weft-$label.txt"
    # shellcheck disable=SC2086
    env $settings "$WEFT" perf "$wcoll" --device cuda --threads -b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" "${GRAPH[@]}" >"$log" 2>&1
    if [ $first = 1 ]; then header "$log" | tee -a "$SUMMARY"; first=0; fi
    row "weft $label" "$log" | tee -a "$SUMMARY"
    grep -m1 "channel(s)" "$log" >>"$LOGS/channels.txt"
done

if [ ! -x "$NT/build/${COLL}_perf" ] && [ -d "$NT" ]; then
    (cd "$NT" && make -j16 MPI=0 NCCL_HOME=/usr CUDA_HOME=/usr/local/cuda \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >"$LOGS/nccl-tests-build.log" 2>&1)
fi
if [ -x "$NT/build/${COLL}_perf" ]; then
    for c in "nccl" "nccl-simple NCCL_PROTO=Simple" "nccl-simple-ch32 NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=32"; do
        read -r label settings <<<"$c"
        # shellcheck disable=SC2086
        env $settings "$NT/build/${COLL}_perf" -b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -g "$NGPUS" "${GRAPH[@]}" >"$LOGS/$label.txt" 2>&1
        row "$label" "$LOGS/$label.txt" | tee -a "$SUMMARY"
    done
    # What NCCL chose: channels, and the algorithm and protocol per size.
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING "$NT/build/${COLL}_perf" -b "$MINB" -e "$MAXB" -f "$FACTOR" -n 1 -w 0 -g "$NGPUS" \
        >"$LOGS/nccl-info.txt" 2>&1
    grep -E "nChannels|Channel [0-9]+/|channels|Algo|algo" "$LOGS/nccl-info.txt" | sort | uniq -c | sort -rn | head -20 | tee -a "$SUMMARY"
else
    echo "no nccl-tests binary: weft alone" | tee -a "$SUMMARY"
fi
cat "$LOGS/channels.txt" >>"$SUMMARY"
if [ -n "${OUT:-}" ]; then
    cp "$SUMMARY" "$OUT/sweep.txt"
    tar czf "$OUT/sweep-logs.tar.gz" -C "$LOGS" .
fi
