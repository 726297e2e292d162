//! NCCL's topology XML (`<system version="1"><cpu ...><pci ...><gpu ...>...`) to and from
//! the [`Topology`] model.
//!
//! Reading follows NCCL's `ncclTopoGetSystemFromXml`: CPUs and their PCI trees first, then
//! NVLinks, C2C links and PCI links in a second pass (they name their targets by bus id),
//! then SYS links between the sockets of each host. Elements NCCL would skip are skipped
//! (a `<pci>` of an NVSwitch or of a GPU outside the communicator); elements and
//! attributes weft does not know are reported as [`XmlWarning`]s and ignored.
//! Writing produces what `NCCL_TOPO_DUMP_FILE` would, so each side loads the other's files.

pub use super::model::busid_to_u64;
use super::model::{
    C2cSpec, CpuInfo, GpuInfo, LOC_BW, LinkType, NetInfo, NodeData, NodeKind, NvLinkSpec, PciInfo,
    Topology, nvlink_bw,
};
use super::xml::{TextPos, XmlError, XmlNode};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// The only topology XML version NCCL reads and writes.
pub const TOPO_XML_VERSION: &str = "1";
/// PCI class of a bridge / PCIe switch.
pub const PCI_CLASS_BRIDGE: &str = "0x060400";
/// PCI class NCCL uses for an NVSwitch NVLink target.
pub const PCI_CLASS_NVSWITCH: &str = "0x068000";
/// PCI class NCCL uses for an NVLink to the CPU (Power9).
pub const PCI_CLASS_CPU: &str = "0x068001";
/// Bus id NCCL writes as the target of NVLinks to an NVSwitch it cannot name.
pub const NVSWITCH_TARGET: &str = "fffffff:ff:ff.0";

/// Most nodes a topology may have. NCCL allows 640 of each kind; path computation is
/// quadratic in the node count, so a hostile file is refused here rather than exhausting
/// memory later.
pub const MAX_TOPO_NODES: usize = 4096;

/// Something in the file that was ignored; the caller decides whether to log it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XmlWarning {
    pub element: String,
    /// The attribute, when an attribute was ignored; `None` for a whole element.
    pub attribute: Option<String>,
    pub pos: Option<TextPos>,
}

impl fmt::Display for XmlWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.attribute {
            Some(a) => write!(f, "ignoring unknown attribute `{a}` of <{}>", self.element)?,
            None => write!(f, "ignoring unknown element <{}>", self.element)?,
        }
        if let Some(p) = self.pos {
            write!(f, " at {p}")?;
        }
        Ok(())
    }
}

/// Why a topology file could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopoXmlError {
    /// Not well-formed XML.
    Xml(XmlError),
    /// The root is not `<system>`.
    WrongRoot { found: String },
    /// `<system version=...>` is not the version NCCL writes.
    BadVersion { found: Option<String> },
    /// A required attribute is missing.
    MissingAttr {
        element: String,
        attr: &'static str,
        pos: Option<TextPos>,
    },
    /// An attribute has a value that cannot be read.
    BadAttr {
        element: String,
        attr: &'static str,
        value: String,
        pos: Option<TextPos>,
    },
    /// More than [`MAX_TOPO_NODES`] devices: `element` is the first one past the limit
    /// (loading stops there).
    TooManyNodes {
        element: String,
        pos: Option<TextPos>,
    },
}

impl From<XmlError> for TopoXmlError {
    fn from(e: XmlError) -> Self {
        TopoXmlError::Xml(e)
    }
}

