#!/usr/bin/env bash
# Builds libweft.a, compiles tests/cpp/client.cpp against the committed capi/include/weft.h (and the weft_abi.h it includes, kernels/include)
# (and checks the header as C11), links, and runs it. Usage: scripts/cpp-test.sh [--release]
# The same steps run under `cargo test` from tests/tests/cpp_client.rs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
profile=debug
cargo_flags=()
if [ "${1:-}" = "--release" ]; then
    profile=release
    cargo_flags=(--release)
fi
cd "$root"
cargo build -p weft-capi --lib "${cargo_flags[@]}"
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
lib="$target_dir/$profile/libweft.a"
out="$target_dir/$profile/cpp-client"
mkdir -p "$out"
gcc -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I capi/include -I kernels/include tests/cpp/header_c.c
g++ -std=c++17 -Wall -Wextra -Werror -I capi/include -I kernels/include tests/cpp/client.cpp "$lib" \
    -lpthread -ldl -lm -o "$out/client"
"$out/client"
