//! SHM: two processes on one host share a connection's FIFO through a file in /dev/shm.
//!
//! The receiver creates the segment (`recv_setup`): a file named
//! `weft-<segment id>-c<channel>-<sender>to<receiver>` in /dev/shm (or `WEFT_SHM_DIR`), space
//! reserved with `posix_fallocate` (so a full /dev/shm is a clear error now, not a SIGBUS
//! mid-collective), mapped, and initialised as a [`FifoRegion`]. The segment id (creator pid
//! in the high 32 bits, random low bits) and the size travel to the sender in
//! `weft_core::wire::connect::ShmConnectInfo`; the sender derives the same name from the id
//! and its own `ConnSpec`, maps it (`send_connect`) and unlinks the
//! name at once: from then on the segment exists only as two mappings and disappears with
//! the processes, however they end. Should the sender never come, the receiver unlinks the
//! name when its end is dropped, and a later process sweeps names whose creator is dead
//! ([`sweep_stale_segments`], run once per process before the first segment is created).
//!
//! The sender's connect info is empty: the receiver learns the sender's pid from the
//! segment's header once the sender has mapped it.
//!
//! File descriptors cannot cross processes without SCM_RIGHTS over a unix socket, which the
//! bootstrap does not have; a name in a tmpfs needs nothing but the connect info.

use std::ffi::CString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Once};

use weft_config::TransportSettings;
use weft_core::wire::ParseError;
use weft_core::wire::connect::ShmConnectInfo;

use super::{ConnSpec, PeerInfo, Transport};
use crate::conn::{
    AbortFlag, ConnError, ConnId, Direction, FifoLayout, FifoMemory, FifoRecvEnd, FifoRegion,
    FifoSendEnd, LayoutError, WaitPolicy, Waiter,
    layout::{FIFO_VERSION, RECEIVER_PIDNS_OFFSET, REGION_ALIGN, VERSION_OFFSET},
    pid_namespace, process_alive,
};
use crate::status::Board;

/// Where segments live unless `WEFT_SHM_DIR` says otherwise.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// Every segment name starts with this; the sweep touches nothing else.
pub const NAME_PREFIX: &str = "weft-";

/// Why an SHM connection could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShmError {
    /// Not enough space in the shared-memory filesystem.
    NoSpace {
        dir: PathBuf,
        free: u64,
        need: u64,
    },
    /// A system call on a segment failed.
    Io {
        op: &'static str,
        path: PathBuf,
        err: io::Error,
    },
    /// The peer's connect info is not a valid SHM connect info.
    ConnectInfo(ParseError),
    /// The mapped segment is not the size the connect info announced.
    SizeMismatch {
        path: PathBuf,
        announced: u64,
        found: u64,
    },
    Layout(LayoutError),
    Conn(ConnError),
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        match self {
            ShmError::NoSpace { dir, free, need } => write!(
                f,
                "{} has {:.1} MiB free, need {:.1} MiB for an SHM connection: enlarge it \
                 (docker run --shm-size=1g, or mount -o remount,size=... {}), lower \
                 WEFT_SHM_BUFFSIZE / NCCL_BUFFSIZE or the number of channels, or disable SHM \
                 with NCCL_SHM_DISABLE=1",
                dir.display(),
                *free as f64 / MIB,
                *need as f64 / MIB,
                dir.display()
            ),
            ShmError::Io { op, path, err } => {
                write!(f, "SHM segment {}: {op} failed: {err}", path.display())?;
                match err.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => write!(
                        f,
                        " (ranks of one host must run as the same user to share segments)"
                    ),
                    Some(libc::ENOENT) => write!(
                        f,
                        " (the receiving rank died or freed it before we connected, or the two \
                         ranks see different {DEFAULT_DIR} mounts: separate containers?)"
                    ),
                    _ => Ok(()),
                }
            }
            ShmError::ConnectInfo(e) => write!(f, "bad SHM connect info from the peer: {e}"),
            ShmError::SizeMismatch {
                path,
                announced,
                found,
            } => write!(
                f,
                "SHM segment {} is {found} bytes but the peer announced {announced}",
                path.display()
            ),
            ShmError::Layout(e) => write!(f, "SHM: {e}"),
            ShmError::Conn(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ShmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShmError::Io { err, .. } => Some(err),
            ShmError::Conn(e) => Some(e),
            ShmError::Layout(e) => Some(e),
            _ => None,
        }
    }
}

