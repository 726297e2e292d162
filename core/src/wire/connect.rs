//! Connect infos of the P2P, SHM, NET and IB transports.
//!
//! During a connection handshake each side's setup produces a connect info, the peer's
//! connect step consumes it (NCCL's `ncclConnect` blob, exchanged through bootstrap). Each
//! transport has its own format with its own magic, so that a blob handed to the wrong
//! transport fails loudly instead of being misread. All integers are big-endian; every
//! format starts with a 4-byte magic and a 2-byte version ([`VERSION`]).
//!
//! Bytes after the end of a format are ignored (NCCL's blob is larger than any of them).
//!
//! # P2P ([`P2pConnectInfo`], magic [`P2P_MAGIC`] `"WP2P"`)
//!
//! | offset | size | field                                                      |
//! |-------:|-----:|------------------------------------------------------------|
//! |      0 |    4 | magic                                                      |
//! |      4 |    2 | version                                                    |
//! |      6 |    1 | mode: 0 write, 1 read ([`P2pMode`])                       |
//! |      7 |    1 | export kind: 0 pointer, 1 CUDA IPC, 2 cuMem fd, 3 cuMem fabric |
//! |      8 |    8 | buffer size in bytes                                       |
//! |     16 |    8 | offset of the buffer inside the exported allocation        |
//! |     24 |    n | the export, by kind (below)                                |
//!
//! | kind | n  | export                                                            |
//! |-----:|---:|--------------------------------------------------------------------|
//! |    0 |  8 | device address (same process)                                      |
//! |    1 | 64 | `cudaIpcMemHandle_t` bytes                                         |
//! |    2 |  8 | pid (4) of the exporting process, then its file descriptor (4, signed, not negative) |
//! |    3 | 64 | `CUmemFabricHandle` bytes                                          |
//!
//! # SHM ([`ShmConnectInfo`], magic [`SHM_MAGIC`] `"WSHM"`), 22 bytes
//!
//! | offset | size | field                                  |
//! |-------:|-----:|----------------------------------------|
//! |      0 |    4 | magic                                  |
//! |      4 |    2 | version                                |
//! |      6 |    8 | segment id                             |
//! |     14 |    8 | segment size in bytes (not zero)       |
//!
//! # NET ([`NetConnectInfo`], magic [`NET_MAGIC`] `"WNET"`), 7 + length bytes
//!
//! | offset | size   | field                                                   |
//! |-------:|-------:|---------------------------------------------------------|
//! |      0 |      4 | magic                                                   |
//! |      4 |      2 | version                                                 |
//! |      6 |      1 | handle length, at most [`NET_HANDLE_MAXSIZE`] (128)     |
//! |      7 | length | the NET backend's listen handle, opaque                 |
//!
//! # IB queue pair ([`IbQpInfo`], magic [`IB_QP_MAGIC`] `"WIBQ"`), 45 bytes
//!
//! | offset | size | field                                         |
//! |-------:|-----:|-----------------------------------------------|
//! |      0 |    4 | magic                                         |
//! |      4 |    2 | version                                       |
//! |      6 |    2 | LID (0 on RoCE)                               |
//! |      8 |   16 | GID                                           |
//! |     24 |    4 | QP number (at most 2^24 - 1)                  |
//! |     28 |    4 | initial packet sequence number (at most 2^24 - 1) |
//! |     32 |    1 | path MTU as `ibv_mtu` (1 = 256 … 5 = 4096)    |
//! |     33 |    8 | remote FIFO address                           |
//! |     41 |    4 | remote FIFO rkey                              |
//!
//! # Panics
//!
//! None: each view's `new_checked` validates every field, so its accessors and the
//! `from_view` of each `Repr` are total.

use zerocopy::byteorder::network_endian::{I32, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::mesh_handle::NCCL_NET_HANDLE_MAXSIZE;
use super::{ParseError, prefix};

/// The version of every format in this module.
pub const VERSION: u16 = 1;
/// `"WP2P"`.
pub const P2P_MAGIC: u32 = 0x5750_3250;
/// `"WSHM"`.
pub const SHM_MAGIC: u32 = 0x5753_484d;
/// `"WNET"`.
pub const NET_MAGIC: u32 = 0x574e_4554;
/// `"WIBQ"`.
pub const IB_QP_MAGIC: u32 = 0x5749_4251;
/// The size of a `cudaIpcMemHandle_t`.
pub const CUDA_IPC_HANDLE_LEN: usize = 64;
/// The size of a `CUmemFabricHandle`.
pub const CU_MEM_FABRIC_HANDLE_LEN: usize = 64;
/// The largest NET listen handle carried: NCCL's `NCCL_NET_HANDLE_MAXSIZE`.
pub const NET_HANDLE_MAXSIZE: usize = NCCL_NET_HANDLE_MAXSIZE;
/// The largest InfiniBand QP number and packet sequence number (24 bits).
pub const MAX_IB_24BIT: u32 = 0x00ff_ffff;

/// The longest encoding of any connect info in this module (a NET info carrying a full
/// 128-byte handle); a slot of this many bytes holds every format.
pub const MAX_CONNECT_INFO_LEN: usize = NET_FIXED_LEN + NET_HANDLE_MAXSIZE;

const _: () = assert!(
    MAX_CONNECT_INFO_LEN >= P2P_FIXED_LEN + CUDA_IPC_HANDLE_LEN
        && MAX_CONNECT_INFO_LEN >= P2P_FIXED_LEN + CU_MEM_FABRIC_HANDLE_LEN
        && MAX_CONNECT_INFO_LEN >= SHM_LEN
        && MAX_CONNECT_INFO_LEN >= IB_QP_LEN
);

fn check_preamble(magic: U32, version: U16, expected: u32) -> Result<(), ParseError> {
    super::check_magic_version(magic.get(), expected, version.get(), VERSION)
}

/// The first `len` bytes of `rest`, which starts `fixed_len` bytes into the message.
fn take_tail(rest: &[u8], fixed_len: usize, len: usize) -> Result<&[u8], ParseError> {
    rest.get(..len).ok_or(ParseError::Truncated {
        needed: fixed_len.saturating_add(len),
        got: fixed_len.saturating_add(rest.len()),
    })
}

/// Writes `parts` back to back at the start of `buf`; returns the total length.
fn write_parts(buf: &mut [u8], parts: &[&[u8]]) -> Result<usize, ParseError> {
    let needed = parts.iter().fold(0usize, |n, p| n.saturating_add(p.len()));
    let got = buf.len();
    let out = buf
        .get_mut(..needed)
        .ok_or(ParseError::Truncated { needed, got })?;
    let mut at = 0usize;
    for part in parts {
        let end = at.saturating_add(part.len());
        // In range: `out` is the sum of the parts' lengths long.
        for (d, s) in out
            .get_mut(at..end)
            .unwrap_or(&mut [])
            .iter_mut()
            .zip(*part)
        {
            *d = *s;
        }
        at = end;
    }
    Ok(needed)
}

fn copy_array<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    for (d, s) in out.iter_mut().zip(src) {
        *d = *s;
    }
    out
}

