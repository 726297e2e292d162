//! Connection setup over a TCP socket, never blocking: the connector (sender) creates its
//! QPs and FIFO and sends an [`Exchange`]; the listener (receiver) answers with its own after
//! taking its QPs to RTS; the connector takes its QPs to RTS and sends one "ready" byte, after
//! which the receiver may write into the sender's FIFO. The socket stays open as the
//! connection's liveness signal (keepalive on).
//!
//! A stray client (no exchange within [`STRAY_TIMEOUT`], a wrong magic or nonce) is dropped
//! with a warning; the listener keeps listening.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_sys::verbs::types::*;

use super::IbConfig;
use super::comm::{DmaBuf, IbRecvComm, IbSendComm, Link, RecvState, SendState};
use super::device::Port;
use super::fifo::{FifoEntry, MAX_RECVS, SLOTS};
use super::flush::FlushQp;
use super::qp::{Init, PathConfig, Qp, RemoteQp, Rts};
use super::select::describe_gid;
use super::verbs::Cq;
use super::wire::{EXCHANGE_LEN, Exchange, ListenHandle};
use crate::socket::sys;
use crate::{NetError, NetErrorKind, NetHandle};

/// How long an accepted socket may take to send its exchange.
pub const STRAY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between tries of a refused connect.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A random 64-bit value (getrandom; the clock and pid if that fails): PSNs and nonces.
pub(crate) fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
    if n == 8 {
        v
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32
    }
}

fn path_of(port: &Port, config: &IbConfig, remote_mtu: u8) -> PathConfig {
    PathConfig {
        port: port.port,
        gid_index: port.gid_index as u8,
        mtu: port.mtu.min(u32::from(remote_mtu)).max(1),
        timeout: config.timeout,
        retry_cnt: config.retry_cnt,
        traffic_class: config.traffic_class,
        service_level: config.service_level,
    }
}

/// Keepalive on the handshake socket: a peer host that vanishes turns into an error within
/// about 5 + 3 x 2 seconds of silence.
fn watch_peer(stream: &TcpStream) {
    let fd = stream.as_raw_fd();
    let set = |level, name, value| {
        if let Err(e) = sys::set_int(fd, level, name, value) {
            log::debug!("setsockopt on the verbs handshake socket: {e}");
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 5);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 2);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
    set(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, 11_000);
    let _ = stream.set_nodelay(true);
}

/// QPs in INIT with their first PSNs, and the CQ they report to.
struct NewQps {
    cq: Arc<Cq>,
    qps: Vec<Qp<Init>>,
    psns: Vec<u32>,
}

fn create_qps(port: &Arc<Port>, config: &IbConfig, nqps: usize) -> Result<NewQps, NetError> {
    // Per QP: every slot's data writes plus the size write and a refusal, and receives for
    // every slot; the CQ holds all of it.
    let send_wr = (SLOTS * (MAX_RECVS + 2)) as u32;
    let recv_wr = SLOTS as u32;
    let cq = Arc::new(Cq::new(
        port.pd.ctx.clone(),
        (nqps as u32) * (send_wr + recv_wr),
    )?);
    let path = path_of(port, config, 5);
    let mut qps = Vec::with_capacity(nqps);
    let mut psns = Vec::with_capacity(nqps);
    for _ in 0..nqps {
        let qp = Qp::create(
            port.pd.clone(),
            cq.clone(),
            send_wr,
            recv_wr,
            config.max_inline,
        )?;
        qps.push(qp.init(&path)?);
        psns.push((random_u64() as u32) & 0x00ff_ffff);
    }
    Ok(NewQps { cq, qps, psns })
}

fn to_rts(
    qps: Vec<Qp<Init>>,
    psns: &[u32],
    path: &PathConfig,
    remote: &Exchange,
) -> Result<Vec<Qp<Rts>>, NetError> {
    qps.into_iter()
        .zip(psns)
        .zip(&remote.qps)
        .map(|((qp, &psn), &(qpn, rpsn))| {
            let r = RemoteQp {
                qpn,
                psn: rpsn,
                gid: remote.gid,
                lid: remote.lid,
            };
            qp.ready_to_receive(path, &r)?.ready_to_send(path, psn)
        })
        .collect()
}

