//! Which `Net` backend the plugin drives, chosen once per process at the first `init`.
//!
//! `WEFT_NET_BACKEND` selects it: `socket` (the default) is `weft_net::socket::SocketNet`,
//! configured by NCCL's socket variables (`NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`,
//! `NCCL_SOCKET_NTHREADS`, `NCCL_NSOCKS_PERTHREAD`; the `WEFT_` names win when both are set).
//! A further backend (the mesh backend: multi-address handles and subnet-aware NIC choice)
//! becomes one more [`BackendKind`] and one more arm in [`open`]; the adapter and the C entry
//! points do not change.

use weft_net::socket::{SocketConfig, SocketNet};
use weft_net::{NetError, NetErrorKind};

use crate::adapter::{Adapter, PluginNet};

/// A backend the plugin can drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// TCP sockets (`SocketNet`).
    Socket,
}

impl BackendKind {
    /// Every kind this build has, with its `WEFT_NET_BACKEND` spelling.
    pub const ALL: [(BackendKind, &'static str); 1] = [(BackendKind::Socket, "socket")];

    /// Reads `WEFT_NET_BACKEND` through `lookup`; unset or empty means sockets.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let Some(value) = lookup("WEFT_NET_BACKEND").filter(|v| !v.trim().is_empty()) else {
            return Ok(BackendKind::Socket);
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
                .hint("unset WEFT_NET_BACKEND to use sockets")
            })
    }
}

/// Opens the backend `kind`, configured from the environment.
pub fn open(kind: BackendKind) -> Result<Box<dyn PluginNet>, NetError> {
    match kind {
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
        assert_eq!(
            BackendKind::from_lookup(&unset).unwrap(),
            BackendKind::Socket
        );
        let set = |v: &'static str| move |n: &str| (n == "WEFT_NET_BACKEND").then(|| v.to_string());
        assert_eq!(
            BackendKind::from_lookup(&set(" Socket ")).unwrap(),
            BackendKind::Socket
        );
        assert_eq!(
            BackendKind::from_lookup(&set("")).unwrap(),
            BackendKind::Socket
        );
        let e = BackendKind::from_lookup(&set("carrier-pigeon")).unwrap_err();
        assert_eq!(e.kind(), NetErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(msg.contains("WEFT_NET_BACKEND=carrier-pigeon"), "{msg}");
        assert!(msg.contains("socket"), "{msg}");
    }
}
