#!/usr/bin/env bash
# Two builds of `weft` measured side by side on one machine, to show that a change (a
# refactoring, a split of crates) left the figures within noise: correctness first (every
# iteration checked), then both builds alternated ROUNDS times per case, then a table per
# case (bench/compare_builds.py: best busbw per size of each build, after/before).
#
#   scripts/perf-before-after.sh BEFORE_WEFT AFTER_WEFT [--rounds 3] [--host] [--cuda] [--ranks N]
#                                [--cuda-ranks N] [--quick]
#
#   --host   host memory, N local rank processes (the README's main job): all-reduce and
#            all-gather, 8 B to 64 MiB
#   --cuda   device memory, one rank per GPU in threads of one process (--threads), every GPU
#            seen: all-reduce, all-gather, reduce-scatter, 8 B to 1 GiB
#   (neither: both)
#   --cuda-ranks N  ranks of the CUDA cases (default: one per GPU; on one GPU give 2 and set
#            WEFT_TEST_SHARE_GPU=1: two ranks time-slice it, so only the two builds compare)
#   --quick  all-reduce only
# Builds nothing. On a GPU machine run it through the device tool with the two binaries
# carried (e.g. .gpu/before/weft and .gpu/weft) and WEFT_CACHE_DIR set to a filled kernel
# cache (`weft kernels`), or each build compiles its kernels in the first timed case.
# Logs in ${OUTDIR:-/tmp/weft-before-after}; $OUT, when set, gets tables.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
BEFORE=$1 AFTER=$2
shift 2
ROUNDS=3 HOST=0 CUDA=0 RANKS="" CUDA_RANKS="" QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --host) HOST=1; shift ;;
        --cuda) CUDA=1; shift ;;
        --ranks) RANKS=$2; shift 2 ;;
        --cuda-ranks) CUDA_RANKS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        *) echo "perf-before-after: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$HOST" = 0 ] && [ "$CUDA" = 0 ] && HOST=1 CUDA=1
for b in "$BEFORE" "$AFTER"; do
    [ -x "$b" ] || { echo "perf-before-after: $b is not an executable" >&2; exit 2; }
done
OUTDIR=${OUTDIR:-/tmp/weft-before-after}
mkdir -p "$OUTDIR"
STATUS=0
cases=()
if [ "$HOST" = 1 ]; then
    r=${RANKS:-4}
    cases+=("host-all-reduce|all-reduce --ranks $r -b 8 -e 64M -f 8")
    [ "$QUICK" = 1 ] || cases+=("host-all-gather|all-gather --ranks $r -b 8 -e 64M -f 8")
fi
if [ "$CUDA" = 1 ]; then
    cr=${CUDA_RANKS:+--ranks $CUDA_RANKS}
    cases+=("cuda-all-reduce|all-reduce --device cuda --threads $cr -b 8 -e 1G -f 4")
    if [ "$QUICK" = 0 ]; then
        cases+=("cuda-all-gather|all-gather --device cuda --threads $cr -b 1K -e 1G -f 4")
        cases+=("cuda-reduce-scatter|reduce-scatter --device cuda --threads $cr -b 1K -e 1G -f 4")
    fi
fi
for c in "${cases[@]}"; do
    name=${c%%|*} args=${c#*|}
    # Correctness: every iteration of a short run checked, on both builds.
    for side in before after; do
        bin=$BEFORE; [ "$side" = after ] && bin=$AFTER
        # shellcheck disable=SC2086 # args is a list of words
        if ! timeout 120 "$bin" perf $args -c 1 -n 2 -w 1 >"$OUTDIR/$name-$side-check.txt" 2>&1 ||
            ! python3 "$ROOT/bench/compare_builds.py" --before "$OUTDIR/$name-$side-check.txt" \
                --after "$OUTDIR/$name-$side-check.txt" >/dev/null; then
            echo "== $name: the $side build's check failed ($OUTDIR/$name-$side-check.txt)"
            tail -5 "$OUTDIR/$name-$side-check.txt"
            STATUS=1
            continue 2
        fi
    done
    : >"$OUTDIR/$name-before.txt"; : >"$OUTDIR/$name-after.txt"
    for ((i = 1; i <= ROUNDS; i++)); do
        for side in before after; do
            bin=$BEFORE; [ "$side" = after ] && bin=$AFTER
            # shellcheck disable=SC2086
            timeout 240 "$bin" perf $args >>"$OUTDIR/$name-$side.txt" 2>&1 || STATUS=1
        done
    done
    python3 "$ROOT/bench/compare_builds.py" --before "$OUTDIR/$name-before.txt" \
        --after "$OUTDIR/$name-after.txt" --name "$name" | tee "$OUTDIR/table-$name.txt" || STATUS=1
done
[ -n "${OUT:-}" ] && cat "$OUTDIR"/table-*.txt >"$OUT/tables.txt" 2>/dev/null
exit $STATUS
