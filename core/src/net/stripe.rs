//! Multi-rail striping: spreading a peer's connections over several disjoint NIC pairs.

use super::nic::{LocalNic, PeerAddr};
use super::no_route::NoRoute;
use super::route::{Route, best_route, select};

/// The most rails a plan holds (NCCL's hosts carry up to 8 NICs per GPU tray).
pub const MAX_RAILS: usize = 8;

/// A set of 256 flags, one per NIC index.
#[derive(Debug, Clone, Copy, Default)]
struct IndexSet([u64; 4]);

impl IndexSet {
    fn word_bit(index: u8) -> (usize, u64) {
        (usize::from(index >> 6), 1u64 << (index & 63))
    }

    fn contains(&self, index: u8) -> bool {
        let (word, bit) = Self::word_bit(index);
        self.0.get(word).is_some_and(|w| w & bit != 0)
    }

    fn insert(&mut self, index: u8) {
        let (word, bit) = Self::word_bit(index);
        if let Some(w) = self.0.get_mut(word) {
            *w |= bit;
        }
    }
}

/// Rails and the round-robin assignment of `connections` onto them.
///
/// The rails are disjoint pairs: no two share a local NIC (by `LocalNic::index`) or a peer
/// NIC (by `PeerAddr::nic_index`), so each one is its own cable. All rails run at the speed
/// of the best pair: with equal shares per rail, a slower rail would hold the others back
/// to its pace. Connection `c` goes to rail `c % rails`, so the best rail comes first and
/// the counts per rail differ by at most one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripePlan {
    rails: [Option<Route>; MAX_RAILS],
    rail_count: usize,
    connections: usize,
}

/// Plans `connections` connections to a peer over up to [`MAX_RAILS`] rails.
///
/// Rails are picked greedily in [`select`]'s order: the first rail is `select`'s route,
/// each next one the best remaining pair of the same speed whose local and peer NICs are
/// both still unused. Fails exactly when `select` fails, with the same error.
// Large error by design: see `select`.
#[allow(clippy::result_large_err)]
pub fn stripe(
    local: &[LocalNic],
    peer: &[PeerAddr],
    connections: usize,
) -> Result<StripePlan, NoRoute> {
    let first = select(local, peer)?;
    let mut plan = StripePlan {
        rails: [None; MAX_RAILS],
        rail_count: 0,
        connections,
    };
    let mut used_local = IndexSet::default();
    let mut used_peer = IndexSet::default();
    let mut next = Some(first);
    for slot in plan.rails.iter_mut() {
        let Some(route) = next else { break };
        *slot = Some(route);
        plan.rail_count = plan.rail_count.saturating_add(1);
        used_local.insert(route.local.index);
        used_peer.insert(route.peer.nic_index);
        next = best_route(local, peer, |r| {
            r.speed_mbps == first.speed_mbps
                && !used_local.contains(r.local.index)
                && !used_peer.contains(r.peer.nic_index)
        });
    }
    Ok(plan)
}

impl StripePlan {
    /// The rails, best first.
    pub fn rails(&self) -> impl Iterator<Item = &Route> {
        self.rails.iter().map_while(Option::as_ref)
    }

    /// Number of rails (1 to [`MAX_RAILS`]).
    pub fn rail_count(&self) -> usize {
        self.rail_count
    }

    /// Number of connections planned.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// The route of connection `connection`, or `None` past the planned count.
    pub fn route(&self, connection: usize) -> Option<&Route> {
        if connection >= self.connections {
            return None;
        }
        let rail = connection.checked_rem(self.rail_count)?;
        self.rails.get(rail)?.as_ref()
    }

    /// How many connections rail `rail` carries.
    pub fn connections_on(&self, rail: usize) -> usize {
        if rail >= self.rail_count {
            return 0;
        }
        let each = self.connections.checked_div(self.rail_count).unwrap_or(0);
        let extra = self.connections.checked_rem(self.rail_count).unwrap_or(0);
        each.saturating_add(usize::from(rail < extra))
    }

    /// Writes the route of connections `0..` into `out`, as many as fit and are planned;
    /// returns how many were written.
    pub fn fill(&self, out: &mut [Route]) -> usize {
        let mut written = 0;
        for (connection, slot) in out.iter_mut().enumerate() {
            let Some(route) = self.route(connection) else {
                break;
            };
            *slot = *route;
            written = connection.saturating_add(1);
        }
        written
    }
}
