//! The table's sanity, each parser's error text, and reading through a lookup.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use weft_core::tune::ProtocolEnable;

use crate::table::{OnBad, TABLE, WhenUnset};
use crate::*;

fn lookup(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    let pairs = pairs.to_vec();
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

/// Whether two settings hold the same values (where they came from aside).
fn same_values(a: &Settings, b: &Settings) -> bool {
    a.net == b.net
        && a.bootstrap == b.bootstrap
        && a.topology == b.topology
        && a.transport == b.transport
        && a.gpu == b.gpu
        && a.kernels == b.kernels
        && a.debug == b.debug
}

fn all_names() -> BTreeSet<&'static str> {
    TABLE
        .iter()
        .flat_map(|e| e.info().names.iter().copied())
        .collect()
}

#[test]
fn every_name_is_in_one_entry_and_weft_names_come_first() {
    let mut seen = BTreeSet::new();
    for e in TABLE {
        let info = e.info();
        assert!(!info.names.is_empty());
        assert!(
            !info.allowed.is_empty() && !info.about.is_empty(),
            "{info:?}"
        );
        for n in info.names {
            assert!(seen.insert(*n), "{n} is in two entries");
            assert!(
                n.starts_with("WEFT_") || n.starts_with("NCCL_"),
                "{n}: not a weft or NCCL name"
            );
            assert!(
                !n.starts_with("WEFT_TEST_"),
                "{n}: test variables stay with the tests"
            );
        }
        let first_nccl = info.names.iter().position(|n| n.starts_with("NCCL_"));
        if let Some(i) = first_nccl {
            assert!(
                info.names.iter().skip(i).all(|n| n.starts_with("NCCL_")),
                "{:?}: WEFT_ names come before NCCL's",
                info.names
            );
        }
    }
    assert_eq!(
        crate::table::find("NCCL_MIN_NRINGS").map(|e| e.info().name()),
        Some("WEFT_MIN_NCHANNELS")
    );
    assert!(crate::table::find("WEFT_TEST_ID").is_none());
}

#[test]
fn every_default_parses() {
    for e in TABLE {
        let info = e.info();
        if let WhenUnset::Value(text) = info.unset {
            assert_eq!(e.check(text), Ok(()), "{}'s default {text:?}", info.name());
        }
    }
    // And reading nothing refuses nothing.
    let s = Settings::from_lookup(&|_| None).unwrap();
    assert!(s.bad().is_empty() && s.origins().is_empty());
    assert_eq!(s, Settings::default());
}

/// Entries whose `allowed` says "a number from A to B" take A and B and nothing beyond.
#[test]
fn number_ranges_are_what_they_say() {
    let mut checked = 0;
    for e in TABLE {
        let info = e.info();
        let Some(rest) = info.allowed.strip_prefix("a number from ") else {
            continue;
        };
        let mut words = rest.split([' ', '(']);
        let lo: u64 = words.next().unwrap().parse().unwrap();
        assert_eq!(words.next(), Some("to"), "{}", info.allowed);
        let hi: u64 = words.next().unwrap().parse().unwrap();
        assert_eq!(e.check(&lo.to_string()), Ok(()), "{} {lo}", info.name());
        assert_eq!(e.check(&hi.to_string()), Ok(()), "{} {hi}", info.name());
        assert!(
            e.check(&(hi + 1).to_string()).is_err(),
            "{} {}",
            info.name(),
            hi + 1
        );
        if lo > 0 {
            assert!(
                e.check(&(lo - 1).to_string()).is_err(),
                "{} {}",
                info.name(),
                lo - 1
            );
        }
        checked += 1;
    }
    assert!(checked > 20, "{checked}");
}

/// Every entry is read, once, in table order (so listings and errors follow the table).
#[test]
fn reading_asks_for_exactly_the_tables_names() {
    let asked = RefCell::new(Vec::new());
    let record = |k: &str| {
        asked.borrow_mut().push(k.to_string());
        None
    };
    let _ = Settings::from_lookup(&record).unwrap();
    let asked: Vec<String> = asked.into_inner();
    let table: Vec<String> = TABLE
        .iter()
        .flat_map(|e| e.info().names.iter().map(|n| n.to_string()))
        .collect();
    assert_eq!(asked, table);
    assert_eq!(all_names().len(), table.len());
}