struct At(Option<TextPos>);
impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, " at {p}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for TopoXmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopoXmlError::Xml(e) => e.fmt(f),
            TopoXmlError::WrongRoot { found } => {
                write!(
                    f,
                    "topology XML: root element is <{found}>, expected <system> (is this a graph file?)"
                )
            }
            TopoXmlError::BadVersion { found } => write!(
                f,
                "topology XML: <system version=\"{}\"> is not supported, only version {TOPO_XML_VERSION}",
                found.as_deref().unwrap_or("(missing)")
            ),
            TopoXmlError::MissingAttr { element, attr, pos } => {
                write!(
                    f,
                    "topology XML: <{element}>{} has no `{attr}` attribute",
                    At(*pos)
                )
            }
            TopoXmlError::TooManyNodes { element, pos } => write!(
                f,
                "topology XML: <{element}>{} is device {}, more than the {MAX_TOPO_NODES} weft accepts",
                At(*pos),
                MAX_TOPO_NODES.saturating_add(1)
            ),
            TopoXmlError::BadAttr {
                element,
                attr,
                value,
                pos,
            } => {
                write!(
                    f,
                    "topology XML: <{element}>{}: `{attr}=\"{value}\"` is not a valid value",
                    At(*pos)
                )
            }
        }
    }
}

/// The value of `attr`, or the error naming the element and its position.
pub(crate) fn req<'a>(x: &'a XmlNode, attr: &'static str) -> Result<&'a str, TopoXmlError> {
    x.attr(attr).ok_or_else(|| TopoXmlError::MissingAttr {
        element: x.name.clone(),
        attr,
        pos: x.pos,
    })
}

/// The error for an attribute whose value does not parse.
pub(crate) fn bad(x: &XmlNode, attr: &'static str, value: &str) -> TopoXmlError {
    TopoXmlError::BadAttr {
        element: x.name.clone(),
        attr,
        value: value.to_string(),
        pos: x.pos,
    }
}

/// Parses an integer as C's `strtol(s, NULL, 0)` would for well-formed input: decimal,
/// `0x` hex, optional sign.
fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => t.parse::<i64>().ok()?,
    };
    if neg { v.checked_neg() } else { Some(v) }
}

fn req_int(x: &XmlNode, attr: &'static str) -> Result<i64, TopoXmlError> {
    let v = req(x, attr)?;
    parse_int(v).ok_or_else(|| bad(x, attr, v))
}

fn opt_int(x: &XmlNode, attr: &'static str, default: i64) -> Result<i64, TopoXmlError> {
    match x.attr(attr) {
        Some(v) => parse_int(v).ok_or_else(|| bad(x, attr, v)),
        None => Ok(default),
    }
}

fn to_i32(x: &XmlNode, attr: &'static str, v: i64) -> Result<i32, TopoXmlError> {
    i32::try_from(v).map_err(|_| bad(x, attr, &format!("{v}")))
}

fn to_u32(x: &XmlNode, attr: &'static str, v: i64) -> Result<u32, TopoXmlError> {
    u32::try_from(v).map_err(|_| bad(x, attr, &format!("{v}")))
}

/// What an element's class says it is (NCCL's `kvDictPciClass`, matched by prefix; unknown
/// classes count as PCI switches, as in NCCL).
fn class_kind(class: &str) -> NodeKind {
    if class.starts_with(PCI_CLASS_BRIDGE) || class.starts_with("0x080100") {
        NodeKind::Pci
    } else if class.starts_with(PCI_CLASS_NVSWITCH) {
        NodeKind::Nvs
    } else if class.starts_with(PCI_CLASS_CPU) {
        NodeKind::Cpu
    } else if class.starts_with("0x03") {
        NodeKind::Gpu
    } else if class.starts_with("0x02") {
        NodeKind::Nic
    } else {
        NodeKind::Pci
    }
}

struct Loader {
    topo: Topology,
    warnings: Vec<XmlWarning>,
}

const CPU_ATTRS: &[&str] = &[
    "host_hash",
    "numaid",
    "affinity",
    "arch",
    "vendor",
    "familyid",
    "modelid",
];
const PCI_ATTRS: &[&str] = &[
    "busid",
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "link_speed",
    "link_width",
    "vendor_id",
];
const GPU_ATTRS: &[&str] = &["dev", "sm", "rank", "gdr", "mlopart"];
const NET_KNOWN: &[&str] = &[
    "name", "dev", "latency", "speed", "port", "guid", "maxconn", "gdr", "coll",
];
/// Attributes NCCL writes on `<net>` that weft keeps without interpreting.
const NET_KEPT: &[&str] = &["rail", "plane", "net", "gin", "rma", "keep", "vdev"];

