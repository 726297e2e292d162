//! Choosing the (local NIC, peer address) pair for one connection.

use core::cmp::{Ordering, Reverse};

use super::nic::{LocalNic, PeerAddr, effective_speed_mbps};
use super::no_route::{NoRoute, NoRouteReason};
use super::subnet::{Subnet, is_link_local, shared_subnet};

/// A usable pairing: connect from `local.addr` to `peer.addr` over `subnet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    pub local: LocalNic,
    pub peer: PeerAddr,
    /// The network both ends see as on-link (the narrower of their two prefixes).
    pub subnet: Subnet,
    /// `effective_speed_mbps(local, peer)`: the slower end, unknown (0) ends ignored.
    pub speed_mbps: u32,
    /// Position of `peer` in the list it was chosen from (the peer's order of preference).
    pub peer_position: usize,
}

/// The route for `local` and `peer` if the pair is usable: the local NIC is up, neither
/// address is link-local, the families agree and each end sees the other on-link.
pub fn pair(local: &LocalNic, peer: &PeerAddr, peer_position: usize) -> Option<Route> {
    if !local.up || is_link_local(local.addr) || is_link_local(peer.addr) {
        return None;
    }
    let subnet = shared_subnet(local.addr, local.prefix_len, peer.addr, peer.prefix_len)?;
    Some(Route {
        local: *local,
        peer: *peer,
        subnet,
        speed_mbps: effective_speed_mbps(local, peer),
        peer_position,
    })
}

/// The total order that [`select`] picks the least of: faster pair first; then the lowest
/// local NIC index; then, to stay independent of the order the local NICs were listed in,
/// the local address, prefix and speed; finally the peer's own order of preference.
pub fn preference(a: &Route, b: &Route) -> Ordering {
    let key = |r: &Route| {
        (
            Reverse(r.speed_mbps),
            r.local.index,
            r.local.addr,
            r.local.prefix_len,
            Reverse(r.local.speed_mbps),
            r.peer_position,
        )
    };
    key(a).cmp(&key(b))
}

/// The best (local NIC, peer address) pair, by these rules:
///
/// - A down NIC is never chosen; IPv4 pairs only with IPv4 and IPv6 with IPv6.
/// - Same subnet is strict: each end must see the other on-link (see [`shared_subnet`]). There
///   is no fallback to a routed path: in a mesh with one subnet per link, the subnet is what
///   tells which cable reaches which host, and a guess would connect through the wrong link
///   or hang. When nothing matches, the error lists every address compared.
/// - Link-local addresses (169.254/16, fe80::/10) never match: they are on every link.
/// - Among matching pairs, the order of [`preference`]: fastest effective speed, then
///   lowest local index, then the peer's order. The result does not depend on the order of
///   `local` (any permutation gives the same route).
// The error is large (copies of the compared addresses, about 0.5 KiB) because core cannot
// allocate; it is built once, on the failure path, so returning it by value costs nothing
// that matters.
#[allow(clippy::result_large_err)]
pub fn select(local: &[LocalNic], peer: &[PeerAddr]) -> Result<Route, NoRoute> {
    best_route(local, peer, |_| true)
        .ok_or_else(|| NoRoute::new(diagnose(local, peer), local, peer))
}

/// The best route among those `allowed` accepts; shared by [`select`] and striping.
pub(super) fn best_route(
    local: &[LocalNic],
    peer: &[PeerAddr],
    mut allowed: impl FnMut(&Route) -> bool,
) -> Option<Route> {
    let mut best: Option<Route> = None;
    for l in local {
        for (position, p) in peer.iter().enumerate() {
            let Some(route) = pair(l, p, position) else {
                continue;
            };
            if !allowed(&route) {
                continue;
            }
            let better = match &best {
                None => true,
                Some(b) => preference(&route, b) == Ordering::Less,
            };
            if better {
                best = Some(route);
            }
        }
    }
    best
}

/// The most specific reason why no pair matched, for the error message.
fn diagnose(local: &[LocalNic], peer: &[PeerAddr]) -> NoRouteReason {
    if local.is_empty() {
        return NoRouteReason::NoLocalNics;
    }
    if peer.is_empty() {
        return NoRouteReason::NoPeerAddresses;
    }
    let up = || local.iter().filter(|l| l.up);
    if up().next().is_none() {
        return NoRouteReason::AllLocalNicsDown;
    }
    let same_family = up().any(|l| peer.iter().any(|p| l.addr.is_ipv4() == p.addr.is_ipv4()));
    if !same_family {
        return NoRouteReason::NoCommonFamily;
    }
    if up().any(|l| peer.iter().any(|p| p.addr == l.addr)) {
        return NoRouteReason::DuplicateAddress;
    }
    let link_local_only = up().any(|l| {
        peer.iter()
            .any(|p| shared_subnet(l.addr, l.prefix_len, p.addr, p.prefix_len).is_some())
    });
    if link_local_only {
        return NoRouteReason::OnlyLinkLocal;
    }
    NoRouteReason::NoSharedSubnet
}
