//! Channel search on the topology fixtures, compared with what NCCL does.
//!
//! How each expected answer was obtained:
//! - h200x4-measured: measured. NCCL 2.28.9 on the 4x H200 machine (NVSwitch, 18 NVLinks per
//!   GPU), PyTorch all-reduce with NCCL_DEBUG=INFO, NCCL_GRAPH_DUMP_FILE and
//!   NCCL_TOPO_DUMP_FILE (tests/fixtures/topo/h200x4-measured*.{xml,txt}).
//! - dgx-h100 (8 GPUs on NVSwitch): reasoned from search.cc, not measured. With an NVSwitch
//!   each GPU may only pass to its index neighbours, so every ring is 0 1 ... 7. At 60 GB/s
//!   (first SM90 intra speed under 370.8) six rings fit (6 x 60 = 360 <= 370.8). Lower speeds
//!   only tie (7 x 50 < 360, 9 x 40 = 12 x 30 = 360), so 6 x 60 stays, is duplicated to
//!   12 x 30, 40 does not fit 12 channels: ring 12 x 30, communicator 24 channels, as on 4 GPUs.
//!   NVLS: each of the 8 channels takes bw from every GPU link and twice from its head's:
//!   9 x bw <= 370.8 allows 40 (first speed with 8 x speed <= 370.8); then pass 2 raises
//!   bwInter up the ladder to 60 while bwIntra stays 40.
//! - hgx-h100-4gpu (6 NVLinks per pair, no NVSwitch): reasoned, then confirmed by a
//!   measurement: each directed pair carries 123.6 GB/s and each GPU 370.8 in total; the
//!   search finds 6 channels at 60 (each GPU's 3 out-links used twice) = 360 GB/s per GPU,
//!   duplicated to 12 x 30. NCCL gave exactly that (and the ring orders) for the same
//!   links on the H200s (weft-h200x4-mesh6, below).
//! - The weft-h200x4-* and h200x4-as-*hosts fixtures: measured, see each test.

use weft_core::search::graph_xml::{graphs_to_xml, parse_graphs, write_graphs};
use weft_core::search::trees::{tree_links, trees_line};
use weft_core::search::{Fallback, Pattern, SearchOptions, compute, ring_lines};
use weft_core::topo::model::Topology;
use weft_core::topo::system_xml::parse_topology;
use weft_core::topo::xml::XmlNode;
use weft_core::topo::{PathOptions, PathType, Paths, compute_paths};

const DGX: &str = include_str!("../../tests/fixtures/topo/dgx-h100.xml");
const HGX4: &str = include_str!("../../tests/fixtures/topo/hgx-h100-4gpu.xml");
const PCIE: &str = include_str!("../../tests/fixtures/topo/pcie-2socket.xml");
const H200X4: &str = include_str!("../../tests/fixtures/topo/h200x4-measured.xml");
const H200X4_GRAPH: &str = include_str!("../../tests/fixtures/topo/h200x4-measured-graph.xml");
const H200X4_INFO: &str = include_str!("../../tests/fixtures/topo/h200x4-measured-nccl-info.txt");

fn load(text: &str) -> (Topology, Paths) {
    let (topo, _) = parse_topology(text).unwrap();
    let paths = compute_paths(&topo, &PathOptions::default());
    (topo, paths)
}

fn info_line(prefix: &str) -> String {
    let line = H200X4_INFO
        .lines()
        .find(|l| l.contains(prefix))
        .expect("line in NCCL log");
    line[line.find("NCCL INFO ").unwrap() + "NCCL INFO ".len()..].to_string()
}

