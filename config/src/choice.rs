//! The settings that pick one of a few named choices, each with the one parser of its
//! variable (names are matched in any case, blanks around them ignored).

use std::fmt;

/// An address family (`NCCL_SOCKET_FAMILY`, `NCCL_IB_ADDR_FAMILY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddressFamily {
    /// IPv4.
    #[default]
    V4,
    /// IPv6.
    V6,
}

impl AddressFamily {
    /// `AF_INET` / `AF_INET6` (also `4`, `6`, `ipv4`, `ipv6`, `inet`, `inet6`).
    pub fn parse(s: &str) -> Option<AddressFamily> {
        match s.trim().to_ascii_lowercase().as_str() {
            "af_inet" | "4" | "ipv4" | "inet" => Some(AddressFamily::V4),
            "af_inet6" | "6" | "ipv6" | "inet6" => Some(AddressFamily::V6),
            _ => None,
        }
    }

    /// NCCL's spelling.
    pub fn name(self) -> &'static str {
        match self {
            AddressFamily::V4 => "AF_INET",
            AddressFamily::V6 => "AF_INET6",
        }
    }
}

/// How the mesh backend's connections travel (`WEFT_MESH_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MeshTransport {
    /// Verbs where both ends of a pair have an RDMA port, else sockets.
    #[default]
    Auto,
    /// Verbs only.
    Ib,
    /// Sockets only (no verbs device is opened).
    Socket,
}

impl MeshTransport {
    /// `auto`, `ib` (or `verbs`), `socket`.
    pub fn parse(s: &str) -> Option<MeshTransport> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(MeshTransport::Auto),
            "ib" | "verbs" => Some(MeshTransport::Ib),
            "socket" | "sockets" => Some(MeshTransport::Socket),
            _ => None,
        }
    }
}

/// Which transport a host communicator's connections use (`WEFT_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportChoice {
    /// The fastest that can connect each pair (SHM within a host, NET across hosts).
    #[default]
    Auto,
    /// SHM for every connection (fails across hosts).
    Shm,
    /// NET (sockets) for every connection, also within a host.
    Net,
    /// NET over the verbs backend (InfiniBand / RoCE) for every connection.
    Ib,
    /// NET over the mesh backend (verbs, the NIC chosen by subnet) for every connection.
    Mesh,
}

impl TransportChoice {
    pub fn name(self) -> &'static str {
        match self {
            TransportChoice::Auto => "auto",
            TransportChoice::Shm => "shm",
            TransportChoice::Net => "net",
            TransportChoice::Ib => "ib",
            TransportChoice::Mesh => "mesh",
        }
    }

    /// `auto`, `shm`, `net` (or `socket`), `ib` (or `verbs`, `rdma`), `mesh`; blank is `auto`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(TransportChoice::Auto),
            "shm" => Some(TransportChoice::Shm),
            "net" | "socket" => Some(TransportChoice::Net),
            "ib" | "verbs" | "rdma" => Some(TransportChoice::Ib),
            "mesh" => Some(TransportChoice::Mesh),
            _ => None,
        }
    }

    /// A code that never changes meaning: ranks exchange it to check that they chose alike.
    pub fn number(self) -> u8 {
        match self {
            TransportChoice::Auto => 0,
            TransportChoice::Shm => 1,
            TransportChoice::Net => 2,
            TransportChoice::Ib => 3,
            TransportChoice::Mesh => 4,
        }
    }
}

/// Which `Net` backend the NCCL net plugin drives (`WEFT_NET_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NetBackend {
    /// Verbs when usable, else sockets.
    #[default]
    Auto,
    /// Verbs (InfiniBand, RoCE).
    Ib,
    /// A multi-subnet mesh over verbs or sockets.
    Mesh,
    /// TCP sockets.
    Socket,
}

impl NetBackend {
    /// Every backend, with its `WEFT_NET_BACKEND` spelling.
    pub const ALL: [(NetBackend, &'static str); 4] = [
        (NetBackend::Auto, "auto"),
        (NetBackend::Ib, "ib"),
        (NetBackend::Mesh, "mesh"),
        (NetBackend::Socket, "socket"),
    ];

    /// One of [`Self::ALL`]'s names.
    pub fn parse(s: &str) -> Option<NetBackend> {
        let wanted = s.trim().to_ascii_lowercase();
        Self::ALL
            .iter()
            .find(|(_, name)| *name == wanted)
            .map(|(kind, _)| *kind)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("auto", |(_, name)| name)
    }
}

/// How much weft logs (`WEFT_DEBUG` / `NCCL_DEBUG`): NCCL's levels, and `DEBUG` between
/// `INFO` and `TRACE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DebugLevel {
    /// NCCL's `VERSION`: the version line only (weft: warnings).
    Version,
    Warn,
    Info,
    /// weft's own, between `INFO` and `TRACE`.
    Debug,
    /// NCCL's `ABORT`: abort on a warning (weft: errors only).
    Abort,
    Trace,
}

impl DebugLevel {
    /// NCCL's names, any case.
    pub fn parse(s: &str) -> Option<DebugLevel> {
        match s.trim().to_ascii_uppercase().as_str() {
            "VERSION" => Some(DebugLevel::Version),
            "WARN" => Some(DebugLevel::Warn),
            "INFO" => Some(DebugLevel::Info),
            "DEBUG" => Some(DebugLevel::Debug),
            "ABORT" => Some(DebugLevel::Abort),
            "TRACE" => Some(DebugLevel::Trace),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DebugLevel::Version => "VERSION",
            DebugLevel::Warn => "WARN",
            DebugLevel::Info => "INFO",
            DebugLevel::Debug => "DEBUG",
            DebugLevel::Abort => "ABORT",
            DebugLevel::Trace => "TRACE",
        }
    }
}

impl fmt::Display for DebugLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_any_case_and_round_trip() {
        assert_eq!(AddressFamily::parse(" af_inet6 "), Some(AddressFamily::V6));
        assert_eq!(AddressFamily::parse("4"), Some(AddressFamily::V4));
        assert_eq!(AddressFamily::parse("AF_UNIX"), None);
        for f in [AddressFamily::V4, AddressFamily::V6] {
            assert_eq!(AddressFamily::parse(f.name()), Some(f));
        }
        assert_eq!(MeshTransport::parse("Verbs"), Some(MeshTransport::Ib));
        assert_eq!(MeshTransport::parse("rdma"), None);
        for t in [
            TransportChoice::Auto,
            TransportChoice::Shm,
            TransportChoice::Net,
            TransportChoice::Ib,
            TransportChoice::Mesh,
        ] {
            assert_eq!(TransportChoice::parse(t.name()), Some(t));
        }
        assert_eq!(TransportChoice::parse("RDMA"), Some(TransportChoice::Ib));
        assert_eq!(TransportChoice::parse("carrier-pigeon"), None);
        for (b, name) in NetBackend::ALL {
            assert_eq!(NetBackend::parse(&name.to_ascii_uppercase()), Some(b));
            assert_eq!(b.name(), name);
        }
        assert_eq!(DebugLevel::parse("info"), Some(DebugLevel::Info));
        assert_eq!(DebugLevel::parse("loud"), None);
    }
}
