#!/usr/bin/env bash
# Host-memory all-reduce, weft against its baselines, on this machine: `weft perf all-reduce`,
# Open MPI's MPI_Allreduce (bench/mpi_allreduce.c) and, where torch imports, Gloo through
# torch.distributed (bench/gloo_allreduce.py). Every run checks its results (every element)
# before timing; the last thing printed is a table: size | weft busbw | MPI busbw | ratio ...,
# the smallest size's times and the issue's goals.
#
#   scripts/bench-host-allreduce.sh [--ranks 4] [--min 8] [--max 64M] [--weft PATH] [--iters 20]
#                                   [--warmup 5] [--rounds N] [--no-weft] [--no-mpi] [--no-gloo | --gloo]
#
#   --min, --max  the size range, by factors of 2 (small sizes need many --iters to be stable,
#                 large ones few: run the two ranges separately)
#   --rounds N    interleave: N rounds, each running every program at one size before the next
#                 size (in alternating order), so that a burst of load on a shared machine
#                 hits both sides of a comparison; the table takes each size's median run
#   --weft PATH   the weft binary (default target/release/weft; `cargo build --release -p weft-cli`)
#   --no-weft     run the baselines only (otherwise a missing weft binary is an error, exit 2)
#   --no-mpi      skip Open MPI (nothing is installed or compiled then)
#   --gloo        Gloo is required (an error if torch does not import); by default it runs if torch imports
#
# Installs Open MPI with apt-get when mpicc or mpirun is missing (needs root). Raw outputs go to
# $OUT (default target/bench-host-allreduce): weft.txt, mpi.txt, gloo.txt, table.txt.
# WEFT_PERF_ARGS adds flags to the weft command line; MPIRUN_ARGS adds flags to mpirun's.
# Exit: 0 done (a missed goal is reported, not an error), 1 a run failed or gave wrong results,
# 2 usage error or missing weft binary.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RANKS=4 MIN=8 MAX=64M ITERS=20 WARMUP=5 ROUNDS=0 WEFT="" RUN_WEFT=1 RUN_MPI=1 GLOO=auto
TIMEOUT_S=${TIMEOUT_S:-900}

die() { echo "bench-host-allreduce: $1" >&2; exit "${2:-1}"; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value" 2; fi; }

while [ $# -gt 0 ]; do
    case "$1" in
        --ranks) need_value "$@"; RANKS=$2; shift 2 ;;
        --min) need_value "$@"; MIN=$2; shift 2 ;;
        --max) need_value "$@"; MAX=$2; shift 2 ;;
        --weft) need_value "$@"; WEFT=$2; shift 2 ;;
        --iters) need_value "$@"; ITERS=$2; shift 2 ;;
        --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        --warmup) need_value "$@"; WARMUP=$2; shift 2 ;;
        --no-weft) RUN_WEFT=0; shift ;;
        --no-mpi) RUN_MPI=0; shift ;;
        --no-gloo) GLOO=no; shift ;;
        --gloo) GLOO=yes; shift ;;
        -h|--help) usage ;;
        *) echo "bench-host-allreduce: unknown argument $1" >&2; usage ;;
    esac
done
[[ $RANKS =~ ^[0-9]+$ && $RANKS -ge 2 ]] || die "--ranks wants a number >= 2, not '$RANKS'" 2
[[ $MIN =~ ^[0-9]+[KkMmGg]?$ ]] || die "--min wants bytes with an optional K, M or G suffix, not '$MIN'" 2
[[ $MAX =~ ^[0-9]+[KkMmGg]?$ ]] || die "--max wants bytes with an optional K, M or G suffix, not '$MAX'" 2
[[ $ITERS =~ ^[0-9]+$ && $ITERS -ge 1 ]] || die "--iters wants a number >= 1, not '$ITERS'" 2
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup wants a number >= 0, not '$WARMUP'" 2
[[ $ROUNDS =~ ^[0-9]+$ ]] || die "--rounds wants a number >= 0, not '$ROUNDS'" 2

OUT=${OUT:-$ROOT/target/bench-host-allreduce}
mkdir -p "$OUT"
# "64M" -> 67108864
to_bytes() {
    local n=${1%[KkMmGg]} scale=1
    case $1 in *[Kk]) scale=1024 ;; *[Mm]) scale=$((1024 * 1024)) ;; *[Gg]) scale=$((1024 * 1024 * 1024)) ;; esac
    echo $((n * scale))
}
COMPARE=()
# Each program's command line up to its size flags, by label (filled in below).
declare -A CMDS=()
LABELS=()

# Checked first, so that a missing binary does not cost an install and the baselines' runs.
if [ "$RUN_WEFT" = 1 ]; then
    WEFT=${WEFT:-$ROOT/target/release/weft}
    [ -x "$WEFT" ] || die "no weft binary at $WEFT: build it with 'cargo build --release -p weft-cli', \
pass --weft PATH, or --no-weft to run the baselines only" 2
fi
if [ "$GLOO" != no ]; then
    if python3 -c 'import torch' 2>/dev/null; then
        GLOO=yes
    elif [ "$GLOO" = yes ]; then
        die "--gloo given but 'python3 -c \"import torch\"' fails: no PyTorch here" 2
    else
        echo "bench-host-allreduce: torch does not import with python3: Gloo skipped"
        GLOO=no
    fi
