# The harness's own check, before any weft code: rdma-core's ibv_rc_pingpong (RC QPs, sends of
# 64 KiB) and perftest's ib_write_bw (RDMA writes) between VMs a and b over rxe0.
# scripts/rdma-vms.sh --vms 2 -- sh tests/vm/pingpong.sh
set -eu
. tests/vm/lib.sh
gid=$(roce_v2_gid_index rxe0 4)
server=$(vm_addr 0 ab)
if [ "$WEFT_VM_INDEX" = 0 ]; then
    timeout 120 ibv_rc_pingpong -d rxe0 -g "$gid" -s 65536 -n 50
    timeout 120 ib_write_bw -d rxe0 -x "$gid" -s 65536 -n 200 -F
else
    retry 30 timeout 120 ibv_rc_pingpong -d rxe0 -g "$gid" -s 65536 -n 50 "$server"
    sleep 2
    retry 30 timeout 120 ib_write_bw -d rxe0 -x "$gid" -s 65536 -n 200 -F "$server"
fi
