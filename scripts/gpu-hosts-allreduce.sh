#!/usr/bin/env bash
# NVLink multicast stays off on the GPU machines (see DESIGN.md): first thing, always.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
# PyTorch all-reduce with the GPUs of one machine split into two hosts (issue 24): two
# torchrun launches (--nnodes 2, one per "host", NCCL_HOSTID set per launch), one process
# per GPU, so that NCCL and weft connect the hosts over their NET (sockets on loopback) and
# the GPUs of one host directly. In one call, per configuration:
#   nccl      NVIDIA's NCCL (PyTorch's), its defaults
#   nccl4x4   the same with NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
#   weft      weft's libnccl.so.2 (LD_PRELOAD, as PyTorch finds NVIDIA's through an RPATH)
# Each run checks every element against a CPU reference before timing
# (scripts/gpu_plugin_allreduce.py), and must show in NCCL_DEBUG=INFO that the hosts were
# joined over NET ("via NET/Socket"). Then PyTorch's DDP step and collectives
# (scripts/nccl_torch_ddp.py, checked against the CPU) across the same split, on NCCL and on
# weft (DDP_CONFIGS). Ends with the busbw table and weft's ratio to nccl4x4.
#
#   scripts/gpu-hosts-allreduce.sh
# Environment: GPUS (default: every GPU, even, at least 2), SIZES (default 8,64K,1M,4M,16M,
#   64M,256M), CONFIGS ("nccl nccl4x4 weft"; empty: no all-reduce), DDP_CONFIGS ("nccl
#   weft"; empty: no DDP step), WEFT_LIB (.gpu/nccl/lib/libnccl.so.2),
#   RUN_TIMEOUT (150 s per configuration), OUT (logs; default a new temporary directory).
# Builds nothing: scripts/build-nccl-bundle.sh here, then carry .gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
ngpu="${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)}"
(( ngpu >= 2 )) || { echo "gpu-hosts-allreduce: needs at least 2 GPUs, found $ngpu" >&2; exit 2; }
per_host=$((ngpu / 2))
sizes="${SIZES:-8,64K,1M,4M,16M,64M,256M}"
configs="${CONFIGS-nccl nccl4x4 weft}"
lib="$(realpath "${WEFT_LIB:-.gpu/nccl/lib/libnccl.so.2}")"
out="${OUT:-$(mktemp -d /tmp/weft-hosts-allreduce.XXXXXX)}"
mkdir -p "$out"
results="$out/allreduce.jsonl"
: > "$results"
echo "$ngpu GPUs as 2 hosts x $per_host; logs in $out"
status=0
port=29600

# The environment of configuration $1 (into the array env_args).
config_env() {
    # shellcheck disable=SC2054 # the commas are NCCL_DEBUG_SUBSYS's list
    env_args=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV)
    case "$1" in
        nccl) ;;
        nccl4x4) env_args+=(NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4) ;;
        weft)
            [[ -f "$lib" ]] || { echo "gpu-hosts-allreduce: $lib missing (carry .gpu)" >&2; exit 2; }
            env_args+=(LD_PRELOAD="$lib" WEFT_CACHE_DIR="$PWD/.gpu/kernel-cache")
            ;;
        *) echo "unknown configuration $1" >&2; exit 2 ;;
    esac
}

# Runs `$@` (a python script and its arguments) as two hosts under configuration $config,
# logs in $out/$name-node{0,1}.log; false if either host failed.
split_run() {
    local name=$1
    shift
    port=$((port + 1))
    local pids=() node first devices failed=0
    for node in 0 1; do
        first=$((node * per_host))
        devices="$(seq -s, "$first" $((first + per_host - 1)))"
        env "${env_args[@]}" NCCL_HOSTID="weft-split-host-$node" CUDA_VISIBLE_DEVICES="$devices" \
            timeout "${RUN_TIMEOUT:-150}" torchrun --nnodes 2 --node-rank "$node" \
            --nproc-per-node "$per_host" --master-addr 127.0.0.1 --master-port "$port" \
            "$@" > "$out/$name-node$node.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    if (( failed )); then
        echo "FAILED ($name): last lines of each host's log:"
        tail -n 25 "$out/$name-node0.log" "$out/$name-node1.log"
        return 1
    fi
}

for config in $configs; do
    config_env "$config"
    echo "== $config: ${env_args[*]}"
    split_run "$config" scripts/gpu_plugin_allreduce.py --label "$config" --out "$results" \
        --sizes "$sizes" || { status=1; continue; }
    grep -h '^RESULT' "$out/$config-node0.log" || true
    net="$(grep -h -o 'via NET/[A-Za-z]*[/0-9]*' "$out/$config"-node*.log | sort | uniq -c | tr '\n' ';')"
    p2p="$(cat "$out/$config"-node*.log | grep -c 'via P2P')"
    echo "   NCCL_DEBUG=INFO: ${net:-no NET connection lines}; $p2p lines via P2P"
    [[ -n "$net" ]] || { echo "   the hosts were NOT joined over NET"; status=1; }
done
# PyTorch's DDP step, collectives, a send/recv pair and a new_group across the two hosts
# (scripts/nccl_torch_ddp.py: every result checked against the CPU), on each library.
for config in ${DDP_CONFIGS-nccl weft}; do
    config_env "$config"
    if split_run "ddp-$config" scripts/nccl_torch_ddp.py; then
        echo "== DDP across hosts on $config: $(grep -h -c '^rank .*: ok ' "$out/ddp-$config"-node*.log | paste -sd' ') checks ok per host, $(cat "$out/ddp-$config"-node*.log | grep -c 'DDP step and collectives match the CPU') ranks done"
    else
        status=1
    fi
done
if [[ -s "$results" ]]; then
    python3 scripts/gpu_plugin_allreduce.py --table "$results" --baseline nccl4x4 || status=1
fi
echo "results: $results"
exit "$status"
