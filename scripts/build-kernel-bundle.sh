#!/usr/bin/env bash
# Compiles weft's CUDA kernels ahead of time into a kernel bundle (docs/cuda.md, "Kernel
# bundles"), so that libnccl.so.2 and `weft` built with it load their kernels at first use
# instead of compiling them with NVRTC there (seconds per module on a fresh machine).
#
#   scripts/build-kernel-bundle.sh                 # sm_80, sm_90, sm_100 -> <target>/weft-kernels.bundle
#   ARCHS="9.0" scripts/build-kernel-bundle.sh     # only these
#   BUNDLE=file scripts/build-kernel-bundle.sh     # write it there instead
# Then embed it: scripts/build-nccl.sh takes <target>/weft-kernels.bundle when it exists;
# any other build takes WEFT_KERNEL_BUNDLE=/absolute/path (cargo build); or name it at run
# time with WEFT_KERNEL_BUNDLE. Needs NVRTC here (scripts/install-deps fetches it), no GPU.
# The modules compiled are kept in the kernel cache ($WEFT_CACHE_DIR, else ~/.cache/weft/
# kernels), so a second run only packs. All 36 modules of one architecture take about 5
# minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
archs="${ARCHS:-8.0 9.0 10.0}"
target_dir="${CARGO_TARGET_DIR:-target}"
bundle="${BUNDLE:-$target_dir/weft-kernels.bundle}"
if [ -z "${WEFT_NVRTC:-}" ]; then
    eval "$(scripts/install-deps | grep '^export')"
fi
# The bundle's own build must not embed an older bundle (it would not change what is
# compiled, but would rebuild weft for nothing when the file changes).
WEFT_KERNEL_BUNDLE='' cargo build --release --bin weft
args=()
for a in $archs; do args+=(--arch "$a"); done
WEFT_KERNEL_BUNDLE='' "$target_dir/release/weft" kernels "${args[@]}" --bundle "$bundle"
