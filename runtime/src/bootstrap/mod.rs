//! Bootstrap: unique id, root rendezvous, the ring of TCP sockets, all-gather, send/recv by
//! tag, barrier, broadcast and abort. NCCL's `bootstrap.cc`.
//!
//! 1. One process calls [`UniqueId::new`] (or [`BootstrapRoot::start`]): a root starts
//!    listening and the id (root address + random secret) goes to every rank.
//! 2. Each rank calls [`Bootstrap::init`]: it opens its own listening socket, checks in
//!    with the root (secret, rank, address), and learns where the next rank of the ring
//!    listens. It connects there; the previous rank connects to it.
//! 3. The ranks all-gather their listening addresses over the ring, so any rank can open a
//!    data connection to any other for [`Bootstrap::send`].
//!
//! Every connection starts with a hello carrying the secret (compared in constant time);
//! anything else is logged and dropped while the real ranks carry on. Accepted connections
//! are handled on their own threads with a short handshake deadline, so a silent client
//! stalls nothing. Every wait has a deadline (`WEFT_BOOTSTRAP_TIMEOUT`, default 30 s), and
//! every error names the rank and address at fault. When a ring operation fails, the rank
//! passes an abort naming the culprit to its next rank, so the whole ring fails fast with
//! the same diagnosis instead of each rank timing out on its neighbour.
//!
//! The secret keeps out strays (another job, an old id, a port scanner); it is sent in the
//! clear, so it is no defence against someone who can read the network (NCCL has none).
//! Ranks listen on the address from which they reach the root, so the root's interface
//! (`WEFT_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`, see [`interface`]) decides the network.

mod cancel;
mod error;
pub(crate) mod frame;
pub mod identity;
mod inbox;
pub mod interface;
mod root;
mod unique_id;

pub use cancel::Cancel;
pub use error::{BootstrapError, Peer};
pub use root::BootstrapRoot;
pub use unique_id::UniqueId;
pub(crate) use unique_id::random_secret;
pub use weft_core::wire::bootstrap::AbortReason;

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use weft_config::{BootstrapSettings, Settings};

use weft_core::wire::bootstrap::{
    ABORT_FIXED_LEN, AbortRepr, FrameKind, HelloRepr, MAX_ABORT_TEXT, MAX_BODY_LEN, Purpose,
    RING_INFO_LEN, RingInfoRepr, SockAddrRepr,
};

use frame::{ReadFail, connect_retry, read_frame, write_frame, write_hello};
use inbox::{AbortNote, Inbox, Shared, serve_connection};
use root::{send_abort, spawn_accept_loop, wake_accept_loop};

/// Tags at or above this are weft's own (broadcast); `send`/`recv` refuse them.
pub const RESERVED_TAGS: u32 = 0xF000_0000;
const BROADCAST_TAG: u32 = RESERVED_TAGS;

/// Knobs of a bootstrap. [`BootstrapOptions::from_env`] reads the environment;
/// `Default` does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapOptions {
    /// The longest any single wait on a peer may take: connecting (with retries), each
    /// rendezvous step, each step of a ring operation, each `recv`. Default 30 s;
    /// `WEFT_BOOTSTRAP_TIMEOUT` (seconds, fractions allowed).
    pub timeout: Duration,
    /// How long an accepted connection has to send a valid hello before it is dropped.
    /// Default 5 s (capped at `timeout`).
    pub handshake_timeout: Duration,
    /// How long a root waits for the first rank. Default 10 min.
    pub root_idle_timeout: Duration,
    /// `NCCL_SOCKET_IFNAME`-style filter choosing the root's interface
    /// (`WEFT_SOCKET_IFNAME`, then `NCCL_SOCKET_IFNAME`).
    pub interface: Option<String>,
    /// Listen on this IP for the root, ignoring `interface`.
    pub root_ip: Option<IpAddr>,
    /// The root's port; 0 picks a free one. `WEFT_BOOTSTRAP_PORT`.
    pub root_port: u16,
    /// Cancels this rank's bootstrap from another thread, its init included (see
    /// [`Cancel`]). None by default.
    pub cancel: Option<Cancel>,
}

