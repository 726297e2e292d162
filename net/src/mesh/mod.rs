//! `MeshNet`: the NET backend for a multi-subnet mesh, where each NIC of a host is cabled to
//! a different peer on a subnet of its own (the seed's triangle: one /24 per link). NCCL
//! cannot know which NIC reaches which peer, so the backend shows one device and picks the
//! NICs per connection:
//!
//! - `listen` advertises every local address ([`handle`]: weft-core's mesh handle, with
//!   address, prefix, NIC and GID index, speed, IPv4 and IPv6, and a trailer with a random
//!   nonce) and listens on all of them, for verbs and for sockets;
//! - `connect` pairs local NICs with peer addresses on shared subnets ([`plan`]:
//!   `weft_core::net`'s selection, pairs where both ends have an RDMA port first) and
//!   connects over each pair, a *rail*, with verbs where both ends have an RDMA port and
//!   with sockets where one has none; several disjoint pairs of the best speed are several
//!   rails, and each message is cut over them ([`stripe`]) and put back in order. With no
//!   shared subnet it fails at once with every address it compared;
//! - connect and accept never block (`handshake`: each rail's backend handshake, then a
//!   rail hello that groups the rails; a deadline on every step), and a connector that does
//!   not repeat the listen's nonce is refused, naming it.
//!
//! Configured by [`MeshConfig`], from weft-config's mesh settings: `WEFT_MESH_IFNAME` (which
//! netdevs join, RDMA or not), `WEFT_MESH_TRANSPORT` (`auto`: verbs where both ends of a pair
//! have an RDMA port, else sockets; `ib`; `socket`), `WEFT_MESH_RAILS` (the most rails per
//! connection), `NCCL_MESH_GID_INDEX`, `NCCL_MESH_DEBUG` (log each route chosen, at WARN);
//! docs/environment.md has their defaults. The verbs settings (`NCCL_IB_*`, see
//! [`crate::ib`]) apply to verbs rails, the socket settings (`NCCL_SOCKET_NTHREADS`,
//! `NCCL_NSOCKS_PERTHREAD`, `NCCL_SOCKET_FAMILY`, see [`crate::socket`]) to socket rails.

mod comm;
pub mod handle;
mod handshake;
pub mod plan;
mod rail;
pub mod stripe;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use weft_config::{MeshSettings, NetSettings};
use weft_core::wire::mesh_handle::{MAX_SPEED_MBPS, MeshEntry, MeshHandle, SPEED_UNIT_MBPS};
use weft_core::wire::socket_handle::SocketHandleRepr;

pub use self::comm::{MeshMemHandle, MeshRecvComm, MeshRequest, MeshSendComm};
use self::handle::{MeshListenHandle, NO_VERBS};
use self::handshake::{ConnectContext, random_u64};
pub use self::handshake::{MeshConnecting, MeshListenComm};
use self::plan::{MeshNic, RailKind, Transport};
use self::rail::Backends;
use crate::ib::device::{Port, local_prefix};
use crate::ib::handshake::listen_at;
use crate::ib::select::{GidWanted, gid_address};
use crate::ib::{IbConfig, IbNet};
use crate::socket::interface::{IfnameFilter, choose_interfaces, system_interfaces};
use crate::socket::{SocketConfig, SocketNet};
use crate::{
    CommRef, Completion, Net, NetError, NetErrorKind, NetHandle, NetProperties, PtrKind,
    PtrSupport, RecvBuffer,
};

/// The mesh settings (see the module table).
#[derive(Debug, Clone, PartialEq)]
pub struct MeshConfig {
    /// `WEFT_MESH_IFNAME`.
    pub ifname: Option<String>,
    /// `NCCL_MESH_GID_INDEX`.
    pub gid_index: Option<u32>,
    /// `NCCL_MESH_DEBUG`.
    pub debug: bool,
    /// `WEFT_MESH_TRANSPORT`.
    pub transport: Transport,
    /// `WEFT_MESH_RAILS`.
    pub max_rails: usize,
}

