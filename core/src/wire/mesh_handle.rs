//! The mesh handle: a multi-address NET listen handle that fits `NCCL_NET_HANDLE_MAXSIZE`.
//!
//! A rank that listens on a multi-subnet RDMA mesh advertises every address it can be
//! reached on, so that the connecting peer can pick a (local NIC, remote address) pair on a
//! shared subnet. NCCL hands a plugin exactly [`NCCL_NET_HANDLE_MAXSIZE`] (128) bytes for
//! this, so the layout is compact and variable-length.
//!
//! # Layout
//!
//! All integers are big-endian. The header:
//!
//! | offset | size | field                                                         |
//! |-------:|-----:|---------------------------------------------------------------|
//! |      0 |    4 | magic [`MAGIC`] (`"WFMH"`)                                      |
//! |      4 |    2 | version [`VERSION`]                                           |
//! |      6 |    2 | handshake (TCP) port                                          |
//! |      8 |    1 | entry count, at most [`MAX_ENTRIES`]                          |
//! |      9 |    … | the entries, back to back, in the sender's order of preference |
//!
//! Each entry starts with a 9-byte fixed part:
//!
//! | offset | size | field                                                   |
//! |-------:|-----:|---------------------------------------------------------|
//! |      0 |    1 | address family: 4 (IPv4) or 6 (IPv6)                    |
//! |      1 |    1 | prefix length: at most 32 (IPv4) or 128 (IPv6)          |
//! |      2 |    1 | NIC index on the sending host                           |
//! |      3 |    1 | GID index                                               |
//! |      4 |    3 | QP number (24 bits, as in InfiniBand)                   |
//! |      7 |    2 | link speed in units of [`SPEED_UNIT_MBPS`] (100 Mb/s)   |
//!
//! followed by the address:
//!
//! | family | offset | size           | field                                                   |
//! |-------:|-------:|---------------:|---------------------------------------------------------|
//! |      4 |      9 |              4 | IPv4 address (the entry is 13 bytes)                    |
//! |      6 |      9 |              1 | `shared`: leading bytes equal to the previous IPv6 entry's address (0 to 16; 0 for the first IPv6 entry) |
//! |      6 |     10 | 16 − `shared`  | the remaining bytes of the IPv6 address (the entry is 26 − `shared` bytes) |
//!
//! Bytes after the last entry (the rest of NCCL's 128-byte buffer) are ignored. The emitter
//! always sends the longest shared prefix; the parser accepts any `shared` up to 16, so only
//! the decoded handle, not its bytes, is canonical.
//!
//! # How IPv6 fits in 128 bytes
//!
//! A plain IPv6 entry takes 25 bytes, so six of them (plus the header) would need 159 bytes.
//! The IPv6 addresses of one host's NICs usually share a site prefix, so each IPv6 address is
//! front-coded against the previous IPv6 entry: only the bytes after the common prefix are
//! sent. The whole encoding must stay within 128 bytes; [`MeshHandle::push`] refuses the entry
//! that would not fit, so the selector should push its preferred addresses first. What fits:
//!
//! | entries                                                        | bytes |
//! |----------------------------------------------------------------|------:|
//! | 9 IPv4 ([`MAX_ENTRIES`])                                        |   126 |
//! | 3 unrelated IPv6 + 3 IPv4 (any 6 entries with at most 3 IPv6)  |   126 |
//! | 4 unrelated IPv6 + 1 IPv4                                      |   126 |
//! | 6 IPv6 in one /64 (each after the first shares ≥ 8 bytes)      |   125 |
//! | 5 IPv6 in distinct /64s of one /56, + 1 IPv4                   |   124 |
//! | 5 IPv6 in distinct /64s of one /48                             |   115 |
//!
//! Six IPv6 addresses in six different /64s do not fit (130 bytes or more even within one
//! /56): such a handle carries the first five, and `push` says so for the sixth.
//!
//! # Panics
//!
//! None: [`MeshHandleView::new_checked`] validates every byte it will later read, and every
//! accessor and [`MeshHandle`] method is total.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zerocopy::byteorder::network_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::ParseError;

/// The size of the buffer NCCL gives a net plugin for a listen handle.
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// The most entries a handle carries (nine IPv4 entries take 126 bytes).
pub const MAX_ENTRIES: usize = 9;
/// `"WFMH"`: weft mesh handle.
pub const MAGIC: u32 = 0x5746_4d48;
/// The layout described in this module.
pub const VERSION: u16 = 1;
/// Link speed is carried in units of this many Mb/s.
pub const SPEED_UNIT_MBPS: u32 = 100;
/// The fastest link speed the 16-bit speed field can carry.
pub const MAX_SPEED_MBPS: u32 = 65_535 * SPEED_UNIT_MBPS;
/// The largest InfiniBand queue-pair number (24 bits).
pub const MAX_QPN: u32 = 0x00ff_ffff;