// ---------------------------------------------------------------------------------------
// P2P
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct P2pFixed {
    magic: U32,
    version: U16,
    mode: u8,
    export_kind: u8,
    size: U64,
    offset: U64,
}

const P2P_FIXED_LEN: usize = size_of::<P2pFixed>();
const _: () = assert!(P2P_FIXED_LEN == 24);

const EXPORT_POINTER: u8 = 0;
const EXPORT_CUDA_IPC: u8 = 1;
const EXPORT_CU_MEM_FD: u8 = 2;
const EXPORT_CU_MEM_FABRIC: u8 = 3;

/// Which side moves the data of a P2P connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pMode {
    /// The sender writes into the receiver's buffer (the receiver exports it).
    Write,
    /// The receiver reads from the sender's buffer (the sender exports it).
    Read,
}

/// How the peer reaches the exported buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pExport {
    /// Both ranks live in one process: the buffer's device address.
    Pointer {
        /// The device address.
        addr: u64,
    },
    /// A legacy CUDA IPC handle (`cudaIpcMemHandle_t`).
    CudaIpc {
        /// The handle's bytes.
        handle: [u8; CUDA_IPC_HANDLE_LEN],
    },
    /// A cuMem allocation exported as a POSIX file descriptor, valid in the exporting
    /// process; the importer duplicates it (`pidfd_getfd`) before
    /// `cuMemImportFromShareableHandle`.
    CuMemFd {
        /// The exporting process.
        pid: u32,
        /// The descriptor in that process; never negative.
        fd: i32,
    },
    /// A cuMem allocation exported as a fabric handle (`CUmemFabricHandle`).
    CuMemFabric {
        /// The handle's bytes.
        handle: [u8; CU_MEM_FABRIC_HANDLE_LEN],
    },
}

impl P2pExport {
    fn kind(&self) -> u8 {
        match self {
            P2pExport::Pointer { .. } => EXPORT_POINTER,
            P2pExport::CudaIpc { .. } => EXPORT_CUDA_IPC,
            P2pExport::CuMemFd { .. } => EXPORT_CU_MEM_FD,
            P2pExport::CuMemFabric { .. } => EXPORT_CU_MEM_FABRIC,
        }
    }

    fn payload_len(kind: u8) -> Option<usize> {
        match kind {
            EXPORT_POINTER | EXPORT_CU_MEM_FD => Some(8),
            EXPORT_CUDA_IPC => Some(CUDA_IPC_HANDLE_LEN),
            EXPORT_CU_MEM_FABRIC => Some(CU_MEM_FABRIC_HANDLE_LEN),
            _ => None,
        }
    }

    /// Decodes a payload whose kind and length were checked.
    fn decode(kind: u8, payload: &[u8]) -> Result<Self, ParseError> {
        let word = |at: usize| {
            payload
                .get(at..at.saturating_add(4))
                .map_or(0, |b| u32::from_be_bytes(copy_array(b)))
        };
        match kind {
            EXPORT_POINTER => Ok(P2pExport::Pointer {
                addr: u64::from_be_bytes(copy_array(payload)),
            }),
            EXPORT_CUDA_IPC => Ok(P2pExport::CudaIpc {
                handle: copy_array(payload),
            }),
            EXPORT_CU_MEM_FD => {
                let fd = i32::from_be_bytes(word(4).to_be_bytes());
                if fd < 0 {
                    return Err(ParseError::BadField {
                        field: "p2p fd",
                        // The field's 32 bits, as sent.
                        value: u64::from(word(4)),
                    });
                }
                Ok(P2pExport::CuMemFd { pid: word(0), fd })
            }
            EXPORT_CU_MEM_FABRIC => Ok(P2pExport::CuMemFabric {
                handle: copy_array(payload),
            }),
            found => Err(ParseError::BadField {
                field: "p2p export kind",
                value: u64::from(found),
            }),
        }
    }
}

/// A validated P2P connect info in a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pConnectInfoView<'a> {
    repr: P2pConnectInfo,
    bytes: &'a [u8],
}

