//! The topology graph: typed nodes joined by typed links with a bandwidth, as NCCL's
//! `ncclTopoSystem` holds them.
//!
//! Nodes keep the facts their XML element carried (bus ids, PCI ids, link speed strings,
//! NVLink counts) so that a topology read from NCCL's XML writes back to the same XML;
//! links are derived from those facts by [`Topology::add_link`] calls made while loading.
//! Bandwidths are in GB/s, as in NCCL.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Bandwidth of a path that stays on one device (NCCL's `LOC_BW`).
pub const LOC_BW: f32 = 5000.0;

/// Per-link NVLink bandwidth in GB/s for a GPU of compute capability `sm` (NCCL's
/// `ncclTopoNVLinkBw`: SM60 18, SM70/80 20, SM86 12, SM90 20.6, SM100 40.1).
pub fn nvlink_bw(sm: u32) -> f32 {
    match sm {
        100.. => 40.1,
        90.. => 20.6,
        86 => 12.0,
        80.. => 20.0,
        70.. => 20.0,
        60.. => 18.0,
        _ => 20.0,
    }
}

/// PCIe bandwidth in GB/s for a `link_speed` string as sysfs and NCCL write it and a lane
/// count: lanes x per-lane rate (0.1 Gb/s units) / 80. Width 0 means "unknown" and counts as
/// 16 lanes; an unknown speed string counts as Gen3, both as NCCL does.
pub fn pci_bw(link_speed: &str, link_width: u32) -> f32 {
    let width = if link_width == 0 { 16 } else { link_width };
    let per_lane: u32 = pci_gen_rate(link_speed);
    (width as f32) * (per_lane as f32) / 80.0
}

/// Per-lane rate in units of 100 Mb/s (NCCL's `kvDictPciGen`), matched by prefix.
fn pci_gen_rate(link_speed: &str) -> u32 {
    const TABLE: [(&str, u32); 11] = [
        ("2.5 GT/s PCIe", 15),
        ("5.0 GT/s PCIe", 30),
        ("8.0 GT/s PCIe", 60),
        ("16.0 GT/s PCIe", 120),
        ("32.0 GT/s PCIe", 240),
        ("64.0 GT/s PCIe", 480),
        ("2.5 GT/s", 15),
        ("5 GT/s", 30),
        ("8 GT/s", 60),
        ("16 GT/s", 120),
        ("32 GT/s", 240),
    ];
    TABLE
        .iter()
        .find(|(k, _)| link_speed.starts_with(k))
        .map_or(60, |(_, v)| *v)
}

/// Bus id as NCCL's `busIdToInt64` reads it: the hex digits up to the first other character,
/// ignoring `:` and `.`.
pub fn busid_to_u64(busid: &str) -> u64 {
    let mut v: u64 = 0;
    let mut digits = 0u32;
    for c in busid.chars() {
        if c == ':' || c == '.' {
            continue;
        }
        let Some(d) = c.to_digit(16) else { break };
        if digits == 16 {
            break;
        }
        v = (v << 4) | u64::from(d);
        digits = digits.saturating_add(1);
    }
    v
}

/// Node types, numbered as NCCL numbers them (GPU 0 ... NET 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    Gpu = 0,
    Pci = 1,
    Nvs = 2,
    Cpu = 3,
    Nic = 4,
    Net = 5,
}

impl NodeKind {
    /// NCCL's name (`topoNodeTypeStr`).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Gpu => "GPU",
            NodeKind::Pci => "PCI",
            NodeKind::Nvs => "NVS",
            NodeKind::Cpu => "CPU",
            NodeKind::Nic => "NIC",
            NodeKind::Net => "NET",
        }
    }
}

/// Link types; the values match the path types they become (NCCL keeps them aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkType {
    Loc = 0,
    Nvl = 1,
    C2c = 3,
    Pci = 4,
    Sys = 9,
    Net = 10,
}

impl LinkType {
    /// NCCL's name (`topoLinkTypeStr`).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkType::Loc => "LOC",
            LinkType::Nvl => "NVL",
            LinkType::C2c => "C2C",
            LinkType::Pci => "PCI",
            LinkType::Sys => "SYS",
            LinkType::Net => "NET",
        }
    }

    /// The path type a path made of this one link has.
    pub fn as_path(self) -> PathType {
        match self {
            LinkType::Loc => PathType::Loc,
            LinkType::Nvl => PathType::Nvl,
            LinkType::C2c => PathType::C2c,
            LinkType::Pci => PathType::Pix,
            LinkType::Sys => PathType::Sys,
            LinkType::Net => PathType::Net,
        }
    }
}