#[test]
fn h200x4_ring_and_tree_match_nccl_measured() {
    let (t, p) = load(H200X4);
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    assert_eq!(ring.fallback, None);
    assert_eq!(ring.summary(), info_line("Pattern 4"));
    let lines = ring_lines(&ring, 1);
    assert_eq!(lines.len(), 24);
    for (c, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("Channel {c:02}/24 : 0 1 2 3"));
    }
    assert_eq!(lines[0], info_line("Channel 00/24"));
    let tree = compute(
        &t,
        &p,
        1,
        Pattern::BalancedTree,
        &SearchOptions::tree(false, ring.nchannels()),
    );
    assert_eq!(tree.summary(), info_line("Pattern 1"));
    for rank in [2i64, 3] {
        let links = tree_links(&tree, 1, rank, ring.nchannels().min(tree.nchannels()));
        assert_eq!(links.len(), 24);
        assert_eq!(
            trees_line(&links, rank),
            info_line(&format!("[{rank}] NCCL INFO Trees"))
        );
    }
    // The graph XML NCCL dumped holds the same two graphs, element for element.
    let dumped = XmlNode::parse(H200X4_GRAPH).unwrap();
    let ours = graphs_to_xml(&[&ring, &tree], &t);
    assert_eq!(ours.children[0], dumped.children[0]);
    assert_eq!(ours.children[1], dumped.children[1]);
    // And reading NCCL's file gives back our graphs.
    let read = parse_graphs(H200X4_GRAPH, &t).unwrap();
    assert_eq!(read[0].channels, ring.channels);
    assert_eq!(read[1].channels, tree.channels);
    assert_eq!(read[0].type_intra, PathType::Nvl);
    assert_eq!(read[1].pattern, Pattern::BalancedTree);
    // Our own dump reads back to the same graphs (the XML has no budget flag).
    let mut again = parse_graphs(&write_graphs(&[&ring, &tree], &t), &t).unwrap();
    again[0].budget_exhausted = ring.budget_exhausted;
    again[1].budget_exhausted = tree.budget_exhausted;
    assert_eq!(again[0], ring);
    assert_eq!(again[1], tree);
}

#[test]
fn dgx_h100_ring_and_nvls() {
    let (t, p) = load(DGX);
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    assert_eq!(
        ring.summary(),
        "Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1"
    );
    for c in &ring.channels {
        assert_eq!(c.gpus, [0, 1, 2, 3, 4, 5, 6, 7]);
    }
    assert_eq!(ring_lines(&ring, 1)[23], "Channel 23/24 : 0 1 2 3 4 5 6 7");
    let nvls = compute(&t, &p, 3, Pattern::Nvls, &SearchOptions::nvls(false));
    assert_eq!(nvls.fallback, None);
    assert_eq!(nvls.nchannels(), 8);
    // Every GPU is a head exactly once, in order.
    let heads: Vec<i32> = nvls.channels.iter().map(|c| c.gpus[0]).collect();
    assert_eq!(heads, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(nvls.bw_intra, 40.0);
    assert_eq!(nvls.bw_inter, 60.0);
}

#[test]
fn dgx_h100_two_nodes_ring_goes_through_rail_local_nics() {
    let (t, p) = load(DGX);
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(true));
    assert_eq!(ring.fallback, None);
    assert!(ring.nchannels() >= 8, "{}", ring.summary());
    assert_eq!(ring.type_intra, PathType::Nvl);
    for c in &ring.channels {
        let (inn, out) = c.nets.expect("inter-node channel has NICs");
        // Enters through the first GPU's own NIC (PIX), leaves through the last GPU's.
        assert_eq!(inn, c.gpus[0]);
        assert!(ring.type_inter <= PathType::Pxn);
        assert!((0..8).contains(&out));
        let mut sorted = c.gpus.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3, 4, 5, 6, 7]);
    }
    // Two nodes: rings visit node 0's GPUs then node 1's.
    let line = &ring_lines(&ring, 2)[0];
    assert!(
        line.ends_with(&format!(" {}", 8 + ring.channels[0].gpus[7])),
        "{line}"
    );
}

#[test]
fn hgx_4gpu_all_to_all() {
    let (t, p) = load(HGX4);
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    assert_eq!(ring.fallback, None);
    assert_eq!(ring.type_intra, PathType::Nvl);
    assert_eq!(
        (ring.nchannels(), ring.bw_intra),
        (12, 30.0),
        "{}",
        ring.summary()
    );
    for c in &ring.channels {
        let mut s = c.gpus.clone();
        s.sort();
        assert_eq!(s, [0, 1, 2, 3]);
    }
    // No NVSwitch: NVLS is not possible and says so.
    let nvls = compute(&t, &p, 3, Pattern::Nvls, &SearchOptions::nvls(false));
    assert_eq!(nvls.fallback, Some(Fallback::Unsupported));
    assert_eq!(nvls.nchannels(), 0);
}

