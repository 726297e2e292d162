//! The socket NET backend on loopback, as the tests that stream over it build it. Included
//! by path (`#[path = "common/loopback.rs"]`).

use std::sync::Arc;
use std::time::Duration;

use weft_runtime::net::socket::{SocketConfig, SocketNet};

/// Sockets on `lo`, two helper threads of one socket each, a 20 s connect deadline.
pub fn socket_net() -> Arc<SocketNet> {
    Arc::new(
        SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: 2,
            sockets_per_thread: 1,
            connect_timeout: Duration::from_secs(20),
            ..SocketConfig::default()
        })
        .expect("loopback socket backend"),
    )
}
