//! Connecting and accepting a mesh connection, never blocking: each rail is a connection of
//! its own backend (verbs or sockets, both listening on every address with the listen's
//! nonce), and once connected each rail's first message is a *rail hello*
//! ([`HELLO_LEN`] bytes: magic `WMRL`, the nonce, a connection id, the rail's index and the
//! rail count), which lets the listener group the rails of one connection, in order, however
//! they arrive. A connector with another listener's nonce (a stale handle, a stray) is
//! refused by the backend's own handshake or by the hello check, and the listener says so
//! naming it; the connector learns it from the backend (the listener hung up).
//!
//! Every step has a deadline: the backends' connects their own, the hello phase the connect
//! timeout, and a listener drops rails and groups that stay incomplete for
//! [`STRAY_TIMEOUT`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::wire::socket_handle::SocketHandleRepr;

use super::comm::{MeshRecvComm, MeshSendComm};
use super::plan::{Rail, RailKind};
use super::rail::{Backends, RailMr, RailRecv, RailRequest, RailSend};
use crate::ib::device::Port;
use crate::ib::handshake::poll_connect_to;
pub(super) use crate::ib::handshake::random_u64;
use crate::ib::wire::ListenHandle;
use crate::ib::{IbConfig, IbConnecting, IbListenComm};
use crate::socket::{SocketConnecting, SocketListenComm};
use crate::{CommRef, NetError, NetErrorKind, PtrKind, RecvBuffer};

/// Bytes of a rail hello.
pub const HELLO_LEN: usize = 24;
/// `WMRL`.
const HELLO_MAGIC: u32 = 0x574d_524c;
/// The tag of the rail hello message.
const HELLO_TAG: u32 = 0x574d_484c;
/// How long an accepted rail may take to say hello, and a group to gather its rails.
pub const STRAY_TIMEOUT: Duration = Duration::from_secs(30);

/// The first message on every rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailHello {
    pub nonce: u64,
    pub conn_id: u64,
    pub index: u8,
    pub count: u8,
}

impl RailHello {
    pub fn emit(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_be_bytes());
        b[4..12].copy_from_slice(&self.nonce.to_be_bytes());
        b[12..20].copy_from_slice(&self.conn_id.to_be_bytes());
        b[20] = self.index;
        b[21] = self.count;
        b
    }

    pub fn parse(b: &[u8; HELLO_LEN]) -> Result<RailHello, String> {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(w)
        };
        let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if magic != HELLO_MAGIC {
            return Err(format!(
                "its first message is not a mesh rail hello (magic {magic:#010x})"
            ));
        }
        let h = RailHello {
            nonce: word(4),
            conn_id: word(12),
            index: b[20],
            count: b[21],
        };
        if h.count == 0 || h.index >= h.count {
            return Err(format!("a rail hello for rail {} of {}", h.index, h.count));
        }
        Ok(h)
    }
}

// ---- connecting side -----------------------------------------------------------------

/// Where one rail's connect is.
enum RailStage {
    Ib(Option<IbConnecting>),
    Socket(SocketConnecting),
    /// Connected; the hello is (being) sent.
    Hello {
        comm: RailSend,
        mr: Option<RailMr>,
        req: Option<RailRequest>,
    },
    Done(RailSend),
    /// Only while a stage is being replaced.
    Gone,
}

struct RailConnecting {
    rail: Rail,
    /// The peer's listener for this rail's backend.
    target: SocketAddr,
    /// Written by the backend from here: boxed, so that it stays put while the send is in
    /// flight.
    hello: Box<[u8; HELLO_LEN]>,
    stage: RailStage,
}

/// The peer's listeners, from its handle.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listener {
    pub nonce: u64,
    /// The verbs handshake port (0: none).
    pub ib_port: u16,
    /// The socket listener (port 0: none); its address is filled in per rail.
    pub socket: SocketHandleRepr,
}

/// What the connector needs from the mesh for each poll.
pub(super) struct ConnectContext<'a> {
    pub backends: Backends<'a>,
    pub ports: &'a [Arc<Port>],
    pub ib_config: Option<&'a IbConfig>,
}

/// A mesh connect in progress.
pub struct MeshConnecting {
    rails: Vec<RailConnecting>,
    started: Instant,
    timeout: Duration,
    /// `rail 0: 192.168.101.1 over verbs from ...` for each rail, for messages.
    words: Vec<String>,
}