impl Default for BootstrapOptions {
    /// weft-config's defaults (`WEFT_BOOTSTRAP_TIMEOUT`, `WEFT_BOOTSTRAP_PORT` unset).
    fn default() -> Self {
        let settings = BootstrapSettings::default();
        BootstrapOptions {
            timeout: settings.timeout,
            handshake_timeout: Duration::from_secs(5),
            root_idle_timeout: Duration::from_secs(600),
            interface: None,
            root_ip: None,
            root_port: settings.port,
            cancel: None,
        }
    }
}

impl BootstrapOptions {
    /// The process environment's settings ([`Self::from_settings`]); a malformed value is
    /// logged and ignored.
    pub fn from_env() -> Self {
        Self::from_settings(&Settings::from_env_or_defaults())
    }

    /// [`Self::from_settings`] of the variables `get` gives, a malformed value ignored.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        Self::from_settings(&Settings::from_lookup_or_defaults(&get))
    }

    /// Defaults overridden by `WEFT_BOOTSTRAP_TIMEOUT`, `WEFT_BOOTSTRAP_PORT` and the
    /// interface filter (`WEFT_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`).
    pub fn from_settings(settings: &Settings) -> Self {
        BootstrapOptions {
            timeout: settings.bootstrap.timeout,
            root_port: settings.bootstrap.port,
            interface: settings.net.socket.ifname.clone(),
            ..BootstrapOptions::default()
        }
    }

    /// Loopback only, with the given timeout: single-host tests and examples.
    pub fn loopback(timeout: Duration) -> Self {
        BootstrapOptions {
            timeout,
            handshake_timeout: timeout.min(Duration::from_secs(5)),
            root_ip: Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            ..BootstrapOptions::default()
        }
    }

    fn handshake(&self) -> Duration {
        self.handshake_timeout.min(self.timeout)
    }
}

/// Aborts a bootstrap from another thread: every wait in it returns
/// [`BootstrapError::Aborted`] and its sockets close, so its peers fail too, naming it.
#[derive(Debug, Clone)]
pub struct AbortHandle {
    shared: Arc<Shared>,
}

impl AbortHandle {
    pub fn abort(&self, text: &str) {
        self.shared.abort(
            AbortNote {
                by: None,
                culprit: None,
                reason: AbortReason::User,
                text: text.to_string(),
            },
            Shutdown::Both,
        );
    }
}

/// One rank's bootstrap: connected to its ring neighbours and knowing every rank's address.
#[derive(Debug)]
pub struct Bootstrap {
    rank: usize,
    nranks: usize,
    opts: BootstrapOptions,
    shared: Arc<Shared>,
    listen_addr: SocketAddr,
    /// Every rank's listening address, indexed by rank.
    peers: Vec<SocketAddr>,
    ring_next: TcpStream,
    ring_prev: TcpStream,
    /// Our data connections to other ranks, opened on first `send`.
    data_out: HashMap<usize, TcpStream>,
    /// Counts ring steps, so that a frame from the wrong operation is caught.
    ring_seq: u32,
    /// The first failure; once set, ring operations refuse to run.
    failed: Option<String>,
    /// Declared last: dropped after the streams above are shut down.
    _accept: AcceptGuard,
}

