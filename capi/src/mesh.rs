//! Mesh handles and NIC selection for C callers: fixed-size C structs converted to and from
//! `weft_core::wire::mesh_handle::MeshHandle` and `weft_core::net` types.
//!
//! Addresses cross the boundary as a family byte (4 or 6) and 16 address bytes in network
//! order; an IPv4 address uses the first 4 and the other 12 must be zero, so that a caller
//! who filled the wrong family is told instead of silently connecting somewhere else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weft_core::net::{self, LocalNic, PeerAddr, Route};
use weft_core::wire::mesh_handle::{self, MeshEntry, MeshHandle};

use weft_ffi::{arg_mut, arg_ref, arg_slice, arg_slice_mut};

use super::boundary::boundary;
use super::status::{CallError, weft_status};

/// Most entries in a mesh handle.
pub const WEFT_MESH_MAX_ENTRIES: usize = 9;
/// Bytes NCCL gives a net plugin for a listen handle (`NCCL_NET_HANDLE_MAXSIZE`); an
/// encoded mesh handle never exceeds it.
pub const WEFT_NET_HANDLE_MAXSIZE: usize = 128;
/// `family` of an IPv4 address.
pub const WEFT_FAMILY_IPV4: u8 = 4;
/// `family` of an IPv6 address.
pub const WEFT_FAMILY_IPV6: u8 = 6;

const _: () = {
    assert!(WEFT_MESH_MAX_ENTRIES == mesh_handle::MAX_ENTRIES);
    assert!(WEFT_NET_HANDLE_MAXSIZE == mesh_handle::NCCL_NET_HANDLE_MAXSIZE);
};

/// One address a listening rank can be reached on.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct weft_mesh_entry {
    /// `WEFT_FAMILY_IPV4` or `WEFT_FAMILY_IPV6`.
    pub family: u8,
    /// Subnet prefix length: at most 32 (IPv4) or 128 (IPv6).
    pub prefix_len: u8,
    /// Index of the NIC on the listening host.
    pub nic_index: u8,
    /// GID index (RoCE) the listener uses on that NIC.
    pub gid_index: u8,
    /// Address in network order; IPv4 uses `addr[0..4]` and leaves the rest zero.
    pub addr: [u8; 16],
    /// Queue-pair number to connect to (24 bits).
    pub qpn: u32,
    /// Link speed in Mb/s: a multiple of 100, or 0 when unknown.
    pub speed_mbps: u32,
}

/// A mesh handle: the handshake port and up to `WEFT_MESH_MAX_ENTRIES` addresses, in the
/// listener's order of preference.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct weft_mesh_handle {
    /// TCP port of the listener's handshake socket.
    pub port: u16,
    /// Must be zero.
    pub reserved: u16,
    /// Entries used, at most `WEFT_MESH_MAX_ENTRIES`.
    pub count: u32,
    pub entries: [weft_mesh_entry; WEFT_MESH_MAX_ENTRIES],
}

/// One address of a NIC on this host (a NIC with several addresses appears once per
/// address, with the same `index`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct weft_local_nic {
    /// The NIC's position in the device list.
    pub index: u8,
    /// `WEFT_FAMILY_IPV4` or `WEFT_FAMILY_IPV6`.
    pub family: u8,
    pub prefix_len: u8,
    /// 1 if the link is up, 0 if down (a down NIC is never chosen).
    pub up: u8,
    /// Address in network order; IPv4 uses `addr[0..4]`.
    pub addr: [u8; 16],
    /// Link speed in Mb/s, 0 when unknown.
    pub speed_mbps: u32,
}

/// The (local NIC, peer address) pair `weft_select_nic` chose.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct weft_route {
    /// Position of the chosen NIC in the caller's `local` array.
    pub local_position: u32,
    /// Position of the chosen address in `peer->entries`.
    pub peer_position: u32,
    /// Family of both addresses.
    pub family: u8,
    /// `index` of the chosen local NIC.
    pub local_nic_index: u8,
    /// `nic_index` of the chosen peer entry.
    pub peer_nic_index: u8,
    /// Prefix length of the subnet both ends share.
    pub subnet_prefix_len: u8,
    /// Address to connect from.
    pub local_addr: [u8; 16],
    /// Address to connect to.
    pub peer_addr: [u8; 16],
    /// Network address of the shared subnet.
    pub subnet_addr: [u8; 16],
    /// Speed of the pair in Mb/s (the slower known end; 0 when both are unknown).
    pub speed_mbps: u32,
}