fn io_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> ShmError + 'p {
    move |err| ShmError::Io {
        op,
        path: path.to_path_buf(),
        err,
    }
}

/// The SHM transport of one communicator.
#[derive(Debug, Clone)]
pub struct ShmTransport {
    dir: PathBuf,
    layout: FifoLayout,
    policy: WaitPolicy,
    abort: AbortFlag,
    /// `NCCL_SHM_DISABLE=1`: `can_connect` refuses every pair.
    disabled: bool,
    /// Where slow waits show for the health query.
    board: Option<Arc<Board>>,
}

impl ShmTransport {
    /// Segments in [`DEFAULT_DIR`] of `layout`, waits by `policy`, ended by `abort`; enabled
    /// ([`Self::with_disabled`] and [`Self::with_dir`] apply `NCCL_SHM_DISABLE` and
    /// `WEFT_SHM_DIR`; [`Self::from_settings`] takes all of a transport's settings).
    pub fn new(layout: FifoLayout, policy: WaitPolicy, abort: AbortFlag) -> Self {
        ShmTransport {
            dir: PathBuf::from(DEFAULT_DIR),
            layout,
            policy,
            abort,
            disabled: false,
            board: None,
        }
    }

    /// Shows this transport's slow waits on `board` (the health query, `crate::status`).
    pub fn with_board(mut self, board: Option<Arc<Board>>) -> Self {
        self.board = board;
        self
    }

    /// The transport `settings` describe: their layout ([`FifoLayout::from_settings`]),
    /// deadline (`WEFT_CONN_TIMEOUT`), directory (`WEFT_SHM_DIR`) and `NCCL_SHM_DISABLE`.
    pub fn from_settings(abort: AbortFlag, settings: &TransportSettings) -> Result<Self, ShmError> {
        let layout = FifoLayout::from_settings(settings).map_err(ShmError::Layout)?;
        Ok(ShmTransport {
            dir: settings.shm_dir.clone(),
            layout,
            policy: WaitPolicy::from_settings(settings),
            abort,
            disabled: settings.shm_disable,
            board: None,
        })
    }

    /// The same transport, refusing every pair when `disabled` (`NCCL_SHM_DISABLE`).
    pub fn with_disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self
    }

    /// Segments in `dir` instead (a tmpfs: a disk-backed directory works but is slow).
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn layout(&self) -> FifoLayout {
        self.layout
    }

    fn conn_id(spec: ConnSpec, dir: Direction) -> ConnId {
        ConnId {
            transport: "SHM",
            rank: spec.rank,
            peer: spec.peer,
            channel: spec.channel,
            dir,
        }
    }

    /// The peer's pid comes from the segment header (see `Waiter::peer_pid`).
    fn waiter(&self) -> Waiter {
        Waiter {
            policy: self.policy,
            abort: self.abort.clone(),
            peer_pid: None,
            board: self.board.clone(),
        }
    }
}

/// What the receiver keeps between setup and connect: the mapped, initialised segment.
#[derive(Debug)]
pub struct ShmRecvSetup {
    spec: ConnSpec,
    region: FifoRegion,
    path: PathBuf,
}

impl ShmRecvSetup {
    /// The segment's path (gone from the directory once the sender has mapped it).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What the sender keeps between setup and connect.
#[derive(Debug, Clone, Copy)]
pub struct ShmSendSetup {
    spec: ConnSpec,
}

impl Transport for ShmTransport {
    type SendSetup = ShmSendSetup;
    type RecvSetup = ShmRecvSetup;
    type Error = ShmError;

    fn name(&self) -> &'static str {
        "SHM"
    }

    /// Same host, same /dev/shm, and not disabled by `NCCL_SHM_DISABLE=1` / `WEFT_SHM_DISABLE=1`.
    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool {
        !self.disabled && me.host_hash == peer.host_hash && me.shm_dev == peer.shm_dev
    }

