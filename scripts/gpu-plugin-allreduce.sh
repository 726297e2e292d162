#!/usr/bin/env bash
# NVLink multicast stays off on the GPU machines (see DESIGN.md): first thing, always.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# PyTorch all-reduce through stock NCCL over the network path only (NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1, loopback), in one call for each rank count:
#   weft       NCCL_NET_PLUGIN=<libnccl-net-weft.so> NCCL_NET=weft   (weft's socket backend)
#   socket     NCCL_NET=Socket, NCCL's defaults
#   socket4x4  NCCL_NET=Socket NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
# Each run checks every element against a CPU reference before timing, and the weft runs must
# show in NCCL_DEBUG=INFO that NCCL loaded the plugin (v11) and connected its channels through
# NET/weft. Ends with a table of busbw and weft's ratio to socket4x4.
#
# Builds nothing: it uses the library carried from the build machine (scripts/build-plugin.sh):
#   scripts/gpu-plugin-allreduce.sh [path/to/libnccl-net-weft.so]
# Environment: WEFT_PLUGIN (the library; default target/release/libnccl-net-weft.so),
#   RANKS ("2 4"), SIZES ("64K,1M,8M,64M,128M,512M"), CONFIGS ("weft socket socket4x4"; also
#   weft:TxS, e.g. weft:8x2, sets WEFT_SOCKET_NTHREADS x WEFT_NSOCKS_PERTHREAD for weft only,
#   and weft:TxS:US, e.g. weft:4x4:50, also sets WEFT_SOCKET_SPIN_US, how long weft's helper
#   threads spin before they sleep; 0 never spins; unset, weft spins 50 us where the process
#   may use 16 or more CPUs),
#   BENCH=0 skips the plugin-alone measurements (they need weft-plugin-harness next to the
#   library, or HARNESS=path, and examples/nccl_pattern_bw beside it, or PATTERN=path; carry
#   them from scripts/build-plugin.sh),
#   OUT (where logs and results go; default a new temporary directory), RUN_TIMEOUT (150 s per
#   torchrun; a normal run takes well under a minute, so the default call fits in 10 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -f shared/scripts/device-env.sh ]]; then
    # shellcheck disable=SC1091
    source shared/scripts/device-env.sh
fi

plugin="${1:-${WEFT_PLUGIN:-target/release/libnccl-net-weft.so}}"
if [[ ! -f "$plugin" ]]; then
    echo "gpu-plugin-allreduce: $plugin not found; build it with scripts/build-plugin.sh and carry it" >&2
    exit 2
fi
plugin="$(realpath "$plugin")"
ranks_list="${RANKS:-2 4}"
sizes="${SIZES:-64K,1M,8M,64M,128M,512M}"
configs="${CONFIGS:-weft socket socket4x4}"
out="${OUT:-$(mktemp -d /tmp/weft-plugin-allreduce.XXXXXX)}"
mkdir -p "$out"
results="$out/allreduce.jsonl"
: > "$results"
ngpu="$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
echo "plugin $plugin ($(du -h "$plugin" | cut -f1)); $ngpu GPUs; logs in $out"
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true

status=0
# The plugin alone first (no GPU, no NCCL): two processes in a 2-rank ring's traffic pattern,
# 8 messages of 512 KiB in flight per connection. Its GB/s per direction bounds what a 2-rank
# all-reduce through the plugin can reach. Needs the harness carried next to the library
# (scripts/build-plugin.sh builds it); BENCH=0 skips this.
harness="${HARNESS:-$(dirname "$plugin")/weft-plugin-harness}"
if [[ "${BENCH:-1}" != 0 && -x "$harness" ]]; then
    echo "== plugin alone ($harness --bench): connections each way, weft defaults then WEFT 4x4"
    for conns in ${BENCH_CONNS:-1 2 4 8}; do
        env NCCL_SOCKET_IFNAME=lo timeout 120 "$harness" "$plugin" --bench "$conns" 1024 \
            || { echo "   bench with $conns connections FAILED"; status=1; }
    done
    env NCCL_SOCKET_IFNAME=lo WEFT_SOCKET_NTHREADS=4 WEFT_NSOCKS_PERTHREAD=4 timeout 120 \
        "$harness" "$plugin" --bench 2 1024 | sed 's/^bench:/bench (4x4):/' \
        || { echo "   bench 4x4 FAILED"; status=1; }
