#!/usr/bin/env bash
# Checks weft's nccl/include/nccl.h against NVIDIA's nccl.h (NCCL 2.28, from PyPI's
# nvidia-nccl-cu12 wheel, which scripts/install-deps unpacks into target/nccl-ref; NVIDIA's
# header is never committed): every enum value, struct size and field offset, the version
# macros and NCCL_CONFIG_INITIALIZER.
#
# How: tests/nccl-api/header_table.c, compiled with weft's header, prints one _Static_assert
# per fact; those are compiled with NVIDIA's header (CUDA's headers stubbed: no CUDA here).
#
#   scripts/nccl-header-check.sh          # exit 0: equal; 1: a difference; 77: no reference
#   NCCL_REF_INCLUDE=/usr/include scripts/nccl-header-check.sh   # another NVIDIA header
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/install-deps
source scripts/install-deps
target_dir="${CARGO_TARGET_DIR:-target}"
ref="${NCCL_REF_INCLUDE:-$(weft_nccl_ref_include "$target_dir")}"
if [ ! -f "$ref/nccl.h" ]; then
    echo "nccl-header-check: SKIPPED: NVIDIA's nccl.h not found in ${ref:-target/nccl-ref}; run scripts/install-deps (it fetches the $WEFT_NCCL_REF_WHEEL==$WEFT_NCCL_REF_VERSION wheel) or set NCCL_REF_INCLUDE" >&2
    exit 77
fi
cc="${CC:-cc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$cc" -std=c11 -Wall -Wextra -Werror -I nccl/include -o "$work/table" tests/nccl-api/header_table.c
"$work/table" >"$work/weft_expected.h"
"$cc" -std=c11 -Wall -Wextra -Werror -I tests/nccl-api/cuda-stub -I "$ref" -I "$work" \
    -o "$work/check" tests/nccl-api/header_check_main.c
"$work/check"
echo "($(grep -c _Static_assert "$work/weft_expected.h") facts checked against $ref/nccl.h)"
