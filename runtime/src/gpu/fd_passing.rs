//! File descriptors from one rank to another on the same host: a Unix datagram socket in
//! the abstract namespace per receiving rank, the descriptor carried as `SCM_RIGHTS`.
//!
//! NVLS in its multicast form needs this: the multicast object one rank creates is shared
//! as a POSIX file descriptor (`cuMemExportToShareableHandle`), and a descriptor means
//! nothing in another process unless the kernel copies it there. NCCL does the same with
//! its per-rank IPC socket (`src/misc/ipcsocket.cc`). Ranks of one process use the same
//! path: the kernel then hands the receiver a duplicate, which it owns and closes alone.
//!
//! Names are `weft-nvls-<hash of the unique id>-r<rank>` (abstract: no file to clean up,
//! gone when the socket closes). Every message also carries the sender's rank and a tag
//! from another hash of the unique id, which the name does not reveal, so a stray message
//! (another communicator's, another user's) is told apart from the expected one. Nothing
//! waits without a deadline: `recv` gives up at its deadline naming the rank it waited
//! for, and `send` retries a receiver that has not bound yet only until its deadline.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use crate::bootstrap::frame::timed_out_or_interrupted;

/// "WFD1": the first word of every message.
const MAGIC: u32 = 0x5746_4431;
/// Bytes of a message: magic, sender rank (u32), tag (u64), big-endian.
const MSG_LEN: usize = 16;
/// How long `send` sleeps between tries at a receiver that has not bound yet.
const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// Why passing a descriptor failed.
#[derive(Debug)]
pub enum FdPassingError {
    /// A socket call on this side failed.
    Local { what: String, source: io::Error },
    /// Nothing came from (or nobody received for) rank `peer` before the deadline.
    Timeout {
        peer: usize,
        socket: String,
        waited: Duration,
        receiving: bool,
    },
    /// Rank `peer`'s message was not what the protocol says.
    Peer { peer: usize, detail: String },
}

impl FdPassingError {
    /// The rank this error blames, when there is one.
    pub fn peer(&self) -> Option<usize> {
        match self {
            FdPassingError::Local { .. } => None,
            FdPassingError::Timeout { peer, .. } | FdPassingError::Peer { peer, .. } => Some(*peer),
        }
    }
}

impl fmt::Display for FdPassingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FdPassingError::Local { what, source } => write!(f, "{what}: {source}"),
            FdPassingError::Timeout {
                peer,
                socket,
                waited,
                receiving: true,
            } => write!(
                f,
                "no file descriptor came from rank {peer} on the Unix socket @{socket} within \
                 {:.1} s: rank {peer} is dead, stuck or failed first (look at its own error), \
                 or runs in another network namespace or on another host (NVLS multicast needs \
                 every rank of the group on one host, in one network namespace); raise \
                 WEFT_TIMEOUT if rank {peer} is only slow",
                waited.as_secs_f64()
            ),
            FdPassingError::Timeout {
                peer,
                socket,
                waited,
                receiving: false,
            } => write!(
                f,
                "rank {peer} never opened its Unix socket @{socket} within {:.1} s to receive a \
                 file descriptor: rank {peer} is dead, stuck or failed first (look at its own \
                 error), or runs in another network namespace or on another host; raise \
                 WEFT_TIMEOUT if rank {peer} is only slow",
                waited.as_secs_f64()
            ),
            FdPassingError::Peer { peer, detail } => write!(f, "rank {peer}: {detail}"),
        }
    }
}

