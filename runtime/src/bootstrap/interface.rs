//! Which local address the bootstrap root listens on: NCCL's `NCCL_SOCKET_IFNAME` rules.
//!
//! The variable (`WEFT_SOCKET_IFNAME` first, then `NCCL_SOCKET_IFNAME`) is a comma-separated
//! list of interface name prefixes (`eth,ib`); a leading `^` turns it into a list to exclude
//! (`^docker,lo`), a leading `=` makes the names exact (`=eth0`). Unset: any interface but
//! loopback, docker and virbr ones, IPv4 before IPv6; loopback when nothing else is up.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A local interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub name: String,
    pub ip: IpAddr,
}

/// Every address of every interface that is up (IPv6 link-local ones left out: they need a
/// scope that other hosts cannot use).
pub fn interface_addrs() -> io::Result<Vec<InterfaceAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs only writes the list head through the valid pointer we pass; the
    // list is freed below with freeifaddrs and not used after.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a non-null node of the list getifaddrs returned, alive until
        // freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null()
            || ifa.ifa_name.is_null()
            || ifa.ifa_flags & libc::IFF_UP as u32 == 0
        {
            continue;
        }
        // SAFETY: ifa_name is non-null and points to a NUL-terminated name owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr of at least sa_family's size.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: the family says this sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says this sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if ip.is_unicast_link_local() {
                    continue;
                }
                IpAddr::V6(ip)
            }
            _ => continue,
        };
        out.push(InterfaceAddr { name, ip });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Whether `name` passes an `NCCL_SOCKET_IFNAME`-style filter.
pub fn matches_filter(filter: &str, name: &str) -> bool {
    let (exclude, rest) = match filter.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, filter),
    };
    let (exact, list) = match rest.strip_prefix('=') {
        Some(list) => (true, list),
        None => (false, rest),
    };
    let hit = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                name == p
            } else {
                name.starts_with(p)
            }
        });
    hit != exclude
}

/// The address to listen on, following the filter (None: the default rules). Among matching
/// interfaces IPv4 comes first, then the order the kernel lists them.
pub fn pick_address(filter: Option<&str>, addrs: &[InterfaceAddr]) -> Option<InterfaceAddr> {
    let default_filter = "^docker,lo,virbr";
    let wanted = filter.unwrap_or(default_filter);
    let ok = |a: &&InterfaceAddr| matches_filter(wanted, &a.name);
    let picked = addrs
        .iter()
        .filter(ok)
        .find(|a| a.ip.is_ipv4())
        .or_else(|| addrs.iter().find(ok));
    match (picked, filter) {
        (Some(a), _) => Some(a.clone()),
        // No filter and nothing but loopback: a single-host job still works.
        (None, None) => addrs.iter().find(|a| a.ip.is_loopback()).cloned(),
        (None, Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str) -> InterfaceAddr {
        InterfaceAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn filters_like_nccl() {
        assert!(matches_filter("eth", "eth0"));
        assert!(!matches_filter("eth", "ib0"));
        assert!(matches_filter("ib,eth", "eth1"));
        assert!(!matches_filter("^eth", "eth1"));
        assert!(matches_filter("^eth", "ib0"));
        assert!(!matches_filter("=eth", "eth0"));
        assert!(matches_filter("=eth0", "eth0"));
        assert!(!matches_filter("^=eth0", "eth0"));
        assert!(matches_filter("^=eth0", "eth01"));
    }

    #[test]
    fn picks_ipv4_of_a_matching_interface() {
        let addrs = [
            a("lo", "127.0.0.1"),
            a("docker0", "172.17.0.1"),
            a("eth0", "fd00::5"),
            a("eth0", "10.0.0.5"),
            a("ib0", "10.1.0.5"),
        ];
        assert_eq!(pick_address(None, &addrs).unwrap(), addrs[3]);
        assert_eq!(pick_address(Some("ib"), &addrs).unwrap(), addrs[4]);
        assert_eq!(pick_address(Some("lo"), &addrs).unwrap(), addrs[0]);
        assert_eq!(pick_address(Some("enp"), &addrs), None);
        assert_eq!(
            pick_address(None, &[a("lo", "127.0.0.1")]).unwrap().ip,
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
    }

    #[test]
    fn lists_loopback() {
        let addrs = interface_addrs().unwrap();
        assert!(addrs.iter().any(|a| a.ip.is_loopback()), "{addrs:?}");
    }
}
