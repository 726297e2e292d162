//! Channel plans from the topology fixtures, compared with the channels NCCL 2.28.9 printed
//! (`NCCL_DEBUG=INFO`) on the same topologies (tests/fixtures/topo/*-nccl-info.txt).

use super::*;
use crate::comm::peers::Settings;
use weft_core::wire::bootstrap::bus_id_from_str;

fn fixture(name: &str) -> String {
    format!(
        "{}/../tests/fixtures/topo/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn xml(name: &str) -> XmlNode {
    XmlNode::parse(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

/// Bus ids of the fixture's GPUs, by the rank NCCL gave them when it dumped the file.
fn gpu_busids(x: &XmlNode) -> Vec<String> {
    fn walk(x: &XmlNode, busid: Option<&str>, out: &mut Vec<(i64, String)>) {
        let here = if x.name == "pci" {
            x.attr("busid")
        } else {
            busid
        };
        if x.name == "gpu" {
            let rank = x.attr("rank").unwrap().parse().unwrap();
            out.push((rank, here.unwrap().to_string()));
        }
        for c in &x.children {
            walk(c, here, out);
        }
    }
    let mut out = Vec::new();
    walk(x, None, &mut out);
    out.sort();
    out.into_iter().map(|(_, b)| b).collect()
}

fn settings(cpus: u32) -> Settings {
    Settings {
        transport: 0,
        pid: 1,
        nchannels: 0,
        step_bytes: 0,
        cpus,
        protocols: weft_core::tune::ProtocolEnable::default().to_bits(),
        ll_lines: 0,
    }
}

/// Rank `r` on the GPU with bus id `busids[r]`, CUDA device `r`, all on one host.
fn gpu_peers(busids: &[&str]) -> Vec<Peer> {
    busids
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Peer::local(r as u32, Some(r as i32), settings(16))
                .with_bus_id(bus_id_from_str(b.as_bytes()).unwrap())
        })
        .collect()
}

/// Every variable unset.
fn no_env() -> config::Settings {
    config::Settings::default()
}

/// The settings of `pairs`, read leniently as the communicators read theirs: a bad value
/// stays for [`plan_channels`] to refuse.
fn env_of(pairs: &[(&str, &str)]) -> config::Settings {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    config::Settings::from_lookup_or_defaults(&move |k: &str| {
        pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}

/// NCCL's ring lines (`Channel 00/24 : 0 1 2 3`, not the `via` ones) in a log.
fn nccl_channels(info_name: &str) -> Vec<String> {
    std::fs::read_to_string(fixture(info_name))
        .unwrap()
        .lines()
        .filter_map(|l| l.find("NCCL INFO Channel ").map(|i| &l[i + 10..]))
        .filter(|l| !l.contains(" via "))
        .map(str::to_string)
        .collect()
}

#[test]
fn h200x4_measured_gives_nccl_24_channels() {
    let topo = xml("h200x4-measured.xml");
    let busids = gpu_busids(&topo);
    assert_eq!(
        busids,
        [
            "0000:00:06.0",
            "0000:00:07.0",
            "0000:00:08.0",
            "0000:00:09.0"
        ]
    );
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let plan = plan_channels(&gpu_peers(&refs), TopoInput::Xml(&topo), &no_env()).unwrap();
    assert_eq!(plan.source, SOURCE_SEARCH);
    assert_eq!(plan.found, 24);
    assert_eq!(plan.rings, vec![vec![0, 1, 2, 3]; 24]);
    assert!(
        plan.note
            .contains("Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000"),
        "{}",
        plan.note
    );
    // NCCL's log keeps the first three of its 24 lines.
    let nccl = nccl_channels("h200x4-measured-nccl-info.txt");
    assert_eq!(nccl.len(), 3);
    assert_eq!(plan.lines()[..3], nccl[..]);
}

#[test]
fn every_measured_fixture_gives_nccl_exact_rings() {
    for (topo, info, n) in [
        (
            "weft-h200x4-mesh6.xml",
            "weft-h200x4-mesh6-nccl-info.txt",
            24,
        ),
        ("weft-h200x4-nvs9.xml", "weft-h200x4-nvs9-nccl-info.txt", 12),
        (
            "weft-h200x4-pairs18.xml",
            "weft-h200x4-pairs18-nccl-info.txt",
            8,
        ),
        ("weft-h200x4-pcie.xml", "weft-h200x4-pcie-nccl-info.txt", 4),
    ] {
        let x = xml(topo);
        let busids = gpu_busids(&x);
        let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
        let plan = plan_channels(&gpu_peers(&refs), TopoInput::Xml(&x), &no_env()).unwrap();
        assert_eq!(plan.source, SOURCE_SEARCH, "{topo}");
        assert_eq!(plan.nchannels(), n, "{topo}");
        assert_eq!(plan.lines(), nccl_channels(info), "{topo}");
    }
}

/// Ranks map to GPUs by bus id, not by the order of the file or the CUDA ordinal: rank `r`
/// on the GPU NCCL numbered `3 - r` turns mesh6's ring `0 1 3 2` into `3 2 0 1`.
#[test]
fn ranks_are_matched_to_gpus_by_bus_id() {
    let x = xml("weft-h200x4-mesh6.xml");
    let mut busids = gpu_busids(&x);
    busids.reverse();
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let plan = plan_channels(&gpu_peers(&refs), TopoInput::Xml(&x), &no_env()).unwrap();
    let straight = {
        let b = gpu_busids(&x);
        let refs: Vec<&str> = b.iter().map(String::as_str).collect();
        plan_channels(&gpu_peers(&refs), TopoInput::Xml(&x), &no_env()).unwrap()
    };
    assert_eq!(straight.rings[1], [0, 1, 3, 2]);
    assert_eq!(plan.nchannels(), straight.nchannels());
    for (mine, theirs) in plan.rings.iter().zip(&straight.rings) {
        let relabeled: Vec<u32> = theirs.iter().map(|r| 3 - r).collect();
        assert_eq!(*mine, relabeled);
    }
}

/// Two ranks on two GPUs of the 4x H200 NVSwitch host (the others leave the search, as
/// NCCL trims GPUs of no rank). NVLink4 at sm90 gives each GPU 18 x 20.6 = 370.8 GB/s to
/// the NVSwitch; a ring of 2 GPUs uses one link out of each per channel, as with 4 GPUs,
/// so the search ends where it ends on 4: 12 channels at 30 GB/s (6 x 60 found first,
/// doubled by NCCL's `dupChannels` to 12 x 30), and the communicator doubles them again:
/// 24 channels of `0 1`. The same topology through `weft topo --file` (what
/// `topo_cli_agrees_on_two_gpus` checks) prints `Pattern 4, ..., nChannels 12` and
/// `Channel 00/24 : 0 1`.
#[test]
fn two_gpus_of_the_h200_host() {
    let x = xml("h200x4-measured.xml");
    let plan = plan_channels(
        &gpu_peers(&["0000:00:07.0", "0000:00:09.0"]),
        TopoInput::Xml(&x),
        &no_env(),
    )
    .unwrap();
    assert_eq!(plan.source, SOURCE_SEARCH);
    assert!(
        plan.note.contains("nChannels 12, bw 30.000000"),
        "{}",
        plan.note
    );
    assert_eq!(plan.rings, vec![vec![0, 1]; 24]);
    assert_eq!(plan.lines()[23], "Channel 23/24 : 0 1");
}

#[test]
fn topo_cli_agrees_on_two_gpus() {
    // The fixture with ranks only on 00:07.0 and 00:09.0, as NCCL would have dumped it.
    let mut x = xml("h200x4-measured.xml");
    let peers = gpu_peers(&["0000:00:07.0", "0000:00:09.0"]);
    assign_ranks(&mut x, &peers).unwrap();
    let dir = std::env::temp_dir().join(format!("weft-channels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("two.xml");
    std::fs::write(&file, x.write()).unwrap();
    // What `weft topo --file` prints: the view's channel lines.
    let lines = crate::topo::view::view_file(&file, None)
        .unwrap()
        .channel_lines(false);
    let _ = std::fs::remove_dir_all(&dir);
    let channels: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with("Channel "))
        .collect();
    let plan = plan_channels(&peers, TopoInput::Xml(&x), &no_env()).unwrap();
    assert_eq!(channels, plan.lines());
}

#[test]
fn min_and_max_channels_clamp_after_the_search() {
    let x = xml("weft-h200x4-mesh6.xml");
    let busids = gpu_busids(&x);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let peers = gpu_peers(&refs);
    let full = plan_channels(&peers, TopoInput::Xml(&x), &no_env()).unwrap();
    assert_eq!(full.nchannels(), 24);
    // MAX keeps the first channels.
    let env = env_of(&[("NCCL_MAX_NCHANNELS", "5")]);
    let p = plan_channels(&peers, TopoInput::Xml(&x), &env).unwrap();
    assert_eq!(p.rings, full.rings[..5]);
    assert_eq!(p.found, 24);
    // MAX then MIN: 3 kept, repeated to 7 (channel c runs channel c - 3's ring).
    let env = env_of(&[("NCCL_MAX_NCHANNELS", "3"), ("NCCL_MIN_NCHANNELS", "7")]);
    let p = plan_channels(&peers, TopoInput::Xml(&x), &env).unwrap();
    let want: Vec<Vec<u32>> = (0..7).map(|c| full.rings[c % 3].clone()).collect();
    assert_eq!(p.rings, want);
    assert_ne!(full.rings[0], full.rings[1]);
    // MIN above what was found: 24 repeated to 40; above 64: 64 (NCCL's MAXCHANNELS).
    let env = env_of(&[("NCCL_MIN_NCHANNELS", "40")]);
    let p = plan_channels(&peers, TopoInput::Xml(&x), &env).unwrap();
    assert_eq!(p.nchannels(), 40);
    assert_eq!(p.rings[24..], full.rings[..16]);
    let env = env_of(&[("NCCL_MIN_NCHANNELS", "1000")]);
    assert_eq!(
        plan_channels(&peers, TopoInput::Xml(&x), &env)
            .unwrap()
            .nchannels(),
        64
    );
    // WEFT_ first, a blank WEFT_ does not hide NCCL's; MAX 0 counts as 1, as in NCCL.
    let env = env_of(&[("WEFT_MAX_NCHANNELS", "2"), ("NCCL_MAX_NCHANNELS", "6")]);
    assert_eq!(
        plan_channels(&peers, TopoInput::Xml(&x), &env)
            .unwrap()
            .nchannels(),
        2
    );
    let env = env_of(&[("WEFT_MAX_NCHANNELS", " "), ("NCCL_MAX_NCHANNELS", "6")]);
    assert_eq!(
        plan_channels(&peers, TopoInput::Xml(&x), &env)
            .unwrap()
            .nchannels(),
        6
    );
    let env = env_of(&[("NCCL_MAX_NCHANNELS", "0")]);
    assert_eq!(
        plan_channels(&peers, TopoInput::Xml(&x), &env)
            .unwrap()
            .rings,
        full.rings[..1]
    );
    // Malformed: an error naming the variable.
    let env = env_of(&[("NCCL_MIN_NCHANNELS", "lots")]);
    let err = plan_channels(&peers, TopoInput::Xml(&x), &env).unwrap_err();
    assert!(
        err.to_string().contains("NCCL_MIN_NCHANNELS=\"lots\""),
        "{err}"
    );
    // An explicit count (WEFT_NCHANNELS, agreed by every rank) wins over both.
    let mut explicit = peers.clone();
    for p in &mut explicit {
        p.settings.nchannels = 30;
    }
    let env = env_of(&[("NCCL_MAX_NCHANNELS", "3")]);
    let p = plan_channels(&explicit, TopoInput::Xml(&x), &env).unwrap();
    assert_eq!(p.nchannels(), 30);
    assert_eq!(p.rings[24..], full.rings[..6]);
}

#[test]
fn ranks_without_gpus_keep_the_plain_ring_and_cpu_count() {
    let peers: Vec<Peer> = (0..4).map(|r| Peer::local(r, None, settings(8))).collect();
    let x = xml("h200x4-measured.xml");
    let plan = plan_channels(&peers, TopoInput::Xml(&x), &no_env()).unwrap();
    assert_eq!(plan.source, SOURCE_PLAIN);
    assert!(plan.note.contains("rank 0 has no GPU"), "{}", plan.note);
    // 8 CPUs for 4 local ranks: 2 channels (peers::default_channels).
    assert_eq!(plan.rings, vec![vec![0, 1, 2, 3]; 2]);
    let env = env_of(&[("WEFT_MIN_NCHANNELS", "5")]);
    let plan = plan_channels(&peers, TopoInput::Host, &env).unwrap();
    assert_eq!(plan.rings, vec![vec![0, 1, 2, 3]; 5]);
    assert_eq!(plan.found, 2);
    let env = env_of(&[("NCCL_MAX_NCHANNELS", "1")]);
    assert_eq!(
        plan_channels(&peers, TopoInput::Host, &env)
            .unwrap()
            .nchannels(),
        1
    );
    // One rank with a GPU among ranks without does not make a search.
    let mut mixed = peers.clone();
    mixed[0] = mixed[0].with_bus_id(0x60);
    mixed[0].info.cuda_device = 0;
    mixed[0].info.flags = 0;
    let plan = plan_channels(&mixed, TopoInput::Xml(&x), &no_env()).unwrap();
    assert_eq!(plan.source, SOURCE_PLAIN);
    assert!(plan.note.contains("rank 1 has no GPU"), "{}", plan.note);
}

#[test]
fn ranks_on_several_hosts_keep_the_plain_ring() {
    let x = xml("h200x4-measured.xml");
    let busids = gpu_busids(&x);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let mut peers = gpu_peers(&refs);
    peers[2].info.host_hash ^= 1;
    peers[3].info.host_hash ^= 1;
    // A topology file that does not exist is not even read.
    let env = env_of(&[("NCCL_TOPO_FILE", "/nonexistent/topo.xml")]);
    let plan = plan_channels(&peers, TopoInput::Host, &env).unwrap();
    assert_eq!(plan.source, SOURCE_PLAIN);
    assert!(plan.note.contains("ranks on 2 hosts"), "{}", plan.note);
    // 16 CPUs for 2 ranks per host: 8, at most DEFAULT_MAX_CHANNELS.
    assert_eq!(plan.rings, vec![vec![0, 1, 2, 3]; 4]);
}

#[test]
fn topology_file_from_the_environment_and_its_errors() {
    let x = xml("h200x4-measured.xml");
    let busids = gpu_busids(&x);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let peers = gpu_peers(&refs);
    let file = fixture("h200x4-measured.xml");
    let env = env_of(&[("NCCL_TOPO_FILE", &file)]);
    let plan = plan_channels(&peers, TopoInput::Host, &env).unwrap();
    assert_eq!((plan.source, plan.nchannels()), (SOURCE_SEARCH, 24));
    // A file that cannot be read fails, naming it.
    let env = env_of(&[("WEFT_TOPO_FILE", "/nonexistent/topo.xml")]);
    let err = plan_channels(&peers, TopoInput::Host, &env).unwrap_err();
    assert!(matches!(err, CommError::Channels { rank: 0, .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/topo.xml"), "{err}");
    // A file whose GPUs have no rank attribute (not dumped by NCCL) still serves.
    let mut bare = x.clone();
    assign_ranks(&mut bare, &[]).unwrap();
    assert!(!bare.write().contains("rank="));
    let dir = std::env::temp_dir().join(format!("weft-channels-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bare.xml");
    std::fs::write(&path, bare.write()).unwrap();
    let plan = plan_channels(&peers, TopoInput::File(&path), &no_env()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((plan.source, plan.nchannels()), (SOURCE_SEARCH, 24));
    // A GPU the topology does not hold: the plain ring, with the reason.
    let mut odd = peers.clone();
    odd[3] = odd[3].with_bus_id(0x1b000);
    let plan = plan_channels(&odd, TopoInput::Xml(&x), &no_env()).unwrap();
    assert_eq!(plan.source, SOURCE_PLAIN);
    assert!(
        plan.note
            .contains("rank 3's GPU 0000:1b:00.0 is not in the topology"),
        "{}",
        plan.note
    );
    // Ranks without a reported bus id: no search either.
    let mut unknown = peers.clone();
    unknown[1].info.bus_id = 0;
    let plan = plan_channels(&unknown, TopoInput::Xml(&x), &no_env()).unwrap();
    assert!(plan.note.contains("rank 1 did not report"), "{}", plan.note);
}

#[test]
fn plan_wire_round_trip_truncations_and_errors() {
    let x = xml("weft-h200x4-pairs18.xml");
    let busids = gpu_busids(&x);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let plan = plan_channels(&gpu_peers(&refs), TopoInput::Xml(&x), &no_env()).unwrap();
    let bytes = encode_plan(&Ok(plan.clone()), 4);
    assert_eq!(decode_plan(&bytes, 4).unwrap(), plan);
    for n in 0..bytes.len() {
        assert!(decode_plan(&bytes[..n], 4).is_err(), "truncated to {n}");
    }
    assert!(decode_plan(&bytes, 5).is_err());
    let mut wrong = bytes.clone();
    wrong[5] = 9;
    assert!(
        decode_plan(&wrong, 4)
            .unwrap_err()
            .to_string()
            .contains("version 9")
    );
    // A ring that is not a permutation is refused: the last rank of the last ring (after
    // the header and the note) made 0, which the ring holds already.
    let mut dup = bytes.clone();
    let note_len = usize::from(u16::from_be_bytes([bytes[18], bytes[19]]));
    let last = PLAN_HEAD + note_len + (plan.nchannels() * 4 - 1) * 4;
    assert_ne!(dup[last..last + 4], 0u32.to_be_bytes());
    dup[last..last + 4].copy_from_slice(&0u32.to_be_bytes());
    assert!(decode_plan(&dup, 4).is_err());
    // NVLS heads travel too, and a head that is no rank is refused.
    let mut with_heads = plan.clone();
    with_heads.nvls_heads = vec![2, 0, 3, 1];
    let bytes = encode_plan(&Ok(with_heads.clone()), 4);
    assert_eq!(decode_plan(&bytes, 4).unwrap(), with_heads);
    let mut bad_head = bytes.clone();
    let end = bad_head.len();
    bad_head[end - 4..].copy_from_slice(&4u32.to_be_bytes());
    assert!(decode_plan(&bad_head, 4).is_err());
    // Rank 0's error reaches every rank as its text.
    let err = CommError::Channels {
        rank: 0,
        detail: "cannot read topology file /x".into(),
    };
    let got = decode_plan(&encode_plan(&Err(err), 4), 4).unwrap_err();
    assert!(
        matches!(&got, CommError::Channels { rank: 0, detail } if detail == "cannot read topology file /x"),
        "{got}"
    );
}

/// Rank 0's plan is every rank's, whatever topology the others would have used.
#[test]
fn every_rank_adopts_rank_zeros_plan() {
    use crate::bootstrap::{BootstrapOptions, BootstrapRoot};
    let opts = BootstrapOptions::loopback(std::time::Duration::from_secs(20));
    let (id, root) = BootstrapRoot::start(&opts).unwrap();
    let mesh = xml("weft-h200x4-mesh6.xml");
    let pcie = xml("weft-h200x4-pcie.xml");
    let busids = gpu_busids(&mesh);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let peers = gpu_peers(&refs);
    let plans: Vec<ChannelPlan> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|r| {
                let (opts, peers) = (opts.clone(), peers.clone());
                let topo = if r == 0 { &mesh } else { &pcie };
                s.spawn(move || {
                    let mut b = Bootstrap::init(&id, r, 4, &opts).unwrap();
                    agree_on_channels_with(&mut b, &peers, TopoInput::Xml(topo), &no_env()).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(root);
    assert_eq!(plans[0].nchannels(), 24);
    for p in &plans {
        assert_eq!(*p, plans[0]);
    }
}

/// Through settings read leniently (libnccl's init): a bad bound is rank 0's error, for all.
#[test]
fn a_bad_bound_in_the_environment_fails_the_plan() {
    use crate::bootstrap::{BootstrapOptions, BootstrapRoot};
    let opts = BootstrapOptions::loopback(std::time::Duration::from_secs(20));
    let (id, root) = BootstrapRoot::start(&opts).unwrap();
    let mut b = Bootstrap::init(&id, 0, 1, &opts).unwrap();
    let peers: Vec<Peer> = vec![Peer::local(0, None, settings(2))];
    let bad = |k: &str| (k == "NCCL_MAX_NCHANNELS").then(|| "few".to_string());
    let bad = config::Settings::from_lookup_or_defaults(&bad);
    let err = agree_on_channels_with(&mut b, &peers, TopoInput::Host, &bad).unwrap_err();
    assert!(
        err.to_string().contains("NCCL_MAX_NCHANNELS=\"few\""),
        "{err}"
    );
    let good = |k: &str| (k == "NCCL_MAX_NCHANNELS").then(|| "1".to_string());
    let good = config::Settings::from_lookup(&good).unwrap();
    let plan = agree_on_channels_with(&mut b, &peers, TopoInput::Host, &good).unwrap();
    assert_eq!(plan.nchannels(), 1);
    drop(b);
    drop(root);
}

#[test]
fn the_plan_carries_nccl_p2p_level_verdict() {
    let topo = xml("h200x4-measured.xml");
    let busids = gpu_busids(&topo);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let peers = gpu_peers(&refs);
    // NVLink between every pair: P2P allowed by default.
    let plan = plan_channels(&peers, TopoInput::Xml(&topo), &no_env()).unwrap();
    assert_eq!(plan.p2p_blocked, None);
    // A level below NVLink forbids it; so does NCCL_P2P_DISABLE.
    for env in [
        env_of(&[("NCCL_P2P_LEVEL", "LOC")]),
        env_of(&[("NCCL_P2P_DISABLE", "1")]),
    ] {
        let plan = plan_channels(&peers, TopoInput::Xml(&topo), &env).unwrap();
        let (a, b, kind) = plan.p2p_blocked.clone().expect("a blocked pair");
        assert_eq!((a, b), (0, 1), "{kind}");
        assert!(!kind.is_empty());
        // The verdict survives rank 0's broadcast.
        let decoded = decode_plan(&encode_plan(&Ok(plan.clone()), 4), 4).unwrap();
        assert_eq!(decoded, plan);
    }
    let open = plan_channels(&peers, TopoInput::Xml(&topo), &no_env()).unwrap();
    assert_eq!(
        decode_plan(&encode_plan(&Ok(open.clone()), 4), 4).unwrap(),
        open
    );
}

/// An NVLS communicator (WEFT_ALGO=nvls) gets its heads from NCCL's NVLS search: on a
/// DGX H100 (NVSwitch), one head per GPU, as `weft topo` prints them; not when
/// NCCL_NVLS_ENABLE=0, and no NVLS search at all for other communicators.
#[test]
fn nvls_heads_come_from_the_nvls_search() {
    let x = xml("dgx-h100.xml");
    let busids = gpu_busids(&x);
    let refs: Vec<&str> = busids.iter().map(String::as_str).collect();
    let peers = gpu_peers(&refs);
    let plan = plan_channels(
        &peers,
        TopoInput::Xml(&x),
        &env_of(&[("WEFT_ALGO", "nvls")]),
    )
    .unwrap();
    assert_eq!(plan.source, SOURCE_SEARCH, "{}", plan.note);
    assert_eq!(
        plan.nvls_heads,
        (0..8).collect::<Vec<u32>>(),
        "{}",
        plan.note
    );
    assert!(plan.note.contains("NVLS heads"), "{}", plan.note);
    let off = plan_channels(
        &peers,
        TopoInput::Xml(&x),
        &env_of(&[("WEFT_ALGO", "nvls"), ("NCCL_NVLS_ENABLE", "0")]),
    )
    .unwrap();
    assert!(off.nvls_heads.is_empty());
    assert_eq!(off.rings, plan.rings);
    let ring = plan_channels(&peers, TopoInput::Xml(&x), &no_env()).unwrap();
    assert!(ring.nvls_heads.is_empty());
    assert_eq!(ring.rings, plan.rings);
}

#[test]
fn a_communicators_own_bounds_cut_then_repeat_the_channels() {
    let rings = |n: u32| -> Vec<Vec<u32>> { (0..n).map(|c| vec![c, c + 1]).collect() };
    // At most 2: the first two kept.
    assert_eq!(bound_channels(rings(3), 1, 2), rings(2));
    // At least 5 of 2: channel c takes the ring of channel c - 2.
    assert_eq!(
        bound_channels(rings(2), 5, 64),
        vec![vec![0, 1], vec![1, 2], vec![0, 1], vec![1, 2], vec![0, 1]]
    );
    // Out of range bounds are cut to the channel limit; a max of 0 keeps one.
    assert_eq!(bound_channels(rings(3), 0, 0), rings(1));
    assert_eq!(
        bound_channels(rings(1), 1000, 1000).len(),
        MAX_CHANNELS as usize
    );
}
