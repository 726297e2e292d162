//! Which devices, ports and GIDs the verbs backend uses: NCCL's `NCCL_IB_HCA` filter and its
//! choice of a RoCE GID (`NCCL_IB_GID_INDEX`, else the RoCE v2 GID of an address of the wanted
//! family, or of a given address). Pure logic, tested without a device.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `NCCL_IB_HCA`: `mlx5_0:1,mlx5_1` (prefixes, optional port), `^mlx5_3` (exclude),
/// `=mlx5_0` (exact names); `^=` combines both.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HcaFilter {
    exclude: bool,
    exact: bool,
    entries: Vec<(String, Option<u8>)>,
}

impl HcaFilter {
    /// Parses the variable's value; blank means "every device".
    pub fn parse(spec: &str) -> HcaFilter {
        let mut rest = spec.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let entries = rest
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((name, port)) => (name.to_string(), port.trim().parse().ok()),
                None => (e.to_string(), None),
            })
            .collect();
        HcaFilter {
            exclude,
            exact,
            entries,
        }
    }

    /// Whether port `port` of device `name` is used.
    pub fn allows(&self, name: &str, port: u8) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let listed = self.entries.iter().any(|(n, p)| {
            let name_ok = if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            };
            name_ok && p.is_none_or(|p| p == port)
        });
        listed != self.exclude
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index (what `NCCL_IB_GID_INDEX` names).
    pub index: u32,
    /// The 16 bytes.
    pub gid: [u8; 16],
    /// RoCE v2 (UDP/IP encapsulated, routable), as opposed to RoCE v1 or InfiniBand.
    pub roce_v2: bool,
}

/// What the GID should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidWanted {
    /// This index, whatever it holds (`NCCL_IB_GID_INDEX`).
    Index(u32),
    /// The RoCE v2 GID of an address of this family (`NCCL_IB_ADDR_FAMILY`): IPv4 means
    /// an IPv4-mapped GID (`::ffff:a.b.c.d`), IPv6 a global or unique-local one.
    V4,
    /// See [`GidWanted::V4`].
    V6,
    /// The RoCE v2 GID of exactly this address (the mesh backend picks it by subnet).
    Address(IpAddr),
}