impl MeshConfig {
    /// weft-config's mesh settings.
    pub fn from_settings(s: &MeshSettings) -> MeshConfig {
        MeshConfig {
            ifname: s.ifname.clone(),
            gid_index: s.gid_index.map(u32::from),
            debug: s.debug,
            transport: s.transport,
            max_rails: usize::from(s.max_rails),
        }
    }
}

/// The mesh backend: one device over every address of the host that the settings allow.
pub struct MeshNet {
    /// The verbs backend, when it is used and a port is active.
    ib: Option<IbNet>,
    /// Runs the socket rails (it has no devices of its own).
    socket: SocketNet,
    /// The RDMA ports the mesh uses (`MeshNic::port` indexes these).
    ports: Vec<Arc<Port>>,
    nics: Vec<MeshNic>,
    config: MeshConfig,
}

impl std::fmt::Debug for MeshNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nics: Vec<String> = self.nics.iter().map(|n| self.describe_nic(n)).collect();
        f.debug_struct("MeshNet")
            .field("nics", &nics)
            .field("config", &self.config)
            .finish()
    }
}

fn no_route(no: weft_core::net::NoRoute, port: u16) -> NetError {
    NetError::new(NetErrorKind::Unsupported, format!("mesh connect: {no}"))
        .peer(format!("listener port {port}"))
        .hint("no local NIC shares a subnet with the peer: check the cabling, the addresses, WEFT_MESH_IFNAME and WEFT_MESH_TRANSPORT")
}

fn speed_unit(mbps: u32) -> u32 {
    (mbps.min(MAX_SPEED_MBPS) / SPEED_UNIT_MBPS) * SPEED_UNIT_MBPS
}

/// A netdev's speed in Mb/s from sysfs; virtual NICs report none (0: unknown).
fn netdev_speed(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&s| s > 0)
        .and_then(|s| u32::try_from(s).ok())
        .unwrap_or(0)
}

impl MeshNet {
    /// Opens the mesh as the process environment says.
    pub fn from_env() -> Result<MeshNet, NetError> {
        MeshNet::from_settings(&crate::settings_from_env()?)
    }

    /// Opens the mesh as `settings` say (its verbs and socket rails with theirs).
    pub fn from_settings(settings: &NetSettings) -> Result<MeshNet, NetError> {
        MeshNet::new(
            IbConfig::from_settings(settings),
            SocketConfig::from_settings(&settings.socket)?,
            MeshConfig::from_settings(&settings.mesh),
        )
    }