impl Loader {
    /// Adds the node that element `x` describes, or refuses the file when it would be one
    /// too many: counting while loading stops a hostile file before the work of linking
    /// all its devices.
    fn add_node(
        &mut self,
        x: &XmlNode,
        kind: NodeKind,
        host: usize,
        parent: Option<usize>,
        data: NodeData,
    ) -> Result<usize, TopoXmlError> {
        if self.topo.nodes.len() >= MAX_TOPO_NODES {
            return Err(TopoXmlError::TooManyNodes {
                element: x.name.clone(),
                pos: x.pos,
            });
        }
        Ok(self.topo.add_node(kind, host, parent, data))
    }

    fn check_attrs(&mut self, x: &XmlNode, known: &[&str]) {
        for (k, _) in &x.attrs {
            if !known.contains(&k.as_str()) {
                self.warnings.push(XmlWarning {
                    element: x.name.clone(),
                    attribute: Some(k.clone()),
                    pos: x.pos,
                });
            }
        }
    }

    fn unknown_element(&mut self, x: &XmlNode) {
        self.warnings.push(XmlWarning {
            element: x.name.clone(),
            attribute: None,
            pos: x.pos,
        });
    }

    fn host_index(&mut self, hash: Option<&str>) -> usize {
        let key = hash.map(|h| h.to_string());
        match self.topo.hosts.iter().position(|h| *h == key) {
            Some(i) => i,
            None => {
                self.topo.hosts.push(key);
                self.topo.hosts.len().saturating_sub(1)
            }
        }
    }

    fn add_cpu(&mut self, x: &XmlNode) -> Result<(), TopoXmlError> {
        self.check_attrs(x, CPU_ATTRS);
        let numa_id = to_i32(x, "numaid", req_int(x, "numaid")?)?;
        let arch = req(x, "arch")?.to_string();
        let family_id = match x.attr("familyid") {
            Some(v) => Some(to_u32(
                x,
                "familyid",
                parse_int(v).ok_or_else(|| bad(x, "familyid", v))?,
            )?),
            None => None,
        };
        let model_id = match x.attr("modelid") {
            Some(v) => Some(to_u32(
                x,
                "modelid",
                parse_int(v).ok_or_else(|| bad(x, "modelid", v))?,
            )?),
            None => None,
        };
        let info = CpuInfo {
            numa_id,
            host_hash: x.attr("host_hash").map(|s| s.to_string()),
            affinity: x.attr("affinity").map(|s| s.to_string()),
            arch,
            vendor: x.attr("vendor").map(|s| s.to_string()),
            family_id,
            model_id,
        };
        let host = self.host_index(x.attr("host_hash"));
        let cpu = self.add_node(x, NodeKind::Cpu, host, None, NodeData::Cpu(info))?;
        for child in &x.children {
            match child.name.as_str() {
                "pci" => self.add_pci(child, cpu, host)?,
                "nic" => {
                    // NCCL merges every <nic> of a socket into one node; weft keeps one node
                    // per element (same links, same paths) so the file writes back unchanged.
                    let nic = self.add_node(
                        child,
                        NodeKind::Nic,
                        host,
                        Some(cpu),
                        NodeData::Nic { pci: None },
                    )?;
                    self.topo.connect(cpu, nic, LinkType::Pci, LOC_BW);
                    self.add_nets(child, nic, host)?;
                }
                _ => self.unknown_element(child),
            }
        }
        Ok(())
    }