#[test]
fn blank_values_count_as_unset() {
    let blank = |_: &str| Some(" \t ".to_string());
    let s = Settings::from_lookup(&blank).unwrap();
    assert_eq!(s, Settings::default());
    // A blank WEFT_ name does not hide NCCL's.
    let s = Settings::from_lookup(&lookup(&[
        ("WEFT_SOCKET_IFNAME", " "),
        ("NCCL_SOCKET_IFNAME", "eth"),
    ]))
    .unwrap();
    assert_eq!(s.net.socket.ifname.as_deref(), Some("eth"));
    assert_eq!(s.origins()[0].name, "NCCL_SOCKET_IFNAME");
}

#[test]
fn weft_names_win_over_nccls() {
    let s = Settings::from_lookup(&lookup(&[
        ("NCCL_SOCKET_NTHREADS", "2"),
        ("WEFT_SOCKET_NTHREADS", "8"),
        ("NCCL_P2P_READ_ENABLE", "1"),
        ("WEFT_P2P_READ_ENABLE", "0"),
        ("NCCL_MAX_NRINGS", "12"),
        ("NCCL_IB_HCA", "mlx5_0:1"),
    ]))
    .unwrap();
    assert_eq!(s.net.socket.threads, 8);
    assert_eq!(s.transport.p2p_read, Some(false));
    assert_eq!(s.topology.max_nchannels, Some(12));
    assert_eq!(s.net.ib.hca.as_deref(), Some("mlx5_0:1"));
    let from: Vec<&str> = s.origins().iter().map(|o| o.name).collect();
    assert_eq!(
        from,
        [
            "WEFT_SOCKET_NTHREADS",
            "NCCL_IB_HCA",
            "NCCL_MAX_NRINGS",
            "WEFT_P2P_READ_ENABLE"
        ]
    );
}

/// Each entry that refuses anything refuses a value with the message the user sees.
#[test]
fn each_parser_says_what_it_takes() {
    let garbage = "~bad~";
    let mut refused = 0;
    for e in TABLE {
        let info = e.info();
        let Err(detail) = e.check(garbage) else {
            continue;
        };
        refused += 1;
        let name = info.name();
        let want = match &detail {
            Some(d) => format!("{name}=\"{garbage}\": {d}"),
            None => format!("{name}=\"{garbage}\": expected {}", info.allowed),
        };
        let env = move |k: &str| (k == name).then(|| format!(" {garbage} "));
        match info.on_bad {
            OnBad::Reject => {
                let e = Settings::from_lookup(&env).unwrap_err();
                assert_eq!(e.to_string(), want);
                // The lenient reader keeps the default instead.
                let s = Settings::from_lookup_or_defaults(&env);
                assert!(s.origins().is_empty());
                assert!(!s.bad()[0].ignored);
            }
            OnBad::Ignore => {
                let s = Settings::from_lookup(&env).unwrap();
                let want = want.replacen(": ", " ignored: ", 1);
                assert_eq!(s.bad().len(), 1, "{name}");
                assert_eq!(s.bad()[0].to_string(), want);
                assert!(s.bad()[0].ignored);
                assert!(
                    same_values(&s, &Settings::default()),
                    "{name} kept its default"
                );
            }
        }
    }
    assert!(refused > 50, "{refused}");
}

#[test]
fn some_messages_in_full() {
    let err = |pairs: &[(&'static str, &'static str)]| {
        Settings::from_lookup(&lookup(pairs))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[("NCCL_IB_QPS_PER_CONNECTION", "9")]),
        "NCCL_IB_QPS_PER_CONNECTION=\"9\": expected a number from 1 to 8"
    );
    assert_eq!(
        err(&[("WEFT_MESH_TRANSPORT", "rdma")]),
        "WEFT_MESH_TRANSPORT=\"rdma\": expected auto, ib or socket"
    );
    let proto = err(&[("NCCL_PROTO", "LL,Simpel")]);
    assert!(
        proto.starts_with("NCCL_PROTO=\"LL,Simpel\": unknown protocol")
            && proto.contains("\"Simpel\""),
        "{proto}"
    );
    assert_eq!(
        err(&[("WEFT_ALGO", "tree")]),
        "WEFT_ALGO=\"tree\": expected ring, oneshot, twoshot or nvls"
    );
    // Every bad value, not only the first.
    assert_eq!(
        err(&[("WEFT_TIMEOUT", "-1"), ("NCCL_BUFFSIZE", "12")]),
        "WEFT_TIMEOUT=\"-1\": expected a positive number of seconds; \
         NCCL_BUFFSIZE=\"12\": expected bytes for the 8 FIFO steps, at least 4096, e.g. 4194304"
    );
}

