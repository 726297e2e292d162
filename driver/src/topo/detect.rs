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
    /// This machine: `/sys`, `/proc`, the CUDA driver, NVML, getifaddrs and the
    /// environment (`NCCL_SOCKET_IFNAME`, `NCCL_NET`). Notes about missing libraries go to
    /// `notes`.
    pub fn host(env: &dyn Fn(&str) -> Option<String>, notes: &mut Vec<Note>) -> DetectOptions {
        let gpus = super::gpu::probe_gpus(notes);
        DetectOptions {
            root: SysRoot::host(),
            nics: NicInputs {
                addrs: super::nic::local_addrs(),
                ifname_filter: env("WEFT_SOCKET_IFNAME")
                    .or_else(|| env("NCCL_SOCKET_IFNAME"))
                    .filter(|v| !v.trim().is_empty()),
                net_plugin: env("NCCL_NET"),
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
            let t = if t.is_empty() {
                NVSWITCH_TARGET.to_string()
            } else {
                t.to_ascii_lowercase()
            };
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

#[cfg(test)]
mod tests {
    use super::super::fake_sysfs::FakeSys;
    use super::*;
    use weft_core::topo::model::{LinkType, NodeData, NodeKind, pci_bw};

    const H200X4: &str = include_str!("../../../tests/fixtures/topo/h200x4-measured.xml");

    fn addrs(list: &[(&str, &str)]) -> Vec<(String, std::net::IpAddr)> {
        list.iter()
            .map(|(n, a)| (n.to_string(), a.parse().unwrap()))
            .collect()
    }

    /// The 4x H200 VM whose NCCL dump is a fixture: GPUs on the root bus (no bridge, so
    /// NUMA -1 and link width 0), eth0 on virtio, NVLinks whose far end NVML cannot name.
    #[test]
    fn h200_vm_sysfs_gives_the_xml_nccl_dumped_there() {
        let fake = FakeSys::new("h200");
        for (i, bdf) in ["06", "07", "08", "09"].iter().enumerate() {
            fake.pci(
                &format!("pci0000:00/0000:00:{bdf}.0"),
                &[
                    ("class", "0x030200"),
                    ("vendor", "0x10de"),
                    ("device", "0x2335"),
                    ("subsystem_vendor", "0x10de"),
                    ("subsystem_device", "0x18bf"),
                    ("max_link_speed", "32.0 GT/s PCIe"),
                    ("max_link_width", "16"),
                    ("numa_node", "-1"),
                ],
            );
            let _ = i;
        }
        fake.pci("pci0000:00/0000:00:03.0", &[("class", "0x020000")]);
        fake.virtio("pci0000:00/0000:00:03.0/virtio2");
        fake.net(
            "eth0",
            Some("pci0000:00/0000:00:03.0/virtio2"),
            &[("flags", "0x1003"), ("speed", "-1")],
        );
        fake.net("lo", None, &[("flags", "0x9")]);
        fake.net("ifb0", None, &[("flags", "0x82")]);
        fake.cpuinfo("GenuineIntel", 6, 207);
        let gpus = (0..4)
            .map(|d| GpuProbe {
                dev: d,
                busid: format!("00000000:00:0{}.0", 6 + d),
                sm: 90,
                nvlink_targets: vec![String::new(); 18],
            })
            .collect();
        let opts = DetectOptions {
            root: fake.root(),
            gpus,
            nics: NicInputs {
                addrs: addrs(&[("eth0", "10.0.0.7"), ("lo", "127.0.0.1")]),
                have_gpus: true,
                ..NicInputs::default()
            },
            host_hash: 0xf927_4318_b6e4_eee2,
            arch: "x86_64".into(),
        };
        let d = detect(&opts).unwrap();
        assert_eq!(d.xml.write(), H200X4);
        assert_eq!(
            d.topology,
            weft_core::topo::system_xml::parse_topology(H200X4)
                .unwrap()
                .0
        );
        let names: Vec<(&str, Option<&str>)> =
            d.nics.iter().map(|n| (n.name.as_str(), n.unused)).collect();
        assert_eq!(
            names,
            [
                ("eth0", None),
                ("ifb0", Some("interface down")),
                ("lo", Some("loopback/docker/virbr: used only alone")),
            ]
        );
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }

    /// Two sockets without GPUs: a PCIe switch (root port, upstream port, two downstream
    /// ports) with an InfiniBand HCA and an Ethernet NIC on socket 0, a NIC straight on a
    /// root port of socket 1, and virtual interfaces.
    fn two_socket_host() -> FakeSys {
        let fake = FakeSys::new("switch");
        let bridge = |speed: &'static str, width: &'static str| {
            [
                ("class", "0x060400"),
                ("vendor", "0x10b5"),
                ("device", "0xc030"),
                ("max_link_speed", speed),
                ("max_link_width", width),
            ]
        };
        let s0 = "pci0000:00/0000:00:01.0";
        fake.pci(s0, &bridge("32.0 GT/s PCIe", "16"));
        let up = format!("{s0}/0000:01:00.0");
        let mut a = bridge("32.0 GT/s PCIe", "16").to_vec();
        a.push(("numa_node", "0"));
        fake.pci(&up, &a);
        fake.pci(
            &format!("{up}/0000:02:00.0"),
            &bridge("32.0 GT/s PCIe", "16"),
        );
        fake.pci(
            &format!("{up}/0000:02:01.0"),
            &bridge("16.0 GT/s PCIe", "8"),
        );
        let hca = format!("{up}/0000:02:00.0/0000:03:00.0");
        fake.pci(
            &hca,
            &[
                ("class", "0x020700"),
                ("vendor", "0x15b3"),
                ("device", "0x1021"),
                ("max_link_speed", "32.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("numa_node", "0"),
            ],
        );
        fake.ib(
            "mlx5_0",
            &hca,
            "b859:9f03:00d6:a2c6",
            &[
                (1, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
                (2, "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand"),
            ],
        );
        let eth = format!("{up}/0000:02:01.0/0000:04:00.0");
        fake.pci(
            &eth,
            &[
                ("class", "0x020000"),
                ("vendor", "0x15b3"),
                ("device", "0x101d"),
                ("max_link_speed", "32.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("numa_node", "0"),
            ],
        );
        fake.net(
            "enp4s0f0",
            Some(&eth),
            &[("flags", "0x1003"), ("speed", "100000")],
        );
        let s1 = "pci0000:80/0000:80:01.0";
        fake.pci(s1, &bridge("16.0 GT/s PCIe", "16"));
        let nic1 = format!("{s1}/0000:81:00.0");
        fake.pci(
            &nic1,
            &[
                ("class", "0x020000"),
                ("vendor", "0x8086"),
                ("device", "0x159b"),
                ("subsystem_vendor", "0x8086"),
                ("subsystem_device", "0x0003"),
                ("max_link_speed", "16.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("numa_node", "1"),
            ],
        );
        fake.net(
            "ens81",
            Some(&nic1),
            &[("flags", "0x1003"), ("speed", "25000")],
        );
        for (name, flags) in [
            ("lo", "0x9"),
            ("docker0", "0x1003"),
            ("veth12", "0x1003"),
            ("br0", "0x1003"),
            ("ifb0", "0x82"),
        ] {
            fake.net(name, None, &[("flags", flags)]);
        }
        fake.file(
            "sys/devices/system/node/node0/cpumap",
            "00000000,0000ffff\n",
        );
        fake.file(
            "sys/devices/system/node/node1/cpumap",
            "00000000,ffff0000\n",
        );
        fake.cpuinfo("AuthenticAMD", 25, 1);
        fake
    }

    fn two_socket_opts(fake: &FakeSys, plugin: Option<&str>) -> DetectOptions {
        DetectOptions {
            root: fake.root(),
            gpus: Vec::new(),
            nics: NicInputs {
                addrs: addrs(&[
                    ("enp4s0f0", "192.168.1.10"),
                    ("ens81", "10.1.0.5"),
                    ("ens81", "fd00::5"),
                    ("lo", "127.0.0.1"),
                    ("docker0", "172.17.0.1"),
                    ("br0", "10.9.0.1"),
                ]),
                ifname_filter: None,
                net_plugin: plugin.map(str::to_string),
                have_gpus: false,
            },
            host_hash: 0x1234,
            arch: "x86_64".into(),
        }
    }

    const TWO_SOCKET_SOCKETS: &str = r#"<system version="1">
  <cpu host_hash="0x1234" numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1">
    <pci busid="0000:01:00.0" class="0x060400" vendor="0x10b5" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:04:00.0" class="0x020000" vendor="0x15b3" device="0x101d" link_speed="16.0 GT/s PCIe" link_width="8">
        <nic>
          <net name="enp4s0f0" dev="0" latency="0" speed="100000" port="0" guid="0x0" maxconn="65536" gdr="0"/>
        </nic>
      </pci>
    </pci>
    <nic>
      <net name="br0" dev="2" latency="0" speed="10000" port="0" guid="0x2" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
  <cpu host_hash="0x1234" numaid="1" affinity="00000000,ffff0000" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1">
    <pci busid="0000:81:00.0" class="0x020000" vendor="0x8086" device="0x159b" subsystem_vendor="0x8086" subsystem_device="0x0003" link_speed="16.0 GT/s PCIe" link_width="16">
      <nic>
        <net name="ens81" dev="1" latency="0" speed="25000" port="0" guid="0x1" maxconn="65536" gdr="0"/>
      </nic>
    </pci>
  </cpu>
</system>
"#;

    #[test]
    fn gpu_less_host_with_a_switch_and_socket_nics() {
        let fake = two_socket_host();
        let d = detect(&two_socket_opts(&fake, Some("Socket"))).unwrap();
        assert_eq!(d.xml.write(), TWO_SOCKET_SOCKETS);
        let t = &d.topology;
        assert_eq!(t.of_kind(NodeKind::Cpu).len(), 2);
        assert_eq!(t.of_kind(NodeKind::Gpu).len(), 0);
        assert_eq!(t.of_kind(NodeKind::Nic).len(), 3);
        let sw = t.of_kind(NodeKind::Pci);
        assert_eq!(sw.len(), 1);
        let cpu0 = t.of_kind(NodeKind::Cpu)[0];
        assert_eq!(t.nodes[sw[0]].parent, Some(cpu0));
        let up = &t.nodes[sw[0]].links;
        assert!(
            up.iter()
                .any(|l| l.to == cpu0 && l.kind == LinkType::Pci && l.bw == 48.0)
        );
        // The NIC behind the x8 Gen4 downstream port gets the narrower link.
        let nic = t
            .nodes
            .iter()
            .position(
                |n| matches!(&n.data, NodeData::Nic { pci: Some(p) } if p.busid == "0000:04:00.0"),
            )
            .unwrap();
        assert_eq!(t.nodes[nic].parent, Some(sw[0]));
        assert!(t.nodes[nic].links.iter().any(|l| l.to == sw[0]
            && l.kind == LinkType::Pci
            && l.bw == pci_bw("16.0 GT/s PCIe", 8)));
        // Used devices first, in dev order; the rest say why they are not used.
        let listed: Vec<(&str, Option<&str>)> =
            d.nics.iter().map(|n| (n.name.as_str(), n.unused)).collect();
        assert_eq!(
            listed,
            [
                ("enp4s0f0", None),
                ("ens81", None),
                ("br0", None),
                ("docker0", Some("loopback/docker/virbr: used only alone")),
                ("ifb0", Some("interface down")),
                ("lo", Some("loopback/docker/virbr: used only alone")),
                ("veth12", Some("no address")),
                ("mlx5_0", Some("NCCL_NET=Socket selects the socket plugin")),
                ("mlx5_0", Some("port not ACTIVE")),
            ]
        );
        assert_eq!(d.nics[1].addrs.len(), 2);
        assert!(d.nics[2].is_virtual && !d.nics[0].is_virtual);
    }

    #[test]
    fn active_ib_port_is_the_network_like_nccls_ib_plugin() {
        let fake = two_socket_host();
        let d = detect(&two_socket_opts(&fake, None)).unwrap();
        let text = d.xml.write();
        assert_eq!(
            text,
            r#"<system version="1">
  <cpu host_hash="0x1234" numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1">
    <pci busid="0000:01:00.0" class="0x060400" vendor="0x10b5" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:03:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" latency="0" speed="400000" port="1" guid="0xb8599f0300d6a2c6" gdr="0"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
"#
        );
        // Only socket 0 has a used device, so only its CPU appears.
        assert_eq!(text.matches("<cpu ").count(), 1);
        assert_eq!(d.topology.of_kind(NodeKind::Net).len(), 1);
        assert_eq!(d.nics[0].unused, None);
        assert_eq!(d.nics[0].port, 1);
    }

    #[test]
    fn nothing_but_loopback_still_gives_a_cpu_and_lo() {
        let fake = FakeSys::new("lo");
        fake.net("lo", None, &[("flags", "0x9")]);
        fake.cpuinfo("GenuineIntel", 6, 143);
        let mut opts = two_socket_opts(&fake, None);
        opts.nics.addrs = addrs(&[("lo", "127.0.0.1")]);
        let d = detect(&opts).unwrap();
        assert_eq!(
            d.xml.write(),
            "<system version=\"1\">\n  <cpu host_hash=\"0x1234\" numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n    <nic>\n      <net name=\"lo\" dev=\"0\" latency=\"0\" speed=\"10000\" port=\"0\" guid=\"0x0\" maxconn=\"65536\" gdr=\"0\"/>\n    </nic>\n  </cpu>\n</system>\n"
        );
    }

    #[test]
    fn nvlinks_between_gpus_under_a_switch() {
        // Two GPUs behind one switch, four NVLinks between them, and a GPU whose bus id
        // is unknown to sysfs.
        let fake = FakeSys::new("nvl");
        let up = "pci0000:00/0000:00:02.0/0000:05:00.0";
        for (p, class) in [
            ("pci0000:00/0000:00:02.0", "0x060400"),
            (up, "0x060400"),
            (&format!("{up}/0000:06:00.0") as &str, "0x060400"),
            (&format!("{up}/0000:06:01.0"), "0x060400"),
            (&format!("{up}/0000:06:00.0/0000:07:00.0"), "0x030200"),
            (&format!("{up}/0000:06:01.0/0000:08:00.0"), "0x030200"),
        ] {
            fake.pci(
                p,
                &[
                    ("class", class),
                    ("max_link_speed", "16.0 GT/s PCIe"),
                    ("max_link_width", "16"),
                    ("numa_node", "0"),
                ],
            );
        }
        fake.cpuinfo("GenuineIntel", 6, 143);
        let mut opts = two_socket_opts(&fake, None);
        opts.nics.addrs.clear();
        opts.gpus = vec![
            GpuProbe {
                dev: 1,
                busid: "0000:08:00.0".into(),
                sm: 80,
                nvlink_targets: vec!["00000000:07:00.0".into(); 4],
            },
            GpuProbe {
                dev: 0,
                busid: "0000:07:00.0".into(),
                sm: 80,
                nvlink_targets: vec!["00000000:08:00.0".into(); 4],
            },
            GpuProbe {
                dev: 2,
                busid: "0000:c1:00.0".into(),
                sm: 80,
                nvlink_targets: vec![],
            },
        ];
        let d = detect(&opts).unwrap();
        let text = d.xml.write();
        assert!(text.contains("<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\">\n          <nvlink target=\"00000000:08:00.0\" count=\"4\" tclass=\"0x030200\"/>"), "{text}");
        assert!(text.contains("numaid=\"-1\""), "{text}");
        assert_eq!(
            d.notes,
            [Note::warn(
                "PCI device 0000:c1:00.0 is not in sysfs: attached to an unknown CPU".into()
            )]
        );
        let t = &d.topology;
        let (g0, g1) = (t.gpu_by_rank(0).unwrap(), t.gpu_by_rank(1).unwrap());
        assert!(
            t.nodes[g0]
                .links
                .iter()
                .any(|l| l.to == g1 && l.kind == LinkType::Nvl && l.bw == 80.0)
        );
        // Both GPUs under the one switch (upstream port 05:00.0).
        assert_eq!(t.nodes[g0].parent, t.nodes[g1].parent);
        assert_eq!(t.of_kind(NodeKind::Pci).len(), 1);
    }
}

/// Random PCI hierarchies: detection must rebuild exactly the generated tree.
#[cfg(test)]
mod random_tests {
    use super::super::fake_sysfs::FakeSys;
    use super::*;
    use weft_core::topo::model::{NodeData, NodeKind};

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    const SPEEDS: [&str; 4] = [
        "8.0 GT/s PCIe",
        "16.0 GT/s PCIe",
        "32.0 GT/s PCIe",
        "64.0 GT/s PCIe",
    ];
    const WIDTHS: [u32; 4] = [2, 4, 8, 16];

    /// What the generator placed: bus id -> (expected parent: bus id or `numa:N`,
    /// expected link speed, expected width, is a switch / GPU / NIC).
    #[derive(Default)]
    struct Expected {
        devices: Vec<(String, String, String, u32, NodeKind)>,
        gpus: Vec<GpuProbe>,
    }

    struct Gen<'a> {
        fake: &'a FakeSys,
        rng: Rng,
        next_bus: u32,
        exp: Expected,
    }

    impl Gen<'_> {
        fn attrs(&mut self, class: &str, numa: u32) -> (Vec<(String, String)>, &'static str, u32) {
            let speed = SPEEDS[self.rng.below(4) as usize];
            let width = WIDTHS[self.rng.below(4) as usize];
            let a = vec![
                ("class".to_string(), class.to_string()),
                ("max_link_speed".to_string(), speed.to_string()),
                ("max_link_width".to_string(), width.to_string()),
                ("numa_node".to_string(), numa.to_string()),
            ];
            (a, speed, width)
        }

        fn write(&self, path: &str, attrs: &[(String, String)]) {
            let a: Vec<(&str, &str)> = attrs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            self.fake.pci(path, &a);
        }

        /// A device under the port at `port_path` (speed/width `port_link`), whose NCCL
        /// parent is `parent`.
        fn device(
            &mut self,
            dom: u32,
            port_path: &str,
            port_link: (&'static str, u32),
            parent: &str,
            depth: u32,
            numa: u32,
        ) {
            let bus = self.next_bus;
            self.next_bus += 1;
            let busid = format!("{dom:04x}:{bus:02x}:00.0");
            let path = format!("{port_path}/{busid}");
            let lower = |a: &str, b: &str| {
                let v = |s: &str| link_speed_value(s).unwrap();
                if v(b) < v(a) {
                    b.to_string()
                } else {
                    a.to_string()
                }
            };
            let roll = self.rng.below(3);
            if depth < 2 && roll == 0 {
                // A switch: upstream port `busid`, 1..=3 downstream ports on the next bus.
                let (a, speed, width) = self.attrs("0x060400", numa);
                self.write(&path, &a);
                self.exp.devices.push((
                    busid.clone(),
                    parent.to_string(),
                    lower(speed, port_link.0),
                    width.min(port_link.1),
                    NodeKind::Pci,
                ));
                let dbus = self.next_bus;
                self.next_bus += 1;
                for i in 0..1 + self.rng.below(3) as u32 {
                    let dport = format!("{path}/{dom:04x}:{dbus:02x}:{i:02x}.0");
                    let (a, s, w) = self.attrs("0x060400", numa);
                    self.write(&dport, &a);
                    self.device(dom, &dport, (s, w), &busid, depth + 1, numa);
                }
            } else {
                let gpu = roll == 1;
                let class = if gpu { "0x030200" } else { "0x020700" };
                let (a, speed, width) = self.attrs(class, numa);
                self.write(&path, &a);
                let kind = if gpu { NodeKind::Gpu } else { NodeKind::Nic };
                self.exp.devices.push((
                    busid.clone(),
                    parent.to_string(),
                    lower(speed, port_link.0),
                    width.min(port_link.1),
                    kind,
                ));
                if gpu {
                    let dev = self.exp.gpus.len() as i32;
                    self.exp.gpus.push(GpuProbe {
                        dev,
                        busid: busid.to_uppercase(),
                        sm: 80,
                        nvlink_targets: Vec::new(),
                    });
                } else {
                    let name = format!("mlx5_{}", bus);
                    self.fake.ib(
                        &name,
                        &path,
                        "0000:0000:0000:0001",
                        &[(1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")],
                    );
                }
            }
        }
    }

    #[test]
    fn random_pci_trees_are_rebuilt_exactly() {
        let (mut switches, mut nested) = (0, 0);
        for case in 0..12u64 {
            let fake = FakeSys::new("random");
            fake.cpuinfo("GenuineIntel", 6, 143);
            let mut g = Gen {
                fake: &fake,
                rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (case * 0x1234_5678_9abc + 1)),
                next_bus: 1,
                exp: Expected::default(),
            };
            let sockets = 1 + g.rng.below(2) as u32;
            for s in 0..sockets {
                let dom = s;
                for rp in 0..1 + g.rng.below(3) as u32 {
                    let port = format!("pci{dom:04x}:00/{dom:04x}:00:{:02x}.0", rp + 1);
                    let (a, speed, width) = g.attrs("0x060400", s);
                    g.write(&port, &a);
                    for _ in 0..1 + g.rng.below(2) {
                        g.device(dom, &port, (speed, width), &format!("numa:{s}"), 0, s);
                    }
                }
            }
            // CUDA's device order is not the bus order.
            let mut gpus = g.exp.gpus.clone();
            gpus.reverse();
            let opts = DetectOptions {
                root: fake.root(),
                gpus,
                nics: NicInputs::default(),
                host_hash: 1,
                arch: "x86_64".into(),
            };
            let d = detect(&opts).unwrap();
            let t = &d.topology;
            let busid_of = |n: usize| match &t.nodes[n].data {
                NodeData::Gpu(x) => Some(x.pci.clone()),
                NodeData::Pci { pci, .. } => Some(pci.clone()),
                NodeData::Nic { pci } => pci.clone(),
                _ => None,
            };
            let mut seen = 0;
            for (busid, parent, speed, width, kind) in &g.exp.devices {
                let n = (0..t.nodes.len())
                    .find(|&n| busid_of(n).is_some_and(|p| p.busid == *busid))
                    .unwrap_or_else(|| panic!("case {case}: {busid} missing"));
                assert_eq!(t.nodes[n].kind, *kind, "case {case}: {busid}");
                let pci = busid_of(n).unwrap();
                assert_eq!(
                    (&pci.link_speed, pci.link_width),
                    (speed, *width),
                    "case {case}: {busid}"
                );
                let p = t.nodes[n].parent.unwrap();
                let got = match &t.nodes[p].data {
                    NodeData::Cpu(c) => format!("numa:{}", c.numa_id),
                    _ => busid_of(p).unwrap().busid,
                };
                assert_eq!(&got, parent, "case {case}: parent of {busid}");
                seen += 1;
            }
            let count = |k| t.of_kind(k).len();
            let want = |k| g.exp.devices.iter().filter(|d| d.4 == k).count();
            for k in [NodeKind::Gpu, NodeKind::Nic, NodeKind::Pci] {
                assert_eq!(count(k), want(k), "case {case}: {k:?}");
            }
            assert_eq!(count(NodeKind::Cpu), sockets as usize, "case {case}");
            assert_eq!(seen, g.exp.devices.len());
            // GPU ranks follow CUDA device numbers; siblings sit in bus id order.
            for gp in &g.exp.gpus {
                let n = t.gpu_by_rank(gp.dev).unwrap();
                assert_eq!(t.nodes[n].gpu().unwrap().pci.busid, gp.busid.to_lowercase());
            }
            fn sorted(x: &XmlNode) -> bool {
                let ids: Vec<&str> = x.children.iter().filter_map(|c| c.attr("busid")).collect();
                ids.windows(2).all(|w| w[0] < w[1]) && x.children.iter().all(sorted)
            }
            assert!(sorted(&d.xml), "case {case}:\n{}", d.xml.write());
            switches += count(NodeKind::Pci);
            nested += g
                .exp
                .devices
                .iter()
                .filter(|d| d.4 == NodeKind::Pci && !d.1.starts_with("numa"))
                .count();
        }
        // The cases do cover switches, and switches below switches.
        assert!(switches >= 6 && nested >= 2, "{switches} {nested}");
    }
}
