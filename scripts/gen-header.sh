#!/usr/bin/env bash
# Regenerates weft's two C headers with the pinned cbindgen:
#   kernels/include/weft_abi.h  the structs and constants weft shares with its CUDA kernels
#                            (weft-core's abi module, under the C names of kernels/src/abi.rs);
#                            every kernel source includes it
#   capi/include/weft.h      the C ABI of libweft (capi/src), which includes weft_abi.h
# Usage: scripts/gen-header.sh [output directory] (check-header.sh passes a temporary one;
# without it the committed files are rewritten).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
want="0.29.2"
cbindgen="${CBINDGEN:-cbindgen}"
if ! command -v "$cbindgen" >/dev/null 2>&1; then
    echo "gen-header: cbindgen not found; install the pinned version: cargo install cbindgen --version $want --locked" >&2
    exit 2
fi
have="$("$cbindgen" --version | awk '{print $2}')"
if [ "$have" != "$want" ]; then
    echo "gen-header: cbindgen $have found, but the headers are generated with $want (other versions format them differently): cargo install cbindgen --version $want --locked" >&2
    exit 2
fi
abi_out="$root/kernels/include/weft_abi.h"
capi_out="$root/capi/include/weft.h"
if [ $# -ge 1 ]; then
    mkdir -p "$1"
    abi_out="$1/weft_abi.h"
    capi_out="$1/weft.h"
fi
cd "$root"
"$cbindgen" --quiet --config kernels/cbindgen.toml --crate weft-kernels --output "$abi_out" kernels
"$cbindgen" --quiet --config capi/cbindgen.toml --crate weft-capi --output "$capi_out" capi