#[test]
fn typed_values_and_defaults() {
    let d = Settings::default();
    assert_eq!(d.net.socket.threads, 4);
    assert_eq!(d.net.socket.sockets_per_thread, 1);
    assert_eq!(d.net.socket.connect_timeout, Duration::from_secs(120));
    assert_eq!(d.net.socket.spin, None);
    assert_eq!(d.net.ib.addr_family, AddressFamily::V4);
    assert_eq!(
        (d.net.ib.timeout, d.net.ib.retry_cnt, d.net.ib.max_inline),
        (20, 7, 128)
    );
    assert!(d.net.gdr.dmabuf && !d.net.gdr.flush_disable && !d.net.ib.force_flush);
    assert_eq!(usize::from(d.net.mesh.max_rails), weft_core::net::MAX_RAILS);
    assert_eq!(d.bootstrap.timeout, Duration::from_secs(30));
    assert_eq!(d.transport.protocols, ProtocolEnable::default());
    assert_eq!(d.transport.shm_dir, std::path::PathBuf::from("/dev/shm"));
    assert!(d.transport.p2p_direct_writes());
    assert!(d.gpu.nvls_enable);
    assert_eq!(d.gpu.nvls_chunksize, weft_core::nvls::DEFAULT_CHUNK_SIZE);
    assert!(d.kernels.cache);
    assert!(!d.topology.channel_count_set());
    // The socket limits are the socket handle's.
    use weft_core::wire::socket_handle::{MAX_DATA_SOCKETS, MAX_THREADS};
    assert_eq!(
        crate::table::SOCKET_NTHREADS.info.allowed,
        format!("a number from 1 to {MAX_THREADS}")
    );
    assert!(
        crate::table::NSOCKS_PERTHREAD
            .info
            .allowed
            .starts_with(&format!("a number from 1 to {MAX_DATA_SOCKETS} "))
    );

    let s = Settings::from_lookup(&lookup(&[
        ("NCCL_SOCKET_FAMILY", "AF_INET6"),
        ("WEFT_SOCKET_SPIN_US", "0"),
        ("WEFT_TIMEOUT", "2.5"),
        ("NCCL_NVLS_ENABLE", "0"),
        ("WEFT_ALGO", "TwoShot"),
        ("NCCL_P2P_DIRECT_DISABLE", "1"),
        ("WEFT_DEBUG", "info"),
        ("NCCL_NET_GDR_LEVEL", "LOC"),
    ]))
    .unwrap();
    assert_eq!(s.net.socket.family, Some(AddressFamily::V6));
    assert_eq!(s.net.socket.spin, Some(Duration::ZERO));
    assert_eq!(s.transport.timeout, Duration::from_millis(2500));
    assert!(!s.gpu.nvls_enable);
    assert_eq!(s.gpu.algo, Some(weft_core::algo::GpuAlgo::TwoShot));
    assert!(!s.transport.p2p_direct_writes());
    assert_eq!(s.debug.level, Some(DebugLevel::Info));
    assert_eq!(s.net.gdr.level, Some(weft_core::topo::model::PathType::Loc));
}

#[test]
fn values_equal_to_the_default_are_not_changes() {
    let s = Settings::from_lookup(&lookup(&[
        ("NCCL_SOCKET_NTHREADS", "4"),
        ("NCCL_PROTO", "simple,ll,ll128"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("WEFT_KERNEL_THREADS", "1024"),
    ]))
    .unwrap();
    let changed: Vec<&str> = s.changed().map(|o| o.name).collect();
    assert_eq!(changed, ["NCCL_SOCKET_IFNAME", "WEFT_KERNEL_THREADS"]);
    assert_eq!(s.origins().len(), 4);
    assert!(
        s.origin(&crate::table::PROTO.info)
            .is_some_and(|o| !o.differs)
    );
}