fi
# The socket backend alone under NCCL's proxy pattern (a simulated 2-rank ring all-reduce: one
# proxy thread per rank, receives posted only when the simulated GPU freed a slot, 8 x 512 KiB
# per connection), then a ping-pong's round trip; needs the example carried next to the
# library's directory (scripts/build-plugin.sh builds it); BENCH=0 skips this.
pattern="${PATTERN:-$(dirname "$plugin")/examples/nccl_pattern_bw}"
if [[ "${BENCH:-1}" != 0 && -x "$pattern" ]]; then
    echo "== socket backend alone, NCCL's proxy pattern (nccl_pattern_bw), spin 0 then 50 us"
    for spin in 0 50; do
        env WEFT_SOCKET_SPIN_US="$spin" timeout 120 "$pattern" "${PATTERN_CONFIGS:-4x1,4x4,8x2}" 2 2048 0 3 \
            || { echo "   nccl_pattern_bw (spin $spin) FAILED"; status=1; }
    done
fi
port=29500
for ranks in $ranks_list; do
    if (( ranks > ngpu )); then
        echo "skip $ranks ranks: only $ngpu GPUs"
        continue
    fi
    for spec_full in $configs; do
        config="${spec_full%%@*}"
        extras=()
        lib="$plugin"
        if [[ "$spec_full" == *@* ]]; then
            IFS=+ read -r -a extras <<< "${spec_full#*@}"
        fi
        # shellcheck disable=SC2054 # the commas are NCCL_DEBUG_SUBSYS's list, not separators
        env_args=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO
                  NCCL_DEBUG_SUBSYS=INIT,NET,ENV)
        label="$config"
        suffix=""
        for e in "${extras[@]}"; do
            case "$e" in
                lib=*) lib="$(realpath "${e#lib=}")"; suffix+="-$(basename "$(dirname "$lib")")" ;;
                *=*) suffix+="-${e#NCCL_}" ;;
                *) echo "bad extra '$e' in $spec_full (want VAR=VAL or lib=PATH)" >&2; exit 2 ;;
            esac
        done
        case "$config" in
            weft | weft:*)
                env_args+=(NCCL_NET_PLUGIN="$lib" NCCL_NET=weft)
                if [[ "$config" == weft:* ]]; then
                    spec="${config#weft:}"
                    shape="${spec%%:*}"
                    env_args+=(WEFT_SOCKET_NTHREADS="${shape%x*}" WEFT_NSOCKS_PERTHREAD="${shape#*x}")
                    label="weft${shape}"
                    if [[ "$spec" == *:* ]]; then
                        env_args+=(WEFT_SOCKET_SPIN_US="${spec#*:}")
                        label="${label}spin${spec#*:}"
                    fi
                fi
                ;;
            socket) env_args+=(NCCL_NET_PLUGIN=none NCCL_NET=Socket) ;;
            shm) env_args+=(NCCL_NET_PLUGIN=none NCCL_SHM_DISABLE=0) ;;
            socket4x4)
                env_args+=(NCCL_NET_PLUGIN=none NCCL_NET=Socket NCCL_SOCKET_NTHREADS=4
                           NCCL_NSOCKS_PERTHREAD=4) ;;
            *) echo "unknown configuration $config" >&2; exit 2 ;;
        esac
        for e in "${extras[@]}"; do
            [[ "$e" == lib=* ]] || env_args+=("$e")
        done
        label="$label${suffix//[^A-Za-z0-9_.-]/}"
        log="$out/$label-$ranks.log"
        port=$((port + 1))
        echo "== $label, $ranks ranks: ${env_args[*]}"
        if ! env "${env_args[@]}" timeout "${RUN_TIMEOUT:-150}" \
            torchrun --standalone --nproc-per-node "$ranks" --master-port "$port" \
            scripts/gpu_plugin_allreduce.py --label "$label" --out "$results" --sizes "$sizes" \
            > "$log" 2>&1; then
            echo "FAILED ($label, $ranks ranks): last lines of $log:"
            tail -n 30 "$log"
            status=1
            continue
        fi
        grep '^RESULT' "$log" || true
        if [[ "$config" == weft* ]]; then
            loaded="$(grep -c 'Loaded net plugin weft (v11)' "$log" || true)"
            via="$(grep -c 'via NET/weft' "$log" || true)"
            using="$(grep -m1 -o 'Using network weft' "$log" || true)"
            echo "   NCCL_DEBUG=INFO: 'Loaded net plugin weft (v11)' x$loaded, '${using:-Using network weft: MISSING}', $via channel connections via NET/weft"
            grep -m2 'NET/weft :' "$log" | sed 's/^/   /' || true
            if (( loaded == 0 || via == 0 )) || [[ -z "$using" ]]; then
                echo "   weft's plugin was NOT loaded and used (see $log)"
                status=1
            fi
        elif [[ "$config" == shm ]]; then
            via="$(grep -c 'via SHM' "$log" || true)"
            echo "   $via channel connections via SHM"
        else
            via="$(grep -c 'via NET/Socket' "$log" || true)"
            echo "   $via channel connections via NET/Socket"
        fi
        grep '^THREADS' "$log" | sed 's/^/   /' || true
    done
done

python3 scripts/gpu_plugin_allreduce.py --table "$results" --baseline socket4x4 || status=1
echo "results: $results"
exit "$status"
