//! Selection and striping: the mesh scenario, the error text, and properties over random
//! NIC sets drawn from a few overlapping subnets.

use std::string::ToString;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

fn v4(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn nic(index: u8, addr: &str, prefix_len: u8, speed_mbps: u32, up: bool) -> LocalNic {
    LocalNic {
        index,
        addr: v4(addr),
        prefix_len,
        speed_mbps,
        up,
    }
}

fn peer(nic_index: u8, addr: &str, prefix_len: u8, speed_mbps: u32) -> PeerAddr {
    PeerAddr {
        addr: v4(addr),
        prefix_len,
        nic_index,
        speed_mbps,
    }
}

/// Three hosts, one /24 per link: A-B on 10.0.1, B-C on 10.0.2, A-C on 10.0.3.
#[test]
fn mesh_picks_the_link_between_the_two_hosts() {
    let a = [
        nic(0, "10.0.1.1", 24, 100_000, true),
        nic(1, "10.0.3.1", 24, 100_000, true),
    ];
    let b = [
        peer(0, "10.0.1.2", 24, 100_000),
        peer(1, "10.0.2.2", 24, 100_000),
    ];
    let c = [
        peer(0, "10.0.2.3", 24, 100_000),
        peer(1, "10.0.3.3", 24, 100_000),
    ];
    let ab = select(&a, &b).unwrap();
    assert_eq!((ab.local.index, ab.peer.addr), (0, v4("10.0.1.2")));
    assert_eq!(ab.subnet.to_string(), "10.0.1.0/24");
    let ac = select(&a, &c).unwrap();
    assert_eq!((ac.local.index, ac.peer.addr), (1, v4("10.0.3.3")));
    assert_eq!(ac.peer_position, 1);
}

#[test]
fn faster_pair_then_lowest_index_then_peer_order() {
    let local = [
        nic(3, "10.0.1.3", 24, 25_000, true),
        nic(2, "10.0.1.2", 24, 100_000, true),
        nic(1, "10.0.1.1", 24, 100_000, true),
        nic(0, "10.0.1.9", 24, 400_000, false), // fastest but down
    ];
    let peers = [
        peer(5, "10.0.1.50", 24, 200_000),
        peer(4, "10.0.1.40", 24, 200_000),
    ];
    let r = select(&local, &peers).unwrap();
    assert_eq!(r.local.index, 1);
    assert_eq!(r.peer.nic_index, 5); // the peer's first address wins the tie
    assert_eq!(r.speed_mbps, 100_000);
    // The peer end limits the pair: min(400G local, 10G peer) loses to 25G both ends.
    let local = [
        nic(0, "10.0.1.1", 24, 400_000, true),
        nic(1, "10.0.2.1", 24, 25_000, true),
    ];
    let peers = [
        peer(0, "10.0.1.2", 24, 10_000),
        peer(1, "10.0.2.2", 24, 25_000),
    ];
    assert_eq!(select(&local, &peers).unwrap().local.index, 1);
    // Unknown speed (0) at one end: the other end decides.
    let local = [
        nic(0, "10.0.1.1", 24, 0, true),
        nic(1, "10.0.2.1", 24, 25_000, true),
    ];
    let peers = [
        peer(0, "10.0.1.2", 24, 50_000),
        peer(1, "10.0.2.2", 24, 25_000),
    ];
    let r = select(&local, &peers).unwrap();
    assert_eq!((r.local.index, r.speed_mbps), (0, 50_000));
}

#[test]
fn no_route_lists_what_was_compared() {
    let local = [
        nic(0, "10.0.1.1", 24, 100_000, true),
        nic(1, "10.0.3.1", 24, 0, false),
    ];
    let peers = [peer(2, "10.0.2.7", 16, 100_000)];
    let err = select(&local, &peers).unwrap_err();
    assert_eq!(err.reason(), NoRouteReason::NoSharedSubnet);
    assert_eq!(err.local_nics().copied().collect::<Vec<_>>(), local);
    assert_eq!(err.peer_addrs().copied().collect::<Vec<_>>(), peers);
    assert_eq!(
        err.to_string(),
        "no route to peer: no local NIC shares a subnet with the peer (both ends must be \
         on-link at the longer of their prefixes); local NICs [#0 10.0.1.1/24 100000 Mb/s up, \
         #1 10.0.3.1/24 down] vs peer addresses [10.0.2.7/16 (peer NIC #2)]; check \
         NCCL_SOCKET_IFNAME / cabling, and that both ends of each link have addresses in one \
         subnet"
    );
}

#[test]
fn no_route_reasons() {
    let up = nic(0, "10.0.1.1", 24, 1, true);
    let down = LocalNic { up: false, ..up };
    let p4 = peer(0, "10.0.1.2", 24, 1);
    let p6 = PeerAddr {
        addr: v4("fd00::2"),
        prefix_len: 64,
        ..p4
    };
    let reason = |l: &[LocalNic], p: &[PeerAddr]| select(l, p).unwrap_err().reason();
    assert_eq!(reason(&[], &[p4]), NoRouteReason::NoLocalNics);
    assert_eq!(reason(&[up], &[]), NoRouteReason::NoPeerAddresses);
    assert_eq!(reason(&[down], &[p4]), NoRouteReason::AllLocalNicsDown);
    assert_eq!(reason(&[up], &[p6]), NoRouteReason::NoCommonFamily);
    let ll = nic(0, "fe80::1", 64, 1, true);
    let pll = PeerAddr {
        addr: v4("fe80::2"),
        prefix_len: 64,
        ..p4
    };
    assert_eq!(reason(&[ll], &[pll]), NoRouteReason::OnlyLinkLocal);
    let same = peer(0, "10.0.1.1", 24, 1);
    assert_eq!(reason(&[up], &[same]), NoRouteReason::DuplicateAddress);
    let apipa = nic(0, "169.254.1.1", 16, 1, true);
    let papipa = peer(0, "169.254.9.9", 16, 1);
    assert_eq!(reason(&[apipa], &[papipa]), NoRouteReason::OnlyLinkLocal);
    // Many entries: the first MAX_LISTED are kept, the rest counted.
    let many: Vec<LocalNic> = (0..11u8)
        .map(|i| LocalNic {
            index: i,
            addr: IpAddr::V4(Ipv4Addr::new(10, 9, i, 1)),
            ..up
        })
        .collect();
    let err = select(&many, &[p4]).unwrap_err();
    assert_eq!(err.local_count(), 11);
    assert_eq!(err.local_nics().count(), MAX_LISTED);
    assert!(
        err.to_string()
            .contains("#7 10.9.7.1/24 1 Mb/s up, and 3 more]")
    );
}

#[test]
fn stripe_spreads_over_disjoint_rails() {
    // Four NICs to a peer with three, all on one flat /16, one local NIC slower.
    let local = [
        nic(0, "10.1.0.1", 16, 200_000, true),
        nic(1, "10.1.0.2", 16, 200_000, true),
        nic(2, "10.1.0.3", 16, 100_000, true),
        nic(3, "10.1.0.4", 16, 200_000, true),
    ];
    let peers = [
        peer(0, "10.1.1.1", 16, 200_000),
        peer(1, "10.1.1.2", 16, 200_000),
        peer(2, "10.1.1.3", 16, 200_000),
    ];
    let plan = stripe(&local, &peers, 7).unwrap();
    let rails: Vec<(u8, u8)> = plan
        .rails()
        .map(|r| (r.local.index, r.peer.nic_index))
        .collect();
    assert_eq!(rails, [(0, 0), (1, 1), (3, 2)]);
    let counts: Vec<usize> = (0..4).map(|r| plan.connections_on(r)).collect();
    assert_eq!(counts, [3, 2, 2, 0]);
    let mut out = [plan.rails().next().copied().unwrap(); 9];
    assert_eq!(plan.fill(&mut out), 7);
    let order: Vec<u8> = out.iter().take(7).map(|r| r.local.index).collect();
    assert_eq!(order, [0, 1, 3, 0, 1, 3, 0]);
    assert!(plan.route(7).is_none());
    // No match: the same error as select.
    let far = [peer(0, "10.2.0.1", 16, 1)];
    assert_eq!(
        stripe(&local, &far, 4).unwrap_err(),
        select(&local, &far).unwrap_err()
    );
}

// Random NIC sets over a few overlapping subnets: 10.0.{0,1,2}.x at /24 and /16, some
// IPv6 in fd00:{0,1}::/64, and a link-local of each family, with duplicate speeds so that
// ties happen often.

fn addr_strategy() -> impl Strategy<Value = (IpAddr, u8)> {
    prop_oneof![
        4 => (0u8..3, 1u8..6, prop_oneof![Just(24u8), Just(16u8), Just(23u8)])
            .prop_map(|(net, host, len)| (IpAddr::V4(Ipv4Addr::new(10, 0, net, host)), len)),
        2 => (0u16..2, 1u16..5)
            .prop_map(|(net, host)| (IpAddr::V6(Ipv6Addr::new(0xfd00, net, 0, 0, 0, 0, 0, host)), 64)),
        1 => (1u8..4).prop_map(|h| (IpAddr::V4(Ipv4Addr::new(169, 254, 0, h)), 16)),
        1 => (1u16..4).prop_map(|h| (IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, h)), 64)),
    ]
}