impl std::error::Error for FdPassingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FdPassingError::Local { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn local(what: impl Into<String>) -> impl FnOnce(io::Error) -> FdPassingError {
    let what = what.into();
    move |source| FdPassingError::Local { what, source }
}

/// FNV-1a over `salt` then `bytes`: names and tags from a unique id without printing it.
fn fnv1a(salt: &[u8], bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in salt.iter().chain(bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where the ranks of one communicator meet: derived from its unique id's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdRendezvous {
    name_hash: u64,
    tag: u64,
}

impl FdRendezvous {
    /// The rendezvous of the communicator whose unique id is `id` (its 128 bytes).
    pub fn new(id: &[u8]) -> FdRendezvous {
        FdRendezvous {
            name_hash: fnv1a(b"weft-nvls-name", id),
            tag: fnv1a(b"weft-nvls-tag", id),
        }
    }

    /// The abstract socket name `rank` receives on (without the leading NUL).
    pub fn socket_name(&self, rank: usize) -> String {
        format!("weft-nvls-{:016x}-r{rank}", self.name_hash)
    }

    fn message(&self, from_rank: usize) -> [u8; MSG_LEN] {
        let mut m = [0u8; MSG_LEN];
        m[..4].copy_from_slice(&MAGIC.to_be_bytes());
        m[4..8].copy_from_slice(&(from_rank as u32).to_be_bytes());
        m[8..].copy_from_slice(&self.tag.to_be_bytes());
        m
    }

    /// This rank's mailbox: bind it before any peer may send to it.
    pub fn inbox(&self, rank: usize) -> Result<FdInbox, FdPassingError> {
        let name = self.socket_name(rank);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(local(format!("the abstract socket name @{name}")))?;
        let socket = UnixDatagram::bind_addr(&addr).map_err(|source| {
            let hint = if source.kind() == io::ErrorKind::AddrInUse {
                " (another communicator of the same unique id and rank is on this host, or a \
                 leftover process of an earlier run: end it)"
            } else {
                ""
            };
            FdPassingError::Local {
                what: format!("binding rank {rank}'s Unix socket @{name}{hint}"),
                source,
            }
        })?;
        Ok(FdInbox {
            socket,
            name,
            rendezvous: *self,
        })
    }

    /// Sends `fd` from `from_rank` to `to_rank`'s inbox, retrying until `deadline` while
    /// that inbox is not bound yet.
    pub fn send(
        &self,
        from_rank: usize,
        to_rank: usize,
        fd: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<(), FdPassingError> {
        let name = self.socket_name(to_rank);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(local(format!("the abstract socket name @{name}")))?;
        let socket = UnixDatagram::unbound().map_err(local("creating a Unix datagram socket"))?;
        let start = Instant::now();
        let timeout = || FdPassingError::Timeout {
            peer: to_rank,
            socket: name.clone(),
            waited: start.elapsed(),
            receiving: false,
        };
        // The receiver binds before the barrier that precedes any send, but a late one is
        // only late: try again until the deadline.
        loop {
            match socket.connect_addr(&addr) {
                Ok(()) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return Err(timeout());
                    }
                    std::thread::sleep(RETRY_PAUSE);
                }
                Err(source) => {
                    return Err(FdPassingError::Local {
                        what: format!("connecting to rank {to_rank}'s Unix socket @{name}"),
                        source,
                    });
                }
            }
        }
        let message = self.message(from_rank);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timeout());
            }
            socket
                .set_write_timeout(Some(left))
                .map_err(local("setting a send timeout"))?;
            match send_with_fd(&socket, &message, fd.as_raw_fd()) {
                Ok(()) => return Ok(()),
                Err(e) if timed_out_or_interrupted(&e) => {}
                Err(source) => {
                    return Err(FdPassingError::Local {
                        what: format!(
                            "sending a file descriptor to rank {to_rank} over @{name} (sendmsg)"
                        ),
                        source,
                    });
                }
            }
        }
    }
}

/// One rank's bound socket, receiving descriptors.
#[derive(Debug)]
pub struct FdInbox {
    socket: UnixDatagram,
    name: String,
    rendezvous: FdRendezvous,
}