    /// Opens every RDMA port with an IP address and, unless `WEFT_MESH_TRANSPORT=ib`, every
    /// other interface address, that `WEFT_MESH_IFNAME` allows.
    pub fn new(
        mut ib_config: IbConfig,
        socket_config: SocketConfig,
        config: MeshConfig,
    ) -> Result<MeshNet, NetError> {
        if let Some(i) = config.gid_index {
            ib_config.gid_index = Some(i);
            ib_config.gid = GidWanted::Index(i);
        }
        let filter = config.ifname.as_deref().map(IfnameFilter::parse);
        let mut skipped = Vec::new();
        let ib = match config.transport {
            Transport::Socket => None,
            Transport::Ib => Some(IbNet::new(ib_config)?),
            Transport::Auto => match IbNet::new(ib_config) {
                Ok(net) => Some(net),
                Err(e) => {
                    log::info!("NET/mesh: no verbs ({e}); every connection goes over sockets");
                    skipped.push(format!("verbs: {e}"));
                    None
                }
            },
        };
        let mut ports = Vec::new();
        let mut nics: Vec<MeshNic> = Vec::new();
        let mut netdevs: Vec<String> = Vec::new();
        let mut index_of = |name: &str| -> u8 {
            match netdevs.iter().position(|n| n == name) {
                Some(i) => i as u8,
                None => {
                    netdevs.push(name.to_string());
                    (netdevs.len() - 1) as u8
                }
            }
        };
        for p in ib.as_ref().map_or(&[][..], |ib| ib.ports()) {
            let Some(addr) = gid_address(&p.gid) else {
                skipped.push(format!(
                    "{}: its GID is not an IP address (InfiniBand)",
                    p.describe()
                ));
                continue;
            };
            let netdev = p.netdev.clone().unwrap_or_else(|| p.name().to_string());
            if let Some(f) = &filter {
                if !f.matches(&netdev) {
                    skipped.push(format!("{}: not in WEFT_MESH_IFNAME", p.describe()));
                    continue;
                }
            }
            let Some(prefix_len) = local_prefix(addr) else {
                skipped.push(format!("{}: no interface holds {addr}", p.describe()));
                continue;
            };
            nics.push(MeshNic {
                index: index_of(&netdev),
                name: netdev,
                addr,
                prefix_len,
                speed_mbps: p.speed_mbps,
                port: Some(ports.len()),
                reserve: false,
            });
            ports.push(p.clone());
        }
        if config.transport != Transport::Ib {
            let available = system_interfaces(socket_config.family)?;
            for i in choose_interfaces(&available, config.ifname.as_deref()) {
                let addr = i.addr.ip();
                if nics.iter().any(|n| n.addr == addr) {
                    continue;
                }
                let Some(prefix_len) = local_prefix(addr) else {
                    skipped.push(format!("{}: no prefix for {addr}", i.name));
                    continue;
                };
                nics.push(MeshNic {
                    index: index_of(&i.name),
                    speed_mbps: netdev_speed(&i.name),
                    name: i.name,
                    addr,
                    prefix_len,
                    port: None,
                    reserve: false,
                });
            }
        }
        mark_reserve(&mut nics, &config, socket_config.ifname.as_deref());
        MeshNet::with_nics(ib, ports, socket_config, config, nics, &skipped)
    }

    /// A mesh over exactly `nics` (`MeshNic::port` indexing `ports`).
    pub(crate) fn with_nics(
        ib: Option<IbNet>,
        ports: Vec<Arc<Port>>,
        socket_config: SocketConfig,
        config: MeshConfig,
        mut nics: Vec<MeshNic>,
        skipped: &[String],
    ) -> Result<MeshNet, NetError> {
        if nics.is_empty() {
            return Err(NetError::new(
                NetErrorKind::Unsupported,
                "the mesh backend found no address to use",
            )
            .cause(skipped.join("; "))
            .hint(
                "check WEFT_MESH_IFNAME, WEFT_MESH_TRANSPORT and that each netdev has an address",
            ));
        }
        // RDMA addresses first: the handle keeps what fits, in this order.
        nics.sort_by_key(|n| n.port.is_none());
        let net = MeshNet {
            ib,
            socket: SocketNet::without_devices(socket_config)?,
            ports,
            nics,
            config,
        };
        for n in &net.nics {
            log::info!("NET/mesh: using {}", net.describe_nic(n));
        }
        Ok(net)
    }

    /// One line for logs: the addresses, the transport, the rails, and the backends'
    /// settings that apply to rails.
    pub fn describe(&self) -> String {
        let nics: Vec<String> = self.nics.iter().map(|n| self.describe_nic(n)).collect();
        let socket = self.socket.config();
        let mut line = format!(
            "[{}], WEFT_MESH_TRANSPORT {:?}, up to {} rails per connection; socket rails: {} \
             threads x {} sockets per connection",
            nics.join(", "),
            self.config.transport,
            self.config.max_rails,
            socket.threads,
            socket.sockets_per_thread
        );
        if let Some(ib) = &self.ib {
            let c = ib.config();
            line.push_str(&format!(
                "; verbs rails: {} QP(s) per connection, connect timeout {} s",
                c.qps_per_connection,
                c.connect_timeout.as_secs()
            ));
        }
        line
    }