// The C layouts, fixed: a change here is an ABI break (bump WEFT_ABI_VERSION).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<weft_mesh_entry>() == 28);
    assert!(offset_of!(weft_mesh_entry, addr) == 4);
    assert!(offset_of!(weft_mesh_entry, qpn) == 20);
    assert!(size_of::<weft_mesh_handle>() == 8 + 28 * WEFT_MESH_MAX_ENTRIES);
    assert!(offset_of!(weft_mesh_handle, entries) == 8);
    assert!(size_of::<weft_local_nic>() == 24);
    assert!(offset_of!(weft_local_nic, speed_mbps) == 20);
    assert!(size_of::<weft_route>() == 64);
    assert!(offset_of!(weft_route, local_addr) == 12);
    assert!(offset_of!(weft_route, speed_mbps) == 60);
};

fn ip_from_c(family: u8, addr: &[u8; 16], what: &str) -> Result<IpAddr, CallError> {
    match family {
        WEFT_FAMILY_IPV4 => {
            let [a, b, c, d, rest @ ..] = *addr;
            if rest.iter().any(|&x| x != 0) {
                return Err(CallError::new(
                    weft_status::WEFT_ERR_BAD_FIELD,
                    format!(
                        "{what}.addr: family is IPv4 but bytes 4..16 are not zero \
                         (an IPv6 address with family 4?)"
                    ),
                ));
            }
            Ok(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
        }
        WEFT_FAMILY_IPV6 => Ok(IpAddr::V6(Ipv6Addr::from(*addr))),
        other => Err(CallError::new(
            weft_status::WEFT_ERR_BAD_FAMILY,
            format!("{what}.family = {other}: expected 4 (IPv4) or 6 (IPv6)"),
        )),
    }
}

fn ip_to_c(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => {
            let mut addr = [0u8; 16];
            let [a, b, c, d] = v4.octets();
            addr[..4].copy_from_slice(&[a, b, c, d]);
            (WEFT_FAMILY_IPV4, addr)
        }
        IpAddr::V6(v6) => (WEFT_FAMILY_IPV6, v6.octets()),
    }
}

/// Prefixes a core error's message with where it happened (`entries[3]: ...`).
fn at(what: &str, e: weft_core::wire::ParseError) -> CallError {
    let mut c = CallError::from(e);
    c.message = format!("{what}: {}", c.message);
    c
}

/// The entries `count` says are used, or `WEFT_ERR_TOO_MANY`.
fn used_entries<'a>(
    handle: &'a weft_mesh_handle,
    arg: &str,
) -> Result<&'a [weft_mesh_entry], CallError> {
    usize::try_from(handle.count)
        .ok()
        .and_then(|n| handle.entries.get(..n))
        .ok_or_else(|| {
            CallError::new(
                weft_status::WEFT_ERR_TOO_MANY,
                format!(
                    "{arg}->count = {}: a mesh handle holds at most {WEFT_MESH_MAX_ENTRIES} entries",
                    handle.count
                ),
            )
        })
}

/// The core handle for a C one, with every check an encoder applies; `arg` names the
/// argument in messages ("handle", "peer").
fn handle_from_c(handle: &weft_mesh_handle, arg: &str) -> Result<MeshHandle, CallError> {
    if handle.reserved != 0 {
        return Err(CallError::bad_arg(
            &format!("{arg}->reserved"),
            handle.reserved,
            "0",
        ));
    }
    let mut repr = MeshHandle::new(handle.port);
    for (i, e) in used_entries(handle, arg)?.iter().enumerate() {
        let what = format!("{arg}->entries[{i}]");
        let entry = MeshEntry {
            addr: ip_from_c(e.family, &e.addr, &what)?,
            prefix_len: e.prefix_len,
            nic_index: e.nic_index,
            qpn: e.qpn,
            gid_index: e.gid_index,
            speed_mbps: e.speed_mbps,
        };
        repr.push(entry).map_err(|err| at(&what, err))?;
    }
    Ok(repr)
}

fn handle_to_c(repr: &MeshHandle) -> weft_mesh_handle {
    let mut out = weft_mesh_handle {
        port: repr.port,
        ..weft_mesh_handle::default()
    };
    for (slot, e) in out.entries.iter_mut().zip(repr.entries()) {
        let (family, addr) = ip_to_c(e.addr);
        *slot = weft_mesh_entry {
            family,
            prefix_len: e.prefix_len,
            nic_index: e.nic_index,
            gid_index: e.gid_index,
            addr,
            qpn: e.qpn,
            speed_mbps: e.speed_mbps,
        };
        out.count = out.count.saturating_add(1);
    }
    out
}

