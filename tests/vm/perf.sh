# weft perf all-reduce with one rank per VM, every element checked, over the verbs backend
# (--transport ib, one rxe device per link) or the mesh backend (WEFT_VM_PERF_TRANSPORT).
# WEFT_VM_NO_RDMA=I deletes VM I's rxe devices first: the mesh reaches it over sockets.
# Rank 0 (VM a) serves the unique id (`weft unique-id`) through the work folder.
# Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 2 -- sh tests/vm/perf.sh          (or --vms 3: the triangle)
set -eu
. tests/vm/lib.sh
weft=${WEFT_VM_BIN:-target/debug}/weft
transport=${WEFT_VM_PERF_TRANSPORT:-ib}
n=$WEFT_VM_COUNT
# The bootstrap (TCP) runs from each VM's eth0, routed through a neighbour where the triangle
# has no direct link; the data goes over RDMA on the direct links.
route_triangle
if [ "${WEFT_VM_NO_RDMA:-}" = "$WEFT_VM_INDEX" ]; then
    for rxe in $(awk -v v="$WEFT_VM_INDEX" '$2 == v {print $4}' "$WEFT_VM_TOPOLOGY"); do
        rdma link delete "$rxe"
    done
fi
export NCCL_SOCKET_IFNAME==eth0 NCCL_MESH_DEBUG=1
export WEFT_DEBUG=${WEFT_DEBUG:-WARN}
id_file="$WEFT_VM_WORK/unique-id"
if [ "$WEFT_VM_INDEX" = 0 ]; then
    NCCL_SOCKET_IFNAME==eth0 "$weft" unique-id > "$id_file.tmp" &
    for _ in $(seq 100); do [ -s "$id_file.tmp" ] && break; sleep 0.1; done
    mv "$id_file.tmp" "$id_file"
fi
for _ in $(seq 300); do [ -s "$id_file" ] && break; sleep 0.1; done
id=$(head -n 1 "$id_file")
timeout $((WEFT_VM_DEADLINE - 10)) "$weft" perf all-reduce --id "$id" --rank "$WEFT_VM_INDEX" \
    --nranks "$n" --transport "$transport" -b 8 -e 4M -f 4 -n 2 -w 1 --channels 1 --timeout 60
wait