fn exchange_of(port: &Port, nonce: u64, qps: &NewQps) -> Exchange {
    let mut e = Exchange {
        nonce,
        mtu: port.mtu as u8,
        lid: port.lid,
        gid: port.gid,
        nqps: qps.qps.len() as u8,
        ..Exchange::default()
    };
    for (slot, (qp, &psn)) in e.qps.iter_mut().zip(qps.qps.iter().zip(&qps.psns)) {
        *slot = (qp.qpn(), psn);
    }
    e
}

/// Reads into `buf[*got..]` without blocking; `Ok(true)` once full.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], got: &mut usize) -> std::io::Result<bool> {
    while *got < buf.len() {
        match stream.read(&mut buf[*got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => *got += n,
            Err(e) if sys::would_block(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes a short message on a fresh socket: its send buffer is empty, so a short wait at
/// most (bounded by a write timeout) is all it can take.
fn write_small(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let r = stream.write_all(bytes);
    stream.set_nonblocking(true)?;
    r
}

// ---- listening side -----------------------------------------------------------------

enum AcceptStage {
    Hello { buf: [u8; EXCHANGE_LEN], got: usize },
    Ready { state: Box<RecvState> },
}

struct Accepting {
    stream: TcpStream,
    peer: SocketAddr,
    /// Sent a valid exchange with the right nonce: a peer, not a stray.
    genuine: bool,
    since: Instant,
    stage: AcceptStage,
}

/// A verbs listen comm. With one port it serves that port; with several (the mesh backend)
/// each connection is served by the port holding the address it arrived on.
pub struct IbListenComm {
    ports: Vec<Arc<Port>>,
    config: IbConfig,
    listener: TcpListener,
    handle: ListenHandle,
    pending: Vec<Accepting>,
}

impl std::fmt::Debug for IbListenComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IbListenComm({} port(s) on {})",
            self.ports.len(),
            self.handle.addr
        )
    }
}

/// Where the handshake listens: the port's own IP address (RoCE), so that the handshake
/// takes the same link as the data; else the first socket interface `ifname` allows.
fn listen_address(port: &Port, ifname: Option<&str>) -> Result<SocketAddr, NetError> {
    if let Some(ip) = super::select::gid_address(&port.gid) {
        return Ok(SocketAddr::new(ip, 0));
    }
    let available = crate::socket::interface::system_interfaces(None)?;
    let spec = ifname;
    crate::socket::interface::choose_interfaces(&available, spec)
        .first()
        .map(|i| i.addr)
        .ok_or_else(|| crate::socket::interface::no_interface_error(&available, spec))
}

pub(crate) fn listen(
    port: &Arc<Port>,
    config: &IbConfig,
) -> Result<(NetHandle, IbListenComm), NetError> {
    let addr = listen_address(port, config.handshake_ifname.as_deref())?;
    let comm = listen_at(vec![port.clone()], addr, random_u64(), config)?;
    let mut bytes = NetHandle::default();
    comm.handle.emit(&mut bytes.0);
    Ok((bytes, comm))
}

/// A listen comm on `addr` (port 0: the kernel picks) serving `ports`; connectors must send
/// `nonce`.
pub(crate) fn listen_at(
    ports: Vec<Arc<Port>>,
    addr: SocketAddr,
    nonce: u64,
    config: &IbConfig,
) -> Result<IbListenComm, NetError> {
    let names: Vec<String> = ports.iter().map(|p| p.describe()).collect();
    let listener = TcpListener::bind(addr).map_err(|e| {
        NetError::io(
            format!(
                "bind the verbs handshake listener to {addr} ({})",
                names.join(", ")
            ),
            &e,
        )
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| NetError::io("set the verbs handshake listener nonblocking", &e))?;
    let local = listener
        .local_addr()
        .map_err(|e| NetError::io("read the verbs handshake listener's address", &e))?;
    Ok(IbListenComm {
        ports,
        config: config.clone(),
        listener,
        handle: ListenHandle { addr: local, nonce },
        pending: Vec::new(),
    })
}

/// The port that serves a connection: the only one, or the one holding the local address
/// the connection arrived on (the peer chose that address by subnet).
fn choose_port(ports: &[Arc<Port>], stream: &TcpStream) -> Result<Arc<Port>, NetError> {
    if let [port] = ports {
        return Ok(port.clone());
    }
    let local = stream
        .local_addr()
        .map_err(|e| NetError::io("read an accepted socket's address", &e))?
        .ip()
        .to_canonical();
    ports
        .iter()
        .find(|p| super::select::gid_address(&p.gid) == Some(local))
        .cloned()
        .ok_or_else(|| {
            let have: Vec<String> = ports.iter().map(|p| p.describe()).collect();
            NetError::new(
                NetErrorKind::Protocol,
                format!(
                    "a connection arrived on {local}, which none of the RDMA ports holds ({})",
                    have.join(", ")
                ),
            )
        })
}

impl IbListenComm {
    /// The address the handshake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.handle.addr
    }

    pub(crate) fn poll_accept(&mut self) -> Result<Option<IbRecvComm>, NetError> {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    // The mesh listens on an IPv6 socket: name IPv4 peers `a.b.c.d`.
                    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                    stream.set_nonblocking(true).map_err(|e| {
                        NetError::io("set an accepted socket nonblocking", &e).peer(peer)
                    })?;
                    self.pending.push(Accepting {
                        stream,
                        peer,
                        genuine: false,
                        since: Instant::now(),
                        stage: AcceptStage::Hello {
                            buf: [0; EXCHANGE_LEN],
                            got: 0,
                        },
                    });
                }
                Err(e) if sys::would_block(&e) => break,
                Err(e) => {
                    return Err(NetError::io(
                        format!(
                            "accept on the verbs handshake listener {}",
                            self.handle.addr
                        ),
                        &e,
                    ));
                }
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            match self.step(i) {
                Ok(Some(comm)) => {
                    self.pending.swap_remove(i);
                    return Ok(Some(comm));
                }
                Ok(None) if self.pending[i].since.elapsed() > STRAY_TIMEOUT => {
                    log::warn!(
                        "verbs listener {}: dropping {} that did not finish the handshake within {} s",
                        self.handle.addr,
                        self.pending[i].peer,
                        STRAY_TIMEOUT.as_secs()
                    );
                    self.pending.swap_remove(i);
                }
                Ok(None) => i += 1,
                Err(e) if !self.pending[i].genuine => {
                    // One bad connection (a stray client, a peer that died mid-handshake)
                    // does not end the listener.
                    log::warn!(
                        "verbs listener {}: dropping a connection: {e}",
                        self.handle.addr
                    );
                    self.pending.swap_remove(i);
                }
                Err(e) => {
                    // A real peer (its exchange was valid) whose connection this side could
                    // not set up: that is this accept's error, not a stray to ignore.
                    self.pending.swap_remove(i);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    fn step(&mut self, i: usize) -> Result<Option<IbRecvComm>, NetError> {
        let a = &mut self.pending[i];
        let peer = a.peer;
        match &mut a.stage {
            AcceptStage::Hello { buf, got } => {
                if !read_some(&mut a.stream, buf, got)
                    .map_err(|e| NetError::io("read the verbs handshake", &e).peer(peer))?
                {
                    return Ok(None);
                }
                let hello = Exchange::parse(buf)
                    .map_err(|why| NetError::new(NetErrorKind::Protocol, why).peer(peer))?;
                if hello.nonce != self.handle.nonce {
                    return Err(NetError::new(
                        NetErrorKind::Protocol,
                        format!(
                            "verbs handshake with nonce {:#x}, this listener's is {:#x}: a stale \
                             handle (from an earlier listen) or a connector of another run",
                            hello.nonce, self.handle.nonce
                        ),
                    )
                    .peer(peer));
                }
                a.genuine = true;
                let port = choose_port(&self.ports, &a.stream)?;
                let nqps = usize::from(hello.nqps);
                let qps = create_qps(&port, &self.config, nqps)?;
                let path = path_of(&port, &self.config, hello.mtu);
                let answer = exchange_of(&port, hello.nonce, &qps);
                let NewQps {
                    cq,
                    qps: init,
                    psns,
                } = qps;
                let rts = to_rts(init, &psns, &path, &hello)
                    .map_err(|e| e.peer(format!("{peer} at {}", describe_gid(&hello.gid))))?;
                let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
                let staging =
                    DmaBuf::<FifoEntry>::new(&port, SLOTS * MAX_RECVS, IBV_ACCESS_LOCAL_WRITE)?;
                let sizes = DmaBuf::<u32>::new(&port, SLOTS * MAX_RECVS, access)?;
                let flush = if port.gdr.needs_flush_qp() {
                    Some(FlushQp::new(&port, &path)?)
                } else {
                    None
                };
                write_small(&mut a.stream, &answer.emit())
                    .map_err(|e| NetError::io("send the verbs handshake answer", &e).peer(peer))?;
                watch_peer(&a.stream);
                let stream = a
                    .stream
                    .try_clone()
                    .map_err(|e| NetError::io("clone the handshake socket", &e))?;
                let link = Link::new(port, rts, cq, stream, peer, hello.gid);
                a.stage = AcceptStage::Ready {
                    state: Box::new(RecvState::new(
                        link,
                        staging,
                        sizes,
                        (hello.fifo_addr, hello.fifo_rkey),
                        flush,
                    )),
                };
                Ok(None)
            }
            AcceptStage::Ready { .. } => {
                let mut byte = [0u8; 1];
                let mut got = 0;
                if !read_some(&mut a.stream, &mut byte, &mut got)
                    .map_err(|e| NetError::io("read the verbs ready byte", &e).peer(peer))?
                {
                    return Ok(None);
                }
                let stage = std::mem::replace(
                    &mut a.stage,
                    AcceptStage::Hello {
                        buf: [0; EXCHANGE_LEN],
                        got: 0,
                    },
                );
                let AcceptStage::Ready { state } = stage else {
                    return Ok(None);
                };
                Ok(Some(IbRecvComm(Arc::new(Mutex::new(*state)))))
            }
        }
    }
}

// ---- connecting side ----------------------------------------------------------------

enum ConnectStage {
    Tcp {
        stream: Option<TcpStream>,
        next_try: Instant,
    },
    Answer(Box<Answering>),
}

/// Waiting for the listener's exchange, with this side's QPs and FIFO ready.
struct Answering {
    stream: TcpStream,
    qps: NewQps,
    fifo: DmaBuf<FifoEntry>,
    sizes: DmaBuf<u32>,
    buf: [u8; EXCHANGE_LEN],
    got: usize,
}

/// The state of a verbs `connect` between polls.
pub struct IbConnecting {
    handle: ListenHandle,
    /// The TCP connect completed (QPs are made on the next poll).
    tcp_ready: bool,
    started: Instant,
    stage: ConnectStage,
}

impl std::fmt::Debug for IbConnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IbConnecting({})", self.handle.addr)
    }
}

pub(crate) fn poll_connect(
    port: &Arc<Port>,
    config: &IbConfig,
    handle: &NetHandle,
    state: &mut Option<IbConnecting>,
) -> Result<Option<IbSendComm>, NetError> {
    let target = match state {
        Some(c) => c.handle,
        None => ListenHandle::parse(&handle.0).map_err(|why| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                format!("verbs connect: {why}"),
            )
        })?,
    };
    poll_connect_to(port, config, target, state)
}

