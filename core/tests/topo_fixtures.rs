//! Loads each topology fixture in tests/fixtures/topo and checks the model, the paths
//! between GPUs, NICs and CPUs, and the XML round trip.
//!
//! Expected values come from NCCL's rules (src/graph/topo.cc, paths.cc) applied by hand:
//! NVLink SM90 = 20.6 GB/s per link, PCIe Gen5 x16 = 32 GT/s x 16 / 80 * 10 = 48 GB/s,
//! Gen4 x16 = 24 GB/s, 400 Gb/s NIC = 50 GB/s, Intel SPR inter-socket = 22 GB/s, AMD = 16.
//! h200x4-measured.xml was dumped by NCCL 2.28.9 (NCCL_TOPO_DUMP_FILE) on the 4x H200 machine.

use weft_core::topo::model::{NodeKind, Topology};
use weft_core::topo::system_xml::{parse_topology, write_topology};
use weft_core::topo::{GdrMode, PathOptions, PathType, Paths, compute_paths};

const DGX: &str = include_str!("../../tests/fixtures/topo/dgx-h100.xml");
const HGX4: &str = include_str!("../../tests/fixtures/topo/hgx-h100-4gpu.xml");
const PCIE: &str = include_str!("../../tests/fixtures/topo/pcie-2socket.xml");
const CPU_ONLY: &str = include_str!("../../tests/fixtures/topo/cpu-only.xml");
const H200X4: &str = include_str!("../../tests/fixtures/topo/h200x4-measured.xml");

fn load(text: &str) -> (Topology, Paths) {
    let (topo, warnings) = parse_topology(text).expect("fixture loads");
    assert!(warnings.is_empty(), "unexpected warnings: {warnings:?}");
    let paths = compute_paths(&topo, &PathOptions::default());
    (topo, paths)
}

fn gpu(t: &Topology, rank: i32) -> usize {
    t.gpu_by_rank(rank).expect("gpu exists")
}

fn net(t: &Topology, dev: i32) -> usize {
    t.nodes
        .iter()
        .position(|n| n.net().is_some_and(|x| x.dev == dev))
        .expect("net exists")
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-3
}

#[test]
fn every_fixture_round_trips_through_xml() {
    for (name, text) in [
        ("dgx", DGX),
        ("hgx4", HGX4),
        ("pcie", PCIE),
        ("cpu", CPU_ONLY),
        ("h200", H200X4),
    ] {
        let (topo, _) = parse_topology(text).unwrap();
        let written = write_topology(&topo);
        let (again, warnings) = parse_topology(&written).unwrap();
        assert!(warnings.is_empty(), "{name}");
        assert_eq!(topo, again, "{name}: model changed through XML");
        assert_eq!(written, write_topology(&again), "{name}: XML not stable");
    }
    // NCCL's own dump comes back byte for byte: same attribute order, layout and nesting.
    let (topo, _) = parse_topology(H200X4).unwrap();
    assert_eq!(write_topology(&topo), H200X4);
}

