#!/usr/bin/env bash
# First use on a fresh machine (issue 25, item 0): the time from PyTorch's
# init_process_group to the end of its first all_reduce, then the first all_reduce of each
# further element type (scripts/gpu_cold_start.py, every element checked), one process
# per GPU, in one call for:
#   nccl          NVIDIA's NCCL (PyTorch's)
#   weft-nvrtc    weft's libnccl with an empty kernel cache and no bundle: NVRTC compiles
#   weft-bundle   weft's libnccl with an empty kernel cache and the kernel bundle (built in,
#                 or $BUNDLE named by WEFT_KERNEL_BUNDLE): no NVRTC
#   weft-warm     weft's libnccl with the cache weft-nvrtc filled
#
#   scripts/gpu-cold-start.sh
# Environment: GPUS (default 2), CONFIGS (default: all four), BUNDLE (a bundle file for
#   weft-bundle; default: the one built into the library), WEFT_LIB
#   (.gpu/nccl/lib/libnccl.so.2), OUT (logs).
# Builds nothing: scripts/build-nccl-bundle.sh (and scripts/build-kernel-bundle.sh) here,
# then carry .gpu.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset WEFT_NVLS WEFT_CACHE_DIR WEFT_KERNEL_BUNDLE
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
gpus="${GPUS:-2}"
configs="${CONFIGS:-nccl weft-nvrtc weft-bundle weft-warm}"
lib="$(realpath "${WEFT_LIB:-.gpu/nccl/lib/libnccl.so.2}")"
out="${OUT:-$(mktemp -d /tmp/weft-cold-start.XXXXXX)}"
mkdir -p "$out"
cold=$(mktemp -d /tmp/weft-cold-cache.XXXXXX)
status=0
echo "library: $(stat -c %s "$lib") bytes weft; NVIDIA's: $(python3 -c 'import nvidia.nccl, os, glob; print(" ".join(str(os.path.getsize(f)) for f in glob.glob(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so*"))))' 2>/dev/null) bytes"
for c in $configs; do
    envs=()
    case "$c" in
        nccl) ;;
        weft-nvrtc) envs=(LD_PRELOAD="$lib" WEFT_CACHE_DIR="$cold/nvrtc" WEFT_KERNEL_BUNDLE=0) ;;
        weft-bundle) envs=(LD_PRELOAD="$lib" WEFT_CACHE_DIR="$cold/bundle" ${BUNDLE:+WEFT_KERNEL_BUNDLE=$(realpath "$BUNDLE")}) ;;
        weft-warm) envs=(LD_PRELOAD="$lib" WEFT_CACHE_DIR="$cold/nvrtc" WEFT_KERNEL_BUNDLE=0) ;;
        *) echo "unknown configuration $c" >&2; exit 2 ;;
    esac
    env "${envs[@]}" NCCL_DEBUG=WARN timeout 240 torchrun --standalone --nproc_per_node="$gpus" \
        scripts/gpu_cold_start.py > "$out/$c.log" 2>&1
    rc=$?
    line=$(grep '^{"init_first"' "$out/$c.log" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "$c: failed (exit $rc)"; tail -15 "$out/$c.log"; status=1; continue
    fi
    echo "$c $line" >> "$out/results.txt"
    python3 - "$c" "$line" <<'PY'
import json, sys
name, d = sys.argv[1], json.loads(sys.argv[2])
each = ", ".join(f"{k} {v:.3f} s" for k, v in d["types"].items())
print(f"{name:12} init + first all_reduce {d['init_first']:7.3f} s; first of each further type: {each}")
PY
done
rm -rf "$cold"
exit $status