/// Connects from `port` to the listener at `target`, without blocking.
pub(crate) fn poll_connect_to(
    port: &Arc<Port>,
    config: &IbConfig,
    target: ListenHandle,
    state: &mut Option<IbConnecting>,
) -> Result<Option<IbSendComm>, NetError> {
    if state.is_none() {
        *state = Some(IbConnecting {
            handle: target,
            tcp_ready: false,
            started: Instant::now(),
            stage: ConnectStage::Tcp {
                stream: None,
                next_try: Instant::now(),
            },
        });
    }
    let Some(c) = state.as_mut() else {
        return Ok(None);
    };
    let result = step_connect(port, config, c);
    match result {
        Ok(None) if c.started.elapsed() > config.connect_timeout => {
            let peer = c.handle.addr;
            *state = None;
            Err(NetError::new(
                NetErrorKind::Timeout,
                format!(
                    "verbs connect from {} did not complete within {:.1} s",
                    port.describe(),
                    config.connect_timeout.as_secs_f64()
                ),
            )
            .peer(peer)
            .hint("the peer never accepted: check that it is alive and that this host reaches its address (WEFT_IB_CONNECT_TIMEOUT sets the limit)"))
        }
        Ok(None) => Ok(None),
        Ok(Some(comm)) => {
            *state = None;
            Ok(Some(comm))
        }
        Err(e) => {
            *state = None;
            Err(e)
        }
    }
}

