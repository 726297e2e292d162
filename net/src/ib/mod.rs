//! `IbNet`: the `Net` backend over libibverbs (InfiniBand and RoCE), NCCL's `net_ib.cc`
//! counterpart. libibverbs is loaded at run time (weft-sys); a machine without it or without
//! an active port gets an error that says so, never a crash.
//!
//! - [`select`]: `NCCL_IB_HCA`, GID choice, port speed (pure).
//! - [`device`]: the usable ports, each with its PD and registration cache.
//! - [`verbs`]: owning types over verbs objects; [`qp`]: RC QPs with typed states.
//! - [`mr_cache`]: shared, reference-counted registrations.
//! - [`fifo`]: the protocol's plain data (FIFO entries, immediates, QP split).
//! - [`gdr`]: GPUDirect detection and switches (pure); [`flush`]: the loopback QP whose
//!   RDMA READ makes a GPU receive visible (`iflush`).
//! - [`wire`]: the listen handle and the QP exchange; [`handshake`]: connect and accept.
//! - [`comm`]: what both ends share (link, CQ polling, completion errors); [`send`] and
//!   [`recv`]: the two ends of the data path.
//!
//! Configured by [`IbConfig`], built from weft-config's verbs and GPUDirect settings
//! (`NCCL_IB_HCA`, `NCCL_IB_GID_INDEX`, `NCCL_IB_ADDR_FAMILY`, `NCCL_IB_QPS_PER_CONNECTION`,
//! `NCCL_IB_TIMEOUT`, `NCCL_IB_RETRY_CNT`, `NCCL_IB_TC`, `NCCL_IB_SL`, `WEFT_IB_INLINE`,
//! `WEFT_IB_CONNECT_TIMEOUT`, `NCCL_NET_GDR_LEVEL`, `NCCL_DMABUF_ENABLE`,
//! `NCCL_GDR_FLUSH_DISABLE`, and for tests `WEFT_IB_FORCE_FLUSH`; each `NCCL_IB_*` also as
//! `WEFT_IB_*`, read first). docs/environment.md has their defaults and values.

pub mod comm;
pub mod device;
pub mod fifo;
pub mod flush;
pub mod gdr;
pub mod handshake;
pub mod mr_cache;
pub mod qp;
pub mod recv;
pub mod select;
pub mod send;
pub mod verbs;
pub mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use comm::{IbRecvComm, IbSendComm};
pub use handshake::{IbConnecting, IbListenComm};

use self::device::Port;
use self::mr_cache::Memory;
use self::select::{GidWanted, HcaFilter};
use crate::{
    CommRef, Completion, Net, NetError, NetErrorKind, NetHandle, NetProperties, PtrKind, RecvBuffer,
};
use weft_config::{AddressFamily, NetSettings};