/// Path types, from closest to farthest, numbered as in NCCL 2.28 (`PATH_LOC` 0 ...
/// `PATH_DIS` 11). A path's type is the worst of its links, with the PCI refinements
/// described in [`crate::topo::paths`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathType {
    /// The same device.
    Loc = 0,
    /// Direct NVLink (possibly through NVSwitches).
    Nvl = 1,
    /// NVLink through one intermediate GPU.
    Nvb = 2,
    /// Chip-to-chip link between a GPU and its CPU (Grace Hopper).
    C2c = 3,
    /// At most one PCIe switch.
    Pix = 4,
    /// Several PCIe switches, not through the host bridge.
    Pxb = 5,
    /// GPU to NIC through C2C to the CPU, then PCIe to the NIC.
    P2c = 6,
    /// GPU to NIC through another GPU over NVLink.
    Pxn = 7,
    /// Through a PCIe host bridge (the CPU).
    Phb = 8,
    /// Through the inter-socket link (QPI/UPI/xGMI).
    Sys = 9,
    /// Through the network.
    Net = 10,
    /// No path.
    Dis = 11,
}

impl PathType {
    /// Every type, in order.
    pub const ALL: [PathType; 12] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::P2c,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
        PathType::Net,
        PathType::Dis,
    ];

    /// NCCL's name (`topoPathTypeStr`), also what `NCCL_P2P_LEVEL` accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::C2c => "C2C",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::P2c => "P2C",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
            PathType::Net => "NET",
            PathType::Dis => "DIS",
        }
    }

    /// Parses a name as `NCCL_P2P_LEVEL` / `NCCL_NET_GDR_LEVEL` do: a type name, or one of the
    /// old numeric levels 0..=5 (LOC, PIX, PXB, PHB, SYS, SYS; larger numbers mean SYS).
    pub fn parse_level(s: &str) -> Option<PathType> {
        if let Some(t) = PathType::ALL
            .iter()
            .find(|t| t.as_str() == s && **t <= PathType::Sys)
        {
            return Some(*t);
        }
        let n: u32 = s.trim().parse().ok()?;
        Some(match n {
            0 => PathType::Loc,
            1 => PathType::Pix,
            2 => PathType::Pxb,
            3 => PathType::Phb,
            _ => PathType::Sys,
        })
    }

    /// The next farther type, saturating at `Dis`.
    pub fn next(self) -> PathType {
        PathType::ALL
            .get((self as usize).saturating_add(1))
            .copied()
            .unwrap_or(PathType::Dis)
    }
}

impl fmt::Display for PathType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// CPU architecture (`arch` attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuArch {
    X86,
    Power,
    Arm,
    Unknown,
}

/// CPU vendor (`vendor` attribute, x86 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuVendor {
    Intel,
    Amd,
    Zhaoxin,
    Unknown,
}

/// A CPU socket / NUMA domain, as the `<cpu>` element describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuInfo {
    pub numa_id: i32,
    pub host_hash: Option<String>,
    pub affinity: Option<String>,
    pub arch: String,
    pub vendor: Option<String>,
    pub family_id: Option<u32>,
    pub model_id: Option<u32>,
}

impl CpuInfo {
    pub fn arch_kind(&self) -> CpuArch {
        match self.arch.as_str() {
            "x86_64" => CpuArch::X86,
            "ppc64" => CpuArch::Power,
            "arm64" | "aarch64" => CpuArch::Arm,
            _ => CpuArch::Unknown,
        }
    }

    pub fn vendor_kind(&self) -> CpuVendor {
        match self.vendor.as_deref() {
            Some("GenuineIntel") => CpuVendor::Intel,
            Some("AuthenticAMD") => CpuVendor::Amd,
            Some("CentaurHauls") | Some("  Shanghai  ") => CpuVendor::Zhaoxin,
            _ => CpuVendor::Unknown,
        }
    }

    /// Bandwidth of the link between two sockets of this kind (NCCL's
    /// `ncclTopoGetInterCpuBw`): Power9 32, Arm 6, Intel by generation (BDW 6, SKL 10,
    /// SPR 22, EMR+ 40 from family 6 model ids), AMD 16, Zhaoxin 6 (Yongfeng 9), else LOC.
    pub fn inter_socket_bw(&self) -> f32 {
        match (self.arch_kind(), self.vendor_kind()) {
            (CpuArch::Power, _) => 32.0,
            (CpuArch::Arm, _) => 6.0,
            (CpuArch::X86, CpuVendor::Intel) => {
                let family = self.family_id.unwrap_or(0);
                let model = self.model_id.unwrap_or(0);
                if family == 6 && model >= 0xCF {
                    40.0
                } else if family == 6 && model >= 0x8F {
                    22.0
                } else if family == 6 && model >= 0x55 {
                    10.0
                } else {
                    6.0
                }
            }
            (CpuArch::X86, CpuVendor::Amd) => 16.0,
            (CpuArch::X86, CpuVendor::Zhaoxin) => {
                if self.family_id == Some(7) && self.model_id == Some(0x5B) {
                    9.0
                } else {
                    6.0
                }
            }
            _ => LOC_BW,
        }
    }
}

