//! Every collective, type and operator between rank processes on loopback, over SHM and
//! NET, with 1 to 8 ranks and 1 to 4 channels; random data, counts that are not powers of
//! two, in place and out of place; every element of every result checked against
//! `weft_verify`'s reference.

mod common;

use std::time::Duration;

use weft_core::abi::{DataType, RedOp};
use weft_runtime::comm::{HostComm, P2pOp};
use weft_verify::{Expect, TestData};

const TYPES: [DataType; 12] = [
    DataType::Int8,
    DataType::Uint8,
    DataType::Int32,
    DataType::Uint32,
    DataType::Int64,
    DataType::Uint64,
    DataType::Float16,
    DataType::Bfloat16,
    DataType::Float32,
    DataType::Float64,
    DataType::Float8E4M3,
    DataType::Float8E5M2,
];
const OPS: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coll {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast(usize),
    Reduce(usize),
    SendRecv,
}

impl Coll {
    fn all(nranks: usize) -> [Coll; 6] {
        [
            Coll::AllReduce,
            Coll::ReduceScatter,
            Coll::AllGather,
            Coll::Broadcast(nranks / 2),
            Coll::Reduce(nranks - 1),
            Coll::SendRecv,
        ]
    }

    fn reduces(self) -> bool {
        matches!(
            self,
            Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce(_)
        )
    }
}

/// Runs one call on this rank and checks every element of its result.
fn check(
    comm: &mut HostComm,
    coll: Coll,
    dtype: DataType,
    op: RedOp,
    count: usize,
    in_place: bool,
    seed: u64,
) {
    let (rank, n) = (comm.rank(), comm.nranks());
    let e = dtype.size_of_elem();
    let data = TestData {
        dtype,
        op,
        seed,
        nranks: n,
    };
    let (in_elems, out_elems) = match coll {
        Coll::ReduceScatter => (count * n, count),
        Coll::AllGather => (count, count * n),
        _ => (count, count),
    };
    let mut input = vec![0u8; in_elems * e];
    data.fill(rank, 0, &mut input);
    let mut out = vec![0x5au8; out_elems * e];
    let next = (rank + 1) % n;
    let prev = (rank + n - 1) % n;
    let result = if in_place {
        match coll {
            Coll::AllReduce => {
                out.copy_from_slice(&input);
                comm.all_reduce_in_place(&mut out, dtype, op)
            }
            Coll::ReduceScatter => {
                let r = comm.reduce_scatter_in_place(&mut input, dtype, op);
                out.copy_from_slice(&input[rank * count * e..(rank + 1) * count * e]);
                r
            }
            Coll::AllGather => {
                out[rank * count * e..(rank + 1) * count * e].copy_from_slice(&input);
                comm.all_gather_in_place(&mut out, dtype)
            }
            Coll::Broadcast(root) => {
                out.copy_from_slice(&input);
                comm.broadcast_in_place(&mut out, dtype, root)
            }
            Coll::Reduce(root) => {
                out.copy_from_slice(&input);
                comm.reduce_in_place(&mut out, dtype, op, root)
            }
            Coll::SendRecv => {
                // Send to the next rank and receive from the previous, as one group.
                let sent = input.clone();
                comm.group(&mut [
                    P2pOp::Send {
                        peer: next,
                        buf: &sent,
                    },
                    P2pOp::Recv {
                        peer: prev,
                        buf: &mut out,
                    },
                ])
            }
        }
    } else {
        match coll {
            Coll::AllReduce => comm.all_reduce(&input, &mut out, dtype, op),
            Coll::ReduceScatter => comm.reduce_scatter(&input, &mut out, dtype, op),
            Coll::AllGather => comm.all_gather(&input, &mut out, dtype),
            // Non-roots pass empty send buffers to broadcast, as NCCL allows.
            Coll::Broadcast(root) if rank != root => comm.broadcast(&[], &mut out, dtype, root),
            Coll::Broadcast(root) => comm.broadcast(&input, &mut out, dtype, root),
            Coll::Reduce(root) => comm.reduce(&input, &mut out, dtype, op, root),
            Coll::SendRecv => {
                // Plain send/recv, ordered so that the ring cannot deadlock: even ranks
                // send first.
                if n == 1 {
                    comm.group(&mut [
                        P2pOp::Send {
                            peer: 0,
                            buf: &input,
                        },
                        P2pOp::Recv {
                            peer: 0,
                            buf: &mut out,
                        },
                    ])
                } else if rank % 2 == 0 {
                    comm.send(&input, next)
                        .and_then(|()| comm.recv(&mut out, prev))
                } else {
                    comm.recv(&mut out, prev)
                        .and_then(|()| comm.send(&input, next))
                }
            }
        }
    };
    let case = format!(
        "rank {rank}/{n}: {coll:?} {} {} count {count} in_place {in_place}",
        dtype.name(),
        op.name()
    );
    result.unwrap_or_else(|e| panic!("{case}: {e}"));
    let expect = match coll {
        Coll::AllReduce => Expect::AllReduce,
        Coll::ReduceScatter => Expect::ReduceScatter,
        Coll::AllGather => Expect::AllGather,
        Coll::Broadcast(root) => Expect::Broadcast { root },
        Coll::Reduce(root) => Expect::Reduce { root },
        Coll::SendRecv => Expect::Recv { from: prev },
    };
    let wrong = data.count_wrong(expect, rank, count, &out);
    assert_eq!(wrong, 0, "{case}: {wrong} wrong elements");
}

