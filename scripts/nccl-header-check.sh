#!/usr/bin/env bash
# Checks weft's nccl/include/nccl.h against NVIDIA's nccl.h (NCCL 2.28, from PyPI's
# nvidia-nccl-cu12 wheel, which scripts/install-deps unpacks into target/nccl-ref; NVIDIA's
# header is never committed): every enum value, struct size and field offset, the version
# macros and NCCL_CONFIG_INITIALIZER.
#
# How: tests/nccl-api/header_table.c, compiled with weft's header, prints one _Static_assert
# per fact; those are compiled with NVIDIA's header (CUDA's headers stubbed: no CUDA here).
# Then every function prototype of weft's header (taken from its preprocessed text) is
# repeated after NVIDIA's header: a return or parameter type that differs is a C
# "conflicting types" error.
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
# The prototypes: preprocessed (no comments, the CUDA stub for cudaStream_t), split at ';',
# every declaration of an nccl*/pnccl* function that is not a typedef.
"$cc" -E -P -I tests/nccl-api/cuda-stub nccl/include/nccl.h |
    awk 'BEGIN { RS = ";" } {
        gsub(/[ \t\n]+/, " "); sub(/^ /, "")
        if ($0 !~ /^typedef/ && $0 ~ /^[A-Za-z_][A-Za-z_0-9 *]*[ *]p?nccl[A-Za-z0-9_]+ ?\(/) print $0 ";"
    }' >"$work/weft_prototypes.h"
n=$(grep -c . "$work/weft_prototypes.h" || true)
[ "$n" -ge 30 ] || { echo "nccl-header-check: only $n prototypes taken from weft's nccl.h: the extraction is broken" >&2; exit 1; }
printf '#include <nccl.h>\n#include "weft_prototypes.h"\nint main(void) { return 0; }\n' >"$work/protos.c"
if ! "$cc" -std=c11 -Wall -Wextra -Werror -I tests/nccl-api/cuda-stub -I "$ref" -I "$work" \
    -o "$work/protos" "$work/protos.c" 2>"$work/protos.log"; then
    echo "nccl-header-check: weft's prototypes conflict with NVIDIA's nccl.h:" >&2
    grep -E "error|note" "$work/protos.log" | head -20 >&2
    exit 1
fi
echo "($n function prototypes of weft's nccl.h agree with $ref/nccl.h)"
