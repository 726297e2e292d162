#!/usr/bin/env bash
# Runs NCCL (through PyTorch) on the GPU machine and keeps what it decided about the topology,
# so that weft's topology, path and search code can be compared with it. This is how the
# *-measured* and weft-h200x4-* fixtures in tests/fixtures/topo were produced.
#
#   scripts/nccl_topo_crosscheck.sh [HOSTS] [TOPO_FILE] [GRAPH_FILE]
#
# HOSTS (default 1) splits the local GPUs into that many "hosts" with NCCL_HOSTID, so NCCL
# searches inter-node graphs over its socket transport; TOPO_FILE / GRAPH_FILE are passed as
# NCCL_TOPO_FILE / NCCL_GRAPH_FILE (e.g. files written by weft). Builds nothing.
# Writes to $OUT (or ./nccl-crosscheck): topo.xml, graph.xml (NCCL's dumps), nccl.log, and
# info.txt (the INFO lines the fixtures keep). Checks a 4-rank all-reduce result first.
set -euo pipefail
HOSTS=${1:-1}
OUT=${OUT:-$PWD/nccl-crosscheck}
mkdir -p "$OUT"
# NVLink multicast must stay off on these machines (docs: DESIGN.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPUS=$(nvidia-smi -L | wc -l)
if [ -n "${2:-}" ]; then NCCL_TOPO_FILE="$(realpath "$2")"; export NCCL_TOPO_FILE; fi
if [ -n "${3:-}" ]; then NCCL_GRAPH_FILE="$(realpath "$3")"; export NCCL_GRAPH_FILE; fi
cat > "$OUT/allreduce.py" <<PY
import os
r = int(os.environ["RANK"]); n = int(os.environ["WORLD_SIZE"])
os.environ["NCCL_HOSTID"] = "crosscheck-host%d" % (r * $HOSTS // n)
import torch, torch.distributed as d
torch.cuda.set_device(r); d.init_process_group("nccl")
x = torch.full((1 << 20,), float(r + 1), device="cuda"); d.all_reduce(x); torch.cuda.synchronize()
want = n * (n + 1) / 2
assert float(x[0]) == want and float(x[-1]) == want, (float(x[0]), want)
if r == 0: print("ALLREDUCE_OK")
d.destroy_process_group()
PY
NCCL_TOPO_DUMP_FILE=$OUT/topo.xml NCCL_GRAPH_DUMP_FILE=$OUT/graph.xml NCCL_DEBUG=INFO \
  NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV timeout 300 torchrun --nproc_per_node="$NGPUS" "$OUT/allreduce.py" > "$OUT/nccl.log" 2>&1
grep -q ALLREDUCE_OK "$OUT/nccl.log" || { echo "all-reduce failed, see $OUT/nccl.log"; exit 1; }
grep -E "\] NCCL INFO (NCCL version|Pattern|Channel [0-9]+/[0-9]+ :|Trees|=== System|(GPU|NET)/[0-9a-f]+-[0-9a-f]+ :)|ALLREDUCE_OK" \
  "$OUT/nccl.log" | grep -v " via " > "$OUT/info.txt"
echo "hosts=$HOSTS gpus=$NGPUS topo=${NCCL_TOPO_FILE:-detected} graph=${NCCL_GRAPH_FILE:-searched}"
grep -E "\[0\] NCCL INFO (Pattern|Channel 00/)" "$OUT/info.txt" | sed 's/.*NCCL INFO //'