const FAMILY_IPV4: u8 = 4;
const FAMILY_IPV6: u8 = 6;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Header {
    magic: U32,
    version: U16,
    port: U16,
    count: u8,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct EntryFixed {
    family: u8,
    prefix_len: u8,
    nic_index: u8,
    gid_index: u8,
    qpn: [u8; 3],
    speed: U16,
}

const HEADER_LEN: usize = size_of::<Header>();
const ENTRY_FIXED_LEN: usize = size_of::<EntryFixed>();
const IPV4_ENTRY_LEN: usize = ENTRY_FIXED_LEN + 4;
/// An IPv6 entry that shares nothing with the previous one: fixed part, `shared`, 16 bytes.
const IPV6_ENTRY_MAX_LEN: usize = ENTRY_FIXED_LEN + 1 + 16;

const _: () = assert!(HEADER_LEN == 9 && ENTRY_FIXED_LEN == 9);
// A full handle of IPv4 entries always fits: MAX_ENTRIES is the count, not a hope.
const _: () = assert!(HEADER_LEN + MAX_ENTRIES * IPV4_ENTRY_LEN <= NCCL_NET_HANDLE_MAXSIZE);
// The documented "any 6 entries with at most 3 IPv6" guarantee.
const _: () =
    assert!(HEADER_LEN + 3 * IPV6_ENTRY_MAX_LEN + 3 * IPV4_ENTRY_LEN <= NCCL_NET_HANDLE_MAXSIZE);

/// One address a listening rank can be reached on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshEntry {
    /// The address of the NIC.
    pub addr: IpAddr,
    /// The subnet prefix length: at most 32 for IPv4, 128 for IPv6.
    pub prefix_len: u8,
    /// The NIC's index on the listening host.
    pub nic_index: u8,
    /// The queue-pair number to connect to: at most [`MAX_QPN`].
    pub qpn: u32,
    /// The GID index (RoCE) the listener uses on that NIC.
    pub gid_index: u8,
    /// Link speed in Mb/s: a multiple of [`SPEED_UNIT_MBPS`], at most [`MAX_SPEED_MBPS`];
    /// 0 when unknown.
    pub speed_mbps: u32,
}

impl MeshEntry {
    /// An entry that holds nothing; fills the unused slots of a [`MeshHandle`].
    const UNUSED: MeshEntry = MeshEntry {
        addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        prefix_len: 0,
        nic_index: 0,
        qpn: 0,
        gid_index: 0,
        speed_mbps: 0,
    };

    /// Checks that every field can be carried exactly: prefix length within the family,
    /// a 24-bit QP number, and a speed that is a whole number of 100 Mb/s units.
    pub fn check(&self) -> Result<(), ParseError> {
        let max_prefix = match self.addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if self.prefix_len > max_prefix {
            return Err(ParseError::BadField {
                field: "prefix_len",
                value: u64::from(self.prefix_len),
            });
        }
        if self.qpn > MAX_QPN {
            return Err(ParseError::BadField {
                field: "qpn",
                value: u64::from(self.qpn),
            });
        }
        speed_units(self.speed_mbps).map(|_| ())
    }
}

/// The wire value of a speed, or the error naming it.
fn speed_units(speed_mbps: u32) -> Result<u16, ParseError> {
    let bad = ParseError::BadField {
        field: "speed_mbps",
        value: u64::from(speed_mbps),
    };
    if speed_mbps.checked_rem(SPEED_UNIT_MBPS) != Some(0) {
        return Err(bad);
    }
    speed_mbps
        .checked_div(SPEED_UNIT_MBPS)
        .and_then(|units| u16::try_from(units).ok())
        .ok_or(bad)
}

/// How many leading bytes `addr` shares with the previous IPv6 address of the handle.
fn shared_prefix(prev_v6: Option<Ipv6Addr>, addr: Ipv6Addr) -> usize {
    prev_v6.map_or(0, |prev| {
        prev.octets()
            .iter()
            .zip(addr.octets().iter())
            .take_while(|(a, b)| a == b)
            .count()
    })
}

/// The encoded size of `entry`, given the previous IPv6 address of the handle.
fn entry_len(entry: &MeshEntry, prev_v6: Option<Ipv6Addr>) -> usize {
    match entry.addr {
        IpAddr::V4(_) => IPV4_ENTRY_LEN,
        IpAddr::V6(addr) => IPV6_ENTRY_MAX_LEN.saturating_sub(shared_prefix(prev_v6, addr)),
    }
}

