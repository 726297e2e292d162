//! Tests of [`super`]: fake sysfs trees and fixtures.

mod unit {
    use super::super::*;
    use crate::topo::fake_sysfs::FakeSys;
    use weft_core::topo::model::{LinkType, NodeData, NodeKind, pci_bw};

    const H200X4: &str = include_str!("../../../../tests/fixtures/topo/h200x4-measured.xml");

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
mod random {
    use super::super::*;
    use crate::topo::fake_sysfs::FakeSys;
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

#[test]
fn nvswitch_far_ends_get_nccls_token() {
    // NVML's spelling on the 4x H200 machine, and the empty answer some drivers give.
    assert_eq!(super::nvlink_target("FFFFFFFF:FF:FF.0"), "fffffff:ff:ff.0");
    assert_eq!(super::nvlink_target(""), "fffffff:ff:ff.0");
    // A GPU at the far end keeps its own bus id.
    assert_eq!(super::nvlink_target("00000000:1B:00.0"), "00000000:1b:00.0");
}