#[test]
fn pcie_only_ring_uses_the_slow_link_and_is_deterministic() {
    let (t, p) = load(PCIE);
    let a = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    let b = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    assert_eq!(a, b);
    assert_eq!(a.fallback, None);
    assert_eq!(a.type_intra, PathType::Sys);
    // The ring crosses the sockets twice over a 16 GB/s link shared by both directions' hops.
    assert!(a.bw_intra * a.nchannels() as f32 <= 16.0, "{}", a.summary());
}

#[test]
fn disconnected_gpus_fall_back_to_simple_order_and_say_so() {
    // Two hosts in one file and a single-host search: no path joins GPU 0 and GPU 1, so no
    // ring exists. NCCL then uses the GPUs in index order at 0.1 GB/s, type SYS.
    let text = "<system version=\"1\">\n\
        <cpu host_hash=\"0x1\" numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"25\" modelid=\"1\">\n\
        <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n\
        <gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"/></pci></cpu>\n\
        <cpu host_hash=\"0x2\" numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"25\" modelid=\"1\">\n\
        <pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n\
        <gpu dev=\"0\" sm=\"80\" rank=\"1\" gdr=\"1\"/></pci></cpu></system>";
    let (t, p) = load(text);
    assert_eq!(
        p.kind(t.gpu_by_rank(0).unwrap(), t.gpu_by_rank(1).unwrap()),
        PathType::Dis
    );
    let g = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    assert_eq!(g.fallback, Some(Fallback::SimpleOrder));
    assert_eq!(
        g.channels,
        [weft_core::search::Channel {
            gpus: vec![0, 1],
            nets: None
        }]
    );
    assert_eq!(
        (g.bw_intra, g.type_intra, g.type_inter),
        (0.1, PathType::Sys, PathType::Dis)
    );
    assert_eq!(
        g.summary(),
        "Pattern 4, crossNic 0, nChannels 1, bw 0.100000/0.000000, type SYS/DIS, sameChannels 1"
    );
}

/// Random hosts: 1 to 7 GPUs under random PCIe switches of two sockets, random NVLink
/// counts between random pairs, sometimes an NVSwitch. Whatever the search returns, each
/// ring and tree channel visits every GPU exactly once, NVLS heads are distinct GPUs, and a
/// second run gives the same graph.
#[test]
fn random_topologies_give_valid_deterministic_graphs() {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for case in 0..16 {
        let ngpus = 1 + next(7) as usize;
        let sm = [70, 80, 90, 100][next(4) as usize];
        let nvswitch = next(3) == 0;
        let mut links: Vec<(usize, usize, u64)> = Vec::new();
        for a in 0..ngpus {
            for b in a + 1..ngpus {
                if next(2) == 0 {
                    let c = next(7);
                    if c > 0 {
                        links.push((a, b, c));
                    }
                }
            }
        }
        let mut text = String::from("<system version=\"1\">\n");
        for sock in 0..2 {
            text += &format!(
                "<cpu numaid=\"{sock}\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n"
            );
            for g in (0..ngpus).filter(|g| g % 2 == sock) {
                let sw = next(3);
                text += &format!(
                    "<pci busid=\"0000:{:02x}:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n",
                    0x80 + sock * 8 + sw as usize
                );
                text += &format!(
                    "<pci busid=\"0000:{:02x}:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"{}\">\n",
                    0x10 + g,
                    [4, 8, 16][next(3) as usize]
                );
                text += &format!("<gpu dev=\"{g}\" sm=\"{sm}\" rank=\"{g}\" gdr=\"1\">\n");
                if nvswitch {
                    text +=
                        "<nvlink target=\"fffffff:ff:ff.0\" count=\"12\" tclass=\"0x068000\"/>\n";
                } else {
                    for &(a, b, c) in links.iter().filter(|l| l.0 == g || l.1 == g) {
                        let peer = if a == g { b } else { a };
                        text += &format!(
                            "<nvlink target=\"0000:{:02x}:00.0\" count=\"{c}\" tclass=\"0x030200\"/>\n",
                            0x10 + peer
                        );
                    }
                }
                text += "</gpu></pci></pci>\n";
            }
            text += "</cpu>\n";
        }
        text += "</system>\n";
        let (t, p) = load(&text);
        let all: Vec<i32> = (0..ngpus as i32).collect();
        let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
        let tree = compute(
            &t,
            &p,
            1,
            Pattern::BalancedTree,
            &SearchOptions::tree(false, ring.nchannels()),
        );
        for g in [&ring, &tree] {
            assert!(g.nchannels() >= 1, "case {case}: {}", g.summary());
            for c in &g.channels {
                let mut s = c.gpus.clone();
                s.sort();
                assert_eq!(s, all, "case {case}: {}", g.summary());
            }
        }
        assert_eq!(
            ring,
            compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false)),
            "case {case}"
        );
        let nvls = compute(&t, &p, 3, Pattern::Nvls, &SearchOptions::nvls(false));
        if nvswitch && sm >= 90 {
            let mut heads: Vec<i32> = nvls.channels.iter().map(|c| c.gpus[0]).collect();
            assert_eq!(heads.len(), ngpus, "case {case}: {}", nvls.summary());
            heads.sort();
            assert_eq!(heads, all);
        } else {
            assert_eq!(nvls.fallback, Some(Fallback::Unsupported));
        }
    }
}

