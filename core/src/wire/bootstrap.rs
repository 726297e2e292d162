//! Bootstrap wire formats: the unique id a root hands out, the frames ranks exchange over
//! TCP during rendezvous and afterwards, and the per-rank `PeerInfo` that a communicator
//! all-gathers.
//!
//! Every frame on a bootstrap socket is a [`HeaderRepr`] (magic, version, kind, sender rank, tag,
//! body length) followed by `length` body bytes. Bodies:
//!
//! | kind          | body                                 | direction                     |
//! |---------------|--------------------------------------|-------------------------------|
//! | `Hello`       | [`HelloRepr`]: secret, nranks, purpose | first frame on any connection |
//! | `PeerAddress` | [`SockAddrRepr`]: sender's listen address | rank -> root, and ring all-gather |
//! | `RingInfo`    | [`RingInfoRepr`]: next rank and its address | root -> rank                 |
//! | `Data`        | opaque bytes, matched by (rank, tag) | rank -> rank                  |
//! | `Abort`       | [`AbortRepr`]: culprit, reason, text | anyone -> anyone              |
//! | `Parting`     | empty: a ring step of a teardown's barrier | rank -> next rank        |
//!
//! All integers are big-endian. Views (`*View::new_checked`) validate once; after that no
//! accessor can fail. `Repr::emit` writes into a caller buffer and reports `Truncated` if
//! it is too short, so nothing here panics or allocates.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use zerocopy::byteorder::network_endian::{I32, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{ParseError, prefix};

/// Version of every format in this file; bumped together when any of them changes. Still 1
/// after `Parting` was added (2026-11-28): a frame kind is added, nothing else changes, and
/// a build without it rejects the frame (a protocol error naming the peer); every rank of a
/// job runs one build.
pub const VERSION: u16 = 1;

/// "WFTI": weft unique id.
pub const UNIQUE_ID_MAGIC: u32 = 0x5746_5449;
/// "WFTB": weft bootstrap frame.
pub const FRAME_MAGIC: u32 = 0x5746_5442;
/// "WFTP": weft peer info.
pub const PEER_INFO_MAGIC: u32 = 0x5746_5450;

/// Size of a unique id, the same as `NCCL_UNIQUE_ID_BYTES`, so it fits where an
/// `ncclUniqueId` goes.
pub const UNIQUE_ID_LEN: usize = 128;
/// Length of the shared secret carried in the unique id and proven on every connection.
pub const SECRET_LEN: usize = 16;
/// Largest body a frame may declare (1 GiB): a bound on what a peer can make us allocate.
pub const MAX_BODY_LEN: u32 = 1 << 30;
/// Largest abort text, in bytes.
pub const MAX_ABORT_TEXT: usize = 1024;
/// The rank field of frames sent by the root, which is not a rank.
pub const ROOT_SENDER: u32 = u32::MAX;

/// Writes `raw` at the front of `buf`, returning the number of bytes written.
fn write_prefix<T: IntoBytes + Immutable>(raw: &T, buf: &mut [u8]) -> Result<usize, ParseError> {
    let needed = core::mem::size_of::<T>();
    raw.write_to_prefix(buf)
        .map_err(|_| ParseError::Truncated {
            needed,
            got: buf.len(),
        })?;
    Ok(needed)
}

/// The shared check, against this module's [`VERSION`].
fn check_magic_version(magic: u32, expected: u32, version: u16) -> Result<(), ParseError> {
    super::check_magic_version(magic, expected, version, VERSION)
}

// ---------------------------------------------------------------------------------------
// Socket address
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawSockAddr {
    /// 4 or 6.
    family: u8,
    reserved: u8,
    port: U16,
    /// IPv6 scope id (link-local addresses); zero for IPv4.
    scope_id: U32,
    /// IPv4 in the first 4 bytes (rest zero), or the 16 bytes of IPv6.
    addr: [u8; 16],
}

/// Encoded length of a socket address.
pub const SOCK_ADDR_LEN: usize = core::mem::size_of::<RawSockAddr>();

/// An IPv4 or IPv6 address and port, as carried by unique ids and address frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockAddrRepr(pub SocketAddr);

impl SockAddrRepr {
    fn from_raw(raw: &RawSockAddr, port_field: &'static str) -> Result<Self, ParseError> {
        let port = raw.port.get();
        if port == 0 {
            return Err(ParseError::BadField {
                field: port_field,
                value: 0,
            });
        }
        let addr = match raw.family {
            4 => {
                let [a, b, c, d, ..] = raw.addr;
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port))
            }
            6 => SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(raw.addr),
                port,
                0,
                raw.scope_id.get(),
            )),
            found => return Err(ParseError::BadAddressFamily { found }),
        };
        Ok(SockAddrRepr(addr))
    }

    fn to_raw(self) -> RawSockAddr {
        let (family, scope_id, addr) = match self.0 {
            SocketAddr::V4(v4) => {
                let [a, b, c, d] = v4.ip().octets();
                (4, 0, [a, b, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
            }
            SocketAddr::V6(v6) => (6, v6.scope_id(), v6.ip().octets()),
        };
        RawSockAddr {
            family,
            reserved: 0,
            port: U16::new(self.0.port()),
            scope_id: U32::new(scope_id),
            addr,
        }
    }

    /// Parses an address body (a `PeerAddress` frame).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (raw, rest) = prefix::<RawSockAddr>(bytes)?;
        if !rest.is_empty() {
            return Err(ParseError::BadLength {
                field: "peer address body",
                declared: SOCK_ADDR_LEN,
                actual: bytes.len(),
            });
        }
        Self::from_raw(raw, "peer address port")
    }

    /// Encoded length.
    pub const fn buffer_len(&self) -> usize {
        SOCK_ADDR_LEN
    }

    /// Writes the address; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        write_prefix(&self.to_raw(), buf)
    }
}

