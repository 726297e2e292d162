//! SHM: two processes on one host share a connection's FIFO through a file in /dev/shm.
//!
//! The receiver creates the segment (`recv_setup`): a file named
//! `weft-<random>-<pidns>-<pid>-c<channel>-p<peer>` in /dev/shm (or `WEFT_SHM_DIR`), space
//! reserved with `posix_fallocate` (so a full /dev/shm is a clear error now, not a SIGBUS
//! mid-collective), mapped, and initialised as a [`FifoRegion`]. Its name and size travel
//! to the sender in the connect info; the sender maps it (`send_connect`) and unlinks the
//! name at once: from then on the segment exists only as two mappings and disappears with
//! the processes, however they end. Should the sender never come, the receiver unlinks the
//! name when its end is dropped, and a later process sweeps names whose creator is dead
//! ([`sweep_stale_segments`], run once per process before the first segment is created).
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

use weft_core::wire::ParseError;

use super::{ConnSpec, PeerInfo, Transport};
use crate::conn::{
    AbortFlag, ConnError, ConnId, Direction, FifoLayout, FifoMemory, FifoRecvEnd, FifoRegion,
    FifoSendEnd, LayoutError, WaitPolicy, Waiter, layout::REGION_ALIGN,
};

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
}

impl ShmTransport {
    /// Segments in [`DEFAULT_DIR`] of `layout`, waits by `policy`, ended by `abort`.
    pub fn new(layout: FifoLayout, policy: WaitPolicy, abort: AbortFlag) -> Self {
        ShmTransport {
            dir: PathBuf::from(DEFAULT_DIR),
            layout,
            policy,
            abort,
        }
    }

    /// Layout from `WEFT_SHM_BUFFSIZE`/`NCCL_BUFFSIZE`, deadline from `WEFT_CONN_TIMEOUT`,
    /// directory from `WEFT_SHM_DIR`.
    pub fn from_env(abort: AbortFlag) -> Result<Self, ShmError> {
        let layout = FifoLayout::from_env().map_err(ShmError::Layout)?;
        let mut shm = Self::new(layout, WaitPolicy::from_env(), abort);
        if let Some(dir) = std::env::var_os("WEFT_SHM_DIR") {
            shm.dir = PathBuf::from(dir);
        }
        Ok(shm)
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

    fn waiter(&self, peer_pid: u32) -> Waiter {
        Waiter {
            policy: self.policy,
            abort: self.abort.clone(),
            peer_pid: Some(peer_pid),
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
        let disabled = ["WEFT_SHM_DISABLE", "NCCL_SHM_DISABLE"]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| s.trim() == "1"));
        !disabled && me.host_hash == peer.host_hash && me.shm_dev == peer.shm_dev
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
        let path = self.dir.join(segment_name(spec));
        let total = self.layout.total_bytes();
        let mapping = ShmMapping::create(&self.dir, &path, total)?;
        let region = FifoRegion::init(Arc::new(mapping), self.layout).map_err(ShmError::Layout)?;
        let info = ShmConnectInfo {
            pid: std::process::id(),
            slots: u32::try_from(self.layout.slots()).unwrap_or(u32::MAX),
            step_bytes: as_u64(self.layout.step_bytes()),
            total_bytes: as_u64(total),
            name: path
                .file_name()
                .map(|n| n.as_bytes().to_vec())
                .unwrap_or_default(),
        };
        Ok((ShmRecvSetup { spec, region, path }, info.emit()))
    }

    fn send_setup(&self, spec: ConnSpec) -> Result<(ShmSendSetup, Vec<u8>), ShmError> {
        let info = ShmConnectInfo {
            pid: std::process::id(),
            slots: 0,
            step_bytes: 0,
            total_bytes: 0,
            name: Vec::new(),
        };
        Ok((ShmSendSetup { spec }, info.emit()))
    }

    fn recv_connect(&self, setup: ShmRecvSetup, peer_blob: &[u8]) -> Result<FifoRecvEnd, ShmError> {
        let peer = ShmConnectInfo::parse(peer_blob).map_err(ShmError::ConnectInfo)?;
        let conn = Self::conn_id(setup.spec, Direction::Recv);
        Ok(setup.region.recv_end(conn, self.waiter(peer.pid)))
    }

