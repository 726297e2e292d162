//! Topology detection: NCCL's `ncclTopoGetSystem` for one process that sees every GPU.
//!
//! The XML is built the way NCCL builds it, so that it is the file `NCCL_TOPO_DUMP_FILE`
//! would hold: each GPU and NIC starts as a `<pci>` element keyed by bus id; its sysfs
//! directory gives class, ids and link; then detection climbs toward the root complex, two
//! path components at a time (a PCIe switch is its upstream port: the downstream port in
//! between is skipped), inserting each element among its siblings in bus id order, and
//! stops at the first component that is not a PCI address, where the `<cpu>` of the
//! device's NUMA node is found or created. Link speed and width are the lower of the
//! device's and its port's `max_link_*`. GPUs are taken in NCCL's order (rank 0's GPU,
//! then the NICs, then the other GPUs, as NCCL's per-rank detection and fusion produce).
//!
//! The tree is then loaded by weft-core like any topology file.

use super::gpu::GpuProbe;
use super::nic::{NicInputs, NicProbe, probe_nics};
use super::sysfs::{
    SysRoot, base_name, c_strtol, is_bdf, link_speed_value, normalize_busid, read_attr,
};
use std::path::Path;
use weft_config::Settings;
use weft_core::topo::Topology;
use weft_core::topo::system_xml::{
    NVSWITCH_TARGET, PCI_CLASS_NVSWITCH, TOPO_XML_VERSION, TopoXmlError, XmlWarning,
    topology_from_xml,
};
use weft_core::topo::xml::XmlNode;

/// Something detection wants a person to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub level: log::Level,
    pub text: String,
}

impl Note {
    pub fn info(text: String) -> Note {
        Note {
            level: log::Level::Info,
            text,
        }
    }

    pub fn warn(text: String) -> Note {
        Note {
            level: log::Level::Warn,
            text,
        }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.level, self.text)
    }
}

/// What detection reads.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    pub root: SysRoot,
    /// The GPUs (from [`super::gpu::probe_gpus`] on a real machine).
    pub gpus: Vec<GpuProbe>,
    pub nics: NicInputs,
    /// `host_hash` written on every `<cpu>`.
    pub host_hash: u64,
    /// The `arch` attribute (`x86_64`, `arm64`, `ppc64`).
    pub arch: String,
}

impl DetectOptions {
    /// This machine: `/sys`, `/proc`, the CUDA driver, NVML, getifaddrs and the settings
    /// (`NCCL_SOCKET_IFNAME`, `NCCL_NET`). Notes about missing libraries go to `notes`.
    pub fn host(settings: &Settings, notes: &mut Vec<Note>) -> DetectOptions {
        let gpus = super::gpu::probe_gpus(notes);
        DetectOptions {
            root: SysRoot::host(),
            nics: NicInputs {
                addrs: super::nic::local_addrs(),
                // The same filter as bootstrap's and the socket backend's.
                ifname_filter: settings.net.socket.ifname.clone(),
                net_plugin: settings.net.nccl_net.clone(),
                have_gpus: !gpus.is_empty(),
            },
            gpus,
            host_hash: crate::bootstrap::identity::host_hash(),
            arch: host_arch().to_string(),
        }
    }
}

/// The `arch` NCCL writes for the machine this runs on.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        "powerpc64" => "ppc64",
        other => other,
    }
}

/// The result of detection.
#[derive(Debug, Clone)]
pub struct Detection {
    /// The topology XML, as NCCL would dump it.
    pub xml: XmlNode,
    pub topology: Topology,
    /// Every network device found, used ones first (`dev` order).
    pub nics: Vec<NicProbe>,
    pub notes: Vec<Note>,
}

/// Why detection failed: the XML it built does not load (a bug, or a sysfs value core
/// refuses); the message names the element and attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectError(pub TopoXmlError);

impl std::fmt::Display for DetectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "topology detection built XML that does not load: {}",
            self.0
        )
    }
}

impl std::error::Error for DetectError {}

/// An element under construction: attributes now, children by index, parent once placed.
struct Elem {
    x: XmlNode,
    parent: Option<usize>,
    subs: Vec<usize>,
}

/// NCCL's `ncclXml`: elements in creation order, the first one `<system>`.
struct XmlArena {
    elems: Vec<Elem>,
}

impl XmlArena {
    fn new() -> Self {
        let root = XmlNode::new("system").with_attr("version", TOPO_XML_VERSION);
        XmlArena {
            elems: vec![Elem {
                x: root,
                parent: None,
                subs: Vec::new(),
            }],
        }
    }