    fn describe_nic(&self, n: &MeshNic) -> String {
        let reserve = if n.reserve {
            ", the bootstrap's network: data only where no other NIC reaches a peer"
        } else {
            ""
        };
        match n.port.and_then(|p| self.ports.get(p)) {
            Some(p) => format!("{}/{} ({}{reserve})", n.addr, n.prefix_len, p.describe()),
            None => format!(
                "{}/{} on {} (sockets{reserve})",
                n.addr, n.prefix_len, n.name
            ),
        }
    }

    fn backends(&self) -> Backends<'_> {
        Backends {
            ib: self.ib.as_ref(),
            socket: &self.socket,
        }
    }

    fn check_dev(&self, dev: usize) -> Result<(), NetError> {
        if dev == 0 {
            Ok(())
        } else {
            Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("mesh device {dev} does not exist (1 device)"),
            ))
        }
    }

    fn connect_timeout(&self) -> std::time::Duration {
        let socket = self.socket.config().connect_timeout;
        self.ib
            .as_ref()
            .map_or(socket, |ib| ib.config().connect_timeout.max(socket))
    }
}

/// Marks the bootstrap's network as a last resort for data ([`MeshNic::reserve`]): the NICs
/// that `NCCL_SOCKET_IFNAME` (`socket_ifname`) names, unless `WEFT_MESH_IFNAME` is set (it
/// says which NICs carry data, and those are equals). Where every NIC is the bootstrap's,
/// none is held back.
fn mark_reserve(nics: &mut [MeshNic], config: &MeshConfig, socket_ifname: Option<&str>) {
    let (None, Some(ifname)) = (&config.ifname, socket_ifname) else {
        return;
    };
    let bootstrap = IfnameFilter::parse(ifname);
    for n in nics.iter_mut() {
        n.reserve = bootstrap.matches(&n.name);
    }
    if nics.iter().all(|n| n.reserve) {
        for n in nics.iter_mut() {
            n.reserve = false;
        }
    }
}

/// Binds `bind` to every address: IPv6 sockets take IPv4 too; a host without IPv6 gets the
/// IPv4 wildcard.
fn on_every_address<T>(
    mut bind: impl FnMut(SocketAddr) -> Result<T, NetError>,
) -> Result<T, NetError> {
    match bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)) {
        Ok(t) => Ok(t),
        Err(_) => bind(SocketAddr::from(([0, 0, 0, 0], 0))),
    }
}

impl Net for MeshNet {
    type ListenComm = MeshListenComm;
    type SendComm = MeshSendComm;
    type RecvComm = MeshRecvComm;
    type Connecting = MeshConnecting;
    type MemHandle = MeshMemHandle;
    type Request = MeshRequest;

    fn name(&self) -> &str {
        "Mesh"
    }