    fn recv_setup(&self, spec: ConnSpec) -> Result<(ShmRecvSetup, Vec<u8>), ShmError> {
        static SWEEP: Once = Once::new();
        SWEEP.call_once(|| {
            let removed = sweep_stale_segments(&self.dir);
            if removed > 0 {
                log::info!(
                    "SHM: removed {removed} stale segment(s) of dead processes from {}",
                    self.dir.display()
                );
            }
        });
        let total = self.layout.total_bytes();
        // A name collision (32 random bits) is retried with a new id: `create` never reuses.
        let mut attempt = 0;
        let (segment, path, mapping) = loop {
            let segment = new_segment_id();
            let path = self
                .dir
                .join(segment_name(segment, spec.channel, spec.peer, spec.rank));
            match ShmMapping::create(&self.dir, &path, total) {
                Err(ShmError::Io { err, .. })
                    if err.kind() == io::ErrorKind::AlreadyExists && attempt < 8 =>
                {
                    attempt += 1;
                }
                other => break (segment, path, other?),
            }
        };
        let region = FifoRegion::init(Arc::new(mapping), self.layout).map_err(ShmError::Layout)?;
        region.record_owner(Direction::Recv);
        let info = ShmConnectInfo {
            segment,
            size: as_u64(total),
        };
        let mut blob = vec![0u8; info.buffer_len()];
        info.emit(&mut blob).map_err(ShmError::ConnectInfo)?;
        Ok((ShmRecvSetup { spec, region, path }, blob))
    }

    /// The sender has nothing to announce: its blob is empty.
    fn send_setup(&self, spec: ConnSpec) -> Result<(ShmSendSetup, Vec<u8>), ShmError> {
        Ok((ShmSendSetup { spec }, Vec::new()))
    }

    /// `peer_blob` (the sender's, empty) is not needed: the sender announces itself in the
    /// segment header when it maps it.
    fn recv_connect(
        &self,
        setup: ShmRecvSetup,
        _peer_blob: &[u8],
    ) -> Result<FifoRecvEnd, ShmError> {
        let conn = Self::conn_id(setup.spec, Direction::Recv);
        Ok(setup.region.recv_end(conn, self.waiter()))
    }

    fn send_connect(&self, setup: ShmSendSetup, peer_blob: &[u8]) -> Result<FifoSendEnd, ShmError> {
        let info = ShmConnectInfo::parse(peer_blob).map_err(ShmError::ConnectInfo)?;
        let spec = setup.spec;
        let path = self.dir.join(segment_name(
            info.segment,
            spec.channel,
            spec.rank,
            spec.peer,
        ));
        let mapping = ShmMapping::open(&path, info.size)?;
        // Both sides have it mapped now: the name has served its purpose.
        if let Err(err) = std::fs::remove_file(&path) {
            if err.kind() != io::ErrorKind::NotFound {
                log::warn!("SHM: could not unlink {}: {err}", path.display());
            }
        }
        let conn = Self::conn_id(spec, Direction::Send);
        let region = FifoRegion::attach(Arc::new(mapping), conn).map_err(ShmError::Conn)?;
        Ok(region.send_end(conn, self.waiter()))
    }
}

fn as_u64(v: usize) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// A fresh segment id: the creator's pid in the high 32 bits (for the stale-segment sweep),
/// random bits below.
fn new_segment_id() -> u64 {
    (u64::from(std::process::id()) << 32) | (random_u64() & 0xffff_ffff)
}

/// `weft-<segment:016x>-c<channel>-<sender>to<receiver>`: both ends derive it, the id from
/// the connect info and the ranks from their own view of the connection; the ranks make a
/// leaked segment easy to place.
fn segment_name(segment: u64, channel: u32, sender: u32, receiver: u32) -> String {
    format!("{NAME_PREFIX}{segment:016x}-c{channel}-{sender}to{receiver}")
}

/// The creator pid of a segment name, `None` for any other name.
fn parse_segment_name(name: &str) -> Option<u32> {
    let mut fields = name.strip_prefix(NAME_PREFIX)?.split('-');
    let id = fields.next()?;
    if id.len() != 16 {
        return None;
    }
    let segment = u64::from_str_radix(id, 16).ok()?;
    fields.next()?.strip_prefix('c')?.parse::<u32>().ok()?;
    let (sender, receiver) = fields.next()?.split_once("to")?;
    sender.parse::<u32>().ok()?;
    receiver.parse::<u32>().ok()?;
    fields.next().is_none().then_some((segment >> 32) as u32)
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer we own.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got == 8 {
        return u64::from_ne_bytes(bytes);
    }
    // No getrandom (very old kernels): the clock is unique enough, `create` uses O_EXCL.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    nanos as u64
}