/// The PCI identity of a device or switch, as its `<pci>` element describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciInfo {
    pub busid: String,
    pub class: String,
    pub vendor: Option<String>,
    pub device: Option<String>,
    pub subsystem_vendor: Option<String>,
    pub subsystem_device: Option<String>,
    pub link_speed: String,
    pub link_width: u32,
}

impl PciInfo {
    /// Bandwidth of the link to the parent, from speed and width.
    pub fn bw(&self) -> f32 {
        pci_bw(&self.link_speed, self.link_width)
    }
}

/// One `<nvlink>` element of a GPU: `count` links to `target` (a bus id) of PCI class `tclass`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvLinkSpec {
    pub target: String,
    pub count: u32,
    pub tclass: String,
}

/// One `<c2c>` element of a GPU: `count` links of `bw_mbps` MB/s each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct C2cSpec {
    pub count: u32,
    pub bw_mbps: u32,
}

/// A GPU, as its `<gpu>` element and enclosing `<pci>` describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    pub dev: i32,
    pub rank: i32,
    pub sm: u32,
    pub gdr: bool,
    pub pci: PciInfo,
    pub nvlinks: Vec<NvLinkSpec>,
    pub c2c: Vec<C2cSpec>,
}

/// A network device (`<net>` element): one port of a NIC as the net plugin reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct NetInfo {
    pub name: Option<String>,
    pub dev: i32,
    /// Port speed in Mb/s as written in the XML (bandwidth = speed / 8000 GB/s).
    pub speed_mbps: i64,
    pub latency: f32,
    pub port: i32,
    pub guid: Option<String>,
    pub maxconn: Option<i64>,
    pub gdr: bool,
    pub coll: bool,
    /// Attributes weft does not interpret but keeps so that a rewrite loses nothing.
    pub extra: Vec<(String, String)>,
}

impl NetInfo {
    /// Bandwidth in GB/s; a non-positive speed (some NICs report -1) counts as 10 Gb/s.
    pub fn bw(&self) -> f32 {
        let mbps = if self.speed_mbps <= 0 {
            10_000
        } else {
            self.speed_mbps
        };
        mbps as f32 / 8000.0
    }
}

/// What a node is, with the facts needed to write it back.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeData {
    Gpu(GpuInfo),
    /// A PCIe switch (or any bridge); `links` are its `<pcilink>` targets.
    Pci {
        pci: PciInfo,
        pcilinks: Vec<String>,
    },
    /// All NVSwitches of a host, merged into one node as NCCL does.
    Nvs,
    Cpu(CpuInfo),
    /// A NIC; `pci` is `None` for a `<nic>` placed directly under its `<cpu>`.
    Nic {
        pci: Option<PciInfo>,
    },
    Net(NetInfo),
}

/// A directed link to node `to`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub to: usize,
    pub kind: LinkType,
    pub bw: f32,
}

/// A node of the graph. `host` is the index of its host (distinct `host_hash` values in file
/// order); `parent` is the node it hangs under in the XML tree (CPU for a top-level PCI
/// device, a switch for devices below it, the NIC for a NET).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub host: usize,
    pub parent: Option<usize>,
    pub data: NodeData,
    pub links: Vec<Link>,
}

impl Node {
    pub fn gpu(&self) -> Option<&GpuInfo> {
        match &self.data {
            NodeData::Gpu(g) => Some(g),
            _ => None,
        }
    }

    pub fn cpu(&self) -> Option<&CpuInfo> {
        match &self.data {
            NodeData::Cpu(c) => Some(c),
            _ => None,
        }
    }

    pub fn net(&self) -> Option<&NetInfo> {
        match &self.data {
            NodeData::Net(n) => Some(n),
            _ => None,
        }
    }

    /// Index in `links` of the first link to `to` of type `kind`.
    pub fn link_to(&self, to: usize, kind: LinkType) -> Option<usize> {
        self.links.iter().position(|l| l.to == to && l.kind == kind)
    }
}

