//! Finding the RDMA ports to use: every ACTIVE port of every device that `NCCL_IB_HCA`
//! allows, with its GID chosen (`NCCL_IB_GID_INDEX`, else by address family or address),
//! one protection domain and registration cache per device.

use std::net::IpAddr;
use std::sync::Arc;

use weft_sys::Verbs;
use weft_sys::verbs::types::*;

use super::IbConfig;
use super::gdr::{GdrSupport, peermem_loaded};
use super::mr_cache::{Memory, MrCache, Registrar};
use super::select::{GidEntry, GidWanted, choose_gid, gid_address, port_speed_mbps};
use super::verbs::{Context, Mr, Pd};
use crate::{NetError, NetErrorKind};

/// One usable port: what the backend calls a device.
pub(crate) struct Port {
    pub pd: Arc<Pd>,
    pub port: u8,
    pub gid_index: u32,
    pub gid: [u8; 16],
    pub lid: u16,
    /// `ibv_mtu` code of the port's active MTU.
    pub mtu: u32,
    pub speed_mbps: u32,
    pub guid: u64,
    pub pci_path: Option<String>,
    /// The netdev of the GID (RoCE), from sysfs.
    pub netdev: Option<String>,
    pub cache: MrCache<Mr>,
    /// What this device can do with GPU memory (`ib::gdr`).
    pub gdr: GdrSupport,
}

impl Port {
    pub fn name(&self) -> &str {
        &self.pd.ctx.name
    }

    /// `rxe0:1 (GID 3, 192.168.101.1/24 on eth0)`: for messages.
    pub fn describe(&self) -> String {
        let addr = gid_address(&self.gid)
            .map(|a| match local_prefix(a) {
                Some(p) => format!("{a}/{p}"),
                None => a.to_string(),
            })
            .unwrap_or_else(|| format!("LID {}", self.lid));
        let on = self
            .netdev
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        format!(
            "{} port {} (GID index {}, {addr}{on})",
            self.name(),
            self.port,
            self.gid_index
        )
    }

    /// Registers (or reuses) a region of `memory` covering `addr..addr+len`.
    pub fn register(&self, memory: Memory, addr: usize, len: usize) -> Result<Arc<Mr>, NetError> {
        self.cache.get(&PdRegistrar(&self.pd), memory, addr, len)
    }
}

struct PdRegistrar<'a>(&'a Arc<Pd>);

impl Registrar for PdRegistrar<'_> {
    type Region = Mr;
    fn register(&self, memory: Memory, start: usize, len: usize) -> Result<Mr, NetError> {
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        match memory {
            // SAFETY: `Net::reg_mr`'s contract keeps the caller's buffer alive until
            // `dereg_mr`; the cache widens it to whole pages, which are mapped because the
            // buffer's bytes are on them (for CUDA memory, peer memory pins the GPU pages
            // of the allocation, which the driver maps in 64 KiB units at least).
            Memory::Host | Memory::Cuda => unsafe {
                Mr::register(self.0.clone(), start as *mut u8, len, access)
            },
            Memory::DmaBuf { fd, base } => {
                // The cache does not widen dma-buf ranges, so `start` is the caller's address
                // and this is the caller's offset (wrapping: `base` was computed wrapping).
                let offset = start.wrapping_sub(base) as u64;
                // SAFETY: `reg_mr_dmabuf`'s contract keeps the dma-buf's memory allocated
                // until `dereg_mr` (the MR holds its own reference to the dma-buf).
                unsafe {
                    Mr::register_dmabuf(self.0.clone(), fd, offset, len, start as u64, access)
                }
            }
        }
    }
}

/// The prefix length of the local interface address `addr` (getifaddrs), for messages.
pub(crate) fn local_prefix(addr: IpAddr) -> Option<u8> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head that we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = ifap;
    while !cur.is_null() && found.is_none() {
        // SAFETY: a node of the list, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: a non-null sockaddr has at least its family.
        let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if fam == libc::AF_INET {
            // SAFETY: the family says both are sockaddr_in.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            // SAFETY: the netmask of an address has the address's family.
            let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
            if IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()) == addr {
                found = Some(m.sin_addr.s_addr.count_ones() as u8);
            }
        } else if fam == libc::AF_INET6 {
            // SAFETY: the family says both are sockaddr_in6.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            // SAFETY: the netmask of an address has the address's family.
            let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in6) };
            if IpAddr::from(a.sin6_addr.s6_addr) == addr {
                found = Some(
                    m.sin6_addr
                        .s6_addr
                        .iter()
                        .map(|b| b.count_ones() as u8)
                        .sum(),
                );
            }
        }
    }
    // SAFETY: from getifaddrs; nothing borrowed from it survives.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