/// Device number of the filesystem holding `dir` (see [`PeerInfo::shm_dev`]).
pub fn dev_of(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir).ok().map(|m| m.dev())
}

/// Bytes available to unprivileged users in the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let cpath = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `cpath` is a NUL-terminated path and `stat` points to writable memory of the
    // right type; statvfs fills it on success.
    let rc = unsafe { libc::statvfs(cpath.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let stat = unsafe { stat.assume_init() };
    // The field types are 32-bit on some targets and 64-bit on others.
    #[allow(clippy::useless_conversion)]
    let free = u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize));
    Ok(free)
}

/// Removes segments in `dir` whose creator is dead; returns how many. A segment is only
/// judged from its creator's pid namespace (read from its header: containers sharing /dev/shm
/// have different ones); segments still being set up, our own, and anything that is not a
/// weft segment are left alone.
pub fn sweep_stale_segments(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        let stale = pid != std::process::id()
            && creator_pidns(&entry.path()) == Some(pid_namespace())
            && !process_alive(pid);
        if stale && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Where FIFO_VERSION 2's header (before the sizes joined the tail's line) kept the
/// receiver's pid namespace: a segment left behind by a crashed older build is still swept.
const V2_RECEIVER_PIDNS_OFFSET: u64 = 512 + 24;

/// The receiver's pid namespace recorded in a segment's header, read with `pread` (no
/// mapping), at the place the header's version keeps it; `None` while the header is not
/// written yet, or for a version this build does not know.
fn creator_pidns(path: &Path) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).ok()?;
    let word = |offset: u64| -> Option<u64> {
        let mut bytes = [0u8; 8];
        file.read_exact_at(&mut bytes, offset).ok()?;
        Some(u64::from_ne_bytes(bytes))
    };
    let at = match word(as_u64(VERSION_OFFSET))? {
        FIFO_VERSION => as_u64(RECEIVER_PIDNS_OFFSET),
        2 => V2_RECEIVER_PIDNS_OFFSET,
        _ => return None,
    };
    word(at).filter(|ns| *ns != 0)
}

/// A shared mapping of a whole segment file; unmapped on drop, and (on the creator's side)
/// the name unlinked too if the peer has not done so already.
#[derive(Debug)]
pub(crate) struct ShmMapping {
    ptr: NonNull<u8>,
    len: usize,
    unlink_on_drop: Option<PathBuf>,
}

impl ShmMapping {
    /// Creates `path` (which must not exist), reserves `len` bytes, maps it.
    pub(crate) fn create(dir: &Path, path: &Path, len: usize) -> Result<Self, ShmError> {
        let need = as_u64(len);
        let no_space = |free| ShmError::NoSpace {
            dir: dir.to_path_buf(),
            free,
            need,
        };
        let free = free_bytes(dir).map_err(io_err("statvfs", dir))?;
        if free < need {
            return Err(no_space(free));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(io_err("create", path))?;
        let unlink = |err| {
            let _ = std::fs::remove_file(path);
            err
        };
        let off_len = libc::off_t::try_from(len).map_err(|_| {
            unlink(ShmError::Layout(LayoutError {
                field: "total_bytes",
                value: need,
                rule: "larger than a file offset",
            }))
        })?;
        // SAFETY: plain system call on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, off_len) };
        if rc == libc::ENOSPC {
            return Err(unlink(no_space(free_bytes(dir).unwrap_or(0))));
        }
        if rc != 0 {
            return Err(unlink(io_err("posix_fallocate", path)(
                io::Error::from_raw_os_error(rc),
            )));
        }
        let mut mapping = Self::map(&file, path, len).map_err(unlink)?;
        mapping.unlink_on_drop = Some(path.to_path_buf());
        Ok(mapping)
    }

    /// Opens an existing segment of `announced` bytes and maps it.
    pub(crate) fn open(path: &Path, announced: u64) -> Result<Self, ShmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(io_err("open", path))?;
        let found = file.metadata().map_err(io_err("fstat", path))?.len();
        let len = usize::try_from(announced)
            .ok()
            .filter(|_| found == announced)
            .ok_or(ShmError::SizeMismatch {
                path: path.to_path_buf(),
                announced,
                found,
            })?;
        Self::map(&file, path, len)
    }

