//! Establishing a connection without blocking: listen, the connect state machine, and the
//! accept state machine.
//!
//! A connection is one control socket plus `data_sockets` data sockets, all opened by the
//! connector. Each socket starts with a hello naming the listener's nonce, a random
//! connection id, and its index (0 = control), so that the listener can group the sockets of
//! concurrent connectors and drop strays. Once all of a connection's sockets have said hello,
//! the listener answers on the control socket; `connect` completes when that answer arrives,
//! `accept` when it has been written.
//!
//! The hello and the answer are `weft_core::wire::socket_stream::{HelloRepr, AnswerRepr}`.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use weft_core::wire::socket_handle::SocketHandleRepr;
use weft_core::wire::socket_stream::{ANSWER_LEN, AnswerRepr, HELLO_LEN, HelloRepr};

use super::super::{NetError, NetErrorKind};
use super::LocalSettings;
use super::comm::{Conn, Role};
use super::sys;
use super::{SocketRecvComm, SocketSendComm};

/// Sockets that connect but never complete their hello are dropped after this long.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between tries of a refused connect.
const REFUSED_RETRY: Duration = Duration::from_millis(10);
/// How long refused connects are retried. A handle exists only once its listener is up, so a
/// lasting refusal means the listener is gone: say so quickly rather than at the deadline.
const REFUSED_FOR: Duration = Duration::from_secs(5);

/// A random 64-bit value (std's SipHash keys are seeded from the OS per `RandomState`).
pub(super) fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        Instant::now()
            .elapsed()
            .as_nanos()
            .wrapping_add(u128::from(std::process::id())),
    );
    h.finish()
}

/// Every connection socket: nonblocking, no Nagle delay (the control socket carries small
/// frames that must leave at once), and dead-peer detection.
fn nonblocking_nodelay(s: &TcpStream, peer: SocketAddr) -> Result<(), NetError> {
    s.set_nonblocking(true)
        .and_then(|()| s.set_nodelay(true))
        .and_then(|()| sys::detect_dead_peer(s.as_raw_fd()))
        .map_err(|e| {
            NetError::io(
                "configure a socket (nonblocking, TCP_NODELAY, keepalive)",
                &e,
            )
            .peer(peer)
        })
}

// ---------------------------------------------------------------------------------------
// Listen and accept.

#[derive(Debug)]
struct PendingSocket {
    stream: TcpStream,
    peer: SocketAddr,
    buf: [u8; HELLO_LEN],
    got: usize,
    since: Instant,
}

#[derive(Debug)]
struct Group {
    sockets: Vec<Option<TcpStream>>,
    peer: SocketAddr,
    since: Instant,
    answered: usize,
}

/// A listening socket and the connections half-way through their handshake.
#[derive(Debug)]
pub struct SocketListenComm {
    listener: TcpListener,
    handle: SocketHandleRepr,
    pending: Vec<PendingSocket>,
    groups: HashMap<u64, Group>,
    /// This end's own settings (not in the handle).
    local: LocalSettings,
}