    fn devices(&self) -> usize {
        1
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        self.check_dev(dev)?;
        Ok(NetProperties {
            name: "mesh".to_string(),
            pci_path: None,
            guid: 0x6d65_7368,
            ptr_support: PtrSupport::HOST,
            // A registration is made on the rails of one comm (their ports, their PDs): a
            // comm to another peer may take other NICs.
            reg_is_global: false,
            // NCCL's default for a NIC that reports no speed (virtual ones): 10 Gb/s.
            speed_mbps: Some(self.nics.iter().map(|n| n.speed_mbps).max().unwrap_or(0))
                .filter(|&s| s > 0)
                .unwrap_or(10_000),
            port: 1,
            latency_us: 0.0,
            max_comms: 65_536,
            max_recvs: crate::ib::fifo::MAX_RECVS.min(crate::NET_MAX_RECVS) as u32,
        })
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, MeshListenComm), NetError> {
        self.check_dev(dev)?;
        let nonce = random_u64();
        let ib = match (&self.ib, self.ports.is_empty()) {
            (Some(ib), false) => Some(on_every_address(|a| {
                listen_at(self.ports.clone(), a, nonce, ib.config())
            })?),
            _ => None,
        };
        let socket = if self.config.transport == Transport::Ib {
            None
        } else {
            Some(on_every_address(|a| self.socket.listen_on(a, nonce))?)
        };
        let socket_config = self.socket.config();
        let mut handle = MeshListenHandle {
            core: MeshHandle::new(ib.as_ref().map_or(0, |l| l.addr().port())),
            socket_port: socket.as_ref().map_or(0, |l| l.handle().addr.port()),
            socket_threads: socket_config.threads,
            socket_data_sockets: socket_config.data_sockets()?,
            nonce,
        };
        for n in &self.nics {
            let gid_index = match n.port.and_then(|p| self.ports.get(p)) {
                Some(p) if ib.is_some() => p.gid_index as u8,
                _ if socket.is_some() => NO_VERBS,
                _ => continue,
            };
            let entry = MeshEntry {
                addr: n.addr,
                prefix_len: n.prefix_len,
                nic_index: n.index,
                qpn: 0,
                gid_index,
                speed_mbps: speed_unit(n.speed_mbps),
            };
            if handle.fits(entry) {
                let _ = handle.core.push(entry);
            } else {
                log::warn!(
                    "NET/mesh: {}/{} left out of the handle (it is full)",
                    n.addr,
                    n.prefix_len
                );
            }
        }
        let bytes = handle.emit()?;
        Ok((bytes, MeshListenComm::new(ib, socket, nonce)))
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<MeshConnecting>,
    ) -> Result<Option<MeshSendComm>, NetError> {
        self.check_dev(dev)?;
        let ctx = ConnectContext {
            backends: self.backends(),
            ports: &self.ports,
            ib_config: self.ib.as_ref().map(|ib| ib.config()),
        };
        if state.is_none() {
            let peer = MeshListenHandle::parse(handle)?;
            let rails = plan::plan(
                &self.nics,
                peer.core.entries(),
                self.config.transport,
                self.config.max_rails,
            )
            .map_err(|no| no_route(no, peer.core.port))?;
            let mut words = Vec::with_capacity(rails.len());
            let mut from = Vec::with_capacity(rails.len());
            for (i, r) in rails.iter().enumerate() {
                let nic = &self.nics[r.nic];
                let how = match r.kind {
                    RailKind::Ib { .. } => "verbs",
                    RailKind::Socket => "sockets",
                };
                words.push(format!(
                    "rail {i}: {} over {how} from {} on {}",
                    r.peer,
                    self.describe_nic(nic),
                    r.over
                ));
                from.push(nic.addr);
            }
            let line = format!("NET/mesh: connect: {}", words.join("; "));
            // Both ends have RDMA ports, yet no pair of them shares a subnet: the rails take
            // another network (a management one?) over sockets. Say so where it shows.
            let socket_fallback = rails.iter().any(|r| r.kind == RailKind::Socket)
                && self.nics.iter().any(|n| n.port.is_some())
                && peer.core.entries().iter().any(|e| e.gid_index != NO_VERBS);
            if socket_fallback {
                log::warn!(
                    "{line}: both ends have RDMA ports but none of their pairs shares a subnet, \
                     so sockets carry this connection (WEFT_MESH_TRANSPORT=ib refuses instead)"
                );
            } else if self.config.debug {
                log::warn!("{line}");
            } else {
                log::info!("{line}");
            }
            let socket = SocketHandleRepr {
                addr: SocketAddr::new(rails[0].peer, peer.socket_port),
                data_sockets: peer.socket_data_sockets,
                threads: peer.socket_threads,
                nonce: peer.nonce,
            };
            let listener = handshake::Listener {
                nonce: peer.nonce,
                ib_port: peer.core.port,
                socket,
            };
            *state = Some(MeshConnecting::start(
                &ctx,
                rails,
                words,
                &listener,
                &from,
                self.connect_timeout(),
            )?);
        }
        let Some(c) = state.as_mut() else {
            return Ok(None);
        };
        let result = c.poll(&ctx);
        if !matches!(result, Ok(None)) {
            *state = None;
        }
        result
    }