const WEFT_GRAPH: &str = include_str!("../../tests/fixtures/topo/h200x4-weft-graph.xml");
const WEFT_GRAPH_INFO: &str =
    include_str!("../../tests/fixtures/topo/h200x4-weft-graph-nccl-info.txt");

/// Measured: weft wrote h200x4-weft-graph.xml (two ring orders alternating, 8 channels,
/// ring and balanced tree); NCCL 2.28.9 on the 4x H200 machine loaded it with
/// NCCL_GRAPH_FILE ("Search 0 : 8 channels loaded from XML graph"), ran a checked
/// all-reduce, and printed the Channel and Trees lines kept in the -nccl-info.txt file.
#[test]
fn nccl_loads_weft_graph_xml_and_trees_agree() {
    let (t, _) = parse_topology(H200X4).unwrap();
    let ring = weft_core::search::Graph {
        id: 0,
        pattern: Pattern::Ring,
        cross_nic: 0,
        bw_intra: 20.0,
        bw_inter: 20.0,
        latency_inter: 0.0,
        type_intra: PathType::Nvl,
        type_inter: PathType::Pix,
        same_channels: false,
        channels: (0..8)
            .map(|c| weft_core::search::Channel {
                gpus: if c % 2 == 0 {
                    vec![0, 2, 1, 3]
                } else {
                    vec![0, 3, 1, 2]
                },
                nets: None,
            })
            .collect(),
        fallback: None,
        budget_exhausted: false,
    };
    let mut tree = ring.clone();
    tree.id = 1;
    tree.pattern = Pattern::BalancedTree;
    assert_eq!(write_graphs(&[&ring, &tree], &t), WEFT_GRAPH);
    let nccl = |needle: &str| {
        let l = WEFT_GRAPH_INFO
            .lines()
            .find(|l| l.contains(needle))
            .expect("in log");
        l[l.find("NCCL INFO ").unwrap() + 10..].to_string()
    };
    assert_eq!(ring_lines(&ring, 1)[1], nccl("Channel 01/16"));
    assert_eq!(ring_lines(&ring, 1).len(), 16);
    for rank in 0..4i64 {
        let links = tree_links(&tree, 1, rank, 8);
        assert_eq!(
            trees_line(&links, rank),
            nccl(&format!("[{rank}] NCCL INFO Trees"))
        );
    }
}

