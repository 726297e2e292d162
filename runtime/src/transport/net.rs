//! The NET transport: connections between ranks over a [`Net`] backend, progressed by a
//! proxy thread (NCCL's `transport/net.cc` counterpart).
//!
//! The executor never sees the network. Each NET connection is a FIFO in this process's
//! heap: on the sending rank the executor fills it and the proxy drains it onto the network;
//! on the receiving rank the proxy fills it from the network and the executor drains it.
//! The executor's ends are the ordinary [`FifoSendEnd`] / [`FifoRecvEnd`].
//!
//! Handshake, per connection (the connect infos travel through bootstrap, by the caller):
//!
//! ```text
//! receiving rank                          sending rank
//! (setup, info) = recv_setup(spec)        (setup, info) = send_setup(spec)
//!        info ------------ bootstrap ----------> peer_info
//!   peer_info <----------- bootstrap ----------- info
//! end = recv_connect(setup, peer_info)    end = send_connect(setup, peer_info)
//! ```
//!
//! `recv_setup` listens and returns the listen handle as its connect info; `send_connect`
//! parses it. Neither `*_connect` blocks: the network connect and accept are polled by the
//! proxy thread, with a deadline, while the executor may already fill the send FIFO. So a
//! ring of ranks that each connect to the next and accept from the previous, in any order
//! and from one thread each, cannot deadlock. A connect that fails or passes its deadline
//! fails the connection: the executor's next wait ends with
//! [`ConnError::Failed`](crate::conn::ConnError::Failed) naming the peer.
//!
//! The executor must use the connection's default geometry (one step per slice): the proxy
//! moves one message per step.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{ConnSpec, PeerInfo, Transport};
use crate::conn::layout::ring_step_bytes;
use crate::conn::{
    AbortFlag, ConnId, Direction, FifoLayout, FifoRecvEnd, FifoRegion, FifoSendEnd, LayoutError,
    WaitPolicy, Waiter,
};
use crate::net::{NET_HANDLE_MAXSIZE, Net, NetError, NetHandle};
use crate::proxy::{Link, NetProxy, RecvLink, SendLink};
use weft_config::TransportSettings;

/// The transport's name, as in NCCL's `via NET/Socket/0` lines and in [`ConnId`].
pub const NET_NAME: &str = "NET";

/// Bytes per step of a NET connection by default: NCCL's SIMPLE buffer (4 MiB, 8 steps of
/// 512 KiB). Larger steps than SHM's because every step costs a network message.
pub const DEFAULT_NET_STEP_BYTES: usize = 512 * 1024;

/// The executor's waits on NET ends sleep at most as long as the proxy's idle sleep: a
/// receiver asleep for the default 500 us when its data lands would cap a ring of 8 small
/// messages at one ring per sleep.
fn net_wait_policy(policy: WaitPolicy) -> WaitPolicy {
    WaitPolicy {
        max_sleep: crate::proxy::IDLE_SLEEP,
        ..policy
    }
}

/// How NET connections are built and progressed.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// The backend device (NIC) to listen and connect on.
    pub dev: usize,
    /// Slots and step size of each connection's FIFO.
    pub layout: FifoLayout,
    /// How the executor's ends wait; its abort flag is also the proxy's.
    pub waiter: Waiter,
    /// How long the proxy polls a connect or an accept before failing the connection.
    pub connect_timeout: Duration,
    /// On drop, how long links still moving data get before they are failed.
    pub linger: Duration,
}

impl Default for NetOptions {
    fn default() -> Self {
        NetOptions {
            dev: 0,
            layout: FifoLayout::new(weft_core::fifo::NCCL_STEPS, DEFAULT_NET_STEP_BYTES)
                .unwrap_or_default(),
            waiter: Waiter {
                policy: net_wait_policy(WaitPolicy::default()),
                ..Waiter::default()
            },
            connect_timeout: Duration::from_secs(120),
            linger: Duration::from_secs(5),
        }
    }
}

