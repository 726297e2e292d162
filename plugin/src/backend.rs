//! Which `Net` backend the plugin drives, chosen once per process at the first `init`.
//!
//! `WEFT_NET_BACKEND` forces one: `mesh` is `weft_net::mesh::MeshNet` (a multi-subnet mesh,
//! one device, the NICs chosen per peer by subnet, over verbs or sockets per link), `ib` is `weft_net::ib::IbNet` (verbs: InfiniBand and RoCE,
//! configured by NCCL's `NCCL_IB_*` variables), `socket` is `weft_net::socket::SocketNet`
//! (NCCL's socket variables: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`,
//! `NCCL_SOCKET_NTHREADS`, `NCCL_NSOCKS_PERTHREAD`; the `WEFT_` names win when both are set).
//! Unset, the best available is used, as NCCL does with its own: verbs when libibverbs loads
//! and an RDMA port is active, else sockets (the reason verbs was passed over is logged).

use weft_config::NetSettings;
use weft_net::NetError;
use weft_net::ib::{IbConfig, IbNet};
use weft_net::mesh::MeshNet;
use weft_net::socket::{SocketConfig, SocketNet};

use crate::adapter::{Adapter, PluginNet};

/// A backend the plugin can drive: weft-config's, which reads `WEFT_NET_BACKEND`.
pub use weft_config::NetBackend as BackendKind;

/// Opens the backend `kind`, configured by `settings`.
pub fn open(kind: BackendKind, settings: &NetSettings) -> Result<Box<dyn PluginNet>, NetError> {
    match kind {
        BackendKind::Auto => match open(BackendKind::Ib, settings) {
            Ok(net) => Ok(net),
            Err(e) => {
                log::info!("NET/weft: verbs not used ({e}); using sockets");
                open(BackendKind::Socket, settings)
            }
        },
        BackendKind::Ib => {
            let net = IbNet::new(IbConfig::from_settings(settings))?;
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
            let net = MeshNet::from_settings(settings)?;
            let describe = net.describe();
            Ok(Box::new(Adapter::new(net, describe)?))
        }
        BackendKind::Socket => {
            let config = SocketConfig::from_settings(&settings.socket)?;
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
        let kind = |v: Option<&'static str>| {
            let lookup = move |n: &str| (n == "WEFT_NET_BACKEND").then_some(v).flatten();
            weft_config::Settings::from_lookup(&|n| lookup(n).map(str::to_string))
                .map(|s| s.net.backend)
                .map_err(NetError::from)
        };
        assert_eq!(kind(None).unwrap(), BackendKind::Auto);
        assert_eq!(kind(Some(" Socket ")).unwrap(), BackendKind::Socket);
        assert_eq!(kind(Some("")).unwrap(), BackendKind::Auto);
        assert_eq!(kind(Some("IB")).unwrap(), BackendKind::Ib);
        let e = kind(Some("carrier-pigeon")).unwrap_err();
        assert_eq!(e.kind(), weft_net::NetErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(msg.contains("WEFT_NET_BACKEND=\"carrier-pigeon\""), "{msg}");
        assert!(msg.contains("auto, ib, mesh or socket"), "{msg}");
    }
}