// ---------------------------------------------------------------------------------------
// Unique id
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawUniqueId {
    magic: U32,
    version: U16,
    reserved: U16,
    root: RawSockAddr,
    secret: [u8; SECRET_LEN],
    /// Zero; room for later versions without changing the 128-byte size.
    padding: [u8; 80],
}

const _: () = assert!(core::mem::size_of::<RawUniqueId>() == UNIQUE_ID_LEN);

/// A checked view of a unique id: magic, version and address validated.
#[derive(Debug, Clone, Copy)]
pub struct UniqueIdView<'a> {
    raw: &'a RawUniqueId,
}

impl core::fmt::Debug for RawUniqueId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the secret.
        f.debug_struct("RawUniqueId")
            .field("magic", &self.magic.get())
            .finish_non_exhaustive()
    }
}

impl<'a> UniqueIdView<'a> {
    /// Validates length (exactly 128 bytes), magic, version, address family and port.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (raw, rest) = prefix::<RawUniqueId>(bytes)?;
        if !rest.is_empty() {
            return Err(ParseError::BadLength {
                field: "unique id",
                declared: UNIQUE_ID_LEN,
                actual: bytes.len(),
            });
        }
        check_magic_version(raw.magic.get(), UNIQUE_ID_MAGIC, raw.version.get())?;
        SockAddrRepr::from_raw(&raw.root, "unique id root port")?;
        Ok(UniqueIdView { raw })
    }

    /// The root's listening address.
    pub fn root(&self) -> SocketAddr {
        // new_checked parsed this same field, so the fallback is never taken.
        SockAddrRepr::from_raw(&self.raw.root, "unique id root port")
            .map(|a| a.0)
            .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
    }

    /// The shared secret.
    pub fn secret(&self) -> [u8; SECRET_LEN] {
        self.raw.secret
    }
}

/// The parsed unique id.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueIdRepr {
    /// Where the root listens.
    pub root: SocketAddr,
    /// Every connection must present this before anything it sends is trusted.
    pub secret: [u8; SECRET_LEN],
}

impl core::fmt::Debug for UniqueIdRepr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("UniqueIdRepr")
            .field("root", &self.root)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl UniqueIdRepr {
    /// Parses a checked view.
    pub fn parse(view: &UniqueIdView<'_>) -> Self {
        UniqueIdRepr {
            root: view.root(),
            secret: view.secret(),
        }
    }

    /// Always [`UNIQUE_ID_LEN`].
    pub const fn buffer_len(&self) -> usize {
        UNIQUE_ID_LEN
    }

    /// Writes the 128 bytes; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let raw = RawUniqueId {
            magic: U32::new(UNIQUE_ID_MAGIC),
            version: U16::new(VERSION),
            reserved: U16::new(0),
            root: SockAddrRepr(self.root).to_raw(),
            secret: self.secret,
            padding: [0; 80],
        };
        write_prefix(&raw, buf)
    }

    /// The 128 bytes as an array.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_LEN] {
        let mut out = [0u8; UNIQUE_ID_LEN];
        // The array has exactly the encoded length, so emit cannot report Truncated.
        let _ = self.emit(&mut out);
        out
    }
}

// ---------------------------------------------------------------------------------------
// Frame header
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHeader {
    magic: U32,
    version: U16,
    kind: U16,
    rank: U32,
    tag: U32,
    length: U32,
}

/// Encoded length of a frame header.
pub const HEADER_LEN: usize = core::mem::size_of::<RawHeader>();

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum FrameKind {
    /// First frame on every connection: proves the secret and says what the connection is for.
    Hello = 1,
    /// The sender's listening address.
    PeerAddress = 2,
    /// From the root: the next rank in the ring and its address.
    RingInfo = 3,
    /// Opaque bytes for `recv(sender, tag)`.
    Data = 4,
    /// The sender gives up; the body says why and who is at fault.
    Abort = 5,
    /// A ring step of the sender's teardown: only ranks tearing down take part (a rank
    /// still in another exchange that receives one learns that its peer left).
    Parting = 6,
}

impl FrameKind {
    fn from_u16(value: u16) -> Result<Self, ParseError> {
        Ok(match value {
            1 => FrameKind::Hello,
            2 => FrameKind::PeerAddress,
            3 => FrameKind::RingInfo,
            4 => FrameKind::Data,
            5 => FrameKind::Abort,
            6 => FrameKind::Parting,
            _ => {
                return Err(ParseError::BadField {
                    field: "frame kind",
                    value: u64::from(value),
                });
            }
        })
    }
}

