//! The few socket calls std does not offer: a nonblocking connect, `send` without SIGPIPE
//! (a library inside NCCL's process must not be killed by a peer's reset), and `poll`.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Starts a nonblocking TCP connect to `addr`. The returned stream is nonblocking and may
/// still be connecting: check with [`connect_result`] once it polls writable.
pub fn start_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    start_connect_from(addr, None)
}

/// As [`start_connect`], from the local address `from` when given (port 0: any port), so
/// that the connection leaves through the NIC that holds it (the mesh backend chose that NIC
/// by subnet).
pub fn start_connect_from(addr: &SocketAddr, from: Option<IpAddr>) -> io::Result<TcpStream> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(ip) = from {
        let (local, local_len) = sockaddr(&SocketAddr::new(ip, 0));
        // SAFETY: `local` holds a valid sockaddr of `local_len` bytes; a family that does not
        // match the socket's is refused by bind(2) with an error, not undefined behaviour.
        let rc = unsafe {
            libc::bind(
                owned.as_raw_fd(),
                (&raw const local).cast::<libc::sockaddr>(),
                local_len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes for the socket's family.
    let rc = unsafe {
        libc::connect(
            owned.as_raw_fd(),
            (&raw const storage).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(err);
        }
    }
    Ok(TcpStream::from(owned))
}

/// For a stream from [`start_connect`]: `Ok(true)` once connected, `Ok(false)` while still
/// connecting, the connect error otherwise.
pub fn connect_result(stream: &TcpStream) -> io::Result<bool> {
    if !poll_one(stream.as_raw_fd(), libc::POLLOUT, 0)? {
        return Ok(false);
    }
    match stream.take_error()? {
        Some(err) => Err(err),
        None => Ok(true),
    }
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero bytes are valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `send(2)` with MSG_NOSIGNAL: a reset peer gives EPIPE instead of killing the process.
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid readable slice for its length.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `recv(2)` without blocking; `Ok(0)` means the peer closed.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid writable slice for its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Polls one descriptor for `events`; `Ok(true)` if ready (or in error) within `timeout_ms`.
pub fn poll_one(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    poll(&mut fds, timeout_ms).map(|n| n > 0)
}

/// `poll(2)` over `fds`, retrying on EINTR; returns how many are ready.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    loop {
        // SAFETY: `fds` is a valid array of pollfd for its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Whether an I/O error only means "try again later".
pub fn would_block(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Seconds of silence before the kernel probes a connection, the probe interval and count,
/// and the most seconds sent data may stay unacknowledged. A peer host that vanished without
/// a reset (power loss, cable, partition) thus turns into a socket error within about a
/// minute instead of a hang; a live but idle peer answers the probes from its kernel.
const KEEPALIVE_IDLE_S: libc::c_int = 30;
const KEEPALIVE_INTERVAL_S: libc::c_int = 5;
const KEEPALIVE_PROBES: libc::c_int = 6;
const USER_TIMEOUT_MS: libc::c_uint = 60_000;

pub(crate) fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and we pass its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Enables keepalive probes and TCP_USER_TIMEOUT on a connected socket (see the constants).
pub fn detect_dead_peer(fd: RawFd) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE_S)?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        KEEPALIVE_INTERVAL_S,
    )?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES)?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        USER_TIMEOUT_MS as libc::c_int,
    )
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host, so traces of
/// the two ends of a loopback connection line up.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