impl std::fmt::Debug for MeshConnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MeshConnecting({})", self.words.join("; "))
    }
}

impl MeshConnecting {
    /// Starts connecting over `rails` (rail i from the local address `from[i]`).
    pub(super) fn start(
        ctx: &ConnectContext<'_>,
        rails: Vec<Rail>,
        words: Vec<String>,
        listener: &Listener,
        from: &[std::net::IpAddr],
        timeout: Duration,
    ) -> Result<MeshConnecting, NetError> {
        let Listener {
            nonce,
            ib_port,
            socket,
        } = *listener;
        let conn_id = random_u64();
        let count = rails.len() as u8;
        let mut out = Vec::with_capacity(rails.len());
        for (i, rail) in rails.into_iter().enumerate() {
            let hello = Box::new(
                RailHello {
                    nonce,
                    conn_id,
                    index: i as u8,
                    count,
                }
                .emit(),
            );
            let (target, stage) = match rail.kind {
                RailKind::Ib { .. } => {
                    if ib_port == 0 {
                        return Err(NetError::new(
                            NetErrorKind::Unsupported,
                            format!("mesh connect to {}: the peer serves no verbs connections", rail.peer),
                        )
                        .hint("the peer runs with WEFT_MESH_TRANSPORT=socket: set the same on both ends, or auto"));
                    }
                    (SocketAddr::new(rail.peer, ib_port), RailStage::Ib(None))
                }
                RailKind::Socket => {
                    if socket.addr.port() == 0 {
                        return Err(NetError::new(
                            NetErrorKind::Unsupported,
                            format!("mesh connect to {}: the pair has no RDMA port at one end and the peer serves no socket connections", rail.peer),
                        )
                        .hint("the peer runs with WEFT_MESH_TRANSPORT=ib: use auto (or socket) on both ends, or give both ends RDMA ports"));
                    }
                    let target = SocketAddr::new(rail.peer, socket.addr.port());
                    let handle = SocketHandleRepr {
                        addr: target,
                        ..socket
                    };
                    let c = ctx
                        .backends
                        .socket
                        .connect_from(handle, from.get(i).copied())?;
                    (target, RailStage::Socket(c))
                }
            };
            out.push(RailConnecting {
                rail,
                target,
                hello,
                stage,
            });
        }
        Ok(MeshConnecting {
            rails: out,
            started: Instant::now(),
            timeout,
            words,
        })
    }

    /// One step; `Ok(Some)` once every rail is connected and has said hello.
    pub(super) fn poll(
        &mut self,
        ctx: &ConnectContext<'_>,
    ) -> Result<Option<MeshSendComm>, NetError> {
        let result = self.step(ctx);
        match result {
            Ok(None) if self.started.elapsed() > self.timeout => {
                let err = NetError::new(
                    NetErrorKind::Timeout,
                    format!(
                        "mesh connect did not complete within {:.0} s ({})",
                        self.timeout.as_secs_f64(),
                        self.words.join("; ")
                    ),
                )
                .hint("the peer never accepted every rail: check that it is alive and calls accept (WEFT_IB_CONNECT_TIMEOUT / WEFT_SOCKET_CONNECT_TIMEOUT set the limit)");
                self.abandon(ctx);
                Err(err)
            }
            Err(e) => {
                self.abandon(ctx);
                Err(e)
            }
            other => other,
        }
    }

