//! `MeshNet`: the verbs backend for a multi-subnet RDMA mesh, where each NIC of a host is
//! cabled to a different peer on a subnet of its own (the seed's triangle: one /24 per link).
//! NCCL cannot know which NIC reaches which peer, so the backend shows one device and picks
//! the NIC per connection:
//!
//! - `listen` advertises every local RDMA address (a mesh handle, `weft_core::wire::
//!   mesh_handle`: address, prefix, NIC and GID index, speed; IPv4 and IPv6) and one
//!   handshake port that listens on all of them;
//! - `connect` pairs a local NIC with a peer address on a shared subnet
//!   (`weft_core::net::select`: same subnet, fastest, deterministic) and runs the verbs
//!   handshake from that NIC to that address, without blocking and within the deadline; with
//!   no shared subnet it fails at once with every address it compared;
//! - the listener serves each connection with the NIC holding the address it arrived on.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `WEFT_MESH_IFNAME` | which netdevs' RDMA ports join (NCCL_SOCKET_IFNAME syntax) | all |
//! | `NCCL_MESH_GID_INDEX` | GID index on every port | each port's RoCE v2 GID of its address |
//! | `NCCL_MESH_DEBUG` | `1`: log each route chosen (at WARN, so it shows by default) | off |
//!
//! The verbs settings (`NCCL_IB_*`, see [`crate::ib`]) apply too. Striping one connection
//! over several rails is not done: each connection takes the single best route.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use weft_core::net::{LocalNic, NoRouteReason, PeerAddr, select};
use weft_core::wire::mesh_handle::{
    MAX_ENTRIES, MAX_SPEED_MBPS, MeshEntry, MeshHandle, SPEED_UNIT_MBPS,
};

use crate::ib::device::{Port, local_prefix};
use crate::ib::handshake::{listen_at, poll_connect_to};
use crate::ib::select::{GidWanted, gid_address};
use crate::ib::wire::ListenHandle;
use crate::ib::{
    IbConfig, IbConnecting, IbListenComm, IbMemHandle, IbNet, IbRecvComm, IbRequest, IbSendComm,
};
use crate::socket::interface::IfnameFilter;
use crate::{
    CommRef, Completion, Net, NetError, NetErrorKind, NetHandle, NetProperties, PtrKind, RecvBuffer,
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
}

impl MeshConfig {
    /// Reads the settings through `env`.
    pub fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<MeshConfig, NetError> {
        Ok(MeshConfig {
            ifname: crate::env::first_value(env, &["WEFT_MESH_IFNAME"]),
            gid_index: crate::socket::env_number(
                env,
                &["WEFT_MESH_GID_INDEX", "NCCL_MESH_GID_INDEX"],
                0,
                255,
            )?
            .map(|v| v as u32),
            debug: crate::env::first_value(env, &["WEFT_MESH_DEBUG", "NCCL_MESH_DEBUG"])
                .is_some_and(|v| !matches!(v.trim(), "0" | "no" | "off" | "false")),
        })
    }
}

/// The mesh backend: one device over every RDMA port of the host.
pub struct MeshNet {
    ib: IbNet,
    ports: Vec<Arc<Port>>,
    /// Each port's (address, prefix), in `ports` order.
    addrs: Vec<(IpAddr, u8)>,
    config: MeshConfig,
}

impl std::fmt::Debug for MeshNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports: Vec<String> = self.ports.iter().map(|p| p.describe()).collect();
        f.debug_struct("MeshNet")
            .field("ports", &ports)
            .field("config", &self.config)
            .finish()
    }
}

/// A connect in progress: the route chosen, then the verbs handshake over it.
#[derive(Debug)]
pub struct MeshConnecting {
    port: usize,
    target: ListenHandle,
    inner: Option<IbConnecting>,
}

fn no_route(no: weft_core::net::NoRoute, port: u16) -> NetError {
    NetError::new(NetErrorKind::Unsupported, format!("mesh connect: {no}"))
        .peer(format!("listener port {port}"))
        .hint("no local RDMA NIC shares a subnet with the peer: check the cabling, the addresses and WEFT_MESH_IFNAME")
}

fn speed_unit(mbps: u32) -> u32 {
    (mbps.min(MAX_SPEED_MBPS) / SPEED_UNIT_MBPS) * SPEED_UNIT_MBPS
}

impl MeshNet {
    /// Opens the mesh from the environment.
    pub fn from_env() -> Result<MeshNet, NetError> {
        MeshNet::new(
            IbConfig::from_env()?,
            MeshConfig::from_lookup(&crate::env::process)?,
        )
    }