    fn x(&self, e: usize) -> &XmlNode {
        &self.elems[e].x
    }

    fn x_mut(&mut self, e: usize) -> &mut XmlNode {
        &mut self.elems[e].x
    }

    /// A new element, appended to `parent`'s children when given.
    fn add(&mut self, parent: Option<usize>, name: &str) -> usize {
        let e = self.elems.len();
        self.elems.push(Elem {
            x: XmlNode::new(name),
            parent,
            subs: Vec::new(),
        });
        if let Some(p) = parent {
            self.elems[p].subs.push(e);
        }
        e
    }

    /// The first element `name` with `key="value"` (NCCL's `xmlFindTagKv`).
    fn find(&self, name: &str, key: &str, value: &str) -> Option<usize> {
        self.elems
            .iter()
            .position(|el| el.x.name == name && el.x.attr(key) == Some(value))
    }

    fn first(&self, name: &str) -> Option<usize> {
        self.elems.iter().position(|el| el.x.name == name)
    }

    fn sub_named(&self, e: usize, name: &str) -> Option<usize> {
        self.elems[e]
            .subs
            .iter()
            .copied()
            .find(|s| self.elems[*s].x.name == name)
    }

    fn set_if_unset(&mut self, e: usize, key: &str, value: &str) {
        if self.x(e).attr(key).is_none() {
            self.x_mut(e).set_attr(key, value);
        }
    }

    /// Places `child` under `parent` before the first sibling with a greater bus id
    /// (NCCL keeps PCI children ordered by bus id; siblings without one are skipped).
    fn attach_sorted(&mut self, parent: usize, child: usize) {
        let busid = self.x(child).attr("busid").unwrap_or("").to_string();
        let subs = &self.elems[parent].subs;
        let at = subs
            .iter()
            .position(|s| {
                self.elems[*s]
                    .x
                    .attr("busid")
                    .is_some_and(|b| busid.as_str() < b)
            })
            .unwrap_or(subs.len());
        self.elems[parent].subs.insert(at, child);
        self.elems[child].parent = Some(parent);
    }

    fn build(&self, e: usize) -> XmlNode {
        let mut x = self.elems[e].x.clone();
        x.children = self.elems[e].subs.iter().map(|s| self.build(*s)).collect();
        x
    }
}

/// NCCL's CPU family/model numbering (cpuid fields: family + extended family << 4) from
/// the display values `/proc/cpuinfo` shows (family + extended family when the base is
/// 15). Intel's family 6 is the same either way; AMD Zen 3's 25 becomes 175.
fn nccl_family(display: u32) -> u32 {
    if display >= 15 {
        15 + ((display - 15) << 4)
    } else {
        display
    }
}

struct CpuId {
    vendor: Option<String>,
    family: Option<u32>,
    model: Option<u32>,
}

fn read_cpuinfo(proc_root: &Path) -> CpuId {
    let text = std::fs::read_to_string(proc_root.join("cpuinfo")).unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .take_while(|l| !l.trim().is_empty())
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
    };
    CpuId {
        vendor: field("vendor_id"),
        family: field("cpu family")
            .and_then(|v| v.parse().ok())
            .map(nccl_family),
        model: field("model").and_then(|v| v.parse().ok()),
    }
}

struct Builder<'a> {
    opts: &'a DetectOptions,
    xml: XmlArena,
    notes: Vec<Note>,
}

