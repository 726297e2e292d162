#!/usr/bin/env bash
# Builds what scripts/gpu-test.sh runs on a GPU machine (which has no Rust toolchain) into
# `.gpu/` (git-ignored): the release `weft` binary and the GPU test binaries (runtime/tests/gpu.rs,
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
gpu_test=$(test_binary weft-runtime gpu)
cuda_test=$(test_binary weft-cuda device)
[ -n "$gpu_test" ] && [ -n "$cuda_test" ] || { echo "build-gpu-bundle: a GPU test binary was not built" >&2; exit 1; }
mkdir -p .gpu
cp target/release/weft .gpu/weft
cp "$gpu_test" .gpu/gpu-test
cp "$cuda_test" .gpu/cuda-test
# Debug info makes the binaries large (the tree that travels is limited to 64 MiB); the
# symbols stay, so that a backtrace of a stuck test (cuda-gdb on the GPU machine) names functions.
strip --strip-debug .gpu/weft .gpu/gpu-test .gpu/cuda-test 2>/dev/null || true
# The kernels compiled ahead of time for the GPU machines' architecture (sm_90; another with
# WEFT_BUNDLE_ARCH=8.0 ...), so that a fresh GPU machine loads them instead of spending
# minutes of its time in NVRTC. The GPU scripts point WEFT_CACHE_DIR here. Needs NVRTC here
# (scripts/install-deps fetches it); the GPU machine's NVRTC must have the same version
# (13.0 both, 2026-11), else it compiles again and says so at RUST_LOG=info.
# WEFT_BUNDLE_KERNELS=0 skips it (on this 2-core machine it takes tens of minutes of CPU;
# the GPU scripts then fill the cache there first, on every core: `weft kernels`).
if [ "${WEFT_BUNDLE_KERNELS:-1}" = 0 ]; then
    ls -la .gpu
    exit 0
fi
if [ -z "${WEFT_NVRTC:-}" ]; then
    eval "$(scripts/install-deps | grep '^export')"
fi
WEFT_CACHE_DIR="$ROOT/.gpu/kernel-cache" .gpu/weft kernels --arch "${WEFT_BUNDLE_ARCH:-9.0}"
ls -la .gpu
