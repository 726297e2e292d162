//! The NET transport for FIFOs that GPU kernels drive: connections across hosts between
//! [`Staging`] areas, progressed by one proxy thread per communicator (NCCL's
//! `transport/net.cc` without GPUDirect: the kernels read and write pinned host memory of
//! their own host, the proxy moves it over the network).
//!
//! Handshake, per connection (the handle travels through bootstrap, by the caller): the
//! receiving rank calls [`StagedNet::recv`], which listens and returns the listen handle;
//! the sending rank calls [`StagedNet::send`] with it. Neither blocks: the proxy connects
//! and accepts in the background, with a deadline, so ranks may set up their connections in
//! any order. The step protocol is [`crate::proxy::staged`]'s.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::net::{NET_NAME, NetTransportError};
use crate::conn::{AbortFlag, ConnId, Direction};
use crate::net::{NET_HANDLE_MAXSIZE, Net, NetHandle};
use crate::proxy::staged::Staging;
use crate::proxy::{Link, NetProxy, StagedRecvLink, StagedSendLink};

/// Staged NET connections over backend `N`, with their proxy thread.
pub struct StagedNet<N: Net + 'static> {
    proxy: NetProxy<N>,
    dev: usize,
    connect_timeout: Duration,
}

impl<N: Net + 'static> fmt::Debug for StagedNet<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedNet")
            .field("dev", &self.dev)
            .field("proxy", &self.proxy)
            .finish()
    }
}

impl<N: Net + 'static> StagedNet<N> {
    /// Starts the proxy thread over `net`'s device `dev`. `abort` stops it (every link
    /// fails); a connect or accept fails after `connect_timeout`; on drop, sends still in
    /// flight get `linger` to finish.
    pub fn new(
        net: Arc<N>,
        dev: usize,
        abort: AbortFlag,
        connect_timeout: Duration,
        linger: Duration,
    ) -> Result<Self, NetTransportError> {
        let proxy = NetProxy::start(net, abort, linger)
            .map_err(|e| NetTransportError::ProxyStart(e.to_string()))?;
        Ok(StagedNet {
            proxy,
            dev,
            connect_timeout,
        })
    }

    /// The backend's name, as NCCL's `Using network Socket` says it.
    pub fn backend(&self) -> &str {
        self.proxy.net().name()
    }

    /// NCCL's name of the connections in its INFO lines: `NET/Socket/0`.
    pub fn describe(&self) -> String {
        self.describe_dev(self.dev)
    }

    /// NCCL's name of connections on device `dev`: `NET/Socket/<dev>`.
    pub fn describe_dev(&self, dev: usize) -> String {
        format!("{NET_NAME}/{}/{dev}", self.proxy.net().name())
    }

    /// The backend's devices, each with its PCI path where it has one (for choosing the
    /// device nearest a GPU).
    pub fn device_paths(&self) -> Vec<Option<String>> {
        let net = self.proxy.net();
        (0..net.devices())
            .map(|d| net.properties(d).ok().and_then(|p| p.pci_path))
            .collect()
    }

    /// Connection ends still open on the proxy thread.
    pub fn links(&self) -> usize {
        self.proxy.links()
    }

    /// Receiving side: listens, and lets the proxy accept the sender and receive into
    /// `staging`. The returned handle goes to the sender.
    pub fn recv(
        &self,
        conn: ConnId,
        staging: Arc<Staging>,
    ) -> Result<NetHandle, NetTransportError> {
        self.recv_on(conn, self.dev, staging)
    }

    /// [`recv`](Self::recv) on device `dev` instead of the default one.
    pub fn recv_on(
        &self,
        conn: ConnId,
        dev: usize,
        staging: Arc<Staging>,
    ) -> Result<NetHandle, NetTransportError> {
        debug_assert_eq!(conn.dir, Direction::Recv);
        let (handle, listen) =
            self.proxy
                .net()
                .listen(dev)
                .map_err(|err| NetTransportError::Net {
                    what: "listen",
                    conn,
                    err,
                })?;
        // Both of a step's buffers in one receive where the backend groups them.
        let grouped = self
            .proxy
            .net()
            .properties(dev)
            .is_ok_and(|p| p.max_recvs >= 2);
        self.proxy.add(Link::StagedRecv(StagedRecvLink::new(
            conn,
            listen,
            staging,
            self.connect_timeout,
            grouped,
        )));
        Ok(handle)
    }

    /// Sending side, with the receiver's listen handle: the proxy connects and sends what
    /// the kernel posts in `staging`.
    pub fn send(
        &self,
        conn: ConnId,
        handle: &[u8],
        staging: Arc<Staging>,
    ) -> Result<(), NetTransportError> {
        self.send_on(conn, self.dev, handle, staging)
    }

    /// [`send`](Self::send) from device `dev` instead of the default one.
    pub fn send_on(
        &self,
        conn: ConnId,
        dev: usize,
        handle: &[u8],
        staging: Arc<Staging>,
    ) -> Result<(), NetTransportError> {
        debug_assert_eq!(conn.dir, Direction::Send);
        let bytes: [u8; NET_HANDLE_MAXSIZE] =
            handle
                .try_into()
                .map_err(|_| NetTransportError::BadConnectInfo {
                    conn,
                    len: handle.len(),
                })?;
        self.proxy.add(Link::StagedSend(StagedSendLink::new(
            conn,
            dev,
            NetHandle(bytes),
            staging,
            self.connect_timeout,
        )));
        Ok(())
    }

    /// A kernel that uses these connections was enqueued: the proxy polls eagerly again.
    pub fn wake(&self) {
        self.proxy.wake();
    }

    /// Waits up to `timeout` for every link to finish (after their areas were closed).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.proxy.wait_idle(timeout)
    }
}
