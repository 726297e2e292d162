#!/usr/bin/env bash
# Host-memory all-reduce on a GPU machine's CPUs: weft (a binary built elsewhere and carried)
# against Gloo through the PyTorch installed there, 4 ranks, 8 B to 64 MiB. Builds and installs
# nothing and uses no GPU (CUDA_VISIBLE_DEVICES is emptied for every run). The issue's goals:
# at 64 MiB at least 2x Gloo's busbw (3.1 GB/s on 4x H200's host), and 8 B under 50 us.
#
#   scripts/gpu-host-allreduce.sh [--weft target/release/weft] [--ranks 4] [--max 64M] [--iters 20] [--warmup 5]
#
# From the machine that built weft, through the device tool (carry the binary):
#   run  carry=["target/release/weft"]  command="scripts/gpu-host-allreduce.sh"
# Outputs (weft.txt, gloo.txt, table.txt) are written to $OUT, which the device tool brings back.
# Everything else is scripts/bench-host-allreduce.sh's (same options, same exit codes).
set -euo pipefail

# NVLink multicast must stay off on these machines (docs: DESIGN.md), whatever runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
export PYTHONUNBUFFERED=1
# A host-memory benchmark: no rank may open a GPU.
export CUDA_VISIBLE_DEVICES=""

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python3 -c 'import torch' 2>/dev/null \
    || { echo "gpu-host-allreduce: 'import torch' fails with $(command -v python3): Gloo cannot run" >&2; exit 2; }
echo "gpu-host-allreduce: $(uname -n), $(nproc) cores, $(python3 -c 'import torch; print("torch", torch.__version__)')"
exec "$ROOT/scripts/bench-host-allreduce.sh" --no-mpi --gloo "$@"
