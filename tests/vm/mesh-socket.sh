# The mesh backend over sockets where a host has no RDMA device: VM c deletes its rxe devices,
# then ib_pair's ring runs over every link of the triangle at once (a sends to b, b to c, c to
# a, each receiving from its other neighbour; 1 B to 16 MiB and grouped receives with tags,
# every byte checked). With WEFT_MESH_TRANSPORT unset (auto), a-b goes over verbs (RDMA ports
# at both ends) and the links to c over sockets; each sender prints its rails and this script
# checks the transport. No routes between the subnets: each connection takes its direct one.
# Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 3 -- sh tests/vm/mesh-socket.sh
set -eu
bin=${WEFT_VM_BIN:-target/debug/examples}/ib_pair
if [ "$WEFT_VM_INDEX" = 2 ]; then
    rdma link delete rxe0
    rdma link delete rxe1
fi
out="$WEFT_VM_WORK/ring-$WEFT_VM_INDEX.out"
"$bin" ring "$WEFT_VM_WORK" "$WEFT_VM_INDEX" "$WEFT_VM_COUNT" > "$out" 2>&1 || { cat "$out"; exit 1; }
cat "$out"
case "$WEFT_VM_INDEX" in
    0) want="over verbs" ;;
    *) want="over sockets" ;;
esac
grep -q "^connected to .*: rail 0: .* $want from " "$out" || {
    echo "mesh-socket: VM $WEFT_VM_INDEX's connection did not go $want" >&2
    exit 1
}