fi

# run LABEL FILE COMMAND...: runs one benchmark with a deadline, its output to FILE.
run() {
    local label=$1 file=$2
    shift 2
    echo "== $label: $*"
    local rc=0
    timeout "$TIMEOUT_S" "$@" > "$file" 2> "$file.err" || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 20 "$file" "$file.err" >&2 || true
        [ "$rc" = 124 ] && die "$label passed ${TIMEOUT_S} s (TIMEOUT_S) and was stopped; output in $file"
        die "$label failed (exit $rc); output in $file and $file.err"
    fi
    grep -E '^#|^ *[0-9]' "$file" | grep -v '^# *$' || true
}

if [ "$RUN_MPI" = 1 ]; then
    if ! command -v mpicc > /dev/null || ! command -v mpirun > /dev/null; then
        [ "$(id -u)" = 0 ] || die "Open MPI is missing and installing it needs root: \
apt-get install -y openmpi-bin libopenmpi-dev, or pass --no-mpi" 1
        echo "== installing Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
        apt-get update -qq > "$OUT/apt.log" 2>&1 || die "apt-get update failed, see $OUT/apt.log"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >> "$OUT/apt.log" 2>&1 \
            || die "apt-get install openmpi-bin libopenmpi-dev failed, see $OUT/apt.log"
    fi
    mpicc -O2 -Wall -o "$OUT/mpi_allreduce" "$ROOT/bench/mpi_allreduce.c" \
        || die "mpicc could not compile bench/mpi_allreduce.c"
    # As root mpirun refuses to start without --allow-run-as-root; --oversubscribe lets 4 ranks
    # run on fewer cores (containers, small CI machines). Single-copy (CMA) is kept: if the
    # container forbids process_vm_readv, MPIRUN_ARGS="--mca btl_vader_single_copy_mechanism none".
    MPIRUN=(mpirun --oversubscribe -np "$RANKS")
    if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
    # shellcheck disable=SC2206 # MPIRUN_ARGS is a list of flags, split on purpose
    MPIRUN+=(${MPIRUN_ARGS:-})
    CMDS[mpi]="${MPIRUN[*]} $OUT/mpi_allreduce -n $ITERS -w $WARMUP"
    LABELS+=(mpi)
    COMPARE+=(--mpi "$OUT/mpi.txt")
fi

if [ "$GLOO" = yes ]; then
    CMDS[gloo]="python3 $ROOT/bench/gloo_allreduce.py --ranks $RANKS -n $ITERS -w $WARMUP"
    LABELS+=(gloo)
    COMPARE+=(--gloo "$OUT/gloo.txt")
fi

if [ "$RUN_WEFT" = 1 ]; then
    CMDS[weft]="$WEFT perf all-reduce --ranks $RANKS --iters $ITERS --warmup $WARMUP --dtype float --op sum ${WEFT_PERF_ARGS:-}"
    LABELS+=(weft)
    COMPARE=(--weft "$OUT/weft.txt" "${COMPARE[@]}")
fi

# run_sizes LABEL FIRST LAST: the program of LABEL from FIRST to LAST bytes, its output appended
# to $OUT/LABEL.txt. The command strings hold no quoted arguments (paths from this script
# and flags), so splitting them on spaces is what is meant.
run_sizes() {
    local label=$1 part="$OUT/$1.part"
    # shellcheck disable=SC2086 # the command string is split on purpose (see above)
    run "$label" "$part" ${CMDS[$label]} -b "$2" -e "$3" -f 2
    cat "$part" >> "$OUT/$label.txt"
}
for label in "${LABELS[@]}"; do : > "$OUT/$label.txt"; done
if [ "$ROUNDS" = 0 ]; then
    for label in "${LABELS[@]}"; do run_sizes "$label" "$MIN" "$MAX"; done
else
    first=$(to_bytes "$MIN") last=$(to_bytes "$MAX")
    for round in $(seq 1 "$ROUNDS"); do
        order=("${LABELS[@]}")
        if [ $((round % 2)) = 0 ]; then
            order=(); for ((i = ${#LABELS[@]} - 1; i >= 0; i--)); do order+=("${LABELS[$i]}"); done
        fi
        for ((size = first; size <= last; size *= 2)); do
            for label in "${order[@]}"; do run_sizes "$label" "$size" "$size"; done
        done
    done
fi


[ ${#COMPARE[@]} -gt 0 ] || die "nothing was run (--no-weft --no-mpi and no Gloo)" 2
echo
rounds=""
[ "$ROUNDS" = 0 ] || rounds=", median of $ROUNDS interleaved rounds"
echo "== all-reduce, $RANKS ranks, host memory, float sum, $ITERS iterations$rounds ($(uname -n), $(nproc) cores)"
python3 "$ROOT/bench/compare_allreduce.py" "${COMPARE[@]}" | tee "$OUT/table.txt"
