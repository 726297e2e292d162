//! Transports: how a connection between two ranks is built, in the shape of NCCL's
//! `ncclTransport` table. (The shared `Transport` trait lands with the SHM transport.)

pub mod net;

/// Which connection a handshake is for, seen from the rank calling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnSpec {
    pub rank: u32,
    pub peer: u32,
    pub channel: u32,
}