    fn pci_info(&mut self, x: &XmlNode) -> Result<PciInfo, TopoXmlError> {
        self.check_attrs(x, PCI_ATTRS);
        let busid = req(x, "busid")?.to_string();
        let class = req(x, "class")?.to_string();
        let link_width = to_u32(x, "link_width", req_int(x, "link_width")?)?;
        let link_speed = req(x, "link_speed")?.to_string();
        let s = |k: &str| x.attr(k).map(|v| v.to_string());
        Ok(PciInfo {
            busid,
            class,
            vendor: s("vendor"),
            device: s("device"),
            subsystem_vendor: s("subsystem_vendor"),
            subsystem_device: s("subsystem_device"),
            link_speed,
            link_width,
        })
    }

    fn add_pci(&mut self, x: &XmlNode, parent: usize, host: usize) -> Result<(), TopoXmlError> {
        let pci = self.pci_info(x)?;
        let bw = pci.bw();
        if let Some(g) = x.children_named("gpu").next() {
            // A GPU outside the communicator has no rank: NCCL skips it.
            if g.attr("rank").is_none() {
                return Ok(());
            }
            self.check_attrs(g, GPU_ATTRS);
            let mut nvlinks = Vec::new();
            let mut c2c = Vec::new();
            for sub in &g.children {
                match sub.name.as_str() {
                    "nvlink" => {
                        self.check_attrs(sub, &["target", "count", "tclass"]);
                        nvlinks.push(NvLinkSpec {
                            target: req(sub, "target")?.to_string(),
                            count: to_u32(sub, "count", req_int(sub, "count")?)?,
                            tclass: req(sub, "tclass")?.to_string(),
                        });
                    }
                    "c2c" => {
                        self.check_attrs(sub, &["count", "bw"]);
                        c2c.push(C2cSpec {
                            count: to_u32(sub, "count", req_int(sub, "count")?)?,
                            bw_mbps: to_u32(sub, "bw", req_int(sub, "bw")?)?,
                        });
                    }
                    _ => self.unknown_element(sub),
                }
            }
            let info = GpuInfo {
                dev: to_i32(g, "dev", req_int(g, "dev")?)?,
                rank: to_i32(g, "rank", req_int(g, "rank")?)?,
                sm: to_u32(g, "sm", req_int(g, "sm")?)?,
                gdr: req_int(g, "gdr")? != 0,
                pci,
                nvlinks,
                c2c,
            };
            let gpu = self.add_node(g, NodeKind::Gpu, host, Some(parent), NodeData::Gpu(info))?;
            self.topo.connect(gpu, parent, LinkType::Pci, bw);
            return Ok(());
        }
        if let Some(nic_x) = x.children_named("nic").next() {
            // NCCL merges <pci> elements with the same bus id into one NIC; such files do
            // not occur in practice, and one node per element keeps the round trip exact.
            let nic = self.add_node(
                nic_x,
                NodeKind::Nic,
                host,
                Some(parent),
                NodeData::Nic { pci: Some(pci) },
            )?;
            self.topo.connect(nic, parent, LinkType::Pci, bw);
            return self.add_nets(nic_x, nic, host);
        }
        if class_kind(&pci.class) != NodeKind::Pci {
            // NCCL ignores NVSwitch / GPU / NIC functions without a matching child.
            return Ok(());
        }
        let pcilinks: Vec<String> = x
            .children_named("pcilink")
            .filter_map(|l| l.attr("target").map(|t| t.to_string()))
            .collect();
        let sw = self.add_node(
            x,
            NodeKind::Pci,
            host,
            Some(parent),
            NodeData::Pci { pci, pcilinks },
        )?;
        self.topo.connect(sw, parent, LinkType::Pci, bw);
        for child in &x.children {
            match child.name.as_str() {
                "pci" => self.add_pci(child, sw, host)?,
                "pcilink" => self.check_attrs(child, &["target"]),
                _ => self.unknown_element(child),
            }
        }
        Ok(())
    }

