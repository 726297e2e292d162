//! Every seed in the corpus is a valid encoding of its target's format, so that fuzzing
//! starts from inputs that reach past the magic and version checks.

use std::fs;
use std::path::Path;

use weft_core::wire::ParseError;
use weft_core::wire::connect::{IbQpInfo, NetConnectInfo, P2pConnectInfo, ShmConnectInfo};
use weft_core::wire::mesh_handle::MeshHandle;
use weft_core::wire::socket_stream::{AnswerRepr, ControlFrameRepr, HelloRepr};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
        })
        .map(|p| {
            (
                p.display().to_string(),
                fs::read(&p).expect("seed readable"),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 2, "{target}: only {} seeds", out.len());
    out
}

fn check<T: std::fmt::Debug>(target: &str, parse: impl Fn(&[u8]) -> Result<T, ParseError>) {
    for (name, bytes) in seeds(target) {
        if let Err(e) = parse(&bytes) {
            panic!("{name} does not parse: {e}");
        }
    }
}

#[test]
fn every_seed_parses() {
    check("mesh_handle", MeshHandle::parse);
    check("p2p_connect", P2pConnectInfo::parse);
    check("shm_connect", ShmConnectInfo::parse);
    check("net_connect", NetConnectInfo::parse);
    check("ib_qp_info", IbQpInfo::parse);
    check("socket_stream", |b| {
        HelloRepr::parse(b)
            .map(|_| ())
            .or_else(|_| AnswerRepr::parse(b).map(|_| ()))
            .or_else(|_| ControlFrameRepr::parse(b).map(|_| ()))
    });
}

#[test]
fn mesh_seeds_hold_what_their_names_say() {
    let seeds = seeds("mesh_handle");
    let handle = |suffix: &str| {
        let (_, bytes) = seeds
            .iter()
            .find(|(n, _)| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("no seed {suffix}"));
        MeshHandle::parse(bytes).expect("valid seed")
    };
    assert_eq!(handle("seed-ipv4-nine").len(), 9);
    assert_eq!(handle("seed-empty").len(), 0);
    let rails = handle("seed-ipv6-rails");
    assert_eq!(rails.len(), 6);
    assert_eq!(
        rails.entries().iter().filter(|e| e.addr.is_ipv6()).count(),
        5
    );
    assert_eq!(handle("seed-mixed-unrelated").len(), 6);
}
