# Faults between two VMs (three for no-subnet), one per run, chosen by FAULT:
#   link-down   VM a takes its link down mid-transfer: both ends fail within 60 s, naming the
#               peer; the sender's error is the RDMA retry error with what to check.
#   vm-killed   VM b powers off mid-transfer: VM a's receive fails within 60 s, naming the peer.
#   wrong-gid   VM b uses the IPv6 GID (NCCL_IB_GID_INDEX=2) against VM a's IPv4 one: a clear
#               error on each side, no hang.
#   stray       two stray TCP clients hit VM a's handshake port first: the real connection and
#               its transfers still work.
#   no-subnet   (--vms 3) VM a advertises only its a-c address; VM b (subnets a-b, b-c) fails
#               to connect at once, listing the addresses compared.
#   stale-nonce over the mesh backend (verbs), VM b first connects with VM a's handle whose
#               nonce it changed (a stale handle): that connect fails within the deadline,
#               naming VM a and the nonce; VM a's listener logs the refusal naming VM b and
#               then serves b's real connection (3 messages).
# Built by scripts/vm-tests.sh, which runs it.
# scripts/rdma-vms.sh --vms 2 -- "FAULT=link-down sh tests/vm/faults.sh"
set -eu
. tests/vm/lib.sh
bin=${WEFT_VM_BIN:-target/debug/examples}/ib_faults
dir=$WEFT_VM_WORK
# Short RC timers: 4.096 us x 2^14 = 67 ms per try, 7 tries.
export NCCL_IB_TIMEOUT=14 NCCL_IB_RETRY_CNT=7 WEFT_DEBUG=${WEFT_DEBUG:-ERROR}
role=recv
[ "$WEFT_VM_INDEX" = 0 ] || role=send
case "$FAULT" in
link-down)
    export NCCL_IB_HCA==rxe0 FAULT_SIDE=recv,send
    if [ "$role" = recv ]; then
        ( while [ ! -e "$dir/started" ]; do sleep 0.2; done; sleep 1; ip link set eth0 down ) &
        "$bin" stream recv "$dir" "peer"
    else
        "$bin" stream send "$dir" "peer" "192.168.101.1"
    fi ;;
vm-killed)
    export NCCL_IB_HCA==rxe0 FAULT_SIDE=recv
    if [ "$role" = recv ]; then
        "$bin" stream recv "$dir" "peer" "192.168.101.2"
    else
        ( while [ ! -e "$dir/started" ]; do sleep 0.2; done; sleep 1
          echo 0 > "$dir/vm$WEFT_VM_INDEX.rc"; sync; echo o > /proc/sysrq-trigger ) &
        "$bin" stream send "$dir" || true
        # The send ends only if VM a went away first (its kernel crashed, say): then the
        # power-off never comes; end now rather than at the deadline.
        for _ in $(seq 60); do [ -e "$dir/started" ] && break; sleep 1; done
        [ -e "$dir/started" ] || { echo "faults.sh: the transfer never started" >&2; exit 1; }
        sleep 600
    fi ;;
wrong-gid)
    export NCCL_IB_HCA==rxe0 FAULT_SIDE=recv,send
    if [ "$role" = send ]; then export NCCL_IB_GID_INDEX=2; fi
    "$bin" stream "$role" "$dir" "peer" ;;
stray)
    export NCCL_IB_HCA==rxe0
    "$bin" stray "$role" "$dir" ;;
no-subnet)
    [ "$WEFT_VM_INDEX" = 2 ] && exit 0
    export FAULT_SIDE=send
    if [ "$role" = recv ]; then
        WEFT_MESH_IFNAME==eth1 "$bin" mesh-connect recv "$dir"
    else
        "$bin" mesh-connect send "$dir" "no route to peer" "192.168.100.1/24" "192.168.101.2/24" "192.168.102.2/24"
    fi ;;
stale-nonce)
    export NCCL_IB_HCA==rxe0
    if [ "$role" = recv ]; then
        "$bin" mesh-stale recv "$dir" > "$dir/recv.out" 2>&1 || { cat "$dir/recv.out"; exit 1; }
        cat "$dir/recv.out"
        grep -q "dropping a connection: .*nonce.*(peer $(vm_addr 1 ab):" "$dir/recv.out" || {
            echo "faults.sh: VM a's listener did not say it refused VM b's stale nonce" >&2
            exit 1
        }
    else
        "$bin" mesh-stale send "$dir" "nonce" "$(vm_addr 0 ab)"
    fi ;;
*) echo "faults.sh: FAULT=$FAULT is not one of link-down vm-killed wrong-gid stray no-subnet stale-nonce" >&2; exit 2 ;;
esac
