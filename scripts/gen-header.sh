#!/usr/bin/env bash
# Regenerates capi/include/weft.h from the C ABI (capi/src) and weft-core's abi
# module with the pinned cbindgen. Usage: scripts/gen-header.sh [output path]
# (check-header.sh passes a temporary path to compare against the committed header).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/capi/include/weft.h}"
want="0.29.2"
cbindgen="${CBINDGEN:-cbindgen}"
if ! command -v "$cbindgen" >/dev/null 2>&1; then
    echo "gen-header: cbindgen not found; install the pinned version: cargo install cbindgen --version $want --locked" >&2
    exit 2
fi
have="$("$cbindgen" --version | awk '{print $2}')"
if [ "$have" != "$want" ]; then
    echo "gen-header: cbindgen $have found, but the header is generated with $want (other versions format it differently): cargo install cbindgen --version $want --locked" >&2
    exit 2
fi
mkdir -p "$(dirname "$out")"
cd "$root"
"$cbindgen" --quiet --config capi/cbindgen.toml --crate weft-capi --output "$out" capi