#[test]
fn dgx_h100_paths() {
    let (t, p) = load(DGX);
    assert_eq!(t.of_kind(NodeKind::Gpu).len(), 8);
    assert_eq!(t.of_kind(NodeKind::Net).len(), 8);
    assert_eq!(t.of_kind(NodeKind::Nvs).len(), 1);
    assert_eq!(t.of_kind(NodeKind::Cpu).len(), 2);
    for a in 0..8 {
        for b in 0..8 {
            let (ga, gb) = (gpu(&t, a), gpu(&t, b));
            if a == b {
                assert_eq!(p.kind(ga, gb), PathType::Loc);
                continue;
            }
            // Through the NVSwitch: 18 links x 20.6 GB/s.
            assert_eq!(p.kind(ga, gb), PathType::Nvl, "{a}->{b}");
            assert!(close(p.bw(ga, gb), 370.8), "{a}->{b}: {}", p.bw(ga, gb));
            assert_eq!(p.get(ga, gb).unwrap().hops.len(), 2);
        }
    }
    let (g0, g1, g2) = (gpu(&t, 0), gpu(&t, 1), gpu(&t, 2));
    // Same leaf switch: PIX at PCIe Gen5 x16.
    assert_eq!(p.kind(g0, net(&t, 0)), PathType::Pix);
    assert!(close(p.bw(g0, net(&t, 0)), 48.0));
    // Sibling leaf under the same top switch: PXB, and no PXN since the bandwidth is the same.
    assert_eq!(p.kind(g0, net(&t, 1)), PathType::Pxb);
    assert!(close(p.bw(g0, net(&t, 1)), 48.0));
    // Other switch complex or other socket: through the CPU, so PXN through the NIC's own GPU.
    assert_eq!(p.kind(g0, net(&t, 2)), PathType::Pxn);
    assert_eq!(p.pxn_relay(&t, g0, net(&t, 2)), Some(g2));
    assert_eq!(p.kind(g0, net(&t, 6)), PathType::Pxn);
    assert!(close(p.bw(g0, net(&t, 6)), 48.0));
    // NIC -> GPU is not relayed: across the sockets it is SYS, limited by UPI (SPR: 22 GB/s).
    assert_eq!(p.kind(net(&t, 6), g0), PathType::Sys);
    assert!(close(p.bw(net(&t, 6), g0), 22.0));
    assert_eq!(p.kind(net(&t, 2), g0), PathType::Phb);
    // Rails: NCCL's local GPU of NIC k is GPU k.
    for k in 0..8 {
        assert_eq!(p.net_local_gpu(net(&t, k)), Some(gpu(&t, k)));
        assert_eq!(p.local_net(&t, gpu(&t, k), 0), Some(net(&t, k)));
    }
    let opts = PathOptions::default();
    assert!(p.p2p_allowed(&t, g0, g1, &opts));
    assert!(!p.p2p_read(&t, g0, g1)); // reads only on SM80
    assert_eq!(
        p.gdr_mode(&t, g0, net(&t, 0), true, &opts),
        GdrMode::Default
    );
    assert_eq!(
        p.gdr_mode(&t, g0, net(&t, 1), false, &opts),
        GdrMode::Default
    );
    // GDR level PIX: the PXB NIC is too far.
    let pix = PathOptions {
        gdr_level: Some(PathType::Pix),
        ..opts
    };
    assert_eq!(
        p.gdr_mode(&t, g0, net(&t, 1), false, &pix),
        GdrMode::Disabled
    );
    // Cross-socket CPU path.
    let cpus = t.of_kind(NodeKind::Cpu);
    assert_eq!(p.kind(g0, cpus[1]), PathType::Sys);
    assert_eq!(p.kind(g0, cpus[0]), PathType::Phb);
    assert_eq!(p.local_cpu(&t, g0), Some(cpus[0]));
}

#[test]
fn hgx_4gpu_all_to_all_nvlink() {
    let (t, p) = load(HGX4);
    for a in 0..4 {
        for b in 0..4 {
            if a == b {
                continue;
            }
            let (ga, gb) = (gpu(&t, a), gpu(&t, b));
            assert_eq!(p.kind(ga, gb), PathType::Nvl);
            assert!(close(p.bw(ga, gb), 6.0 * 20.6));
            assert_eq!(p.get(ga, gb).unwrap().hops.len(), 1);
        }
    }
    // The NIC hangs under its own switch: GPU -> switch -> CPU -> switch -> NIC is PHB, no
    // PXN (GDR from any GPU is too far), so GDR is off and the path goes through the CPU.
    let (g0, n0) = (gpu(&t, 0), net(&t, 0));
    assert_eq!(p.kind(g0, n0), PathType::Phb);
    assert_eq!(
        p.gdr_mode(&t, g0, n0, false, &PathOptions::default()),
        GdrMode::Disabled
    );
}

#[test]
fn nvb_through_an_intermediate_gpu() {
    // Drop the 0<->2 links from the 4-GPU board: 0 reaches 2 through 1 (or 3) as NVB.
    let to_gpu2 = "<nvlink target=\"0000:4c:00.0\" count=\"6\" tclass=\"0x030200\"/>\n";
    let to_gpu0 = "<nvlink target=\"0000:19:00.0\" count=\"6\" tclass=\"0x030200\"/>\n";
    let (head, tail) = HGX4.split_at(HGX4.find("busid=\"0000:4c:00.0\"").unwrap());
    // GPU0's link to GPU2 is the first one in the file, GPU2's link to GPU0 its first one.
    let text = head.replacen(to_gpu2, "", 1) + &tail.replacen(to_gpu0, "", 1);
    let (t, p) = load(&text);
    let (g0, g2) = (gpu(&t, 0), gpu(&t, 2));
    assert_eq!(p.kind(g0, g2), PathType::Nvb);
    assert!(close(p.bw(g0, g2), 123.6));
    assert_eq!(p.get(g0, g2).unwrap().hops.len(), 2);
    let off = compute_paths(
        &t,
        &PathOptions {
            nvb_disable: true,
            ..PathOptions::default()
        },
    );
    assert_eq!(off.kind(g0, g2), PathType::Phb);
}

