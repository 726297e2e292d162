//! Which rails a connection takes: the (local NIC, peer address) pairs and, per pair, verbs
//! or sockets. Pure: the addresses in, the plan or the error out.
//!
//! With `WEFT_MESH_TRANSPORT=auto` (the default) pairs where both ends have an RDMA port
//! are tried first; only when none shares a subnet are all addresses compared, and a pair
//! with no RDMA port at either end goes over sockets. Several disjoint pairs of the best
//! speed become several rails (`weft_core::net::stripe`), up to `WEFT_MESH_RAILS`.
//! Reserve NICs (the bootstrap's network, see [`MeshNic::reserve`]) are left out of each
//! attempt first and used only where no other NIC reaches the peer over the same transport
//! (verbs pairs still come before sockets): on the seed's triangle, with a
//! management bridge shared by every host beside the direct links, striping over both gave
//! the management network half of every message.

use std::net::IpAddr;

use weft_core::net::{LocalNic, NoRoute, NoRouteReason, PeerAddr, stripe};
use weft_core::wire::mesh_handle::MeshEntry;

use super::handle::NO_VERBS;

/// How connections travel (`WEFT_MESH_TRANSPORT`): weft-config's, which parses it.
pub use weft_config::MeshTransport as Transport;

/// One local address the mesh may use.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshNic {
    /// The netdev (`eth0`).
    pub name: String,
    /// Which NIC it is: addresses of one netdev share it (rails never share a NIC).
    pub index: u8,
    pub addr: IpAddr,
    pub prefix_len: u8,
    pub speed_mbps: u32,
    /// The RDMA port behind it (an index into the mesh's ports), if any.
    pub port: Option<usize>,
    /// A last resort for data: the bootstrap's network (`NCCL_SOCKET_IFNAME` names it and
    /// `WEFT_MESH_IFNAME` is unset). On a mesh the direct links are the data path; a rail
    /// takes this NIC only where no other NIC reaches the peer ([`plan`]).
    pub reserve: bool,
}

/// How one rail travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailKind {
    /// Verbs from this port (an index into the mesh's ports).
    Ib { port: usize },
    /// Sockets.
    Socket,
}

/// One rail of a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Rail {
    /// An index into the local NICs.
    pub nic: usize,
    pub peer: IpAddr,
    /// What the log and errors show: `192.168.101.0/24`, or `this host`.
    pub over: String,
    pub kind: RailKind,
}

fn local_of(nics: &[MeshNic], usable: impl Fn(&MeshNic) -> bool) -> Vec<LocalNic> {
    nics.iter()
        .filter(|n| usable(n))
        .map(|n| LocalNic {
            index: n.index,
            addr: n.addr,
            prefix_len: n.prefix_len,
            speed_mbps: n.speed_mbps,
            up: true,
        })
        .collect()
}

fn peers_of(entries: &[MeshEntry], only_rdma: bool) -> Vec<PeerAddr> {
    entries
        .iter()
        .filter(|e| !only_rdma || e.gid_index != NO_VERBS)
        .map(PeerAddr::from)
        .collect()
}

fn kind_of(nic: &MeshNic, peer_has_verbs: bool, transport: Transport) -> RailKind {
    match (transport, nic.port) {
        (Transport::Socket, _) => RailKind::Socket,
        (_, Some(port)) if peer_has_verbs => RailKind::Ib { port },
        _ => RailKind::Socket,
    }
}

/// The rails to the peer that advertised `entries`, at most `max_rails`.
// The error is core's `NoRoute` (copies of the addresses compared, no allocation in core).
#[allow(clippy::result_large_err)]
pub fn plan(
    nics: &[MeshNic],
    entries: &[MeshEntry],
    transport: Transport,
    max_rails: usize,
) -> Result<Vec<Rail>, NoRoute> {
    let attempts: &[bool] = match transport {
        Transport::Auto => &[true, false],
        Transport::Ib => &[true],
        Transport::Socket => &[false],
    };
    // In each transport attempt (verbs pairs first), without the reserve NICs first, then
    // with them: holding the bootstrap's network back must not trade verbs for sockets (an
    // InfiniBand cluster bootstraps over ib0, NCCL_SOCKET_IFNAME=ib0, beside an Ethernet
    // subnet without RDMA).
    let reserve_rounds: &[bool] = if nics.iter().any(|n| n.reserve) {
        &[false, true]
    } else {
        &[true]
    };
    let mut error = None;
    for &only_rdma in attempts {
        for &with_reserve in reserve_rounds {
            let attempt = Attempt {
                nics,
                entries,
                transport,
                only_rdma,
                with_reserve,
            };
            match attempt.rails(max_rails) {
                Ok(rails) if !rails.is_empty() => return Ok(rails),
                Ok(_) => {}
                // The last attempt compares every address: its error is the one to show.
                Err(no) => error = Some(no),
            }
        }
    }
    Err(error.unwrap_or_else(|| {
        NoRoute::new(
            NoRouteReason::NoSharedSubnet,
            &local_of(nics, |_| true),
            &peers_of(entries, false),
        )
    }))
}