    fn step(&mut self, ctx: &ConnectContext<'_>) -> Result<Option<MeshSendComm>, NetError> {
        for rc in &mut self.rails {
            let stage = std::mem::replace(&mut rc.stage, RailStage::Gone);
            rc.stage = match stage {
                RailStage::Ib(mut inner) => {
                    let RailKind::Ib { port } = rc.rail.kind else {
                        return Err(internal("a socket rail in a verbs stage"));
                    };
                    let (Some(p), Some(config)) = (ctx.ports.get(port), ctx.ib_config) else {
                        return Err(internal("a verbs rail without its port"));
                    };
                    let target = ListenHandle {
                        addr: rc.target,
                        nonce: rail_nonce(&rc.hello),
                    };
                    match poll_connect_to(p, config, target, &mut inner)? {
                        Some(c) => RailStage::Hello {
                            comm: RailSend::Ib(c),
                            mr: None,
                            req: None,
                        },
                        None => RailStage::Ib(inner),
                    }
                }
                RailStage::Socket(mut c) => match c.poll()? {
                    Some(comm) => RailStage::Hello {
                        comm: RailSend::Socket(comm),
                        mr: None,
                        req: None,
                    },
                    None => RailStage::Socket(c),
                },
                RailStage::Hello {
                    mut comm,
                    mut mr,
                    mut req,
                } => {
                    let data = rc.hello.as_ptr();
                    if mr.is_none() {
                        // SAFETY: `rc.hello` is boxed and lives as long as this connect; it is
                        // deregistered before it is dropped (here or in `abandon`).
                        mr = Some(unsafe {
                            ctx.backends.reg_mr(
                                CommRef::Send(&comm),
                                data.cast_mut(),
                                HELLO_LEN,
                                PtrKind::Host,
                            )
                        }?);
                    }
                    if req.is_none() {
                        if let Some(m) = &mr {
                            // SAFETY: as above; nothing writes the hello while it is sent.
                            req = unsafe {
                                ctx.backends.isend(&mut comm, data, HELLO_LEN, HELLO_TAG, m)
                            }?;
                        }
                    }
                    let done = match &mut req {
                        Some(r) => ctx.backends.test(r)?.is_some(),
                        None => false,
                    };
                    if done {
                        if let Some(m) = mr.take() {
                            ctx.backends.dereg_mr(m)?;
                        }
                        RailStage::Done(comm)
                    } else {
                        RailStage::Hello { comm, mr, req }
                    }
                }
                done @ RailStage::Done(_) => done,
                RailStage::Gone => return Err(internal("a rail stage lost")),
            };
        }
        if !self
            .rails
            .iter()
            .all(|r| matches!(r.stage, RailStage::Done(_)))
        {
            return Ok(None);
        }
        let mut comms = Vec::with_capacity(self.rails.len());
        for rc in &mut self.rails {
            if let RailStage::Done(c) = std::mem::replace(&mut rc.stage, RailStage::Gone) {
                comms.push(c);
            }
        }
        Ok(Some(MeshSendComm::new(
            comms,
            std::mem::take(&mut self.words),
        )))
    }

    /// Closes what was connected, after a failure.
    fn abandon(&mut self, ctx: &ConnectContext<'_>) {
        for rc in &mut self.rails {
            match std::mem::replace(&mut rc.stage, RailStage::Gone) {
                RailStage::Hello { comm, mr, .. } => {
                    // Closing first stops the backend from touching the hello.
                    let _ = ctx.backends.close_send(comm);
                    if let Some(m) = mr {
                        let _ = ctx.backends.dereg_mr(m);
                    }
                }
                RailStage::Done(comm) => {
                    let _ = ctx.backends.close_send(comm);
                }
                _ => {}
            }
        }
    }
}

/// The nonce a rail's hello carries (the backends' handshakes repeat it too).
fn rail_nonce(hello: &[u8; HELLO_LEN]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&hello[4..12]);
    u64::from_be_bytes(w)
}

fn internal(what: &str) -> NetError {
    NetError::new(
        NetErrorKind::Protocol,
        format!("mesh: internal error: {what}"),
    )
}

// ---- listening side ------------------------------------------------------------------

struct PendingRail {
    comm: Option<RailRecv>,
    mr: Option<RailMr>,
    req: Option<RailRequest>,
    buf: Box<[u8; HELLO_LEN]>,
    peer: String,
    since: Instant,
}

struct Group {
    rails: Vec<Option<(RailRecv, String)>>,
    since: Instant,
}

/// A mesh listen comm: a verbs and a socket listener on every address, and the rails that
/// connected but are not yet part of a whole connection.
pub struct MeshListenComm {
    // Boxed: a listen comm travels in `AnyListenComm` and the driver's setup enums, which
    // would otherwise take the size of both listeners.
    pub(super) ib: Option<Box<IbListenComm>>,
    pub(super) socket: Option<Box<SocketListenComm>>,
    pub(super) nonce: u64,
    pending: Vec<PendingRail>,
    groups: HashMap<u64, Group>,
}