    fn map(file: &File, path: &Path, len: usize) -> Result<Self, ShmError> {
        // SAFETY: a fresh shared mapping of a file we hold open (the mapping keeps its own
        // reference, so closing `file` afterwards is fine); the kernel picks the address, so
        // no existing memory is affected. MAP_POPULATE pre-faults the pages now rather than
        // on the first collective.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io_err("mmap", path)(io::Error::last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io_err("mmap", path)(io::Error::from(io::ErrorKind::Other)))?;
        debug_assert_eq!(ptr.as_ptr().align_offset(REGION_ALIGN), 0);
        Ok(ShmMapping {
            ptr,
            len,
            unlink_on_drop: None,
        })
    }
}

impl ShmMapping {
    /// The mapping's first byte (page-aligned) and length.
    pub(crate) fn bytes(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.len)
    }
}

impl Drop for ShmMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, unmapped only here; no borrow of
        // the memory outlives the last `Arc` holding this mapping (FifoMemory's contract).
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::warn!("SHM: munmap failed: {}", io::Error::last_os_error());
        }
        if let Some(path) = &self.unlink_on_drop {
            // NotFound is the normal case: the sender unlinked it after mapping.
            let _ = std::fs::remove_file(path);
        }
    }
}

// SAFETY: the mapping is owned by this value; access to its bytes follows FifoMemory's
// contract (atomics, or protocol-granted slots), so it may move between threads.
unsafe impl Send for ShmMapping {}
// SAFETY: `&ShmMapping` only exposes the base pointer and length.
unsafe impl Sync for ShmMapping {}

// SAFETY: mmap returns page-aligned memory (REGION_ALIGN is one page) of `len` readable and
// writable bytes, valid until `drop` unmaps it.
unsafe impl FifoMemory for ShmMapping {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// The sweep finds the pid namespace where each header version keeps it, and trusts
    /// no other version.
    #[test]
    fn the_pid_namespace_is_read_where_each_version_keeps_it() {
        let dir = std::env::temp_dir().join(format!("weft-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let header = |version: u64, at: u64, ns: u64| {
            let mut bytes = vec![0u8; 4096];
            bytes[VERSION_OFFSET..VERSION_OFFSET + 8].copy_from_slice(&version.to_ne_bytes());
            let at = at as usize;
            bytes[at..at + 8].copy_from_slice(&ns.to_ne_bytes());
            let path = dir.join(format!("v{version}-{at}-{ns:x}"));
            std::fs::write(&path, &bytes).unwrap();
            path
        };
        let now = header(FIFO_VERSION, as_u64(RECEIVER_PIDNS_OFFSET), 0x1234);
        let old = header(2, V2_RECEIVER_PIDNS_OFFSET, 0x5678);
        let unknown = header(99, as_u64(RECEIVER_PIDNS_OFFSET), 0x9abc);
        let unwritten = header(FIFO_VERSION, as_u64(RECEIVER_PIDNS_OFFSET), 0);
        assert_eq!(creator_pidns(&now), Some(0x1234));
        assert_eq!(creator_pidns(&old), Some(0x5678));
        assert_eq!(creator_pidns(&unknown), None);
        assert_eq!(creator_pidns(&unwritten), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn segment_names_carry_the_creator_pid_and_both_ranks() {
        let id = new_segment_id();
        assert_eq!((id >> 32) as u32, std::process::id());
        let name = segment_name(id, 11, 5, 0);
        assert_eq!(name, format!("weft-{id:016x}-c11-5to0"));
        assert_eq!(parse_segment_name(&name), Some(std::process::id()));
        assert_eq!(parse_segment_name("weft-00000001zz000000-c0-1to0"), None);
        assert_eq!(parse_segment_name("weft-0000000100000000-c0-1to0-x"), None);
        assert_eq!(parse_segment_name("other-0000000100000000-c0-1to0"), None);
        assert_eq!(
            parse_segment_name("weft-0000002a00000000-c0-1to0"),
            Some(42)
        );
    }
}
