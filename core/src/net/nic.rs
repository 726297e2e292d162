//! The two sides of a pairing: this host's NICs, and the addresses a peer advertised.

use core::net::IpAddr;

/// One address of a network interface on this host.
///
/// A NIC with several addresses appears once per address, all with the same `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocalNic {
    /// The interface's position in the driver's device list (what `NCCL_SOCKET_IFNAME`
    /// filtering and the net plugin's `devices()` count).
    pub index: u8,
    pub addr: IpAddr,
    pub prefix_len: u8,
    /// Link speed; 0 means unknown (virtual interfaces often report none).
    pub speed_mbps: u32,
    /// Operationally up (carrier present). A down NIC is listed in errors but never chosen.
    pub up: bool,
}

/// One address a peer advertised (an entry of its mesh handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    pub addr: IpAddr,
    pub prefix_len: u8,
    /// The index of the NIC on the peer that owns this address.
    pub nic_index: u8,
    /// Link speed as the peer measured it; 0 means unknown.
    pub speed_mbps: u32,
}

/// The speed a connection over this pair can reach: the slower end. An end that reports 0
/// (unknown) does not drag the pair down to 0; the known end decides, and two unknown ends
/// give 0, which ranks below every measured link.
pub fn effective_speed_mbps(local: &LocalNic, peer: &PeerAddr) -> u32 {
    match (local.speed_mbps, peer.speed_mbps) {
        (0, p) => p,
        (l, 0) => l,
        (l, p) => l.min(p),
    }
}

/// A peer's mesh handle entry is what NIC selection compares against: the handle carries
/// exactly the fields a [`PeerAddr`] needs (the QP number and GID index stay with the entry,
/// for the transport that connects over the chosen pair).
impl From<&crate::wire::mesh_handle::MeshEntry> for PeerAddr {
    fn from(entry: &crate::wire::mesh_handle::MeshEntry) -> Self {
        PeerAddr {
            addr: entry.addr,
            prefix_len: entry.prefix_len,
            nic_index: entry.nic_index,
            speed_mbps: entry.speed_mbps,
        }
    }
}
