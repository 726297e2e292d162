//! Building connections: the transport for each peer, then NCCL's handshake.
//!
//! For every connection the sending and the receiving rank each pick the transport with
//! [`Transports::choose`] (P2P > SHM > NET: the first whose `can_connect` accepts the pair;
//! `--transport` / `WEFT_TRANSPORT` may force one), then:
//!
//! 1. the receiver runs `recv_setup`, the sender `send_setup`; each gets a connect info;
//! 2. each sends its info to the other through the bootstrap network, prefixed with the
//!    transport's number (so ranks that chose differently say so instead of misparsing);
//! 3. the receiver runs `recv_connect` with the sender's info, the sender `send_connect` with
//!    the receiver's: each holds its end of a FIFO.
//!
//! All setups and sends happen before any receive, so ranks never wait on each other in a
//! cycle; `*_connect` never blocks on the peer (NET connects in its proxy thread).

use crate::bootstrap::Bootstrap;
use crate::conn::{FifoRecvEnd, FifoSendEnd};
use crate::net::any::AnyNet;
use crate::transport::net::{NetRecvSetup, NetSendSetup, NetTransport};
use crate::transport::shm::{ShmRecvSetup, ShmSendSetup, ShmTransport};
use crate::transport::{ConnSpec, PeerInfo, Transport};

use super::error::CommError;
use super::peers::Peer;

/// Which transport a communicator uses (`WEFT_TRANSPORT`): weft-config's, which parses it.
pub use weft_config::TransportChoice;

/// A transport a connection was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    Shm,
    Net,
}

impl TransportKind {
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Shm => "SHM",
            TransportKind::Net => "NET",
        }
    }

    fn number(self) -> u8 {
        match self {
            TransportKind::Shm => 1,
            TransportKind::Net => 2,
        }
    }
}

/// What a `*_setup` keeps until its `*_connect`.
#[derive(Debug)]
pub enum SendSetup {
    Shm(ShmSendSetup),
    Net(NetSendSetup),
}

#[derive(Debug)]
pub enum RecvSetup {
    Shm(ShmRecvSetup),
    Net(NetRecvSetup<AnyNet>),
}

/// The transports of one communicator. NET (and its proxy thread) starts only when some
/// connection needs it.
pub struct Transports {
    pub choice: TransportChoice,
    shm: ShmTransport,
    net: Option<NetTransport<AnyNet>>,
    make_net: Box<NetFactory>,
}

/// Creates the NET transport on first use.
pub type NetFactory = dyn Fn() -> Result<NetTransport<AnyNet>, String> + Send;

impl std::fmt::Debug for Transports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transports")
            .field("choice", &self.choice)
            .field("shm", &self.shm)
            .field("net", &self.net)
            .finish_non_exhaustive()
    }
}

impl Transports {
    pub fn new(choice: TransportChoice, shm: ShmTransport, make_net: Box<NetFactory>) -> Self {
        Transports {
            choice,
            shm,
            net: None,
            make_net,
        }
    }

    /// The SHM transport (built whether or not a connection uses it).
    pub fn shm(&self) -> &ShmTransport {
        &self.shm
    }

    /// The transport for a connection between `me` and `peer`: the first of P2P (not on
    /// host memory), SHM, NET whose `can_connect` accepts the pair, unless one is forced.
    /// The same on both sides: it depends only on what both ranks know about both (and on
    /// `NCCL_SHM_DISABLE`, which the handshake checks).
    pub fn choose(&self, me: &Peer, peer: &Peer) -> TransportKind {
        match self.choice {
            TransportChoice::Shm => TransportKind::Shm,
            TransportChoice::Net | TransportChoice::Ib | TransportChoice::Mesh => {
                TransportKind::Net
            }
            TransportChoice::Auto if self.shm.can_connect(&info(me), &info(peer)) => {
                TransportKind::Shm
            }
            TransportChoice::Auto => TransportKind::Net,
        }
    }

