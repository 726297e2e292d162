#!/usr/bin/env bash
# Faults PyTorch meets through its NCCL (issues 27 and 24): a send/receive size mismatch, a
# receive whose sender never sends, and a rank killed mid-all-reduce with the ranks split
# into two hosts (NCCL_HOSTID per torchrun launch, as scripts/gpu-hosts-allreduce.sh). Each
# case runs on weft's libnccl (and, with SIDES="nccl weft", on NVIDIA's for comparison);
# scripts/torch_faults.py prints what each rank saw. Passes when, on weft, every rank of
# every case ends (no hang: each run has RUN_TIMEOUT) and the ranks that fail name the
# rank at fault ("rank N") in the text PyTorch shows (weft's ncclGetLastError). In the
# killed case those are the other host's ranks: torchrun itself ends the killed rank's
# host-mates.
#
#   scripts/gpu-torch-faults.sh
# Environment: GPUS (default 2, even), CASES ("mismatch absent killed"), SIDES ("weft"),
#   WEFT_LIB (.gpu/nccl/lib/libnccl.so.2), RUN_TIMEOUT (120 s per case), OUT (logs).
#   On one GPU: GPUS=2 WEFT_TEST_SHARE_GPU=1 (weft only; the ranks share it).
#   FAULTS_STACKS=S: S seconds into each case but the killed one, every rank's thread
#   stacks (gdb, else cuda-gdb: the GPU machines have only the latter) into OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
# PyTorch's defaults otherwise, as users run it: its watchdog thread polls each pending work's
# ncclCommGetAsyncError and, on an error or its own timeout, aborts the communicators and takes
# the process down (ASYNC_ERROR_HANDLING=1: abort first). TORCH_NCCL_BLOCKING_WAIT=1 must stay
# unset: with it PyTorch starts no watchdog at all, and a synchronous all_reduce (which
# returns at once) whose kernel never completes leaves torch.cuda.synchronize() waiting
# forever, on NVIDIA's NCCL as on weft's (seen in the first runs, 2026-11-28).
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
unset TORCH_NCCL_BLOCKING_WAIT
# PyTorch's watchdog sleeps four dump timeouts (60 s by default) after a failure before it
# ends the process; a rank whose collective never completes (NCCL's, and weft's since a
# kernel that gave up holds its stream) otherwise outlives RUN_TIMEOUT.
export TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
gpus="${GPUS:-2}"
per_host=$((gpus / 2))
lib="$(realpath "${WEFT_LIB:-.gpu/nccl/lib/libnccl.so.2}")"
out="${OUT:-$(mktemp -d /tmp/weft-torch-faults.XXXXXX)}"
mkdir -p "$out"
port=29700
status=0
# Whether text $1 names one of the ranks after it ("rank N" followed by no digit).
names_one() {
    local text=$1 r
    shift
    for r in "$@"; do
        [[ "$text" =~ rank\ $r([^0-9]|$) ]] && return 0
    done
    return 1
}
for side in ${SIDES:-weft}; do
    envs=(NCCL_DEBUG=WARN)
    [[ "$side" == weft ]] && envs+=(LD_PRELOAD="$lib" WEFT_TIMEOUT=10)
    for c in ${CASES:-mismatch absent killed}; do
        port=$((port + 1))
        log="$out/$side-$c"
        start=$(date +%s)
        if [[ "$c" == killed ]]; then
            pids=()
            for node in 0 1; do
                first=$((node * per_host))
                visible="$(seq -s, "$first" $((first + per_host - 1)))"
                [[ -n "${WEFT_TEST_SHARE_GPU:-}" ]] && visible=0
                env "${envs[@]}" NCCL_HOSTID="weft-fault-host-$node" CUDA_VISIBLE_DEVICES="$visible" \
                    timeout -k 5 "${RUN_TIMEOUT:-120}" torchrun --nnodes 2 --node-rank "$node" \
                    --nproc-per-node "$per_host" --master-addr 127.0.0.1 --master-port "$port" \
                    scripts/torch_faults.py "$c" > "$log-node$node.log" 2>&1 &
                pids+=($!)
            done
            # The first host's ranks are the ones that must report (torchrun ends the killed
            # rank's host-mates itself). Once each has, the launches are ended: torchrun
            # would otherwise wait out its 300 s exit barrier for the other host.
            deadline=$(($(date +%s) + ${RUN_TIMEOUT:-120}))
            alive() { local p; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
            while alive && (($(date +%s) < deadline)); do
                reported=$(grep -c "^rank [0-9]*: $c:" "$log-node0.log" 2>/dev/null)
                ((reported >= per_host)) && { sleep 3; pkill -9 -f "torch_faults.py $c"; break; }
                sleep 1
            done
            rcs=()
            for p in "${pids[@]}"; do wait "$p"; rc=$?; ((rc == 124)) || rc=0; rcs+=("$rc"); done
            cat "$log"-node*.log > "$log.log"
        else
            # FAULTS_STACKS=S (diagnosis): S seconds in, every rank's threads' stacks (gdb or
            # cuda-gdb; the python processes only, not torchrun or timeout).
            stacks=
            debugger=$(command -v gdb || command -v cuda-gdb)
            if [[ -n "${FAULTS_STACKS:-}" && -n "$debugger" ]]; then
                (
                    sleep "$FAULTS_STACKS"
                    for p in $(pgrep -f "^[^ ]*python[^ ]* .*torch_faults.py $c"); do
                        timeout 60 "$debugger" -p "$p" -batch -ex "thread apply all bt 15" \
                            > "$log-stacks-$p.txt" 2>&1
                    done
                ) &
                stacks=$!
            fi
            env "${envs[@]}" timeout -k 5 "${RUN_TIMEOUT:-120}" torchrun --standalone \
                --nproc-per-node "$gpus" scripts/torch_faults.py "$c" > "$log.log" 2>&1
            rcs=($?)
            # The stacks sampler belongs to this case: it ends with it.
            [[ -n "$stacks" ]] && { kill "$stacks" 2>/dev/null; wait "$stacks" 2>/dev/null; }
        fi
        took=$(($(date +%s) - start))
        echo "== $side $c: ${took} s, exit ${rcs[*]}"
        grep -h "^rank [0-9]*: $c:" "$log.log" | sort
        if [[ "$side" == weft ]]; then
            if [[ " ${rcs[*]} " == *" 124 "* ]]; then
                echo "   FAIL: a run hung until RUN_TIMEOUT"; status=1
            fi
            # Which ranks must fail, and which rank(s) each must name ("r:culprits").
            verdicts=()
            case "$c" in
                # Rank 1 meets rank 0's fault; every other rank's all_reduce after it then
                # waits on rank 1, stuck in its receive (or taken down by PyTorch).
                mismatch | absent)
                    verdicts=("1:0")
                    for r in $(seq 0 $((gpus - 1))); do
                        ((r == 1)) || verdicts+=("$r:1")
                    done
                    ;;
                # The killed rank's host: torchrun ends its other ranks too, so naming any
                # of them names a dead rank of the host that failed.
                killed)
                    verdicts=()
                    for r in $(seq 0 $((per_host - 1))); do
                        verdicts+=("$r:$(seq -s, "$per_host" $((gpus - 1)))")
                    done
                    ;;
            esac
            # Rank r's verdict, from two lines: weft's text as PyTorch showed it (the
            # library's last error, on a line of its own that begins "rank r:", logged by
            # the watchdog or in the exception), and the rank's own line (an exception that
            # reached the Python caller, or a wrong sum). A wrong sum after weft's text is
            # PyTorch's doing: its watchdog aborts the communicator (which lets the held
            # kernel end) before it takes the process down; without weft's text first it is
            # a silent wrong result.
            for v in "${verdicts[@]}"; do
                r=${v%%:*}
                IFS=, read -r -a culprits <<< "${v#*:}"
                own="$(grep -h "^rank $r: $c:" "$log.log" | head -1)"
                weft="$(grep -h "^rank $r: " "$log.log" | grep -v "^rank $r: $c:" | head -1)"
                if [[ -n "$weft" ]] && names_one "$weft" "${culprits[@]}"; then
                    echo "   ok: rank $r: ${weft:0:160}"
                elif [[ "$own" == *ERROR* && "$own" != *AssertionError* ]] && names_one "$own" "${culprits[@]}"; then
                    echo "   ok: rank $r: ${own:0:160}"
                elif [[ -z "$own$weft" || "$own" == *": $c: ok"* && -z "$weft" ]]; then
                    echo "   FAIL: rank $r did not fail: ${own:-no line}"; status=1
                elif [[ "$own" == *AssertionError* && -z "$weft" ]]; then
                    echo "   FAIL: rank $r got a wrong result and no error: $own"; status=1
                else
                    echo "   FAIL: rank $r's error names none of rank(s) ${culprits[*]}: ${weft:-$own}"; status=1
                fi
            done
        fi
    done
done
echo "logs: $out"
exit "$status"