/// Measured: each weft-h200x4-*.xml was written by weft (the measured H200 topology with
/// its NVLinks replaced), loaded by NCCL 2.28.9 on the 4x H200 machine through
/// NCCL_TOPO_FILE, a checked all-reduce ran, and rank 0's INFO lines were kept in the
/// matching -nccl-info.txt. weft's search must print the same graphs and every ring line.
#[test]
fn weft_written_topologies_search_like_nccl_measured() {
    for (topo_text, info) in [
        (
            include_str!("../../tests/fixtures/topo/weft-h200x4-nvs9.xml"),
            include_str!("../../tests/fixtures/topo/weft-h200x4-nvs9-nccl-info.txt"),
        ),
        (
            include_str!("../../tests/fixtures/topo/weft-h200x4-mesh6.xml"),
            include_str!("../../tests/fixtures/topo/weft-h200x4-mesh6-nccl-info.txt"),
        ),
        (
            include_str!("../../tests/fixtures/topo/weft-h200x4-pairs18.xml"),
            include_str!("../../tests/fixtures/topo/weft-h200x4-pairs18-nccl-info.txt"),
        ),
    ] {
        assert!(info.contains("ALLREDUCE_OK"));
        let nccl: Vec<&str> = info
            .lines()
            .filter_map(|l| l.find("NCCL INFO ").map(|i| &l[i + 10..]))
            .collect();
        let (t, p) = load(topo_text);
        let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
        let tree = compute(
            &t,
            &p,
            1,
            Pattern::BalancedTree,
            &SearchOptions::tree(false, ring.nchannels()),
        );
        let patterns: Vec<&str> = nccl
            .iter()
            .copied()
            .filter(|l| l.starts_with("Pattern"))
            .collect();
        assert_eq!(patterns, [ring.summary().as_str(), tree.summary().as_str()]);
        let channels: Vec<&str> = nccl
            .iter()
            .copied()
            .filter(|l| l.starts_with("Channel") && !l.contains(" via "))
            .collect();
        assert_eq!(channels, ring_lines(&ring, 1));
        let trees = nccl.iter().find(|l| l.starts_with("Trees")).unwrap();
        let links = tree_links(&tree, 1, 0, ring.nchannels().min(tree.nchannels()));
        assert_eq!(*trees, trees_line(&links, 0));
    }
}

/// Measured: the 4x H200 machine split into two "hosts" of two GPUs, then four hosts of one
/// GPU (NCCL_HOSTID per rank), so NCCL 2.28.9 searched inter-node graphs through the
/// 10 Gb/s eth0 socket NIC (no GDR). Rank 0's topology and graph dumps and every rank's
/// INFO lines are kept in h200x4-as-{2,4}hosts-measured*.
#[test]
fn multi_host_inter_node_search_matches_nccl_measured() {
    check_hosts(
        2,
        include_str!("../../tests/fixtures/topo/h200x4-as-2hosts-measured.xml"),
        include_str!("../../tests/fixtures/topo/h200x4-as-2hosts-measured-graph.xml"),
        include_str!("../../tests/fixtures/topo/h200x4-as-2hosts-measured-nccl-info.txt"),
    );
    // One GPU per host: NCCL switches the tree to pattern 3 (TREE) and types are LOC/PHB.
    check_hosts(
        4,
        include_str!("../../tests/fixtures/topo/h200x4-as-4hosts-measured.xml"),
        include_str!("../../tests/fixtures/topo/h200x4-as-4hosts-measured-graph.xml"),
        include_str!("../../tests/fixtures/topo/h200x4-as-4hosts-measured-nccl-info.txt"),
    );
}

fn check_hosts(nnodes: usize, topo: &str, dumped: &str, info: &str) {
    assert!(info.contains("ALLREDUCE_OK"));
    let (t, p) = load(topo);
    let nccl = |needle: &str| {
        let l = info.lines().find(|l| l.contains(needle)).expect("in log");
        l[l.find("NCCL INFO ").unwrap() + 10..].to_string()
    };
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(true));
    let tree = compute(
        &t,
        &p,
        1,
        Pattern::BalancedTree,
        &SearchOptions::tree(true, ring.nchannels()),
    );
    let patterns: Vec<String> = info
        .lines()
        .filter(|l| l.contains("[0] NCCL INFO Pattern"))
        .map(|l| l[l.find("NCCL INFO ").unwrap() + 10..].to_string())
        .collect();
    assert_eq!(patterns, [ring.summary(), tree.summary()]);
    let lines = ring_lines(&ring, nnodes);
    assert_eq!(lines, [nccl("Channel 00/02"), nccl("Channel 01/02")]);
    let comm = ring.nchannels().min(tree.nchannels());
    for rank in 0..4i64 {
        let links = tree_links(&tree, nnodes, rank, comm);
        assert_eq!(
            trees_line(&links, rank),
            nccl(&format!("[{rank}] NCCL INFO Trees"))
        );
    }
    let ours = graphs_to_xml(&[&ring, &tree], &t);
    let theirs = XmlNode::parse(dumped).unwrap();
    assert_eq!(ours.children[..2], theirs.children[..2]);
}