/// The encoded size of a handle holding `entries`.
fn encoded_len(entries: &[MeshEntry]) -> usize {
    let mut prev_v6 = None;
    let mut len = HEADER_LEN;
    for entry in entries {
        len = len.saturating_add(entry_len(entry, prev_v6));
        if let IpAddr::V6(addr) = entry.addr {
            prev_v6 = Some(addr);
        }
    }
    len
}

/// `len` bytes of `buf` at `at`, or why not: past the 128-byte handle (`TooMany`), or past
/// the end of the buffer (`Truncated`).
fn take(buf: &[u8], at: usize, len: usize) -> Result<&[u8], ParseError> {
    let end = at.saturating_add(len);
    if end > NCCL_NET_HANDLE_MAXSIZE {
        return Err(ParseError::TooMany {
            field: "mesh handle bytes",
            count: end,
            max: NCCL_NET_HANDLE_MAXSIZE,
        });
    }
    buf.get(at..end).ok_or(ParseError::Truncated {
        needed: end,
        got: buf.len(),
    })
}

/// Decodes the entry at `at`; returns it and its encoded length.
fn decode_entry(
    buf: &[u8],
    at: usize,
    prev_v6: Option<Ipv6Addr>,
) -> Result<(MeshEntry, usize), ParseError> {
    let fixed_bytes = take(buf, at, ENTRY_FIXED_LEN)?;
    let fixed = EntryFixed::read_from_bytes(fixed_bytes).map_err(|_| ParseError::Truncated {
        needed: at.saturating_add(ENTRY_FIXED_LEN),
        got: buf.len(),
    })?;
    let addr_at = at.saturating_add(ENTRY_FIXED_LEN);
    let (addr, max_prefix, len) = match fixed.family {
        FAMILY_IPV4 => {
            let octets = take(buf, addr_at, 4)?;
            let mut v4 = [0u8; 4];
            for (dst, src) in v4.iter_mut().zip(octets) {
                *dst = *src;
            }
            (IpAddr::V4(Ipv4Addr::from(v4)), 32, IPV4_ENTRY_LEN)
        }
        FAMILY_IPV6 => {
            let shared_byte = take(buf, addr_at, 1)?.first().copied().unwrap_or(0);
            let shared = usize::from(shared_byte);
            if shared > 16 || (shared > 0 && prev_v6.is_none()) {
                return Err(ParseError::BadField {
                    field: "ipv6_shared_prefix",
                    value: u64::from(shared_byte),
                });
            }
            let tail_len = 16usize.saturating_sub(shared);
            let tail = take(buf, addr_at.saturating_add(1), tail_len)?;
            let mut v6 = prev_v6.map_or([0u8; 16], |prev| prev.octets());
            for (dst, src) in v6.iter_mut().skip(shared).zip(tail) {
                *dst = *src;
            }
            let len = IPV6_ENTRY_MAX_LEN.saturating_sub(shared);
            (IpAddr::V6(Ipv6Addr::from(v6)), 128, len)
        }
        found => return Err(ParseError::BadAddressFamily { found }),
    };
    if fixed.prefix_len > max_prefix {
        return Err(ParseError::BadField {
            field: "prefix_len",
            value: u64::from(fixed.prefix_len),
        });
    }
    let [q0, q1, q2] = fixed.qpn;
    let entry = MeshEntry {
        addr,
        prefix_len: fixed.prefix_len,
        nic_index: fixed.nic_index,
        qpn: u32::from_be_bytes([0, q0, q1, q2]),
        gid_index: fixed.gid_index,
        speed_mbps: u32::from(fixed.speed.get()).saturating_mul(SPEED_UNIT_MBPS),
    };
    Ok((entry, len))
}

/// A validated mesh handle in a byte buffer. Construction checks the whole encoding (magic,
/// version, count, every entry, the 128-byte bound), so the accessors cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshHandleView<'a> {
    /// Exactly the encoded handle, without trailing bytes.
    bytes: &'a [u8],
    version: u16,
    port: u16,
    count: u8,
}