/// Every collective x type x operator (x in/out of place) at a few odd counts.
fn full_matrix(comm: &mut HostComm, counts: &[usize]) {
    let mut seed = 1000;
    for coll in Coll::all(comm.nranks()) {
        for dtype in TYPES {
            for op in OPS {
                if !coll.reduces() && op != RedOp::Sum {
                    continue;
                }
                for &count in counts {
                    for in_place in [false, true] {
                        seed += 1;
                        check(comm, coll, dtype, op, count, in_place, seed);
                    }
                }
            }
        }
    }
}

/// Every collective on a few type/operator pairs, small to large counts.
fn sweep(comm: &mut HostComm, counts: &[usize]) {
    let pairs = [
        (DataType::Float32, RedOp::Sum),
        (DataType::Int8, RedOp::Max),
        (DataType::Bfloat16, RedOp::Avg),
        (DataType::Uint64, RedOp::Prod),
    ];
    let mut seed = 2000;
    for coll in Coll::all(comm.nranks()) {
        for (k, &(dtype, op)) in pairs.iter().enumerate() {
            for (j, &count) in counts.iter().enumerate() {
                // The largest count only with the first pair, to bound the run time.
                if j + 1 == counts.len() && k > 0 {
                    continue;
                }
                seed += 1;
                check(comm, coll, dtype, op, count, (seed % 2) == 0, seed);
            }
        }
    }
}

fn run(name: &str, nranks: usize, channels: u32, transport: &str, body: fn(&mut HostComm)) {
    run_with(name, nranks, channels, transport, &[], body);
}

/// [`run`] with FIFO steps of `step` bytes (small steps: many slices, chunks and loops).
fn run_with_step(
    name: &str,
    nranks: usize,
    channels: u32,
    transport: &str,
    step: Option<usize>,
    body: fn(&mut HostComm),
) {
    let step = step.map(|s| s.to_string());
    let extra: Vec<(&str, String)> = step
        .into_iter()
        .map(|s| ("WEFT_TEST_STEP_BYTES", s))
        .collect();
    run_with(name, nranks, channels, transport, &extra, body);
}

/// [`run`] with more test-case variables (`common::options` reads them).
fn run_with(
    name: &str,
    nranks: usize,
    channels: u32,
    transport: &str,
    extra: &[(&str, String)],
    body: fn(&mut HostComm),
) {
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(Duration::from_secs(30)));
        body(&mut comm);
        comm.barrier().expect("final barrier");
        return;
    }
    let mut vars = vec![
        ("WEFT_TEST_CHANNELS", channels.to_string()),
        ("WEFT_TEST_TRANSPORT", transport.to_string()),
    ];
    vars.extend(extra.iter().cloned());
    let exits = common::launch(name, nranks, &vars, Duration::from_secs(120));
    common::assert_all_ok(name, &exits);
}

#[test]
fn every_type_and_op_over_shm() {
    run("every_type_and_op_over_shm", 4, 2, "shm", |c| {
        full_matrix(c, &[1, 13, 1031])
    });
}

/// LL only (`NCCL_PROTO=LL`): every collective's ring over LL lines in shared memory, and
/// the one-shot all-reduce; 2061 elements of 8 bytes span several 8 KiB LL steps.
#[test]
fn every_type_and_op_over_shm_ll() {
    let proto = [("WEFT_TEST_PROTO", "LL".to_string())];
    run_with("every_type_and_op_over_shm_ll", 3, 2, "shm", &proto, |c| {
        full_matrix(c, &[1, 13, 2061])
    });
}

/// SIMPLE only (`NCCL_PROTO=^LL`): what the default picks from a few KiB up, at every size.
#[test]
fn every_type_and_op_over_shm_simple() {
    let proto = [("WEFT_TEST_PROTO", "^LL".to_string())];
    run_with(
        "every_type_and_op_over_shm_simple",
        3,
        2,
        "shm",
        &proto,
        |c| full_matrix(c, &[1, 13, 2061]),
    );
}

#[test]
fn every_type_and_op_over_net() {
    run("every_type_and_op_over_net", 3, 3, "net", |c| {
        full_matrix(c, &[5, 1031])
    });
}

#[test]
fn one_rank() {
    run("one_rank", 1, 1, "auto", |c| full_matrix(c, &[1, 1031]));
}