/// One try of [`plan`]: the NICs and peer addresses it may pair.
struct Attempt<'a> {
    nics: &'a [MeshNic],
    entries: &'a [MeshEntry],
    transport: Transport,
    /// Pairs where both ends have an RDMA port only.
    only_rdma: bool,
    /// The reserve NICs too.
    with_reserve: bool,
}

impl Attempt<'_> {
    fn usable(&self, n: &MeshNic) -> bool {
        (!self.only_rdma || n.port.is_some()) && (self.with_reserve || !n.reserve)
    }

    fn verbs_of(&self, addr: IpAddr) -> bool {
        self.entries
            .iter()
            .any(|e| e.addr == addr && e.gid_index != NO_VERBS)
    }

    /// The rails this try finds (empty: none), or why it found none.
    #[allow(clippy::result_large_err)]
    fn rails(&self, max_rails: usize) -> Result<Vec<Rail>, NoRoute> {
        let local = local_of(self.nics, |n| self.usable(n));
        let peers = peers_of(self.entries, self.only_rdma);
        match stripe(&local, &peers, max_rails.max(1)) {
            Ok(p) => Ok(p
                .rails()
                .take(max_rails.max(1))
                .filter_map(|r| {
                    let nic = self.nics.iter().position(|n| n.addr == r.local.addr)?;
                    Some(Rail {
                        nic,
                        peer: r.peer.addr,
                        over: r.subnet.to_string(),
                        kind: kind_of(&self.nics[nic], self.verbs_of(r.peer.addr), self.transport),
                    })
                })
                .collect()),
            // The handle describes this host (two ranks of one host): an address it shares
            // cannot reach another host, so connecting to it is safe; the NIC holding it
            // serves both ends.
            Err(no) if no.reason() == NoRouteReason::DuplicateAddress => {
                let same = self.nics.iter().enumerate().find(|(_, n)| {
                    self.usable(n)
                        && self.entries.iter().any(|e| {
                            e.addr == n.addr && (!self.only_rdma || e.gid_index != NO_VERBS)
                        })
                });
                match same {
                    Some((nic, n)) => Ok(vec![Rail {
                        nic,
                        peer: n.addr,
                        over: "this host".to_string(),
                        kind: kind_of(n, self.verbs_of(n.addr), self.transport),
                    }]),
                    None => Err(no),
                }
            }
            Err(no) => Err(no),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, index: u8, addr: &str, port: Option<usize>) -> MeshNic {
        MeshNic {
            name: name.into(),
            index,
            addr: addr.parse().unwrap(),
            prefix_len: 24,
            speed_mbps: 10_000,
            port,
            reserve: false,
        }
    }

    fn entry(addr: &str, nic_index: u8, verbs: bool) -> MeshEntry {
        MeshEntry {
            addr: addr.parse().unwrap(),
            prefix_len: 24,
            nic_index,
            qpn: 0,
            gid_index: if verbs { 1 } else { NO_VERBS },
            speed_mbps: 10_000,
        }
    }

    #[test]
    fn verbs_where_both_ends_have_it_else_sockets() {
        // Host b of the triangle: eth0 to a (192.168.101/24), eth1 to c (192.168.102/24).
        let b = [
            nic("eth0", 0, "192.168.101.2", Some(0)),
            nic("eth1", 1, "192.168.102.2", Some(1)),
        ];
        let a = [
            entry("192.168.101.1", 0, true),
            entry("192.168.100.1", 1, true),
        ];
        let c_no_rdma = [
            entry("192.168.100.3", 0, false),
            entry("192.168.102.3", 1, false),
        ];
        let to_a = plan(&b, &a, Transport::Auto, 8).unwrap();
        assert_eq!(to_a.len(), 1);
        assert_eq!(
            (to_a[0].nic, to_a[0].peer, to_a[0].kind),
            (
                0,
                "192.168.101.1".parse().unwrap(),
                RailKind::Ib { port: 0 }
            )
        );
        assert_eq!(to_a[0].over, "192.168.101.0/24");
        let to_c = plan(&b, &c_no_rdma, Transport::Auto, 8).unwrap();
        assert_eq!(
            (to_c[0].nic, to_c[0].peer, to_c[0].kind),
            (1, "192.168.102.3".parse().unwrap(), RailKind::Socket)
        );
        // Forced sockets take the same pair over sockets; forced verbs refuse c, naming it.
        let s = plan(&b, &a, Transport::Socket, 8).unwrap();
        assert_eq!((s[0].nic, s[0].kind), (0, RailKind::Socket));
        let e = plan(&b, &c_no_rdma, Transport::Ib, 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("192.168.101.2/24") && e.contains("no route"),
            "{e}"
        );
        // A host with no RDMA at all reaches a verbs peer over sockets.
        let c = [
            nic("eth0", 0, "192.168.100.3", None),
            nic("eth1", 1, "192.168.102.3", None),
        ];
        let to_a = plan(&c, &a, Transport::Auto, 8).unwrap();
        assert_eq!((to_a[0].nic, to_a[0].kind), (0, RailKind::Socket));
    }

    #[test]
    fn disjoint_pairs_become_rails_up_to_the_limit() {
        let a = [
            nic("eth0", 0, "192.168.101.1", Some(0)),
            nic("eth1", 1, "192.168.103.1", Some(1)),
        ];
        let b = [
            entry("192.168.101.2", 0, true),
            entry("192.168.103.2", 1, true),
        ];
        let rails = plan(&a, &b, Transport::Auto, 8).unwrap();
        let got: Vec<(usize, String, RailKind)> = rails
            .iter()
            .map(|r| (r.nic, r.peer.to_string(), r.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "192.168.101.2".into(), RailKind::Ib { port: 0 }),
                (1, "192.168.103.2".into(), RailKind::Ib { port: 1 }),
            ]
        );
        assert_eq!(plan(&a, &b, Transport::Auto, 1).unwrap().len(), 1);
    }

    #[test]
    fn a_handle_of_this_host_connects_through_the_shared_address() {
        let a = [nic("lo", 0, "127.0.0.1", None)];
        let me = [entry("127.0.0.1", 0, false)];
        let rails = plan(&a, &me, Transport::Auto, 8).unwrap();
        assert_eq!(rails.len(), 1);
        assert_eq!(
            (rails[0].over.as_str(), rails[0].kind),
            ("this host", RailKind::Socket)
        );
    }

    /// Host a of the seed's triangle with a management bridge every host shares (it carries
    /// the bootstrap): eth0 to b, eth1 to c, mgmt0 on 10.0.0/24; verbs on every NIC.
    fn triangle_with_management(management_is_reserve: bool) -> Vec<MeshNic> {
        let mut a = vec![
            nic("eth0", 0, "192.168.101.1", Some(0)),
            nic("eth1", 1, "192.168.100.1", Some(1)),
            nic("mgmt0", 2, "10.0.0.1", Some(2)),
        ];
        a[2].reserve = management_is_reserve;
        a
    }

    #[test]
    fn the_bootstrap_network_carries_data_only_where_nothing_else_reaches() {
        // b: its direct link to a, its link to c, the management bridge.
        let b = [
            entry("192.168.101.2", 0, true),
            entry("192.168.102.2", 1, true),
            entry("10.0.0.2", 2, true),
        ];
        let over = |rails: &[Rail]| rails.iter().map(|r| r.over.clone()).collect::<Vec<_>>();
        // Unmarked, the management bridge is a second rail of the same speed: half the bytes.
        let striped = plan(&triangle_with_management(false), &b, Transport::Auto, 8).unwrap();
        assert_eq!(over(&striped), ["192.168.101.0/24", "10.0.0.0/24"]);
        // Marked, only the direct link carries data.
        let direct = plan(&triangle_with_management(true), &b, Transport::Auto, 8).unwrap();
        assert_eq!(over(&direct), ["192.168.101.0/24"]);
        assert_eq!(direct[0].kind, RailKind::Ib { port: 0 });
        // A host reached over the bridge alone still gets a rail there.
        let d = [entry("10.0.0.4", 0, true)];
        let last_resort = plan(&triangle_with_management(true), &d, Transport::Auto, 8).unwrap();
        assert_eq!(over(&last_resort), ["10.0.0.0/24"]);
        assert_eq!(last_resort[0].kind, RailKind::Ib { port: 2 });
        // No route at all names every address, the reserve ones included.
        let e = [entry("172.16.0.9", 0, false)];
        let no = plan(&triangle_with_management(true), &e, Transport::Auto, 8)
            .unwrap_err()
            .to_string();
        assert!(no.contains("10.0.0.1") && no.contains("172.16.0.9"), "{no}");
    }

    #[test]
    fn holding_the_bootstrap_network_back_never_trades_verbs_for_sockets() {
        // An InfiniBand cluster bootstrapping over ib0 (NCCL_SOCKET_IFNAME=ib0), with an
        // Ethernet subnet without RDMA beside it: verbs over ib0 all the same.
        let mut a = vec![
            nic("ib0", 0, "10.1.0.1", Some(0)),
            nic("eth0", 1, "172.16.0.1", None),
        ];
        a[0].reserve = true;
        let b = [entry("10.1.0.2", 0, true), entry("172.16.0.2", 1, false)];
        let rails = plan(&a, &b, Transport::Auto, 8).unwrap();
        assert_eq!(rails.len(), 1);
        assert_eq!(
            (rails[0].over.as_str(), rails[0].kind),
            ("10.1.0.0/24", RailKind::Ib { port: 0 })
        );
    }

    #[test]
    fn transport_names() {
        assert_eq!(Transport::parse(" Socket "), Some(Transport::Socket));
        assert_eq!(Transport::parse("ib"), Some(Transport::Ib));
        assert_eq!(Transport::parse("verbs"), Some(Transport::Ib));
        assert_eq!(Transport::parse("auto"), Some(Transport::Auto));
        assert_eq!(Transport::parse("tcp"), None);
    }
}