impl<'a> P2pConnectInfoView<'a> {
    /// Validates `bytes` as a P2P connect info; bytes after its end are ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (fixed, rest) = prefix::<P2pFixed>(bytes)?;
        check_preamble(fixed.magic, fixed.version, P2P_MAGIC)?;
        let mode = match fixed.mode {
            0 => P2pMode::Write,
            1 => P2pMode::Read,
            found => {
                return Err(ParseError::BadField {
                    field: "p2p mode",
                    value: u64::from(found),
                });
            }
        };
        let payload_len =
            P2pExport::payload_len(fixed.export_kind).ok_or(ParseError::BadField {
                field: "p2p export kind",
                value: u64::from(fixed.export_kind),
            })?;
        let payload = take_tail(rest, P2P_FIXED_LEN, payload_len)?;
        let export = P2pExport::decode(fixed.export_kind, payload)?;
        let len = P2P_FIXED_LEN.saturating_add(payload_len);
        Ok(P2pConnectInfoView {
            repr: P2pConnectInfo {
                mode,
                size: fixed.size.get(),
                offset: fixed.offset.get(),
                export,
            },
            bytes: bytes.get(..len).unwrap_or(bytes),
        })
    }

    /// Read or write mode.
    pub fn mode(&self) -> P2pMode {
        self.repr.mode
    }
    /// The buffer size in bytes.
    pub fn size(&self) -> u64 {
        self.repr.size
    }
    /// The buffer's offset inside the exported allocation.
    pub fn offset(&self) -> u64 {
        self.repr.offset
    }
    /// How to reach the buffer.
    pub fn export(&self) -> P2pExport {
        self.repr.export
    }
    /// The encoded connect info, without trailing bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// What a P2P peer needs to map the buffer it reads from or writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pConnectInfo {
    /// Which side moves the data.
    pub mode: P2pMode,
    /// The buffer size in bytes.
    pub size: u64,
    /// The buffer's offset inside the exported allocation.
    pub offset: u64,
    /// How to reach the allocation.
    pub export: P2pExport,
}

impl P2pConnectInfo {
    /// Parses a P2P connect info from the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        P2pConnectInfoView::new_checked(bytes).map(|view| Self::from_view(&view))
    }

    /// The connect info a checked view holds.
    pub fn from_view(view: &P2pConnectInfoView<'_>) -> Self {
        view.repr
    }

    /// The number of bytes [`P2pConnectInfo::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        P2P_FIXED_LEN.saturating_add(P2pExport::payload_len(self.export.kind()).unwrap_or(0))
    }

    /// Writes the connect info at the start of `buf`; returns its length. Fails with
    /// `BadField` for a negative fd and `Truncated` when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let fixed = P2pFixed {
            magic: U32::new(P2P_MAGIC),
            version: U16::new(VERSION),
            mode: match self.mode {
                P2pMode::Write => 0,
                P2pMode::Read => 1,
            },
            export_kind: self.export.kind(),
            size: U64::new(self.size),
            offset: U64::new(self.offset),
        };
        let mut word = [0u8; 8];
        let payload: &[u8] = match &self.export {
            P2pExport::Pointer { addr } => {
                word = addr.to_be_bytes();
                &word
            }
            P2pExport::CudaIpc { handle } => handle,
            P2pExport::CuMemFd { pid, fd } => {
                if *fd < 0 {
                    return Err(ParseError::BadField {
                        field: "p2p fd",
                        value: u64::from(u32::from_be_bytes(fd.to_be_bytes())),
                    });
                }
                for (d, s) in word
                    .iter_mut()
                    .zip(pid.to_be_bytes().iter().chain(I32::new(*fd).as_bytes()))
                {
                    *d = *s;
                }
                &word
            }
            P2pExport::CuMemFabric { handle } => handle,
        };
        write_parts(buf, &[fixed.as_bytes(), payload])
    }
}

// ---------------------------------------------------------------------------------------
// SHM
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct ShmFixed {
    magic: U32,
    version: U16,
    segment: U64,
    size: U64,
}

const SHM_LEN: usize = size_of::<ShmFixed>();
const _: () = assert!(SHM_LEN == 22);

/// A validated SHM connect info in a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConnectInfoView<'a> {
    repr: ShmConnectInfo,
    bytes: &'a [u8],
}

impl<'a> ShmConnectInfoView<'a> {
    /// Validates `bytes` as an SHM connect info; bytes after its end are ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (fixed, _) = prefix::<ShmFixed>(bytes)?;
        check_preamble(fixed.magic, fixed.version, SHM_MAGIC)?;
        if fixed.size.get() == 0 {
            return Err(ParseError::BadField {
                field: "shm size",
                value: 0,
            });
        }
        Ok(ShmConnectInfoView {
            repr: ShmConnectInfo {
                segment: fixed.segment.get(),
                size: fixed.size.get(),
            },
            bytes: fixed.as_bytes(),
        })
    }
    /// The segment id.
    pub fn segment(&self) -> u64 {
        self.repr.segment
    }
    /// The segment size in bytes.
    pub fn size(&self) -> u64 {
        self.repr.size
    }
    /// The encoded connect info, without trailing bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The shared-memory segment a SHM peer maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConnectInfo {
    /// Names the segment (the SHM transport derives the path from it).
    pub segment: u64,
    /// The segment size in bytes; not zero.
    pub size: u64,
}