impl<'a> MeshHandleView<'a> {
    /// Validates `bytes` as a mesh handle; bytes after its end are ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (header, _) = Header::read_from_prefix(bytes).map_err(|_| ParseError::Truncated {
            needed: HEADER_LEN,
            got: bytes.len(),
        })?;
        super::check_magic_version(header.magic.get(), MAGIC, header.version.get(), VERSION)?;
        if usize::from(header.count) > MAX_ENTRIES {
            return Err(ParseError::TooMany {
                field: "mesh handle entries",
                count: usize::from(header.count),
                max: MAX_ENTRIES,
            });
        }
        let mut at = HEADER_LEN;
        let mut prev_v6 = None;
        for _ in 0..header.count {
            let (entry, len) = decode_entry(bytes, at, prev_v6)?;
            if let IpAddr::V6(addr) = entry.addr {
                prev_v6 = Some(addr);
            }
            at = at.saturating_add(len);
        }
        let bytes = bytes.get(..at).ok_or(ParseError::Truncated {
            needed: at,
            got: bytes.len(),
        })?;
        Ok(MeshHandleView {
            bytes,
            version: header.version.get(),
            port: header.port.get(),
            count: header.count,
        })
    }

    /// The format version (always [`VERSION`] once checked).
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The TCP port of the listener's handshake socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The number of entries.
    pub fn entry_count(&self) -> usize {
        usize::from(self.count)
    }

    /// The encoded handle, without the bytes that followed it.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The entries, decoded, in the sender's order.
    pub fn entries(&self) -> MeshEntries<'a> {
        MeshEntries {
            bytes: self.bytes,
            at: HEADER_LEN,
            remaining: self.count,
            prev_v6: None,
        }
    }
}

/// The entries of a [`MeshHandleView`], decoded in order.
#[derive(Debug, Clone)]
pub struct MeshEntries<'a> {
    bytes: &'a [u8],
    at: usize,
    remaining: u8,
    prev_v6: Option<Ipv6Addr>,
}

impl Iterator for MeshEntries<'_> {
    type Item = MeshEntry;

    fn next(&mut self) -> Option<MeshEntry> {
        self.remaining = self.remaining.checked_sub(1)?;
        // The view checked every entry already; an error here cannot happen, and ending the
        // iteration is the panic-free answer if it ever did.
        let (entry, len) = decode_entry(self.bytes, self.at, self.prev_v6).ok()?;
        if let IpAddr::V6(addr) = entry.addr {
            self.prev_v6 = Some(addr);
        }
        self.at = self.at.saturating_add(len);
        Some(entry)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.remaining)))
    }
}

/// A mesh handle: the handshake port and up to [`MAX_ENTRIES`] addresses, in order of
/// preference. Built with [`MeshHandle::new`] and [`MeshHandle::push`], which keep it always
/// encodable within [`NCCL_NET_HANDLE_MAXSIZE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshHandle {
    /// The TCP port of the listener's handshake socket.
    pub port: u16,
    len: u8,
    /// `entries[..len]` are the entries; the rest hold `MeshEntry::UNUSED`, so that the
    /// derived equality compares only what was pushed.
    entries: [MeshEntry; MAX_ENTRIES],
}

impl MeshHandle {
    /// A handle with no entries.
    pub const fn new(port: u16) -> Self {
        MeshHandle {
            port,
            len: 0,
            entries: [MeshEntry::UNUSED; MAX_ENTRIES],
        }
    }

    /// Appends `entry`, or says why it cannot be carried: a field out of range
    /// (`BadField`), [`MAX_ENTRIES`] already present, or the encoding would pass 128 bytes
    /// (`TooMany`). On error the handle is unchanged.
    pub fn push(&mut self, entry: MeshEntry) -> Result<(), ParseError> {
        entry.check()?;
        let count = usize::from(self.len);
        let too_many = ParseError::TooMany {
            field: "mesh handle entries",
            count: count.saturating_add(1),
            max: MAX_ENTRIES,
        };
        if count >= MAX_ENTRIES {
            return Err(too_many);
        }
        let prev_v6 = self.entries().iter().rev().find_map(|e| match e.addr {
            IpAddr::V6(addr) => Some(addr),
            IpAddr::V4(_) => None,
        });
        let new_len = self.buffer_len().saturating_add(entry_len(&entry, prev_v6));
        if new_len > NCCL_NET_HANDLE_MAXSIZE {
            return Err(ParseError::TooMany {
                field: "mesh handle bytes",
                count: new_len,
                max: NCCL_NET_HANDLE_MAXSIZE,
            });
        }
        *self.entries.get_mut(count).ok_or(too_many)? = entry;
        self.len = self.len.saturating_add(1);
        Ok(())
    }

    /// The entries, in order of preference.
    pub fn entries(&self) -> &[MeshEntry] {
        self.entries.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the handle has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Parses a handle from the start of `bytes` (trailing bytes are ignored).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        MeshHandleView::new_checked(bytes).map(|view| Self::from_view(&view))
    }

    /// The handle a checked view holds.
    pub fn from_view(view: &MeshHandleView<'_>) -> Self {
        let mut handle = MeshHandle::new(view.port());
        for (slot, entry) in handle.entries.iter_mut().zip(view.entries()) {
            *slot = entry;
            handle.len = handle.len.saturating_add(1);
        }
        handle
    }