impl Builder<'_> {
    /// The `<cpu>` of NUMA node `numa`, created with NCCL's attributes when new.
    fn cpu(&mut self, numa: &str) -> usize {
        if let Some(c) = self.xml.find("cpu", "numaid", numa) {
            return c;
        }
        let c = self.xml.add(Some(0), "cpu");
        let host_hash = format!("{:#x}", self.opts.host_hash);
        let x = self.xml.x_mut(c);
        x.set_attr("host_hash", host_hash);
        x.set_attr("numaid", numa);
        // NCCL reads the node's cpumap; a node it cannot read (numaid -1 in VMs) gets no
        // affinity, which is what NCCL 2.28.9 dumped there.
        let node = u32::try_from(c_strtol(numa)).ok();
        let affinity = node.and_then(|n| {
            read_attr(
                &self
                    .opts
                    .root
                    .sys_path(&format!("devices/system/node/node{n}")),
                "cpumap",
            )
        });
        if let Some(a) = affinity {
            x.set_attr("affinity", a);
        }
        x.set_attr("arch", self.opts.arch.as_str());
        if self.opts.arch == "x86_64" {
            let id = read_cpuinfo(&self.opts.root.proc);
            if let Some(v) = id.vendor {
                x.set_attr("vendor", v);
            }
            if let (Some(f), Some(m)) = (id.family, id.model) {
                x.set_attr("familyid", f.to_string());
                x.set_attr("modelid", m.to_string());
            }
        }
        c
    }

    fn pci(&mut self, busid: &str) -> usize {
        match self.xml.find("pci", "busid", busid) {
            Some(e) => e,
            None => {
                let e = self.xml.add(None, "pci");
                self.xml.x_mut(e).set_attr("busid", busid);
                e
            }
        }
    }

    /// NCCL's `ncclTopoGetXmlFromSys`, iterated up to the CPU.
    fn fill_from_sys(&mut self, mut e: usize) {
        loop {
            let busid = self.xml.x(e).attr("busid").unwrap_or("").to_string();
            let path = self.opts.root.pci_path(&busid);
            if let Some(p) = &path {
                if let Some(class) = read_attr(p, "class") {
                    self.xml.x_mut(e).set_attr("class", class);
                }
                for key in ["vendor", "device", "subsystem_vendor", "subsystem_device"] {
                    if self.xml.x(e).attr(key).is_none() {
                        if let Some(v) = read_attr(p, key) {
                            self.xml.x_mut(e).set_attr(key, v);
                        }
                    }
                }
            }
            if self.xml.x(e).attr("link_speed").is_none() {
                let speed = match &path {
                    Some(p) => {
                        let read = |rel: &str| {
                            read_attr(p, &format!("{rel}max_link_speed"))
                                .or_else(|| read_attr(p, &format!("{rel}current_link_speed")))
                                .unwrap_or_default()
                        };
                        let (dev, port) = (read(""), read("../"));
                        let value = |s: &str| link_speed_value(s).unwrap_or(f32::MAX);
                        if value(&port) < value(&dev) {
                            port
                        } else {
                            dev
                        }
                    }
                    None => String::new(),
                };
                self.xml.x_mut(e).set_attr("link_speed", speed);
            }
            if self.xml.x(e).attr("link_width").is_none() {
                let width = match &path {
                    Some(p) => {
                        let read = |rel: &str| {
                            read_attr(p, &format!("{rel}max_link_width"))
                                .or_else(|| read_attr(p, &format!("{rel}current_link_width")))
                                .map_or(0, |s| c_strtol(&s))
                        };
                        read("").min(read("../"))
                    }
                    // NCCL writes "" here; 0 ("unknown", counted as x16) loads everywhere.
                    None => 0,
                };
                self.xml.x_mut(e).set_attr("link_width", width.to_string());
            }
            let parent = match self.xml.elems[e].parent {
                Some(p) => p,
                None => {
                    let p = match &path {
                        Some(p) => self.parent_from_path(p),
                        None => {
                            self.notes.push(Note::warn(format!(
                                "PCI device {busid} is not in sysfs: attached to an unknown CPU"
                            )));
                            self.cpu("-1")
                        }
                    };
                    self.xml.attach_sorted(p, e);
                    p
                }
            };
            if self.xml.x(parent).name == "pci" {
                e = parent;
            } else {
                return;
            }
        }
    }

    /// The element above the device at `path`: the switch two components up, or the CPU
    /// of the device's NUMA node when a component on the way is not a PCI address.
    fn parent_from_path(&mut self, path: &Path) -> usize {
        let numa = read_attr(path, "numa_node").unwrap_or_else(|| "-1".to_string());
        let up1 = path.parent();
        let up2 = up1.and_then(Path::parent);
        match (up1.and_then(base_name), up2.and_then(base_name)) {
            (Some(a), Some(b)) if is_bdf(a) && is_bdf(b) => self.pci(b),
            _ => self.cpu(&numa),
        }
    }

    fn add_gpu(&mut self, gpu: &GpuProbe, rank: i32) {
        let Some(busid) = normalize_busid(&gpu.busid) else {
            self.notes.push(Note::warn(format!(
                "GPU {}: bus id {:?} is not a PCI address; skipped",
                gpu.dev, gpu.busid
            )));
            return;
        };
        let e = self.pci(&busid);
        self.xml.set_if_unset(e, "class", "0x03");
        self.fill_from_sys(e);
        let g = self.xml.add(Some(e), "gpu");
        let x = self.xml.x_mut(g);
        x.set_attr("dev", gpu.dev.to_string());
        x.set_attr("sm", gpu.sm.to_string());
        x.set_attr("rank", rank.to_string());
        // Whether this GPU can do GPUDirect RDMA at all; the NIC side decides the rest.
        x.set_attr("gdr", "1");
        let mut targets: Vec<(String, u32)> = Vec::new();
        for t in &gpu.nvlink_targets {
            let t = nvlink_target(t);
            match targets.iter_mut().find(|(x, _)| *x == t) {
                Some((_, n)) => *n += 1,
                None => targets.push((t, 1)),
            }
        }
        for (target, count) in targets {
            // A far end sysfs does not show (the NVSwitch inside a VM) is an NVSwitch.
            let tclass = self
                .opts
                .root
                .pci_class(&target)
                .unwrap_or_else(|| PCI_CLASS_NVSWITCH.to_string());
            let l = self.xml.add(Some(g), "nvlink");
            let x = self.xml.x_mut(l);
            x.set_attr("target", target);
            x.set_attr("count", count.to_string());
            x.set_attr("tclass", tclass);
        }
    }

    fn add_net(&mut self, nic: &NicProbe, dev: usize) {
        let parent = match &nic.pci_busid {
            Some(busid) => {
                let e = self.pci(busid);
                self.xml.set_if_unset(e, "class", "0x02");
                self.fill_from_sys(e);
                e
            }
            // Not a PCI device (virtual, virtio, usb): NCCL attaches it to the first CPU.
            None => match self.xml.first("cpu") {
                Some(c) => c,
                None => self.cpu("0"),
            },
        };
        let nic_e = match self.xml.sub_named(parent, "nic") {
            Some(n) => n,
            None => self.xml.add(Some(parent), "nic"),
        };
        let n = self.xml.add(Some(nic_e), "net");
        let x = self.xml.x_mut(n);
        x.set_attr("name", nic.name.as_str());
        x.set_attr("dev", dev.to_string());
        x.set_attr("latency", "0");
        x.set_attr("speed", nic.speed_mbps.to_string());
        x.set_attr("port", nic.port.to_string());
        x.set_attr("guid", format!("{:#x}", nic.guid));
        if let Some(m) = nic.maxconn {
            x.set_attr("maxconn", m.to_string());
        }
        x.set_attr("gdr", if nic.gdr { "1" } else { "0" });
    }
}