/// A whole system: every host's nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// Host hashes in order of first appearance; `Node::host` indexes this.
    pub hosts: Vec<Option<String>>,
}

impl Topology {
    /// Appends a node and returns its index.
    pub fn add_node(
        &mut self,
        kind: NodeKind,
        host: usize,
        parent: Option<usize>,
        data: NodeData,
    ) -> usize {
        let index = self.nodes.len();
        self.nodes.push(Node {
            kind,
            host,
            parent,
            data,
            links: Vec::new(),
        });
        index
    }

    /// Adds `bw` to the link `from -> to` of type `kind`, creating it if needed, and keeps
    /// `from`'s links sorted by decreasing bandwidth (NCCL aggregates parallel NVLinks this
    /// way, and its search tries links in this order).
    pub fn add_link(&mut self, from: usize, to: usize, kind: LinkType, bw: f32) {
        let Some(node) = self.nodes.get_mut(from) else {
            return;
        };
        match node.links.iter_mut().find(|l| l.to == to && l.kind == kind) {
            Some(link) => link.bw += bw,
            None => node.links.push(Link { to, kind, bw }),
        }
        // Stable, so equal bandwidths keep their insertion order as in NCCL.
        node.links.sort_by(|a, b| {
            b.bw.partial_cmp(&a.bw)
                .unwrap_or(core::cmp::Ordering::Equal)
        });
    }

    /// Adds the link in both directions.
    pub fn connect(&mut self, a: usize, b: usize, kind: LinkType, bw: f32) {
        self.add_link(a, b, kind, bw);
        self.add_link(b, a, kind, bw);
    }

