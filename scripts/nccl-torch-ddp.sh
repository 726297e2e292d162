#!/usr/bin/env bash
# PyTorch on weft's libnccl.so.2 (issue 13's acceptance step): scripts/nccl_torch_ddp.py
# under torchrun, every rank's ProcessGroupNCCL loading weft's library, checked against the
# CPU; then the same script on the machine's own NCCL, and the DDP step's gradients of the two compared.
#
# Builds nothing: run scripts/build-nccl-bundle.sh here first and carry `.gpu`. Through the
# device tool, kind nvidia-h200-x2:  run carry=[".gpu"] command="scripts/nccl-torch-ddp.sh"
#
# PyTorch's wheel finds libnccl.so.2 through its RPATH (the nvidia-nccl-cu12 wheel), which
# LD_LIBRARY_PATH cannot override: LD_PRELOAD loads weft's first, and the dynamic linker
# then uses it for every library that needs the SONAME libnccl.so.2. NCCL_DEBUG=INFO shows
# which library answered ("NCCL version 2.28.3+weft-...").
#
# Within the device tool's 600 s per command: each run has at most 270 s (the two < 570 s;
# NCCL_TORCH_TIMEOUT=S another cap),
# and the logs are copied to $OUT as each run ends and on exit. NVIDIA's NCCL refuses two
# ranks on one GPU ("Duplicate GPU detected"), so on a one-GPU machine only the weft side
# runs (two ranks sharing the GPU) and the comparison is reported as needing two GPUs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$ROOT/.gpu/nccl/lib/libnccl.so.2"
[ -f "$LIB" ] || { echo "nccl-torch-ddp: $LIB missing: run scripts/build-nccl-bundle.sh and carry .gpu" >&2; exit 2; }
LOGS=/tmp/weft-nccl-torch
mkdir -p "$LOGS"
save_logs() { [ -n "${OUT:-}" ] && cp "$LOGS"/*.log "$OUT/" 2>/dev/null; return 0; }
trap save_logs EXIT
NGPUS=$(nvidia-smi -L | wc -l)
share=()
nproc=$NGPUS
SIDES="weft nccl"
if [ "$NGPUS" -lt 2 ]; then
    share=(WEFT_TEST_SHARE_GPU=1); nproc=2; SIDES="weft"
    echo "== one GPU: weft only (two ranks sharing it); the comparison with NVIDIA's NCCL needs two GPUs (it refuses two ranks on one)"
fi
# The kernel cache scripts/build-gpu-bundle.sh filled (weft kernels), carried with .gpu:
# without it every run on a fresh machine compiles every module first (minutes).
export WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache"
status=0
for which in $SIDES; do
    envs=("${share[@]}")
    [ "$which" = weft ] && envs+=(LD_PRELOAD="$LIB" NCCL_DEBUG=INFO)
    mkdir -p "$LOGS/grads-$which"
    envs+=(WEFT_DDP_GRADS_DIR="$LOGS/grads-$which")
    env "${envs[@]}" timeout "${NCCL_TORCH_TIMEOUT:-270}" torchrun --standalone --nproc_per_node="$nproc" \
        "$ROOT/scripts/nccl_torch_ddp.py" >"$LOGS/$which.log" 2>&1
    rc=$?
    echo "== $which: exit $rc; $(grep -c 'match the CPU' "$LOGS/$which.log")/$nproc ranks matched the CPU"
    grep -E '^rank [0-9]+: (BAD|DDP)' "$LOGS/$which.log" | head -8
    [ $rc -eq 124 ] && echo "   (timed out after ${NCCL_TORCH_TIMEOUT:-270} s)"
    [ $rc -eq 0 ] || { tail -30 "$LOGS/$which.log"; status=1; }
    save_logs
done
# The DDP step's gradients on weft against those on NVIDIA's NCCL, rank by rank, tensor
# by tensor (a 2-rank sum is exact in any order, so they should be identical).
if [ "$SIDES" = "weft nccl" ]; then
    python3 - "$LOGS" "$nproc" <<'PY' | tee "$LOGS/grads-compare.log" || status=1
import sys, torch
logs, n = sys.argv[1], int(sys.argv[2])
worst = 0.0
for r in range(n):
    a = torch.load(f"{logs}/grads-weft/grads-rank{r}.pt")
    b = torch.load(f"{logs}/grads-nccl/grads-rank{r}.pt")
    assert a.keys() == b.keys(), f"rank {r}: different parameters"
    for k in a:
        d = (a[k] - b[k]).abs().max().item()
        worst = max(worst, d)
        print(f"rank {r}: {k}: {a[k].numel()} gradients, max |weft - nccl| = {d:.3e}")
print(f"DDP gradients, weft vs NVIDIA's NCCL: max difference {worst:.3e} over {n} ranks")
sys.exit(0 if worst <= 1e-6 else 1)
PY
fi
if ! grep -q '+weft-' "$LOGS/weft.log"; then
    echo "the weft run's log has no weft version line: NVIDIA's libnccl answered" >&2
    status=1
fi
exit $status