impl ShmConnectInfo {
    /// Parses an SHM connect info from the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        ShmConnectInfoView::new_checked(bytes).map(|view| Self::from_view(&view))
    }

    /// The connect info a checked view holds.
    pub fn from_view(view: &ShmConnectInfoView<'_>) -> Self {
        view.repr
    }

    /// The number of bytes [`ShmConnectInfo::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        SHM_LEN
    }

    /// Writes the connect info at the start of `buf`; returns its length. Fails with
    /// `BadField` for a zero size and `Truncated` when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        if self.size == 0 {
            return Err(ParseError::BadField {
                field: "shm size",
                value: 0,
            });
        }
        let fixed = ShmFixed {
            magic: U32::new(SHM_MAGIC),
            version: U16::new(VERSION),
            segment: U64::new(self.segment),
            size: U64::new(self.size),
        };
        write_parts(buf, &[fixed.as_bytes()])
    }
}

// ---------------------------------------------------------------------------------------
// NET
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct NetFixed {
    magic: U32,
    version: U16,
    len: u8,
}

const NET_FIXED_LEN: usize = size_of::<NetFixed>();
const _: () = assert!(NET_FIXED_LEN == 7);

/// A validated NET connect info in a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConnectInfoView<'a> {
    handle: &'a [u8],
    bytes: &'a [u8],
}

impl<'a> NetConnectInfoView<'a> {
    /// Validates `bytes` as a NET connect info; bytes after its end are ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (fixed, rest) = prefix::<NetFixed>(bytes)?;
        check_preamble(fixed.magic, fixed.version, NET_MAGIC)?;
        let len = usize::from(fixed.len);
        if len > NET_HANDLE_MAXSIZE {
            return Err(ParseError::TooMany {
                field: "net handle bytes",
                count: len,
                max: NET_HANDLE_MAXSIZE,
            });
        }
        let handle = take_tail(rest, NET_FIXED_LEN, len)?;
        let total = NET_FIXED_LEN.saturating_add(len);
        Ok(NetConnectInfoView {
            handle,
            bytes: bytes.get(..total).unwrap_or(bytes),
        })
    }
    /// The backend's listen handle.
    pub fn handle(&self) -> &'a [u8] {
        self.handle
    }
    /// The encoded connect info, without trailing bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// A NET backend's listen handle, carried opaquely (up to [`NET_HANDLE_MAXSIZE`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConnectInfo {
    len: u8,
    /// `handle[..len]` is the handle; the rest stays zero so that equality compares only it.
    handle: [u8; NET_HANDLE_MAXSIZE],
}

impl NetConnectInfo {
    /// Wraps a listen handle; `TooMany` if it is longer than [`NET_HANDLE_MAXSIZE`].
    pub fn new(handle: &[u8]) -> Result<Self, ParseError> {
        let too_long = ParseError::TooMany {
            field: "net handle bytes",
            count: handle.len(),
            max: NET_HANDLE_MAXSIZE,
        };
        if handle.len() > NET_HANDLE_MAXSIZE {
            return Err(too_long);
        }
        Ok(NetConnectInfo {
            len: u8::try_from(handle.len()).map_err(|_| too_long)?,
            handle: copy_array(handle),
        })
    }

    /// The listen handle.
    pub fn handle(&self) -> &[u8] {
        self.handle.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Parses a NET connect info from the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        NetConnectInfoView::new_checked(bytes).map(|view| Self::from_view(&view))
    }

    /// The connect info a checked view holds.
    pub fn from_view(view: &NetConnectInfoView<'_>) -> Self {
        // The view checked the length; `copy_array` takes at most the capacity anyway.
        NetConnectInfo {
            len: u8::try_from(view.handle().len()).unwrap_or(0),
            handle: copy_array(view.handle()),
        }
    }

    /// The number of bytes [`NetConnectInfo::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        NET_FIXED_LEN.saturating_add(usize::from(self.len))
    }

    /// Writes the connect info at the start of `buf`; returns its length, or `Truncated`
    /// when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let fixed = NetFixed {
            magic: U32::new(NET_MAGIC),
            version: U16::new(VERSION),
            len: self.len,
        };
        write_parts(buf, &[fixed.as_bytes(), self.handle()])
    }
}

// ---------------------------------------------------------------------------------------
// IB queue pair
// ---------------------------------------------------------------------------------------

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct IbQpFixed {
    magic: U32,
    version: U16,
    lid: U16,
    gid: [u8; 16],
    qpn: U32,
    psn: U32,
    mtu: u8,
    fifo_addr: U64,
    fifo_rkey: U32,
}

const IB_QP_LEN: usize = size_of::<IbQpFixed>();
const _: () = assert!(IB_QP_LEN == 45);

/// An InfiniBand path MTU, numbered as verbs' `enum ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum IbMtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl IbMtu {
    /// From the `ibv_mtu` value (1 to 5).
    pub fn from_ibv(value: u8) -> Option<Self> {
        match value {
            1 => Some(IbMtu::Mtu256),
            2 => Some(IbMtu::Mtu512),
            3 => Some(IbMtu::Mtu1024),
            4 => Some(IbMtu::Mtu2048),
            5 => Some(IbMtu::Mtu4096),
            _ => None,
        }
    }

    /// The `ibv_mtu` value.
    pub fn to_ibv(self) -> u8 {
        self as u8
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            IbMtu::Mtu256 => 256,
            IbMtu::Mtu512 => 512,
            IbMtu::Mtu1024 => 1024,
            IbMtu::Mtu2048 => 2048,
            IbMtu::Mtu4096 => 4096,
        }
    }
}

/// A validated IB queue-pair info in a byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbQpInfoView<'a> {
    repr: IbQpInfo,
    bytes: &'a [u8],
}

