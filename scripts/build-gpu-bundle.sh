#!/usr/bin/env bash
# Builds what scripts/gpu-test.sh runs on a GPU machine (which has no Rust toolchain) into
# `.gpu/` (git-ignored): the release `weft` binary and the GPU test binary (driver/tests/gpu.rs).
# Then carry `.gpu` (and `third_party` for nccl-tests) with the device tool.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release --bin weft
test_bin=$(cargo test --release -p weft-driver --test gpu --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "gpu" and m.get("executable"):
        print(m["executable"])')
[ -n "$test_bin" ] || { echo "build-gpu-bundle: the gpu test binary was not built" >&2; exit 1; }
mkdir -p .gpu
cp target/release/weft .gpu/weft
cp "$test_bin" .gpu/gpu-test
# Debug info makes the binaries large; the tree that travels is limited to 64 MiB.
strip .gpu/weft .gpu/gpu-test 2>/dev/null || true
ls -la .gpu
