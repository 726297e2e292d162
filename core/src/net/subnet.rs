//! IPv4 and IPv6 prefixes: masking, membership, and the "same subnet" rule used to pair NICs.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// An IP network: an address with its host bits cleared, and a prefix length.
///
/// Built with [`Subnet::new`] (from any address inside the network, as `ip addr` prints
/// it) or parsed from `"10.0.1.0/24"` / `"fd00:1::/64"` text. The prefix is checked once at
/// construction, so every method after that is total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subnet {
    addr: IpAddr,
    prefix_len: u8,
}

/// Why an address/prefix pair or a `"addr/len"` text is not a subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubnetError {
    /// The prefix is longer than the address (over 32 for IPv4, over 128 for IPv6).
    PrefixTooLong { prefix_len: u8, max: u8 },
    /// The text has no `/len` part. A bare address is refused rather than taken as a host
    /// route, because in a NIC filter that guess would silently match nothing.
    MissingPrefix,
    /// The part before `/` is not an IPv4 or IPv6 address.
    BadAddress,
    /// The part after `/` is not a decimal number from 0 to 255.
    BadPrefix,
}

impl fmt::Display for SubnetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SubnetError::PrefixTooLong { prefix_len, max } => {
                write!(
                    f,
                    "prefix length /{prefix_len} exceeds /{max} for this address family"
                )
            }
            SubnetError::MissingPrefix => f.write_str(
                "missing prefix length: write the subnet as ADDRESS/LEN, e.g. 10.0.1.0/24",
            ),
            SubnetError::BadAddress => f.write_str("not an IPv4 or IPv6 address"),
            SubnetError::BadPrefix => f.write_str("prefix length is not a number from 0 to 128"),
        }
    }
}

/// Number of bits in an address of this family: 32 or 128.
pub const fn address_bits(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// The IPv4 netmask of `prefix_len` bits, as an integer. Lengths past 32 saturate to all ones.
fn mask_v4(prefix_len: u8) -> u32 {
    let host_bits = 32u32.saturating_sub(u32::from(prefix_len));
    // checked_shl is None exactly when host_bits == 32, i.e. a /0 network: no bits fixed.
    u32::MAX.checked_shl(host_bits).unwrap_or(0)
}

/// The IPv6 netmask of `prefix_len` bits, as an integer. Lengths past 128 saturate.
fn mask_v6(prefix_len: u8) -> u128 {
    let host_bits = 128u32.saturating_sub(u32::from(prefix_len));
    u128::MAX.checked_shl(host_bits).unwrap_or(0)
}

/// `addr` with every bit past `prefix_len` cleared.
fn masked(addr: IpAddr, prefix_len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_v4(prefix_len))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_v6(prefix_len))),
    }
}