/// Encodes `handle` into `out` (the bytes NCCL carries between ranks, at most
/// `WEFT_NET_HANDLE_MAXSIZE`) and sets `*written` to the bytes used. The rest of `out`, up
/// to `WEFT_NET_HANDLE_MAXSIZE` bytes, is zeroed so that a 128-byte NCCL handle carries no
/// stale memory to other hosts; bytes beyond 128 are not touched. If `out_len` is too small,
/// returns
/// `WEFT_ERR_BUFFER_TOO_SMALL` and sets `*written` to the size needed. Errors:
/// `WEFT_ERR_TOO_MANY` (count above the maximum, or entries that do not fit in 128 bytes),
/// `WEFT_ERR_BAD_FAMILY`, `WEFT_ERR_BAD_FIELD` (prefix, QP number, speed, reserved),
/// `WEFT_ERR_NULL_ARG`.
///
/// # Safety
/// Each pointer is NULL or valid: `handle` for reading one `weft_mesh_handle`, `out` for
/// writing `out_len` bytes, `written` for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_mesh_handle_encode(
    handle: *const weft_mesh_handle,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> weft_status {
    boundary!("weft_mesh_handle_encode", {
        let handle = arg_ref!(handle, "handle");
        let written = arg_mut!(written, "written");
        let out = arg_slice_mut!(out, out_len, "out");
        let repr = handle_from_c(handle, "handle")?;
        let needed = repr.buffer_len();
        let Some(dest) = out.get_mut(..needed) else {
            *written = needed;
            return Err(CallError::new(
                weft_status::WEFT_ERR_BUFFER_TOO_SMALL,
                format!("out_len = {out_len} but the handle needs {needed} bytes"),
            ));
        };
        let used = repr.emit(dest).map_err(|e| at("out", e))?;
        let pad_end = out_len.min(WEFT_NET_HANDLE_MAXSIZE);
        if let Some(pad) = out.get_mut(used..pad_end) {
            pad.fill(0);
        }
        *written = used;
        Ok(())
    })
}

/// Decodes the mesh handle in `bytes[0..len]` into `*out` (unused entries zeroed). Trailing
/// bytes after the last entry are ignored, so the whole 128-byte NCCL handle may be passed.
/// On error `*out` is unchanged. Errors: `WEFT_ERR_TRUNCATED`, `WEFT_ERR_BAD_MAGIC`,
/// `WEFT_ERR_BAD_VERSION`, `WEFT_ERR_TOO_MANY`, `WEFT_ERR_BAD_FAMILY`, `WEFT_ERR_BAD_FIELD`,
/// `WEFT_ERR_NULL_ARG`; `weft_last_error()` names the field and the values.
///
/// # Safety
/// `bytes` is NULL or valid for reading `len` bytes; `out` is NULL or valid for writing one
/// `weft_mesh_handle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_mesh_handle_decode(
    bytes: *const u8,
    len: usize,
    out: *mut weft_mesh_handle,
) -> weft_status {
    boundary!("weft_mesh_handle_decode", {
        let bytes = arg_slice!(bytes, len, "bytes");
        let out = arg_mut!(out, "out");
        let repr = MeshHandle::parse(bytes)?;
        *out = handle_to_c(&repr);
        Ok(())
    })
}

fn local_from_c(nics: &[weft_local_nic]) -> Result<Vec<LocalNic>, CallError> {
    nics.iter()
        .enumerate()
        .map(|(i, n)| {
            let what = format!("local[{i}]");
            let up = match n.up {
                0 => false,
                1 => true,
                other => {
                    return Err(CallError::bad_arg(&format!("{what}.up"), other, "0 or 1"));
                }
            };
            let addr = ip_from_c(n.family, &n.addr, &what)?;
            let max_prefix = if addr.is_ipv4() { 32 } else { 128 };
            if n.prefix_len > max_prefix {
                return Err(CallError::bad_arg(
                    &format!("{what}.prefix_len"),
                    n.prefix_len,
                    &format!("at most {max_prefix} for this family"),
                ));
            }
            Ok(LocalNic {
                index: n.index,
                addr,
                prefix_len: n.prefix_len,
                speed_mbps: n.speed_mbps,
                up,
            })
        })
        .collect()
}

/// The peer's addresses, after the same checks as an encoded handle (a handle decoded by
/// `weft_mesh_handle_decode` always passes them).
fn peer_from_c(peer: &weft_mesh_handle) -> Result<Vec<PeerAddr>, CallError> {
    let repr = handle_from_c(peer, "peer")?;
    Ok(repr.entries().iter().map(PeerAddr::from).collect())
}

