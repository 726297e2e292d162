# IbNet between VMs a and b over rxe0 (link a-b): every byte of 1 B to 16 MiB messages and of
# grouped receives checked, over 1 and 3 QPs per connection (net/examples/ib_pair.rs).
# Built by scripts/vm-tests.sh (or: cargo build -p weft-net --example ib_pair).
# scripts/rdma-vms.sh --vms 2 -- sh tests/vm/ib-pair.sh
# With WEFT_IB_FORCE_FLUSH=1 (test only; vm-tests.sh's ib-flush) the receiver flushes every
# receive through the loopback RDMA READ as if it were GPU memory, checks the bytes the READ
# fetched, and ends with a flush outside its registration that must fail, saying so.
set -eu
bin=${WEFT_VM_BIN:-target/debug/examples}/ib_pair
export NCCL_IB_HCA==rxe0 WEFT_DEBUG=${WEFT_DEBUG:-WARN}
case "$WEFT_VM_INDEX" in
    0) exec "$bin" recv "$WEFT_VM_WORK" ;;
    1) exec "$bin" send "$WEFT_VM_WORK" ;;
esac
