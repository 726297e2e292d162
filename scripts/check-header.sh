#!/usr/bin/env bash
# Fails when a committed header (kernels/include/weft_abi.h, capi/include/weft.h) differs from
# what the pinned cbindgen generates from the current sources (CI runs this).
# Fix: scripts/gen-header.sh, commit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/gen-header.sh" "$tmp"
stale=0
for committed in kernels/include/weft_abi.h capi/include/weft.h; do
    if ! diff -u "$root/$committed" "$tmp/$(basename "$committed")"; then
        echo "check-header: $committed is stale; run scripts/gen-header.sh and commit the result" >&2
        stale=1
    fi
done
[ "$stale" = 0 ] || exit 1
echo "check-header: kernels/include/weft_abi.h and capi/include/weft.h are up to date"