    fn add_nets(&mut self, x: &XmlNode, nic: usize, host: usize) -> Result<(), TopoXmlError> {
        for n in &x.children {
            if n.name != "net" {
                self.unknown_element(n);
                continue;
            }
            // A <net> without `dev` is not a device of this process (NCCL skips it), and
            // one marked net="0" is a GIN/RMA-only device.
            if n.attr("dev").is_none() || opt_int(n, "net", 1)? == 0 {
                continue;
            }
            let mut extra = Vec::new();
            for (k, v) in &n.attrs {
                if NET_KEPT.contains(&k.as_str()) {
                    extra.push((k.clone(), v.clone()));
                } else if !NET_KNOWN.contains(&k.as_str()) {
                    self.warnings.push(XmlWarning {
                        element: n.name.clone(),
                        attribute: Some(k.clone()),
                        pos: n.pos,
                    });
                }
            }
            let latency = match n.attr("latency") {
                Some(v) => v.trim().parse::<f32>().map_err(|_| bad(n, "latency", v))?,
                None => 0.0,
            };
            let info = NetInfo {
                name: n.attr("name").map(|s| s.to_string()),
                dev: to_i32(n, "dev", req_int(n, "dev")?)?,
                speed_mbps: opt_int(n, "speed", 0)?,
                latency,
                port: to_i32(n, "port", opt_int(n, "port", 0)?)?,
                guid: n.attr("guid").map(|s| s.to_string()),
                maxconn: match n.attr("maxconn") {
                    Some(v) => Some(parse_int(v).ok_or_else(|| bad(n, "maxconn", v))?),
                    None => None,
                },
                gdr: opt_int(n, "gdr", 0)? != 0,
                coll: opt_int(n, "coll", 0)? != 0,
                extra,
            };
            let bw = info.bw();
            let net = self.add_node(n, NodeKind::Net, host, Some(nic), NodeData::Net(info))?;
            self.topo.connect(nic, net, LinkType::Net, bw);
        }
        Ok(())
    }

