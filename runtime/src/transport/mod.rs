//! Transports: how a connection between two ranks is built, in the shape of NCCL's
//! `ncclTransport` table.
//!
//! For each channel and peer the communicator picks the first transport whose `can_connect`
//! accepts the pair (P2P > SHM > NET), then runs the handshake:
//!
//! 1. the receiving rank calls `recv_setup`, the sending rank `send_setup`; each returns the
//!    state it keeps plus a connect-info blob;
//! 2. the blobs are exchanged through the bootstrap network;
//! 3. the receiver calls `recv_connect` with the sender's blob, the sender `send_connect`
//!    with the receiver's; each gets its end of a host FIFO ([`crate::conn`]).
//!
//! Dropping an end (or passing it to `free_*`) releases it; the memory goes with the last end.

pub mod net;
pub mod shm;
pub mod staged;

use crate::bootstrap::identity;
use crate::conn::{FifoRecvEnd, FifoSendEnd};

/// What a transport needs to know about a rank to decide whether it can reach it. The
/// communicator all-gathers one per rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerInfo {
    pub rank: u32,
    /// Same value on ranks of one host (`bootstrap::identity::host_hash`).
    pub host_hash: u64,
    pub pid: u32,
    /// Device number of /dev/shm: ranks in different containers on one host see different
    /// /dev/shm mounts (NCCL's `shmDev` check), and SHM between them cannot work.
    pub shm_dev: u64,
}

impl PeerInfo {
    /// This process's info as rank `rank`.
    pub fn local(rank: u32) -> Self {
        PeerInfo {
            rank,
            host_hash: identity::host_hash(),
            pid: std::process::id(),
            shm_dev: identity::shm_dev(),
        }
    }
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