impl Bootstrap {
    /// Joins the bootstrap identified by `id` as `rank` of `nranks`. Every rank must call it
    /// (in any order); it returns once the ring is connected and all addresses are known.
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        opts: &BootstrapOptions,
    ) -> Result<Bootstrap, BootstrapError> {
        if nranks == 0 || rank >= nranks || u32::try_from(nranks).is_err() {
            return Err(BootstrapError::InvalidArgument(format!(
                "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
            )));
        }
        let shared = Arc::new(Shared {
            rank,
            nranks,
            secret: id.secret(),
            handshake_timeout: opts.handshake(),
            stop: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            inbox: Mutex::new(Inbox::default()),
            arrived: Condvar::new(),
        });
        if let Some(cancel) = &opts.cancel {
            cancel.watch(&shared);
            if shared.stop.load(Ordering::Acquire) {
                return Err(stopped_error(&shared));
            }
        }
        let root_addr = id.root_addr();
        let root_peer = Peer::Root(root_addr);

        // 1. Reach the root; listen on the address we reached it from (it routes).
        let mut root = connect_retry(root_addr, Instant::now() + opts.timeout, &shared.stop)
            .map_err(|(waited, source)| {
                unreachable_unless_stopped(&shared, root_peer, waited, source)
            })?;
        let local_ip = root
            .local_addr()
            .map_err(|source| BootstrapError::Local {
                what: "reading the local address of the root connection".into(),
                source,
            })?
            .ip();
        let listener =
            TcpListener::bind((local_ip, 0)).map_err(|source| BootstrapError::Local {
                what: format!("binding rank {rank}'s bootstrap socket on {local_ip}"),
                source,
            })?;
        let listen_addr = listener
            .local_addr()
            .map_err(|source| BootstrapError::Local {
                what: "reading the bootstrap socket's address".into(),
                source,
            })?;
        let conn_shared = Arc::clone(&shared);
        let shutdown = Arc::new(AtomicBool::new(false));
        let accept = spawn_accept_loop(
            listener,
            Arc::clone(&shutdown),
            format!("bootstrap rank {rank} ({listen_addr})"),
            move |stream, from| serve_connection(&conn_shared, stream, from),
        )
        .map_err(|source| BootstrapError::Local {
            what: "starting the bootstrap accept thread".into(),
            source,
        })?;
        // From here on, dropping `guard` stops the accept loop if init fails.
        let guard = AcceptGuard {
            flag: shutdown,
            shared: Arc::clone(&shared),
            addr: listen_addr,
            thread: Some(accept),
        };

        // 2. Check in: hello, then our address.
        let hello = HelloRepr {
            secret: id.secret(),
            nranks: nranks as u32,
            purpose: Purpose::Root,
        };
        let mut addr_body = [0u8; weft_core::wire::bootstrap::SOCK_ADDR_LEN];
        let sent = write_hello(&mut root, rank as u32, &hello, opts.timeout).and_then(|_| {
            SockAddrRepr(listen_addr)
                .emit(&mut addr_body)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            write_frame(
                &mut root,
                FrameKind::PeerAddress,
                rank as u32,
                0,
                &addr_body,
                opts.timeout,
            )
        });
        if let Err(e) = sent {
            return Err(BootstrapError::PeerLost {
                peer: root_peer,
                what: "checking in with the root",
                source: Some(e),
            });
        }

        // 3. Wait for our ring neighbour's address. The root gives up `timeout` after the
        // first rank checked in and then tells us who is missing; wait a little longer so
        // that its message, not our own timeout, is what we report.
        let grace = Duration::from_secs(1) + opts.timeout / 10;
        let wait = opts.timeout + grace;
        let max_body = (RING_INFO_LEN.max(ABORT_FIXED_LEN + MAX_ABORT_TEXT)) as u32;
        let (header, body) = read_frame(
            &mut root,
            Some(Instant::now() + wait),
            &shared.stop,
            max_body,
        )
        .map_err(|e| {
            read_error(
                &shared,
                root_peer,
                "waiting for the root to send the ring",
                wait,
                e,
            )
        })?;
        let next_addr = match header.kind {
            FrameKind::RingInfo => {
                let info = RingInfoRepr::parse(&body)
                    .map_err(|e| BootstrapError::protocol(root_peer, e))?;
                if info.next_rank as usize != (rank + 1) % nranks || info.nranks as usize != nranks
                {
                    return Err(BootstrapError::Protocol {
                        peer: root_peer,
                        detail: format!("ring info {info:?} does not fit rank {rank} of {nranks}"),
                    });
                }
                info.next_addr
            }
            FrameKind::Abort => return Err(abort_error(Some(root_peer), &body)),
            other => {
                return Err(BootstrapError::Protocol {
                    peer: root_peer,
                    detail: format!("expected ring info, got a {other:?} frame"),
                });
            }
        };
        drop(root);

        // 4. Connect to the next rank; the previous one connects to us.
        let next = (rank + 1) % nranks;
        let prev = (rank + nranks - 1) % nranks;
        let next_peer = Peer::Rank(next, Some(next_addr));
        let mut ring_next = connect_retry(next_addr, Instant::now() + opts.timeout, &shared.stop)
            .map_err(|(waited, source)| {
            unreachable_unless_stopped(&shared, next_peer, waited, source)
        })?;
        let hello = HelloRepr {
            purpose: Purpose::Ring,
            ..hello
        };
        write_hello(&mut ring_next, rank as u32, &hello, opts.timeout).map_err(|e| {
            BootstrapError::PeerLost {
                peer: next_peer,
                what: "opening the ring link",
                source: Some(e),
            }
        })?;
        if let Ok(clone) = ring_next.try_clone() {
            shared.lock().streams.push(clone);
        }
        let ring_prev = wait_ring_prev(&shared, prev, opts.timeout)?;

        let mut bootstrap = Bootstrap {
            rank,
            nranks,
            opts: opts.clone(),
            shared,
            listen_addr,
            peers: Vec::new(),
            ring_next,
            ring_prev,
            data_out: HashMap::new(),
            ring_seq: 0,
            failed: None,
            _accept: guard,
        };

        // 5. Learn every rank's address.
        let mut mine = [0u8; weft_core::wire::bootstrap::SOCK_ADDR_LEN];
        SockAddrRepr(listen_addr)
            .emit(&mut mine)
            .map_err(|e| BootstrapError::InvalidArgument(e.to_string()))?;
        let all = bootstrap.all_gather(&mine)?;
        for (r, bytes) in all.iter().enumerate() {
            let addr = SockAddrRepr::parse(bytes)
                .map_err(|e| BootstrapError::protocol(Peer::Rank(r, None), e))?;
            bootstrap.peers.push(addr.0);
        }
        log::debug!("bootstrap rank {rank}/{nranks}: ring connected, listening on {listen_addr}");
        Ok(bootstrap)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// Where this rank's bootstrap socket listens.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// Every rank's bootstrap address, indexed by rank.
    pub fn peer_addrs(&self) -> &[SocketAddr] {
        &self.peers
    }

    /// A handle that aborts this bootstrap from another thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Every rank's `mine`, indexed by rank (lengths may differ). A ring all-gather:
    /// `nranks - 1` steps, each forwarding one block to the next rank. Collective: every
    /// rank must call it, in the same order as the other ring operations.
    pub fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.all_gather_for(mine, "all_gather")
    }

    /// [`Self::all_gather`], its errors naming `what` the exchange is for ("init's
    /// all_gather of the windows"): a rank that stops answering half-way through an init is
    /// then found at its step, not just "in an all_gather".
    pub fn all_gather_for(
        &mut self,
        mine: &[u8],
        what: &'static str,
    ) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.ring_gather(mine, FrameKind::Data, what)
    }

    /// Returns once every rank has called it, or fails: a teardown's barrier (the last
    /// operation on this bootstrap), which no other operation of a peer takes for its own:
    /// a peer still waiting in a barrier or an exchange fails, naming this rank, instead of
    /// taking this for its partner.
    pub fn part(&mut self) -> Result<(), BootstrapError> {
        self.ring_gather(&[], FrameKind::Parting, "teardown")
            .map(drop)
    }

    /// The ring all-gather, its steps sent as `kind` frames.
    fn ring_gather(
        &mut self,
        mine: &[u8],
        kind: FrameKind,
        what: &'static str,
    ) -> Result<Vec<Vec<u8>>, BootstrapError> {
        check_len(mine)?;
        self.check_usable()?;
        let n = self.nranks;
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); n];
        if let Some(slot) = blocks.get_mut(self.rank) {
            *slot = mine.to_vec();
        }
        for step in 0..n.saturating_sub(1) {
            let send_idx = (self.rank + n - step) % n;
            let recv_idx = (self.rank + n - step - 1) % n;
            let outgoing = std::mem::take(blocks.get_mut(send_idx).unwrap_or(&mut Vec::new()));
            let result = self.ring_exchange(&outgoing, step == 0, kind, what);
            if let Some(slot) = blocks.get_mut(send_idx) {
                *slot = outgoing;
            }
            match result {
                Ok(block) => {
                    if let Some(slot) = blocks.get_mut(recv_idx) {
                        *slot = block;
                    }
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
        Ok(blocks)
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.all_gather(&[]).map(drop)
    }

    /// Sends `data` to `peer`, to be picked up by its `recv(self.rank(), tag)`. Messages to
    /// one peer arrive in order; messages with other tags wait at the peer until asked for.
    /// Returns once the bytes are handed to the kernel (not when the peer received them).
    pub fn send(&mut self, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError> {
        self.check_tag(peer, tag)?;
        check_len(data)?;
        self.send_frame(peer, tag, data)
    }

    /// Receives the next message from `peer` with `tag`, waiting up to the timeout.
    pub fn recv(&mut self, peer: usize, tag: u32) -> Result<Vec<u8>, BootstrapError> {
        self.check_tag(peer, tag)?;
        self.recv_frame(peer, tag, "recv")
    }

    /// Broadcast among `ranks` (which must include `root` and this rank; typically the ranks
    /// of one node): `root` passes its bytes, the others' `data` is ignored; all return the
    /// root's bytes. Only the listed ranks take part.
    pub fn broadcast(
        &mut self,
        root: usize,
        ranks: &[usize],
        data: &[u8],
    ) -> Result<Vec<u8>, BootstrapError> {
        if !ranks.contains(&root) || !ranks.contains(&self.rank) {
            return Err(BootstrapError::InvalidArgument(format!(
                "broadcast from rank {root} among {ranks:?}: both the root and this rank ({}) must be listed",
                self.rank
            )));
        }
        if let Some(bad) = ranks.iter().find(|&&r| r >= self.nranks) {
            return Err(BootstrapError::InvalidArgument(format!(
                "broadcast: rank {bad} out of range for {} ranks",
                self.nranks
            )));
        }
        if self.rank == root {
            let mut targets: Vec<usize> = ranks.iter().copied().filter(|&r| r != root).collect();
            targets.sort_unstable();
            targets.dedup();
            for r in targets {
                self.send_frame(r, BROADCAST_TAG, data)?;
            }
            Ok(data.to_vec())
        } else {
            self.recv_frame(root, BROADCAST_TAG, "broadcast")
        }
    }

    /// Gives up: tells the next rank of the ring and every rank we have sent to, then makes
    /// every wait here fail. Peers report an abort by this rank with `text`.
    pub fn abort(&mut self, text: &str) {
        let me = self.rank as u32;
        send_abort(&mut self.ring_next, me, None, AbortReason::User, text);
        for stream in self.data_out.values_mut() {
            send_abort(stream, me, None, AbortReason::User, text);
        }
        self.failed
            .get_or_insert_with(|| format!("aborted: {text}"));
        // Only our reads are shut: the abort frame, not a broken pipe, tells peers why.
        self.shared.abort(
            AbortNote {
                by: None,
                culprit: None,
                reason: AbortReason::User,
                text: text.to_string(),
            },
            Shutdown::Read,
        );
    }

    fn check_usable(&self) -> Result<(), BootstrapError> {
        if let Some(first) = &self.failed {
            return Err(BootstrapError::Poisoned(first.clone()));
        }
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(stopped_error(&self.shared));
        }
        Ok(())
    }

    fn check_tag(&self, peer: usize, tag: u32) -> Result<(), BootstrapError> {
        if peer >= self.nranks {
            return Err(BootstrapError::InvalidArgument(format!(
                "peer {peer} out of range for {} ranks",
                self.nranks
            )));
        }
        if tag >= RESERVED_TAGS {
            return Err(BootstrapError::InvalidArgument(format!(
                "tag {tag:#x} is reserved (tags must be below {RESERVED_TAGS:#x})"
            )));
        }
        Ok(())
    }

    fn peer(&self, rank: usize) -> Peer {
        Peer::Rank(rank, self.peers.get(rank).copied())
    }

    /// Records the first failure, passes an abort naming the culprit to the next rank (so it
    /// goes round the ring), and returns the error.
    fn fail(&mut self, err: BootstrapError) -> BootstrapError {
        let (culprit, reason, text) = match &err {
            BootstrapError::Aborted {
                culprit,
                reason,
                text,
                ..
            } => (*culprit, *reason, text.clone()),
            other => (other.culprit(), AbortReason::PeerFailed, other.to_string()),
        };
        if self.failed.is_none() {
            self.failed = Some(err.to_string());
            let next = (self.rank + 1) % self.nranks;
            if culprit != Some(next) {
                send_abort(
                    &mut self.ring_next,
                    self.rank as u32,
                    culprit,
                    reason,
                    &text,
                );
            }
        }
        err
    }

    /// One ring step: send `outgoing` to the next rank while receiving the previous rank's
    /// block. The send runs on its own thread so that blocks larger than the socket buffers
    /// cannot deadlock the ring.
    fn ring_exchange(
        &mut self,
        outgoing: &[u8],
        first_step: bool,
        kind: FrameKind,
        what: &'static str,
    ) -> Result<Vec<u8>, BootstrapError> {
        let seq = self.ring_seq;
        self.ring_seq = self.ring_seq.wrapping_add(1);
        let me = self.rank as u32;
        let timeout = self.opts.timeout;
        let next = (self.rank + 1) % self.nranks;
        let prev = (self.rank + self.nranks - 1) % self.nranks;
        let next_peer = self.peer(next);
        let prev_peer = self.peer(prev);
        let shared = &self.shared;
        let ring_next = &mut self.ring_next;
        let ring_prev = &mut self.ring_prev;
        // The deadline starts before the send, so that it never starts later than the
        // previous rank's (the fairness the timeout grace below relies on).
        let deadline = Instant::now() + timeout;
        let (sent, received) = thread::scope(|s| {
            let sender = s.spawn(move || write_frame(ring_next, kind, me, seq, outgoing, timeout));
            let received = read_frame(ring_prev, Some(deadline), &shared.stop, MAX_BODY_LEN);
            let sent = sender
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("ring send thread panicked")));
            (sent, received)
        });
        let received = match received {
            // Every rank of a stuck ring times out at about the same moment, each blaming
            // its previous rank. In the first step every rank sends without waiting for
            // anything, so silence there convicts the previous rank: report at once. Later
            // steps forward what the previous rank received, so silence may be someone
            // else's: give the abort from the rank next to the culprit a moment to arrive,
            // so that all ranks name the same one.
            Err(ReadFail::Timeout) if !first_step => {
                let grace = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(2));
                match read_frame(
                    ring_prev,
                    Some(Instant::now() + grace),
                    &shared.stop,
                    MAX_BODY_LEN,
                ) {
                    Ok((h, body)) if h.kind == FrameKind::Abort => {
                        return Err(abort_error(Some(prev_peer), &body));
                    }
                    Ok((h, _)) if h.kind == FrameKind::Parting && kind != FrameKind::Parting => {
                        return Err(left_instead(prev_peer, what));
                    }
                    _ => Err(ReadFail::Timeout),
                }
            }
            other => other,
        };
        let (header, body) =
            received.map_err(|e| read_error(shared, prev_peer, what, timeout, e))?;
        match header.kind {
            k if k == kind && header.rank as usize == prev && header.tag == seq => {}
            FrameKind::Abort => return Err(abort_error(Some(prev_peer), &body)),
            FrameKind::Parting if kind != FrameKind::Parting => {
                return Err(left_instead(prev_peer, what));
            }
            FrameKind::Data if kind == FrameKind::Parting => {
                return Err(BootstrapError::Protocol {
                    peer: prev_peer,
                    detail: format!(
                        "{what}: rank {prev} is still in an exchange of its own: it has not \
                         torn its communicator down"
                    ),
                });
            }
            _ => {
                return Err(BootstrapError::Protocol {
                    peer: prev_peer,
                    detail: format!(
                        "{what}: expected ring step {seq} from rank {prev}, got {header:?} \
                         (ranks called bootstrap operations in a different order?)"
                    ),
                });
            }
        }
        if let Err(e) = sent {
            if shared.stop.load(Ordering::Acquire) {
                return Err(stopped_error(shared));
            }
            return Err(BootstrapError::PeerLost {
                peer: next_peer,
                what,
                source: Some(e),
            });
        }
        Ok(body)
    }

    fn send_frame(&mut self, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(stopped_error(&self.shared));
        }
        if peer == self.rank {
            self.shared
                .lock()
                .messages
                .entry((peer, tag))
                .or_default()
                .push_back(data.to_vec());
            self.shared.arrived.notify_all();
            return Ok(());
        }
        let target = self.peer(peer);
        let addr = self.peers.get(peer).copied().ok_or_else(|| {
            BootstrapError::InvalidArgument(format!("no address known for rank {peer}"))
        })?;
        if !self.data_out.contains_key(&peer) {
            let mut stream =
                connect_retry(addr, Instant::now() + self.opts.timeout, &self.shared.stop)
                    .map_err(|(waited, source)| {
                        unreachable_unless_stopped(&self.shared, target, waited, source)
                    })?;
            let hello = HelloRepr {
                secret: self.shared.secret,
                nranks: self.nranks as u32,
                purpose: Purpose::Data,
            };
            write_hello(&mut stream, self.rank as u32, &hello, self.opts.timeout).map_err(|e| {
                BootstrapError::PeerLost {
                    peer: target,
                    what: "opening a data connection",
                    source: Some(e),
                }
            })?;
            if let Ok(clone) = stream.try_clone() {
                self.shared.lock().streams.push(clone);
            }
            self.data_out.insert(peer, stream);
        }
        let Some(stream) = self.data_out.get_mut(&peer) else {
            return Err(BootstrapError::InvalidArgument(format!(
                "no connection to rank {peer}"
            )));
        };
        let result = write_frame(
            stream,
            FrameKind::Data,
            self.rank as u32,
            tag,
            data,
            self.opts.timeout,
        );
        result.map_err(|e| {
            self.data_out.remove(&peer);
            BootstrapError::PeerLost {
                peer: target,
                what: "send",
                source: Some(e),
            }
        })
    }

    fn recv_frame(
        &mut self,
        peer: usize,
        tag: u32,
        what: &'static str,
    ) -> Result<Vec<u8>, BootstrapError> {
        let timeout = self.opts.timeout;
        let deadline = Instant::now() + timeout;
        let target = self.peer(peer);
        let mut inbox = self.shared.lock();
        loop {
            if let Some(message) = inbox
                .messages
                .get_mut(&(peer, tag))
                .and_then(|q| q.pop_front())
            {
                return Ok(message);
            }
            if self.shared.stop.load(Ordering::Acquire) {
                drop(inbox);
                return Err(stopped_error(&self.shared));
            }
            if let Some(why) = inbox.closed.get(&peer) {
                return Err(BootstrapError::PeerLost {
                    peer: target,
                    what,
                    source: why.clone().map(std::io::Error::other),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BootstrapError::Timeout {
                    peer: target,
                    what,
                    waited: timeout,
                });
            }
            inbox = self
                .shared
                .arrived
                .wait_timeout(inbox, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        // Our own streams; the accept guard (dropped right after) closes the accepted ones.
        let _ = self.ring_next.shutdown(Shutdown::Both);
        let _ = self.ring_prev.shutdown(Shutdown::Both);
        for s in self.data_out.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Stops a rank's accept loop and connection threads when dropped: at the end of a
/// bootstrap's life, or when `init` fails half-way.
#[derive(Debug)]
struct AcceptGuard {
    flag: Arc<AtomicBool>,
    shared: Arc<Shared>,
    addr: SocketAddr,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for AcceptGuard {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for s in &self.shared.lock().streams {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.flag.store(true, Ordering::Release);
        wake_accept_loop(self.addr);
        // Not joined: should the wake-up connection fail, drop must still not hang. The
        // thread exits on the next connection or with the process.
        drop(self.thread.take());
    }
}

/// Bootstrap messages are bounded (the receiver allocates what the header declares).
fn check_len(data: &[u8]) -> Result<(), BootstrapError> {
    if data.len() > MAX_BODY_LEN as usize {
        return Err(BootstrapError::InvalidArgument(format!(
            "{} bytes exceed the {MAX_BODY_LEN}-byte limit of one bootstrap message; \
             bootstrap is for metadata, move bulk data over a transport",
            data.len()
        )));
    }
    Ok(())
}

/// The error for a wait that ended because the stop flag went up.
fn stopped_error(shared: &Shared) -> BootstrapError {
    match shared.lock().abort.clone() {
        Some(note) => BootstrapError::Aborted {
            by: note.by.map(|r| Peer::Rank(r, None)),
            culprit: note.culprit,
            reason: note.reason,
            text: note.text,
        },
        None => BootstrapError::Aborted {
            by: None,
            culprit: None,
            reason: AbortReason::User,
            text: "aborted locally".into(),
        },
    }
}

/// `peer`'s teardown (a `Parting` ring step) met this rank's `what`.
fn left_instead(peer: Peer, what: &'static str) -> BootstrapError {
    BootstrapError::PeerLost {
        peer,
        what,
        source: Some(std::io::Error::other(
            "it tore its communicator down (destroyed or aborted) instead",
        )),
    }
}

/// A failed connection to `peer`: its error, or the abort's where the stop flag went up.
fn unreachable_unless_stopped(
    shared: &Shared,
    peer: Peer,
    waited: Duration,
    source: std::io::Error,
) -> BootstrapError {
    if shared.stop.load(Ordering::Acquire) {
        return stopped_error(shared);
    }
    BootstrapError::Unreachable {
        peer,
        waited,
        source,
    }
}

/// Turns a failed read from `peer` into an error naming it.
fn read_error(
    shared: &Shared,
    peer: Peer,
    what: &'static str,
    waited: Duration,
    fail: ReadFail,
) -> BootstrapError {
    if shared.stop.load(Ordering::Acquire) {
        return stopped_error(shared);
    }
    match fail {
        ReadFail::Timeout => BootstrapError::Timeout { peer, what, waited },
        ReadFail::Closed => BootstrapError::PeerLost {
            peer,
            what,
            source: None,
        },
        ReadFail::Io(e) => BootstrapError::PeerLost {
            peer,
            what,
            source: Some(e),
        },
        ReadFail::Parse(e) => BootstrapError::protocol(peer, e),
        ReadFail::Stopped => stopped_error(shared),
    }
}

/// The error for an abort frame received from `by`.
fn abort_error(by: Option<Peer>, body: &[u8]) -> BootstrapError {
    match AbortRepr::parse(body) {
        Ok(a) => BootstrapError::Aborted {
            by,
            culprit: a.culprit.map(|c| c as usize),
            reason: a.reason,
            text: a.text.to_string(),
        },
        Err(e) => BootstrapError::Aborted {
            by,
            culprit: by.and_then(|p| p.rank()),
            reason: AbortReason::PeerFailed,
            text: format!("unreadable abort message: {e}"),
        },
    }
}

/// Waits for the previous rank's ring connection to arrive at our accept loop.
fn wait_ring_prev(
    shared: &Shared,
    prev: usize,
    timeout: Duration,
) -> Result<TcpStream, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut inbox = shared.lock();
    loop {
        if let Some(stream) = inbox.ring_prev.take() {
            return Ok(stream);
        }
        if shared.stop.load(Ordering::Acquire) {
            drop(inbox);
            return Err(stopped_error(shared));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::Timeout {
                peer: Peer::Rank(prev, None),
                what: "waiting for the previous rank of the ring to connect",
                waited: timeout,
            });
        }
        inbox = shared
            .arrived
            .wait_timeout(inbox, left)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let o = BootstrapOptions::from_settings(
            &Settings::from_lookup(&env(&[
                ("WEFT_BOOTSTRAP_TIMEOUT", "2.5"),
                ("WEFT_BOOTSTRAP_PORT", "29500"),
                ("NCCL_SOCKET_IFNAME", "eth"),
            ]))
            .unwrap(),
        );
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.root_port, 29500);
        assert_eq!(o.interface.as_deref(), Some("eth"));
        // A bad timeout is ignored (as NCCL ignores bad values), not an error.
        let o = BootstrapOptions::from_settings(
            &Settings::from_lookup(&env(&[
                ("WEFT_BOOTSTRAP_TIMEOUT", "-1"),
                ("WEFT_SOCKET_IFNAME", "=ib0"),
                ("NCCL_SOCKET_IFNAME", "eth"),
            ]))
            .unwrap(),
        );
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.interface.as_deref(), Some("=ib0"));
        assert_eq!(
            BootstrapOptions::from_lookup(|_| None),
            BootstrapOptions::default()
        );
        assert_eq!(
            BootstrapOptions::from_lookup(env(&[("WEFT_BOOTSTRAP_PORT", "http")])),
            BootstrapOptions::default()
        );
    }
}