/// A checked frame header.
#[derive(Debug, Clone, Copy)]
pub struct HeaderView<'a> {
    raw: &'a RawHeader,
}

impl core::fmt::Debug for RawHeader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawHeader")
            .field("kind", &self.kind.get())
            .field("rank", &self.rank.get())
            .field("tag", &self.tag.get())
            .field("length", &self.length.get())
            .finish_non_exhaustive()
    }
}

impl<'a> HeaderView<'a> {
    /// Validates magic, version, kind and the body length bound. Bytes after the header
    /// (the body) are allowed and ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (raw, _) = prefix::<RawHeader>(bytes)?;
        check_magic_version(raw.magic.get(), FRAME_MAGIC, raw.version.get())?;
        FrameKind::from_u16(raw.kind.get())?;
        let length = raw.length.get();
        if length > MAX_BODY_LEN {
            return Err(ParseError::TooMany {
                field: "frame body length",
                count: length as usize,
                max: MAX_BODY_LEN as usize,
            });
        }
        Ok(HeaderView { raw })
    }

    /// The frame kind (validated).
    pub fn kind(&self) -> FrameKind {
        FrameKind::from_u16(self.raw.kind.get()).unwrap_or(FrameKind::Abort)
    }
    /// The sender's rank, or [`ROOT_SENDER`].
    pub fn rank(&self) -> u32 {
        self.raw.rank.get()
    }
    /// The tag (`Data` frames; zero otherwise).
    pub fn tag(&self) -> u32 {
        self.raw.tag.get()
    }
    /// Body length in bytes (at most [`MAX_BODY_LEN`]).
    pub fn length(&self) -> u32 {
        self.raw.length.get()
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    pub kind: FrameKind,
    pub rank: u32,
    pub tag: u32,
    pub length: u32,
}

impl HeaderRepr {
    /// Parses a checked view.
    pub fn parse(view: &HeaderView<'_>) -> Self {
        HeaderRepr {
            kind: view.kind(),
            rank: view.rank(),
            tag: view.tag(),
            length: view.length(),
        }
    }

    /// Always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; returns the bytes written. A length above [`MAX_BODY_LEN`] is
    /// refused here so that we never send what the peer must reject.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        if self.length > MAX_BODY_LEN {
            return Err(ParseError::TooMany {
                field: "frame body length",
                count: self.length as usize,
                max: MAX_BODY_LEN as usize,
            });
        }
        let raw = RawHeader {
            magic: U32::new(FRAME_MAGIC),
            version: U16::new(VERSION),
            kind: U16::new(self.kind as u16),
            rank: U32::new(self.rank),
            tag: U32::new(self.tag),
            length: U32::new(self.length),
        };
        write_prefix(&raw, buf)
    }

    /// The header as an array.
    pub fn to_bytes(&self) -> Result<[u8; HEADER_LEN], ParseError> {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut out)?;
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------
// Hello
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHello {
    secret: [u8; SECRET_LEN],
    nranks: U32,
    purpose: u8,
    reserved: [u8; 3],
}

/// Encoded length of a hello body.
pub const HELLO_LEN: usize = core::mem::size_of::<RawHello>();

/// What a new connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// A rank checking in with the root.
    Root = 1,
    /// The previous rank of the ring connecting to its next.
    Ring = 2,
    /// A rank opening its point-to-point data connection to another.
    Data = 3,
}

/// The body of a `Hello` frame. It carries the secret itself: compare it in constant time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HelloRepr {
    pub secret: [u8; SECRET_LEN],
    pub nranks: u32,
    pub purpose: Purpose,
}

impl core::fmt::Debug for HelloRepr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HelloRepr")
            .field("nranks", &self.nranks)
            .field("purpose", &self.purpose)
            .finish_non_exhaustive()
    }
}

impl HelloRepr {
    /// Parses a hello body (exactly [`HELLO_LEN`] bytes).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (raw, rest) = prefix::<RawHello>(bytes)?;
        if !rest.is_empty() {
            return Err(ParseError::BadLength {
                field: "hello body",
                declared: HELLO_LEN,
                actual: bytes.len(),
            });
        }
        let purpose = match raw.purpose {
            1 => Purpose::Root,
            2 => Purpose::Ring,
            3 => Purpose::Data,
            other => {
                return Err(ParseError::BadField {
                    field: "hello purpose",
                    value: u64::from(other),
                });
            }
        };
        let nranks = raw.nranks.get();
        if nranks == 0 {
            return Err(ParseError::BadField {
                field: "hello nranks",
                value: 0,
            });
        }
        Ok(HelloRepr {
            secret: raw.secret,
            nranks,
            purpose,
        })
    }

    /// Always [`HELLO_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HELLO_LEN
    }

    /// Writes the body; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let raw = RawHello {
            secret: self.secret,
            nranks: U32::new(self.nranks),
            purpose: self.purpose as u8,
            reserved: [0; 3],
        };
        write_prefix(&raw, buf)
    }
}