impl Subnet {
    /// The network of `prefix_len` bits that contains `addr`; host bits are cleared, so
    /// `Subnet::new(10.0.1.7, 24)` is `10.0.1.0/24`.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, SubnetError> {
        let max = address_bits(&addr);
        if prefix_len > max {
            return Err(SubnetError::PrefixTooLong { prefix_len, max });
        }
        Ok(Subnet {
            addr: masked(addr, prefix_len),
            prefix_len,
        })
    }

    /// The network address (host bits zero).
    pub const fn network(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The netmask as an address (`255.255.255.0` for a /24).
    pub fn netmask(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(mask_v4(self.prefix_len))),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(mask_v6(self.prefix_len))),
        }
    }

    /// Whether `addr` lies inside this network. Never true across families: an IPv4 address
    /// is not inside an IPv6 network even in its `::ffff:0:0/96` mapped form.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let same_family = matches!(
            (self.addr, addr),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
        );
        same_family && masked(addr, self.prefix_len) == self.addr
    }

    /// Whether every address of `other` is also in `self`.
    pub fn covers(&self, other: &Subnet) -> bool {
        other.prefix_len >= self.prefix_len && self.contains(other.addr)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for Subnet {
    type Err = SubnetError;

    /// Parses `ADDRESS/LEN`; host bits in ADDRESS are allowed and cleared, so an interface
    /// address copied from `ip addr` (`10.0.1.7/24`) names its network.
    fn from_str(text: &str) -> Result<Self, SubnetError> {
        let (addr, len) = text
            .trim()
            .split_once('/')
            .ok_or(SubnetError::MissingPrefix)?;
        let addr = IpAddr::from_str(addr).map_err(|_| SubnetError::BadAddress)?;
        let prefix_len = u8::from_str(len).map_err(|_| SubnetError::BadPrefix)?;
        Subnet::new(addr, prefix_len)
    }
}

/// The subnet that both ends of a direct link agree on, if any.
///
/// Two interfaces `a/len_a` and `b/len_b` can talk without a router only if each one sees
/// the other as on-link: `b` inside `a`'s network AND `a` inside `b`'s network. That holds
/// exactly when the two addresses agree on the first `max(len_a, len_b)` bits, so the
/// comparison uses the longer (narrower) prefix. With a local `10.0.1.5/24` and a peer
/// `10.0.2.7/16`, the shorter /16 would call them neighbours, yet the local host sends to
/// 10.0.2.7 through its default route, not over that link: refused. With a peer at
/// `10.0.1.7/16`, both see each other on-link: accepted, and the shared subnet is the
/// narrower `10.0.1.0/24`.
///
/// Returns `None` for mixed families, for a prefix too long for its family, and for two
/// identical addresses (an address cannot be both ends of a link).
pub fn shared_subnet(a: IpAddr, len_a: u8, b: IpAddr, len_b: u8) -> Option<Subnet> {
    if a == b {
        return None;
    }
    let sa = Subnet::new(a, len_a).ok()?;
    let sb = Subnet::new(b, len_b).ok()?;
    let narrower = if len_a >= len_b { sa } else { sb };
    (sa.contains(b) && sb.contains(a)).then_some(narrower)
}

/// Whether `addr` is link-local (`169.254.0.0/16`, `fe80::/10`). Such addresses exist on
/// every link at once, so matching on them cannot tell which cable leads to the peer.
pub fn is_link_local(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (u128::from(a) & mask_v6(10)) == 0xfe80_u128 << 112,
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn parse_and_display() {
        let s: Subnet = "10.0.1.7/24".parse().unwrap();
        assert_eq!(s.network(), v4(10, 0, 1, 0));
        assert_eq!(s.prefix_len(), 24);
        assert_eq!(s.netmask(), v4(255, 255, 255, 0));
        assert_eq!(std::format!("{s}"), "10.0.1.0/24");
        let s6: Subnet = " fd00:1:2:3::9/64 ".parse().unwrap();
        assert_eq!(std::format!("{s6}"), "fd00:1:2:3::/64");
        assert_eq!(std::format!("{}", s6.netmask()), "ffff:ffff:ffff:ffff::");
        let z: Subnet = "1.2.3.4/0".parse().unwrap();
        assert_eq!(z.network(), v4(0, 0, 0, 0));
        assert!(z.contains(v4(200, 1, 1, 1)));
        let host: Subnet = "1.2.3.4/32".parse().unwrap();
        assert!(host.contains(v4(1, 2, 3, 4)));
        assert!(!host.contains(v4(1, 2, 3, 5)));
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            "10.0.1.0".parse::<Subnet>(),
            Err(SubnetError::MissingPrefix)
        );
        assert_eq!("10.0.1/24".parse::<Subnet>(), Err(SubnetError::BadAddress));
        assert_eq!("10.0.1.0/x".parse::<Subnet>(), Err(SubnetError::BadPrefix));
        assert_eq!(
            "10.0.1.0/300".parse::<Subnet>(),
            Err(SubnetError::BadPrefix)
        );
        assert_eq!(
            "10.0.1.0/33".parse::<Subnet>(),
            Err(SubnetError::PrefixTooLong {
                prefix_len: 33,
                max: 32
            })
        );
        assert_eq!(
            "::/129".parse::<Subnet>(),
            Err(SubnetError::PrefixTooLong {
                prefix_len: 129,
                max: 128
            })
        );
        assert!(std::format!("{}", SubnetError::MissingPrefix).contains("10.0.1.0/24"));
    }

    #[test]
    fn narrower_prefix_decides() {
        // /24 local against a /16 peer in another /24: the local host would route, refuse.
        assert_eq!(
            shared_subnet(v4(10, 0, 1, 5), 24, v4(10, 0, 2, 7), 16),
            None
        );
        assert_eq!(
            shared_subnet(v4(10, 0, 2, 7), 16, v4(10, 0, 1, 5), 24),
            None
        );
        // Same /24 inside the /16: both sides on-link; the shared subnet is the /24.
        let s = shared_subnet(v4(10, 0, 1, 5), 24, v4(10, 0, 1, 7), 16).unwrap();
        assert_eq!(std::format!("{s}"), "10.0.1.0/24");
        // Mixed families and identical addresses never pair.
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(shared_subnet(v4(10, 0, 1, 5), 0, v6, 0), None);
        assert_eq!(
            shared_subnet(v4(10, 0, 1, 5), 24, v4(10, 0, 1, 5), 24),
            None
        );
        // Invalid prefix lengths never pair.
        assert_eq!(
            shared_subnet(v4(10, 0, 1, 5), 33, v4(10, 0, 1, 6), 24),
            None
        );
    }

    #[test]
    fn link_local() {
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(is_link_local("febf::1".parse().unwrap()));
        assert!(!is_link_local("fec0::1".parse().unwrap()));
        assert!(is_link_local(v4(169, 254, 3, 4)));
        assert!(!is_link_local(v4(169, 253, 3, 4)));
    }

    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
        ]
    }

    proptest! {
        #[test]
        fn contains_matches_bit_prefix(a in any_ip(), b in any_ip(), len in 0u8..=128) {
            let bits = address_bits(&a);
            let len = len % (bits + 1);
            let s = Subnet::new(a, len).unwrap();
            prop_assert!(s.contains(a));
            // Reference: compare the leading `len` bits one by one.
            let expect = match (a, b) {
                (IpAddr::V4(x), IpAddr::V4(y)) => (0..len).all(|i| {
                    (u32::from(x) >> (31 - i)) & 1 == (u32::from(y) >> (31 - i)) & 1
                }),
                (IpAddr::V6(x), IpAddr::V6(y)) => (0..len).all(|i| {
                    (u128::from(x) >> (127 - u32::from(i))) & 1
                        == (u128::from(y) >> (127 - u32::from(i))) & 1
                }),
                _ => false,
            };
            prop_assert_eq!(s.contains(b), expect);
            // Round trip through text.
            let text = std::format!("{s}");
            prop_assert_eq!(text.parse::<Subnet>(), Ok(s));
        }

        #[test]
        fn shared_subnet_is_mutual(a in any::<u32>(), la in 0u8..=32, flip in 0u32..32, lb in 0u8..=32) {
            // b differs from a in one bit, so the outcome depends on where that bit sits.
            let b = a ^ (1u32 << flip);
            let (ia, ib) = (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)));
            let got = shared_subnet(ia, la, ib, lb);
            let on_link_both = Subnet::new(ia, la).unwrap().contains(ib)
                && Subnet::new(ib, lb).unwrap().contains(ia);
            prop_assert_eq!(got.is_some(), on_link_both);
            prop_assert_eq!(got, shared_subnet(ib, lb, ia, la));
            if let Some(s) = got {
                prop_assert_eq!(s.prefix_len(), la.max(lb));
                prop_assert!(s.contains(ia) && s.contains(ib));
            }
        }
    }
}
