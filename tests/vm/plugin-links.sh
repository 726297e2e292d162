# The NCCL plugin harness (tests/plugin/harness.c --peer) on every link of the triangle at
# once, over the verbs backend (HARNESS_BACKEND=ib: each process restricted to its link's rxe
# device with NCCL_IB_HCA) or the mesh backend (HARNESS_BACKEND=mesh: the mesh picks the link
# by subnet): VM a sends to b over a-b, b to c over b-c, c to a over a-c, each VM receiving
# from its other neighbour in a second process; 1 B to 16 MiB (odd sizes) and a grouped
# receive of 4 with shuffled tags, every byte and size checked by the receiver. The handles
# travel through the work folder. Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 3 -- "HARNESS_BACKEND=mesh sh tests/vm/plugin-links.sh"
set -eu
. tests/vm/lib.sh
export HARNESS_BACKEND=${HARNESS_BACKEND:-ib}
export WEFT_NET_BACKEND=$HARNESS_BACKEND
lib=$PWD/target/debug/libnccl-net-weft.so
harness=target/debug/weft-plugin-harness
me=$WEFT_VM_INDEX
next=$(( (me + 1) % WEFT_VM_COUNT ))
prev=$(( (me + WEFT_VM_COUNT - 1) % WEFT_VM_COUNT ))
# The link between two VMs, by name (ab, ac, bc).
link() { printf '%s\n' "$1 $2" | awk '{n = "abc"; x = substr(n, $1 + 1, 1); y = substr(n, $2 + 1, 1); print (x < y) ? x y : y x}'; }
in_link=$(link "$prev" "$me")
out_link=$(link "$me" "$next")
mkdir -p "$WEFT_VM_WORK/link-$me"
hca() { [ "$HARNESS_BACKEND" = ib ] && echo "=$(vm_rxe "$me" "$1")" || echo ""; }
NCCL_IB_HCA=$(hca "$in_link") timeout 240 "$harness" "$lib" --peer "$WEFT_VM_WORK/link-$me" recv \
    > "$WEFT_VM_WORK/recv-$me.out" 2>&1 &
recv=$!
rc=0
NCCL_IB_HCA=$(hca "$out_link") timeout 240 "$harness" "$lib" --peer "$WEFT_VM_WORK/link-$next" send || rc=$?
wait "$recv" || rc=$?
echo "-- receiving from VM $prev over $in_link"
cat "$WEFT_VM_WORK/recv-$me.out"
echo "-- VM $me: sent over $out_link, received over $in_link ($HARNESS_BACKEND), status $rc"
exit "$rc"
