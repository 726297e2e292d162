# The GPU path's NET connections (staged FIFOs, runtime/examples/staged_pair.rs) between VMs
# a and b, CPU threads playing both kernels: 2 connections x 100 steps of up to 128 KiB,
# every byte and tag checked, the sender's close taken as the normal end. Over the
# verbs backend on rxe0, or the mesh backend (STAGED_BACKEND=mesh).
# Built by scripts/vm-tests.sh (or: cargo build -p weft-runtime --example staged_pair).
# scripts/rdma-vms.sh --vms 2 -- sh tests/vm/staged-pair.sh
set -eu
bin=${WEFT_VM_BIN:-target/debug/examples}/staged_pair
backend=${STAGED_BACKEND:-ib}
export NCCL_IB_HCA==rxe0 WEFT_DEBUG=${WEFT_DEBUG:-WARN}
case "$WEFT_VM_INDEX" in
    0) exec timeout $((WEFT_VM_DEADLINE - 20)) "$bin" recv "$WEFT_VM_WORK" "$backend" ;;
    1) exec timeout $((WEFT_VM_DEADLINE - 20)) "$bin" send "$WEFT_VM_WORK" "$backend" ;;
esac