fn step_connect(
    port: &Arc<Port>,
    config: &IbConfig,
    c: &mut IbConnecting,
) -> Result<Option<IbSendComm>, NetError> {
    let peer = c.handle.addr;
    loop {
        match &mut c.stage {
            ConnectStage::Tcp { stream, next_try } => {
                if stream.is_none() {
                    if Instant::now() < *next_try {
                        return Ok(None);
                    }
                    *stream = Some(sys::start_connect(&peer).map_err(|e| {
                        NetError::io("start the verbs handshake connect", &e).peer(peer)
                    })?);
                }
                let Some(s) = stream.as_ref() else {
                    return Ok(None);
                };
                match sys::connect_result(s) {
                    Ok(false) => return Ok(None),
                    // Setting up QPs takes local work (tens of ms, more under emulation):
                    // leave it to the next poll, so that no single call takes long.
                    Ok(true) if !c.tcp_ready => {
                        c.tcp_ready = true;
                        return Ok(None);
                    }
                    Ok(true) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        // The peer may not listen yet: try again until the deadline.
                        *stream = None;
                        *next_try = Instant::now() + RETRY_PAUSE;
                        return Ok(None);
                    }
                    Err(e) => {
                        return Err(
                            NetError::io("connect to the verbs handshake listener", &e).peer(peer)
                        );
                    }
                }
                let Some(mut s) = stream.take() else {
                    return Ok(None);
                };
                let qps = create_qps(port, config, config.qps_per_connection)?;
                let fifo = DmaBuf::<FifoEntry>::new(
                    port,
                    SLOTS * MAX_RECVS,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                )?;
                let sizes = DmaBuf::<u32>::new(port, SLOTS * MAX_RECVS, IBV_ACCESS_LOCAL_WRITE)?;
                let mut hello = exchange_of(port, c.handle.nonce, &qps);
                hello.fifo_addr = fifo.addr(0);
                hello.fifo_rkey = fifo.mr.rkey;
                write_small(&mut s, &hello.emit())
                    .map_err(|e| NetError::io("send the verbs handshake", &e).peer(peer))?;
                c.stage = ConnectStage::Answer(Box::new(Answering {
                    stream: s,
                    qps,
                    fifo,
                    sizes,
                    buf: [0; EXCHANGE_LEN],
                    got: 0,
                }));
            }
            ConnectStage::Answer(a) => {
                let Answering {
                    stream, buf, got, ..
                } = a.as_mut();
                if !read_some(stream, buf, got).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        NetError::new(
                            NetErrorKind::PeerClosed,
                            "the listener closed the verbs handshake instead of answering: it \
                             could not set up its side, or refused this connector's nonce (a \
                             stale handle from an earlier listen); its log says which",
                        )
                        .peer(peer)
                        .hint(
                            "the usual causes: a handle from an earlier listen (its nonce is \
                             stale), or GID indexes of different address families at the two \
                             ends (NCCL_IB_GID_INDEX / NCCL_IB_ADDR_FAMILY must pick the same \
                             family on both)",
                        )
                    } else {
                        NetError::io("read the verbs handshake answer", &e).peer(peer)
                    }
                })? {
                    return Ok(None);
                }
                let answer = Exchange::parse(buf)
                    .map_err(|why| NetError::new(NetErrorKind::Protocol, why).peer(peer))?;
                let stage = std::mem::replace(
                    &mut c.stage,
                    ConnectStage::Tcp {
                        stream: None,
                        next_try: Instant::now(),
                    },
                );
                let ConnectStage::Answer(a) = stage else {
                    return Ok(None);
                };
                let Answering {
                    mut stream,
                    qps,
                    fifo,
                    sizes,
                    ..
                } = *a;
                if usize::from(answer.nqps) != qps.qps.len() || answer.nonce != c.handle.nonce {
                    return Err(NetError::new(
                        NetErrorKind::Protocol,
                        format!(
                            "verbs handshake answer with {} QPs (asked for {}) or another nonce",
                            answer.nqps,
                            qps.qps.len()
                        ),
                    )
                    .peer(peer));
                }
                let path = path_of(port, config, answer.mtu);
                let NewQps {
                    cq,
                    qps: init,
                    psns,
                } = qps;
                let rts = to_rts(init, &psns, &path, &answer)
                    .map_err(|e| e.peer(format!("{} at {}", peer, describe_gid(&answer.gid))))?;
                write_small(&mut stream, &[1])
                    .map_err(|e| NetError::io("send the verbs ready byte", &e).peer(peer))?;
                watch_peer(&stream);
                let link = Link::new(port.clone(), rts, cq, stream, peer, answer.gid);
                return Ok(Some(IbSendComm(Arc::new(Mutex::new(SendState::new(
                    link, fifo, sizes,
                ))))));
            }
        }
    }
}
