#!/usr/bin/env bash
# Compares weft's topology detection with NCCL's on a GPU machine: NCCL's dumps come from
# scripts/nccl_topo_crosscheck.sh (PyTorch + NCCL), weft's from the weft_topo example
# (built here with `cargo build --release -p weft-driver --example weft_topo`, carried as
# target/release/examples/weft_topo). Builds nothing. Checks first (topology XML equal but
# for host_hash, ring/tree lines equal), then times `weft topo`, then prints a short table.
#
#   scripts/topo_detect_check.sh [WEFT_TOPO_BINARY]
set -euo pipefail
BIN=${1:-target/release/examples/weft_topo}
OUT=${OUT:-$PWD/topo-detect-check}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="$OUT/nccl" bash "$(dirname "$0")/nccl_topo_crosscheck.sh" 1 > "$OUT/nccl-summary.txt"
"$BIN" --dump-topo "$OUT/weft-topo.xml" --dump-graph "$OUT/weft-graph.xml" > "$OUT/weft.txt" 2> "$OUT/weft-notes.txt"
strip() { sed -E 's/ host_hash="[^"]*"//' "$1"; }
topo=FAIL; strip "$OUT/nccl/topo.xml" > "$OUT/a.xml"; strip "$OUT/weft-topo.xml" > "$OUT/b.xml"
diff -u "$OUT/a.xml" "$OUT/b.xml" > "$OUT/topo.diff" && topo=OK
graph=FAIL; diff -u "$OUT/nccl/graph.xml" "$OUT/weft-graph.xml" > "$OUT/graph.diff" && graph=OK
grep -E "\[0\] NCCL INFO (Pattern|Channel [0-9]+/[0-9]+ :)" "$OUT/nccl/info.txt" | sed 's/.*NCCL INFO //' > "$OUT/nccl-lines.txt"
grep -E "^(Pattern [0-9]|Channel [0-9]+/[0-9]+ :)" "$OUT/weft.txt" | grep -v "^Pattern 5" > "$OUT/weft-lines.txt"
lines=FAIL; diff -u "$OUT/nccl-lines.txt" "$OUT/weft-lines.txt" > "$OUT/lines.diff" && lines=OK
start=$(date +%s%N); for _ in 1 2 3 4 5; do "$BIN" > /dev/null 2>&1; done; end=$(date +%s%N)
ms=$(( (end - start) / 5000000 ))
sed -n '/^GPUs/,/^Search/p' "$OUT/weft.txt" | head -40
echo
echo "| check | result |"
echo "| --- | --- |"
echo "| topology XML vs NCCL_TOPO_DUMP_FILE (host_hash aside) | $topo (topo.diff) |"
echo "| graph XML vs NCCL_GRAPH_DUMP_FILE | $graph (graph.diff) |"
echo "| Pattern/Channel lines vs NCCL_DEBUG=INFO | $lines (lines.diff) |"
echo "| weft topo wall time (detect + search, mean of 5) | ${ms} ms |"