/// Compares two secrets in time independent of where they differ, so that a client probing
/// the port learns nothing from how fast it is rejected.
pub fn secrets_match(a: &[u8; SECRET_LEN], b: &[u8; SECRET_LEN]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    // black_box keeps the optimiser from turning the loop into an early-exit comparison.
    core::hint::black_box(diff) == 0
}

// ---------------------------------------------------------------------------------------
// Ring info
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawRingInfo {
    next_rank: U32,
    nranks: U32,
    next_addr: RawSockAddr,
}

/// Encoded length of a ring info body.
pub const RING_INFO_LEN: usize = core::mem::size_of::<RawRingInfo>();

/// The root's answer to a rank: whom to connect to next in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingInfoRepr {
    pub next_rank: u32,
    pub nranks: u32,
    pub next_addr: SocketAddr,
}

impl RingInfoRepr {
    /// Parses a ring info body, checking `next_rank < nranks`.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (raw, rest) = prefix::<RawRingInfo>(bytes)?;
        if !rest.is_empty() {
            return Err(ParseError::BadLength {
                field: "ring info body",
                declared: RING_INFO_LEN,
                actual: bytes.len(),
            });
        }
        let nranks = raw.nranks.get();
        let next_rank = raw.next_rank.get();
        if nranks == 0 {
            return Err(ParseError::BadField {
                field: "ring info nranks",
                value: 0,
            });
        }
        if next_rank >= nranks {
            return Err(ParseError::BadField {
                field: "ring info next rank",
                value: u64::from(next_rank),
            });
        }
        let next_addr = SockAddrRepr::from_raw(&raw.next_addr, "ring info port")?.0;
        Ok(RingInfoRepr {
            next_rank,
            nranks,
            next_addr,
        })
    }

    /// Always [`RING_INFO_LEN`].
    pub const fn buffer_len(&self) -> usize {
        RING_INFO_LEN
    }

    /// Writes the body; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let raw = RawRingInfo {
            next_rank: U32::new(self.next_rank),
            nranks: U32::new(self.nranks),
            next_addr: SockAddrRepr(self.next_addr).to_raw(),
        };
        write_prefix(&raw, buf)
    }
}

// ---------------------------------------------------------------------------------------
// Abort
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawAbort {
    culprit: U32,
    reason: U16,
    reserved: U16,
}

/// Length of the fixed part of an abort body (the text follows).
pub const ABORT_FIXED_LEN: usize = core::mem::size_of::<RawAbort>();
/// `culprit` value meaning "no particular rank".
pub const NO_CULPRIT: u32 = u32::MAX;

/// Why a peer gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum AbortReason {
    /// The user (or the communicator) called abort.
    User = 1,
    /// The root's deadline passed with `culprit` (the lowest missing rank) not checked in.
    MissingRank = 2,
    /// A connection to `culprit` broke or timed out.
    PeerFailed = 3,
    /// Ranks disagree about the job (nranks, duplicate rank).
    Inconsistent = 4,
}

/// The body of an `Abort` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortRepr<'a> {
    /// The rank at fault, if known.
    pub culprit: Option<u32>,
    pub reason: AbortReason,
    /// A human-readable explanation (UTF-8, at most [`MAX_ABORT_TEXT`] bytes).
    pub text: &'a str,
}

impl<'a> AbortRepr<'a> {
    /// Parses an abort body: the fixed part then UTF-8 text up to the end.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (raw, text) = prefix::<RawAbort>(bytes)?;
        let reason = match raw.reason.get() {
            1 => AbortReason::User,
            2 => AbortReason::MissingRank,
            3 => AbortReason::PeerFailed,
            4 => AbortReason::Inconsistent,
            other => {
                return Err(ParseError::BadField {
                    field: "abort reason",
                    value: u64::from(other),
                });
            }
        };
        if text.len() > MAX_ABORT_TEXT {
            return Err(ParseError::TooMany {
                field: "abort text bytes",
                count: text.len(),
                max: MAX_ABORT_TEXT,
            });
        }
        let text = core::str::from_utf8(text).map_err(|e| ParseError::BadField {
            field: "abort text (not UTF-8 at byte)",
            value: e.valid_up_to() as u64,
        })?;
        let culprit = match raw.culprit.get() {
            NO_CULPRIT => None,
            r => Some(r),
        };
        Ok(AbortRepr {
            culprit,
            reason,
            text,
        })
    }

    /// Fixed part plus text.
    pub fn buffer_len(&self) -> usize {
        ABORT_FIXED_LEN.saturating_add(self.text.len())
    }

    /// Writes the body; returns the bytes written. Text longer than [`MAX_ABORT_TEXT`] is
    /// refused (cut it at a char boundary first: see [`truncate_text`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        if self.text.len() > MAX_ABORT_TEXT {
            return Err(ParseError::TooMany {
                field: "abort text bytes",
                count: self.text.len(),
                max: MAX_ABORT_TEXT,
            });
        }
        if self.culprit == Some(NO_CULPRIT) {
            return Err(ParseError::BadField {
                field: "abort culprit",
                value: u64::from(NO_CULPRIT),
            });
        }
        let raw = RawAbort {
            culprit: U32::new(self.culprit.unwrap_or(NO_CULPRIT)),
            reason: U16::new(self.reason as u16),
            reserved: U16::new(0),
        };
        let fixed = write_prefix(&raw, buf)?;
        let total = self.buffer_len();
        let Some(dst) = buf.get_mut(fixed..total) else {
            return Err(ParseError::Truncated {
                needed: total,
                got: buf.len(),
            });
        };
        dst.copy_from_slice(self.text.as_bytes());
        Ok(total)
    }
}