impl SocketListenComm {
    /// Listens on `addr`; connectors must repeat `nonce` (random when `None`).
    pub(super) fn bind(
        addr: SocketAddr,
        data_sockets: u8,
        threads: u8,
        settings: LocalSettings,
        nonce: Option<u64>,
    ) -> Result<SocketListenComm, NetError> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            NetError::io(format!("listen on {addr}"), &e)
                .hint("check that the interface's address is still configured (`ip addr`)")
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::io("make the listening socket nonblocking", &e))?;
        let local = listener
            .local_addr()
            .map_err(|e| NetError::io("read the listening socket's address", &e))?;
        Ok(SocketListenComm {
            listener,
            handle: SocketHandleRepr {
                addr: local,
                data_sockets,
                threads,
                nonce: nonce.unwrap_or_else(random_u64),
            },
            pending: Vec::new(),
            groups: HashMap::new(),
            local: settings,
        })
    }

    /// The listening address and what a connector must send.
    pub(crate) fn handle(&self) -> &SocketHandleRepr {
        &self.handle
    }

    /// One nonblocking step of accepting; `Ok(Some)` once a whole connection is established.
    pub(super) fn poll_accept(&mut self) -> Result<Option<SocketRecvComm>, NetError> {
        let me = self.handle.addr;
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    // An IPv6 listener takes IPv4 too: name such peers `a.b.c.d`.
                    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                    nonblocking_nodelay(&stream, peer)?;
                    self.pending.push(PendingSocket {
                        stream,
                        peer,
                        buf: [0; HELLO_LEN],
                        got: 0,
                        since: Instant::now(),
                    });
                }
                Err(e) if sys::would_block(&e) => break,
                // A connection reset before we accepted it concerns only that connector.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e) => {
                    return Err(NetError::io(format!("accept on {me}"), &e)
                        .hint("the process may be out of file descriptors (ulimit -n)"));
                }
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let read = sys::recv(p.stream.as_raw_fd(), &mut p.buf[p.got..]);
            let verdict = match read {
                Ok(0) => Some(Err("closed before its hello".to_string())),
                Ok(n) => {
                    p.got += n;
                    (p.got == HELLO_LEN)
                        .then(|| HelloRepr::parse(&p.buf).map_err(|e| e.to_string()))
                }
                Err(e) if sys::would_block(&e) => (now.duration_since(p.since) > HELLO_TIMEOUT)
                    .then(|| Err("no hello within 30 s".to_string())),
                Err(e) => Some(Err(e.to_string())),
            };
            let Some(verdict) = verdict else {
                i += 1;
                continue;
            };
            let p = self.pending.swap_remove(i);
            let hello = match verdict {
                Ok(h) => h,
                Err(why) => {
                    log::warn!(
                        "NET/Socket: dropping a connection from {} to {me}: {why}",
                        p.peer
                    );
                    continue;
                }
            };
            let expected = u16::from(self.handle.data_sockets);
            if hello.nonce != self.handle.nonce || hello.count != expected || hello.index > expected
            {
                log::warn!(
                    "NET/Socket: dropping a connection from {} to {me}: its hello (nonce {:#x}, \
                     socket {}/{}) does not match this listener (nonce {:#x}, {expected} data \
                     sockets); it was meant for another listener or another run",
                    p.peer,
                    hello.nonce,
                    hello.index,
                    hello.count,
                    self.handle.nonce
                );
                continue;
            }
            let group = self.groups.entry(hello.conn_id).or_insert_with(|| Group {
                sockets: (0..=expected).map(|_| None).collect(),
                peer: p.peer,
                since: now,
                answered: 0,
            });
            match group.sockets.get_mut(usize::from(hello.index)) {
                Some(slot @ None) => *slot = Some(p.stream),
                _ => log::warn!(
                    "NET/Socket: dropping a duplicate socket {} of a connection from {}",
                    hello.index,
                    p.peer
                ),
            }
        }
        self.groups.retain(|id, g| {
            let keep = now.duration_since(g.since) < HELLO_TIMEOUT
                || g.sockets.iter().all(Option::is_some);
            if !keep {
                log::warn!(
                    "NET/Socket: dropping connection {id:#x} from {} to {me}: only {} of {} \
                     sockets arrived within 30 s",
                    g.peer,
                    g.sockets.iter().filter(|s| s.is_some()).count(),
                    g.sockets.len()
                );
            }
            keep
        });
        let ready = self
            .groups
            .iter()
            .find(|(_, g)| g.sockets.iter().all(Option::is_some))
            .map(|(&id, _)| id);
        let Some(id) = ready else {
            return Ok(None);
        };
        let Some(group) = self.groups.get_mut(&id) else {
            return Ok(None);
        };
        let mut answer = [0u8; ANSWER_LEN];
        if let Err(e) = AnswerRepr.emit(&mut answer) {
            log::error!("NET/Socket: internal error: cannot encode the answer: {e}");
        }
        let peer = group.peer;
        if let Some(Some(control)) = group.sockets.first() {
            while group.answered < ANSWER_LEN {
                match sys::send(control.as_raw_fd(), &answer[group.answered..]) {
                    Ok(n) => group.answered += n,
                    Err(e) if sys::would_block(&e) => return Ok(None),
                    Err(e) => {
                        self.groups.remove(&id);
                        log::warn!(
                            "NET/Socket: connection from {peer} failed during its handshake: {e}"
                        );
                        return Ok(None);
                    }
                }
            }
        }
        let Some(group) = self.groups.remove(&id) else {
            return Ok(None);
        };
        let conn = Conn::new(
            Role::Recv,
            group.sockets.into_iter().flatten(),
            usize::from(self.handle.threads),
            peer,
            &self.local,
            id,
        )?;
        Ok(Some(SocketRecvComm::new(conn)))
    }
}