    fn accept(&self, listen: &mut MeshListenComm) -> Result<Option<MeshRecvComm>, NetError> {
        listen.poll_accept(&self.backends())
    }

    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, MeshSendComm, MeshRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<MeshMemHandle, NetError> {
        let b = self.backends();
        let mut rails = Vec::new();
        let owner = match comm {
            CommRef::Send(c) => {
                for rail in &c.rails {
                    // SAFETY: the caller's contract, passed on.
                    match unsafe { b.reg_mr(CommRef::Send(rail), data, size, kind) } {
                        Ok(m) => rails.push(m),
                        Err(e) => return Err(undo(&b, rails, e)),
                    }
                }
                c.id
            }
            CommRef::Recv(c) => {
                for rail in &c.rails {
                    // SAFETY: the caller's contract, passed on.
                    match unsafe { b.reg_mr(CommRef::Recv(rail), data, size, kind) } {
                        Ok(m) => rails.push(m),
                        Err(e) => return Err(undo(&b, rails, e)),
                    }
                }
                c.id
            }
        };
        Ok(MeshMemHandle { owner, rails })
    }

    fn dereg_mr(&self, mr: MeshMemHandle) -> Result<(), NetError> {
        let b = self.backends();
        let mut first = Ok(());
        for m in mr.rails {
            let r = b.dereg_mr(m);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    unsafe fn isend(
        &self,
        comm: &mut MeshSendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &MeshMemHandle,
    ) -> Result<Option<MeshRequest>, NetError> {
        if data.is_null() && size > 0 {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("isend of {size} bytes from a null pointer"),
            ));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { comm::isend(&self.backends(), comm, data, size, tag, mr) }
    }

    unsafe fn irecv(
        &self,
        comm: &mut MeshRecvComm,
        bufs: &[RecvBuffer<'_, MeshMemHandle>],
    ) -> Result<Option<MeshRequest>, NetError> {
        if let Some(b) = bufs.iter().find(|b| b.data.is_null() && b.size > 0) {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!("irecv of {} bytes into a null pointer", b.size),
            ));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { comm::irecv(&self.backends(), comm, bufs) }
    }

    unsafe fn iflush(
        &self,
        _comm: &mut MeshRecvComm,
        _bufs: &[RecvBuffer<'_, MeshMemHandle>],
    ) -> Result<Option<MeshRequest>, NetError> {
        // Host memory only: received data is visible once `test` says so.
        Ok(None)
    }

    fn test(&self, request: &mut MeshRequest) -> Result<Option<Completion>, NetError> {
        comm::test(&self.backends(), request)
    }

    fn close_send(&self, comm: MeshSendComm) -> Result<(), NetError> {
        let b = self.backends();
        let mut first = Ok(());
        for rail in comm.rails {
            let r = b.close_send(rail);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn close_recv(&self, comm: MeshRecvComm) -> Result<(), NetError> {
        let b = self.backends();
        let mut first = Ok(());
        for rail in comm.rails {
            let r = b.close_recv(rail);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn close_listen(&self, comm: MeshListenComm) -> Result<(), NetError> {
        comm.close(&self.backends());
        Ok(())
    }
}

/// Releases the registrations made before `err`, and returns it.
fn undo(b: &Backends<'_>, rails: Vec<rail::RailMr>, err: NetError) -> NetError {
    for m in rails {
        let _ = b.dereg_mr(m);
    }
    err
}

#[cfg(test)]
mod tests;
