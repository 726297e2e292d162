#!/usr/bin/env bash
# Builds weft's libnccl.so.2 (crate weft-nccl) and lays it out as an NCCL install:
#   <target>/nccl/lib/libnccl.so.2, lib/libnccl.so -> libnccl.so.2, include/nccl.h
# Build against it with -I<target>/nccl/include -L<target>/nccl/lib -lnccl; run programs
# built for NCCL on weft with LD_LIBRARY_PATH=<target>/nccl/lib (docs/nccl-api.md).
#
#   scripts/build-nccl.sh                  # release build
#   PROFILE=debug scripts/build-nccl.sh    # the debug build (what the tests use)
#   STRIP=1 scripts/build-nccl.sh          # strip debug info (smaller file to carry)
#   OUT=dir scripts/build-nccl.sh          # lay it out in dir instead
#   WEFT_KERNEL_BUNDLE=file scripts/build-nccl.sh   # embed this kernel bundle; by default
#                                          # <target>/weft-kernels.bundle when it exists
#                                          # (scripts/build-kernel-bundle.sh), none else
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
target_dir="${CARGO_TARGET_DIR:-target}"
if [ -z "${WEFT_KERNEL_BUNDLE+set}" ] && [ -f "$target_dir/weft-kernels.bundle" ]; then
    WEFT_KERNEL_BUNDLE="$(realpath "$target_dir/weft-kernels.bundle")"
    export WEFT_KERNEL_BUNDLE
fi
echo "kernel bundle embedded: ${WEFT_KERNEL_BUNDLE:-none (kernels compile with NVRTC at first use)}"
if [ "$profile" = release ]; then
    cargo build --release -p weft-nccl
else
    cargo build -p weft-nccl
fi
out="${OUT:-$target_dir/nccl}"
mkdir -p "$out/lib" "$out/include"
cp -f "$target_dir/$profile/libnccl.so" "$out/lib/libnccl.so.2"
ln -sfn libnccl.so.2 "$out/lib/libnccl.so"
cp -f nccl/include/nccl.h "$out/include/nccl.h"
if [[ "${STRIP:-0}" == 1 ]]; then
    strip --strip-debug "$out/lib/libnccl.so.2"
fi
soname="$(readelf -d "$out/lib/libnccl.so.2" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
echo "built $out/lib/libnccl.so.2 (SONAME $soname, $(du -h "$out/lib/libnccl.so.2" | cut -f1)) and $out/include/nccl.h"