    /// The number of bytes [`MeshHandle::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        encoded_len(self.entries())
    }

    /// Writes the handle at the start of `buf` and returns its length. Fails with
    /// `Truncated` if `buf` is shorter than [`MeshHandle::buffer_len`]; bytes after the
    /// handle are left as they were.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let entries = self.entries();
        for entry in entries {
            entry.check()?;
        }
        let len = self.buffer_len();
        if len > NCCL_NET_HANDLE_MAXSIZE {
            return Err(ParseError::TooMany {
                field: "mesh handle bytes",
                count: len,
                max: NCCL_NET_HANDLE_MAXSIZE,
            });
        }
        let got = buf.len();
        let out = buf
            .get_mut(..len)
            .ok_or(ParseError::Truncated { needed: len, got })?;
        let header = Header {
            magic: U32::new(MAGIC),
            version: U16::new(VERSION),
            port: U16::new(self.port),
            count: self.len,
        };
        let mut at = write_at(out, 0, header.as_bytes())?;
        let mut prev_v6 = None;
        for entry in entries {
            let [_, q0, q1, q2] = entry.qpn.to_be_bytes();
            let family = match entry.addr {
                IpAddr::V4(_) => FAMILY_IPV4,
                IpAddr::V6(_) => FAMILY_IPV6,
            };
            let fixed = EntryFixed {
                family,
                prefix_len: entry.prefix_len,
                nic_index: entry.nic_index,
                gid_index: entry.gid_index,
                qpn: [q0, q1, q2],
                speed: U16::new(speed_units(entry.speed_mbps)?),
            };
            at = write_at(out, at, fixed.as_bytes())?;
            match entry.addr {
                IpAddr::V4(addr) => at = write_at(out, at, &addr.octets())?,
                IpAddr::V6(addr) => {
                    let shared = shared_prefix(prev_v6, addr);
                    let shared_byte = u8::try_from(shared).unwrap_or(0);
                    at = write_at(out, at, &[shared_byte])?;
                    at = write_at(out, at, addr.octets().get(shared..).unwrap_or(&[]))?;
                    prev_v6 = Some(addr);
                }
            }
        }
        Ok(at)
    }

    /// The handle as NCCL's fixed 128-byte handle buffer: the encoding, then zeros (so
    /// that equal handles are equal buffers).
    pub fn to_nccl_handle(&self) -> Result<[u8; NCCL_NET_HANDLE_MAXSIZE], ParseError> {
        let mut out = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        self.emit(&mut out)?;
        Ok(out)
    }
}

