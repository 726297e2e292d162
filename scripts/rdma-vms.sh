#!/usr/bin/env bash
# Soft-RoCE in qemu VMs: real RDMA (the kernel's rdma_rxe, real RC queue pairs) between
# "hosts" on a machine without an RDMA device. Boots N VMs (TCG, 1 vCPU each), one per host,
# links them with qemu socket netdevs (one subnet per link), brings an rxe device up on every
# link, runs one command in every VM and collects what each printed. Everything has a deadline.
#
#   scripts/rdma-vms.sh [--vms 2|3] [--ab-links 1|2] [--deadline SECONDS] [--mem MIB] [--work DIR] -- COMMAND...
#
# Each VM sees this machine's root file system read-only (9p), so binaries built here run there
# unchanged, at the same paths; --work DIR (default target/vm/run-<time>) is shared read-write
# at the same path in every VM (logs, and a rendezvous folder the VMs may use to exchange
# files). COMMAND runs with `sh -c` inside each VM, in this repository's root, with:
#   WEFT_VM_INDEX   0, 1, 2 (VM a, b, c)          WEFT_VM_COUNT   how many VMs
#   WEFT_VM_WORK    the shared work folder         WEFT_VM_DEADLINE seconds left for COMMAND
#   WEFT_VM_TOPOLOGY  the file that lists every link: `link vm iface rxe address/prefix`
# Links and addresses (the mesh seed's triangle; with --vms 2 only a-b):
#   a-b 192.168.101.0/24 and fd00:101::/64    a-c 192.168.100.0/24 and fd00:100::/64
#   b-c 192.168.102.0/24 and fd00:102::/64    VM a is .1 / ::1, b is .2 / ::2, c is .3 / ::3
#   --ab-links 2 adds a second a-b link (two rails between a and b):
#   ab2 192.168.103.0/24 and fd00:103::/64
# Interfaces are named eth0, eth1 in the order of that list, their rxe devices rxe0, rxe1.
# Results: WORK/vm<i>.log (the command's output), WORK/vm<i>.rc, WORK/vm<i>.console (kernel).
# Exit status: 0 when every VM's command exited 0 in time, 3 when one failed and a guest kernel
# crashed (an rxe bug, not the command's), else 1 (the log tails are printed).
#
# It installs what it needs on Debian/Ubuntu (as root): qemu-system-x86, busybox-static, cpio,
# kmod, xz-utils, iproute2 (`rdma`), ibverbs-providers (rxe), ibverbs-utils and perftest, and
# a distribution kernel with rdma_rxe through `apt-get download` (WEFT_VM_KERNEL_PKG to choose
# it), unpacked with an initramfs into target/vm/ once. See ../docs/rdma-vms.md.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

vms=2 deadline=600 mem=640 work="" ab_links=1
while [ $# -gt 0 ]; do
    case "$1" in
        --vms) vms="$2"; shift 2 ;;
        --ab-links) ab_links="$2"; shift 2 ;;
        --deadline) deadline="$2"; shift 2 ;;
        --mem) mem="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "rdma-vms: unknown option $1 (see the head of $0)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "rdma-vms: no command given (… -- COMMAND)" >&2; exit 2; }
case "$vms" in 2|3) ;; *) echo "rdma-vms: --vms must be 2 or 3" >&2; exit 2 ;; esac
case "$ab_links" in 1|2) ;; *) echo "rdma-vms: --ab-links must be 1 or 2" >&2; exit 2 ;; esac
[ "$mem" -le 768 ] || { echo "rdma-vms: --mem $mem: at most 768 MiB per VM here" >&2; exit 2; }
command_text="$*"
started=$(date +%s)
say() { printf 'rdma-vms: %s\n' "$*" >&2; }

vmdir="${CARGO_TARGET_DIR:-$repo/target}/vm"
case "$vmdir" in /*) ;; *) vmdir="$repo/$vmdir" ;; esac
mkdir -p "$vmdir"

# --- packages -----------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx insmod || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
command -v rdma >/dev/null || need+=(iproute2)
compgen -G "/usr/lib/*/libibverbs/librxe-rdmav*.so" >/dev/null || need+=(ibverbs-providers)
command -v ibv_rc_pingpong >/dev/null || need+=(ibverbs-utils)
command -v ib_write_bw >/dev/null || need+=(perftest)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        say "missing: ${need[*]}; as root: apt-get install -y ${need[*]}"
        exit 1
    fi
    say "installing ${need[*]}"
    # Another apt may hold the lock on a shared machine: wait for it, but not forever.
    timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install \
        -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- kernel and initramfs (once) ----------------------------------------------------------
