//! Tests of [`super`]: every fixture through `weft topo`, errors, fake and real detection.

mod unit {
    use super::super::*;
    use std::path::Path;
    use weft_core::search::Pattern;
    use weft_core::search::graph_xml::parse_graphs;
    use weft_core::topo::PathOptions;
    use weft_core::topo::system_xml::{parse_topology, write_topology};
    use weft_core::topo::xml::XmlNode;
    use weft_runtime::topo::fake_sysfs::FakeSys;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/topo")
            .join(name)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// `weft topo` with the settings of the variables `env` gives, read as `run_topo` reads
    /// the process's.
    fn run_topo_with_env(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<TopoOutput, TopoCliError> {
        run_topo_with(args, &weft_config::Settings::from_lookup_or_defaults(env))
    }

    fn nvls_off(k: &str) -> Option<String> {
        (k == "NCCL_NVLS_ENABLE").then(|| "0".to_string())
    }

    fn run(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> TopoOutput {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        run_topo_with_env(&args, env).unwrap()
    }

    /// The text after `NCCL INFO ` of the lines of an NCCL log, with each line's rank.
    fn nccl_lines(log: &str) -> Vec<(i64, String)> {
        log.lines()
            .filter_map(|l| {
                let at = l.find(" NCCL INFO ")?;
                let rank = l[..at]
                    .rsplit('[')
                    .next()?
                    .trim_end_matches(']')
                    .parse()
                    .ok()?;
                Some((rank, l[at + " NCCL INFO ".len()..].to_string()))
            })
            .collect()
    }

    /// Checks our Pattern, Channel and Trees lines against rank 0's (and every rank's
    /// Trees) lines of an NCCL log.
    fn assert_channels_match(out: &str, log: &str) {
        let nccl = nccl_lines(log);
        let ours: Vec<&str> = out.lines().collect();
        let ours_of = |prefix: &str| -> Vec<String> {
            ours.iter()
                .filter(|l| l.starts_with(prefix))
                .map(|l| l.to_string())
                .collect()
        };
        let theirs_of = |prefix: &str| -> Vec<String> {
            nccl.iter()
                .filter(|(r, l)| *r == 0 && l.starts_with(prefix) && !l.contains(" via "))
                .map(|(_, l)| l.clone())
                .collect()
        };
        assert_eq!(ours_of("Pattern"), theirs_of("Pattern"));
        let channels = theirs_of("Channel");
        assert!(!channels.is_empty());
        // Some logs keep only the first channel lines; each kept one must be ours, in order.
        let ours_channels = ours_of("Channel");
        assert_eq!(ours_channels[..channels.len()], channels[..]);
        for (rank, line) in nccl.iter().filter(|(_, l)| l.starts_with("Trees")) {
            assert!(
                ours.contains(&format!("[{rank}] {line}").as_str()),
                "rank {rank}: {line}\nnot in\n{out}"
            );
        }
    }

    #[test]
    fn h200_fixture_prints_nccls_lines_and_dumps_its_files() {
        let tmp = FakeSys::new("cli-h200");
        let (t, g, s) = (
            tmp.dir.join("t.xml"),
            tmp.dir.join("g.xml"),
            tmp.dir.join("s.svg"),
        );
        let out = run(
            &[
                "--file",
                fixture("h200x4-measured.xml").to_str().unwrap(),
                "--dump-topo",
                t.to_str().unwrap(),
                "--dump-graph",
                t.with_file_name("g.xml").to_str().unwrap(),
                &format!("--svg={}", s.display()),
            ],
            &nvls_off,
        );
        assert_channels_match(
            &out.text,
            include_str!("../../../tests/fixtures/topo/h200x4-measured-nccl-info.txt"),
        );
        let ring: Vec<&str> = out
            .text
            .lines()
            .filter(|l| l.starts_with("Channel "))
            .collect();
        assert_eq!(ring.len(), 24);
        for (c, l) in ring.iter().enumerate() {
            assert_eq!(*l, format!("Channel {c:02}/24 : 0 1 2 3"));
        }
        // NCCL's two dumps, byte for byte.
        assert_eq!(
            std::fs::read_to_string(&t).unwrap(),
            include_str!("../../../tests/fixtures/topo/h200x4-measured.xml")
        );
        assert_eq!(
            std::fs::read_to_string(&g).unwrap(),
            include_str!("../../../tests/fixtures/topo/h200x4-measured-graph.xml")
        );
        assert_eq!(out.written, [t, g, s]);
        assert!(out.notes.is_empty(), "{:?}", out.notes);
    }

    #[test]
    fn weft_written_fixtures_print_nccls_measured_lines() {
        for (topo, log) in [
            ("weft-h200x4-nvs9.xml", "weft-h200x4-nvs9-nccl-info.txt"),
            ("weft-h200x4-mesh6.xml", "weft-h200x4-mesh6-nccl-info.txt"),
            (
                "weft-h200x4-pairs18.xml",
                "weft-h200x4-pairs18-nccl-info.txt",
            ),
        ] {
            let out = run(&["--file", fixture(topo).to_str().unwrap()], &nvls_off);
            let log = std::fs::read_to_string(fixture(log)).unwrap();
            assert_channels_match(&out.text, &log);
            // Every ring line NCCL printed, not only the first ones.
            let theirs: Vec<String> = nccl_lines(&log)
                .into_iter()
                .filter(|(_, l)| l.starts_with("Channel") && !l.contains(" via "))
                .map(|(_, l)| l)
                .collect();
            let ours: Vec<&str> = out
                .text
                .lines()
                .filter(|l| l.starts_with("Channel "))
                .collect();
            assert_eq!(ours, theirs, "{topo}");
        }
    }

    #[test]
    fn two_and_four_hosts_print_nccls_inter_node_lines() {
        for (topo, log, hosts) in [
            (
                "h200x4-as-2hosts-measured.xml",
                "h200x4-as-2hosts-measured-nccl-info.txt",
                "2",
            ),
            (
                "h200x4-as-4hosts-measured.xml",
                "h200x4-as-4hosts-measured-nccl-info.txt",
                "4",
            ),
        ] {
            let out = run(
                &["--file", fixture(topo).to_str().unwrap(), "--hosts", hosts],
                &nvls_off,
            );
            assert_channels_match(&out.text, &std::fs::read_to_string(fixture(log)).unwrap());
        }
    }

    fn matrix_cell(text: &str, row: &str, col: &str) -> String {
        let mut lines = text.lines().skip_while(|l| *l != "Path matrix").skip(1);
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        let c = header.iter().position(|h| *h == col).unwrap();
        let line = lines.find(|l| l.split('\t').next() == Some(row)).unwrap();
        line.split('\t').nth(c).unwrap().trim().to_string()
    }

    #[test]
    fn path_matrix_cells() {
        let dgx = run(
            &["--file", fixture("dgx-h100.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        for (row, col, want) in [
            ("GPU0", "GPU0", "X"),
            ("GPU0", "GPU7", "NV18"),
            ("GPU0", "NIC0", "PIX"),
            ("GPU0", "NIC1", "PXB"),
            // NCCL reaches a far NIC through an NVLink peer (PXN), not through the CPU.
            ("GPU0", "NIC2", "PXN"),
            ("NIC0", "GPU2", "PHB"),
            ("NIC0", "NIC4", "SYS"),
            ("NIC5", "NIC4", "PXB"),
            ("GPU5", "CPU Affinity", "32-63,96-127"),
            ("NIC3", "NUMA Affinity", "0"),
        ] {
            assert_eq!(matrix_cell(&dgx, row, col), want, "{row} {col}");
        }
        let pcie = run(
            &["--file", fixture("pcie-2socket.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&pcie, "GPU0", "GPU1"), "PIX");
        assert_eq!(matrix_cell(&pcie, "GPU1", "GPU2"), "SYS");
        assert_eq!(matrix_cell(&pcie, "GPU2", "NIC0"), "SYS");
        // NCCL_P2P_DISABLE: GPUs reach each other through the CPU.
        let no_p2p = run_topo_with_env(
            &[
                "--file".into(),
                fixture("pcie-2socket.xml").to_str().unwrap().into(),
            ],
            &|k| (k == "NCCL_P2P_DISABLE").then(|| "1".to_string()),
        )
        .unwrap()
        .text;
        assert_eq!(matrix_cell(&no_p2p, "GPU0", "GPU1"), "PHB");
        let bad = run_topo_with_env(
            &[
                "--file".into(),
                fixture("pcie-2socket.xml").to_str().unwrap().into(),
            ],
            &|k| (k == "NCCL_P2P_LEVEL").then(|| "FAST".to_string()),
        )
        .unwrap();
        assert_eq!(matrix_cell(&bad.text, "GPU0", "GPU1"), "PIX");
        assert_eq!(
            bad.notes[0].text,
            "NCCL_P2P_LEVEL=\"FAST\" ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5"
        );
        let hgx = run(
            &["--file", fixture("hgx-h100-4gpu.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&hgx, "GPU0", "GPU3"), "NV6");
        let h200 = run(
            &["--file", fixture("h200x4-measured.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&h200, "GPU3", "GPU1"), "NV18");
        assert_eq!(matrix_cell(&h200, "GPU3", "NIC0"), "PHB");
        assert_eq!(matrix_cell(&h200, "GPU3", "NUMA Affinity"), "N/A");
    }

    /// Every topology fixture: loads, prints a row per GPU and NIC, its SVG is well-formed
    /// XML naming every GPU, and its dumps read back to the same topology and ring.
    /// Graph fixtures are refused with a message that says what they are.
    #[test]
    fn every_fixture_runs() {
        let tmp = FakeSys::new("cli-all");
        let mut systems = 0;
        for entry in std::fs::read_dir(fixture("")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("xml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let args: Vec<String> = [
                "--file",
                path.to_str().unwrap(),
                "--svg",
                tmp.dir.join("s.svg").to_str().unwrap(),
                "--dump-topo",
                tmp.dir.join("t.xml").to_str().unwrap(),
                "--dump-graph",
                tmp.dir.join("g.xml").to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let result = run_topo_with_env(&args, &no_env);
            if text.starts_with("<graphs") {
                let e = result.unwrap_err().to_string();
                assert!(
                    e.contains("expected <system> (is this a graph file?)"),
                    "{e}"
                );
                assert!(e.contains(path.to_str().unwrap()), "{e}");
                continue;
            }
            systems += 1;
            let out = result.unwrap();
            let (topo, _) = parse_topology(&text).unwrap();
            let gpus = topo.of_kind(NodeKind::Gpu).len();
            let nets = topo.of_kind(NodeKind::Net).len();
            let rows = |p: &str| {
                out.text
                    .lines()
                    .skip_while(|l| *l != "Path matrix")
                    .filter(|l| l.starts_with(p) && l.contains('\t'))
                    .count()
            };
            assert_eq!(
                (rows("GPU"), rows("NIC")),
                (gpus, nets),
                "{}",
                path.display()
            );
            let svg = std::fs::read_to_string(tmp.dir.join("s.svg")).unwrap();
            let doc = XmlNode::parse(&svg).unwrap();
            assert_eq!(doc.name, "svg");
            for g in topo.of_kind(NodeKind::Gpu) {
                let gi = topo.nodes[g].gpu().unwrap();
                let label = format!(">GPU{} (dev {}, sm{})<", gi.rank, gi.dev, gi.sm);
                assert!(svg.contains(&label), "{label} in {}", path.display());
            }
            let dumped = std::fs::read_to_string(tmp.dir.join("t.xml")).unwrap();
            assert_eq!(parse_topology(&dumped).unwrap().0, topo);
            let graphs = parse_graphs(
                &std::fs::read_to_string(tmp.dir.join("g.xml")).unwrap(),
                &topo,
            )
            .unwrap();
            assert_eq!(graphs.len(), 5);
            let view = TopoView::new(topo, None, true, &PathOptions::default());
            if let Some((ring, _, _)) = &view.graphs {
                assert_eq!(graphs[0].channels, ring.channels);
            }
        }
        assert!(systems >= 10, "{systems}");
    }

    #[test]
    fn malformed_files_name_element_attribute_line_and_column() {
        let tmp = FakeSys::new("cli-bad");
        let good = include_str!("../../../tests/fixtures/topo/h200x4-measured.xml");
        let bad_attr = good.replacen("link_width=\"0\"", "link_width=\"wide\"", 2);
        let cases = [
            (
                bad_attr,
                "<pci> at line 3, column 5: `link_width=\"wide\"` is not a valid value",
            ),
            (
                good[..good.len() - 40].to_string(),
                "XML error: the file ends while <gpu> is still open (truncated file?)",
            ),
            (
                good.replacen("<gpu dev=\"0\" sm=\"90\"", "<gpu sm=\"90\"", 1),
                "<gpu> at line 4, column 7 has no `dev` attribute",
            ),
            (
                good.replacen("</pci>", "</pcx>", 1),
                "at line 7, column 5: </pcx> closes <pci>",
            ),
        ];
        for (text, want) in cases {
            let p = tmp.dir.join("bad.xml");
            std::fs::write(&p, &text).unwrap();
            let e = run_topo_with_env(&["--file".into(), p.to_str().unwrap().into()], &no_env)
                .unwrap_err();
            assert!(
                matches!(e, TopoCliError::Topo(TopoError::Parse { .. })),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(msg.contains("bad.xml"), "{msg}");
            // The binary prints this as it is: one prefix, then the file.
            assert!(msg.starts_with("weft topo: /"), "{msg}");
            assert_eq!(msg.matches("weft topo").count(), 1, "{msg}");
        }
        // NCCL_TOPO_FILE is honoured, and a missing file names itself.
        let missing = tmp.dir.join("nope.xml");
        let m = missing.to_str().unwrap().to_string();
        let e = run_topo_with_env(&[], &|k| (k == "NCCL_TOPO_FILE").then(|| m.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read topology file") && e.contains("nope.xml"),
            "{e}"
        );
    }

    #[test]
    fn bad_arguments_say_what_and_show_usage() {
        for (args, want) in [
            (vec!["--frobnicate"], "unknown argument `--frobnicate`"),
            (vec!["--hosts", "0"], "--hosts 0: expected a number"),
            (vec!["--svg"], "--svg needs a value"),
        ] {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let e = run_topo_with_env(&args, &no_env).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, TopoCliError::Usage(_)));
            assert!(
                msg.contains(want) && msg.contains("usage: weft topo"),
                "{msg}"
            );
        }
        let help = run(&["--help"], &no_env);
        assert!(help.text.starts_with("usage: weft topo"));
    }

    #[test]
    fn dump_env_vars_write_nccls_files() {
        let tmp = FakeSys::new("cli-env");
        let t = tmp.dir.join("topo.xml").to_str().unwrap().to_string();
        let g = tmp.dir.join("graph.xml").to_str().unwrap().to_string();
        let file = fixture("dgx-h100.xml").to_str().unwrap().to_string();
        let env = |k: &str| match k {
            "NCCL_TOPO_FILE" => Some(file.clone()),
            "NCCL_TOPO_DUMP_FILE" => Some(t.clone()),
            "NCCL_GRAPH_DUMP_FILE" => Some(g.clone()),
            _ => None,
        };
        let out = run(&[], &env);
        assert!(
            out.text
                .contains("NVLS nHeads 8 heads (ranks) 0 1 2 3 4 5 6 7")
        );
        assert!(out.text.contains("Pattern 5, crossNic 0, nChannels 8"));
        assert!(out.text.contains("\n 7 : GPU/0-df000\n"));
        assert_eq!(
            std::fs::read_to_string(&t).unwrap(),
            write_topology(
                &parse_topology(include_str!("../../../tests/fixtures/topo/dgx-h100.xml"))
                    .unwrap()
                    .0
            )
        );
        let graphs = parse_graphs(
            &std::fs::read_to_string(&g).unwrap(),
            &parse_topology(include_str!("../../../tests/fixtures/topo/dgx-h100.xml"))
                .unwrap()
                .0,
        )
        .unwrap();
        assert_eq!(graphs[4].pattern, Pattern::Nvls);
        assert_eq!(graphs[4].nchannels(), 8);
    }

    /// `--sysfs`: a fake tree with an active InfiniBand HCA behind a PCIe switch.
    #[test]
    fn fake_sysfs_detection_through_the_cli() {
        let fake = FakeSys::new("cli-sysfs");
        let up = "pci0000:40/0000:40:01.0/0000:41:00.0";
        for p in ["pci0000:40/0000:40:01.0", up, &format!("{up}/0000:42:02.0")] {
            fake.pci(
                p,
                &[
                    ("class", "0x060400"),
                    ("max_link_speed", "16.0 GT/s PCIe"),
                    ("max_link_width", "16"),
                    ("numa_node", "1"),
                ],
            );
        }
        let hca = format!("{up}/0000:42:02.0/0000:43:00.0");
        fake.pci(
            &hca,
            &[
                ("class", "0x020700"),
                ("max_link_speed", "16.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("numa_node", "1"),
            ],
        );
        fake.ib(
            "mlx5_3",
            &hca,
            "0c42:a103:0070:1b2e",
            &[(1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")],
        );
        fake.file("sys/devices/system/node/node1/cpumap", "ff00\n");
        fake.cpuinfo("GenuineIntel", 6, 143);
        let out = run(&["--sysfs", fake.dir.to_str().unwrap()], &no_env);
        let t = &out.text;
        assert!(t.contains("  CPU0  host 0  numa 1  "), "{t}");
        assert!(
            t.contains("GenuineIntel family 6 model 143  cpus 8-15"),
            "{t}"
        );
        assert!(
            t.contains(
                "  NIC0  mlx5_3  dev 0  port 1  200 Gb/s  gdr 0  0000:43:00.0  IB (Ethernet)  up"
            ),
            "{t}"
        );
        assert!(t.contains("NIC0\t X \t8-15\t1\n"), "{t}");
        assert!(t.contains("no GPU: no channels"), "{t}");
        assert_eq!(
            out.notes[0].text,
            format!("detecting from {}: GPUs are not probed", fake.dir.display())
        );
    }

    /// This machine, whatever it has: detection succeeds and prints a CPU. Without a CUDA
    /// driver (as on the build machines) that is the CPU-only view, and a note says why.
    #[test]
    fn detection_on_this_machine() {
        let out = run(&[], &no_env);
        let t = &out.text;
        assert!(t.starts_with("# weft topo: detected from /sys\n"), "{t}");
        assert!(t.contains("\nCPUs\n  CPU0  host 0  numa "), "{t}");
        assert!(t.contains("\nPath matrix\n"), "{t}");
        if weft_sys::CudaDriver::shared().is_err() {
            assert!(
                t.contains("  none (CPU-only view: no channels to search)"),
                "{t}"
            );
            assert!(t.contains("no GPU: no channels"), "{t}");
            assert!(
                out.notes
                    .iter()
                    .any(|n| n.level == log::Level::Info && n.text.contains("libcuda.so.1")),
                "{:?}",
                out.notes
            );
        }
    }
}