impl std::fmt::Debug for MeshListenComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MeshListenComm(verbs {:?}, sockets {:?}, {} rails pending)",
            self.ib.as_ref().map(|l| l.addr()),
            self.socket.as_ref().map(|l| l.handle().addr),
            self.pending.len()
        )
    }
}

fn describe_recv(c: &RailRecv) -> String {
    // The listeners take IPv4 on an IPv6 socket: show `192.168.101.2`, not `::ffff:...`.
    let plain = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    match c {
        RailRecv::Ib(c) => format!("{} (verbs)", plain(crate::ib::recv::peer_of_recv(c))),
        RailRecv::Socket(c) => format!("{} (sockets)", plain(c.peer())),
    }
}

impl MeshListenComm {
    pub(super) fn new(
        ib: Option<IbListenComm>,
        socket: Option<SocketListenComm>,
        nonce: u64,
    ) -> MeshListenComm {
        MeshListenComm {
            ib: ib.map(Box::new),
            socket: socket.map(Box::new),
            nonce,
            pending: Vec::new(),
            groups: HashMap::new(),
        }
    }

    /// Says why a connector was refused (the listener goes on listening).
    fn refuse(&self, why: String) {
        log::warn!(
            "NET/mesh: listener (nonce {:#x}): refused {why}",
            self.nonce
        );
    }