/// `text` cut to at most [`MAX_ABORT_TEXT`] bytes at a char boundary.
pub fn truncate_text(text: &str) -> &str {
    let mut end = text.len().min(MAX_ABORT_TEXT);
    while !text.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    text.get(..end).unwrap_or("")
}

// ---------------------------------------------------------------------------------------
// Peer info
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawPeerInfo {
    magic: U32,
    version: U16,
    flags: U16,
    rank: U32,
    cuda_device: I32,
    nvml_device: I32,
    cuda_comp_cap: U32,
    host_hash: U64,
    pid_hash: U64,
    bus_id: U64,
    shm_dev: U64,
}

/// Encoded length of a peer info.
pub const PEER_INFO_LEN: usize = core::mem::size_of::<RawPeerInfo>();

/// Peer info flag: GPUDirect RDMA is usable from this rank's GPU.
pub const PEER_GDR: u16 = 1 << 0;
/// Peer info flag: the CUDA driver supports cuMem* (VMM) allocation and export.
pub const PEER_CUMEM: u16 = 1 << 1;
/// Peer info flag: the rank runs without a GPU (CPU executor).
pub const PEER_HOST_ONLY: u16 = 1 << 2;
const PEER_FLAGS_KNOWN: u16 = PEER_GDR | PEER_CUMEM | PEER_HOST_ONLY;

/// What each rank tells every other during communicator init (NCCL's `ncclPeerInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfoRepr {
    pub rank: u32,
    /// CUDA device ordinal, -1 for none.
    pub cuda_device: i32,
    /// NVML device index, -1 for none.
    pub nvml_device: i32,
    /// major * 10 + minor, 0 for none.
    pub cuda_comp_cap: u32,
    /// Same value on ranks of one host (and container/namespace).
    pub host_hash: u64,
    /// Same value on ranks of one process.
    pub pid_hash: u64,
    /// PCI bus id in NCCL's integer form (see [`bus_id_from_str`]).
    pub bus_id: u64,
    /// `st_dev` of /dev/shm: SHM works only between ranks that see the same one.
    pub shm_dev: u64,
    /// `PEER_*` bits.
    pub flags: u16,
}

/// A checked peer info.
#[derive(Debug, Clone, Copy)]
pub struct PeerInfoView<'a> {
    raw: &'a RawPeerInfo,
}

impl core::fmt::Debug for RawPeerInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawPeerInfo")
            .field("rank", &self.rank.get())
            .finish_non_exhaustive()
    }
}

impl<'a> PeerInfoView<'a> {
    /// Validates length (exactly [`PEER_INFO_LEN`]), magic, version and flags.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (raw, rest) = prefix::<RawPeerInfo>(bytes)?;
        if !rest.is_empty() {
            return Err(ParseError::BadLength {
                field: "peer info",
                declared: PEER_INFO_LEN,
                actual: bytes.len(),
            });
        }
        check_magic_version(raw.magic.get(), PEER_INFO_MAGIC, raw.version.get())?;
        let flags = raw.flags.get();
        if flags & !PEER_FLAGS_KNOWN != 0 {
            return Err(ParseError::BadField {
                field: "peer info flags",
                value: u64::from(flags),
            });
        }
        Ok(PeerInfoView { raw })
    }

    pub fn rank(&self) -> u32 {
        self.raw.rank.get()
    }
}

impl PeerInfoRepr {
    /// Parses a checked view.
    pub fn parse(view: &PeerInfoView<'_>) -> Self {
        let raw = view.raw;
        PeerInfoRepr {
            rank: raw.rank.get(),
            cuda_device: raw.cuda_device.get(),
            nvml_device: raw.nvml_device.get(),
            cuda_comp_cap: raw.cuda_comp_cap.get(),
            host_hash: raw.host_hash.get(),
            pid_hash: raw.pid_hash.get(),
            bus_id: raw.bus_id.get(),
            shm_dev: raw.shm_dev.get(),
            flags: raw.flags.get(),
        }
    }

    /// Always [`PEER_INFO_LEN`].
    pub const fn buffer_len(&self) -> usize {
        PEER_INFO_LEN
    }

    /// Writes the peer info; returns the bytes written. Unknown flag bits are refused.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        if self.flags & !PEER_FLAGS_KNOWN != 0 {
            return Err(ParseError::BadField {
                field: "peer info flags",
                value: u64::from(self.flags),
            });
        }
        let raw = RawPeerInfo {
            magic: U32::new(PEER_INFO_MAGIC),
            version: U16::new(VERSION),
            flags: U16::new(self.flags),
            rank: U32::new(self.rank),
            cuda_device: I32::new(self.cuda_device),
            nvml_device: I32::new(self.nvml_device),
            cuda_comp_cap: U32::new(self.cuda_comp_cap),
            host_hash: U64::new(self.host_hash),
            pid_hash: U64::new(self.pid_hash),
            bus_id: U64::new(self.bus_id),
            shm_dev: U64::new(self.shm_dev),
        };
        write_prefix(&raw, buf)
    }
}

