#!/usr/bin/env bash
# Builds what scripts/gpu-test.sh runs on a GPU machine (which has no Rust toolchain) into
# `.gpu/` (git-ignored): the release `weft` binary and the GPU test binaries (driver/tests/gpu.rs,
# cuda/tests/device.rs).
# Then carry `.gpu` (and `third_party` for nccl-tests) with the device tool.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release --bin weft
# The path of the test binary `name` of package `pkg`, built in release.
test_binary() {
    cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$2"
}
gpu_test=$(test_binary weft-driver gpu)
cuda_test=$(test_binary weft-cuda device)
[ -n "$gpu_test" ] && [ -n "$cuda_test" ] || { echo "build-gpu-bundle: a GPU test binary was not built" >&2; exit 1; }
mkdir -p .gpu
cp target/release/weft .gpu/weft
cp "$gpu_test" .gpu/gpu-test
cp "$cuda_test" .gpu/cuda-test
# Debug info makes the binaries large (the tree that travels is limited to 64 MiB); the
# symbols stay, so that a backtrace of a stuck test (cuda-gdb on the GPU machine) names functions.
strip --strip-debug .gpu/weft .gpu/gpu-test .gpu/cuda-test 2>/dev/null || true
ls -la .gpu