    fn send_connect(&self, setup: ShmSendSetup, peer_blob: &[u8]) -> Result<FifoSendEnd, ShmError> {
        let peer = ShmConnectInfo::parse(peer_blob).map_err(ShmError::ConnectInfo)?;
        if peer.name.is_empty() {
            return Err(ShmError::ConnectInfo(ParseError::BadField {
                field: "segment name (a sender's info was sent to a sender?)",
                value: 0,
            }));
        }
        let path = self.dir.join(std::ffi::OsStr::from_bytes(&peer.name));
        let mapping = ShmMapping::open(&path, peer.total_bytes)?;
        // Both sides have it mapped now: the name has served its purpose.
        if let Err(err) = std::fs::remove_file(&path) {
            if err.kind() != io::ErrorKind::NotFound {
                log::warn!("SHM: could not unlink {}: {err}", path.display());
            }
        }
        let conn = Self::conn_id(setup.spec, Direction::Send);
        let region = FifoRegion::attach(Arc::new(mapping), conn).map_err(ShmError::Conn)?;
        let layout = region.layout();
        if as_u64(layout.step_bytes()) != peer.step_bytes
            || u32::try_from(layout.slots()).ok() != Some(peer.slots)
        {
            return Err(ShmError::Conn(ConnError::BadMemory {
                conn,
                what: "step_bytes in the header vs the connect info",
                found: as_u64(layout.step_bytes()),
                expected: peer.step_bytes,
            }));
        }
        Ok(region.send_end(conn, self.waiter(peer.pid)))
    }
}

fn as_u64(v: usize) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// `weft-<random>-<pidns>-<pid>-c<channel>-p<peer>`: unique (64 random bits), and the creator
/// (pid in its pid namespace) can be recognised by the stale-segment sweep.
fn segment_name(spec: ConnSpec) -> String {
    format!(
        "{NAME_PREFIX}{:016x}-{}-{}-c{}-p{}",
        random_u64(),
        pid_namespace(),
        std::process::id(),
        spec.channel,
        spec.peer
    )
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer we own.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got == 8 {
        return u64::from_ne_bytes(bytes);
    }
    // No getrandom (very old kernels): time and address are unique enough with O_EXCL.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ (&bytes as *const _ as u64).rotate_left(32)
}

/// The inode of this process's pid namespace (0 if unknown): pids are only comparable within
/// one, and containers sharing /dev/shm (`--ipc=host`) may have different ones.
fn pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
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

/// Removes segments in `dir` whose creator, in our pid namespace, no longer exists; returns
/// how many. Names of other namespaces and anything that is not a weft segment are left alone.
pub fn sweep_stale_segments(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let ours = pid_namespace();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pidns, pid)) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        let stale = pidns == ours && pid != std::process::id() && !crate::conn::process_alive(pid);
        if stale && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// (pid namespace, creator pid) of a segment name, `None` for any other name.
fn parse_segment_name(name: &str) -> Option<(u64, u32)> {
    let mut fields = name.strip_prefix(NAME_PREFIX)?.split('-');
    let random = fields.next()?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let pidns = fields.next()?.parse().ok()?;
    let pid = fields.next()?.parse().ok()?;
    fields.next()?.strip_prefix('c')?.parse::<u32>().ok()?;
    fields.next()?.strip_prefix('p')?.parse::<u32>().ok()?;
    fields.next().is_none().then_some((pidns, pid))
}

/// A shared mapping of a whole segment file; unmapped on drop, and (on the creator's side)
/// the name unlinked too if the peer has not done so already.
#[derive(Debug)]
struct ShmMapping {
    ptr: NonNull<u8>,
    len: usize,
    unlink_on_drop: Option<PathBuf>,
}