/// Parses a PCI bus id such as `0000:17:00.0` into NCCL's integer form: the hex digits
/// concatenated (domain, bus, device, function), ignoring `:` and `.`. Case-insensitive;
/// a trailing NUL ends the string (C callers pass fixed buffers).
pub fn bus_id_from_str(text: &[u8]) -> Result<u64, ParseError> {
    let mut value: u64 = 0;
    let mut digits = 0usize;
    for &c in text {
        let digit = match c {
            b'0'..=b'9' => c.wrapping_sub(b'0'),
            b'a'..=b'f' => c.wrapping_sub(b'a').wrapping_add(10),
            b'A'..=b'F' => c.wrapping_sub(b'A').wrapping_add(10),
            b':' | b'.' => continue,
            0 => break,
            other => {
                return Err(ParseError::BadField {
                    field: "bus id character",
                    value: u64::from(other),
                });
            }
        };
        digits = digits.saturating_add(1);
        if digits > 16 {
            return Err(ParseError::TooMany {
                field: "bus id hex digits",
                count: digits,
                max: 16,
            });
        }
        value = (value << 4) | u64::from(digit);
    }
    if digits == 0 {
        return Err(ParseError::BadField {
            field: "bus id (empty)",
            value: 0,
        });
    }
    Ok(value)
}