    pub(super) fn poll_accept(
        &mut self,
        backends: &Backends<'_>,
    ) -> Result<Option<MeshRecvComm>, NetError> {
        // New rails from either backend.
        loop {
            let next = match (&mut self.ib, backends.ib) {
                (Some(l), Some(net)) => crate::Net::accept(net, l)?.map(RailRecv::Ib),
                _ => None,
            };
            let Some(comm) = next else { break };
            self.add_pending(comm);
        }
        loop {
            let next = match &mut self.socket {
                Some(l) => crate::Net::accept(backends.socket, l)?.map(RailRecv::Socket),
                None => None,
            };
            let Some(comm) = next else { break };
            self.add_pending(comm);
        }
        // Their hellos.
        let mut i = 0;
        while i < self.pending.len() {
            match self.step_pending(i, backends) {
                Ok(Some(hello)) => {
                    let mut p = self.pending.swap_remove(i);
                    if let Some(m) = p.mr.take() {
                        let _ = backends.dereg_mr(m);
                    }
                    let Some(comm) = p.comm.take() else { continue };
                    if hello.nonce != self.nonce {
                        let _ = backends.close_recv(comm);
                        self.refuse(format!(
                            "a rail from {}: its hello carries nonce {:#x}, this listener's is \
                             {:#x}: a stale handle (an earlier listen) or a connector meant for \
                             another run",
                            p.peer, hello.nonce, self.nonce
                        ));
                        continue;
                    }
                    let count = usize::from(hello.count);
                    let group = self.groups.entry(hello.conn_id).or_insert_with(|| Group {
                        rails: (0..count).map(|_| None).collect(),
                        since: Instant::now(),
                    });
                    let fits = group.rails.len() == count;
                    match group.rails.get_mut(usize::from(hello.index)) {
                        Some(slot @ None) if fits => *slot = Some((comm, p.peer)),
                        _ => {
                            let _ = backends.close_recv(comm);
                            self.refuse(format!(
                                "a rail from {}: rail {} of {} does not fit its connection",
                                p.peer, hello.index, hello.count
                            ));
                        }
                    }
                }
                Ok(None) if self.pending[i].since.elapsed() > STRAY_TIMEOUT => {
                    let p = self.pending.swap_remove(i);
                    let peer = p.peer.clone();
                    self.drop_pending(p, backends);
                    self.refuse(format!(
                        "a rail from {peer}: no rail hello within {} s",
                        STRAY_TIMEOUT.as_secs()
                    ));
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let p = self.pending.swap_remove(i);
                    let peer = p.peer.clone();
                    self.drop_pending(p, backends);
                    self.refuse(format!("a rail from {peer}: {e}"));
                }
            }
        }
        // Whole connections, and groups that will never be whole.
        let stale: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| {
                g.since.elapsed() > STRAY_TIMEOUT && g.rails.iter().any(Option::is_none)
            })
            .map(|(&id, _)| id)
            .collect();
        for id in stale {
            if let Some(g) = self.groups.remove(&id) {
                let have = g.rails.iter().filter(|r| r.is_some()).count();
                let peers: Vec<String> = g.rails.iter().flatten().map(|(_, p)| p.clone()).collect();
                for (c, _) in g.rails.into_iter().flatten() {
                    let _ = backends.close_recv(c);
                }
                self.refuse(format!(
                    "connection {id:#x} from [{}]: only {have} of its rails arrived within {} s",
                    peers.join(", "),
                    STRAY_TIMEOUT.as_secs()
                ));
            }
        }
        let ready = self
            .groups
            .iter()
            .find(|(_, g)| g.rails.iter().all(Option::is_some))
            .map(|(&id, _)| id);
        let Some(group) = ready.and_then(|id| self.groups.remove(&id)) else {
            return Ok(None);
        };
        let (comms, peers): (Vec<RailRecv>, Vec<String>) =
            group.rails.into_iter().flatten().unzip();
        Ok(Some(MeshRecvComm::new(comms, peers)))
    }

    fn add_pending(&mut self, comm: RailRecv) {
        let peer = describe_recv(&comm);
        self.pending.push(PendingRail {
            comm: Some(comm),
            mr: None,
            req: None,
            buf: Box::new([0; HELLO_LEN]),
            peer,
            since: Instant::now(),
        });
    }

    fn drop_pending(&self, mut p: PendingRail, backends: &Backends<'_>) {
        // Closing first stops the backend from writing into the hello buffer.
        if let Some(c) = p.comm.take() {
            let _ = backends.close_recv(c);
        }
        if let Some(m) = p.mr.take() {
            let _ = backends.dereg_mr(m);
        }
    }

    /// Progresses one pending rail's hello; `Ok(Some)` once it arrived.
    fn step_pending(
        &mut self,
        i: usize,
        backends: &Backends<'_>,
    ) -> Result<Option<RailHello>, NetError> {
        let p = &mut self.pending[i];
        let Some(comm) = p.comm.as_mut() else {
            return Err(internal("a pending rail without its comm"));
        };
        let data = p.buf.as_mut_ptr();
        if p.mr.is_none() {
            // SAFETY: `p.buf` is boxed and outlives the registration (deregistered before the
            // pending rail is dropped).
            p.mr = Some(unsafe {
                backends.reg_mr(CommRef::Recv(&*comm), data, HELLO_LEN, PtrKind::Host)
            }?);
        }
        if p.req.is_none() {
            if let Some(m) = &p.mr {
                let bufs = [RecvBuffer {
                    data,
                    size: HELLO_LEN,
                    tag: HELLO_TAG,
                    mr: m,
                }];
                // SAFETY: the boxed buffer is written only by this receive until it completes
                // or the comm is closed.
                p.req = unsafe { backends.irecv(comm, &bufs) }?;
            }
        }
        let Some(req) = p.req.as_mut() else {
            return Ok(None);
        };
        let Some(done) = backends.test(req)? else {
            return Ok(None);
        };
        p.req = None;
        if done.sizes() != [HELLO_LEN] {
            return Err(NetError::new(
                NetErrorKind::Protocol,
                format!(
                    "its first message has {:?} bytes, not a rail hello",
                    done.sizes()
                ),
            ));
        }
        RailHello::parse(&p.buf)
            .map(Some)
            .map_err(|why| NetError::new(NetErrorKind::Protocol, why))
    }

    /// Closes every pending rail and group.
    pub(super) fn close(mut self, backends: &Backends<'_>) {
        for p in std::mem::take(&mut self.pending) {
            self.drop_pending(p, backends);
        }
        for (_, g) in self.groups.drain() {
            for (c, _) in g.rails.into_iter().flatten() {
                let _ = backends.close_recv(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_refusals() {
        let h = RailHello {
            nonce: 0x1122_3344_5566_7788,
            conn_id: 42,
            index: 1,
            count: 2,
        };
        let b = h.emit();
        assert_eq!(&b[..4], b"WMRL");
        assert_eq!(RailHello::parse(&b).unwrap(), h);
        let mut bad = b;
        bad[0] = b'X';
        assert!(
            RailHello::parse(&bad)
                .unwrap_err()
                .contains("not a mesh rail hello")
        );
        let mut bad = b;
        bad[20] = 2;
        assert!(RailHello::parse(&bad).unwrap_err().contains("rail 2 of 2"));
        assert_eq!(rail_nonce(&b), h.nonce);
    }
}