#[test]
fn pcie_only_two_amd_sockets() {
    let (t, p) = load(PCIE);
    let g: Vec<usize> = (0..4).map(|r| gpu(&t, r)).collect();
    assert_eq!(p.kind(g[0], g[1]), PathType::Pix);
    assert!(close(p.bw(g[0], g[1]), 24.0));
    assert_eq!(p.kind(g[2], g[3]), PathType::Pix);
    // Across sockets: SYS, limited by AMD's 16 GB/s, P2P not allowed (4 GPUs > 2).
    assert_eq!(p.kind(g[0], g[2]), PathType::Sys);
    assert!(close(p.bw(g[0], g[2]), 16.0));
    assert!(!p.p2p_allowed(&t, g[0], g[2], &PathOptions::default()));
    assert!(p.p2p_allowed(&t, g[0], g[1], &PathOptions::default()));
    let sys = PathOptions {
        p2p_level: Some(PathType::Sys),
        ..PathOptions::default()
    };
    assert!(p.p2p_allowed(&t, g[0], g[2], &sys));
    let n0 = net(&t, 0);
    assert_eq!(p.kind(g[0], n0), PathType::Phb);
    assert!(close(p.bw(g[0], n0), 24.0));
    assert_eq!(p.kind(g[3], n0), PathType::Sys);
    assert!(close(p.bw(g[3], n0), 16.0));
    assert_eq!(
        p.gdr_mode(&t, g[0], n0, false, &PathOptions::default()),
        GdrMode::Disabled
    );
    let phb = PathOptions {
        gdr_level: Some(PathType::Phb),
        ..PathOptions::default()
    };
    let p2 = compute_paths(&t, &phb);
    assert_eq!(p2.gdr_mode(&t, g[0], n0, false, &phb), GdrMode::Default);
}

#[test]
fn cpu_only_host() {
    let (t, p) = load(CPU_ONLY);
    assert!(t.of_kind(NodeKind::Gpu).is_empty());
    let cpus = t.of_kind(NodeKind::Cpu);
    assert_eq!(cpus.len(), 2);
    let n0 = net(&t, 0);
    assert_eq!(p.kind(n0, cpus[0]), PathType::Phb);
    assert_eq!(p.kind(n0, cpus[1]), PathType::Sys);
    // The port (25 Gb/s = 3.125 GB/s) is narrower than UPI.
    assert!(close(p.bw(n0, cpus[1]), 3.125));
    assert!(close(p.bw(n0, cpus[0]), 25000.0 / 8000.0));
}

#[test]
fn h200x4_measured_dump() {
    let (t, p) = load(H200X4);
    for a in 0..4 {
        for b in 0..4 {
            if a != b {
                assert_eq!(p.kind(gpu(&t, a), gpu(&t, b)), PathType::Nvl);
                assert!(close(p.bw(gpu(&t, a), gpu(&t, b)), 370.8));
            }
        }
    }
    // eth0, 10 Gb/s, no GDR, attached to the CPU.
    let n0 = net(&t, 0);
    assert_eq!(p.kind(gpu(&t, 0), n0), PathType::Phb);
    assert!(close(p.bw(gpu(&t, 0), n0), 1.25));
}

#[test]
fn every_truncation_and_byte_flip_fails_cleanly_or_round_trips() {
    // Each prefix of a fixture, and the fixture with one byte replaced, either fails with an
    // error or loads into a model that survives the XML round trip.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let check = |text: &str| {
        if let Ok((topo, _)) = parse_topology(text) {
            let written = write_topology(&topo);
            let (again, _) = parse_topology(&written).expect("weft's output loads");
            assert_eq!(topo, again);
            let _ = compute_paths(&topo, &PathOptions::default());
        }
    };
    for text in [H200X4, PCIE, CPU_ONLY] {
        for cut in (0..text.len()).step_by(7) {
            if text.is_char_boundary(cut) {
                check(&text[..cut]);
            }
        }
        for _ in 0..300 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bytes = text.as_bytes().to_vec();
            let at = (seed % bytes.len() as u64) as usize;
            bytes[at] = b"<>/=\" 0x1a-\n"[(seed >> 32) as usize % 10];
            if let Ok(s) = core::str::from_utf8(&bytes) {
                check(s);
            }
        }
    }
}
