//! Transports: how a connection between two ranks is built, in the shape of NCCL's
//! `ncclTransport` table.
//!
//! (On this branch: the `Transport` trait as drafted with the SHM transport, which lands it
//! with `PeerInfo::local`; merge by taking that module and keeping `pub mod net;`.)

pub mod net;

use crate::conn::{FifoRecvEnd, FifoSendEnd};

/// What a transport needs to know about a rank to decide whether it can reach it. The
/// communicator all-gathers one per rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerInfo {
    pub rank: u32,
    /// Same value on ranks of one host (and one boot): hostname and kernel boot id, hashed.
    pub host_hash: u64,
    pub pid: u32,
    /// Device number of /dev/shm.
    pub shm_dev: u64,
}

/// Which connection a handshake is for, seen from the rank calling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnSpec {
    pub rank: u32,
    pub peer: u32,
    pub channel: u32,
}

/// One transport: NCCL's `ncclTransport { canConnect, send{setup, connect, free},
/// recv{setup, connect, free} }`.
pub trait Transport {
    /// What `send_setup` keeps until `send_connect`.
    type SendSetup;
    /// What `recv_setup` keeps until `recv_connect`.
    type RecvSetup;
    type Error: std::error::Error + Send + Sync + 'static;

    /// "SHM", "NET", ...: as in NCCL_DEBUG=INFO lines (`via SHM/direct/direct`).
    fn name(&self) -> &'static str;

    /// Whether this transport can connect `me` to `peer`.
    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool;

    /// The receiving side's first step; returns its state and the blob for the sender.
    fn recv_setup(&self, spec: ConnSpec) -> Result<(Self::RecvSetup, Vec<u8>), Self::Error>;

    /// The sending side's first step; returns its state and the blob for the receiver.
    fn send_setup(&self, spec: ConnSpec) -> Result<(Self::SendSetup, Vec<u8>), Self::Error>;

    /// Finishes the receiving side with the sender's blob.
    fn recv_connect(
        &self,
        setup: Self::RecvSetup,
        peer_blob: &[u8],
    ) -> Result<FifoRecvEnd, Self::Error>;

    /// Finishes the sending side with the receiver's blob.
    fn send_connect(
        &self,
        setup: Self::SendSetup,
        peer_blob: &[u8],
    ) -> Result<FifoSendEnd, Self::Error>;

    /// Releases a sending end (NCCL's `sendFree`): closes it for the peer; the memory goes
    /// when both ends are gone.
    fn free_send(&self, end: FifoSendEnd) {
        drop(end);
    }

    /// Releases a receiving end (NCCL's `recvFree`).
    fn free_recv(&self, end: FifoRecvEnd) {
        drop(end);
    }
}
