#!/usr/bin/env bash
# Fails when the committed capi/include/weft.h differs from what the pinned cbindgen
# generates from the current sources (CI runs this). Fix: scripts/gen-header.sh, commit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/scripts/gen-header.sh" "$tmp/weft.h"
if ! diff -u "$root/capi/include/weft.h" "$tmp/weft.h"; then
    echo "check-header: capi/include/weft.h is stale; run scripts/gen-header.sh and commit the result" >&2
    exit 1
fi
echo "check-header: capi/include/weft.h is up to date"