    /// Refuses a forced transport that cannot connect the pair, before any setup.
    pub fn check(&self, kind: TransportKind, me: &Peer, peer: &Peer) -> Result<(), CommError> {
        if kind == TransportKind::Shm && !self.shm.can_connect(&info(me), &info(peer)) {
            return Err(CommError::Transport {
                transport: kind.name(),
                peer: peer.info.rank as usize,
                channel: 0,
                detail: format!(
                    "SHM cannot reach rank {}: it runs on another host or sees another \
                     /dev/shm (or NCCL_SHM_DISABLE=1 is set); use --transport auto or net",
                    peer.info.rank
                ),
            });
        }
        Ok(())
    }

    fn net(&mut self) -> Result<&NetTransport<AnyNet>, String> {
        if self.net.is_none() {
            self.net = Some((self.make_net)()?);
        }
        self.net
            .as_ref()
            .ok_or_else(|| "NET transport unavailable".to_string())
    }

    fn fail(kind: TransportKind, spec: ConnSpec, detail: impl ToString) -> CommError {
        CommError::Transport {
            transport: kind.name(),
            peer: spec.peer as usize,
            channel: spec.channel,
            detail: detail.to_string(),
        }
    }

    pub fn send_setup(
        &mut self,
        kind: TransportKind,
        spec: ConnSpec,
    ) -> Result<(SendSetup, Vec<u8>), CommError> {
        match kind {
            TransportKind::Net => {
                let net = self.net().map_err(|e| Self::fail(kind, spec, e))?;
                let (setup, info) = net
                    .send_setup(spec)
                    .map_err(|e| Self::fail(kind, spec, e))?;
                Ok((SendSetup::Net(setup), tagged(kind, info)))
            }
            TransportKind::Shm => {
                let (setup, info) = self
                    .shm
                    .send_setup(spec)
                    .map_err(|e| Self::fail(kind, spec, e))?;
                Ok((SendSetup::Shm(setup), tagged(kind, info)))
            }
        }
    }

    pub fn recv_setup(
        &mut self,
        kind: TransportKind,
        spec: ConnSpec,
    ) -> Result<(RecvSetup, Vec<u8>), CommError> {
        match kind {
            TransportKind::Net => {
                let net = self.net().map_err(|e| Self::fail(kind, spec, e))?;
                let (setup, info) = net
                    .recv_setup(spec)
                    .map_err(|e| Self::fail(kind, spec, e))?;
                Ok((RecvSetup::Net(setup), tagged(kind, info)))
            }
            TransportKind::Shm => {
                let (setup, info) = self
                    .shm
                    .recv_setup(spec)
                    .map_err(|e| Self::fail(kind, spec, e))?;
                Ok((RecvSetup::Shm(setup), tagged(kind, info)))
            }
        }
    }

    pub fn send_connect(
        &mut self,
        spec: ConnSpec,
        setup: SendSetup,
        peer_info: &[u8],
    ) -> Result<FifoSendEnd, CommError> {
        match setup {
            SendSetup::Shm(setup) => {
                let kind = TransportKind::Shm;
                let info = untag(kind, spec, peer_info)?;
                self.shm
                    .send_connect(setup, info)
                    .map_err(|e| Self::fail(kind, spec, e))
            }
            SendSetup::Net(setup) => {
                let kind = TransportKind::Net;
                let info = untag(kind, spec, peer_info)?;
                let net = self.net().map_err(|e| Self::fail(kind, spec, e))?;
                net.send_connect(setup, info)
                    .map_err(|e| Self::fail(kind, spec, e))
            }
        }
    }

    pub fn recv_connect(
        &mut self,
        spec: ConnSpec,
        setup: RecvSetup,
        peer_info: &[u8],
    ) -> Result<FifoRecvEnd, CommError> {
        match setup {
            RecvSetup::Shm(setup) => {
                let kind = TransportKind::Shm;
                let info = untag(kind, spec, peer_info)?;
                self.shm
                    .recv_connect(setup, info)
                    .map_err(|e| Self::fail(kind, spec, e))
            }
            RecvSetup::Net(setup) => {
                let kind = TransportKind::Net;
                let info = untag(kind, spec, peer_info)?;
                let net = self.net().map_err(|e| Self::fail(kind, spec, e))?;
                net.recv_connect(setup, info)
                    .map_err(|e| Self::fail(kind, spec, e))
            }
        }
    }
}