#[test]
fn two_ranks_four_channels_large() {
    run("two_ranks_four_channels_large", 2, 4, "auto", |c| {
        sweep(c, &[7, 65_537, 3_000_017])
    });
}

#[test]
fn five_ranks_three_channels() {
    run_with_step("five_ranks_three_channels", 5, 3, "shm", Some(8192), |c| {
        sweep(c, &[3, 40_961, 1_000_003])
    });
}

#[test]
fn eight_ranks_one_channel() {
    run_with_step("eight_ranks_one_channel", 8, 1, "shm", Some(4096), |c| {
        sweep(c, &[1, 9_999, 262_147])
    });
}

#[test]
fn eight_ranks_four_channels_net() {
    run("eight_ranks_four_channels_net", 8, 4, "net", |c| {
        sweep(c, &[2, 33_333])
    });
}

/// Two "hosts" of two ranks each (told apart by `WEFT_HOSTID`): SHM within a host, NET
/// between them, in one ring.
#[test]
fn two_hosts_mix_shm_and_net() {
    let name = "two_hosts_mix_shm_and_net";
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(Duration::from_secs(30)));
        use weft_runtime::comm::TransportKind::{Net, Shm};
        let (send, recv) = comm.channel_transports()[0].expect("4 ranks have connections");
        let expect_send = if role.rank % 2 == 0 { Shm } else { Net };
        let expect_recv = if role.rank % 2 == 0 { Net } else { Shm };
        assert_eq!(
            (send, recv),
            (expect_send, expect_recv),
            "rank {}",
            role.rank
        );
        sweep(&mut comm, &[3, 77_777]);
        comm.barrier().expect("final barrier");
        return;
    }
    let exits = common::launch_each(
        name,
        4,
        &[("WEFT_TEST_CHANNELS", "2".to_string())],
        |rank| vec![("WEFT_HOSTID".to_string(), format!("host-{}", rank / 2))],
        Duration::from_secs(120),
    );
    common::assert_all_ok(name, &exits);
}

/// Many point-to-point groups back to back: ring exchanges of small messages (run
/// sequentially on the caller's thread), large ones (run in parallel), and a one-way
/// stream from rank 0 to rank 1 that lets rank 0 run ahead. Nothing may deadlock, and
/// every byte arrives where it should.
#[test]
fn point_to_point_patterns() {
    let name = "point_to_point_patterns";
    if let Some(role) = common::role() {
        let mut comm = role.comm(&common::options(Duration::from_secs(30)));
        let (rank, n) = (comm.rank(), comm.nranks());
        let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
        let dtype = DataType::Uint8;
        for iter in 0..300u64 {
            let data = TestData {
                dtype,
                op: RedOp::Sum,
                seed: iter,
                nranks: n,
            };
            // Sizes every rank computes the same way: mostly small, sometimes 600 KB.
            let len = if iter % 7 == 3 {
                600_001
            } else {
                (iter as usize * 37) % 3000
            };
            let mut mine = vec![0u8; len];
            data.fill(rank, 0, &mut mine);
            let mut got = vec![0u8; len];
            comm.group(&mut [
                P2pOp::Send {
                    peer: next,
                    buf: &mine,
                },
                P2pOp::Recv {
                    peer: prev,
                    buf: &mut got,
                },
            ])
            .unwrap_or_else(|e| panic!("rank {rank} iter {iter}: {e}"));
            let wrong = data.count_wrong(Expect::Recv { from: prev }, rank, len, &got);
            assert_eq!(
                wrong, 0,
                "rank {rank} iter {iter}: ring exchange of {len} bytes"
            );
            // One way: rank 0 streams three messages per group to rank 1.
            let sizes = [0usize, 1 + iter as usize % 100, 4096];
            if rank == 0 && n > 1 {
                let msgs: Vec<Vec<u8>> = sizes
                    .iter()
                    .map(|&s| {
                        let mut m = vec![0u8; s];
                        data.fill(0, 0, &mut m);
                        m
                    })
                    .collect();
                let mut ops: Vec<P2pOp<'_>> = msgs
                    .iter()
                    .map(|m| P2pOp::Send { peer: 1, buf: m })
                    .collect();
                comm.group(&mut ops).expect("one-way sends");
            } else if rank == 1 {
                let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
                let mut ops: Vec<P2pOp<'_>> = bufs
                    .iter_mut()
                    .map(|b| P2pOp::Recv { peer: 0, buf: b })
                    .collect();
                comm.group(&mut ops).expect("one-way receives");
                drop(ops);
                for (b, &s) in bufs.iter().zip(&sizes) {
                    assert_eq!(data.count_wrong(Expect::Recv { from: 0 }, 1, s, b), 0);
                }
            }
        }
        comm.barrier().expect("final barrier");
        return;
    }
    let exits = common::launch(
        name,
        4,
        &[("WEFT_TEST_TRANSPORT", "shm".to_string())],
        Duration::from_secs(120),
    );
    common::assert_all_ok(name, &exits);
}
