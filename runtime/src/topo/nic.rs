//! Network devices as NCCL's net plugins would report them: InfiniBand / RoCE ports from
//! `/sys/class/infiniband` (the IB plugin, used when a port is active), otherwise the
//! socket plugin's interfaces from `/sys/class/net`.
//!
//! Each device carries what the topology XML's `<net>` needs (name, speed, port, guid,
//! GPUDirect RDMA) and what a person wants to see (addresses, up/down, PCI device).
//! Interfaces without a `device` link in sysfs (loopback, veth, docker, bridges) are
//! virtual: they come after the physical ones, and loopback, docker and virbr interfaces
//! are only used when nothing else is (NCCL's default `NCCL_SOCKET_IFNAME`).

use super::sysfs::{SysRoot, base_name, c_strtol, read_attr};
use std::net::IpAddr;
use std::path::PathBuf;

/// NCCL's socket plugin: speed when sysfs has none (10 Gb/s) and `maxComms`.
pub const SOCKET_DEFAULT_SPEED_MBPS: i64 = 10_000;
pub const SOCKET_MAX_COMMS: i64 = 65_536;

/// Which plugin the device belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NicKind {
    /// An InfiniBand / RoCE port (`link_layer` as sysfs says: `InfiniBand` or `Ethernet`).
    Ib { link_layer: String },
    /// A socket interface.
    Socket,
}

/// One network device found on the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicProbe {
    /// Interface name (`eth0`) or IB device name (`mlx5_0`).
    pub name: String,
    pub kind: NicKind,
    /// Port number (IB; 0 for sockets, as NCCL writes).
    pub port: i32,
    pub speed_mbps: i64,
    pub guid: u64,
    pub maxconn: Option<i64>,
    pub gdr: bool,
    /// Resolved sysfs directory of the device behind it (`device` link), if any.
    pub device_path: Option<PathBuf>,
    /// The PCI bus id when that device is a PCI function (not virtio, usb...).
    pub pci_busid: Option<String>,
    /// No `device` link: loopback, veth, docker, bridge, ifb...
    pub is_virtual: bool,
    pub up: bool,
    pub addrs: Vec<IpAddr>,
    /// Why it is not a `<net>` of the topology; `None` when it is one.
    pub unused: Option<&'static str>,
}

/// Inputs of NIC detection that do not live in sysfs.
#[derive(Debug, Clone, Default)]
pub struct NicInputs {
    /// Every local address (getifaddrs), by interface name.
    pub addrs: Vec<(String, IpAddr)>,
    /// `NCCL_SOCKET_IFNAME` / `WEFT_SOCKET_IFNAME`.
    pub ifname_filter: Option<String>,
    /// `NCCL_NET`: `IB` or `Socket` forces that plugin.
    pub net_plugin: Option<String>,
    /// Whether GPUs were found (GPUDirect RDMA needs one).
    pub have_gpus: bool,
}

fn device_of(class_dir: &std::path::Path) -> (Option<PathBuf>, Option<String>) {
    let Ok(dev) = std::fs::canonicalize(class_dir.join("device")) else {
        return (None, None);
    };
    // NCCL attaches a device whose subsystem is not `pci` (virtio, usb) to the first CPU.
    let subsystem = std::fs::canonicalize(dev.join("subsystem")).ok();
    let is_pci = subsystem.as_deref().and_then(base_name) == Some("pci");
    let busid = if is_pci {
        base_name(&dev)
            .filter(|b| super::sysfs::is_bdf(b))
            .map(str::to_string)
    } else {
        None
    };
    (Some(dev), busid)
}

/// Whether a GPUDirect RDMA peer-memory module is loaded (NCCL's `ncclIbGdrSupport`).
pub fn peer_memory_loaded(root: &SysRoot) -> bool {
    [
        "kernel/mm/memory_peers/nv_mem/version",
        "module/nvidia_peermem/version",
        "module/nv_peer_mem/version",
    ]
    .iter()
    .any(|p| root.sys_path(p).exists())
}

fn sorted_entries(dir: PathBuf) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// `4X NDR` ports report `400 Gb/sec (4X NDR)`: Mb/s.
fn ib_rate_mbps(rate: &str) -> Option<i64> {
    let num: String = rate
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let gbps: f64 = num.parse().ok()?;
    Some((gbps * 1000.0).round() as i64)
}

/// `b859:9f03:00d6:a2c6` -> 0xb8599f0300d6a2c6.
fn ib_guid(text: &str) -> u64 {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    u64::from_str_radix(&hex, 16).unwrap_or(0)
}

fn ib_ports(root: &SysRoot, inputs: &NicInputs) -> Vec<NicProbe> {
    let gdr = inputs.have_gpus && peer_memory_loaded(root);
    let mut out = Vec::new();
    for (name, dir) in sorted_entries(root.sys_path("class/infiniband")) {
        let (device_path, pci_busid) = device_of(&dir);
        let guid = read_attr(&dir, "sys_image_guid")
            .or_else(|| read_attr(&dir, "node_guid"))
            .map_or(0, |g| ib_guid(&g));
        let mut ports: Vec<(i64, PathBuf)> = sorted_entries(dir.join("ports"))
            .into_iter()
            .map(|(p, d)| (c_strtol(&p), d))
            .collect();
        ports.sort();
        for (port, pdir) in ports {
            let state = read_attr(&pdir, "state").unwrap_or_default();
            let up = state.contains("ACTIVE");
            out.push(NicProbe {
                name: name.clone(),
                kind: NicKind::Ib {
                    link_layer: read_attr(&pdir, "link_layer").unwrap_or_default(),
                },
                port: i32::try_from(port).unwrap_or(0),
                speed_mbps: read_attr(&pdir, "rate")
                    .and_then(|r| ib_rate_mbps(&r))
                    .unwrap_or(0),
                guid,
                // The queue-pair limit NCCL reports comes from ibv_query_device, not sysfs.
                maxconn: None,
                gdr,
                device_path: device_path.clone(),
                pci_busid: pci_busid.clone(),
                is_virtual: false,
                up,
                addrs: Vec::new(),
                unused: (!up).then_some("port not ACTIVE"),
            });
        }
    }
    out
}