    /// Indices of the nodes of `kind`, in order. Per-kind indices (GPU 0, GPU 1...) used
    /// throughout are positions in this list.
    pub fn of_kind(&self, kind: NodeKind) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind == kind)
            .map(|(i, _)| i)
            .collect()
    }

    /// The node index of the GPU with `rank`.
    pub fn gpu_by_rank(&self, rank: i32) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.gpu().is_some_and(|g| g.rank == rank))
    }

    /// The CPU above `node` in the PCI tree, following PCI links up through switches only.
    pub fn local_cpu_up(&self, node: usize) -> Option<usize> {
        let mut cur = node;
        let mut guard = self.nodes.len();
        loop {
            let n = self.nodes.get(cur)?;
            if n.kind == NodeKind::Cpu {
                return Some(cur);
            }
            cur = n.parent?;
            guard = guard.checked_sub(1)?;
        }
    }

    /// Architecture/vendor of the first CPU (NCCL assumes all sockets are alike).
    pub fn cpu_kind(&self) -> Option<(CpuArch, CpuVendor)> {
        self.nodes
            .iter()
            .find_map(|n| n.cpu())
            .map(|c| (c.arch_kind(), c.vendor_kind()))
    }

    /// Connects all CPUs of the same host pairwise with SYS links (NCCL's
    /// `ncclTopoConnectCpus`).
    pub fn connect_cpus(&mut self) {
        let cpus = self.of_kind(NodeKind::Cpu);
        for &a in &cpus {
            for &b in &cpus {
                let (Some(na), Some(nb)) = (self.nodes.get(a), self.nodes.get(b)) else {
                    continue;
                };
                if a == b || na.host != nb.host {
                    continue;
                }
                let bw = na.cpu().map_or(LOC_BW, CpuInfo::inter_socket_bw);
                self.add_link(a, b, LinkType::Sys, bw);
            }
        }
    }

    /// NCCL's id of a node within its host (`ncclTopoNode::id` without the host byte): the
    /// bus id for PCI devices and GPUs, the NUMA id for CPUs, the device number for NETs.
    pub fn local_id(&self, node: usize) -> u64 {
        const MASK: u64 = 0x00ff_ffff_ffff_ffff;
        let Some(n) = self.nodes.get(node) else {
            return 0;
        };
        let id = match &n.data {
            NodeData::Gpu(g) => busid_to_u64(&g.pci.busid),
            NodeData::Pci { pci, .. } => busid_to_u64(&pci.busid),
            NodeData::Nic { pci } => pci.as_ref().map_or(0, |p| busid_to_u64(&p.busid)),
            NodeData::Nvs => 0,
            NodeData::Cpu(c) => i64::from(c.numa_id) as u64,
            NodeData::Net(x) => i64::from(x.dev) as u64,
        };
        id & MASK
    }

    /// How NCCL names a node in its logs: `GPU/0-60`, `CPU/0-ffffffffffffff`, `NET/1-3`
    /// (type / host index - local id, both in hex).
    pub fn label(&self, node: usize) -> String {
        let (kind, host) = self
            .nodes
            .get(node)
            .map_or(("?", 0), |n| (n.kind.as_str(), n.host));
        alloc::format!("{kind}/{host:x}-{:x}", self.local_id(node))
    }

    /// Lowest and highest compute capability of the GPUs, `None` without GPUs.
    pub fn sm_range(&self) -> Option<(u32, u32)> {
        let mut it = self.nodes.iter().filter_map(|n| n.gpu()).map(|g| g.sm);
        let first = it.next()?;
        Some(it.fold((first, first), |(lo, hi), s| (lo.min(s), hi.max(s))))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nvlink_bw_per_architecture_matches_nccl() {
        assert_eq!(nvlink_bw(60), 18.0);
        assert_eq!(nvlink_bw(70), 20.0);
        assert_eq!(nvlink_bw(80), 20.0);
        assert_eq!(nvlink_bw(86), 12.0);
        assert_eq!(nvlink_bw(89), 20.0);
        assert_eq!(nvlink_bw(90), 20.6);
        assert_eq!(nvlink_bw(100), 40.1);
        assert_eq!(nvlink_bw(120), 40.1);
        assert_eq!(nvlink_bw(50), 20.0);
    }

    #[test]
    fn pci_bw_from_speed_and_width() {
        assert_eq!(pci_bw("32.0 GT/s PCIe", 16), 48.0);
        assert_eq!(pci_bw("16.0 GT/s PCIe", 16), 24.0);
        assert_eq!(pci_bw("8.0 GT/s PCIe", 16), 12.0);
        assert_eq!(pci_bw("16 GT/s", 8), 12.0);
        // Unknown width counts as x16, unknown speed as Gen3.
        assert_eq!(pci_bw("32.0 GT/s PCIe", 0), 48.0);
        assert_eq!(pci_bw("Unknown", 4), 3.0);
    }

    #[test]
    fn inter_socket_bw_by_cpu_model() {
        let mut c = CpuInfo {
            numa_id: 0,
            host_hash: None,
            affinity: None,
            arch: "x86_64".into(),
            vendor: Some("GenuineIntel".into()),
            family_id: Some(6),
            model_id: Some(0x8F),
        };
        assert_eq!(c.inter_socket_bw(), 22.0);
        c.model_id = Some(0xCF);
        assert_eq!(c.inter_socket_bw(), 40.0);
        c.model_id = Some(0x55);
        assert_eq!(c.inter_socket_bw(), 10.0);
        c.model_id = Some(0x4F);
        assert_eq!(c.inter_socket_bw(), 6.0);
        c.vendor = Some("AuthenticAMD".into());
        assert_eq!(c.inter_socket_bw(), 16.0);
        c.arch = "arm64".into();
        assert_eq!(c.inter_socket_bw(), 6.0);
        c.arch = "ppc64".into();
        assert_eq!(c.inter_socket_bw(), 32.0);
    }

    #[test]
    fn path_level_names_and_old_numbers() {
        assert_eq!(PathType::parse_level("NVL"), Some(PathType::Nvl));
        assert_eq!(PathType::parse_level("PXB"), Some(PathType::Pxb));
        assert_eq!(PathType::parse_level("2"), Some(PathType::Pxb));
        assert_eq!(PathType::parse_level("3"), Some(PathType::Phb));
        assert_eq!(PathType::parse_level("9"), Some(PathType::Sys));
        assert_eq!(PathType::parse_level("NET"), None);
        assert_eq!(PathType::parse_level("bogus"), None);
        for (i, t) in PathType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
        }
    }

    #[test]
    fn links_aggregate_and_sort_by_bandwidth() {
        let mut t = Topology::default();
        let a = t.add_node(NodeKind::Nvs, 0, None, NodeData::Nvs);
        let b = t.add_node(NodeKind::Nvs, 0, None, NodeData::Nvs);
        let c = t.add_node(NodeKind::Nvs, 0, None, NodeData::Nvs);
        t.add_link(a, b, LinkType::Pci, 12.0);
        t.add_link(a, c, LinkType::Nvl, 20.6);
        t.add_link(a, c, LinkType::Nvl, 20.6);
        let links = &t.nodes[a].links;
        assert_eq!(links.len(), 2);
        assert_eq!(
            (links[0].to, links[0].kind, links[0].bw),
            (c, LinkType::Nvl, 41.2)
        );
        assert_eq!((links[1].to, links[1].kind), (b, LinkType::Pci));
    }
}
