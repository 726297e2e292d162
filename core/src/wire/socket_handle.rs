//! The socket NET backend's listen handle: what a listener publishes (through bootstrap) so
//! that a peer can connect to it.
//!
//! It travels inside NCCL's opaque `NCCL_NET_HANDLE_MAXSIZE` (128 byte) handle, so it is
//! fixed-size and small (40 bytes). It carries the listening address, how many data sockets
//! and helper threads the listener expects each connection to bring (both sides must agree,
//! so the listener decides), and a random nonce that every socket of a connection repeats in
//! its hello, so that stray connections to the port are told apart from real ones.
//!
//! ```text
//!  0      magic         u32  "WFSK"
//!  4      version       u16
//!  6      family        u8   4 or 6
//!  7      data_sockets  u8   1..=64
//!  8      threads       u8   1..=16, at most data_sockets
//!  9      reserved      u8   0
//! 10      port          u16  not 0
//! 12      address       [u8; 16]  IPv4: 4 bytes then 12 zero bytes
//! 28      scope_id      u32  IPv6 scope (link-local); 0 for IPv4
//! 32      nonce         u64
//! ```
//!
//! Panic contract: once [`SocketHandle::new_checked`] accepted a buffer, no accessor panics;
//! [`SocketHandleRepr::parse`] and [`SocketHandleRepr::emit`] never panic.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::ParseError;

/// "WFSK": weft socket handle.
pub const MAGIC: u32 = 0x5746_534b;
/// The handle version this build reads and writes.
pub const VERSION: u16 = 1;
/// The most data sockets one connection may use (NCCL's MAX_SOCKETS).
pub const MAX_DATA_SOCKETS: u8 = 64;
/// The most helper threads one connection may use (NCCL's MAX_THREADS).
pub const MAX_THREADS: u8 = 16;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Header {
    magic: U32,
    version: U16,
    family: u8,
    data_sockets: u8,
    threads: u8,
    reserved: u8,
    port: U16,
    address: [u8; 16],
    scope_id: U32,
    nonce: U64,
}

/// Bytes of an encoded handle.
pub const HANDLE_LEN: usize = core::mem::size_of::<Header>();

const _: () = assert!(HANDLE_LEN == 40);
const _: () = assert!(HANDLE_LEN <= 128, "must fit NCCL_NET_HANDLE_MAXSIZE");

/// A checked view over the bytes of a socket listen handle. Trailing bytes beyond
/// [`HANDLE_LEN`] are ignored (NCCL hands plugins the whole 128-byte buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketHandle<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SocketHandle<T> {
    /// Wraps `buffer` without checking it; accessors on an unchecked view of a short or
    /// invalid buffer return defaults (never panic), but only [`Self::new_checked`] promises
    /// meaningful values.
    pub const fn new_unchecked(buffer: T) -> Self {
        SocketHandle { buffer }
    }

    /// Wraps `buffer` after checking length, magic, version and every field's range.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let view = SocketHandle { buffer };
        view.check()?;
        Ok(view)
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn header(&self) -> Option<&Header> {
        Header::ref_from_prefix(self.buffer.as_ref())
            .ok()
            .map(|(h, _)| h)
    }

    /// Checks everything `new_checked` promises; each fault is a distinct error.
    pub fn check(&self) -> Result<(), ParseError> {
        let got = self.buffer.as_ref().len();
        let h = self.header().ok_or(ParseError::Truncated {
            needed: HANDLE_LEN,
            got,
        })?;
        super::check_magic_version(h.magic.get(), MAGIC, h.version.get(), VERSION)?;
        match h.family {
            4 => {
                if h.address
                    .get(4..)
                    .is_some_and(|pad| pad.iter().any(|&b| b != 0))
                {
                    return Err(ParseError::BadField {
                        field: "ipv4 address padding",
                        value: 0,
                    });
                }
                if h.scope_id.get() != 0 {
                    return Err(ParseError::BadField {
                        field: "ipv4 scope_id",
                        value: u64::from(h.scope_id.get()),
                    });
                }
            }
            6 => {}
            found => return Err(ParseError::BadAddressFamily { found }),
        }
        if h.data_sockets == 0 {
            return Err(ParseError::BadField {
                field: "data_sockets",
                value: 0,
            });
        }
        if h.data_sockets > MAX_DATA_SOCKETS {
            return Err(ParseError::TooMany {
                field: "data_sockets",
                count: usize::from(h.data_sockets),
                max: usize::from(MAX_DATA_SOCKETS),
            });
        }
        if h.threads == 0 {
            return Err(ParseError::BadField {
                field: "threads",
                value: 0,
            });
        }
        let max_threads = MAX_THREADS.min(h.data_sockets);
        if h.threads > max_threads {
            return Err(ParseError::TooMany {
                field: "threads",
                count: usize::from(h.threads),
                max: usize::from(max_threads),
            });
        }
        if h.reserved != 0 {
            return Err(ParseError::BadField {
                field: "reserved",
                value: u64::from(h.reserved),
            });
        }
        if h.port.get() == 0 {
            return Err(ParseError::BadField {
                field: "port",
                value: 0,
            });
        }
        Ok(())
    }

    /// The listening address and port.
    pub fn addr(&self) -> SocketAddr {
        let Some(h) = self.header() else {
            return SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        };
        let port = h.port.get();
        if h.family == 6 {
            let ip = Ipv6Addr::from(h.address);
            SocketAddr::V6(SocketAddrV6::new(ip, port, 0, h.scope_id.get()))
        } else {
            let [a, b, c, d, ..] = h.address;
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port))
        }
    }

    /// Data sockets each connection opens (besides its control socket).
    pub fn data_sockets(&self) -> u8 {
        self.header().map_or(0, |h| h.data_sockets)
    }

    /// Helper threads each side runs for one connection.
    pub fn threads(&self) -> u8 {
        self.header().map_or(0, |h| h.threads)
    }

    /// The listener's random nonce, repeated in every hello.
    pub fn nonce(&self) -> u64 {
        self.header().map_or(0, |h| h.nonce.get())
    }
}

