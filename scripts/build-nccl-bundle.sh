#!/usr/bin/env bash
# Builds what scripts/nccl-tests.sh runs on a GPU machine (no Rust toolchain there) into
# `.gpu/` (git-ignored): weft's libnccl.so.2 with nccl.h (.gpu/nccl/{lib,include}, release,
# stripped) and the libnccl GPU test binary (nccl/tests/gpu.rs) as .gpu/nccl-gpu-test.
# Then, through the device tool (kind nvidia-h200-x2):
#   run carry=[".gpu", "third_party"] command="scripts/nccl-tests.sh"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=.gpu/nccl STRIP=1 scripts/build-nccl.sh
gpu_test=$(cargo test --release -p weft-nccl --test gpu --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "gpu" and m.get("executable"):
        print(m["executable"])')
[ -n "$gpu_test" ] || { echo "build-nccl-bundle: the libnccl GPU test was not built" >&2; exit 1; }
cp "$gpu_test" .gpu/nccl-gpu-test
strip --strip-debug .gpu/nccl-gpu-test 2>/dev/null || true
ls -la .gpu/nccl/lib .gpu/nccl-gpu-test
