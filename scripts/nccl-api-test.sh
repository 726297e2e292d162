#!/usr/bin/env bash
# weft's libnccl.so.2 without a GPU, as an NCCL user builds against it:
#  1. SONAME is libnccl.so.2 (readelf -d);
#  2. it exports (nm -D) every function nccl/include/nccl.h declares and every device-API
#     call of tests/nccl-api/device-api-exports.txt (NCCL declares those in nccl_device.h;
#     programs link them), and nothing else but pnccl* aliases of those: no weft_* or Rust
#     runtime symbol, no data (tests/tests/exports.rs checks the same rule from the ELF
#     .dynsym); and where NVIDIA's 2.28 headers are in target/nccl-ref (scripts/install-deps),
#     every host function of their nccl.h and nccl_device headers is exported too (PyTorch's
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

# A declaration starts a line: a return type, then the name and its "(".
declared="$(grep -E '^[A-Za-z_][A-Za-z0-9_ ]*[ *]+nccl[A-Za-z0-9_]*\(' nccl/include/nccl.h |
    grep -v '^typedef' | sed -E 's/^[^(]*[ *](nccl[A-Za-z0-9_]*)\(.*/\1/' | sort -u)"
device_api="$(grep -vE '^(#|[[:space:]]*$)' tests/nccl-api/device-api-exports.txt | sort -u)"
allowed="$(printf '%s\n%s\n' "$declared" "$device_api" | sort -u)"
# Every defined dynamic symbol, whatever its type (functions T, data D/B/R, weak W...).
defined="$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | sed 's/@.*//' | sort -u)"
exported="$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u)"
missing="$(comm -23 <(echo "$allowed") <(echo "$exported"))"
if [ -n "$missing" ]; then
    echo "FAIL: declared in nccl.h or tests/nccl-api/device-api-exports.txt but not exported by $lib:" $missing >&2
    exit 1
fi
# NCCL exports each function as pncclX too (for profilers): allowed, not required.
unexpected="$(comm -13 <({ echo "$allowed"; sed 's/^/p/' <<<"$allowed"; } | sort -u) <(echo "$defined"))"
if [ -n "$unexpected" ]; then
    echo "FAIL: $lib exports what is neither a function of nccl.h nor a device-API call" \
        "(tests/nccl-api/device-api-exports.txt), nor a pnccl alias of one:" $unexpected >&2
    exit 1
fi
echo "ok  all $(echo "$declared" | wc -l) functions of nccl.h exported, the $(echo "$device_api" | wc -l) device-API calls, and nothing else"
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
# NCCL_DEBUG_FILE takes the lines NCCL_DEBUG asks for (%h: host, %p: pid), stdout none.
rm -f "$out"/debug.*.log
CUDA_VISIBLE_DEVICES="" LD_LIBRARY_PATH="$out/lib" NCCL_DEBUG=WARN \
    NCCL_DEBUG_FILE="$out/debug.%h.%p.log" timeout 120 "$out/api_nogpu" >"$out/api_nogpu.out"
logs=("$out"/debug."$(hostname -s 2>/dev/null || hostname)".*.log)
if [ ! -f "${logs[0]}" ] || ! grep -q ' NCCL WARN ' "${logs[0]}" || grep -q ' NCCL WARN ' "$out/api_nogpu.out"; then
    echo "FAIL: NCCL_DEBUG_FILE: expected the WARN lines in $out/debug.<host>.<pid>.log and none on stdout" >&2
    ls "$out" >&2
    exit 1
fi
echo "ok  NCCL_DEBUG_FILE took $(grep -c ' NCCL WARN ' "${logs[0]}") WARN line(s) (${logs[0]##*/}), stdout none"
