//! Which `Net` backend the plugin drives, chosen once per process at the first `init`.
//!
//! `WEFT_NET_BACKEND` forces one: `mesh` is `weft_net::mesh::MeshNet` (a multi-subnet mesh,
//! one device, the NICs chosen per peer by subnet, over verbs or sockets per link), `ib` is `weft_net::ib::IbNet` (verbs: InfiniBand and RoCE,
//! configured by NCCL's `NCCL_IB_*` variables), `socket` is `weft_net::socket::SocketNet`
//! (NCCL's socket variables: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`,
//! `NCCL_SOCKET_NTHREADS`, `NCCL_NSOCKS_PERTHREAD`; the `WEFT_` names win when both are set).
//! Unset, the best available is used, as NCCL does with its own: verbs when libibverbs loads
//! and an RDMA port is active, else sockets (the reason verbs was passed over is logged).

use weft_net::ib::IbNet;
use weft_net::mesh::MeshNet;
use weft_net::socket::{SocketConfig, SocketNet};
use weft_net::{NetError, NetErrorKind};

use crate::adapter::{Adapter, PluginNet};

/// A backend the plugin can drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Verbs when usable, else sockets.
    Auto,
    /// Verbs (`IbNet`).
    Ib,
    /// A multi-subnet mesh over verbs or sockets (`MeshNet`).
    Mesh,
    /// TCP sockets (`SocketNet`).
    Socket,
}

impl BackendKind {
    /// Every kind this build has, with its `WEFT_NET_BACKEND` spelling.
    pub const ALL: [(BackendKind, &'static str); 4] = [
        (BackendKind::Auto, "auto"),
        (BackendKind::Ib, "ib"),
        (BackendKind::Mesh, "mesh"),
        (BackendKind::Socket, "socket"),
    ];

    /// Reads `WEFT_NET_BACKEND` through `lookup`; unset or empty means the best available.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let Some(value) = lookup("WEFT_NET_BACKEND").filter(|v| !v.trim().is_empty()) else {
            return Ok(BackendKind::Auto);
        };
        let wanted = value.trim().to_ascii_lowercase();
        BackendKind::ALL
            .iter()
            .find(|(_, name)| *name == wanted)
            .map(|(kind, _)| *kind)
            .ok_or_else(|| {
                let known: Vec<&str> = BackendKind::ALL.iter().map(|(_, n)| *n).collect();
                NetError::new(
                    NetErrorKind::InvalidArgument,
                    format!(
                        "WEFT_NET_BACKEND={value}: this build of weft's plugin has the backends: {}",
                        known.join(", ")
                    ),
                )
                .hint("unset WEFT_NET_BACKEND to use the best available")
            })
    }
}

/// Opens the backend `kind`, configured from the environment.
pub fn open(kind: BackendKind) -> Result<Box<dyn PluginNet>, NetError> {
    match kind {
        BackendKind::Auto => match open(BackendKind::Ib) {
            Ok(net) => Ok(net),
            Err(e) => {
                log::info!("NET/weft: verbs not used ({e}); using sockets");
                open(BackendKind::Socket)
            }
        },
        BackendKind::Ib => {
            let net = IbNet::from_env()?;
            let c = net.config();
            let describe = format!(
                "{} QP(s) per connection (NCCL_IB_QPS_PER_CONNECTION), GID {:?}, timeout {} \
                 retry {}, inline up to {} bytes, connect timeout {} s",
                c.qps_per_connection,
                c.gid,
                c.timeout,
                c.retry_cnt,
                c.max_inline,
                c.connect_timeout.as_secs()
            );
            Ok(Box::new(Adapter::new(net, describe)?))
        }
        BackendKind::Mesh => {
            let net = MeshNet::from_env()?;
            let describe = net.describe();
            Ok(Box::new(Adapter::new(net, describe)?))
        }
        BackendKind::Socket => {
            let config = SocketConfig::from_env()?;
            let describe = format!(
                "{} threads x {} sockets per connection (NCCL_SOCKET_NTHREADS x \
                 NCCL_NSOCKS_PERTHREAD), helper spin {} us (WEFT_SOCKET_SPIN_US), sender-eager \
                 protocol v2, connect timeout {} s",
                config.threads,
                config.sockets_per_thread,
                config.spin.as_micros(),
                config.connect_timeout.as_secs()
            );
            let net = SocketNet::new(config)?;
            Ok(Box::new(Adapter::new(net, describe)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_from_environment() {
        let unset = |_: &str| None;
        assert_eq!(BackendKind::from_lookup(&unset).unwrap(), BackendKind::Auto);
        let set = |v: &'static str| move |n: &str| (n == "WEFT_NET_BACKEND").then(|| v.to_string());
        assert_eq!(
            BackendKind::from_lookup(&set(" Socket ")).unwrap(),
            BackendKind::Socket
        );
        assert_eq!(
            BackendKind::from_lookup(&set("")).unwrap(),
            BackendKind::Auto
        );
        assert_eq!(
            BackendKind::from_lookup(&set("IB")).unwrap(),
            BackendKind::Ib
        );
        let e = BackendKind::from_lookup(&set("carrier-pigeon")).unwrap_err();
        assert_eq!(e.kind(), NetErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(msg.contains("WEFT_NET_BACKEND=carrier-pigeon"), "{msg}");
        assert!(msg.contains("auto, ib, mesh, socket"), "{msg}");
    }
}