/// The IP address a RoCE GID stands for: IPv4 for IPv4-mapped GIDs, else IPv6; `None` for
/// the zero GID.
pub fn gid_address(gid: &[u8; 16]) -> Option<IpAddr> {
    if gid.iter().all(|&b| b == 0) {
        return None;
    }
    let v6 = Ipv6Addr::from(*gid);
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

fn is_link_local(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// Picks the GID index from `table` (a port's non-empty entries), or says what the table
/// holds.
pub fn choose_gid(table: &[GidEntry], wanted: GidWanted) -> Result<u32, String> {
    let found = match wanted {
        GidWanted::Index(i) => table.iter().find(|e| e.index == i),
        GidWanted::V4 | GidWanted::V6 => table.iter().find(|e| {
            e.roce_v2
                && gid_address(&e.gid)
                    .is_some_and(|a| a.is_ipv4() == (wanted == GidWanted::V4) && !is_link_local(&a))
        }),
        GidWanted::Address(addr) => table
            .iter()
            .find(|e| e.roce_v2 && gid_address(&e.gid) == Some(addr))
            .or_else(|| table.iter().find(|e| gid_address(&e.gid) == Some(addr))),
    };
    found.map(|e| e.index).ok_or_else(|| {
        let listed: Vec<String> = table
            .iter()
            .map(|e| {
                let addr = gid_address(&e.gid).map_or("zero".to_string(), |a| a.to_string());
                format!(
                    "{}: {addr} ({})",
                    e.index,
                    if e.roce_v2 { "RoCE v2" } else { "RoCE v1/IB" }
                )
            })
            .collect();
        let what = match wanted {
            GidWanted::Index(i) => format!("GID index {i} is empty"),
            GidWanted::V4 => "no RoCE v2 GID of an IPv4 address".to_string(),
            GidWanted::V6 => "no RoCE v2 GID of a global IPv6 address".to_string(),
            GidWanted::Address(a) => format!("no GID of address {a}"),
        };
        if listed.is_empty() {
            format!("{what}; the GID table is empty (is the netdev up and addressed?)")
        } else {
            format!("{what}; the table holds {}", listed.join(", "))
        }
    })
}

/// An address for a GID in messages: `::ffff:10.0.0.1` shows as `10.0.0.1`.
pub fn describe_gid(gid: &[u8; 16]) -> String {
    match gid_address(gid) {
        Some(a) => a.to_string(),
        None => Ipv6Addr::from(*gid).to_string(),
    }
}

/// The subnet `addr/prefix` lies in, as `a.b.c.0/p`.
pub fn subnet_of(addr: IpAddr, prefix: u8) -> String {
    match addr {
        IpAddr::V4(a) => {
            let p = u32::from(prefix.min(32));
            let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
            format!("{}/{p}", Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let p = u32::from(prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - p).unwrap_or(0);
            format!("{}/{p}", Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

/// The IPv4-mapped GID of an IPv4 address (used by tests and messages).
pub fn mapped_gid(addr: Ipv4Addr) -> [u8; 16] {
    addr.to_ipv6_mapped().octets()
}

/// Link speed in Mbit/s from `ibv_port_attr`'s `active_speed` and `active_width` codes
/// (0 when unknown).
pub fn port_speed_mbps(active_speed: u8, active_width: u8) -> u32 {
    // Per-lane Mbit/s: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR (XDR is only in
    // active_speed_ex, which the compat ibv_query_port does not fill).
    let lane_mbps = match active_speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        64 => 50_000,
        128 => 100_000,
        _ => 0,
    };
    let lanes = match active_width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    lane_mbps * lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        mapped_gid(Ipv4Addr::from(a))
    }

    fn table() -> Vec<GidEntry> {
        let ll: Ipv6Addr = "fe80::5054:ff:fe5f:1".parse().unwrap();
        let ula: Ipv6Addr = "fd00:101::1".parse().unwrap();
        vec![
            GidEntry {
                index: 0,
                gid: ll.octets(),
                roce_v2: false,
            },
            GidEntry {
                index: 1,
                gid: ll.octets(),
                roce_v2: true,
            },
            GidEntry {
                index: 2,
                gid: v4([192, 168, 101, 1]),
                roce_v2: false,
            },
            GidEntry {
                index: 3,
                gid: v4([192, 168, 101, 1]),
                roce_v2: true,
            },
            GidEntry {
                index: 4,
                gid: ula.octets(),
                roce_v2: true,
            },
            GidEntry {
                index: 5,
                gid: v4([10, 9, 8, 7]),
                roce_v2: true,
            },
        ]
    }

    #[test]
    fn the_family_picks_the_first_routable_roce_v2_gid() {
        assert_eq!(choose_gid(&table(), GidWanted::V4), Ok(3));
        assert_eq!(choose_gid(&table(), GidWanted::V6), Ok(4));
    }

    #[test]
    fn an_address_picks_its_own_gid_and_an_index_is_taken_as_given() {
        let addr = IpAddr::V4(Ipv4Addr::new(10, 9, 8, 7));
        assert_eq!(choose_gid(&table(), GidWanted::Address(addr)), Ok(5));
        assert_eq!(choose_gid(&table(), GidWanted::Index(2)), Ok(2));
        let e = choose_gid(&table(), GidWanted::Index(9)).unwrap_err();
        assert!(
            e.starts_with(
                "GID index 9 is empty; the table holds 0: fe80::5054:ff:fe5f:1 (RoCE v1/IB), "
            ),
            "{e}"
        );
        assert!(e.contains("3: 192.168.101.1 (RoCE v2)"), "{e}");
        let missing = IpAddr::V4(Ipv4Addr::new(192, 168, 102, 1));
        let e = choose_gid(&table(), GidWanted::Address(missing)).unwrap_err();
        assert!(
            e.starts_with("no GID of address 192.168.102.1; the table holds"),
            "{e}"
        );
        assert!(
            choose_gid(&[], GidWanted::V4)
                .unwrap_err()
                .contains("GID table is empty")
        );
    }

    #[test]
    fn gid_addresses_read_back() {
        assert_eq!(gid_address(&[0; 16]), None);
        assert_eq!(
            gid_address(&v4([192, 168, 100, 3])),
            Some(IpAddr::V4(Ipv4Addr::new(192, 168, 100, 3)))
        );
        assert_eq!(describe_gid(&v4([1, 2, 3, 4])), "1.2.3.4");
        assert_eq!(
            subnet_of("192.168.101.2".parse().unwrap(), 24),
            "192.168.101.0/24"
        );
        assert_eq!(subnet_of("10.1.2.3".parse().unwrap(), 0), "0.0.0.0/0");
        assert_eq!(
            subnet_of("fd00:101::2".parse().unwrap(), 64),
            "fd00:101::/64"
        );
    }

    #[test]
    fn hca_filters_follow_nccl() {
        let all = HcaFilter::parse("  ");
        assert!(all.allows("mlx5_0", 1));
        let some = HcaFilter::parse("mlx5_0:1,rxe");
        assert!(some.allows("mlx5_0", 1));
        assert!(!some.allows("mlx5_0", 2));
        assert!(some.allows("mlx5_01", 1), "prefix match");
        assert!(some.allows("rxe1", 1));
        assert!(!some.allows("mlx5_1", 1));
        let exact = HcaFilter::parse("=rxe0");
        assert!(exact.allows("rxe0", 1));
        assert!(!exact.allows("rxe01", 1));
        let not = HcaFilter::parse("^rxe1,mlx5_0:2");
        assert!(!not.allows("rxe1", 1));
        assert!(not.allows("rxe0", 1));
        assert!(not.allows("mlx5_0", 1));
        assert!(!not.allows("mlx5_0", 2));
        let not_exact = HcaFilter::parse("^=rxe");
        assert!(!not_exact.allows("rxe", 1));
        assert!(not_exact.allows("rxe0", 1));
    }

    #[test]
    fn port_speeds() {
        assert_eq!(port_speed_mbps(128, 2), 400_000, "NDR 4x");
        assert_eq!(port_speed_mbps(32, 2), 100_000, "EDR 4x");
        assert_eq!(port_speed_mbps(64, 16), 100_000, "HDR 2x");
        assert_eq!(port_speed_mbps(0, 0), 0);
    }
}