// ---------------------------------------------------------------------------------------
// Connect.

#[derive(Debug)]
enum SocketStage {
    /// The TCP connect is under way.
    Connecting(TcpStream),
    /// Waiting to retry a refused connect.
    RetryAt(Instant),
    /// Connected; `usize` hello bytes written.
    Hello(TcpStream, usize),
    /// Hello written.
    Ready(TcpStream),
}

/// A connect in progress: what [`super::SocketNet`]'s `connect` keeps between polls.
#[derive(Debug)]
pub struct SocketConnecting {
    handle: SocketHandleRepr,
    conn_id: u64,
    sockets: Vec<SocketStage>,
    answer: [u8; ANSWER_LEN],
    answer_got: usize,
    deadline: Instant,
    refused_deadline: Instant,
    local: LocalSettings,
    /// The local address every socket connects from, when one was chosen.
    from: Option<IpAddr>,
}

impl SocketConnecting {
    /// Starts connecting to the listener of `handle`, from the address `from` when given.
    pub(super) fn start(
        handle: SocketHandleRepr,
        timeout: Duration,
        local: LocalSettings,
        from: Option<IpAddr>,
    ) -> Result<SocketConnecting, NetError> {
        let count = usize::from(handle.data_sockets) + 1;
        let mut sockets = Vec::with_capacity(count);
        for _ in 0..count {
            sockets.push(SocketStage::RetryAt(Instant::now()));
        }
        let mut this = SocketConnecting {
            handle,
            conn_id: random_u64(),
            sockets,
            answer: [0; ANSWER_LEN],
            answer_got: 0,
            deadline: Instant::now() + timeout,
            refused_deadline: Instant::now() + (timeout / 2).min(REFUSED_FOR),
            local,
            from,
        };
        // Start the TCP connects right away so that they progress while the caller polls.
        for i in 0..count {
            this.advance_socket(i)?;
        }
        Ok(this)
    }

