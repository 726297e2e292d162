# Several rails: VMs a and b joined by two links (a-b 192.168.101.0/24 and ab2
# 192.168.103.0/24: scripts/rdma-vms.sh --ab-links 2), an RDMA port on each. The mesh takes
# both (local NIC, peer address) pairs as rails of one connection and cuts every message over
# them; ib_pair's ring of two hosts (each sends to the other and receives from it at once:
# 1 B to 16 MiB, grouped receives with tags, every byte checked) runs over verbs rails, then
# over socket rails (WEFT_MESH_TRANSPORT=socket). This script checks that both rails were used.
# Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 2 --ab-links 2 -- sh tests/vm/mesh-rails.sh
set -eu
bin=${WEFT_VM_BIN:-target/debug/examples}/ib_pair
for transport in ib socket; do
    dir="$WEFT_VM_WORK/$transport"
    mkdir -p "$dir"
    out="$dir/ring-$WEFT_VM_INDEX.out"
    echo "-- WEFT_MESH_TRANSPORT=$transport"
    WEFT_MESH_TRANSPORT=$transport "$bin" ring "$dir" "$WEFT_VM_INDEX" 2 > "$out" 2>&1 || { cat "$out"; exit 1; }
    cat "$out"
    how="over verbs"
    [ "$transport" = socket ] && how="over sockets"
    grep -q "^connected to .*: rail 0: .* $how from .*; rail 1: .* $how from " "$out" || {
        echo "mesh-rails: VM $WEFT_VM_INDEX's connection did not take two rails $how" >&2
        exit 1
    }
done