fn speed_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(25_000), Just(100_000), Just(200_000)]
}

fn locals_strategy() -> impl Strategy<Value = Vec<LocalNic>> {
    prop::collection::vec(
        (addr_strategy(), speed_strategy(), any::<bool>(), 0u8..6),
        0..7,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|((addr, prefix_len), speed_mbps, up, index)| LocalNic {
                index,
                addr,
                prefix_len,
                speed_mbps,
                up,
            })
            .collect()
    })
}

fn peers_strategy() -> impl Strategy<Value = Vec<PeerAddr>> {
    prop::collection::vec((addr_strategy(), speed_strategy(), 0u8..5), 0..6).prop_map(|v| {
        v.into_iter()
            .map(|((addr, prefix_len), speed_mbps, nic_index)| PeerAddr {
                addr,
                prefix_len,
                nic_index,
                speed_mbps,
            })
            .collect()
    })
}

/// Every usable pair, by brute force from the rules (not through `pair`).
fn candidates(local: &[LocalNic], peer: &[PeerAddr]) -> Vec<(LocalNic, PeerAddr, usize)> {
    let mut out = Vec::new();
    for l in local {
        for (i, p) in peer.iter().enumerate() {
            let same_family = l.addr.is_ipv4() == p.addr.is_ipv4();
            let on_link = same_family
                && l.addr != p.addr
                && Subnet::new(l.addr, l.prefix_len).unwrap().contains(p.addr)
                && Subnet::new(p.addr, p.prefix_len).unwrap().contains(l.addr);
            if l.up && on_link && !is_link_local(l.addr) && !is_link_local(p.addr) {
                out.push((*l, *p, i));
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn select_obeys_the_rules(local in locals_strategy(), peer in peers_strategy()) {
        let all = candidates(&local, &peer);
        match select(&local, &peer) {
            Err(e) => {
                prop_assert!(all.is_empty(), "error {} but {} candidates", e, all.len());
                prop_assert_eq!(e.local_count(), local.len());
                prop_assert_eq!(e.peer_count(), peer.len());
            }
            Ok(r) => {
                prop_assert!(r.local.up);
                prop_assert!(all.iter().any(|(l, p, i)| *l == r.local && *p == r.peer && *i == r.peer_position));
                prop_assert!(r.subnet.contains(r.local.addr) && r.subnet.contains(r.peer.addr));
                prop_assert_eq!(r.subnet.prefix_len(), r.local.prefix_len.max(r.peer.prefix_len));
                prop_assert_eq!(r.speed_mbps, effective_speed_mbps(&r.local, &r.peer));
                let best_speed = all.iter().map(|(l, p, _)| effective_speed_mbps(l, p)).max();
                prop_assert_eq!(Some(r.speed_mbps), best_speed);
                // Lowest local index among the fastest, then the earliest peer among those.
                let fastest = all.iter().filter(|(l, p, _)| effective_speed_mbps(l, p) == r.speed_mbps);
                prop_assert_eq!(Some(r.local.index), fastest.clone().map(|(l, _, _)| l.index).min());
                let same_local = fastest.filter(|(l, _, _)| *l == r.local);
                prop_assert_eq!(Some(r.peer_position), same_local.map(|(_, _, i)| *i).min());
            }
        }
    }

    #[test]
    fn select_ignores_local_order(
        (local, shuffled) in locals_strategy().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        peer in peers_strategy(),
    ) {
        let a = select(&local, &peer).ok();
        let b = select(&shuffled, &peer).ok();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn stripe_is_balanced_over_disjoint_rails(
        local in locals_strategy(), peer in peers_strategy(), connections in 0usize..40,
    ) {
        let Ok(plan) = stripe(&local, &peer, connections) else {
            prop_assert!(select(&local, &peer).is_err());
            return Ok(());
        };
        let first = select(&local, &peer).unwrap();
        let rails: Vec<Route> = plan.rails().copied().collect();
        prop_assert_eq!(rails.len(), plan.rail_count());
        prop_assert_eq!(rails[0], first);
        for (i, a) in rails.iter().enumerate() {
            prop_assert_eq!(a.speed_mbps, first.speed_mbps);
            prop_assert!(candidates(&local, &peer).iter().any(|(l, p, _)| *l == a.local && *p == a.peer));
            for b in &rails[i + 1..] {
                prop_assert!(a.local.index != b.local.index && a.peer.nic_index != b.peer.nic_index);
            }
        }
        // Maximal: no unused top-speed pair is left that would make another rail.
        if rails.len() < MAX_RAILS {
            let left = candidates(&local, &peer).into_iter().any(|(l, p, _)| {
                effective_speed_mbps(&l, &p) == first.speed_mbps
                    && rails.iter().all(|r| r.local.index != l.index && r.peer.nic_index != p.nic_index)
            });
            prop_assert!(!left);
        }
        // Balanced: counts differ by at most one and add up; route() agrees with the counts.
        let counts: Vec<usize> = (0..rails.len()).map(|r| plan.connections_on(r)).collect();
        prop_assert_eq!(counts.iter().sum::<usize>(), connections);
        prop_assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        for (rail, route) in rails.iter().enumerate() {
            let n = (0..connections).filter(|&c| plan.route(c) == Some(route)).count();
            prop_assert_eq!(n, counts[rail]);
        }
        prop_assert!(plan.route(connections).is_none());
    }
}

#[test]
fn mesh_handle_entries_select_like_peer_addrs() {
    use crate::wire::mesh_handle::{MeshEntry, MeshHandle};
    let mut handle = MeshHandle::new(4242);
    for (i, addr) in ["10.0.1.2", "10.0.2.2", "fd00:0:0:3::2"].iter().enumerate() {
        let addr: IpAddr = addr.parse().unwrap();
        let prefix_len = if addr.is_ipv4() { 24 } else { 64 };
        handle
            .push(MeshEntry {
                addr,
                prefix_len,
                nic_index: i as u8,
                qpn: 0x1234,
                gid_index: 3,
                speed_mbps: 100_000,
            })
            .unwrap();
    }
    let mut bytes = [0u8; 128];
    let n = handle.emit(&mut bytes).unwrap();
    let parsed = MeshHandle::parse(&bytes[..n]).unwrap();
    let peers: std::vec::Vec<PeerAddr> = parsed.entries().iter().map(PeerAddr::from).collect();
    let local = [LocalNic {
        index: 7,
        addr: "10.0.2.1".parse().unwrap(),
        prefix_len: 24,
        speed_mbps: 200_000,
        up: true,
    }];
    let route = select(&local, &peers).unwrap();
    assert_eq!(route.peer.addr, "10.0.2.2".parse::<IpAddr>().unwrap());
    assert_eq!(route.peer.nic_index, 1);
    assert_eq!(route.speed_mbps, 100_000);
}