impl FdInbox {
    /// The abstract name it is bound to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next descriptor, which must come from `from_rank`, by `deadline`. Messages that
    /// are not this communicator's (wrong magic or tag) are dropped with a warning; one of
    /// this communicator from another rank is an error naming both.
    pub fn recv(&self, from_rank: usize, deadline: Instant) -> Result<OwnedFd, FdPassingError> {
        let start = Instant::now();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(FdPassingError::Timeout {
                    peer: from_rank,
                    socket: self.name.clone(),
                    waited: start.elapsed(),
                    receiving: true,
                });
            }
            self.socket
                .set_read_timeout(Some(left))
                .map_err(local("setting a receive timeout"))?;
            let (message, fds) = match recv_with_fds(&self.socket) {
                Ok(got) => got,
                Err(e) if timed_out_or_interrupted(&e) => continue,
                Err(source) => {
                    return Err(FdPassingError::Local {
                        what: format!(
                            "receiving a file descriptor from rank {from_rank} on @{} (recvmsg)",
                            self.name
                        ),
                        source,
                    });
                }
            };
            let word = |at: usize| message.get(at..at + 4).map(|w| [w[0], w[1], w[2], w[3]]);
            let magic = word(0).map(u32::from_be_bytes);
            let tag = message
                .get(8..16)
                .and_then(|t| <[u8; 8]>::try_from(t).ok())
                .map(u64::from_be_bytes);
            if message.len() != MSG_LEN || magic != Some(MAGIC) || tag != Some(self.rendezvous.tag)
            {
                log::warn!(
                    "weft: dropped a {}-byte message on @{} that is not this communicator's \
                     (another program wrote to the socket?)",
                    message.len(),
                    self.name
                );
                continue;
            }
            let sender = word(4).map_or(u32::MAX, u32::from_be_bytes) as usize;
            if sender != from_rank {
                return Err(FdPassingError::Peer {
                    peer: sender,
                    detail: format!(
                        "sent a file descriptor to @{} where rank {from_rank}'s was expected: \
                         the ranks disagree on which rank creates the NVLS multicast object \
                         (different weft builds?)",
                        self.name
                    ),
                });
            }
            let mut fds = fds.into_iter();
            return match (fds.next(), fds.len()) {
                (Some(fd), 0) => Ok(fd),
                (None, _) => Err(FdPassingError::Peer {
                    peer: sender,
                    detail: format!(
                        "its message on @{} carried no file descriptor (SCM_RIGHTS)",
                        self.name
                    ),
                }),
                (Some(_), extra) => Err(FdPassingError::Peer {
                    peer: sender,
                    detail: format!(
                        "its message on @{} carried {} file descriptors where one was expected",
                        self.name,
                        extra + 1
                    ),
                }),
            };
        }
    }
}

/// Room for the control message of one descriptor (and a few more, so that a message
/// with several is received whole and each closed, not truncated).
const CMSG_WORDS: usize = 16;
/// Bytes of one descriptor in a control message.
const FD_BYTES: u32 = size_of::<RawFd>() as u32;

fn send_with_fd(socket: &UnixDatagram, message: &[u8], fd: RawFd) -> io::Result<()> {
    let mut control = [0u64; CMSG_WORDS];
    let mut iov = libc::iovec {
        iov_base: message.as_ptr().cast_mut().cast(),
        iov_len: message.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(FD_BYTES) };
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which holds at least CMSG_SPACE(one int) bytes:
    // the first header is there.
    let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    if c.is_null() {
        return Err(io::Error::other(
            "no room for a control message (CMSG_FIRSTHDR)",
        ));
    }
    let header = libc::cmsghdr {
        // SAFETY: CMSG_LEN only computes a size.
        cmsg_len: unsafe { libc::CMSG_LEN(FD_BYTES) } as _,
        cmsg_level: libc::SOL_SOCKET,
        cmsg_type: libc::SCM_RIGHTS,
    };
    // SAFETY: `c` is the start of `control`, 8-byte aligned, with room for a header.
    unsafe { c.write(header) };
    // SAFETY: `c` is a complete header within `control`.
    let data = unsafe { libc::CMSG_DATA(c) };
    // SAFETY: CMSG_SPACE(one int) left room for one descriptor after the header.
    unsafe { data.cast::<RawFd>().write_unaligned(fd) };
    // SAFETY: `msg` and everything it points at live across the call; the socket is open.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != message.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sendmsg sent {n} of {} bytes", message.len()),
        ));
    }
    Ok(())
}

