#!/usr/bin/env bash
# Builds the NCCL net plugin in release mode and gives it the name NCCL looks for:
#   target/release/libnccl-net-weft.so
# and the C test harness next to it (target/release/weft-plugin-harness), and the socket
# backend's NCCL-pattern benchmark (target/release/examples/nccl_pattern_bw).
# Use it with NCCL_NET_PLUGIN=$PWD/target/release/libnccl-net-weft.so NCCL_NET=weft, or put
# target/release on LD_LIBRARY_PATH and set NCCL_NET_PLUGIN=weft.
#
#   scripts/build-plugin.sh            # build, copy, list the exported ncclNetPlugin_v* symbols
#   STRIP=1 scripts/build-plugin.sh    # also strip debug info (smaller file to carry)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p weft-nccl-net
target_dir="${CARGO_TARGET_DIR:-target}"
src="$target_dir/release/libnccl_net_weft.so"
dst="$target_dir/release/libnccl-net-weft.so"
cp -f "$src" "$dst"
if [[ "${STRIP:-0}" == 1 ]]; then
    strip --strip-debug "$dst"
fi
echo "built $dst ($(du -h "$dst" | cut -f1))"
if command -v nm >/dev/null; then
    nm -D --defined-only "$dst" | awk '/ncclNetPlugin_v/ {print "  exports " $3}'
fi
# The C harness too: scripts/gpu-plugin-allreduce.sh runs its --bench mode (the plugin alone,
# NCCL's traffic pattern, no GPU) when it is carried along.
harness="$target_dir/release/weft-plugin-harness"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O2 -o "$harness" tests/plugin/harness.c -ldl
echo "built $harness"
# The socket backend under NCCL's proxy pattern, run by scripts/gpu-plugin-allreduce.sh too.
cargo build --release -p weft-runtime --example nccl_pattern_bw
if [[ "${STRIP:-0}" == 1 ]]; then
    strip --strip-debug "$target_dir/release/examples/nccl_pattern_bw"
fi
echo "built $target_dir/release/examples/nccl_pattern_bw"
