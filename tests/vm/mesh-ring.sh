# The mesh backend on every link of the triangle at once (net/examples/ib_pair.rs, ring mode):
# VM a sends to b over a-b, b to c over b-c, c to a over a-c, each receiving from the other
# neighbour at the same time; 1 B to 16 MiB and grouped receives with tags, every byte
# checked. No routes are set between the subnets here, so a connection that did not take its
# direct subnet could not even connect.
# Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 3 -- sh tests/vm/mesh-ring.sh
set -eu
exec "${WEFT_VM_BIN:-target/debug/examples}/ib_pair" ring "$WEFT_VM_WORK" "$WEFT_VM_INDEX" "$WEFT_VM_COUNT"
