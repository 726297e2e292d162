//! Communicators of a few ranks as threads of this process, over loopback NET.

use std::thread;
use std::time::Duration;

use weft_core::abi::{DataType, Protocol, RedOp};
use weft_core::sched::Collective;
use weft_core::tune::{ProtocolEnable, ProtocolSet};

use super::*;
use crate::bootstrap::BootstrapRoot;
use weft_verify::{Expect, TestData};

fn comms(nranks: usize, nchannels: u32) -> Vec<HostComm> {
    let mut opts = CommOptions::loopback(Duration::from_secs(20));
    opts.nchannels = Some(nchannels);
    opts.transport = TransportChoice::Net;
    let (id, root) = BootstrapRoot::start(&opts.bootstrap).unwrap();
    let comms = thread::scope(|s| {
        let handles: Vec<_> = (0..nranks)
            .map(|r| {
                let (id, opts) = (id, opts.clone());
                s.spawn(move || HostComm::init(&id, r, nranks, &opts).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(root);
    comms
}

#[test]
fn all_reduce_and_p2p_ring_over_net_threads() {
    let nranks = 3;
    let mut comms = comms(nranks, 2);
    assert_eq!(comms[1].rings(), [vec![0, 1, 2], vec![0, 1, 2]]);
    let data = TestData {
        dtype: DataType::Float32,
        op: RedOp::Sum,
        seed: 5,
        nranks,
    };
    let count = 100_003;
    thread::scope(|s| {
        for (rank, comm) in comms.iter_mut().enumerate() {
            s.spawn(move || {
                let input = checked_all_reduce(comm, &data, rank, count);
                // Each rank sends to the next and receives from the previous at once.
                let next = (rank + 1) % nranks;
                let prev = (rank + nranks - 1) % nranks;
                let mut got = vec![0u8; input.len()];
                comm.group(&mut [
                    P2pOp::Send {
                        peer: next,
                        buf: &input,
                    },
                    P2pOp::Recv {
                        peer: prev,
                        buf: &mut got,
                    },
                ])
                .unwrap();
                assert_eq!(
                    data.count_wrong(Expect::Recv { from: prev }, rank, count, &got),
                    0
                );
            });
        }
    });
}

#[test]
fn abort_flag_ends_a_blocked_collective() {
    let mut comms = comms(2, 1);
    let flag = comms[0].abort_flag();
    let aborter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        flag.abort();
    });
    // Rank 1 never joins: rank 0 waits until its flag is raised. 1 MiB: the ring, whose
    // second hop rank 0 never sends (a one-shot would hand rank 1 all it needs in one).
    let start = std::time::Instant::now();
    let send = vec![0u8; 1 << 20];
    let mut recv = vec![0u8; 1 << 20];
    let err = comms[0]
        .all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum)
        .expect_err("an aborted collective fails");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(err.to_string().contains("aborted"), "{err}");
    aborter.join().unwrap();
    // Rank 1 sees the abort through the connection and fails at once too.
    let err = comms[1]
        .all_reduce(&send, &mut recv, DataType::Float32, RedOp::Sum)
        .expect_err("the peer of an aborted rank fails");
    assert!(err.to_string().contains("rank 0"), "{err}");
}

#[test]
fn dtype_of_rust_types() {
    use crate::exec::reduce::{Bf16, F16};
    assert_eq!(dtype_of::<i8>(), DataType::Int8);
    assert_eq!(dtype_of::<u64>(), DataType::Uint64);
    assert_eq!(dtype_of::<F16>(), DataType::Float16);
    assert_eq!(dtype_of::<Bf16>(), DataType::Bfloat16);
    assert_eq!(dtype_of::<f32>(), DataType::Float32);
    assert_eq!(dtype_of::<f64>(), DataType::Float64);
}

#[test]
fn options_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let o = CommOptions::from_lookup(env(&[
        ("WEFT_NCHANNELS", "3"),
        ("WEFT_TRANSPORT", "net"),
        ("WEFT_TIMEOUT", "2.5"),
        ("NCCL_BUFFSIZE", "4194304"),
        ("WEFT_WAIT_YIELDS", "7"),
        ("WEFT_MIN_SLICES", "4"),
        ("NCCL_P2P_READ_ENABLE", "1"),
    ]))
    .unwrap();
    assert_eq!(o.min_slices, Some(4));
    assert_eq!(o.p2p_read, Some(true));
    let both = CommOptions::from_lookup(env(&[
        ("NCCL_P2P_READ_ENABLE", "1"),
        ("WEFT_P2P_READ_ENABLE", "0"),
    ]))
    .unwrap();
    assert_eq!(both.p2p_read, Some(false), "the WEFT_ name wins");
    assert_eq!(CommOptions::from_lookup(|_| None).unwrap().p2p_read, None);
    assert_eq!(CommOptions::from_lookup(|_| None).unwrap().min_slices, None);
    assert_eq!(o.nchannels, Some(3));
    assert_eq!(o.transport, TransportChoice::Net);
    assert_eq!(o.timeout, Duration::from_millis(2500));
    assert_eq!(o.bootstrap.timeout, Duration::from_millis(2500));
    assert_eq!(o.step_bytes, Some(512 * 1024));
    assert_eq!(o.wait.map(|w| w.yields), Some(7));
    assert_eq!(o.protocols, ProtocolEnable::default());
    assert_eq!(o.ll_lines, None);
    for (var, value) in [
        ("WEFT_NCHANNELS", "0"),
        ("WEFT_NCHANNELS", "65"),
        ("WEFT_TRANSPORT", "carrier-pigeon"),
        ("WEFT_TIMEOUT", "-1"),
        ("WEFT_BUFFSIZE", "12"),
        ("NCCL_PROTO", "LL,Simpel"),
        ("WEFT_PROTO", "allreduc:LL"),
        ("NCCL_LL_BUFFSIZE", "lots"),
        ("WEFT_ALGO", "tree"),
        ("WEFT_MIN_SLICES", "0"),
        ("WEFT_MIN_SLICES", "9"),
        ("NCCL_P2P_READ_ENABLE", "yes"),
    ] {
        let err = CommOptions::from_lookup(|k| (k == var).then(|| value.to_string()))
            .expect_err("a bad value is an error");
        assert!(err.to_string().contains(var), "{err}");
    }
    let err = CommOptions::from_lookup(env(&[("NCCL_PROTO", "LL,Simpel")])).unwrap_err();
    assert!(
        err.to_string().contains("unknown protocol") && err.to_string().contains("\"Simpel\""),
        "{err}"
    );
}

#[test]
fn weft_algo_from_the_environment() {
    use weft_core::algo::GpuAlgo;
    let algo = |v: &'static str| {
        CommOptions::from_lookup(move |k| (k == "WEFT_ALGO").then(|| v.to_string()))
            .unwrap()
            .algo
    };
    assert_eq!(algo("oneshot"), Some(GpuAlgo::OneShot));
    assert_eq!(algo("TwoShot"), Some(GpuAlgo::TwoShot));
    assert_eq!(algo("nvls"), Some(GpuAlgo::Nvls));
    assert_eq!(algo("ring"), Some(GpuAlgo::Ring));
    assert_eq!(algo(""), None);
    assert_eq!(CommOptions::from_lookup(|_| None).unwrap().algo, None);
    let err = CommOptions::from_lookup(|k| (k == "WEFT_ALGO").then(|| "tree".to_string()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("ring, oneshot, twoshot or nvls"), "{err}");
}

#[test]
fn nccl_proto_and_ll_buffer_from_the_environment() {
    let get = |pairs: &'static [(&'static str, &'static str)]| {
        CommOptions::from_lookup(move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    };
    let only = |p: Protocol| ProtocolSet::of(&[p]);
    let o = get(&[("NCCL_PROTO", "^ll"), ("NCCL_LL_BUFFSIZE", "262144")]);
    assert_eq!(
        o.protocols.for_collective(Collective::AllReduce),
        ProtocolSet::of(&[Protocol::Ll128, Protocol::Simple])
    );
    // 256 KiB for 8 steps of 8-byte lines: 4096 lines per step.
    assert_eq!(o.ll_lines, Some(4096));
    // WEFT_ names win over NCCL's; sizes round down to a multiple of 128 lines.
    let o = get(&[
        ("NCCL_PROTO", "Simple"),
        ("WEFT_PROTO", "LL;allgather:Simple"),
        ("WEFT_LL_BUFFSIZE", "100000"),
    ]);
    assert_eq!(
        o.protocols
            .for_collective(Collective::Broadcast { root: 0 }),
        only(Protocol::Ll)
    );
    assert_eq!(
        o.protocols.for_collective(Collective::AllGather),
        only(Protocol::Simple)
    );
    assert_eq!(o.ll_lines, Some(1536));
    assert_eq!(get(&[("NCCL_LL_BUFFSIZE", "0")]).ll_lines, Some(0));
    // The GPU's send/receive LL threshold: unset by default, WEFT_ before NCCL_.
    assert_eq!(get(&[]).p2p_ll_threshold, None);
    assert_eq!(
        get(&[("NCCL_P2P_LL_THRESHOLD", "16384")]).p2p_ll_threshold,
        Some(16384)
    );
    assert_eq!(
        get(&[
            ("NCCL_P2P_LL_THRESHOLD", "16384"),
            ("WEFT_P2P_LL_THRESHOLD", "0")
        ])
        .p2p_ll_threshold,
        Some(0)
    );
    let err = CommOptions::from_lookup(|k: &str| {
        (k == "NCCL_P2P_LL_THRESHOLD").then(|| "16k".to_string())
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("NCCL_P2P_LL_THRESHOLD=\"16k\""), "{err}");
}

/// Host communicators of `nranks` threads on loopback, over whichever transport `settings`
/// leave (`TransportChoice::Auto`): each rank's result.
fn comms_with_settings(nranks: usize, settings: &Settings) -> Vec<Result<HostComm, CommError>> {
    let mut opts = CommOptions::loopback(Duration::from_secs(20));
    opts.settings = settings.clone();
    let (id, root) = BootstrapRoot::start(&opts.bootstrap).unwrap();
    let comms = thread::scope(|s| {
        let handles: Vec<_> = (0..nranks)
            .map(|r| {
                let (id, opts) = (id, opts.clone());
                s.spawn(move || HostComm::init(&id, r, nranks, &opts))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(root);
    comms
}

/// The settings the options carry reach the transports: `NCCL_SHM_DISABLE=1` sends ranks
/// of one host over NET (and the collectives still run), `WEFT_SHM_DIR` is where SHM
/// segments go.
#[test]
fn the_options_settings_reach_the_transports() {
    let nranks = 2;
    let data = TestData {
        dtype: DataType::Float32,
        op: RedOp::Sum,
        seed: 11,
        nranks,
    };
    let shm_off =
        Settings::from_lookup(&|k| (k == "NCCL_SHM_DISABLE").then(|| "1".into())).unwrap();
    let mut comms: Vec<HostComm> = comms_with_settings(nranks, &shm_off)
        .into_iter()
        .map(|c| c.expect("init without SHM"))
        .collect();
    for comm in &comms {
        for kinds in comm.channel_transports() {
            assert_eq!(*kinds, Some((TransportKind::Net, TransportKind::Net)));
        }
    }
    thread::scope(|s| {
        for (rank, comm) in comms.iter_mut().enumerate() {
            s.spawn(move || checked_all_reduce(comm, &data, rank, 4099));
        }
    });
    drop(comms);

    let dir = std::env::temp_dir().join(format!("weft-shm-dir-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_text = dir.to_str().unwrap().to_string();
    let lookup = move |k: &str| (k == "WEFT_SHM_DIR").then(|| dir_text.clone());
    let in_dir = Settings::from_lookup(&lookup).unwrap();
    let mut comms: Vec<HostComm> = comms_with_settings(nranks, &in_dir)
        .into_iter()
        .map(|c| c.expect("init with WEFT_SHM_DIR"))
        .collect();
    for comm in &comms {
        assert_eq!(comm.transports.shm().dir(), dir.as_path());
        for kinds in comm.channel_transports() {
            assert_eq!(*kinds, Some((TransportKind::Shm, TransportKind::Shm)));
        }
    }
    thread::scope(|s| {
        for (rank, comm) in comms.iter_mut().enumerate() {
            s.spawn(move || checked_all_reduce(comm, &data, rank, 4099));
        }
    });
    drop(comms);
    let _ = std::fs::remove_dir(&dir);
}

/// NCCL_PROTO=LL on a communicator whose connections are NET (no LL buffers) leaves the
/// CPU executor nothing to run: init says so instead of failing mid-collective.
#[test]
fn nccl_proto_ll_over_net_is_refused_at_init() {
    let mut opts = CommOptions::loopback(Duration::from_secs(20));
    opts.transport = TransportChoice::Net;
    opts.protocols = ProtocolEnable::parse("LL").unwrap();
    let (id, root) = BootstrapRoot::start(&opts.bootstrap).unwrap();
    let errors: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let opts = opts.clone();
                s.spawn(move || HostComm::init(&id, r, 2, &opts).unwrap_err().to_string())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(root);
    for err in errors {
        assert!(
            err.contains("NCCL_PROTO enables LL for AllReduce")
                && err.contains("runs Simple")
                && err.contains("enable Simple"),
            "{err}"
        );
    }
}

/// Ranks on the GPUs of a topology file get NCCL's searched rings (weft-h200x4-mesh6: a
/// different ring on each of the first channels), and the CPU executor runs collectives
/// over them. Three channels (WEFT_NCHANNELS) keep the test light.
#[test]
fn searched_rings_from_a_topology_file_carry_an_all_reduce() {
    let topo = format!(
        "{}/../tests/fixtures/topo/weft-h200x4-mesh6.xml",
        env!("CARGO_MANIFEST_DIR")
    );
    let busids = [0x60u64, 0x70, 0x80, 0x90];
    let nranks = 4;
    let mut opts = CommOptions::loopback(Duration::from_secs(20));
    opts.nchannels = Some(3);
    opts.transport = TransportChoice::Net;
    opts.topo_file = Some(topo.into());
    let (id, root) = BootstrapRoot::start(&opts.bootstrap).unwrap();
    let mut comms: Vec<HostComm> = thread::scope(|s| {
        let handles: Vec<_> = (0..nranks)
            .map(|r| {
                let mut opts = opts.clone();
                opts.device = Some(r as i32);
                opts.bus_id = Some(busids[r]);
                s.spawn(move || HostComm::init(&id, r, nranks, &opts).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(root);
    // NCCL's first three lines for this topology (weft-h200x4-mesh6-nccl-info.txt).
    for c in &comms {
        assert_eq!(c.rings(), [[0, 1, 2, 3], [0, 1, 3, 2], [0, 2, 3, 1]]);
    }
    let data = TestData {
        dtype: DataType::Float32,
        op: RedOp::Sum,
        seed: 11,
        nranks,
    };
    let count = 70_001;
    thread::scope(|s| {
        for (rank, comm) in comms.iter_mut().enumerate() {
            s.spawn(move || {
                checked_all_reduce(comm, &data, rank, count);
            });
        }
    });
}

/// One rank's float all-reduce of `count` seeded elements, every element checked; returns
/// the rank's input.
fn checked_all_reduce(comm: &mut HostComm, data: &TestData, rank: usize, count: usize) -> Vec<u8> {
    let mut input = vec![0u8; count * 4];
    data.fill(rank, 0, &mut input);
    let mut out = vec![0u8; count * 4];
    comm.all_reduce(&input, &mut out, data.dtype, data.op)
        .unwrap();
    assert_eq!(data.count_wrong(Expect::AllReduce, rank, count, &out), 0);
    input
}

#[test]
fn ranks_spin_only_with_a_cpu_for_each_busy_thread() {
    let dedicated = |p: WaitPolicy| p.spins == DEDICATED_SPINS;
    // SHM only: one busy thread per rank.
    assert!(dedicated(wait_policy_for(2, false, 2)));
    assert!(!dedicated(wait_policy_for(3, false, 2)));
    // NET: the proxy thread needs a CPU too (one rank on a 1-CPU VM must not spin).
    assert!(!dedicated(wait_policy_for(1, true, 1)));
    assert!(dedicated(wait_policy_for(1, true, 2)));
    assert!(!dedicated(wait_policy_for(2, true, 3)));
    assert!(dedicated(wait_policy_for(2, true, 4)));
}

/// Every collective checks its buffers against NCCL's layout before anything moves, and
/// says which buffer is wrong and what the call needs; a refused call leaves the
/// communicator usable, and the in-place layouts then carry the data (two ranks, float32).
#[test]
fn buffers_are_checked_against_each_collectives_layout() {
    let mut comms = comms(2, 1);
    let f32 = DataType::Float32;
    let sum = RedOp::Sum;
    let c = &mut comms[0];
    let err = |r: Result<(), CommError>| r.unwrap_err().to_string();
    let (b4, b6, b8, b12) = (vec![0u8; 4], vec![0u8; 6], vec![0u8; 8], vec![0u8; 12]);
    let (mut o0, mut o4, mut o7, mut o12) = (Vec::new(), vec![0u8; 4], vec![0u8; 7], vec![0u8; 12]);
    let needs = |what: &str, len: usize, want: usize| {
        format!("{what} buffer holds {len} bytes, the call needs {want}")
    };
    // Out of place: the count from the buffer every rank passes whole, the other checked.
    assert!(
        err(c.all_reduce(&b6, &mut o4, f32, sum))
            .contains("send buffer of 6 bytes is not a whole number of float (4-byte) elements")
    );
    assert!(err(c.all_reduce(&b8, &mut o4, f32, sum)).contains(&needs("receive", 4, 8)));
    assert!(err(c.reduce_scatter(&b12, &mut o4, f32, sum)).contains(&needs("send", 12, 8)));
    assert!(err(c.all_gather(&b4, &mut o12, f32)).contains(&needs("receive", 12, 8)));
    // Broadcast's input and reduce's output: required on the root, checked elsewhere
    // when given.
    assert!(err(c.broadcast(&[], &mut o4, f32, 0)).contains(&needs("send", 0, 4)));
    assert!(err(c.broadcast(&b8, &mut o4, f32, 1)).contains(&needs("send", 8, 4)));
    assert!(err(c.reduce(&b8, &mut o0, f32, sum, 0)).contains(&needs("receive", 0, 8)));
    assert!(err(c.reduce(&b8, &mut o4, f32, sum, 1)).contains(&needs("receive", 4, 8)));
    assert!(err(c.broadcast(&b4, &mut o4, f32, 2)).contains("root 2 out of range for 2 ranks"));
    assert!(err(c.reduce_in_place(&mut o4, f32, sum, 5)).contains("root 5 out of range"));
    // In place: whole elements, and whole blocks where one rank's block is the input or
    // the output.
    assert!(
        err(c.all_reduce_in_place(&mut o7, f32, sum)).contains(
            "in-place buffer of 7 bytes is not a whole number of float (4-byte) elements"
        )
    );
    assert!(
        err(c.reduce_scatter_in_place(&mut o12, f32, sum))
            .contains("in-place reduce-scatter buffer of 3 elements is not 2 equal blocks")
    );
    assert!(
        err(c.all_gather_in_place(&mut o12, f32))
            .contains("in-place all-gather buffer of 3 elements is not 2 equal blocks")
    );

    let count = 1001;
    thread::scope(|s| {
        for (rank, comm) in comms.iter_mut().enumerate() {
            s.spawn(move || {
                let data = |op| TestData {
                    dtype: f32,
                    op,
                    seed: 11,
                    nranks: 2,
                };
                let bytes = count * 4;
                // All-gather in place: this rank's input in its block of the output.
                let gather = data(RedOp::Sum);
                let mut buf = vec![0xa5u8; 2 * bytes];
                gather.fill(rank, 0, &mut buf[rank * bytes..(rank + 1) * bytes]);
                comm.all_gather_in_place(&mut buf, f32).unwrap();
                assert_eq!(gather.count_wrong(Expect::AllGather, rank, count, &buf), 0);
                // Reduce-scatter in place: the result in this rank's block of the input.
                let scatter = data(RedOp::Max);
                let mut buf = vec![0u8; 2 * bytes];
                scatter.fill(rank, 0, &mut buf);
                comm.reduce_scatter_in_place(&mut buf, f32, RedOp::Max)
                    .unwrap();
                let out = &buf[rank * bytes..(rank + 1) * bytes];
                assert_eq!(
                    scatter.count_wrong(Expect::ReduceScatter, rank, count, out),
                    0
                );
            });
        }
    });
}

/// [`CommOptions::from_settings`], the settings read through a few pairs.
fn options_of(pairs: &[(&'static str, &'static str)]) -> CommOptions {
    let pairs = pairs.to_vec();
    let lookup = move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    CommOptions::from_settings(&Settings::from_lookup(&lookup).unwrap())
}

/// What `options_from_the_environment` asks of `CommOptions::from_lookup`, of the settings.
#[test]
fn options_from_settings() {
    let o = options_of(&[
        ("WEFT_NCHANNELS", "3"),
        ("WEFT_TRANSPORT", "net"),
        ("WEFT_TIMEOUT", "2.5"),
        ("NCCL_BUFFSIZE", "4194304"),
        ("WEFT_WAIT_YIELDS", "7"),
        ("WEFT_MIN_SLICES", "4"),
        ("NCCL_P2P_READ_ENABLE", "1"),
    ]);
    assert_eq!(o.nchannels, Some(3));
    assert_eq!(o.transport, TransportChoice::Net);
    assert_eq!(o.timeout, Duration::from_millis(2500));
    assert_eq!(o.bootstrap.timeout, Duration::from_millis(2500));
    assert_eq!(o.step_bytes, Some(512 * 1024));
    assert_eq!(o.wait.map(|w| (w.spins, w.yields)), Some((256, 7)));
    assert_eq!(o.min_slices, Some(4));
    assert_eq!(o.p2p_read, Some(true));
    assert_eq!(o.protocols, ProtocolEnable::default());
    assert_eq!(o.ll_lines, None);
    let both = options_of(&[("NCCL_P2P_READ_ENABLE", "1"), ("WEFT_P2P_READ_ENABLE", "0")]);
    assert_eq!(both.p2p_read, Some(false), "the WEFT_ name wins");
    let none = options_of(&[]);
    assert_eq!(
        (
            none.p2p_read,
            none.min_slices,
            none.algo,
            none.wait.is_some()
        ),
        (None, None, None, false)
    );
    assert_eq!(none.timeout, DEFAULT_TIMEOUT);
    assert_eq!(none.bootstrap, BootstrapOptions::default());
    // The bootstrap's own deadline holds unless WEFT_TIMEOUT is set.
    let b = options_of(&[("WEFT_BOOTSTRAP_TIMEOUT", "7")]);
    assert_eq!(b.bootstrap.timeout, Duration::from_secs(7));
    assert_eq!(b.timeout, DEFAULT_TIMEOUT);
}

/// The options keep the settings they were made from (init reads the rest there), and the
/// default options are not steered by the environment.
#[test]
fn options_keep_their_settings() {
    let pairs = [
        ("WEFT_SHM_DIR", "/tmp/weft-shm"),
        ("NCCL_MAX_NCHANNELS", "5"),
    ];
    let lookup = |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    let settings = Settings::from_lookup(&lookup).unwrap();
    let o = CommOptions::from_settings(&settings);
    assert_eq!(o.settings, settings);
    assert_eq!(
        o.settings.transport.shm_dir,
        std::path::Path::new("/tmp/weft-shm")
    );
    assert_eq!(o.settings.topology.max_nchannels, Some(5));
    let o = CommOptions::from_lookup(lookup).unwrap();
    assert_eq!(o.settings, settings);
    assert_eq!(CommOptions::default().settings, Settings::default());
    assert_eq!(
        CommOptions::loopback(Duration::from_secs(1)).settings,
        Settings::default()
    );
}

#[test]
fn protocols_and_ll_buffer_from_settings() {
    let only = |p: Protocol| ProtocolSet::of(&[p]);
    let o = options_of(&[("NCCL_PROTO", "^ll"), ("NCCL_LL_BUFFSIZE", "262144")]);
    assert_eq!(
        o.protocols.for_collective(Collective::AllReduce),
        ProtocolSet::of(&[Protocol::Ll128, Protocol::Simple])
    );
    // 256 KiB for 8 steps of 8-byte lines: 4096 lines per step.
    assert_eq!(o.ll_lines, Some(4096));
    let o = options_of(&[
        ("NCCL_PROTO", "Simple"),
        ("WEFT_PROTO", "LL;allgather:Simple"),
        ("WEFT_LL_BUFFSIZE", "100000"),
    ]);
    assert_eq!(
        o.protocols
            .for_collective(Collective::Broadcast { root: 0 }),
        only(Protocol::Ll)
    );
    assert_eq!(
        o.protocols.for_collective(Collective::AllGather),
        only(Protocol::Simple)
    );
    assert_eq!(o.ll_lines, Some(1536));
    assert_eq!(options_of(&[("NCCL_LL_BUFFSIZE", "0")]).ll_lines, Some(0));
    assert_eq!(options_of(&[]).p2p_ll_threshold, None);
    assert_eq!(
        options_of(&[
            ("NCCL_P2P_LL_THRESHOLD", "16384"),
            ("WEFT_P2P_LL_THRESHOLD", "0")
        ])
        .p2p_ll_threshold,
        Some(0)
    );
    assert_eq!(
        options_of(&[("WEFT_ALGO", "TwoShot")]).algo,
        Some(weft_core::algo::GpuAlgo::TwoShot)
    );
}

/// The values `CommOptions::from_lookup` refuses are refused when the settings are read,
/// each error naming its variable and its value.
#[test]
fn bad_values_are_refused_by_the_settings() {
    for (var, value) in [
        ("WEFT_NCHANNELS", "0"),
        ("WEFT_NCHANNELS", "65"),
        ("WEFT_TRANSPORT", "carrier-pigeon"),
        ("WEFT_TIMEOUT", "-1"),
        ("WEFT_BUFFSIZE", "12"),
        ("NCCL_PROTO", "LL,Simpel"),
        ("WEFT_PROTO", "allreduc:LL"),
        ("NCCL_LL_BUFFSIZE", "lots"),
        ("WEFT_ALGO", "tree"),
        ("WEFT_MIN_SLICES", "0"),
        ("WEFT_MIN_SLICES", "9"),
        ("NCCL_P2P_READ_ENABLE", "yes"),
        ("NCCL_P2P_LL_THRESHOLD", "16k"),
        ("WEFT_WAIT_SPINS", "many"),
    ] {
        let err = Settings::from_lookup(&|k| (k == var).then(|| value.to_string()))
            .expect_err("a bad value is an error");
        assert!(
            err.to_string().contains(&format!("{var}={value:?}")),
            "{err}"
        );
    }
}
