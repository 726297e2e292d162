# Helpers for commands run inside the Soft-RoCE VMs (scripts/rdma-vms.sh); source it.

# roce_v2_gid_index RXE FAMILY: the GID index of the device's RoCE v2 GID for its IPv4
# (FAMILY=4, an IPv4-mapped ::ffff:a.b.c.d GID) or non-link-local IPv6 (FAMILY=6) address.
roce_v2_gid_index() {
    local port=/sys/class/infiniband/$1/ports/1 i gid type
    for i in $(seq 0 15); do
        gid=$(cat "$port/gids/$i" 2>/dev/null) || continue
        type=$(cat "$port/gid_attrs/types/$i" 2>/dev/null) || continue
        [ "$type" = "RoCE v2" ] || continue
        case "$2:$gid" in
            4:0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;;
            6:0000:*|6:fe80:*) ;;
            6:*) echo "$i"; return 0 ;;
        esac
    done
    echo "no RoCE v2 IPv$2 GID on $1" >&2
    return 1
}

# vm_addr VM LINK: the IPv4 address of VM (0, 1, 2) on LINK (ab, ac, bc), without prefix.
vm_addr() {
    awk -v v="$1" -v l="$2" '$1 == l && $2 == v {sub("/.*", "", $5); print $5}' "$WEFT_VM_TOPOLOGY"
}

# retry N CMD...: runs CMD until it succeeds, at most N times a second apart (a server in the
# other VM may not be listening yet).
retry() {
    local n=$1 i
    shift
    for i in $(seq "$n"); do
        "$@" && return 0
        sleep 1
    done
    return 1
}

# route_triangle: in the 3-VM triangle, lets TCP (the bootstrap) reach every address by
# forwarding through the neighbour that holds it (a routed fallback; RDMA never uses it: the
# mesh backend picks the directly connected subnet).
route_triangle() {
    [ "$WEFT_VM_COUNT" = 3 ] || return 0
    echo 1 > /proc/sys/net/ipv4/ip_forward
    case "$WEFT_VM_INDEX" in
        0) ip route add 192.168.102.0/24 via 192.168.101.2 ;;
        1) ip route add 192.168.100.0/24 via 192.168.101.1 ;;
        2) ip route add 192.168.101.0/24 via 192.168.100.1 ;;
    esac
}

# vm_rxe VM LINK: the rxe device of VM (0, 1, 2) on LINK (ab, ac, bc).
vm_rxe() {
    awk -v v="$1" -v l="$2" '$1 == l && $2 == v {print $4}' "$WEFT_VM_TOPOLOGY"
}
