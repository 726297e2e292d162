//! Which network interfaces the socket backend uses, chosen the way NCCL does.
//!
//! `NCCL_SOCKET_IFNAME` (or `WEFT_SOCKET_IFNAME`) is a comma-separated list of name prefixes
//! (`eth,ens`); a leading `^` turns it into a list to exclude (`^docker,lo`), and a leading `=`
//! makes the names exact (`=eth0`; `^=` combines both). Without it, NCCL's order applies:
//! IPoIB (`ib*`), then anything but `docker*`, `lo*` and `virbr*`, then `docker*`, then `lo`.

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::super::{NetError, NetErrorKind};

/// The most interfaces the backend exposes as devices (NCCL's MAX_IFS).
pub const MAX_INTERFACES: usize = 16;

/// An address family restriction (`NCCL_SOCKET_FAMILY=AF_INET|AF_INET6`): weft-config's,
/// which parses it.
pub use weft_config::AddressFamily as Family;

/// A parsed `NCCL_SOCKET_IFNAME` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfnameFilter {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl IfnameFilter {
    /// Parses `[^][=]name[,name...]`. Empty entries are ignored.
    pub fn parse(spec: &str) -> IfnameFilter {
        let mut rest = spec.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let names = rest
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        IfnameFilter {
            exclude,
            exact,
            names,
        }
    }

    /// Whether interface `name` passes the filter.
    pub fn matches(&self, name: &str) -> bool {
        let listed = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        listed != self.exclude
    }
}

/// One usable interface: a name and the address the backend binds to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (`eth0`).
    pub name: String,
    /// The address to listen on (port 0; IPv6 carries the interface's scope id).
    pub addr: SocketAddr,
}

/// Lists (name, address) pairs of interfaces that are up, one address per interface
/// (IPv4 preferred unless `family` asks otherwise), in the system's order. IPv6 link-local
/// addresses are skipped, as NCCL does.
pub fn system_interfaces(family: Option<Family>) -> Result<Vec<Interface>, NetError> {
    let mut all: Vec<Interface> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `ifap`; we free it with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Err(NetError::io(
            "list network interfaces (getifaddrs)",
            &std::io::Error::last_os_error(),
        ));
    }
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        if ifa.ifa_flags & (libc::IFF_UP as libc::c_uint) == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points at a sockaddr of at least sa_family.
        let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = if fam == libc::AF_INET {
            // SAFETY: sa_family says this is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            SocketAddr::V4(SocketAddrV4::new(ip, 0))
        } else if fam == libc::AF_INET6 {
            // SAFETY: sa_family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            if ip.segments()[0] & 0xffc0 == 0xfe80 {
                continue;
            }
            SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, sin6.sin6_scope_id))
        } else {
            continue;
        };
        all.push(Interface { name, addr });
    }
    // SAFETY: `ifap` came from getifaddrs and no reference into it outlives this call.
    unsafe { libc::freeifaddrs(ifap) };

    let mut picked: Vec<Interface> = Vec::new();
    for cand in all {
        let fam_ok = match family {
            Some(Family::V4) => cand.addr.is_ipv4(),
            Some(Family::V6) => cand.addr.is_ipv6(),
            None => true,
        };
        if !fam_ok {
            continue;
        }
        match picked.iter_mut().find(|p| p.name == cand.name) {
            // Prefer IPv4 when both exist and no family was asked for.
            Some(p) if family.is_none() && p.addr.is_ipv6() && cand.addr.is_ipv4() => *p = cand,
            Some(_) => {}
            None => picked.push(cand),
        }
    }
    Ok(picked)
}

/// Chooses interfaces from `available`: by `spec` when given, else by NCCL's default order.
pub fn choose_interfaces(available: &[Interface], spec: Option<&str>) -> Vec<Interface> {
    let pick = |filter: &IfnameFilter| -> Vec<Interface> {
        available
            .iter()
            .filter(|i| filter.matches(&i.name))
            .take(MAX_INTERFACES)
            .cloned()
            .collect()
    };
    if let Some(spec) = spec {
        return pick(&IfnameFilter::parse(spec));
    }
    for default in ["ib", "^docker,lo,virbr", "docker,virbr", "lo"] {
        let found = pick(&IfnameFilter::parse(default));
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// The error when no interface matched, listing what exists.
pub fn no_interface_error(available: &[Interface], spec: Option<&str>) -> NetError {
    let names: Vec<String> = available
        .iter()
        .map(|i| format!("{} ({})", i.name, i.addr.ip()))
        .collect();
    NetError::new(
        NetErrorKind::InvalidArgument,
        format!(
            "no network interface matches {}",
            spec.map_or("the default rule".to_string(), |s| format!(
                "NCCL_SOCKET_IFNAME={s}"
            ))
        ),
    )
    .cause(format!("interfaces that are up: [{}]", names.join(", ")))
    .hint("set NCCL_SOCKET_IFNAME (or WEFT_SOCKET_IFNAME) to one of them, e.g. =eth0 or lo")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn iface(name: &str, ip: &str) -> Interface {
        Interface {
            name: name.into(),
            addr: SocketAddr::new(ip.parse().unwrap(), 0),
        }
    }

    fn names(v: &[Interface]) -> Vec<&str> {
        v.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn filter_prefix_exclude_exact() {
        let f = IfnameFilter::parse("eth,ens");
        assert!(f.matches("eth0") && f.matches("ens3") && !f.matches("lo"));
        let f = IfnameFilter::parse("^docker,lo");
        assert!(f.matches("eth0") && !f.matches("docker0") && !f.matches("lo"));
        let f = IfnameFilter::parse("=eth0");
        assert!(f.matches("eth0") && !f.matches("eth01"));
        let f = IfnameFilter::parse("^=eth0");
        assert!(!f.matches("eth0") && f.matches("eth01"));
    }

    #[test]
    fn default_skips_lo_docker_virbr_unless_alone() {
        let all = [
            iface("lo", "127.0.0.1"),
            iface("docker0", "172.17.0.1"),
            iface("eth0", "10.0.0.2"),
            iface("virbr0", "192.168.122.1"),
            iface("eth1", "10.1.0.2"),
        ];
        assert_eq!(names(&choose_interfaces(&all, None)), ["eth0", "eth1"]);
        assert_eq!(names(&choose_interfaces(&all[..2], None)), ["docker0"]);
        assert_eq!(names(&choose_interfaces(&all[..1], None)), ["lo"]);
        assert_eq!(names(&choose_interfaces(&all, Some("lo"))), ["lo"]);
        assert_eq!(
            names(&choose_interfaces(&all, Some("^eth"))),
            ["lo", "docker0", "virbr0"]
        );
        let with_ib = [iface("eth0", "10.0.0.2"), iface("ib0", "10.9.0.2")];
        assert_eq!(names(&choose_interfaces(&with_ib, None)), ["ib0"]);
        assert!(choose_interfaces(&all, Some("=eth")).is_empty());
        let msg = no_interface_error(&all, Some("=eth")).to_string();
        assert!(msg.contains("NCCL_SOCKET_IFNAME==eth") && msg.contains("eth1 (10.1.0.2)"));
    }

    #[test]
    fn system_has_loopback() {
        let all = system_interfaces(Some(Family::V4)).unwrap();
        let lo = choose_interfaces(&all, Some("lo"));
        assert_eq!(lo.len(), 1, "{all:?}");
        assert_eq!(lo[0].addr.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
}
