#!/usr/bin/env bash
# The seed's three-host triangle in network namespaces, with a management bridge every host
# shares beside its two direct links: `weft perf all-reduce --transport mesh` across the
# three "hosts" (one rank each, NCCL_HOSTID per namespace, sockets: no RDMA here), the
# bootstrap on the bridge (NCCL_SOCKET_IFNAME=mgmt0), and the bytes each interface sent.
# On a mesh the direct links are the data path: the bridge must carry the bootstrap and
# little else (issue 24; docs/net-ib.md, "The bootstrap's network is a last resort").
#
#   sudo scripts/mesh-triangle.sh [--max SIZE] [--weft PATH] [--keep]
#
#   --max SIZE   largest all-reduce (default 16M; the sizes go from 1M by doubling)
#   --weft PATH  the weft binary to run (default: build target/release/weft first; CI
#                passes its debug build)
#   --keep       leave the namespaces and logs (/tmp/weft-mesh-triangle) for a look
#
# Needs root and `ip netns` (iproute2). Exit status:
# 0 when the bridge carried at most 5 % of the bytes the direct links carried and every
# rank's check passed, 1 otherwise, 2 when the triangle cannot be built here.
#
#   a: to-b 192.168.101.1  to-c 192.168.100.1  mgmt0 10.77.0.1
#   b: to-a 192.168.101.2  to-c 192.168.102.2  mgmt0 10.77.0.2
#   c: to-a 192.168.100.3  to-b 192.168.102.3  mgmt0 10.77.0.3
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAX=16M
KEEP=0
WEFT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --max) MAX=$2; shift 2 ;;
        --weft) WEFT=$(realpath "$2"); shift 2 ;;
        --keep) KEEP=1; shift ;;
        *) echo "mesh-triangle: unknown option $1" >&2; exit 2 ;;
    esac
done
WORK=/tmp/weft-mesh-triangle
P=wtri$$
NS=("$P-a" "$P-b" "$P-c")
SW="$P-sw"

cleanup() {
    [ "$KEEP" = 1 ] && { echo "kept: namespaces ${NS[*]} $SW, logs in $WORK"; return; }
    for n in "${NS[@]}" "$SW"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ] || ! ip netns add "$SW" 2>/dev/null; then
    echo "mesh-triangle: needs root and network namespaces (ip netns add failed)" >&2
    exit 2
fi
rm -rf "$WORK" && mkdir -p "$WORK"
if [ -z "$WEFT" ]; then
    (cd "$ROOT" && cargo build -q --release --bin weft)
    WEFT="$ROOT/target/release/weft"
fi

in_ns() { local n=$1; shift; ip netns exec "$n" "$@"; }
for n in "${NS[@]}"; do
    ip netns add "$n"
    in_ns "$n" ip link set lo up
done
# A direct link: name and address on each side.
link() {
    local na=$1 ifa=$2 addra=$3 nb=$4 ifb=$5 addrb=$6
    ip link add "$P-x" type veth peer name "$P-y"
    ip link set "$P-x" netns "$na" name "$ifa"
    ip link set "$P-y" netns "$nb" name "$ifb"
    in_ns "$na" ip addr add "$addra/24" dev "$ifa"
    in_ns "$nb" ip addr add "$addrb/24" dev "$ifb"
    in_ns "$na" ip link set "$ifa" up
    in_ns "$nb" ip link set "$ifb" up
}
link "${NS[0]}" to-b 192.168.101.1 "${NS[1]}" to-a 192.168.101.2
link "${NS[0]}" to-c 192.168.100.1 "${NS[2]}" to-a 192.168.100.3
link "${NS[1]}" to-c 192.168.102.2 "${NS[2]}" to-b 192.168.102.3
# The management bridge, in a namespace of its own.
in_ns "$SW" ip link add br0 type bridge
in_ns "$SW" ip link set br0 up
for i in 0 1 2; do
    ip link add "$P-m" type veth peer name "$P-s"
    ip link set "$P-m" netns "${NS[$i]}" name mgmt0
    ip link set "$P-s" netns "$SW" name "port$i"
    in_ns "$SW" ip link set "port$i" master br0
    in_ns "$SW" ip link set "port$i" up
    in_ns "${NS[$i]}" ip addr add "10.77.0.$((i + 1))/24" dev mgmt0
    in_ns "${NS[$i]}" ip link set mgmt0 up
done

tx() { in_ns "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
IFACES=("to-b to-c mgmt0" "to-a to-c mgmt0" "to-a to-b mgmt0")
declare -A BEFORE
for i in 0 1 2; do
    for f in ${IFACES[$i]}; do BEFORE[$i.$f]=$(tx "${NS[$i]}" "$f"); done
done

# The root of the bootstrap in a, on the bridge; then one rank per host.
common=(env NCCL_SOCKET_IFNAME=mgmt0 NCCL_DEBUG=INFO NCCL_MESH_DEBUG=1 WEFT_TIMEOUT=60)
in_ns "${NS[0]}" "${common[@]}" NCCL_HOSTID=host-a timeout 300 "$WEFT" unique-id >"$WORK/id" 2>"$WORK/root.log" &
root=$!
for _ in $(seq 100); do [ -s "$WORK/id" ] && break; sleep 0.1; done
ID=$(head -1 "$WORK/id" 2>/dev/null || true)
[ -n "$ID" ] || { echo "mesh-triangle: no unique id from the root" >&2; cat "$WORK/root.log" >&2; exit 1; }
pids=()
for i in 0 1 2; do
    in_ns "${NS[$i]}" "${common[@]}" NCCL_HOSTID="host-$i" timeout 300 "$WEFT" perf all-reduce \
        --transport mesh --id "$ID" --rank "$i" --nranks 3 -b 1M -e "$MAX" -n 10 -w 2 -c 1 \
        >"$WORK/rank$i.log" 2>&1 &
    pids+=($!)
done
status=0
for i in 0 1 2; do
    if ! wait "${pids[$i]}"; then
        echo "rank $i failed (tail of $WORK/rank$i.log):"
        tail -15 "$WORK/rank$i.log" | sed 's/^/  | /'
        status=1
    fi
done
# The root has nothing left to serve once the ranks are done (or failed).
kill "$root" 2>/dev/null || true
wait "$root" 2>/dev/null || true
echo "== rank 0's table"
grep -E '^ *[0-9]+ ' "$WORK/rank0.log" | head -20 || true
echo "== each rank's rails (NCCL_MESH_DEBUG=1)"
grep -h 'NET/mesh: connect' "$WORK"/rank*.log | sed 's/^.*NET\/mesh/NET\/mesh/' | sort | uniq -c | head -12

echo "== bytes sent per interface during the run"
direct=0
bridge=0
for i in 0 1 2; do
    line="host ${NS[$i]##*-}:"
    for f in ${IFACES[$i]}; do
        d=$(($(tx "${NS[$i]}" "$f") - BEFORE[$i.$f]))
        line="$line $f $((d / 1024)) KiB"
        if [ "$f" = mgmt0 ]; then bridge=$((bridge + d)); else direct=$((direct + d)); fi
    done
    echo "   $line"
done
echo "   direct links $((direct / 1048576)) MiB, bridge $((bridge / 1024)) KiB"
if [ "$direct" -eq 0 ] || [ $((bridge * 100)) -gt $((direct * 5)) ]; then
    echo "FAIL: the management bridge carried more than 5 % of what the direct links did"
    status=1
else
    echo "ok  the bridge carried $((bridge * 1000 / direct))/1000 of the direct links' bytes"
fi
exit $status