    /// Whether a failed TCP connect is worth another try.
    fn retryable(&self, e: &std::io::Error) -> bool {
        let now = Instant::now();
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => now < self.refused_deadline,
            std::io::ErrorKind::TimedOut => now < self.deadline,
            _ => false,
        }
    }

    /// Moves socket `i` one stage forward if it can.
    fn advance_socket(&mut self, i: usize) -> Result<(), NetError> {
        let addr = self.handle.addr;
        let mut hello = [0u8; HELLO_LEN];
        HelloRepr {
            index: i as u16,
            count: u16::from(self.handle.data_sockets),
            nonce: self.handle.nonce,
            conn_id: self.conn_id,
        }
        .emit(&mut hello)
        .map_err(|e| {
            NetError::new(NetErrorKind::InvalidHandle(e), "encode the socket hello").cause(e)
        })?;
        let refused_hint = "is the listener alive? Check NCCL_SOCKET_IFNAME on both hosts and \
                            that the address is reachable (firewall, routes)";
        let stage = std::mem::replace(&mut self.sockets[i], SocketStage::RetryAt(Instant::now()));
        let next = match stage {
            SocketStage::RetryAt(at) => {
                if Instant::now() < at {
                    SocketStage::RetryAt(at)
                } else {
                    match sys::start_connect_from(&addr, self.from) {
                        Ok(s) => SocketStage::Connecting(s),
                        Err(e) if self.retryable(&e) => {
                            SocketStage::RetryAt(Instant::now() + REFUSED_RETRY)
                        }
                        Err(e) => {
                            return Err(NetError::io(format!("connect to {addr}"), &e)
                                .peer(addr)
                                .hint(refused_hint));
                        }
                    }
                }
            }
            SocketStage::Connecting(s) => match sys::connect_result(&s) {
                Ok(true) => {
                    nonblocking_nodelay(&s, addr)?;
                    SocketStage::Hello(s, 0)
                }
                Ok(false) => SocketStage::Connecting(s),
                Err(e) if self.retryable(&e) => {
                    SocketStage::RetryAt(Instant::now() + REFUSED_RETRY)
                }
                Err(e) => {
                    return Err(NetError::io(format!("connect to {addr}"), &e)
                        .peer(addr)
                        .hint(refused_hint));
                }
            },
            SocketStage::Hello(s, written) => match sys::send(s.as_raw_fd(), &hello[written..]) {
                Ok(n) if written + n == HELLO_LEN => SocketStage::Ready(s),
                Ok(n) => SocketStage::Hello(s, written + n),
                Err(e) if sys::would_block(&e) => SocketStage::Hello(s, written),
                Err(e) => {
                    return Err(NetError::io(format!("send hello to {addr}"), &e)
                        .peer(addr)
                        .hint(refused_hint));
                }
            },
            ready @ SocketStage::Ready(_) => ready,
        };
        self.sockets[i] = next;
        Ok(())
    }

    /// One nonblocking step; `Ok(Some)` once every socket is connected and the listener
    /// answered.
    pub(crate) fn poll(&mut self) -> Result<Option<SocketSendComm>, NetError> {
        let addr = self.handle.addr;
        for i in 0..self.sockets.len() {
            // Up to three stages per poll: retry -> connecting -> connected (hello) -> ready.
            for _ in 0..3 {
                self.advance_socket(i)?;
            }
        }
        let all_ready = self
            .sockets
            .iter()
            .all(|s| matches!(s, SocketStage::Ready(_)));
        if all_ready {
            let Some(SocketStage::Ready(control)) = self.sockets.first() else {
                return Ok(None);
            };
            let fd = control.as_raw_fd();
            while self.answer_got < ANSWER_LEN {
                match sys::recv(fd, &mut self.answer[self.answer_got..]) {
                    Ok(0) => {
                        return Err(NetError::new(
                            NetErrorKind::PeerClosed,
                            format!("handshake with {addr}: the listener closed the connection"),
                        )
                        .peer(addr)
                        .hint("the listener dropped it (see its log: wrong nonce means a stale handle from another run)"));
                    }
                    Ok(n) => self.answer_got += n,
                    Err(e) if sys::would_block(&e) => break,
                    Err(e) => {
                        return Err(NetError::io(format!("handshake with {addr}"), &e).peer(addr));
                    }
                }
            }
            if self.answer_got == ANSWER_LEN {
                if let Err(e) = AnswerRepr::parse(&self.answer) {
                    return Err(NetError::new(
                        NetErrorKind::Protocol,
                        format!("handshake with {addr}: bad answer"),
                    )
                    .peer(addr)
                    .cause(e)
                    .hint("the handle points at something that is not a weft listener"));
                }
                let streams =
                    std::mem::take(&mut self.sockets)
                        .into_iter()
                        .filter_map(|s| match s {
                            SocketStage::Ready(s) => Some(s),
                            _ => None,
                        });
                let conn = Conn::new(
                    Role::Send,
                    streams,
                    usize::from(self.handle.threads),
                    addr,
                    &self.local,
                    self.conn_id,
                )?;
                return Ok(Some(SocketSendComm::new(conn)));
            }
        }
        if Instant::now() >= self.deadline {
            let connected = self
                .sockets
                .iter()
                .filter(|s| matches!(s, SocketStage::Ready(_) | SocketStage::Hello(..)))
                .count();
            return Err(NetError::new(
                NetErrorKind::Timeout,
                format!(
                    "connect to {addr}: {connected} of {} sockets connected, no handshake answer \
                     before the deadline",
                    self.sockets.len()
                ),
            )
            .peer(addr)
            .hint("is the peer calling accept (is it alive)? raise WEFT_SOCKET_CONNECT_TIMEOUT if it is merely slow"));
        }
        Ok(None)
    }
}