/// What the transports' `can_connect` looks at, from the all-gathered peer info.
fn info(p: &Peer) -> PeerInfo {
    PeerInfo {
        rank: p.info.rank,
        host_hash: p.info.host_hash,
        pid: p.settings.pid,
        shm_dev: p.info.shm_dev,
    }
}

fn tagged(kind: TransportKind, info: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(info.len() + 1);
    out.push(kind.number());
    out.extend_from_slice(&info);
    out
}

fn untag(kind: TransportKind, spec: ConnSpec, info: &[u8]) -> Result<&[u8], CommError> {
    match info.split_first() {
        Some((&n, rest)) if n == kind.number() => Ok(rest),
        other => Err(CommError::Transport {
            transport: kind.name(),
            peer: spec.peer as usize,
            channel: spec.channel,
            detail: format!(
                "rank {} chose another transport for this connection (its number {:?}, ours \
                 {}): are WEFT_TRANSPORT / NCCL_SHM_DISABLE set the same on every rank?",
                spec.peer,
                other.map(|(n, _)| *n),
                kind.number()
            ),
        }),
    }
}

/// Bootstrap tags of the handshake messages.
pub const TAG_RING: u32 = 0x0100_0000;
pub const TAG_P2P: u32 = 0x0200_0000;

/// One connection to build: the peer, the channel and the transport.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub peer: u32,
    pub channel: u32,
    pub kind: TransportKind,
    /// Tag this side sends its info with; the peer sends with `tag ^ 1`.
    pub tag: u32,
}

/// Builds the send connections `sends` and receive connections `recvs` of this rank in one
/// handshake round. Every peer named must run the matching round.
pub fn handshake(
    rank: u32,
    bootstrap: &mut Bootstrap,
    transports: &mut Transports,
    sends: &[Planned],
    recvs: &[Planned],
) -> Result<(Vec<FifoSendEnd>, Vec<FifoRecvEnd>), CommError> {
    let spec = |p: &Planned| ConnSpec {
        rank,
        peer: p.peer,
        channel: p.channel,
    };
    let mut send_setups = Vec::with_capacity(sends.len());
    for p in sends {
        let (setup, info) = transports.send_setup(p.kind, spec(p))?;
        bootstrap.send(p.peer as usize, p.tag, &info)?;
        send_setups.push(setup);
    }
    let mut recv_setups = Vec::with_capacity(recvs.len());
    for p in recvs {
        let (setup, info) = transports.recv_setup(p.kind, spec(p))?;
        bootstrap.send(p.peer as usize, p.tag, &info)?;
        recv_setups.push(setup);
    }
    let mut send_ends = Vec::with_capacity(sends.len());
    for (p, setup) in sends.iter().zip(send_setups) {
        let info = bootstrap.recv(p.peer as usize, p.tag ^ 1)?;
        send_ends.push(transports.send_connect(spec(p), setup, &info)?);
    }
    let mut recv_ends = Vec::with_capacity(recvs.len());
    for (p, setup) in recvs.iter().zip(recv_setups) {
        let info = bootstrap.recv(p.peer as usize, p.tag ^ 1)?;
        recv_ends.push(transports.recv_connect(spec(p), setup, &info)?);
    }
    Ok((send_ends, recv_ends))
}

/// The handshake tags for the ring connection from `sender` to its next rank on
/// `channel`: the sender sends its info with the even tag, the receiver with the odd one.
pub fn ring_tags(channel: u32) -> (u32, u32) {
    let base = TAG_RING.saturating_add(channel.saturating_mul(2));
    (base, base | 1)
}

/// Same for point-to-point connections (one per ordered pair of ranks).
pub fn p2p_tags() -> (u32, u32) {
    (TAG_P2P, TAG_P2P | 1)
}