impl NetOptions {
    /// Defaults with the wait deadline of a transport built on its own (`WEFT_CONN_TIMEOUT`)
    /// and the ring of `WEFT_NET_BUFFSIZE`, else of `WEFT_BUFFSIZE` / `NCCL_BUFFSIZE` (bytes
    /// for the 8 slots).
    pub fn from_settings(
        abort: AbortFlag,
        settings: &TransportSettings,
    ) -> Result<Self, NetTransportError> {
        let mut options = NetOptions {
            waiter: Waiter {
                policy: net_wait_policy(WaitPolicy::from_settings(settings)),
                abort,
                peer_pid: None,
                board: None,
            },
            ..NetOptions::default()
        };
        if let Some(total) = settings.net_buffsize.or(settings.buffsize) {
            options.layout = FifoLayout::new(weft_core::fifo::NCCL_STEPS, ring_step_bytes(total))?;
        }
        Ok(options)
    }
}

/// Why building a NET connection failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NetTransportError {
    /// The backend refused `what` (listen, ...) for this connection.
    Net {
        what: &'static str,
        conn: ConnId,
        err: NetError,
    },
    /// The FIFO layout is invalid or its memory could not be allocated.
    Layout(LayoutError),
    /// The peer's connect info is not a listen handle.
    BadConnectInfo { conn: ConnId, len: usize },
    /// The proxy thread could not be started.
    ProxyStart(String),
}

impl fmt::Display for NetTransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetTransportError::Net { what, conn, err } => write!(f, "{conn}: {what}: {err}"),
            NetTransportError::Layout(e) => write!(f, "NET connection buffer: {e}"),
            NetTransportError::BadConnectInfo { conn, len } => write!(
                f,
                "{conn}: the connect info from rank {} is {len} bytes, expected a \
                 {NET_HANDLE_MAXSIZE}-byte listen handle (ranks disagree on the transport of \
                 this connection, or run different weft builds?)",
                conn.peer
            ),
            NetTransportError::ProxyStart(e) => write!(f, "start the NET proxy thread: {e}"),
        }
    }
}

impl std::error::Error for NetTransportError {}

impl From<LayoutError> for NetTransportError {
    fn from(e: LayoutError) -> Self {
        NetTransportError::Layout(e)
    }
}

/// What `recv_setup` keeps until `recv_connect`: the listening comm.
pub struct NetRecvSetup<N: Net> {
    conn: ConnId,
    listen: N::ListenComm,
}

impl<N: Net> fmt::Debug for NetRecvSetup<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetRecvSetup")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

/// What `send_setup` keeps until `send_connect`.
#[derive(Debug, Clone, Copy)]
pub struct NetSendSetup {
    conn: ConnId,
}

/// The NET transport over backend `N`, with its proxy thread (one per communicator).
pub struct NetTransport<N: Net + 'static> {
    options: NetOptions,
    proxy: NetProxy<N>,
}

impl<N: Net + 'static> fmt::Debug for NetTransport<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetTransport")
            .field("options", &self.options)
            .field("proxy", &self.proxy)
            .finish()
    }
}

fn conn_id(spec: ConnSpec, dir: Direction) -> ConnId {
    ConnId {
        transport: NET_NAME,
        rank: spec.rank,
        peer: spec.peer,
        channel: spec.channel,
        dir,
    }
}

