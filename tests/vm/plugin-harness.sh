# The NCCL plugin harness (tests/plugin/harness.c) over the verbs backend in VM a, on rxe0
# (HARNESS_BACKEND=ib, the default) or over the mesh backend (HARNESS_BACKEND=mesh): one
# process (every check of the harness) and two processes (sender and receiver, the receiver
# killed mid-transfer). Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 2 -- sh tests/vm/plugin-harness.sh
set -eu
[ "$WEFT_VM_INDEX" = 0 ] || exit 0
export HARNESS_BACKEND=${HARNESS_BACKEND:-ib}
export WEFT_NET_BACKEND=$HARNESS_BACKEND NCCL_IB_HCA==rxe0
lib=$PWD/target/debug/libnccl-net-weft.so
timeout 300 target/debug/weft-plugin-harness "$lib"
echo "-- two processes"
timeout 300 target/debug/weft-plugin-harness "$lib" --two-process