fn default_excluded(name: &str) -> bool {
    ["lo", "docker", "virbr"]
        .iter()
        .any(|p| name.starts_with(p))
}

fn socket_interfaces(root: &SysRoot, inputs: &NicInputs) -> Vec<NicProbe> {
    let mut out = Vec::new();
    for (name, dir) in sorted_entries(root.sys_path("class/net")) {
        let (device_path, pci_busid) = device_of(&dir);
        let flags = read_attr(&dir, "flags").map(|f| c_strtol(&f));
        let up = match flags {
            Some(f) => f & 1 != 0,
            None => read_attr(&dir, "operstate").is_some_and(|s| s == "up"),
        };
        let speed = read_attr(&dir, "speed").map_or(0, |s| c_strtol(&s));
        let addrs: Vec<IpAddr> = inputs
            .addrs
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, a)| *a)
            .collect();
        let unused = if !up {
            Some("interface down")
        } else if addrs.is_empty() {
            Some("no address")
        } else {
            match &inputs.ifname_filter {
                Some(f) if !crate::bootstrap::interface::matches_filter(f, &name) => {
                    Some("excluded by NCCL_SOCKET_IFNAME")
                }
                None if default_excluded(&name) => Some("loopback/docker/virbr: used only alone"),
                _ => None,
            }
        };
        out.push(NicProbe {
            is_virtual: device_path.is_none(),
            name,
            kind: NicKind::Socket,
            port: 0,
            speed_mbps: if speed > 0 {
                speed
            } else {
                SOCKET_DEFAULT_SPEED_MBPS
            },
            guid: 0,
            maxconn: Some(SOCKET_MAX_COMMS),
            gdr: false,
            device_path,
            pci_busid,
            up,
            addrs,
            unused,
        });
    }
    // Nothing else usable: NCCL falls back to docker, then loopback interfaces.
    if inputs.ifname_filter.is_none() && out.iter().all(|n| n.unused.is_some()) {
        for prefix in ["docker", "lo"] {
            let mut found = false;
            for n in out.iter_mut() {
                if n.up && !n.addrs.is_empty() && n.name.starts_with(prefix) {
                    n.unused = None;
                    found = true;
                }
            }
            if found {
                break;
            }
        }
    }
    // Physical interfaces first, virtual ones last, each by name.
    out.sort_by(|a, b| (a.is_virtual, &a.name).cmp(&(b.is_virtual, &b.name)));
    out
}

/// Every network device, the used ones first in device-number order (`dev` = position),
/// then the unused ones.
pub fn probe_nics(root: &SysRoot, inputs: &NicInputs) -> Vec<NicProbe> {
    let ib = ib_ports(root, inputs);
    let sockets = socket_interfaces(root, inputs);
    let forced = inputs.net_plugin.as_deref().map(str::to_ascii_lowercase);
    let use_ib = match forced.as_deref() {
        Some("ib") => true,
        Some("socket") => false,
        _ => ib.iter().any(|n| n.unused.is_none()),
    };
    let (mut chosen, mut other) = if use_ib { (ib, sockets) } else { (sockets, ib) };
    let why = match (use_ib, forced.is_some()) {
        (true, true) => "NCCL_NET=IB selects the IB plugin",
        (true, false) => "IB is the network here (NCCL_NET=Socket selects sockets)",
        (false, true) => "NCCL_NET=Socket selects the socket plugin",
        (false, false) => "no active IB port: the socket plugin is used",
    };
    for n in other.iter_mut() {
        n.unused.get_or_insert(why);
    }
    chosen.extend(other);
    let (mut used, unused): (Vec<NicProbe>, Vec<NicProbe>) =
        chosen.into_iter().partition(|n| n.unused.is_none());
    // The socket plugin numbers its devices from 0 and reports the number as guid.
    for (i, n) in used.iter_mut().enumerate() {
        if n.kind == NicKind::Socket {
            n.guid = i as u64;
        }
    }
    used.extend(unused);
    used
}

/// Every local address, by interface name (empty if getifaddrs fails).
pub fn local_addrs() -> Vec<(String, IpAddr)> {
    crate::bootstrap::interface::interface_addrs()
        .map(|v| v.into_iter().map(|a| (a.name, a.ip)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_sysfs_values() {
        assert_eq!(ib_rate_mbps("400 Gb/sec (4X NDR)"), Some(400_000));
        assert_eq!(ib_rate_mbps("56 Gb/sec (4X FDR)"), Some(56_000));
        assert_eq!(ib_rate_mbps("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(ib_rate_mbps("x"), None);
        assert_eq!(ib_guid("b859:9f03:00d6:a2c6"), 0xb859_9f03_00d6_a2c6);
    }
}