fn route_to_c(route: &Route, local: &[LocalNic]) -> Result<weft_route, CallError> {
    let internal = |what: &str| {
        CallError::new(
            weft_status::WEFT_ERR_INTERNAL,
            format!("internal error: the chosen route's {what} is out of range"),
        )
    };
    let local_position = local
        .iter()
        .position(|n| *n == route.local)
        .ok_or_else(|| internal("local NIC"))?;
    let (family, local_addr) = ip_to_c(route.local.addr);
    let (_, peer_addr) = ip_to_c(route.peer.addr);
    let (_, subnet_addr) = ip_to_c(route.subnet.network());
    Ok(weft_route {
        local_position: u32::try_from(local_position).map_err(|_| internal("local position"))?,
        peer_position: u32::try_from(route.peer_position).map_err(|_| internal("peer position"))?,
        family,
        local_nic_index: route.local.index,
        peer_nic_index: route.peer.nic_index,
        subnet_prefix_len: route.subnet.prefix_len(),
        local_addr,
        peer_addr,
        subnet_addr,
        speed_mbps: route.speed_mbps,
    })
}

/// Chooses the (local NIC, peer address) pair to connect over: both ends on one subnet (no
/// routed fallback), the local NIC up, the fastest pair first (see weft-core's `net::select`).
/// `WEFT_ERR_NO_ROUTE` when no pair matches; `weft_last_error()` then lists every address
/// compared and what to check. Other errors: `WEFT_ERR_BAD_FAMILY`, `WEFT_ERR_BAD_FIELD`,
/// `WEFT_ERR_TOO_MANY` (peer count), `WEFT_ERR_NULL_ARG`. On error `*out` is unchanged.
///
/// # Safety
/// `local` is NULL or valid for reading `n` `weft_local_nic`s; `peer` is NULL or valid for
/// reading one `weft_mesh_handle`; `out` is NULL or valid for writing one `weft_route`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_select_nic(
    local: *const weft_local_nic,
    n: usize,
    peer: *const weft_mesh_handle,
    out: *mut weft_route,
) -> weft_status {
    boundary!("weft_select_nic", {
        let local = arg_slice!(local, n, "local");
        let peer = arg_ref!(peer, "peer");
        let out = arg_mut!(out, "out");
        let local = local_from_c(local)?;
        let peer = peer_from_c(peer)?;
        let route = net::select(&local, &peer).map_err(|no_route| {
            CallError::new(weft_status::WEFT_ERR_NO_ROUTE, no_route.to_string())
        })?;
        *out = route_to_c(&route, &local)?;
        Ok(())
    })
}

#[cfg(test)]
mod test {
    use super::*;

    /// Small seeded generator: the driver has no proptest dependency.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn decode(bytes: &[u8]) -> (weft_status, weft_mesh_handle) {
        let mut out = weft_mesh_handle::default();
        // SAFETY: `bytes` is a live slice and `out` a local.
        let s = unsafe { weft_mesh_handle_decode(bytes.as_ptr(), bytes.len(), &mut out) };
        (s, out)
    }

    #[test]
    fn decode_of_any_bytes_is_a_status_never_a_panic() {
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
        let mut seen_ok = 0;
        for i in 0..20_000 {
            let len = (rng.next() % 131) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            // Give most inputs a valid header so the entry decoder is exercised too.
            if i % 4 != 0 && len >= 9 {
                bytes[..6].copy_from_slice(&[0x57, 0x46, 0x4d, 0x48, 0, 1]);
                bytes[8] %= 10;
            }
            let (s, out) = decode(&bytes);
            assert_ne!(s, weft_status::WEFT_ERR_INTERNAL, "{bytes:02x?}");
            if s == weft_status::WEFT_OK {
                seen_ok += 1;
                // What decodes re-encodes to the same bytes it came from.
                let mut again = [0u8; WEFT_NET_HANDLE_MAXSIZE];
                let mut written = 0usize;
                // SAFETY: pointers to locals; `again` has the length passed.
                let s = unsafe {
                    weft_mesh_handle_encode(&out, again.as_mut_ptr(), again.len(), &mut written)
                };
                assert_eq!(s, weft_status::WEFT_OK);
                assert_eq!(decode(&again[..written]), (weft_status::WEFT_OK, out));
            }
        }
        assert!(seen_ok > 100, "only {seen_ok} random handles decoded");
    }

    #[test]
    fn addresses_convert_both_ways() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 20, 30, 40));
        let v6: IpAddr = "fd00:1:2::77".parse().unwrap();
        for ip in [v4, v6] {
            let (family, addr) = ip_to_c(ip);
            assert_eq!(ip_from_c(family, &addr, "x"), Ok(ip));
        }
        let (_, mut addr) = ip_to_c(v4);
        addr[15] = 1;
        let e = ip_from_c(WEFT_FAMILY_IPV4, &addr, "local[3]").unwrap_err();
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FIELD);
        assert!(e.message.starts_with("local[3].addr: "), "{}", e.message);
        let e = ip_from_c(0, &addr, "peer->entries[1]").unwrap_err();
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FAMILY);
        assert_eq!(
            e.message,
            "peer->entries[1].family = 0: expected 4 (IPv4) or 6 (IPv6)"
        );
    }
}