/// Formats NCCL's integer bus id as `dddd:bb:dd.f` (lower-case, 12 bytes) into a 16-byte
/// NUL-padded buffer, like NCCL's `int64ToBusId`. Returns the buffer and the text length.
/// The domain takes 4 to 8 hex digits; ids of 2^52 and above (a wider domain, which PCI
/// does not have) keep only the low 8 domain digits.
pub fn bus_id_to_str(id: u64) -> ([u8; 16], usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    let domain = id >> 20;
    // The domain takes 4 digits unless it is wider (NCCL prints %04lx); 8 + 8 fills the buffer.
    let domain_digits = {
        let mut n = 4usize;
        while n < 8 && (domain >> (n.saturating_mul(4))) != 0 {
            n = n.saturating_add(1);
        }
        n
    };
    let mut pos = 0usize;
    let mut put = |c: u8, pos: &mut usize| {
        if let Some(slot) = out.get_mut(*pos) {
            *slot = c;
        }
        *pos = pos.saturating_add(1);
    };
    let nibble = |v: u64, i: usize| -> u8 {
        let shift = i.saturating_mul(4);
        let idx = usize::try_from(v.checked_shr(shift as u32).unwrap_or(0) & 0xf).unwrap_or(0);
        HEX.get(idx).copied().unwrap_or(b'0')
    };
    for i in (0..domain_digits).rev() {
        put(nibble(domain, i), &mut pos);
    }
    put(b':', &mut pos);
    put(nibble(id >> 12, 1), &mut pos);
    put(nibble(id >> 12, 0), &mut pos);
    put(b':', &mut pos);
    put(nibble(id >> 4, 1), &mut pos);
    put(nibble(id >> 4, 0), &mut pos);
    put(b'.', &mut pos);
    put(nibble(id, 0), &mut pos);
    (out, pos.min(16))
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn addr_strategy() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), 1u16..)
                .prop_map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port))),
            (any::<[u8; 16]>(), 1u16.., any::<u32>()).prop_map(|(ip, port, scope)| {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))
            }),
        ]
    }

    fn sample_id() -> UniqueIdRepr {
        UniqueIdRepr {
            root: "10.1.2.3:29500".parse().unwrap(),
            secret: [0x11; 16],
        }
    }

    #[test]
    fn unique_id_exact_bytes() {
        let bytes = sample_id().to_bytes();
        assert_eq!(&bytes[..4], b"WFTI");
        assert_eq!(&bytes[4..6], &[0, 1]);
        assert_eq!(&bytes[6..8], &[0, 0]);
        // family 4, reserved, port 29500 = 0x733c, scope 0, 10.1.2.3
        assert_eq!(&bytes[8..12], &[4, 0, 0x73, 0x3c]);
        assert_eq!(&bytes[12..16], &[0, 0, 0, 0]);
        assert_eq!(&bytes[16..20], &[10, 1, 2, 3]);
        assert!(bytes[20..32].iter().all(|&b| b == 0));
        assert_eq!(&bytes[32..48], &[0x11; 16]);
        assert!(bytes[48..].iter().all(|&b| b == 0));
    }

    #[test]
    fn unique_id_every_truncation_and_bad_field() {
        let bytes = sample_id().to_bytes();
        for len in 0..UNIQUE_ID_LEN {
            assert_eq!(
                UniqueIdView::new_checked(&bytes[..len]).unwrap_err(),
                ParseError::Truncated {
                    needed: UNIQUE_ID_LEN,
                    got: len
                }
            );
        }
        let mut long = [0u8; UNIQUE_ID_LEN + 1];
        long[..UNIQUE_ID_LEN].copy_from_slice(&bytes);
        assert!(matches!(
            UniqueIdView::new_checked(&long),
            Err(ParseError::BadLength { .. })
        ));
        let mut bad = bytes;
        bad[0] = b'X';
        assert!(matches!(
            UniqueIdView::new_checked(&bad),
            Err(ParseError::BadMagic { .. })
        ));
        let mut bad = bytes;
        bad[5] = 9;
        assert_eq!(
            UniqueIdView::new_checked(&bad).unwrap_err(),
            ParseError::BadVersion {
                supported: 1,
                found: 9
            }
        );
        let mut bad = bytes;
        bad[8] = 5;
        assert_eq!(
            UniqueIdView::new_checked(&bad).unwrap_err(),
            ParseError::BadAddressFamily { found: 5 }
        );
        let mut bad = bytes;
        bad[10] = 0;
        bad[11] = 0;
        assert_eq!(
            UniqueIdView::new_checked(&bad).unwrap_err(),
            ParseError::BadField {
                field: "unique id root port",
                value: 0
            }
        );
    }

    #[test]
    fn emit_fills_every_byte() {
        // Pre-filled with 0xa5 so an unset field would show.
        let mut buf = [0xa5u8; UNIQUE_ID_LEN];
        sample_id().emit(&mut buf).unwrap();
        assert_eq!(buf, sample_id().to_bytes());
        let mut buf = [0xa5u8; PEER_INFO_LEN];
        let info = PeerInfoRepr {
            rank: 3,
            cuda_device: -1,
            nvml_device: 2,
            cuda_comp_cap: 90,
            host_hash: 1,
            pid_hash: 2,
            bus_id: 0x17000,
            shm_dev: 7,
            flags: PEER_CUMEM,
        };
        info.emit(&mut buf).unwrap();
        assert_eq!(&buf[12..16], &[0xff; 4]);
        assert_eq!(&buf[40..48], &[0, 0, 0, 0, 0, 1, 0x70, 0]);
        assert_eq!(
            PeerInfoRepr::parse(&PeerInfoView::new_checked(&buf).unwrap()),
            info
        );
    }

    #[test]
    fn header_errors() {
        let h = HeaderRepr {
            kind: FrameKind::Data,
            rank: 2,
            tag: 77,
            length: 5,
        };
        let bytes = h.to_bytes().unwrap();
        assert_eq!(
            &bytes,
            b"WFTB\x00\x01\x00\x04\x00\x00\x00\x02\x00\x00\x00\x4d\x00\x00\x00\x05"
        );
        for len in 0..HEADER_LEN {
            assert_eq!(
                HeaderView::new_checked(&bytes[..len]).unwrap_err(),
                ParseError::Truncated {
                    needed: HEADER_LEN,
                    got: len
                }
            );
        }
        let mut bad = bytes;
        bad[7] = 9;
        assert_eq!(
            HeaderView::new_checked(&bad).unwrap_err(),
            ParseError::BadField {
                field: "frame kind",
                value: 9
            }
        );
        let mut bad = bytes;
        bad[16] = 0x40;
        assert!(matches!(
            HeaderView::new_checked(&bad),
            Err(ParseError::TooMany { .. })
        ));
        assert!(
            HeaderRepr {
                length: MAX_BODY_LEN + 1,
                ..h
            }
            .to_bytes()
            .is_err()
        );
    }

    #[test]
    fn body_errors() {
        let hello = HelloRepr {
            secret: [3; 16],
            nranks: 5,
            purpose: Purpose::Ring,
        };
        let mut buf = [0u8; HELLO_LEN];
        hello.emit(&mut buf).unwrap();
        for len in 0..HELLO_LEN {
            assert!(matches!(
                HelloRepr::parse(&buf[..len]),
                Err(ParseError::Truncated { .. })
            ));
        }
        let mut bad = buf;
        bad[20] = 7;
        assert_eq!(
            HelloRepr::parse(&bad).unwrap_err(),
            ParseError::BadField {
                field: "hello purpose",
                value: 7
            }
        );
        let mut bad = buf;
        bad[16..20].fill(0);
        assert!(matches!(
            HelloRepr::parse(&bad),
            Err(ParseError::BadField {
                field: "hello nranks",
                ..
            })
        ));

        let ring = RingInfoRepr {
            next_rank: 4,
            nranks: 5,
            next_addr: "[::1]:9".parse().unwrap(),
        };
        let mut buf = [0u8; RING_INFO_LEN];
        ring.emit(&mut buf).unwrap();
        assert_eq!(RingInfoRepr::parse(&buf).unwrap(), ring);
        let mut bad = buf;
        bad[3] = 5;
        assert!(matches!(
            RingInfoRepr::parse(&bad),
            Err(ParseError::BadField {
                field: "ring info next rank",
                ..
            })
        ));

        let abort = AbortRepr {
            culprit: Some(3),
            reason: AbortReason::MissingRank,
            text: "rank 3 never connected",
        };
        let mut buf = [0u8; 64];
        let n = abort.emit(&mut buf).unwrap();
        assert_eq!(AbortRepr::parse(&buf[..n]).unwrap(), abort);
        let mut bad = buf;
        bad[n - 1] = 0xff;
        assert!(matches!(
            AbortRepr::parse(&bad[..n]),
            Err(ParseError::BadField { .. })
        ));
        assert!(matches!(
            abort.emit(&mut buf[..10]),
            Err(ParseError::Truncated { .. })
        ));
    }

    #[test]
    fn bus_ids() {
        assert_eq!(bus_id_from_str(b"0000:17:00.0").unwrap(), 0x17000);
        assert_eq!(bus_id_from_str(b"0001:AB:1f.3\0\0\0\0").unwrap(), 0x1ab1f3);
        let (s, n) = bus_id_to_str(0x1ab1f3);
        assert_eq!(&s[..n], b"0001:ab:1f.3");
        assert!(bus_id_from_str(b"00:zz").is_err());
        assert!(bus_id_from_str(b"").is_err());
        assert!(bus_id_from_str(b"11112222333344445").is_err());
    }

    #[test]
    fn secrets_compare() {
        assert!(secrets_match(&[1; 16], &[1; 16]));
        let mut b = [1; 16];
        b[15] = 0;
        assert!(!secrets_match(&[1; 16], &b));
    }

    proptest! {
        #[test]
        fn unique_id_round_trip(root in addr_strategy(), secret in any::<[u8; 16]>()) {
            let id = UniqueIdRepr { root, secret };
            let bytes = id.to_bytes();
            prop_assert_eq!(UniqueIdRepr::parse(&UniqueIdView::new_checked(&bytes).unwrap()), id);
        }

        #[test]
        fn header_round_trip(kind in 1u16..=6, rank: u32, tag: u32, length in 0..=MAX_BODY_LEN) {
            let h = HeaderRepr { kind: FrameKind::from_u16(kind).unwrap(), rank, tag, length };
            let bytes = h.to_bytes().unwrap();
            prop_assert_eq!(HeaderRepr::parse(&HeaderView::new_checked(&bytes).unwrap()), h);
        }

        #[test]
        fn peer_info_round_trip(rank: u32, cuda_device: i32, nvml_device: i32, cc: u32,
                                host_hash: u64, pid_hash: u64, bus_id: u64, shm_dev: u64,
                                flags in 0u16..8) {
            let info = PeerInfoRepr { rank, cuda_device, nvml_device, cuda_comp_cap: cc,
                host_hash, pid_hash, bus_id, shm_dev, flags };
            let mut buf = [0u8; PEER_INFO_LEN];
            prop_assert_eq!(info.emit(&mut buf).unwrap(), PEER_INFO_LEN);
            prop_assert_eq!(PeerInfoRepr::parse(&PeerInfoView::new_checked(&buf).unwrap()), info);
        }

        #[test]
        fn bodies_round_trip(secret: [u8; 16], nranks in 1u32.., purpose in 1u8..=3,
                             addr in addr_strategy(), next in 0u32..1000, text in "\\PC{0,200}",
                             culprit in proptest::option::of(0u32..u32::MAX), reason in 1u16..=4) {
            let purpose = [Purpose::Root, Purpose::Ring, Purpose::Data][usize::from(purpose - 1)];
            let hello = HelloRepr { secret, nranks, purpose };
            let mut buf = [0u8; HELLO_LEN];
            hello.emit(&mut buf).unwrap();
            prop_assert_eq!(HelloRepr::parse(&buf).unwrap(), hello);

            let a = SockAddrRepr(addr);
            let mut buf = [0u8; SOCK_ADDR_LEN];
            a.emit(&mut buf).unwrap();
            prop_assert_eq!(SockAddrRepr::parse(&buf).unwrap(), a);

            let ring = RingInfoRepr { next_rank: next, nranks: next + 1, next_addr: addr };
            let mut buf = [0u8; RING_INFO_LEN];
            ring.emit(&mut buf).unwrap();
            prop_assert_eq!(RingInfoRepr::parse(&buf).unwrap(), ring);

            let reason = [AbortReason::User, AbortReason::MissingRank, AbortReason::PeerFailed,
                AbortReason::Inconsistent][usize::from(reason - 1)];
            let abort = AbortRepr { culprit, reason, text: truncate_text(&text) };
            let mut buf = [0u8; ABORT_FIXED_LEN + MAX_ABORT_TEXT];
            let n = abort.emit(&mut buf).unwrap();
            prop_assert_eq!(AbortRepr::parse(&buf[..n]).unwrap(), abort);
        }

        #[test]
        fn bus_id_round_trip(id in 0u64..(1 << 52)) {
            let (s, n) = bus_id_to_str(id);
            prop_assert_eq!(bus_id_from_str(&s[..n]).unwrap(), id);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            let _ = UniqueIdView::new_checked(&bytes);
            let _ = HeaderView::new_checked(&bytes);
            let _ = HelloRepr::parse(&bytes);
            let _ = RingInfoRepr::parse(&bytes);
            let _ = AbortRepr::parse(&bytes);
            let _ = PeerInfoView::new_checked(&bytes);
            let _ = SockAddrRepr::parse(&bytes);
            let _ = bus_id_from_str(&bytes);
        }
    }
}