pick_kernel_pkg() {
    if [ -n "${WEFT_VM_KERNEL_PKG:-}" ]; then echo "$WEFT_VM_KERNEL_PKG"; return; fi
    # The one tried first (RDMA-TESTING.md); else the newest plain amd64 image on offer.
    if apt-cache show linux-image-6.12.107+deb12-amd64-unsigned >/dev/null 2>&1; then
        echo linux-image-6.12.107+deb12-amd64-unsigned; return
    fi
    apt-cache search --names-only '^linux-image-[0-9][0-9.]*[-+][-+a-z0-9.]*-amd64-unsigned$' |
        awk '{print $1}' | grep -v -e cloud -e '-rt-' | sort -V | tail -1
}
kernel_dir="$vmdir/kernel"
if [ ! -f "$kernel_dir/.complete" ]; then
    pkg=$(pick_kernel_pkg)
    if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
        # A fresh machine may have no package lists yet.
        timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq
        pkg=$(pick_kernel_pkg)
    fi
    [ -n "$pkg" ] || { say "no linux-image-*-amd64-unsigned package on offer (apt-get update?)"; exit 1; }
    say "fetching the VM kernel $pkg (apt-get download)"
    rm -rf "$kernel_dir" "$kernel_dir.partial"
    mkdir -p "$kernel_dir.partial/deb"
    # apt's sandbox user cannot write to a root-owned folder; say so quietly and go on.
    (cd "$kernel_dir.partial/deb" && timeout 600 apt-get download "$pkg" 2>&1 | grep -v unsandboxed || true)
    deb=$(ls "$kernel_dir.partial"/deb/*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { say "apt-get download $pkg gave no file"; exit 1; }
    dpkg -x "$deb" "$kernel_dir.partial/root"
    rm -f "$deb"
    mv "$kernel_dir.partial" "$kernel_dir"
    touch "$kernel_dir/.complete"
fi
kver=$(ls "$kernel_dir/root/lib/modules" | head -1)
vmlinuz="$kernel_dir/root/boot/vmlinuz-$kver"
[ -f "$vmlinuz" ] || { say "no $vmlinuz: remove $kernel_dir and run again"; exit 1; }

# The modules, in load order. crc32_generic is easy to miss: without it rxe cannot set up its
# ICRC and `rdma link add` fails with ENOENT (RDMA-TESTING.md).
modules="crc32_generic rdma_rxe 9pnet_virtio 9p virtio_net"
initrd="$vmdir/initrd-$kver.cpio.gz"
init_src="$repo/scripts/rdma-vm-init.sh"
if [ ! -f "$initrd" ] || [ "$init_src" -nt "$initrd" ] || [ "$0" -nt "$initrd" ]; then
    say "building the initramfs for $kver"
    depmod -b "$kernel_dir/root" "$kver"
    stage=$(mktemp -d "$vmdir/initrd.XXXXXX")
    mkdir -p "$stage"/{bin,proc,sys,dev,newroot,lib/modules,work}
    cp /bin/busybox "$stage/bin/busybox"
    cp "$init_src" "$stage/init"
    chmod +x "$stage/init"
    : > "$stage/lib/modules/order"
    for m in $modules; do
        modprobe -d "$kernel_dir/root" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        name=$(basename "$ko"); name="${name%.xz}"; name="${name%.zst}"
        case "$ko" in
            *.xz) xz -dc "$ko" > "$stage/lib/modules/$name" ;;
            *.zst) zstd -qdc "$ko" > "$stage/lib/modules/$name" ;;
            *) cp "$ko" "$stage/lib/modules/$name" ;;
        esac
        echo "$name" >> "$stage/lib/modules/order"
    done
    (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.partial"
    mv "$initrd.partial" "$initrd"
    rm -rf "$stage"
fi

# --- the run ------------------------------------------------------------------------------
if [ -z "$work" ]; then work="$vmdir/run-$(date -u +%Y%m%dT%H%M%S)-$$"; fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -f "$work"/vm*.log "$work"/vm*.rc "$work"/vm*.console
names=(a b c)

# link name, first VM, second VM, IPv4 /24 prefix, IPv6 /64 prefix
links=("ab 0 1 192.168.101 fd00:101:")
if [ "$ab_links" = 2 ]; then links+=("ab2 0 1 192.168.103 fd00:103:"); fi
if [ "$vms" = 3 ]; then links+=("ac 0 2 192.168.100 fd00:100:" "bc 1 2 192.168.102 fd00:102:"); fi

topology="$work/topology"
: > "$topology"
declare -A nic_count=()
for link in "${links[@]}"; do
    read -r lname x y v4 v6 <<< "$link"
    for vm in "$x" "$y"; do
        n=${nic_count[$vm]:-0}
        nic_count[$vm]=$((n + 1))
        echo "$lname $vm eth$n rxe$n $v4.$((vm + 1))/24 $v6:$((vm + 1))/64" >> "$topology"
    done
done

# One free TCP port per link on 127.0.0.1 (other users of this machine may hold some).
port_free() { ! ss -Htln "sport = :$1" | grep -q .; }
base=$((20000 + RANDOM % 20000))
declare -A link_port=()
for link in "${links[@]}"; do
    read -r lname _ <<< "$link"
    while ! port_free "$base"; do base=$((base + 1)); done
    link_port[$lname]=$base
    base=$((base + 1))
done

cat > "$work/cmd.sh" <<EOF
$command_text
EOF

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Listeners start first: a connecting socket netdev whose peer is not yet listening makes
# qemu exit at once.
boot_vm() {
    local vm="$1" args=() nic=0
    for link in "${links[@]}"; do
        read -r lname x y _ <<< "$link"
        [ "$vm" = "$x" ] || [ "$vm" = "$y" ] || continue
        local mode=listen
        [ "$vm" = "$y" ] && mode=connect
        # Every NIC its own MAC: 52:54:00:<link>:<vm>:<nic>; the default one is shared by all VMs.
        local mac
        mac=$(printf '52:54:00:%02x:%02x:%02x' "$(( ${link_port[$lname]} % 251 ))" "$vm" "$nic")
        args+=(-netdev "socket,id=$lname,$mode=127.0.0.1:${link_port[$lname]}"
               -device "virtio-net-pci,netdev=$lname,mac=$mac")
        echo "$lname $vm $mac" >> "$work/macs"
        nic=$((nic + 1))
    done
    local left=$((deadline - ($(date +%s) - started)))
    timeout --kill-after=5 "$left" qemu-system-x86_64 -accel tcg -smp 1 -m "$mem" \
        -display none -monitor none -no-reboot -serial "file:$work/vm$vm.console" \
        -kernel "$vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 quiet panic=-1 weft.vm=$vm weft.work=$work weft.repo=$repo weft.deadline=$left" \
        -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap" \
        -device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot" \
        -fsdev "local,id=work,path=$work,security_model=none,multidevs=remap" \
        -device "virtio-9p-pci,fsdev=work,mount_tag=work" \
        "${args[@]}" > "$work/vm$vm.qemu" 2>&1 &
    pids+=($!)
}

: > "$work/macs"
for ((vm = 0; vm < vms; vm++)); do
    boot_vm "$vm"
    # Wait until every port this VM listens on is open before starting the next.
    for link in "${links[@]}"; do
        read -r lname x _ <<< "$link"
        [ "$x" = "$vm" ] || continue
        for _ in $(seq 100); do port_free "${link_port[$lname]}" || break; sleep 0.1; done
    done
done
say "$vms VMs booting (work folder $work, deadline ${deadline}s)"

for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
pids=()

status=0
# A guest kernel that crashed (Soft-RoCE has bugs of its own: a list corruption in
# rxe_receiver was seen once in ~40 runs under 6.12) is not a failure of the command: say so,
# and exit 3 so that a caller may run it again.
panicked=""
for ((vm = 0; vm < vms; vm++)); do
    if grep -q "Kernel panic\|kernel BUG" "$work/vm$vm.console" 2>/dev/null; then
        panicked="$panicked ${names[$vm]}"
        say "VM ${names[$vm]}: its kernel crashed: $(grep -m1 "kernel BUG\|BUG:\|Kernel panic" "$work/vm$vm.console")"
        grep -m3 "rxe\|Workqueue" "$work/vm$vm.console" | sed "s/^/  console ${names[$vm]}: /" >&2 || true
    fi
done
for ((vm = 0; vm < vms; vm++)); do
    rc=$(cat "$work/vm$vm.rc" 2>/dev/null || echo "none")
    if [ "$rc" != 0 ]; then
        status=1
        if [ "$rc" = none ]; then
            say "VM ${names[$vm]}: no exit status (killed at the deadline, or it did not boot)"
            tail -n 15 "$work/vm$vm.console" 2>/dev/null | sed "s/^/  console ${names[$vm]}: /" >&2 || true
            tail -n 5 "$work/vm$vm.qemu" 2>/dev/null | sed "s/^/  qemu ${names[$vm]}: /" >&2 || true
        else
            say "VM ${names[$vm]}: the command exited with $rc"
        fi
        tail -n 30 "$work/vm$vm.log" 2>/dev/null | sed "s/^/  ${names[$vm]}: /" >&2 || true
    fi
done
if [ "$status" != 0 ] && [ -n "$panicked" ]; then status=3; fi
say "done in $(($(date +%s) - started)) s, status $status; logs in $work"
exit "$status"