impl<'a> IbQpInfoView<'a> {
    /// Validates `bytes` as an IB queue-pair info; bytes after its end are ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let (fixed, _) = prefix::<IbQpFixed>(bytes)?;
        check_preamble(fixed.magic, fixed.version, IB_QP_MAGIC)?;
        for (field, value) in [("ib qpn", fixed.qpn.get()), ("ib psn", fixed.psn.get())] {
            if value > MAX_IB_24BIT {
                return Err(ParseError::BadField {
                    field,
                    value: u64::from(value),
                });
            }
        }
        let mtu = IbMtu::from_ibv(fixed.mtu).ok_or(ParseError::BadField {
            field: "ib mtu",
            value: u64::from(fixed.mtu),
        })?;
        Ok(IbQpInfoView {
            repr: IbQpInfo {
                lid: fixed.lid.get(),
                gid: fixed.gid,
                qpn: fixed.qpn.get(),
                psn: fixed.psn.get(),
                mtu,
                fifo_addr: fixed.fifo_addr.get(),
                fifo_rkey: fixed.fifo_rkey.get(),
            },
            bytes: fixed.as_bytes(),
        })
    }
    /// The LID (0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.repr.lid
    }
    /// The GID.
    pub fn gid(&self) -> [u8; 16] {
        self.repr.gid
    }
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.repr.qpn
    }
    /// The initial packet sequence number.
    pub fn psn(&self) -> u32 {
        self.repr.psn
    }
    /// The path MTU.
    pub fn mtu(&self) -> IbMtu {
        self.repr.mtu
    }
    /// The address of the remote FIFO.
    pub fn fifo_addr(&self) -> u64 {
        self.repr.fifo_addr
    }
    /// The rkey of the remote FIFO.
    pub fn fifo_rkey(&self) -> u32 {
        self.repr.fifo_rkey
    }
    /// The encoded info, without trailing bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// What an IB peer needs to bring its queue pair to RTR/RTS against ours, and where to
/// RDMA-write the receive FIFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbQpInfo {
    /// The port's LID; 0 on RoCE.
    pub lid: u16,
    /// The GID (RoCE: the address at the chosen GID index).
    pub gid: [u8; 16],
    /// The QP number: at most [`MAX_IB_24BIT`].
    pub qpn: u32,
    /// The initial packet sequence number: at most [`MAX_IB_24BIT`].
    pub psn: u32,
    /// The path MTU.
    pub mtu: IbMtu,
    /// The address of the remote FIFO.
    pub fifo_addr: u64,
    /// The rkey of the remote FIFO.
    pub fifo_rkey: u32,
}