/// Copies `src` into `out` at `at`; returns the offset after it.
fn write_at(out: &mut [u8], at: usize, src: &[u8]) -> Result<usize, ParseError> {
    let end = at.saturating_add(src.len());
    let got = out.len();
    let dst = out
        .get_mut(at..end)
        .ok_or(ParseError::Truncated { needed: end, got })?;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
    Ok(end)
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn v4(a: [u8; 4], prefix_len: u8, nic_index: u8, qpn: u32) -> MeshEntry {
        MeshEntry {
            addr: IpAddr::V4(Ipv4Addr::from(a)),
            prefix_len,
            nic_index,
            qpn,
            gid_index: 3,
            speed_mbps: 200_000,
        }
    }

    fn v6(a: [u8; 16], prefix_len: u8, nic_index: u8, qpn: u32) -> MeshEntry {
        MeshEntry {
            addr: IpAddr::V6(Ipv6Addr::from(a)),
            prefix_len,
            nic_index,
            qpn,
            gid_index: 1,
            speed_mbps: 2_500,
        }
    }

    /// 10.1.2.7/24 on NIC 0, then fd00::12:0:0:0:7/64 and fd00::13:0:0:0:9/64 on NICs 1, 2.
    fn sample() -> MeshHandle {
        let mut h = MeshHandle::new(0xc351);
        h.push(v4([10, 1, 2, 7], 24, 0, 0x01_2345)).unwrap();
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[7] = 0x12;
        a[15] = 7;
        h.push(v6(a, 64, 1, 0xab_cdef)).unwrap();
        a[7] = 0x13;
        a[15] = 9;
        h.push(v6(a, 64, 2, 0x00_0001)).unwrap();
        h
    }

    #[rustfmt::skip]
    const SAMPLE_BYTES: [u8; 9 + 13 + 26 + 19] = [
        0x57, 0x46, 0x4d, 0x48, // magic "WFMH"
        0x00, 0x01,             // version 1
        0xc3, 0x51,             // port 50001
        3,                      // count
        // IPv4 entry
        4, 24, 0, 3, 0x01, 0x23, 0x45, 0x07, 0xd0, // 2000 x 100 Mb/s
        10, 1, 2, 7,
        // first IPv6 entry: nothing shared
        6, 64, 1, 1, 0xab, 0xcd, 0xef, 0x00, 0x19, // 25 x 100 Mb/s
        0,
        0xfd, 0, 0, 0, 0, 0, 0, 0x12, 0, 0, 0, 0, 0, 0, 0, 7,
        // second IPv6 entry: shares "fd00 0000 0000 00", sends 9 bytes
        6, 64, 2, 1, 0x00, 0x00, 0x01, 0x00, 0x19,
        7,
        0x13, 0, 0, 0, 0, 0, 0, 0, 9,
    ];

    #[test]
    fn emit_exact_bytes() {
        let h = sample();
        assert_eq!(h.buffer_len(), SAMPLE_BYTES.len());
        let mut buf = [0xa5u8; NCCL_NET_HANDLE_MAXSIZE];
        let n = h.emit(&mut buf).unwrap();
        assert_eq!(n, SAMPLE_BYTES.len());
        assert_eq!(&buf[..n], &SAMPLE_BYTES[..]);
        // Bytes after the handle are untouched.
        assert!(buf[n..].iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn parse_exact_bytes() {
        let view = MeshHandleView::new_checked(&SAMPLE_BYTES).unwrap();
        assert_eq!(view.version(), VERSION);
        assert_eq!(view.port(), 0xc351);
        assert_eq!(view.entry_count(), 3);
        assert_eq!(view.as_bytes(), &SAMPLE_BYTES[..]);
        let entries: Vec<MeshEntry> = view.entries().collect();
        assert_eq!(&entries[..], sample().entries());
        assert_eq!(MeshHandle::parse(&SAMPLE_BYTES).unwrap(), sample());
    }

    #[test]
    fn nccl_handle_is_zero_padded() {
        let out = sample().to_nccl_handle().unwrap();
        assert_eq!(&out[..SAMPLE_BYTES.len()], &SAMPLE_BYTES[..]);
        assert!(out[SAMPLE_BYTES.len()..].iter().all(|&b| b == 0));
        assert_eq!(MeshHandle::parse(&out).unwrap(), sample());
    }

    #[test]
    fn trailing_bytes_are_ignored() {
        let mut buf = [0x5au8; NCCL_NET_HANDLE_MAXSIZE];
        buf[..SAMPLE_BYTES.len()].copy_from_slice(&SAMPLE_BYTES);
        let view = MeshHandleView::new_checked(&buf).unwrap();
        assert_eq!(view.as_bytes(), &SAMPLE_BYTES[..]);
        assert_eq!(MeshHandle::parse(&buf).unwrap(), sample());
    }

    #[test]
    fn every_truncation_is_truncated() {
        for len in 0..SAMPLE_BYTES.len() {
            let err = MeshHandle::parse(&SAMPLE_BYTES[..len]).unwrap_err();
            match err {
                ParseError::Truncated { needed, got } => {
                    assert_eq!(got, len);
                    assert!(needed > len && needed <= SAMPLE_BYTES.len(), "{len}: {err}");
                }
                other => panic!("length {len}: {other:?}"),
            }
        }
    }

    #[test]
    fn emit_into_short_buffer_is_truncated() {
        let h = sample();
        for len in 0..h.buffer_len() {
            let mut buf = vec_of(len);
            assert_eq!(
                h.emit(&mut buf),
                Err(ParseError::Truncated {
                    needed: h.buffer_len(),
                    got: len
                })
            );
        }
    }

    fn vec_of(len: usize) -> Vec<u8> {
        std::vec![0u8; len]
    }

    #[test]
    fn bad_magic() {
        let mut b = SAMPLE_BYTES;
        b[0] = 0x58;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadMagic {
                expected: MAGIC,
                found: 0x5846_4d48
            })
        );
    }

    #[test]
    fn bad_version() {
        let mut b = SAMPLE_BYTES;
        b[5] = 2;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadVersion {
                supported: 1,
                found: 2
            })
        );
    }

    #[test]
    fn too_many_entries() {
        let mut b = SAMPLE_BYTES;
        b[8] = MAX_ENTRIES as u8 + 1;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::TooMany {
                field: "mesh handle entries",
                count: MAX_ENTRIES + 1,
                max: MAX_ENTRIES
            })
        );
    }

    #[test]
    fn unknown_family() {
        for (offset, family) in [(9, 0u8), (9, 5), (22, 2), (48, 0xff)] {
            let mut b = SAMPLE_BYTES;
            b[offset] = family;
            assert_eq!(
                MeshHandle::parse(&b),
                Err(ParseError::BadAddressFamily { found: family }),
                "family byte at {offset}"
            );
        }
    }

    #[test]
    fn prefix_len_beyond_family() {
        let mut b = SAMPLE_BYTES;
        b[10] = 33;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadField {
                field: "prefix_len",
                value: 33
            })
        );
        b[10] = 32;
        assert!(MeshHandle::parse(&b).is_ok());
        b[23] = 129;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadField {
                field: "prefix_len",
                value: 129
            })
        );
        b[23] = 128;
        assert!(MeshHandle::parse(&b).is_ok());
    }

    #[test]
    fn bad_shared_prefix() {
        // The first IPv6 entry has nothing to share with.
        let mut b = SAMPLE_BYTES;
        b[31] = 1;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadField {
                field: "ipv6_shared_prefix",
                value: 1
            })
        );
        let mut b = SAMPLE_BYTES;
        b[57] = 17;
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::BadField {
                field: "ipv6_shared_prefix",
                value: 17
            })
        );
    }

    #[test]
    fn handle_longer_than_nccl_buffer() {
        // Nine unrelated IPv6 entries claim 9 + 9 * 26 bytes: refused at the 128-byte bound
        // even when the buffer is longer.
        let mut b = std::vec![0u8; 300];
        b[..9].copy_from_slice(&[0x57, 0x46, 0x4d, 0x48, 0, 1, 0, 1, 9]);
        for i in 0..9 {
            let at = 9 + 26 * i;
            b[at] = 6;
            b[at + 10] = 0x20 + i as u8; // first address byte differs: shares nothing
        }
        assert_eq!(
            MeshHandle::parse(&b),
            Err(ParseError::TooMany {
                field: "mesh handle bytes",
                count: 9 + 5 * 26,
                max: NCCL_NET_HANDLE_MAXSIZE
            })
        );
    }

    #[test]
    fn push_refuses_unrepresentable_entries() {
        let mut h = MeshHandle::new(1);
        let ok = v4([192, 168, 0, 1], 16, 0, 5);
        let cases = [
            (
                MeshEntry {
                    prefix_len: 33,
                    ..ok
                },
                ParseError::BadField {
                    field: "prefix_len",
                    value: 33,
                },
            ),
            (
                MeshEntry {
                    qpn: MAX_QPN + 1,
                    ..ok
                },
                ParseError::BadField {
                    field: "qpn",
                    value: u64::from(MAX_QPN) + 1,
                },
            ),
            (
                MeshEntry {
                    speed_mbps: 2_550,
                    ..ok
                },
                ParseError::BadField {
                    field: "speed_mbps",
                    value: 2_550,
                },
            ),
            (
                MeshEntry {
                    speed_mbps: MAX_SPEED_MBPS + SPEED_UNIT_MBPS,
                    ..ok
                },
                ParseError::BadField {
                    field: "speed_mbps",
                    value: u64::from(MAX_SPEED_MBPS + SPEED_UNIT_MBPS),
                },
            ),
            (
                v6([0; 16], 129, 0, 0),
                ParseError::BadField {
                    field: "prefix_len",
                    value: 129,
                },
            ),
        ];
        for (entry, err) in cases {
            assert_eq!(h.push(entry), Err(err));
            assert!(h.is_empty());
        }
        h.push(MeshEntry {
            speed_mbps: MAX_SPEED_MBPS,
            qpn: MAX_QPN,
            ..ok
        })
        .unwrap();
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn nine_ipv4_entries_fit_and_a_tenth_does_not() {
        let mut h = MeshHandle::new(7);
        for i in 0..MAX_ENTRIES {
            h.push(v4([10, i as u8, 0, 1], 24, i as u8, 100 + i as u32))
                .unwrap();
        }
        assert_eq!(h.buffer_len(), 126);
        assert_eq!(
            h.push(v4([10, 99, 0, 1], 24, 9, 1)),
            Err(ParseError::TooMany {
                field: "mesh handle entries",
                count: MAX_ENTRIES + 1,
                max: MAX_ENTRIES
            })
        );
        let mut buf = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        let n = h.emit(&mut buf).unwrap();
        assert_eq!(MeshHandle::parse(&buf[..n]).unwrap(), h);
    }

    #[test]
    fn documented_ipv6_capacities() {
        let rail = |subnet: u8, host: u8| {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[6] = 0x01;
            a[7] = subnet;
            // An interface id unlike any other host's from its first byte on (SLAAC-like).
            for (i, b) in a[8..].iter_mut().enumerate() {
                *b = host.wrapping_mul(37).wrapping_add(i as u8);
            }
            a
        };
        // Six IPv6 addresses in one /64.
        let mut h = MeshHandle::new(1);
        for i in 0..6u8 {
            h.push(v6(rail(1, 10 + i), 64, i, 1)).unwrap();
        }
        assert_eq!(h.buffer_len(), 125);
        // Five in distinct /64s of one /56, plus one IPv4.
        let mut h = MeshHandle::new(1);
        for i in 0..5u8 {
            h.push(v6(rail(i, 2), 64, i, 1)).unwrap();
        }
        h.push(v4([10, 0, 0, 2], 24, 5, 1)).unwrap();
        assert_eq!(h.buffer_len(), 124);
        // A sixth IPv6 in another /64 does not fit, and the handle is left unchanged.
        let before = h;
        assert_eq!(
            h.push(v6(rail(5, 2), 64, 6, 1)),
            Err(ParseError::TooMany {
                field: "mesh handle bytes",
                count: 143,
                max: NCCL_NET_HANDLE_MAXSIZE
            })
        );
        assert_eq!(h, before);
        // Three unrelated IPv6 and three IPv4.
        let mut h = MeshHandle::new(1);
        for i in 0..3u8 {
            let mut a = [0x20 + i; 16];
            a[1] = 0x55;
            h.push(v6(a, 48, i, 1)).unwrap();
            h.push(v4([172, 16, i, 1], 16, i, 2)).unwrap();
        }
        assert_eq!(h.buffer_len(), 126);
    }

    fn arb_entry() -> impl Strategy<Value = MeshEntry> {
        // A few IPv6 prefixes, so that front coding shares 0 to 16 bytes.
        let v6_prefixes: [[u8; 16]; 3] = [
            [0xfd, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
            [0xfd, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0],
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ];
        let addr = prop_oneof![
            any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            any::<[u8; 16]>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
            (0usize..3, 0usize..=16, any::<[u8; 16]>()).prop_map(move |(p, keep, tail)| {
                let mut a = v6_prefixes[p];
                a[keep..].copy_from_slice(&tail[keep..]);
                IpAddr::V6(Ipv6Addr::from(a))
            }),
        ];
        (
            addr,
            any::<u8>(),
            any::<u8>(),
            0..=MAX_QPN,
            any::<u8>(),
            any::<u16>(),
        )
            .prop_map(|(addr, prefix, nic_index, qpn, gid_index, units)| {
                let max_prefix = if addr.is_ipv4() { 33 } else { 129 };
                MeshEntry {
                    addr,
                    prefix_len: prefix % max_prefix,
                    nic_index,
                    qpn,
                    gid_index,
                    speed_mbps: u32::from(units) * SPEED_UNIT_MBPS,
                }
            })
    }

    proptest! {
        #[test]
        fn round_trip(port in any::<u16>(), entries in proptest::collection::vec(arb_entry(), 0..12)) {
            let mut h = MeshHandle::new(port);
            let mut expected = Vec::new();
            for e in entries {
                let fits = h.len() < MAX_ENTRIES
                    && encoded_len(&[h.entries(), &[e]].concat()) <= NCCL_NET_HANDLE_MAXSIZE;
                prop_assert_eq!(h.push(e).is_ok(), fits);
                if fits {
                    expected.push(e);
                }
            }
            prop_assert_eq!(h.entries(), &expected[..]);
            let mut buf = [0xa5u8; NCCL_NET_HANDLE_MAXSIZE];
            let n = h.emit(&mut buf).unwrap();
            prop_assert_eq!(n, h.buffer_len());
            prop_assert!(n <= NCCL_NET_HANDLE_MAXSIZE);
            prop_assert_eq!(MeshHandle::parse(&buf).unwrap(), h);
            prop_assert_eq!(MeshHandle::parse(&buf[..n]).unwrap(), h);
            for len in 0..n {
                let is_truncated = matches!(
                    MeshHandle::parse(&buf[..len]),
                    Err(ParseError::Truncated { .. })
                );
                prop_assert!(is_truncated);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..160)) {
            // A valid magic and version, so that the entry decoder sees the random bytes.
            let mut bytes = std::vec![0x57, 0x46, 0x4d, 0x48, 0, 1];
            bytes.extend_from_slice(&tail);
            if let Ok(h) = MeshHandle::parse(&bytes) {
                let mut buf = [0u8; NCCL_NET_HANDLE_MAXSIZE];
                let n = h.emit(&mut buf).unwrap();
                prop_assert_eq!(MeshHandle::parse(&buf[..n]).unwrap(), h);
            }
        }
    }
}
