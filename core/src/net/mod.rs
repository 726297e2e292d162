//! Subnet math and NIC selection.
//!
//! A connection to a peer needs a (local NIC, peer address) pair that one cable joins. In a
//! mesh with one subnet per link (three hosts, each pair on its own /24), the subnet is the
//! only thing that says which local NIC reaches which peer address, so the match is strict:
//! both ends must see each other on-link ([`shared_subnet`]), there is no fallback to a
//! routed path, and when nothing matches the error ([`NoRoute`]) lists every address that
//! was compared. [`select`] picks one pair; [`stripe`] spreads several connections over
//! disjoint pairs (multi-rail).
//!
//! Addresses are `core::net` types; nothing here allocates.

mod nic;
mod no_route;
mod route;
mod stripe;
mod subnet;

pub use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use nic::{LocalNic, PeerAddr, effective_speed_mbps};
pub use no_route::{MAX_LISTED, NoRoute, NoRouteReason};
pub use route::{Route, pair, preference, select};
pub use stripe::{MAX_RAILS, StripePlan, stripe};
pub use subnet::{Subnet, SubnetError, address_bits, is_link_local, shared_subnet};

#[cfg(test)]
mod test;