/// One datagram and the descriptors it carried, each owned (closed if unused).
fn recv_with_fds(socket: &UnixDatagram) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = [0u8; 64];
    let mut control = [0u64; CMSG_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` points at live buffers of the sizes it states; the socket is open.
    // MSG_CMSG_CLOEXEC: a child this process starts later must not inherit the handle.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: CMSG_LEN only computes a size.
    let header_len = unsafe { libc::CMSG_LEN(0) } as usize;
    // SAFETY: the kernel filled `control` with `msg_controllen` bytes of well-formed
    // headers; CMSG_FIRSTHDR returns the first, or null.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR / CMSG_NXTHDR lies whole within
        // `control`, aligned.
        let header = unsafe { c.read() };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: `c` is a complete header; its data follows within `cmsg_len`.
            let data = unsafe { libc::CMSG_DATA(c) }.cast::<RawFd>();
            let n = (header.cmsg_len as usize).saturating_sub(header_len) / size_of::<RawFd>();
            for i in 0..n {
                // SAFETY: the i-th of the `n` descriptors within `cmsg_len`.
                let raw = unsafe { data.wrapping_add(i).read_unaligned() };
                // SAFETY: the kernel just opened it in this process, for us alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        // SAFETY: `c` is a header within the control buffer `msg` describes.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other(
            "a message carried more file descriptors than weft expects (MSG_CTRUNC)",
        ));
    }
    Ok((buf[..n as usize].to_vec(), fds))
}

#[cfg(test)]
mod test {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// A memfd holding `bytes`, its offset at the end (the receiver must not rely on it).
    fn memfd_with(bytes: &[u8]) -> std::fs::File {
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"weft-fd-passing-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: just created, owned by nobody else.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.write_all(bytes).unwrap();
        f
    }

    /// Bytes that are not a pattern, of a length that is not a power of two.
    fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn read_all(fd: &OwnedFd, len: usize) -> Vec<u8> {
        let f = std::fs::File::from(fd.try_clone().unwrap());
        let mut got = vec![0u8; len];
        f.read_exact_at(&mut got, 0).unwrap();
        got
    }

    fn inode(fd: BorrowedFd<'_>) -> (u64, u64) {
        // SAFETY: stat is plain data; fstat fills it for an open descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open for the call; `st` is a valid out-pointer.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        (st.st_dev, st.st_ino)
    }

    /// A rendezvous no other test (or run) shares: the unique id is random per test.
    fn rendezvous(salt: &str) -> FdRendezvous {
        let mut id = random_bytes(128, std::process::id() as u64 ^ 0x9e37_79b9);
        id.extend_from_slice(salt.as_bytes());
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        id.extend_from_slice(&t.to_le_bytes());
        FdRendezvous::new(&id)
    }

    #[test]
    fn names_and_tags_come_from_the_unique_id() {
        let a = FdRendezvous::new(&[1u8; 128]);
        let b = FdRendezvous::new(&[2u8; 128]);
        assert_eq!(a, FdRendezvous::new(&[1u8; 128]));
        assert_ne!(a.socket_name(0), b.socket_name(0));
        assert_ne!(a.socket_name(0), a.socket_name(1));
        assert!(a.socket_name(7).starts_with("weft-nvls-"));
        assert!(a.socket_name(7).ends_with("-r7"));
        // The tag is not the name's hash: reading /proc/net/unix does not give it away.
        assert_ne!(a.name_hash, a.tag);
        assert!(!a.socket_name(0).contains(&format!("{:016x}", a.tag)));
        // Abstract names are at most 107 bytes.
        assert!(a.socket_name(usize::MAX).len() < 108);
        let m = a.message(5);
        assert_eq!(&m[..4], b"WFD1");
        assert_eq!(&m[4..8], &[0, 0, 0, 5]);
    }

    #[test]
    fn a_descriptor_crosses_between_threads() {
        let rv = rendezvous("threads");
        let inbox = rv.inbox(1).unwrap();
        let data = random_bytes(70_001, 11);
        let file = memfd_with(&data);
        let sent = inode(std::os::fd::AsFd::as_fd(&file));
        let deadline = Instant::now() + Duration::from_secs(10);
        let sender = std::thread::spawn(move || {
            rv.send(0, 1, std::os::fd::AsFd::as_fd(&file), deadline)
                .unwrap();
            // The sender may close its copy at once: the receiver owns its own.
            drop(file);
        });
        let fd = inbox.recv(0, deadline).unwrap();
        sender.join().unwrap();
        assert_eq!(inode(std::os::fd::AsFd::as_fd(&fd)), sent);
        assert_eq!(read_all(&fd, data.len()), data);
        // MSG_CMSG_CLOEXEC: children started later do not inherit it.
        // SAFETY: F_GETFD on an open descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }

    #[test]
    fn a_sender_waits_for_a_late_receiver_until_its_deadline() {
        let rv = rendezvous("late");
        let data = random_bytes(333, 5);
        let file = memfd_with(&data);
        let deadline = Instant::now() + Duration::from_secs(10);
        let receiver = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let inbox = rv.inbox(2).unwrap();
            read_all(&inbox.recv(4, deadline).unwrap(), 333)
        });
        rv.send(4, 2, std::os::fd::AsFd::as_fd(&file), deadline)
            .unwrap();
        assert_eq!(receiver.join().unwrap(), data);
    }

    #[test]
    fn a_receiver_gives_up_at_its_deadline_naming_the_rank() {
        let rv = rendezvous("recv-timeout");
        let inbox = rv.inbox(0).unwrap();
        let start = Instant::now();
        let e = inbox
            .recv(3, start + Duration::from_millis(200))
            .unwrap_err();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(
            matches!(e, FdPassingError::Timeout { peer: 3, .. }),
            "{e:?}"
        );
        assert_eq!(e.peer(), Some(3));
        let text = e.to_string();
        assert!(text.contains("from rank 3"), "{text}");
        assert!(text.contains(&format!("@{}", rv.socket_name(0))), "{text}");
        assert!(text.contains("WEFT_TIMEOUT"), "{text}");
    }

    #[test]
    fn a_sender_gives_up_on_a_receiver_that_never_binds() {
        let rv = rendezvous("send-timeout");
        let file = memfd_with(b"x");
        let start = Instant::now();
        let e = rv
            .send(
                0,
                6,
                std::os::fd::AsFd::as_fd(&file),
                start + Duration::from_millis(150),
            )
            .unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(150));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(e.peer(), Some(6));
        let text = e.to_string();
        assert!(text.contains("rank 6 never opened"), "{text}");
        assert!(text.contains(&rv.socket_name(6)), "{text}");
    }

    #[test]
    fn a_descriptor_from_the_wrong_rank_is_an_error_naming_both() {
        let rv = rendezvous("wrong-rank");
        let inbox = rv.inbox(1).unwrap();
        let file = memfd_with(b"abc");
        let deadline = Instant::now() + Duration::from_secs(10);
        rv.send(2, 1, std::os::fd::AsFd::as_fd(&file), deadline)
            .unwrap();
        let e = inbox.recv(0, deadline).unwrap_err();
        assert_eq!(e.peer(), Some(2));
        let text = e.to_string();
        assert!(text.starts_with("rank 2:"), "{text}");
        assert!(text.contains("rank 0's was expected"), "{text}");
    }

    #[test]
    fn strangers_messages_are_dropped_and_a_second_bind_is_refused() {
        let rv = rendezvous("stranger");
        let inbox = rv.inbox(0).unwrap();
        // Another communicator's tag under this name (the name is public, the tag is not).
        let stranger = FdRendezvous {
            name_hash: rv.name_hash,
            tag: rv.tag ^ 1,
        };
        let bad = memfd_with(b"stranger");
        let good = memfd_with(b"expected");
        let deadline = Instant::now() + Duration::from_secs(10);
        stranger
            .send(1, 0, std::os::fd::AsFd::as_fd(&bad), deadline)
            .unwrap();
        rv.send(1, 0, std::os::fd::AsFd::as_fd(&good), deadline)
            .unwrap();
        assert_eq!(read_all(&inbox.recv(1, deadline).unwrap(), 8), b"expected");
        let e = rv.inbox(0).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("binding rank 0's Unix socket"), "{text}");
        assert!(text.contains("leftover process"), "{text}");
    }

    /// The child's half of [`a_descriptor_crosses_between_processes`]: runs only in the
    /// child that test starts (the variable says where to send), passes trivially otherwise.
    const CHILD_VAR: &str = "WEFT_TEST_FD_PASSING_CHILD";

    #[test]
    fn child_sends_a_memfd() {
        let Ok(spec) = std::env::var(CHILD_VAR) else {
            return;
        };
        let mut parts = spec.split(':');
        let mut next = || u64::from_str_radix(parts.next().unwrap(), 16).unwrap();
        let rv = FdRendezvous {
            name_hash: next(),
            tag: next(),
        };
        let seed = next();
        let file = memfd_with(&random_bytes(12_345, seed));
        rv.send(
            1,
            0,
            std::os::fd::AsFd::as_fd(&file),
            Instant::now() + Duration::from_secs(20),
        )
        .unwrap();
    }

    #[test]
    fn a_descriptor_crosses_between_processes() {
        let rv = rendezvous("processes");
        let inbox = rv.inbox(0).unwrap();
        let seed = 0x5eed_u64 ^ std::process::id() as u64;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "gpu::fd_passing::test::child_sends_a_memfd",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(
                CHILD_VAR,
                format!("{:x}:{:x}:{seed:x}", rv.name_hash, rv.tag),
            )
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = inbox.recv(1, deadline);
        // Never leave the child behind, whatever happened.
        let status = loop {
            match child.try_wait().unwrap() {
                Some(status) => break status,
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    break child.wait().unwrap();
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        assert!(status.success(), "the child failed: {status}");
        let fd = got.unwrap();
        assert_eq!(read_all(&fd, 12_345), random_bytes(12_345, seed));
    }
}