fn sysfs(dev: &str, rest: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/infiniband/{dev}/{rest}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The port's GID table (non-zero entries), with types from sysfs.
fn gid_table(ctx: &Context, port: u8, len: i32) -> Vec<GidEntry> {
    (0..len.clamp(0, 256) as u32)
        .filter_map(|index| {
            let gid = ctx.query_gid(port, index)?;
            if gid.iter().all(|&b| b == 0) {
                return None;
            }
            let kind = sysfs(&ctx.name, &format!("ports/{port}/gid_attrs/types/{index}"));
            Some(GidEntry {
                index,
                gid,
                roce_v2: kind.is_some_and(|k| k.contains("v2")),
            })
        })
        .collect()
}

/// Every usable port, in device order. `wanted` overrides the configuration's GID choice
/// (the mesh backend asks for the GID of one address).
pub(crate) fn open_ports(
    verbs: &'static Verbs,
    config: &IbConfig,
    wanted: Option<GidWanted>,
) -> Result<(Vec<Arc<Port>>, Vec<String>), NetError> {
    let mut count = 0;
    // SAFETY: writes the count; the list is freed below.
    let list = unsafe { (verbs.ibv_get_device_list)(&mut count) };
    if list.is_null() {
        return Err(
            NetError::new(NetErrorKind::Unsupported, "ibv_get_device_list failed")
                .cause(super::verbs::last_errno()),
        );
    }
    let mut ports = Vec::new();
    let mut skipped = Vec::new();
    let peermem = peermem_loaded(&|f| std::path::Path::new(f).exists());
    for i in 0..count.max(0) as usize {
        let entry = list.wrapping_add(i);
        // SAFETY: `list` has `count` entries, so `entry` is in bounds.
        let device = unsafe { *entry };
        // SAFETY: `device` is from the live list.
        let ctx = match unsafe { Context::open(verbs, device) } {
            Ok(c) => Arc::new(c),
            Err(e) => {
                skipped.push(e.to_string());
                continue;
            }
        };
        let attr = match ctx.query_device() {
            Ok(a) => a,
            Err(e) => {
                skipped.push(e.to_string());
                continue;
            }
        };
        // SAFETY: `device` is from the live list.
        let guid = u64::from_be(unsafe { (verbs.ibv_get_device_guid)(device) });
        let pci_path = std::fs::canonicalize(format!("/sys/class/infiniband/{}/device", ctx.name))
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| p.contains("/pci"));
        let mut pd = None;
        for port in 1..=attr.phys_port_cnt {
            if !config.hca.allows(&ctx.name, port) {
                skipped.push(format!("{} port {port}: not in NCCL_IB_HCA", ctx.name));
                continue;
            }
            let pattr = match ctx.query_port(port) {
                Ok(p) => p,
                Err(e) => {
                    skipped.push(e.to_string());
                    continue;
                }
            };
            if pattr.state != ibv_port_state::IBV_PORT_ACTIVE {
                skipped.push(format!(
                    "{} port {port}: not ACTIVE (state {})",
                    ctx.name, pattr.state.0
                ));
                continue;
            }
            let table = gid_table(&ctx, port, pattr.gid_tbl_len);
            let want = wanted.unwrap_or(config.gid);
            let gid_index = if pattr.link_layer == IBV_LINK_LAYER_INFINIBAND
                && config.gid_index.is_none()
                && wanted.is_none()
            {
                0
            } else {
                match choose_gid(&table, want) {
                    Ok(i) => i,
                    Err(why) => {
                        skipped.push(format!("{} port {port}: {why}", ctx.name));
                        continue;
                    }
                }
            };
            let gid = ctx.query_gid(port, gid_index).unwrap_or([0; 16]);
            let (pd, dmabuf) = match &pd {
                Some((pd, dmabuf)) => (Arc::clone(pd), *dmabuf),
                None => {
                    let p = Arc::new(Pd::new(ctx.clone())?);
                    let probe = super::verbs::probe_dmabuf(&p);
                    let dmabuf = super::gdr::dmabuf_supported(probe);
                    // Says why ptrSupport is what it is (the first question on a GPU host).
                    log::info!(
                        "NET/IB: {}: GPUDirect: peer memory {}, dma-buf {} (probe: {})",
                        ctx.name,
                        if peermem { "loaded" } else { "not loaded" },
                        if dmabuf { "supported" } else { "not supported" },
                        match probe {
                            super::gdr::DmaBufProbe::NoSymbol =>
                                "libibverbs has no ibv_reg_dmabuf_mr".to_string(),
                            super::gdr::DmaBufProbe::Errno(e) =>
                                std::io::Error::from_raw_os_error(e).to_string(),
                            super::gdr::DmaBufProbe::Registered => "registered".to_string(),
                        }
                    );
                    pd = Some((p.clone(), dmabuf));
                    (p, dmabuf)
                }
            };
            let gdr = GdrSupport::decide(peermem, dmabuf, &config.gdr);
            ports.push(Arc::new(Port {
                pd,
                port,
                gid_index,
                gid,
                lid: pattr.lid,
                mtu: pattr.active_mtu.0,
                speed_mbps: port_speed_mbps(pattr.active_speed, pattr.active_width),
                guid,
                pci_path: pci_path.clone(),
                netdev: sysfs(
                    &ctx.name,
                    &format!("ports/{port}/gid_attrs/ndevs/{gid_index}"),
                ),
                cache: MrCache::new(4096),
                gdr,
            }));
        }
    }
    // SAFETY: from ibv_get_device_list; the contexts opened from it stay valid.
    unsafe { (verbs.ibv_free_device_list)(list) };
    Ok((ports, skipped))
}
