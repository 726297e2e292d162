#!/usr/bin/env bash
# Builds the NCCL net plugin (debug), copies it to target/debug/libnccl-net-weft.so, compiles
# the C harness (tests/plugin/harness.c) with cc -Wall -Wextra -Werror and runs it against the
# library, loading it as NCCL does (dlopen + dlsym of ncclNetPlugin_v11 .. v8), in one process
# and then in two (sender and receiver; the receiver killed mid-transfer). Prints
# "N passed, M failed" per mode and exits non-zero on a failure. HARNESS_VERBOSE=1 shows the plugin's
# log lines. Then both modes again over the mesh backend on sockets (WEFT_NET_BACKEND=mesh
# WEFT_MESH_TRANSPORT=socket, HARNESS_BACKEND=mesh-socket). Pass a path to test another build of the library instead:
#
#   scripts/plugin-test.sh
#   scripts/plugin-test.sh target/release/libnccl-net-weft.so
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-target}"
lib="${1:-}"
if [[ -z "$lib" ]]; then
    cargo build -p weft-nccl-net
    cp -f "$target_dir/debug/libnccl_net_weft.so" "$target_dir/debug/libnccl-net-weft.so"
    lib="$target_dir/debug/libnccl-net-weft.so"
fi
harness="$target_dir/debug/weft-plugin-harness"
mkdir -p "$(dirname "$harness")"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O1 -o "$harness" tests/plugin/harness.c -ldl
lib="$(realpath "$lib")"
timeout 600 "$harness" "$lib"
echo "-- two processes"
timeout 600 "$harness" "$lib" --two-process
echo "-- mesh backend over sockets, one process"
export HARNESS_BACKEND=mesh-socket WEFT_NET_BACKEND=mesh WEFT_MESH_TRANSPORT=socket
timeout 600 "$harness" "$lib"
echo "-- mesh backend, two processes"
timeout 600 "$harness" "$lib" --two-process