impl ShmMapping {
    /// Creates `path` (which must not exist), reserves `len` bytes, maps it.
    fn create(dir: &Path, path: &Path, len: usize) -> Result<Self, ShmError> {
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
    fn open(path: &Path, announced: u64) -> Result<Self, ShmError> {
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

/// The SHM connect info. Receiver -> sender: the segment's name and size, and the
/// receiver's pid; sender -> receiver: the sender's pid (for dead-peer detection).
///
/// Bytes (big-endian): magic u32 "WSHM", version u16, reserved u8, name length u8, pid u32,
/// slots u32, step_bytes u64, total_bytes u64, then the name (`weft-` followed by ASCII
/// letters, digits and '-', so it can never name a path outside the segment directory).
///
/// To be replaced by `weft_core::wire::connect`'s SHM info once that lands.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShmConnectInfo {
    pid: u32,
    slots: u32,
    step_bytes: u64,
    total_bytes: u64,
    name: Vec<u8>,
}

const INFO_MAGIC: u32 = u32::from_be_bytes(*b"WSHM");
const INFO_VERSION: u16 = 1;
const INFO_HEADER: usize = 32;

impl ShmConnectInfo {
    fn emit(&self) -> Vec<u8> {
        let name_len = u8::try_from(self.name.len()).unwrap_or(u8::MAX);
        let mut out = Vec::with_capacity(INFO_HEADER + self.name.len());
        out.extend_from_slice(&INFO_MAGIC.to_be_bytes());
        out.extend_from_slice(&INFO_VERSION.to_be_bytes());
        out.push(0);
        out.push(name_len);
        out.extend_from_slice(&self.pid.to_be_bytes());
        out.extend_from_slice(&self.slots.to_be_bytes());
        out.extend_from_slice(&self.step_bytes.to_be_bytes());
        out.extend_from_slice(&self.total_bytes.to_be_bytes());
        out.extend_from_slice(self.name.get(..usize::from(name_len)).unwrap_or_default());
        out
    }

    fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let truncated = ParseError::Truncated {
            needed: INFO_HEADER,
            got: bytes.len(),
        };
        let header: &[u8; INFO_HEADER] = bytes
            .get(..INFO_HEADER)
            .and_then(|h| h.try_into().ok())
            .ok_or(truncated)?;
        let (magic, rest) = header.split_first_chunk::<4>().ok_or(truncated)?;
        let (version, rest) = rest.split_first_chunk::<2>().ok_or(truncated)?;
        let (&[_, name_len], rest) = rest.split_first_chunk::<2>().ok_or(truncated)?;
        let (pid, rest) = rest.split_first_chunk::<4>().ok_or(truncated)?;
        let (slots, rest) = rest.split_first_chunk::<4>().ok_or(truncated)?;
        let (step_bytes, rest) = rest.split_first_chunk::<8>().ok_or(truncated)?;
        let (total_bytes, _) = rest.split_first_chunk::<8>().ok_or(truncated)?;
        let magic = u32::from_be_bytes(*magic);
        if magic != INFO_MAGIC {
            return Err(ParseError::BadMagic {
                expected: INFO_MAGIC,
                found: magic,
            });
        }
        let version = u16::from_be_bytes(*version);
        if version != INFO_VERSION {
            return Err(ParseError::BadVersion {
                supported: INFO_VERSION,
                found: version,
            });
        }
        let name = bytes.get(INFO_HEADER..).unwrap_or_default();
        if name.len() != usize::from(name_len) {
            return Err(ParseError::BadLength {
                field: "segment name",
                declared: usize::from(name_len),
                actual: name.len(),
            });
        }
        let name_ok = name.is_empty()
            || (name.starts_with(NAME_PREFIX.as_bytes())
                && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-'));
        if !name_ok {
            return Err(ParseError::BadField {
                field: "segment name",
                value: u64::from(name_len),
            });
        }
        Ok(ShmConnectInfo {
            pid: u32::from_be_bytes(*pid),
            slots: u32::from_be_bytes(*slots),
            step_bytes: u64::from_be_bytes(*step_bytes),
            total_bytes: u64::from_be_bytes(*total_bytes),
            name: name.to_vec(),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn connect_info_round_trips_and_rejects_bad_bytes() {
        let info = ShmConnectInfo {
            pid: 4242,
            slots: 8,
            step_bytes: 131072,
            total_bytes: 4096 + 8 * 131072,
            name: b"weft-00112233aabbccdd-4026531836-77-c3-p1".to_vec(),
        };
        let bytes = info.emit();
        assert_eq!(&bytes[..4], b"WSHM");
        assert_eq!(&bytes[8..12], &4242u32.to_be_bytes());
        assert_eq!(ShmConnectInfo::parse(&bytes).unwrap(), info);
        for cut in 0..bytes.len() {
            assert!(
                ShmConnectInfo::parse(&bytes[..cut]).is_err(),
                "truncated at {cut}"
            );
        }
        let mut evil = info.clone();
        evil.name = b"weft-../../etc/passwd".to_vec();
        assert!(matches!(
            ShmConnectInfo::parse(&evil.emit()),
            Err(ParseError::BadField { .. })
        ));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            ShmConnectInfo::parse(&bad),
            Err(ParseError::BadMagic { .. })
        ));
        let mut bad = bytes;
        bad[5] = 9;
        assert!(matches!(
            ShmConnectInfo::parse(&bad),
            Err(ParseError::BadVersion { .. })
        ));
    }

    #[test]
    fn segment_names_parse_back_to_their_creator() {
        let spec = ConnSpec {
            rank: 0,
            peer: 5,
            channel: 11,
        };
        let name = segment_name(spec);
        assert!(name.ends_with("-c11-p5"), "{name}");
        assert_eq!(
            parse_segment_name(&name),
            Some((pid_namespace(), std::process::id()))
        );
        assert_eq!(parse_segment_name("weft-zz-1-2-c0-p0"), None);
        assert_eq!(parse_segment_name("other-0011223344556677-1-2-c0-p0"), None);
    }
}