impl<N: Net + 'static> NetTransport<N> {
    /// Starts the proxy thread over `net`.
    pub fn new(net: Arc<N>, options: NetOptions) -> Result<Self, NetTransportError> {
        let proxy = NetProxy::start(net, options.waiter.abort.clone(), options.linger)
            .map_err(|e| NetTransportError::ProxyStart(e.to_string()))?;
        Ok(NetTransport { options, proxy })
    }

    pub fn options(&self) -> &NetOptions {
        &self.options
    }

    pub fn proxy(&self) -> &NetProxy<N> {
        &self.proxy
    }

    pub fn name(&self) -> &'static str {
        NET_NAME
    }

    /// Receiving side, first step: listens on the device. The returned connect info (the
    /// listen handle, [`NET_HANDLE_MAXSIZE`] bytes) goes to the sending rank.
    pub fn recv_setup(
        &self,
        spec: ConnSpec,
    ) -> Result<(NetRecvSetup<N>, Vec<u8>), NetTransportError> {
        let conn = conn_id(spec, Direction::Recv);
        let (handle, listen) =
            self.proxy
                .net()
                .listen(self.options.dev)
                .map_err(|err| NetTransportError::Net {
                    what: "listen",
                    conn,
                    err,
                })?;
        Ok((NetRecvSetup { conn, listen }, handle.as_bytes().to_vec()))
    }

    /// Sending side, first step. Its connect info is empty (the sender needs nothing from
    /// the receiver but its listen handle); it is there for the symmetric exchange.
    pub fn send_setup(&self, spec: ConnSpec) -> Result<(NetSendSetup, Vec<u8>), NetTransportError> {
        Ok((
            NetSendSetup {
                conn: conn_id(spec, Direction::Send),
            },
            Vec::new(),
        ))
    }

    /// Sending side, last step, with the receiver's connect info (its listen handle): the
    /// executor's end of the FIFO. The proxy connects in the background; the end can be
    /// filled at once (the first `slots` posts need no credit).
    pub fn send_connect(
        &self,
        setup: NetSendSetup,
        peer_info: &[u8],
    ) -> Result<FifoSendEnd, NetTransportError> {
        let conn = setup.conn;
        let bytes: [u8; NET_HANDLE_MAXSIZE] =
            peer_info
                .try_into()
                .map_err(|_| NetTransportError::BadConnectInfo {
                    conn,
                    len: peer_info.len(),
                })?;
        let region = FifoRegion::local(self.options.layout)?;
        let end = region.send_end(conn, self.options.waiter.clone());
        self.proxy.add(Link::Send(SendLink::new(
            conn,
            self.options.dev,
            NetHandle(bytes),
            region,
            self.options.connect_timeout,
        )));
        Ok(end)
    }

    /// Receiving side, last step: the executor's end of the FIFO. The proxy accepts the
    /// sender's connection in the background and receives into the FIFO. The sender's
    /// connect info is accepted whatever it holds (it carries nothing today).
    pub fn recv_connect(
        &self,
        setup: NetRecvSetup<N>,
        _peer_info: &[u8],
    ) -> Result<FifoRecvEnd, NetTransportError> {
        let region = FifoRegion::local(self.options.layout)?;
        let end = region.recv_end(setup.conn, self.options.waiter.clone());
        self.proxy.add(Link::Recv(RecvLink::new(
            setup.conn,
            setup.listen,
            region,
            self.options.connect_timeout,
        )));
        Ok(end)
    }
}

/// The `Transport` table entry: the inherent methods above, plus `can_connect`.
impl<N: Net + 'static> Transport for NetTransport<N> {
    type SendSetup = NetSendSetup;
    type RecvSetup = NetRecvSetup<N>;
    type Error = NetTransportError;

    fn name(&self) -> &'static str {
        NET_NAME
    }

    /// The network reaches every rank (as NCCL's NET transport; P2P and SHM, tried first,
    /// take the pairs they can serve better). A rank without a device cannot get this far:
    /// `SocketNet::new` fails when no interface matches.
    fn can_connect(&self, _me: &PeerInfo, _peer: &PeerInfo) -> bool {
        self.proxy.net().devices() > self.options.dev
    }

    fn recv_setup(&self, spec: ConnSpec) -> Result<(NetRecvSetup<N>, Vec<u8>), Self::Error> {
        NetTransport::recv_setup(self, spec)
    }

    fn send_setup(&self, spec: ConnSpec) -> Result<(NetSendSetup, Vec<u8>), Self::Error> {
        NetTransport::send_setup(self, spec)
    }

    fn recv_connect(
        &self,
        setup: NetRecvSetup<N>,
        peer_blob: &[u8],
    ) -> Result<FifoRecvEnd, Self::Error> {
        NetTransport::recv_connect(self, setup, peer_blob)
    }

    fn send_connect(
        &self,
        setup: NetSendSetup,
        peer_blob: &[u8],
    ) -> Result<FifoSendEnd, Self::Error> {
        NetTransport::send_connect(self, setup, peer_blob)
    }
}