    /// Opens every RDMA port with an IP address that `WEFT_MESH_IFNAME` allows.
    pub fn new(mut ib_config: IbConfig, config: MeshConfig) -> Result<MeshNet, NetError> {
        if let Some(i) = config.gid_index {
            ib_config.gid_index = Some(i);
            ib_config.gid = GidWanted::Index(i);
        }
        let ib = IbNet::new(ib_config)?;
        let filter = config.ifname.as_deref().map(IfnameFilter::parse);
        let mut ports = Vec::new();
        let mut addrs = Vec::new();
        let mut skipped = Vec::new();
        for p in ib.ports() {
            let Some(addr) = gid_address(&p.gid) else {
                skipped.push(format!(
                    "{}: its GID is not an IP address (InfiniBand)",
                    p.describe()
                ));
                continue;
            };
            if let (Some(f), Some(dev)) = (&filter, &p.netdev) {
                if !f.matches(dev) {
                    skipped.push(format!("{}: not in WEFT_MESH_IFNAME", p.describe()));
                    continue;
                }
            }
            let Some(prefix) = local_prefix(addr) else {
                skipped.push(format!("{}: no interface holds {addr}", p.describe()));
                continue;
            };
            ports.push(p.clone());
            addrs.push((addr, prefix));
        }
        if ports.is_empty() {
            return Err(NetError::new(
                NetErrorKind::Unsupported,
                "the mesh backend found no RDMA port with an IP address",
            )
            .cause(skipped.join("; "))
            .hint("check WEFT_MESH_IFNAME and that each RDMA netdev has an address"));
        }
        if ports.len() > MAX_ENTRIES {
            log::warn!(
                "NET/mesh: {} RDMA ports; the handle carries the first {MAX_ENTRIES}",
                ports.len()
            );
            ports.truncate(MAX_ENTRIES);
            addrs.truncate(MAX_ENTRIES);
        }
        Ok(MeshNet {
            ib,
            ports,
            addrs,
            config,
        })
    }

    fn local_nics(&self) -> Vec<LocalNic> {
        self.ports
            .iter()
            .zip(&self.addrs)
            .enumerate()
            .map(|(i, (p, &(addr, prefix_len)))| LocalNic {
                index: i as u8,
                addr,
                prefix_len,
                speed_mbps: p.speed_mbps,
                up: true,
            })
            .collect()
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
}

impl Net for MeshNet {
    type ListenComm = IbListenComm;
    type SendComm = IbSendComm;
    type RecvComm = IbRecvComm;
    type Connecting = MeshConnecting;
    type MemHandle = IbMemHandle;
    type Request = IbRequest;

    fn name(&self) -> &str {
        "Mesh"
    }

    fn devices(&self) -> usize {
        1
    }

    fn properties(&self, dev: usize) -> Result<NetProperties, NetError> {
        self.check_dev(dev)?;
        let mut p = self.ib.properties(0)?;
        p.name = "mesh".to_string();
        p.pci_path = None;
        p.speed_mbps = self.ports.iter().map(|p| p.speed_mbps).max().unwrap_or(0);
        Ok(p)
    }

    fn listen(&self, dev: usize) -> Result<(NetHandle, IbListenComm), NetError> {
        self.check_dev(dev)?;
        // One handshake port for every address: bind them all (IPv6 sockets take IPv4 too).
        let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0);
        let comm = match listen_at(self.ports.clone(), any, 0, self.ib.config()) {
            Ok(c) => c,
            Err(_) => listen_at(
                self.ports.clone(),
                SocketAddr::from(([0, 0, 0, 0], 0)),
                0,
                self.ib.config(),
            )?,
        };
        let mut handle = MeshHandle::new(comm.addr().port());
        for (i, (p, &(addr, prefix_len))) in self.ports.iter().zip(&self.addrs).enumerate() {
            let entry = MeshEntry {
                addr,
                prefix_len,
                nic_index: i as u8,
                qpn: 0,
                gid_index: p.gid_index as u8,
                speed_mbps: speed_unit(p.speed_mbps),
            };
            if let Err(e) = handle.push(entry) {
                log::warn!("NET/mesh: {addr}/{prefix_len} left out of the handle: {e:?}");
            }
        }
        let bytes = handle.to_nccl_handle().map_err(|e| {
            NetError::new(NetErrorKind::InvalidHandle(e), "encoding the mesh handle")
        })?;
        Ok((NetHandle(bytes), comm))
    }

