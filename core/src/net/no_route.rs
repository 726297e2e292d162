//! The error when no (local NIC, peer address) pair can carry a connection, with what was
//! compared, so that the message alone tells the user which addresses to look at.

use core::fmt;

use super::nic::{LocalNic, PeerAddr};

/// How many local NICs and peer addresses an error keeps; the rest are counted.
pub const MAX_LISTED: usize = 8;

/// Why nothing matched, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoRouteReason {
    /// This host offered no NIC at all (interface filter too strict?).
    NoLocalNics,
    /// The peer advertised no address.
    NoPeerAddresses,
    /// Every local NIC is down.
    AllLocalNicsDown,
    /// The up local NICs and the peer use different address families only.
    NoCommonFamily,
    /// The peer advertises an address that a local up NIC also has: a duplicate IP, or a
    /// handle that describes this host.
    DuplicateAddress,
    /// Pairs share a subnet only through link-local addresses, which cannot name a link.
    OnlyLinkLocal,
    /// No up local NIC shares a subnet with any peer address.
    NoSharedSubnet,
}

impl NoRouteReason {
    fn explain(self) -> &'static str {
        match self {
            NoRouteReason::NoLocalNics => "this host offers no NIC",
            NoRouteReason::NoPeerAddresses => "the peer advertised no address",
            NoRouteReason::AllLocalNicsDown => "every local NIC is down",
            NoRouteReason::NoCommonFamily => {
                "the local NICs and the peer have no address family in common (IPv4 pairs only with IPv4)"
            }
            NoRouteReason::DuplicateAddress => {
                "the peer advertises an address that a local NIC also has"
            }
            NoRouteReason::OnlyLinkLocal => {
                "the only shared subnets are link-local (169.254/16, fe80::/10), which exist on every link"
            }
            NoRouteReason::NoSharedSubnet => {
                "no local NIC shares a subnet with the peer (both ends must be on-link at the longer of their prefixes)"
            }
        }
    }

    fn hint(self) -> &'static str {
        match self {
            NoRouteReason::NoLocalNics => "check NCCL_SOCKET_IFNAME / WEFT_SOCKET_IFNAME",
            NoRouteReason::NoPeerAddresses => {
                "check the peer's NCCL_SOCKET_IFNAME and that it published its handle"
            }
            NoRouteReason::AllLocalNicsDown => "check cabling and `ip link`",
            NoRouteReason::NoCommonFamily => {
                "set NCCL_SOCKET_FAMILY or give both hosts addresses of one family"
            }
            NoRouteReason::DuplicateAddress => {
                "look for a duplicate IP on the link, or a handle exchanged with the wrong rank"
            }
            NoRouteReason::OnlyLinkLocal | NoRouteReason::NoSharedSubnet => {
                "check NCCL_SOCKET_IFNAME / cabling, and that both ends of each link have addresses in one subnet"
            }
        }
    }
}

/// A bounded copy of a list, with the length of the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Listed<T: Copy> {
    items: [Option<T>; MAX_LISTED],
    total: usize,
}

impl<T: Copy> Listed<T> {
    fn copy_of(all: &[T]) -> Self {
        let mut items = [None; MAX_LISTED];
        for (slot, item) in items.iter_mut().zip(all) {
            *slot = Some(*item);
        }
        Listed {
            items,
            total: all.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map_while(Option::as_ref)
    }

    fn omitted(&self) -> usize {
        self.total.saturating_sub(MAX_LISTED)
    }
}

/// No (local NIC, peer address) pair matched. Keeps copies of the first [`MAX_LISTED`]
/// local NICs and peer addresses compared (no allocation), and prints them all with a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoute {
    reason: NoRouteReason,
    local: Listed<LocalNic>,
    peer: Listed<PeerAddr>,
}

impl NoRoute {
    pub fn new(reason: NoRouteReason, local: &[LocalNic], peer: &[PeerAddr]) -> Self {
        NoRoute {
            reason,
            local: Listed::copy_of(local),
            peer: Listed::copy_of(peer),
        }
    }

    pub fn reason(&self) -> NoRouteReason {
        self.reason
    }

    /// The local NICs compared (at most [`MAX_LISTED`]), in the order given.
    pub fn local_nics(&self) -> impl Iterator<Item = &LocalNic> {
        self.local.iter()
    }

    /// How many local NICs were compared in all.
    pub fn local_count(&self) -> usize {
        self.local.total
    }

    /// The peer addresses compared (at most [`MAX_LISTED`]), in the order given.
    pub fn peer_addrs(&self) -> impl Iterator<Item = &PeerAddr> {
        self.peer.iter()
    }

    /// How many peer addresses were compared in all.
    pub fn peer_count(&self) -> usize {
        self.peer.total
    }
}

impl fmt::Display for NoRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no route to peer: {}; local NICs [",
            self.reason.explain()
        )?;
        for (i, nic) in self.local.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}#{} {}/{}", nic.index, nic.addr, nic.prefix_len)?;
            if nic.speed_mbps != 0 {
                write!(f, " {} Mb/s", nic.speed_mbps)?;
            }
            f.write_str(if nic.up { " up" } else { " down" })?;
        }
        if self.local.omitted() != 0 {
            write!(f, ", and {} more", self.local.omitted())?;
        }
        f.write_str("] vs peer addresses [")?;
        for (i, p) in self.peer.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(
                f,
                "{sep}{}/{} (peer NIC #{})",
                p.addr, p.prefix_len, p.nic_index
            )?;
        }
        if self.peer.omitted() != 0 {
            write!(f, ", and {} more", self.peer.omitted())?;
        }
        write!(f, "]; {}", self.reason.hint())
    }
}