impl IbQpInfo {
    /// Parses an IB queue-pair info from the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        IbQpInfoView::new_checked(bytes).map(|view| Self::from_view(&view))
    }

    /// The info a checked view holds.
    pub fn from_view(view: &IbQpInfoView<'_>) -> Self {
        view.repr
    }

    /// The number of bytes [`IbQpInfo::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        IB_QP_LEN
    }

    /// Writes the info at the start of `buf`; returns its length. Fails with `BadField` for
    /// a QP number or PSN over 24 bits and `Truncated` when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        for (field, value) in [("ib qpn", self.qpn), ("ib psn", self.psn)] {
            if value > MAX_IB_24BIT {
                return Err(ParseError::BadField {
                    field,
                    value: u64::from(value),
                });
            }
        }
        let fixed = IbQpFixed {
            magic: U32::new(IB_QP_MAGIC),
            version: U16::new(VERSION),
            lid: U16::new(self.lid),
            gid: self.gid,
            qpn: U32::new(self.qpn),
            psn: U32::new(self.psn),
            mtu: self.mtu.to_ibv(),
            fifo_addr: U64::new(self.fifo_addr),
            fifo_rkey: U32::new(self.fifo_rkey),
        };
        write_parts(buf, &[fixed.as_bytes()])
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// Every proper prefix of a valid encoding is `Truncated`, with the right counts.
    fn assert_every_truncation<T: core::fmt::Debug>(
        bytes: &[u8],
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) {
        for len in 0..bytes.len() {
            match parse(&bytes[..len]) {
                Err(ParseError::Truncated { needed, got }) => {
                    assert_eq!(got, len);
                    assert!(
                        needed > len && needed <= bytes.len(),
                        "{len}: needs {needed}"
                    );
                }
                other => panic!("length {len}: {other:?}"),
            }
        }
    }

    /// Emit into every too-short buffer is `Truncated`; into a 0xa5-filled one it writes
    /// exactly `expected` and leaves the rest.
    fn assert_emit(
        expected: &[u8],
        len: usize,
        emit: impl Fn(&mut [u8]) -> Result<usize, ParseError>,
    ) {
        assert_eq!(len, expected.len());
        for short in 0..expected.len() {
            let mut buf = std::vec![0xa5u8; short];
            assert_eq!(
                emit(&mut buf),
                Err(ParseError::Truncated {
                    needed: expected.len(),
                    got: short
                })
            );
        }
        let mut buf = [0xa5u8; 256];
        assert_eq!(emit(&mut buf), Ok(expected.len()));
        assert_eq!(&buf[..expected.len()], expected);
        assert!(buf[expected.len()..].iter().all(|&b| b == 0xa5));
    }

    fn assert_magic_and_version<T: core::fmt::Debug + PartialEq>(
        bytes: &[u8],
        magic: u32,
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) {
        let mut b = bytes.to_vec();
        b[3] ^= 0x01;
        assert_eq!(
            parse(&b),
            Err(ParseError::BadMagic {
                expected: magic,
                found: magic ^ 1
            })
        );
        let mut b = bytes.to_vec();
        b[4] = 0x01;
        assert_eq!(
            parse(&b),
            Err(ParseError::BadVersion {
                supported: VERSION,
                found: 0x0101
            })
        );
    }

    fn bad_field(field: &'static str, value: u64) -> ParseError {
        ParseError::BadField { field, value }
    }

    // --- P2P ---

    #[rustfmt::skip]
    const P2P_FD_BYTES: [u8; 32] = [
        0x57, 0x50, 0x32, 0x50, 0x00, 0x01, // "WP2P", version 1
        1, 2,                               // read, cuMem fd
        0, 0, 0, 0, 0x04, 0x80, 0x00, 0x00, // size 0x4800000
        0, 0, 0, 0, 0, 0, 0x10, 0x00,       // offset 4096
        0x00, 0x01, 0xe2, 0x40,             // pid 123456
        0x00, 0x00, 0x00, 0x2a,             // fd 42
    ];

    fn p2p_fd() -> P2pConnectInfo {
        P2pConnectInfo {
            mode: P2pMode::Read,
            size: 0x480_0000,
            offset: 4096,
            export: P2pExport::CuMemFd {
                pid: 123_456,
                fd: 42,
            },
        }
    }

    #[test]
    fn p2p_exact_bytes() {
        let info = p2p_fd();
        assert_emit(&P2P_FD_BYTES, info.buffer_len(), |b| info.emit(b));
        assert_eq!(P2pConnectInfo::parse(&P2P_FD_BYTES), Ok(info));
        let view = P2pConnectInfoView::new_checked(&P2P_FD_BYTES).unwrap();
        assert_eq!(view.mode(), P2pMode::Read);
        assert_eq!(view.size(), 0x480_0000);
        assert_eq!(view.offset(), 4096);
        assert_eq!(view.export(), info.export);
        assert_eq!(view.as_bytes(), &P2P_FD_BYTES[..]);
        assert_every_truncation(&P2P_FD_BYTES, P2pConnectInfo::parse);
        assert_magic_and_version(&P2P_FD_BYTES, P2P_MAGIC, P2pConnectInfo::parse);
    }

    #[test]
    fn p2p_pointer_and_handles() {
        let mut handle = [0u8; 64];
        for (i, b) in handle.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7) ^ 0x5c;
        }
        let cases = [
            (
                P2pExport::Pointer {
                    addr: 0x7f12_3456_7800,
                },
                32,
            ),
            (P2pExport::CudaIpc { handle }, 88),
            (P2pExport::CuMemFabric { handle }, 88),
        ];
        for (export, len) in cases {
            let info = P2pConnectInfo {
                mode: P2pMode::Write,
                size: 12_345,
                offset: 0,
                export,
            };
            assert_eq!(info.buffer_len(), len);
            let mut buf = [0u8; 100];
            assert_eq!(info.emit(&mut buf), Ok(len));
            assert_eq!(buf[6], 0);
            assert_eq!(buf[7], export.kind());
            match export {
                P2pExport::Pointer { addr } => assert_eq!(buf[24..32], addr.to_be_bytes()),
                P2pExport::CudaIpc { handle } | P2pExport::CuMemFabric { handle } => {
                    assert_eq!(buf[24..88], handle)
                }
                P2pExport::CuMemFd { .. } => unreachable!(),
            }
            assert_eq!(P2pConnectInfo::parse(&buf), Ok(info));
            assert_every_truncation(&buf[..len], P2pConnectInfo::parse);
        }
    }

    #[test]
    fn p2p_bad_fields() {
        let mut b = P2P_FD_BYTES;
        b[6] = 2;
        assert_eq!(P2pConnectInfo::parse(&b), Err(bad_field("p2p mode", 2)));
        let mut b = P2P_FD_BYTES;
        b[7] = 4;
        assert_eq!(
            P2pConnectInfo::parse(&b),
            Err(bad_field("p2p export kind", 4))
        );
        let mut b = P2P_FD_BYTES;
        b[28] = 0x80;
        assert_eq!(
            P2pConnectInfo::parse(&b),
            Err(bad_field("p2p fd", 0x8000_002a))
        );
        let negative = P2pConnectInfo {
            export: P2pExport::CuMemFd { pid: 1, fd: -1 },
            ..p2p_fd()
        };
        assert_eq!(
            negative.emit(&mut [0u8; 64]),
            Err(bad_field("p2p fd", 0xffff_ffff))
        );
    }

    // --- SHM ---

    #[rustfmt::skip]
    const SHM_BYTES: [u8; 22] = [
        0x57, 0x53, 0x48, 0x4d, 0x00, 0x01,             // "WSHM", version 1
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, // segment
        0x00, 0x00, 0x00, 0x00, 0x00, 0x41, 0x10, 0x00, // size 4263936
    ];

    #[test]
    fn shm_exact_bytes_and_errors() {
        let info = ShmConnectInfo {
            segment: 0x0123_4567_89ab_cdef,
            size: 4_263_936,
        };
        assert_emit(&SHM_BYTES, info.buffer_len(), |b| info.emit(b));
        assert_eq!(ShmConnectInfo::parse(&SHM_BYTES), Ok(info));
        let view = ShmConnectInfoView::new_checked(&SHM_BYTES).unwrap();
        assert_eq!((view.segment(), view.size()), (info.segment, info.size));
        assert_eq!(view.as_bytes(), &SHM_BYTES[..]);
        assert_every_truncation(&SHM_BYTES, ShmConnectInfo::parse);
        assert_magic_and_version(&SHM_BYTES, SHM_MAGIC, ShmConnectInfo::parse);
        let mut b = SHM_BYTES;
        b[14..].fill(0);
        assert_eq!(ShmConnectInfo::parse(&b), Err(bad_field("shm size", 0)));
        let empty = ShmConnectInfo { size: 0, ..info };
        assert_eq!(empty.emit(&mut [0u8; 32]), Err(bad_field("shm size", 0)));
    }

    // --- NET ---

    #[test]
    fn net_exact_bytes_and_errors() {
        let handle: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(29) ^ 0xc3).collect();
        let info = NetConnectInfo::new(&handle).unwrap();
        assert_eq!(info.handle(), &handle[..]);
        let mut expected = std::vec![0x57, 0x4e, 0x45, 0x54, 0x00, 0x01, 37];
        expected.extend_from_slice(&handle);
        assert_emit(&expected, info.buffer_len(), |b| info.emit(b));
        assert_eq!(NetConnectInfo::parse(&expected), Ok(info));
        let view = NetConnectInfoView::new_checked(&expected).unwrap();
        assert_eq!(view.handle(), &handle[..]);
        assert_eq!(view.as_bytes(), &expected[..]);
        assert_every_truncation(&expected, NetConnectInfo::parse);
        assert_magic_and_version(&expected, NET_MAGIC, NetConnectInfo::parse);

        let mut b = expected.clone();
        b[6] = 129;
        b.resize(200, 0);
        assert_eq!(
            NetConnectInfo::parse(&b),
            Err(ParseError::TooMany {
                field: "net handle bytes",
                count: 129,
                max: 128
            })
        );
        assert_eq!(
            NetConnectInfo::new(&[0u8; 129]),
            Err(ParseError::TooMany {
                field: "net handle bytes",
                count: 129,
                max: 128
            })
        );
        // The largest and the empty handle.
        for len in [0usize, 128] {
            let info = NetConnectInfo::new(&[0x3c; 128][..len]).unwrap();
            let mut buf = [0u8; MAX_CONNECT_INFO_LEN];
            let n = info.emit(&mut buf).unwrap();
            assert_eq!(n, 7 + len);
            assert_eq!(NetConnectInfo::parse(&buf[..n]), Ok(info));
        }
    }

    // --- IB ---

    #[rustfmt::skip]
    const IB_BYTES: [u8; 45] = [
        0x57, 0x49, 0x42, 0x51, 0x00, 0x01, // "WIBQ", version 1
        0x00, 0x00,                         // lid 0 (RoCE)
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 7, // gid ::ffff:10.1.2.7
        0x00, 0x12, 0x34, 0x56,             // qpn
        0x00, 0xab, 0xcd, 0xef,             // psn
        5,                                  // mtu 4096
        0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, // fifo addr
        0xde, 0xad, 0xbe, 0xef,             // fifo rkey
    ];

    fn ib_sample() -> IbQpInfo {
        IbQpInfo {
            lid: 0,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 7],
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            mtu: IbMtu::Mtu4096,
            fifo_addr: 0x7f00_1234_5000,
            fifo_rkey: 0xdead_beef,
        }
    }

    #[test]
    fn ib_exact_bytes_and_errors() {
        let info = ib_sample();
        assert_emit(&IB_BYTES, info.buffer_len(), |b| info.emit(b));
        assert_eq!(IbQpInfo::parse(&IB_BYTES), Ok(info));
        let view = IbQpInfoView::new_checked(&IB_BYTES).unwrap();
        assert_eq!(view.lid(), 0);
        assert_eq!(view.gid(), info.gid);
        assert_eq!((view.qpn(), view.psn()), (info.qpn, info.psn));
        assert_eq!(view.mtu(), IbMtu::Mtu4096);
        assert_eq!(
            (view.fifo_addr(), view.fifo_rkey()),
            (info.fifo_addr, info.fifo_rkey)
        );
        assert_eq!(view.as_bytes(), &IB_BYTES[..]);
        assert_every_truncation(&IB_BYTES, IbQpInfo::parse);
        assert_magic_and_version(&IB_BYTES, IB_QP_MAGIC, IbQpInfo::parse);

        let mut b = IB_BYTES;
        b[24] = 1;
        assert_eq!(IbQpInfo::parse(&b), Err(bad_field("ib qpn", 0x0112_3456)));
        let mut b = IB_BYTES;
        b[28] = 0x80;
        assert_eq!(IbQpInfo::parse(&b), Err(bad_field("ib psn", 0x80ab_cdef)));
        for mtu in [0u8, 6, 0xff] {
            let mut b = IB_BYTES;
            b[32] = mtu;
            assert_eq!(
                IbQpInfo::parse(&b),
                Err(bad_field("ib mtu", u64::from(mtu)))
            );
        }
        let big_qpn = IbQpInfo {
            qpn: 1 << 24,
            ..info
        };
        assert_eq!(
            big_qpn.emit(&mut [0u8; 64]),
            Err(bad_field("ib qpn", 1 << 24))
        );
        let big_psn = IbQpInfo {
            psn: u32::MAX,
            ..info
        };
        assert_eq!(
            big_psn.emit(&mut [0u8; 64]),
            Err(bad_field("ib psn", u64::from(u32::MAX)))
        );
    }

    #[test]
    fn ib_mtu_values() {
        for v in 1..=5u8 {
            let mtu = IbMtu::from_ibv(v).unwrap();
            assert_eq!(mtu.to_ibv(), v);
            assert_eq!(mtu.bytes(), 128 << v);
        }
    }

    #[test]
    fn each_format_rejects_the_others() {
        let mut p2p = [0u8; 128];
        p2p[..32].copy_from_slice(&P2P_FD_BYTES);
        let mut shm = [0u8; 128];
        shm[..22].copy_from_slice(&SHM_BYTES);
        let mut ib = [0u8; 128];
        ib[..45].copy_from_slice(&IB_BYTES);
        assert!(matches!(
            ShmConnectInfo::parse(&p2p),
            Err(ParseError::BadMagic { .. })
        ));
        assert!(matches!(
            NetConnectInfo::parse(&shm),
            Err(ParseError::BadMagic { .. })
        ));
        assert!(matches!(
            IbQpInfo::parse(&shm),
            Err(ParseError::BadMagic { .. })
        ));
        assert!(matches!(
            P2pConnectInfo::parse(&ib),
            Err(ParseError::BadMagic { .. })
        ));
        // And trailing bytes after each are ignored.
        assert_eq!(P2pConnectInfo::parse(&p2p), Ok(p2p_fd()));
        assert_eq!(IbQpInfo::parse(&ib), Ok(ib_sample()));
    }

    // --- round trips ---

    fn arb_p2p() -> impl Strategy<Value = P2pConnectInfo> {
        let export = prop_oneof![
            any::<u64>().prop_map(|addr| P2pExport::Pointer { addr }),
            any::<[u8; 64]>().prop_map(|handle| P2pExport::CudaIpc { handle }),
            (any::<u32>(), 0..=i32::MAX).prop_map(|(pid, fd)| P2pExport::CuMemFd { pid, fd }),
            any::<[u8; 64]>().prop_map(|handle| P2pExport::CuMemFabric { handle }),
        ];
        (any::<bool>(), any::<u64>(), any::<u64>(), export).prop_map(
            |(read, size, offset, export)| P2pConnectInfo {
                mode: if read { P2pMode::Read } else { P2pMode::Write },
                size,
                offset,
                export,
            },
        )
    }

    fn arb_ib() -> impl Strategy<Value = IbQpInfo> {
        (
            any::<u16>(),
            any::<[u8; 16]>(),
            0..=MAX_IB_24BIT,
            0..=MAX_IB_24BIT,
            1..=5u8,
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(|(lid, gid, qpn, psn, mtu, fifo_addr, fifo_rkey)| IbQpInfo {
                lid,
                gid,
                qpn,
                psn,
                mtu: IbMtu::from_ibv(mtu).unwrap(),
                fifo_addr,
                fifo_rkey,
            })
    }

    /// emit -> parse gives back `x`, from an exact and from an over-long buffer, and every
    /// truncation of the encoding is `Truncated`.
    fn round_trip<T: PartialEq + core::fmt::Debug>(
        x: &T,
        len: usize,
        emit: impl Fn(&T, &mut [u8]) -> Result<usize, ParseError>,
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) -> Result<(), TestCaseError> {
        let mut buf = [0xa5u8; 256];
        let n = emit(x, &mut buf).unwrap();
        prop_assert_eq!(n, len);
        let from_long = parse(&buf);
        prop_assert_eq!(from_long.as_ref(), Ok(x));
        let from_exact = parse(&buf[..n]);
        prop_assert_eq!(from_exact.as_ref(), Ok(x));
        for short in 0..n {
            let truncated = matches!(parse(&buf[..short]), Err(ParseError::Truncated { .. }));
            prop_assert!(truncated);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn p2p_round_trip(x in arb_p2p()) {
            round_trip(&x, x.buffer_len(), P2pConnectInfo::emit, P2pConnectInfo::parse)?;
        }

        #[test]
        fn shm_round_trip(segment in any::<u64>(), size in 1..=u64::MAX) {
            let x = ShmConnectInfo { segment, size };
            round_trip(&x, x.buffer_len(), ShmConnectInfo::emit, ShmConnectInfo::parse)?;
        }

        #[test]
        fn net_round_trip(handle in proptest::collection::vec(any::<u8>(), 0..=128)) {
            let x = NetConnectInfo::new(&handle).unwrap();
            prop_assert_eq!(x.handle(), &handle[..]);
            round_trip(&x, x.buffer_len(), NetConnectInfo::emit, NetConnectInfo::parse)?;
        }

        #[test]
        fn ib_round_trip(x in arb_ib()) {
            round_trip(&x, x.buffer_len(), IbQpInfo::emit, IbQpInfo::parse)?;
        }

        #[test]
        fn arbitrary_bodies_never_panic(
            which in 0..4usize,
            body in proptest::collection::vec(any::<u8>(), 0..150),
        ) {
            // A valid magic and version, so that field validation sees the random bytes.
            let magic = [P2P_MAGIC, SHM_MAGIC, NET_MAGIC, IB_QP_MAGIC][which];
            let mut bytes = magic.to_be_bytes().to_vec();
            bytes.extend_from_slice(&[0, 1]);
            bytes.extend_from_slice(&body);
            let mut buf = [0u8; 256];
            match which {
                0 => if let Ok(x) = P2pConnectInfo::parse(&bytes) {
                    let n = x.emit(&mut buf).unwrap();
                    prop_assert_eq!(&buf[..n], &bytes[..n]);
                },
                1 => if let Ok(x) = ShmConnectInfo::parse(&bytes) {
                    let n = x.emit(&mut buf).unwrap();
                    prop_assert_eq!(&buf[..n], &bytes[..n]);
                },
                2 => if let Ok(x) = NetConnectInfo::parse(&bytes) {
                    let n = x.emit(&mut buf).unwrap();
                    prop_assert_eq!(&buf[..n], &bytes[..n]);
                },
                _ => if let Ok(x) = IbQpInfo::parse(&bytes) {
                    let n = x.emit(&mut buf).unwrap();
                    prop_assert_eq!(&buf[..n], &bytes[..n]);
                },
            }
        }
    }
}