/// A parsed socket listen handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketHandleRepr {
    /// Where the listener accepts connections. IPv6 flow info is not carried (always 0).
    pub addr: SocketAddr,
    /// Data sockets per connection, 1..=[`MAX_DATA_SOCKETS`].
    pub data_sockets: u8,
    /// Helper threads per connection side, 1..=min([`MAX_THREADS`], data_sockets).
    pub threads: u8,
    /// Random per-listener nonce.
    pub nonce: u64,
}

impl SocketHandleRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(view: &SocketHandle<T>) -> Result<Self, ParseError> {
        view.check()?;
        Ok(SocketHandleRepr {
            addr: view.addr(),
            data_sockets: view.data_sockets(),
            threads: view.threads(),
            nonce: view.nonce(),
        })
    }

    /// Parses raw bytes (a shorthand for `parse(&SocketHandle::new_checked(bytes)?)`).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, ParseError> {
        Self::parse(&SocketHandle::new_checked(bytes)?)
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HANDLE_LEN
    }

    /// Writes the handle into the first [`HANDLE_LEN`] bytes of `buffer`, leaving the rest
    /// untouched. Fails (writing nothing) if the buffer is too short or a field is out of
    /// range, so that a handle this emits always parses.
    pub fn emit(&self, buffer: &mut [u8]) -> Result<(), ParseError> {
        let got = buffer.len();
        let out = buffer.get_mut(..HANDLE_LEN).ok_or(ParseError::Truncated {
            needed: HANDLE_LEN,
            got,
        })?;
        let (family, address, scope_id) = match self.addr {
            SocketAddr::V4(a) => {
                let [a0, a1, a2, a3] = a.ip().octets();
                let address = [a0, a1, a2, a3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                (4u8, address, 0u32)
            }
            SocketAddr::V6(a) => (6u8, a.ip().octets(), a.scope_id()),
        };
        let header = Header {
            magic: U32::new(MAGIC),
            version: U16::new(VERSION),
            family,
            data_sockets: self.data_sockets,
            threads: self.threads,
            reserved: 0,
            port: U16::new(self.addr.port()),
            address,
            scope_id: U32::new(scope_id),
            nonce: U64::new(self.nonce),
        };
        // Validate before writing so a bad Repr never leaves half a handle behind.
        SocketHandle::new_checked(header.as_bytes())?;
        out.copy_from_slice(header.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[rustfmt::skip]
    static V4_BYTES: [u8; 40] = [
        0x57, 0x46, 0x53, 0x4b, // magic
        0x00, 0x01,             // version
        4, 8, 4, 0,             // family, data_sockets, threads, reserved
        0xc3, 0x51,             // port 50001
        10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // address
        0, 0, 0, 0,             // scope id
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, // nonce
    ];

    fn v4_repr() -> SocketHandleRepr {
        SocketHandleRepr {
            addr: "10.1.2.3:50001".parse().unwrap(),
            data_sockets: 8,
            threads: 4,
            nonce: 0x0123_4567_89ab_cdef,
        }
    }

    #[test]
    fn parse_v4() {
        assert_eq!(SocketHandleRepr::parse_bytes(&V4_BYTES), Ok(v4_repr()));
    }

    #[test]
    fn emit_v4_exact_bytes_and_leaves_tail() {
        let mut buf = [0xa5u8; 128];
        v4_repr().emit(&mut buf).unwrap();
        assert_eq!(&buf[..40], &V4_BYTES[..]);
        assert!(buf[40..].iter().all(|&b| b == 0xa5));
        // A 128-byte NCCL handle buffer with trailing garbage still parses.
        assert_eq!(SocketHandleRepr::parse_bytes(&buf), Ok(v4_repr()));
    }

    #[test]
    fn v6_with_scope() {
        let repr = SocketHandleRepr {
            addr: SocketAddr::V6(SocketAddrV6::new("fe80::1:2".parse().unwrap(), 4242, 0, 7)),
            data_sockets: 1,
            threads: 1,
            nonce: 1,
        };
        let mut buf = [0xa5u8; 40];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf[6], 6);
        assert_eq!(&buf[12..28], &repr_ip6(&repr));
        assert_eq!(&buf[28..32], &[0, 0, 0, 7]);
        assert_eq!(SocketHandleRepr::parse_bytes(&buf), Ok(repr));
    }

    fn repr_ip6(r: &SocketHandleRepr) -> [u8; 16] {
        match r.addr {
            SocketAddr::V6(a) => a.ip().octets(),
            SocketAddr::V4(_) => unreachable!(),
        }
    }

    #[test]
    fn every_truncation_is_truncated() {
        for len in 0..V4_BYTES.len() {
            assert_eq!(
                SocketHandleRepr::parse_bytes(&V4_BYTES[..len]),
                Err(ParseError::Truncated {
                    needed: 40,
                    got: len
                }),
                "len {len}"
            );
        }
    }

    fn with(offset: usize, value: u8) -> [u8; 40] {
        let mut b = V4_BYTES;
        b[offset] = value;
        b
    }

    #[test]
    fn each_bad_field_has_its_own_error() {
        let cases: [([u8; 40], ParseError); 11] = [
            (
                with(0, 0x58),
                ParseError::BadMagic {
                    expected: MAGIC,
                    found: 0x5846_534b,
                },
            ),
            (
                with(5, 2),
                ParseError::BadVersion {
                    supported: 1,
                    found: 2,
                },
            ),
            (with(6, 5), ParseError::BadAddressFamily { found: 5 }),
            (
                with(7, 0),
                ParseError::BadField {
                    field: "data_sockets",
                    value: 0,
                },
            ),
            (
                with(7, 65),
                ParseError::TooMany {
                    field: "data_sockets",
                    count: 65,
                    max: 64,
                },
            ),
            (
                with(8, 0),
                ParseError::BadField {
                    field: "threads",
                    value: 0,
                },
            ),
            (
                with(8, 9),
                ParseError::TooMany {
                    field: "threads",
                    count: 9,
                    max: 8,
                },
            ),
            (
                with(9, 1),
                ParseError::BadField {
                    field: "reserved",
                    value: 1,
                },
            ),
            (
                {
                    let mut b = with(10, 0);
                    b[11] = 0;
                    b
                },
                ParseError::BadField {
                    field: "port",
                    value: 0,
                },
            ),
            (
                with(20, 1),
                ParseError::BadField {
                    field: "ipv4 address padding",
                    value: 0,
                },
            ),
            (
                with(31, 3),
                ParseError::BadField {
                    field: "ipv4 scope_id",
                    value: 3,
                },
            ),
        ];
        for (bytes, err) in cases {
            assert_eq!(SocketHandleRepr::parse_bytes(&bytes), Err(err));
        }
    }

    #[test]
    fn threads_capped_by_max_threads() {
        let mut b = with(7, 64);
        b[8] = 17;
        assert_eq!(
            SocketHandleRepr::parse_bytes(&b),
            Err(ParseError::TooMany {
                field: "threads",
                count: 17,
                max: 16
            })
        );
        b[8] = 16;
        assert!(SocketHandleRepr::parse_bytes(&b).is_ok());
    }

    #[test]
    fn emit_rejects_bad_repr_and_short_buffer() {
        let mut buf = [0xa5u8; 40];
        let bad = SocketHandleRepr {
            threads: 9,
            ..v4_repr()
        };
        assert!(bad.emit(&mut buf).is_err());
        assert!(buf.iter().all(|&b| b == 0xa5), "nothing written");
        assert_eq!(
            v4_repr().emit(&mut buf[..39]),
            Err(ParseError::Truncated {
                needed: 40,
                got: 39
            })
        );
    }

    #[test]
    fn unchecked_view_of_short_buffer_does_not_panic() {
        let v = SocketHandle::new_unchecked(&V4_BYTES[..3]);
        assert_eq!(v.data_sockets(), 0);
        assert_eq!(v.threads(), 0);
        assert_eq!(v.nonce(), 0);
        assert_eq!(v.addr().port(), 0);
    }

    fn arb_repr() -> impl Strategy<Value = SocketHandleRepr> {
        let addr = prop_oneof![
            (any::<[u8; 4]>(), 1..=u16::MAX)
                .prop_map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(ip.into(), port))),
            (any::<[u8; 16]>(), 1..=u16::MAX, any::<u32>()).prop_map(|(ip, port, scope)| {
                SocketAddr::V6(SocketAddrV6::new(ip.into(), port, 0, scope))
            }),
        ];
        (addr, 1..=MAX_DATA_SOCKETS, any::<u64>()).prop_flat_map(|(addr, socks, nonce)| {
            (1..=MAX_THREADS.min(socks)).prop_map(move |threads| SocketHandleRepr {
                addr,
                data_sockets: socks,
                threads,
                nonce,
            })
        })
    }

    proptest! {
        #[test]
        fn roundtrip(repr in arb_repr()) {
            let mut buf = [0u8; 128];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(SocketHandleRepr::parse_bytes(&buf), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(repr) = SocketHandleRepr::parse_bytes(&bytes) {
                let mut buf = [0u8; 40];
                repr.emit(&mut buf).unwrap();
                prop_assert_eq!(&buf[..], &bytes[..40]);
            }
        }
    }
}