    /// Second pass: NVLink, C2C and PCI-to-PCI links, which name their far end by bus id.
    fn add_bus_links(&mut self) {
        let count = self.topo.nodes.len();
        let mut nvs_of_host: Vec<(usize, usize)> = Vec::new();
        for i in 0..count {
            let Some(node) = self.topo.nodes.get(i) else {
                continue;
            };
            let host = node.host;
            match &node.data {
                NodeData::Gpu(g) => {
                    let per_link = nvlink_bw(g.sm);
                    let nvlinks = g.nvlinks.clone();
                    let c2c = g.c2c.clone();
                    for l in nvlinks {
                        let bw = l.count as f32 * per_link;
                        match class_kind(&l.tclass) {
                            NodeKind::Gpu => {
                                let target = busid_to_u64(&l.target);
                                let peer = self.topo.nodes.iter().position(|n| {
                                    n.host == host
                                        && n.gpu()
                                            .is_some_and(|pg| busid_to_u64(&pg.pci.busid) == target)
                                });
                                if let Some(p) = peer {
                                    self.topo.add_link(i, p, LinkType::Nvl, bw);
                                }
                            }
                            NodeKind::Cpu => {
                                if let Some(cpu) = self.topo.local_cpu_up(i) {
                                    self.topo.connect(i, cpu, LinkType::Nvl, bw);
                                }
                            }
                            _ => {
                                let nvs = match nvs_of_host.iter().find(|(h, _)| *h == host) {
                                    Some((_, n)) => *n,
                                    None => {
                                        let n = self.topo.add_node(
                                            NodeKind::Nvs,
                                            host,
                                            None,
                                            NodeData::Nvs,
                                        );
                                        nvs_of_host.push((host, n));
                                        n
                                    }
                                };
                                self.topo.connect(i, nvs, LinkType::Nvl, bw);
                            }
                        }
                    }
                    for c in c2c {
                        let bw = (c.bw_mbps as f32) * (c.count as f32) / 1000.0;
                        if let Some(cpu) = self.topo.local_cpu_up(i) {
                            self.topo.connect(i, cpu, LinkType::C2c, bw);
                        }
                    }
                }
                NodeData::Pci { pcilinks, .. } => {
                    let targets: Vec<u64> = pcilinks.iter().map(|t| busid_to_u64(t)).collect();
                    for t in targets {
                        let peer = self.topo.nodes.iter().position(|n| {
                            n.host == host && matches!(&n.data, NodeData::Pci { pci, .. } if busid_to_u64(&pci.busid) == t)
                        });
                        if let Some(p) = peer {
                            self.topo.add_link(i, p, LinkType::Loc, LOC_BW);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Loads a topology from an XML tree. Returns the model and what was ignored.
pub fn topology_from_xml(root: &XmlNode) -> Result<(Topology, Vec<XmlWarning>), TopoXmlError> {
    if root.name != "system" {
        return Err(TopoXmlError::WrongRoot {
            found: root.name.clone(),
        });
    }
    match root.attr("version") {
        Some(v) if parse_int(v) == Some(1) => {}
        other => {
            return Err(TopoXmlError::BadVersion {
                found: other.map(|s| s.to_string()),
            });
        }
    }
    let mut loader = Loader {
        topo: Topology::default(),
        warnings: Vec::new(),
    };
    loader.check_attrs(root, &["version", "name"]);
    for child in &root.children {
        match child.name.as_str() {
            "cpu" => loader.add_cpu(child)?,
            _ => loader.unknown_element(child),
        }
    }
    loader.add_bus_links();
    loader.topo.connect_cpus();
    Ok((loader.topo, loader.warnings))
}

/// Parses topology XML text.
pub fn parse_topology(text: &str) -> Result<(Topology, Vec<XmlWarning>), TopoXmlError> {
    let root = XmlNode::parse(text)?;
    topology_from_xml(&root)
}

fn pci_element(p: &PciInfo) -> XmlNode {
    let mut x = XmlNode::new("pci")
        .with_attr("busid", p.busid.as_str())
        .with_attr("class", p.class.as_str());
    for (k, v) in [
        ("vendor", &p.vendor),
        ("device", &p.device),
        ("subsystem_vendor", &p.subsystem_vendor),
        ("subsystem_device", &p.subsystem_device),
    ] {
        if let Some(v) = v {
            x.set_attr(k, v.as_str());
        }
    }
    x.set_attr("link_speed", p.link_speed.as_str());
    x.set_attr("link_width", format!("{}", p.link_width));
    x
}

fn nic_element(topo: &Topology, nic: usize) -> XmlNode {
    let mut x = XmlNode::new("nic");
    for n in topo.nodes.iter().filter(|n| n.parent == Some(nic)) {
        let Some(net) = n.net() else { continue };
        let mut e = XmlNode::new("net");
        if let Some(name) = &net.name {
            e.set_attr("name", name.as_str());
        }
        e.set_attr("dev", format!("{}", net.dev));
        e.set_attr("latency", format!("{}", net.latency));
        e.set_attr("speed", format!("{}", net.speed_mbps));
        e.set_attr("port", format!("{}", net.port));
        if let Some(g) = &net.guid {
            e.set_attr("guid", g.as_str());
        }
        if let Some(m) = net.maxconn {
            e.set_attr("maxconn", format!("{m}"));
        }
        e.set_attr("gdr", if net.gdr { "1" } else { "0" });
        if net.coll {
            e.set_attr("coll", "1");
        }
        for (k, v) in &net.extra {
            e.set_attr(k, v.as_str());
        }
        x.children.push(e);
    }
    x
}

fn children_of(topo: &Topology, parent: usize) -> XmlNode {
    // Placeholder root collecting the elements of `parent`'s children, in node order.
    let mut holder = XmlNode::new("");
    for (i, n) in topo.nodes.iter().enumerate() {
        if n.parent != Some(parent) {
            continue;
        }
        match &n.data {
            NodeData::Pci { pci, pcilinks } => {
                let mut x = pci_element(pci);
                x.children = children_of(topo, i).children;
                for t in pcilinks {
                    x.children
                        .push(XmlNode::new("pcilink").with_attr("target", t.as_str()));
                }
                holder.children.push(x);
            }
            NodeData::Gpu(g) => {
                let mut x = pci_element(&g.pci);
                let mut gx = XmlNode::new("gpu")
                    .with_attr("dev", format!("{}", g.dev))
                    .with_attr("sm", format!("{}", g.sm))
                    .with_attr("rank", format!("{}", g.rank))
                    .with_attr("gdr", if g.gdr { "1" } else { "0" });
                for l in &g.nvlinks {
                    gx.children.push(
                        XmlNode::new("nvlink")
                            .with_attr("target", l.target.as_str())
                            .with_attr("count", format!("{}", l.count))
                            .with_attr("tclass", l.tclass.as_str()),
                    );
                }
                for c in &g.c2c {
                    gx.children.push(
                        XmlNode::new("c2c")
                            .with_attr("count", format!("{}", c.count))
                            .with_attr("bw", format!("{}", c.bw_mbps)),
                    );
                }
                x.children.push(gx);
                holder.children.push(x);
            }
            NodeData::Nic { pci: Some(p) } => {
                let mut x = pci_element(p);
                x.children.push(nic_element(topo, i));
                holder.children.push(x);
            }
            NodeData::Nic { pci: None } => holder.children.push(nic_element(topo, i)),
            NodeData::Cpu(_) | NodeData::Nvs | NodeData::Net(_) => {}
        }
    }
    holder
}

/// The XML tree NCCL would dump for `topo`.
pub fn topology_to_xml(topo: &Topology) -> XmlNode {
    let mut root = XmlNode::new("system").with_attr("version", TOPO_XML_VERSION);
    for (i, n) in topo.nodes.iter().enumerate() {
        let Some(c) = n.cpu() else { continue };
        let mut x = XmlNode::new("cpu");
        if let Some(h) = &c.host_hash {
            x.set_attr("host_hash", h.as_str());
        }
        x.set_attr("numaid", format!("{}", c.numa_id));
        if let Some(a) = &c.affinity {
            x.set_attr("affinity", a.as_str());
        }
        x.set_attr("arch", c.arch.as_str());
        if let Some(v) = &c.vendor {
            x.set_attr("vendor", v.as_str());
        }
        if let Some(f) = c.family_id {
            x.set_attr("familyid", format!("{f}"));
        }
        if let Some(m) = c.model_id {
            x.set_attr("modelid", format!("{m}"));
        }
        x.children = children_of(topo, i).children;
        root.children.push(x);
    }
    root
}

/// Writes `topo` as NCCL's topology XML text.
pub fn write_topology(topo: &Topology) -> String {
    topology_to_xml(topo).write()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn busid_and_int_parsing_match_nccl() {
        assert_eq!(busid_to_u64("0000:17:00.0"), 0x17000);
        assert_eq!(busid_to_u64("fffffff:ff:ff.0"), 0xfffffffffff0);
        assert_eq!(busid_to_u64("0001:a0:1f.7"), 0x1a01f7);
        assert_eq!(parse_int("0x10de"), Some(0x10de));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("207"), Some(207));
        assert_eq!(parse_int("x"), None);
    }

    #[test]
    fn missing_and_bad_attributes_name_element_attribute_and_line() {
        let text = "<system version=\"1\">\n  <cpu arch=\"x86_64\"/>\n</system>\n";
        assert_eq!(
            parse_topology(text).unwrap_err(),
            TopoXmlError::MissingAttr {
                element: "cpu".into(),
                attr: "numaid",
                pos: Some(TextPos { line: 2, column: 3 })
            }
        );
        let text = "<system version=\"1\">\n<cpu numaid=\"zero\" arch=\"x86_64\"/></system>";
        let err = parse_topology(text).unwrap_err();
        assert_eq!(
            err,
            TopoXmlError::BadAttr {
                element: "cpu".into(),
                attr: "numaid",
                value: "zero".into(),
                pos: Some(TextPos { line: 2, column: 1 })
            }
        );
        assert_eq!(
            format!("{err}"),
            "topology XML: <cpu> at line 2, column 1: `numaid=\"zero\"` is not a valid value"
        );
        assert_eq!(
            parse_topology("<graphs version=\"1\"/>").unwrap_err(),
            TopoXmlError::WrongRoot {
                found: "graphs".into()
            }
        );
        assert_eq!(
            parse_topology("<system version=\"2\"/>").unwrap_err(),
            TopoXmlError::BadVersion {
                found: Some("2".into())
            }
        );
    }

    #[test]
    fn too_many_devices_are_refused() {
        let system = "<system version=\"1\">";
        let cpu = "<cpu numaid=\"0\" arch=\"x86_64\"/>";
        let text = format!("{system}{}</system>", cpu.repeat(MAX_TOPO_NODES + 1));
        let column = system.len() + MAX_TOPO_NODES * cpu.len() + 1;
        assert_eq!(
            parse_topology(&text).unwrap_err(),
            TopoXmlError::TooManyNodes {
                element: "cpu".into(),
                pos: Some(TextPos {
                    line: 1,
                    column: column as u32
                }),
            }
        );
        let text = format!("{system}{}</system>", cpu.repeat(3));
        assert_eq!(parse_topology(&text).unwrap().0.nodes.len(), 3);
    }

    /// The `<pci>` element that opens GPU `i`'s.
    fn gpu_pci(i: usize) -> String {
        format!(
            "<pci busid=\"{:04x}:{:02x}:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">",
            i / 256,
            i % 256
        )
    }

    /// One CPU, then `n` GPUs of one line each (line 3 onwards).
    fn gpus(n: usize) -> String {
        let mut text = String::from("<system version=\"1\">\n<cpu numaid=\"0\" arch=\"x86_64\">\n");
        for i in 0..n {
            text.push_str(&gpu_pci(i));
            text.push_str(&format!(
                "<gpu dev=\"{i}\" sm=\"90\" rank=\"{i}\" gdr=\"1\"/></pci>\n"
            ));
        }
        text.push_str("</cpu>\n</system>\n");
        text
    }

    #[test]
    fn ten_thousand_gpus_are_refused_at_the_first_one_past_the_limit() {
        let e = parse_topology(&gpus(10_000)).unwrap_err();
        // Node 4097 is GPU 4095 (the CPU is the first node), on line 3 + 4095.
        let column = gpu_pci(4095).len() + 1;
        assert_eq!(
            e,
            TopoXmlError::TooManyNodes {
                element: "gpu".into(),
                pos: Some(TextPos {
                    line: 4098,
                    column: column as u32
                }),
            }
        );
        assert_eq!(
            format!("{e}"),
            format!(
                "topology XML: <gpu> at line 4098, column {column} is device 4097, more than the 4096 weft accepts"
            )
        );
        let (topo, _) = parse_topology(&gpus(MAX_TOPO_NODES - 1)).unwrap();
        assert_eq!(topo.of_kind(NodeKind::Gpu).len(), MAX_TOPO_NODES - 1);
    }

    #[test]
    fn unknown_elements_and_attributes_are_warnings() {
        let text = "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" color=\"red\"><fan/></cpu><psu/></system>";
        let (topo, warnings) = parse_topology(text).unwrap();
        assert_eq!(topo.nodes.len(), 1);
        let shown: Vec<String> = warnings.iter().map(|w| format!("{w}")).collect();
        assert_eq!(
            shown,
            [
                "ignoring unknown attribute `color` of <cpu> at line 1, column 21",
                "ignoring unknown element <fan> at line 1, column 63",
                "ignoring unknown element <psu> at line 1, column 75",
            ]
        );
    }
}
