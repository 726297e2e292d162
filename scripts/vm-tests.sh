#!/usr/bin/env bash
# Every Soft-RoCE VM test (docs/rdma-vms.md): builds what the VMs run (debug), then boots VMs
# with scripts/rdma-vms.sh once per test and prints a table. Exit status 1 if any failed.
#
#   scripts/vm-tests.sh              # all
#   scripts/vm-tests.sh ib-pair perf-mesh   # some, by name (see the list below)
#
# On the 2-core build machine the whole set takes about 8 minutes (TCG, 1 vCPU per VM).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-target}"

# name | VMs | deadline (s) | command run in every VM | more scripts/rdma-vms.sh options
tests=(
    "pingpong|2|300|sh tests/vm/pingpong.sh"
    "ib-pair|2|400|sh tests/vm/ib-pair.sh"
    "ib-flush|2|400|WEFT_IB_FORCE_FLUSH=1 sh tests/vm/ib-pair.sh"
    "staged-ib|2|400|sh tests/vm/staged-pair.sh"
    "staged-mesh|2|400|STAGED_BACKEND=mesh sh tests/vm/staged-pair.sh"
    "plugin-ib|2|400|HARNESS_BACKEND=ib sh tests/vm/plugin-harness.sh"
    "plugin-mesh|2|400|HARNESS_BACKEND=mesh sh tests/vm/plugin-harness.sh"
    "plugin-ib-links|3|500|HARNESS_BACKEND=ib sh tests/vm/plugin-links.sh"
    "plugin-mesh-links|3|500|HARNESS_BACKEND=mesh sh tests/vm/plugin-links.sh"
    "mesh-ring|3|500|sh tests/vm/mesh-ring.sh"
    "mesh-socket|3|500|sh tests/vm/mesh-socket.sh"
    "mesh-rails|2|500|sh tests/vm/mesh-rails.sh|--ab-links 2"
    "perf-ib|2|400|WEFT_VM_PERF_TRANSPORT=ib sh tests/vm/perf.sh"
    "perf-mesh|3|500|WEFT_VM_PERF_TRANSPORT=mesh sh tests/vm/perf.sh"
    "perf-mesh-socket|3|500|WEFT_VM_PERF_TRANSPORT=mesh WEFT_VM_NO_RDMA=2 sh tests/vm/perf.sh"
    "fault-link-down|2|300|FAULT=link-down sh tests/vm/faults.sh"
    "fault-vm-killed|2|300|FAULT=vm-killed sh tests/vm/faults.sh"
    "fault-wrong-gid|2|300|FAULT=wrong-gid sh tests/vm/faults.sh"
    "fault-stray|2|300|FAULT=stray sh tests/vm/faults.sh"
    "fault-no-subnet|3|300|FAULT=no-subnet sh tests/vm/faults.sh"
    "fault-stale-nonce|2|300|FAULT=stale-nonce sh tests/vm/faults.sh"
)

echo "== building what the VMs run"
cargo build -p weft-net --example ib_pair --example ib_faults
cargo build -p weft-runtime --example staged_pair
cargo build -p weft-cli --bin weft
cargo build -p weft-nccl-net
cp -f "$target_dir/debug/libnccl_net_weft.so" "$target_dir/debug/libnccl-net-weft.so"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O1 -o "$target_dir/debug/weft-plugin-harness" \
    tests/plugin/harness.c -ldl

run_root="$target_dir/vm/tests-$(date -u +%Y%m%dT%H%M%S)"
results=()
failed=0
for t in "${tests[@]}"; do
    IFS='|' read -r name vms deadline command options <<< "$t"
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
    echo "== $name ($vms VMs)"
    start=$(date +%s)
    status=FAILED
    # Up to five runs, a new one only when a guest kernel crashed (exit 3, rdma-vms.sh says
    # which VM). Soft-RoCE in the guests' kernel (Debian's 6.12) panics in its rxe_wq work
    # (rxe_init_packet, rxe_xmit_packet, prepare_ack_packet) in about one test run in ten:
    # on 2026-11-27 two CI runs had two and three such crashes in 19 tests, one test twice
    # in a row; on 2026-11-28 fault-vm-killed crashed three times in a row in CI (it passed
    # on the next try here). A user program cannot legitimately panic a kernel, so these
    # are not weft's failures; any other failure is final at once.
    for attempt in 1 2 3 4 5; do
        rc=0
        # shellcheck disable=SC2086 # the options are words
        scripts/rdma-vms.sh --vms "$vms" ${options:-} --deadline "$deadline" \
            --work "$run_root/$name-$attempt" -- "$command" || rc=$?
        if [ "$rc" = 0 ]; then
            status=ok
            [ "$attempt" -gt 1 ] && status="ok (run $attempt: the earlier hit a guest kernel crash)"
            break
        fi
        [ "$rc" = 3 ] || break
        [ "$attempt" -lt 5 ] && echo "== $name: a guest kernel crashed; running it again"
    done
    [ "$status" = FAILED ] && failed=1
    results+=("$(printf '%-18s %4d s  %s' "$name" $(($(date +%s) - start)) "$status")")
done
echo
echo "== VM tests (logs in $run_root)"
printf '%s\n' "${results[@]}"
exit "$failed"