/// Measured: NCCL's INFO lines for the paths of every GPU and NET and its search ceilings
/// (`=== System : maxBw ... ===`), on the 4x H200 machine as one host and split in two.
#[test]
fn path_lines_and_system_bw_match_nccl_measured() {
    use weft_core::search::system_line;
    use weft_core::topo::model::NodeKind;
    for (topo, lines, inter) in [
        (
            H200X4,
            include_str!("../../tests/fixtures/topo/h200x4-measured-paths.txt"),
            false,
        ),
        (
            include_str!("../../tests/fixtures/topo/h200x4-as-2hosts-measured.xml"),
            include_str!("../../tests/fixtures/topo/h200x4-as-2hosts-measured-paths.txt"),
            true,
        ),
    ] {
        let nccl: Vec<&str> = lines
            .lines()
            .map(|l| &l[l.find("NCCL INFO ").unwrap() + 10..])
            .collect();
        let (t, p) = load(topo);
        let mut ours = vec![system_line(&t, &p, inter)];
        for kind in [NodeKind::Gpu, NodeKind::Net] {
            for n in t.of_kind(kind) {
                ours.push(p.describe(&t, n));
            }
        }
        assert_eq!(ours, nccl);
    }
}

#[test]
fn collnet_direct_is_refused_not_faked() {
    let (t, p) = load(DGX);
    let g = compute(
        &t,
        &p,
        4,
        Pattern::CollnetDirect,
        &SearchOptions::ring(true),
    );
    assert_eq!(g.fallback, Some(Fallback::Unsupported));
    assert!(g.channels.is_empty());
}

/// Measured: weft-h200x4-pcie.xml (written by weft: the four H200s without NVLink, two per
/// PCIe switch, one switch per socket of an Intel host) loaded by NCCL 2.28.9 through
/// NCCL_TOPO_FILE on the 4x H200 machine. Exercises PIX/PHB/SYS paths, P2P routed through
/// the CPU across sockets, the Intel P2P overhead and the PCI-order search.
#[test]
fn pcie_only_weft_topology_matches_nccl_measured() {
    use weft_core::search::system_line;
    use weft_core::topo::model::NodeKind;
    let info = include_str!("../../tests/fixtures/topo/weft-h200x4-pcie-nccl-info.txt");
    assert!(info.contains("ALLREDUCE_OK"));
    let nccl: Vec<String> = info
        .lines()
        .filter_map(|l| l.find("NCCL INFO ").map(|i| l[i + 10..].to_string()))
        // NCCL also added the machine's real eth0 with a CPU of its own; both are unreachable
        // from the file's devices and show up as DIS entries weft does not have.
        .map(|l| {
            l.replace("CPU/0-0 (0/0.0/DIS) ", "")
                .replace("NET/0-0 (0/0.0/DIS) ", "")
        })
        .collect();
    let (t, p) = load(include_str!(
        "../../tests/fixtures/topo/weft-h200x4-pcie.xml"
    ));
    let ring = compute(&t, &p, 0, Pattern::Ring, &SearchOptions::ring(false));
    let tree = compute(
        &t,
        &p,
        1,
        Pattern::BalancedTree,
        &SearchOptions::tree(false, ring.nchannels()),
    );
    let mut ours = vec![system_line(&t, &p, false)];
    ours.extend(
        t.of_kind(NodeKind::Gpu)
            .into_iter()
            .map(|g| p.describe(&t, g)),
    );
    ours.push(ring.summary());
    ours.push(tree.summary());
    ours.extend(ring_lines(&ring, 1));
    let comm = ring.nchannels().min(tree.nchannels());
    ours.push(trees_line(&tree_links(&tree, 1, 0, comm), 0));
    let theirs: Vec<String> = nccl
        .into_iter()
        .filter(|l| !l.starts_with("NCCL version"))
        .collect();
    assert_eq!(ours, theirs);
}
