#!/usr/bin/env bash
# Fuzz every target in fuzz/fuzz_targets for $FUZZ_SECONDS seconds each (default 20),
# starting from the seed corpus in fuzz/corpus/<target>/. Exits non-zero if any target
# crashes (the input that did it is left in fuzz/artifacts/<target>/) or if a seed no
# longer parses. Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
#
#   FUZZ_SECONDS=60 scripts/fuzz-all.sh          # all targets, a minute each
#   scripts/fuzz-all.sh mesh_handle ib_qp_info   # only these
set -euo pipefail

seconds="${FUZZ_SECONDS:-20}"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"
cd "$(dirname "$0")/../fuzz"

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "fuzz-all: cargo-fuzz on toolchain '$toolchain' not found; install it with" \
        "'rustup toolchain install $toolchain && cargo install cargo-fuzz'" >&2
    exit 2
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

# The seeds must stay valid encodings, or the fuzzer starts from the magic check.
cargo "+$toolchain" test --quiet

failed=()
for t in "${targets[@]}"; do
    echo "fuzz-all: $t for ${seconds}s"
    if ! cargo "+$toolchain" fuzz run "$t" -- -max_total_time="$seconds"; then
        failed+=("$t")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz-all: FAILED: ${failed[*]} (inputs in fuzz/artifacts/<target>/; replay with" \
        "'cd fuzz && cargo +$toolchain fuzz run <target> <artifact>')" >&2
    exit 1
fi
echo "fuzz-all: ${#targets[@]} targets, ${seconds}s each, no crash"