/// Detects the topology described by `opts`.
pub fn detect(opts: &DetectOptions) -> Result<Detection, DetectError> {
    let mut b = Builder {
        opts,
        xml: XmlArena::new(),
        notes: Vec::new(),
    };
    let nics = probe_nics(&opts.root, &opts.nics);
    let mut gpus: Vec<&GpuProbe> = opts.gpus.iter().collect();
    gpus.sort_by_key(|g| g.dev);
    let mut gpus = gpus.into_iter().enumerate();
    if let Some((rank, g)) = gpus.next() {
        b.add_gpu(g, rank as i32);
    }
    for (dev, nic) in nics.iter().filter(|n| n.unused.is_none()).enumerate() {
        b.add_net(nic, dev);
    }
    for (rank, g) in gpus {
        b.add_gpu(g, rank as i32);
    }
    if b.xml.first("cpu").is_none() {
        // No device at all: still describe the host's CPU.
        b.cpu("0");
        b.notes
            .push(Note::info("no GPU and no network device found".to_string()));
    }
    let xml = b.xml.build(0);
    let (topology, warnings) = topology_from_xml(&xml).map_err(DetectError)?;
    let mut notes = b.notes;
    notes.extend(
        warnings
            .iter()
            .map(|w: &XmlWarning| Note::warn(format!("topology XML: {w}"))),
    );
    Ok(Detection {
        xml,
        topology,
        nics,
        notes,
    })
}

/// The `target` NCCL writes for an NVLink's far end. NVML names an NVSwitch port with an
/// all-ones bus id (`FFFFFFFF:FF:FF.0`, seen on 4x H200) or nothing at all; NCCL's dump
/// writes its fixed NVSwitch token for it, and so must weft for the files to match.
fn nvlink_target(nvml_busid: &str) -> String {
    let lower = nvml_busid.trim().to_ascii_lowercase();
    if lower.is_empty() || lower.starts_with("ffffffff:") {
        NVSWITCH_TARGET.to_string()
    } else {
        lower
    }
}

#[cfg(test)]
mod tests;