    fn connect(
        &self,
        dev: usize,
        handle: &NetHandle,
        state: &mut Option<MeshConnecting>,
    ) -> Result<Option<IbSendComm>, NetError> {
        self.check_dev(dev)?;
        if state.is_none() {
            let peer = MeshHandle::parse(&handle.0).map_err(|e| {
                NetError::new(NetErrorKind::InvalidHandle(e), "mesh connect: the peer's handle is not a mesh handle")
                    .hint("every rank must use the mesh backend (WEFT_NET_BACKEND=mesh / --transport mesh)")
            })?;
            let peers: Vec<PeerAddr> = peer
                .entries()
                .iter()
                .map(|e| PeerAddr {
                    addr: e.addr,
                    prefix_len: e.prefix_len,
                    nic_index: e.nic_index,
                    speed_mbps: e.speed_mbps,
                })
                .collect();
            let local = self.local_nics();
            let (port, addr, over) = match select(&local, &peers) {
                Ok(route) => (
                    usize::from(route.local.index),
                    route.peer.addr,
                    route.subnet.to_string(),
                ),
                // The handle describes this host (two ranks of one host over the mesh): the
                // address is local, so connecting to it cannot reach another host; the NIC
                // holding it serves both ends.
                Err(no) if no.reason() == NoRouteReason::DuplicateAddress => {
                    let same = local.iter().find_map(|l| {
                        peers
                            .iter()
                            .find(|p| p.addr == l.addr)
                            .map(|p| (usize::from(l.index), p.addr))
                    });
                    match same {
                        Some((port, addr)) => (port, addr, "this host".to_string()),
                        None => return Err(no_route(no, peer.port)),
                    }
                }
                Err(no) => return Err(no_route(no, peer.port)),
            };
            let target = ListenHandle {
                addr: SocketAddr::new(addr, peer.port),
                nonce: 0,
            };
            let line = format!(
                "NET/mesh: to {} from {} over {over}",
                target.addr,
                self.ports[port].describe(),
            );
            if self.config.debug {
                log::warn!("{line}");
            } else {
                log::info!("{line}");
            }
            *state = Some(MeshConnecting {
                port,
                target,
                inner: None,
            });
        }
        let Some(c) = state.as_mut() else {
            return Ok(None);
        };
        let port = self.ports[c.port].clone();
        let result = poll_connect_to(&port, self.ib.config(), c.target, &mut c.inner);
        if !matches!(result, Ok(None)) {
            *state = None;
        }
        result
    }

    fn accept(&self, listen: &mut IbListenComm) -> Result<Option<IbRecvComm>, NetError> {
        self.ib.accept(listen)
    }

    unsafe fn reg_mr(
        &self,
        comm: CommRef<'_, IbSendComm, IbRecvComm>,
        data: *mut u8,
        size: usize,
        kind: PtrKind,
    ) -> Result<IbMemHandle, NetError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.ib.reg_mr(comm, data, size, kind) }
    }

    fn dereg_mr(&self, mr: IbMemHandle) -> Result<(), NetError> {
        self.ib.dereg_mr(mr)
    }

    unsafe fn isend(
        &self,
        comm: &mut IbSendComm,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &IbMemHandle,
    ) -> Result<Option<IbRequest>, NetError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.ib.isend(comm, data, size, tag, mr) }
    }

    unsafe fn irecv(
        &self,
        comm: &mut IbRecvComm,
        bufs: &[RecvBuffer<'_, IbMemHandle>],
    ) -> Result<Option<IbRequest>, NetError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.ib.irecv(comm, bufs) }
    }

    unsafe fn iflush(
        &self,
        comm: &mut IbRecvComm,
        bufs: &[RecvBuffer<'_, IbMemHandle>],
    ) -> Result<Option<IbRequest>, NetError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.ib.iflush(comm, bufs) }
    }

    fn test(&self, request: &mut IbRequest) -> Result<Option<Completion>, NetError> {
        self.ib.test(request)
    }

    fn close_send(&self, comm: IbSendComm) -> Result<(), NetError> {
        self.ib.close_send(comm)
    }

    fn close_recv(&self, comm: IbRecvComm) -> Result<(), NetError> {
        self.ib.close_recv(comm)
    }

    fn close_listen(&self, comm: IbListenComm) -> Result<(), NetError> {
        self.ib.close_listen(comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_and_speed_units() {
        let env = |k: &str| match k {
            "WEFT_MESH_IFNAME" => Some("=eth1".to_string()),
            "NCCL_MESH_GID_INDEX" => Some("3".to_string()),
            "NCCL_MESH_DEBUG" => Some("1".to_string()),
            _ => None,
        };
        let c = MeshConfig::from_lookup(&env).unwrap();
        assert_eq!(
            c,
            MeshConfig {
                ifname: Some("=eth1".into()),
                gid_index: Some(3),
                debug: true
            }
        );
        let c = MeshConfig::from_lookup(&|_: &str| None).unwrap();
        assert_eq!(
            c,
            MeshConfig {
                ifname: None,
                gid_index: None,
                debug: false
            }
        );
        let bad = |k: &str| (k == "NCCL_MESH_GID_INDEX").then(|| "x".to_string());
        assert!(
            MeshConfig::from_lookup(&bad)
                .unwrap_err()
                .to_string()
                .contains("NCCL_MESH_GID_INDEX=x")
        );
        assert_eq!(speed_unit(2_549), 2_500);
        assert_eq!(speed_unit(u32::MAX), MAX_SPEED_MBPS);
    }
}