/// The verbs backend's settings (see the module table).
#[derive(Debug, Clone, PartialEq)]
pub struct IbConfig {
    /// `NCCL_IB_HCA`.
    pub hca: HcaFilter,
    /// `NCCL_IB_GID_INDEX`, when set.
    pub gid_index: Option<u32>,
    /// How the GID is chosen (from the two above).
    pub gid: GidWanted,
    /// `NCCL_IB_QPS_PER_CONNECTION`.
    pub qps_per_connection: usize,
    /// `NCCL_IB_TIMEOUT`.
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT`.
    pub retry_cnt: u8,
    /// `NCCL_IB_TC`.
    pub traffic_class: u8,
    /// `NCCL_IB_SL`.
    pub service_level: u8,
    /// `WEFT_IB_INLINE`.
    pub max_inline: u32,
    /// `WEFT_IB_CONNECT_TIMEOUT`.
    pub connect_timeout: Duration,
    /// The GPUDirect switches (`ib::gdr`).
    pub gdr: gdr::GdrSettings,
    /// Interfaces (`NCCL_SOCKET_IFNAME` syntax) for the handshake of a port without an IP
    /// address.
    pub handshake_ifname: Option<String>,
}

impl IbConfig {
    /// The process environment's settings (weft-config); a malformed value is an error
    /// naming it.
    pub fn from_env() -> Result<IbConfig, NetError> {
        Ok(IbConfig::from_settings(&crate::settings_from_env()?))
    }

    /// The verbs part of `settings`, with the socket interfaces for handshakes.
    pub fn from_settings(settings: &NetSettings) -> IbConfig {
        let ib = &settings.ib;
        let gid_index = ib.gid_index.map(u32::from);
        let gid = match (gid_index, ib.addr_family) {
            (Some(i), _) => GidWanted::Index(i),
            (None, AddressFamily::V4) => GidWanted::V4,
            (None, AddressFamily::V6) => GidWanted::V6,
        };
        IbConfig {
            hca: ib.hca.as_deref().map(HcaFilter::parse).unwrap_or_default(),
            gid_index,
            gid,
            qps_per_connection: usize::from(ib.qps_per_connection),
            timeout: ib.timeout,
            retry_cnt: ib.retry_cnt,
            traffic_class: ib.traffic_class,
            service_level: ib.service_level,
            max_inline: ib.max_inline,
            connect_timeout: ib.connect_timeout,
            gdr: gdr::GdrSettings::from_settings(settings),
            handshake_ifname: settings.socket.ifname.clone(),
        }
    }
}

/// The verbs `Net` backend: one device per usable port.
pub struct IbNet {
    ports: Vec<Arc<Port>>,
    config: IbConfig,
}

impl std::fmt::Debug for IbNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports: Vec<String> = self.ports.iter().map(|p| p.describe()).collect();
        f.debug_struct("IbNet").field("ports", &ports).finish()
    }
}

/// A registration: a reference to a cached region.
pub struct IbMemHandle {
    pub(crate) mr: Arc<verbs::Mr>,
    port: Arc<Port>,
    /// The memory it covers (decides whether `iflush` reads it back).
    kind: PtrKind,
}

impl std::fmt::Debug for IbMemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IbMemHandle(lkey {:#x}, rkey {:#x})",
            self.mr.lkey, self.mr.rkey
        )
    }
}

/// An in-flight verbs request.
pub struct IbRequest(RequestKind);

enum RequestKind {
    Send(Arc<Mutex<comm::SendState>>, u32, usize),
    Recv(Arc<Mutex<comm::RecvState>>, u32),
    Flush(Arc<Mutex<comm::RecvState>>, u32),
    Done,
}

impl IbRequest {
    /// Closes the comm this request belongs to: its QPs are destroyed, so no DMA reaches its
    /// buffers afterwards (the mesh backend's answer to a failure on another rail of the same
    /// connection).
    pub(crate) fn close_comm(&self) {
        match &self.0 {
            RequestKind::Send(state, ..) => lock(state).close(),
            RequestKind::Recv(state, _) | RequestKind::Flush(state, _) => lock(state).close(),
            RequestKind::Done => {}
        }
    }
}

impl std::fmt::Debug for IbRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            RequestKind::Send(_, seq, i) => write!(f, "IbRequest(send {seq}.{i})"),
            RequestKind::Recv(_, seq) => write!(f, "IbRequest(recv {seq})"),
            RequestKind::Flush(_, ticket) => write!(f, "IbRequest(flush {ticket})"),
            RequestKind::Done => write!(f, "IbRequest(done)"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl IbNet {
    /// Opens every usable port with the environment's settings.
    pub fn from_env() -> Result<IbNet, NetError> {
        IbNet::new(IbConfig::from_env()?)
    }

    /// Opens every usable port.
    pub fn new(config: IbConfig) -> Result<IbNet, NetError> {
        IbNet::with_gid(config, None)
    }

    /// Opens every usable port, choosing each port's GID by `wanted` when given.
    pub fn with_gid(config: IbConfig, wanted: Option<GidWanted>) -> Result<IbNet, NetError> {
        let verbs = weft_sys::Verbs::shared().map_err(|e| {
            NetError::new(
                NetErrorKind::Unsupported,
                "the verbs backend needs libibverbs",
            )
            .cause(e)
        })?;
        let (ports, skipped) = device::open_ports(verbs, &config, wanted)?;
        if ports.is_empty() {
            let why = if skipped.is_empty() {
                "no RDMA device on this machine".to_string()
            } else {
                skipped.join("; ")
            };
            return Err(NetError::new(NetErrorKind::Unsupported, "no usable RDMA port")
                .cause(why)
                .hint("check ibv_devinfo (a port must be PORT_ACTIVE), NCCL_IB_HCA and NCCL_IB_GID_INDEX"));
        }
        for p in &ports {
            log::info!("NET/IB: using {}", p.describe());
        }
        Ok(IbNet { ports, config })
    }

    /// The settings in use.
    pub fn config(&self) -> &IbConfig {
        &self.config
    }

    /// `rxe0 port 1 (GID index 1, 192.168.101.1/24 on eth0)` for device `dev`.
    pub fn describe(&self, dev: usize) -> Option<String> {
        self.ports.get(dev).map(|p| p.describe())
    }

    /// The IP address of device `dev`'s GID (RoCE), if it has one.
    pub fn address(&self, dev: usize) -> Option<std::net::IpAddr> {
        self.ports
            .get(dev)
            .and_then(|p| select::gid_address(&p.gid))
    }

    /// The last `len` (at most 8) bytes that the latest completed flush of `comm` read back,
    /// or `None` without a flush QP. For tests: they must equal the end of the flushed
    /// receive, which proves the RDMA READ reached the receive buffer.
    pub fn last_flush_read(&self, comm: &IbRecvComm, len: usize) -> Option<Vec<u8>> {
        lock(&comm.0).last_flush_read(len)
    }

    /// Every usable port, in device order.
    pub(crate) fn ports(&self) -> &[Arc<Port>] {
        &self.ports
    }

    fn port(&self, dev: usize) -> Result<&Arc<Port>, NetError> {
        self.ports.get(dev).ok_or_else(|| {
            NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "verbs device {dev} does not exist ({} devices)",
                    self.ports.len()
                ),
            )
        })
    }
}

impl Net for IbNet {
    type ListenComm = IbListenComm;
    type SendComm = IbSendComm;
    type RecvComm = IbRecvComm;
    type Connecting = IbConnecting;
    type MemHandle = IbMemHandle;
    type Request = IbRequest;

    fn name(&self) -> &str {
        "IB"
    }

    fn devices(&self) -> usize {
        self.ports.len()
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        let p = self.port(dev)?;
        Ok(NetProperties {
            name: p.name().to_string(),
            pci_path: p.pci_path.clone(),
            guid: p.guid,
            ptr_support: p.gdr.ptr_support(),
            reg_is_global: true,
            speed_mbps: p.speed_mbps,
            port: u32::from(p.port),
            latency_us: 0.0,
            max_comms: 65_536,
            max_recvs: fifo::MAX_RECVS as u32,
        })
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, IbListenComm), NetError> {
        handshake::listen(self.port(dev)?, &self.config)
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<IbConnecting>,
    ) -> Result<Option<IbSendComm>, NetError> {
        handshake::poll_connect(self.port(dev)?, &self.config, handle, state)
    }

    fn accept(&self, listen: &mut IbListenComm) -> Result<Option<IbRecvComm>, NetError> {
        listen.poll_accept()
    }

    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, IbSendComm, IbRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<IbMemHandle, NetError> {
        let port = port_of(comm);
        let memory = match kind {
            PtrKind::Host => Memory::Host,
            PtrKind::Cuda if port.gdr.peermem => Memory::Cuda,
            PtrKind::Cuda => {
                return Err(NetError::new(
                    NetErrorKind::Unsupported,
                    format!(
                        "registering CUDA memory on {} needs GPUDirect RDMA through peer memory, \
                         which is off here",
                        port.describe()
                    ),
                )
                .cause(gdr_off_reason(&port, &self.config))
                .hint(
                    "load the nvidia-peermem module (modprobe nvidia-peermem), or register \
                     through dma-buf (regMrDmaBuf), or let NCCL stage GPU data through host \
                     memory (it does when ptrSupport lacks NCCL_PTR_CUDA)",
                ));
            }
        };
        let mr = port.register(memory, data as usize, size)?;
        Ok(IbMemHandle { mr, port, kind })
    }

    unsafe fn reg_mr_dmabuf(
        &self,
        comm: CommRef<'_, IbSendComm, IbRecvComm>,
        data: *mut u8,
        size: usize,
        offset: u64,
        fd: i32,
    ) -> Result<IbMemHandle, NetError> {
        let port = port_of(comm);
        if !port.gdr.dmabuf {
            return Err(NetError::new(
                NetErrorKind::Unsupported,
                format!(
                    "dma-buf registration on {} is not available",
                    port.describe()
                ),
            )
            .cause(gdr_off_reason(&port, &self.config))
            .hint(
                "dma-buf needs rdma-core 34+ (ibv_reg_dmabuf_mr), a 5.12+ kernel and a NIC \
                 driver with dma-buf support; NCCL_DMABUF_ENABLE=0 or NCCL_NET_GDR_LEVEL=LOC \
                 turn it off",
            ));
        }
        let base = (data as usize).wrapping_sub(offset as usize);
        let mr = port.register(Memory::DmaBuf { fd, base }, data as usize, size)?;
        Ok(IbMemHandle {
            mr,
            port,
            kind: PtrKind::Cuda,
        })
    }

    fn dereg_mr(&self, mr: IbMemHandle) -> Result<(), NetError> {
        mr.port.cache.put(&mr.mr);
        Ok(())
    }

    unsafe fn isend(
        &self,
        comm: &mut IbSendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &IbMemHandle,
    ) -> Result<Option<IbRequest>, NetError> {
        let posted = lock(&comm.0).isend(data, size, tag, mr.mr.lkey)?;
        Ok(posted.map(|(seq, i)| IbRequest(RequestKind::Send(comm.0.clone(), seq, i))))
    }

    unsafe fn irecv(
        &self,
        comm: &mut IbRecvComm,
        bufs: &[RecvBuffer<'_, IbMemHandle>],
    ) -> Result<Option<IbRequest>, NetError> {
        let entries: Vec<_> = bufs.iter().map(comm::entry_of).collect();
        let posted = lock(&comm.0).irecv(&entries)?;
        Ok(posted.map(|seq| IbRequest(RequestKind::Recv(comm.0.clone(), seq))))
    }

    unsafe fn iflush(
        &self,
        comm: &mut IbRecvComm,
        bufs: &[RecvBuffer<'_, IbMemHandle>],
    ) -> Result<Option<IbRequest>, NetError> {
        let reads: Vec<_> = bufs
            .iter()
            .map(|b| {
                let flushes = b.mr.port.gdr.flushes(b.mr.kind);
                (b.data as u64, b.size, b.mr.mr.rkey, flushes)
            })
            .collect();
        let posted = lock(&comm.0).iflush(&reads)?;
        Ok(posted.map(|ticket| IbRequest(RequestKind::Flush(comm.0.clone(), ticket))))
    }

    fn test(&self, request: &mut IbRequest) -> Result<Option<Completion>, NetError> {
        let done = match &request.0 {
            RequestKind::Send(state, seq, i) => lock(state).test(*seq, *i),
            RequestKind::Recv(state, seq) => lock(state).test(*seq),
            RequestKind::Flush(state, ticket) => lock(state).test_flush(*ticket),
            RequestKind::Done => {
                return Err(NetError::new(
                    NetErrorKind::InvalidArgument,
                    "test of a verbs request that already completed",
                ));
            }
        };
        if !matches!(done, Ok(None)) {
            request.0 = RequestKind::Done;
        }
        done
    }

    fn close_send(&self, comm: IbSendComm) -> Result<(), NetError> {
        lock(&comm.0).close();
        Ok(())
    }

    fn close_recv(&self, comm: IbRecvComm) -> Result<(), NetError> {
        lock(&comm.0).close();
        Ok(())
    }

    fn close_listen(&self, _comm: IbListenComm) -> Result<(), NetError> {
        Ok(())
    }
}

/// The port a registration for `comm` goes to.
fn port_of(comm: CommRef<'_, IbSendComm, IbRecvComm>) -> Arc<Port> {
    match comm {
        CommRef::Send(c) => comm::port_of_send(c),
        CommRef::Recv(c) => comm::port_of_recv(c),
    }
}

/// Why GPUDirect is off on `port`, for messages.
fn gdr_off_reason(port: &Port, config: &IbConfig) -> String {
    if config.gdr.gdr_off {
        return "NCCL_NET_GDR_LEVEL turns GPUDirect off".into();
    }
    let mut why = Vec::new();
    if !port.gdr.peermem {
        why.push(format!(
            "no peer-memory module (none of {} exists)",
            gdr::PEERMEM_FILES.join(", ")
        ));
    }
    if !port.gdr.dmabuf {
        why.push(if config.gdr.dmabuf_off {
            "dma-buf off (NCCL_DMABUF_ENABLE=0)".to_string()
        } else {
            "no dma-buf support (libibverbs without ibv_reg_dmabuf_mr, or the kernel or driver \
             refuses it)"
                .to_string()
        });
    }
    why.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_config::Settings;

    #[test]
    fn settings_come_from_nccl_and_weft_names() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            let lookup = move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            };
            Settings::from_lookup(&lookup).map(|s| IbConfig::from_settings(&s.net))
        };
        let c = env(&[]).unwrap();
        assert_eq!(
            (c.gid, c.qps_per_connection, c.timeout, c.retry_cnt),
            (GidWanted::V4, 1, 20, 7)
        );
        let c = env(&[
            ("NCCL_IB_GID_INDEX", "3"),
            ("NCCL_IB_QPS_PER_CONNECTION", "4"),
            ("WEFT_IB_TIMEOUT", "14"),
            ("NCCL_IB_TIMEOUT", "22"),
            ("NCCL_IB_HCA", "=rxe0"),
            ("NCCL_SOCKET_IFNAME", "eth"),
        ])
        .unwrap();
        assert_eq!(
            (c.gid, c.gid_index, c.qps_per_connection, c.timeout),
            (GidWanted::Index(3), Some(3), 4, 14)
        );
        assert!(c.hca.allows("rxe0", 1) && !c.hca.allows("rxe1", 1));
        assert_eq!(c.handshake_ifname.as_deref(), Some("eth"));
        let c = env(&[("NCCL_IB_ADDR_FAMILY", "AF_INET6")]).unwrap();
        assert_eq!(c.gid, GidWanted::V6);
        let e = env(&[("NCCL_IB_QPS_PER_CONNECTION", "9")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("NCCL_IB_QPS_PER_CONNECTION=\"9\": expected a number from 1 to 8"),
            "{e}"
        );
        let e = env(&[("NCCL_IB_ADDR_FAMILY", "AF_UNIX")]).unwrap_err();
        assert!(
            e.to_string().contains("NCCL_IB_ADDR_FAMILY=\"AF_UNIX\""),
            "{e}"
        );
    }
}
