#!/bin/busybox sh
# /init of the Soft-RoCE test VMs (scripts/rdma-vms.sh packs it into the initramfs): loads the
# modules, mounts the host's root read-only and the work folder read-write over 9p, names and
# addresses the NICs, adds an rxe device on each, runs the command in a chroot of the host's
# root, records its output and exit status in the work folder, and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
vm=$(arg weft.vm)
work=$(arg weft.work)
repo=$(arg weft.repo)
deadline=$(arg weft.deadline)

fail() {
    echo "rdma-vm-init: $*" > /dev/console
    [ -d /newroot$work ] && echo "rdma-vm-init (VM $vm): $*" >> "/newroot$work/vm$vm.log" && echo 99 > "/newroot$work/vm$vm.rc"
    sync
    poweroff -f
}

while read -r m; do
    insmod "/lib/modules/$m" || fail "insmod $m failed"
done < /lib/modules/order

mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot || fail "mounting the host root over 9p failed"
# The VM's /tmp and /run are its own tmpfs. A checkout under the host's /tmp (CI may make one
# there) would vanish beneath it: the host's /tmp stays reachable at /mnt, and the folders of
# the repository and the work folder are bound back in place.
mount -o bind /newroot/tmp /newroot/mnt || fail "keeping the host's /tmp at /mnt failed"
for d in tmp run; do mount -t tmpfs tmpfs "/newroot/$d"; done
for p in "$repo" "$work"; do
    case "$p" in
    /tmp/*)
        top=${p#/tmp/}
        top=${top%%/*}
        [ -d "/newroot/tmp/$top" ] && continue
        mkdir -p "/newroot/tmp/$top"
        mount -o bind "/newroot/mnt/$top" "/newroot/tmp/$top" || fail "binding /tmp/$top back failed"
        ;;
    esac
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work "/newroot$work" || fail "mounting the work folder over 9p failed"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mount -t tmpfs tmpfs /newroot/dev/shm

log="/newroot$work/vm$vm.log"
: > "$log"
in_root() { chroot /newroot /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp "$@"; }

# Name each NIC after its place in the topology (found by the MAC the host gave it), address it
# (IPv4 and IPv6, no duplicate address detection: nobody else is on the link) and add rxe.
in_root ip link set lo up
while read -r link lvm ifname rxe v4 v6; do
    [ "$lvm" = "$vm" ] || continue
    mac=$(awk -v l="$link" -v v="$vm" '$1 == l && $2 == v {print $3}' "/newroot$work/macs")
    found=""
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address")" = "$mac" ] && found=$(basename "$d")
    done
    [ -n "$found" ] || fail "no NIC with MAC $mac (link $link)"
    if [ "$found" != "$ifname" ]; then
        # Another NIC may hold the name for now: move it aside first.
        [ -e "/sys/class/net/$ifname" ] && in_root ip link set "$ifname" name "tmp$ifname"
        in_root ip link set "$found" name "$ifname" || fail "renaming $found to $ifname failed"
    fi
done < "/newroot$work/topology"
while read -r link lvm ifname rxe v4 v6; do
    [ "$lvm" = "$vm" ] || continue
    in_root ip addr add "$v4" dev "$ifname" || fail "ip addr add $v4 dev $ifname failed"
    in_root ip addr add "$v6" dev "$ifname" nodad || fail "ip addr add $v6 dev $ifname failed"
    in_root ip link set "$ifname" up || fail "ip link set $ifname up failed"
    in_root rdma link add "$rxe" type rxe netdev "$ifname" >> "$log" 2>&1 ||
        fail "rdma link add $rxe type rxe netdev $ifname failed"
done < "/newroot$work/topology"

left=$((deadline - $(cut -d. -f1 /proc/uptime) - 10))
[ "$left" -gt 10 ] || left=10
in_root WEFT_VM_INDEX="$vm" WEFT_VM_COUNT="$(awk '{print $2}' "/newroot$work/topology" | sort -u | wc -l)" \
    WEFT_VM_WORK="$work" WEFT_VM_TOPOLOGY="$work/topology" WEFT_VM_DEADLINE="$left" \
    /bin/sh -c "cd '$repo' && exec timeout -k 5 $left sh '$work/cmd.sh'" >> "$log" 2>&1
echo $? > "/newroot$work/vm$vm.rc"
sync
umount "/newroot$work"
poweroff -f
