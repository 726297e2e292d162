#!/usr/bin/env bash
# weft's libnccl.so.2 without a GPU, as an NCCL user builds against it:
#  1. SONAME is libnccl.so.2 (readelf -d);
#  2. every function nccl/include/nccl.h declares is exported (nm -D), nothing else named
#     nccl* but the device-API calls programs link (NCCL declares them in nccl_device.h);
#     and where NVIDIA's 2.28 headers are in target/nccl-ref (scripts/install-deps), every
#     host function of their nccl.h and nccl_device headers is exported too (PyTorch's
#     libtorch_cuda.so does not load without ncclDevCommDestroy);
#  3. tests/nccl-api/api_nogpu.c, compiled with that header and linked with -lnccl, passes
#     (versions, error texts, unique ids, argument checks, no-GPU errors, groups, refusals).
# `cargo test` runs it (tests/tests/nccl_api.rs). PROFILE=release tests the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-target}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
OUT="$out" PROFILE="${PROFILE:-debug}" scripts/build-nccl.sh >/dev/null
lib="$out/lib/libnccl.so.2"

soname="$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
if [ "$soname" != libnccl.so.2 ]; then
    echo "FAIL: SONAME of $lib is '$soname', not libnccl.so.2" >&2
    exit 1
fi
echo "ok  SONAME libnccl.so.2"

declared="$(grep -oE '^(ncclResult_t|const char|void) *\**nccl[A-Za-z]+\(' nccl/include/nccl.h |
    sed -E 's/.*[ *](nccl[A-Za-z]+)\($/\1/' | sort -u)"
exported="$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | grep -E '^nccl' | sort -u)"
missing="$(comm -23 <(echo "$declared") <(echo "$exported"))"
if [ -n "$missing" ]; then
    echo "FAIL: declared in nccl.h but not exported by $lib:" $missing >&2
    exit 1
fi
# Exported for programs that link them, declared by NCCL's nccl_device.h only.
device_api="ncclDevCommCreate ncclDevCommDestroy ncclLsaBarrierCreateRequirement ncclTeamWorld
    ncclTeamLsa ncclTeamRail ncclTeamRankToWorld ncclTeamRankToLsa ncclLLA2ACalcSlots
    ncclLLA2ACreateRequirement"
undeclared="$(comm -13 <({ echo "$declared"; printf '%s\n' $device_api; } | sort -u) <(echo "$exported"))"
if [ -n "$undeclared" ]; then
    echo "FAIL: exported by $lib but not declared in nccl.h:" $undeclared >&2
    exit 1
fi
echo "ok  all $(echo "$declared" | wc -l) functions of nccl.h exported, and beside them only the device-API calls"
ref="$(ls -d target/nccl-ref/*/nvidia/nccl/include 2>/dev/null | head -1)"
if [ -n "$ref" ]; then
    # nccl.h's functions, and every NCCL_EXTERN_C __host__ function of the device headers,
    # whatever it returns (ncclTeam_t, int, ...).
    theirs="$({
        grep -oE '(ncclResult_t|const char *\*|void) +nccl[A-Za-z0-9_]+ *\(' "$ref/nccl.h"
        cat "$ref"/nccl_device.h "$ref"/nccl_device/*.h 2>/dev/null | grep -E 'NCCL_EXTERN_C +__host__'
    } | grep -oE 'nccl[A-Za-z0-9_]+ *\(' | tr -d ' (' | sort -u)"
    absent="$(comm -23 <(echo "$theirs") <(echo "$exported"))"
    if [ -n "$absent" ]; then
        echo "FAIL: NVIDIA's NCCL 2.28 headers ($ref) declare functions $lib does not export:" $absent >&2
        exit 1
    fi
    echo "ok  every host function of NVIDIA's nccl.h and nccl_device headers exported ($(echo "$theirs" | wc -l))"
elif [ "${WEFT_REQUIRE_NCCL_REF:-0}" = 1 ]; then
    echo "FAIL: WEFT_REQUIRE_NCCL_REF=1 but NVIDIA's headers are not in target/nccl-ref (scripts/install-deps)" >&2
    exit 1
else
    echo "skipped: NVIDIA's NCCL headers are not in target/nccl-ref (scripts/install-deps fetches them)"
fi

"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -I "$out/include" -o "$out/api_nogpu" \
    tests/nccl-api/api_nogpu.c -L "$out/lib" -lnccl
# The program must load weft's library through the SONAME, as any NCCL program does.
needed="$(readelf -d "$out/api_nogpu" | sed -n 's/.*Shared library: \[\(libnccl[^]]*\)\]/\1/p')"
if [ "$needed" != libnccl.so.2 ]; then
    echo "FAIL: the test program needs '$needed', not libnccl.so.2" >&2
    exit 1
fi
echo "ok  a program linked with -lnccl needs libnccl.so.2"
# No GPU here: hide one the machine might have, so the no-GPU checks mean what they say.
CUDA_VISIBLE_DEVICES="" LD_LIBRARY_PATH="$out/lib" timeout 120 "$out/api_nogpu"
