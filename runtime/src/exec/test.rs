//! The executor on in-process rings: one thread per rank, heap FIFOs between them. Every
//! collective, type and operator, odd counts, in place and out of place, several channels;
//! every element checked against `verify`'s reference.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use weft_core::abi::{DataType, Protocol, RedOp};
use weft_core::sched::Collective;
use weft_core::tune::{ProtocolCosts, ProtocolEnable, TuningModel};

use super::*;
use crate::conn::{ConnId, Direction, FifoLayout, FifoRegion, WaitPolicy, Waiter};
use weft_verify::{Expect, TestData};

/// Builds `nranks` executors with `nchannels` rings 0..n, FIFOs of `step_bytes` per slot,
/// SIMPLE only.
fn executors(nranks: usize, nchannels: usize, step_bytes: usize) -> Vec<Executor> {
    executors_with(nranks, nchannels, step_bytes, Shape::SIMPLE_RING)
}

/// A protocol and shape for a test to force: `NCCL_PROTO` names the protocol, and the model
/// makes a ring hop so dear that one-shot wins wherever it is allowed (or allows none).
#[derive(Debug, Clone, Copy)]
struct Shape {
    protocol: Protocol,
    one_shot: bool,
}

impl Shape {
    const SIMPLE_RING: Shape = Shape {
        protocol: Protocol::Simple,
        one_shot: false,
    };
    const LL_RING: Shape = Shape {
        protocol: Protocol::Ll,
        one_shot: false,
    };

    /// Lines per LL step of the test connections: 2 KiB of data, so that messages of a few
    /// thousand elements span several LL steps.
    const LL_LINES: usize = 512;

    fn tuning(self) -> Tuning {
        let costs = ProtocolCosts {
            base_ns: 0,
            hop_ns: 1_000_000,
            bus_mbps: u64::MAX / 4,
        };
        Tuning {
            enable: ProtocolEnable::parse(self.protocol.name()).unwrap(),
            ll_step_bytes: Self::LL_LINES * 4,
            model: TuningModel {
                ring_ll: costs,
                ring_simple: costs,
                one_shot_ll: costs,
                one_shot_simple: costs,
                one_shot_max_bytes: if self.one_shot { u64::MAX } else { 0 },
            },
        }
    }
}

/// Builds `nranks` executors with `nchannels` rings 0..n, FIFOs of `step_bytes` per slot and
/// LL buffers, running every call in `shape` where it can.
fn executors_with(
    nranks: usize,
    nchannels: usize,
    step_bytes: usize,
    shape: Shape,
) -> Vec<Executor> {
    let layout = FifoLayout::new(8, step_bytes)
        .unwrap()
        .with_ll_lines(Shape::LL_LINES)
        .unwrap();
    let aborts: Vec<AbortFlag> = (0..nranks).map(|_| AbortFlag::new()).collect();
    let waiter = |r: usize| Waiter {
        policy: WaitPolicy::default().with_timeout(Duration::from_secs(20)),
        abort: aborts[r].clone(),
        peer_pid: None,
        board: None,
    };
    let ring: Arc<[u32]> = (0..nranks as u32).collect();
    let mut channels: Vec<Vec<ExecChannel>> = vec![Vec::new(); nranks];
    for c in 0..nchannels {
        // Connection r -> r+1: rank r sends on it, rank r+1 receives.
        let mut sends = Vec::new();
        let mut recvs: Vec<Option<crate::conn::FifoRecvEnd>> = (0..nranks).map(|_| None).collect();
        for r in 0..nranks {
            let next = (r + 1) % nranks;
            let region = FifoRegion::local(layout).unwrap();
            let id = ConnId {
                transport: "local",
                rank: r as u32,
                peer: next as u32,
                channel: c as u32,
                dir: Direction::Send,
            };
            sends.push(region.send_end(id, waiter(r)));
            let rid = ConnId {
                rank: next as u32,
                peer: r as u32,
                ..id
            };
            recvs[next] = Some(region.recv_end(rid, waiter(next)));
        }
        for (r, (send, recv)) in sends.into_iter().zip(recvs).enumerate() {
            let conns =
                (nranks > 1).then(|| Arc::new(Mutex::new(RingConns::new(send, recv.unwrap()))));
            channels[r].push(ExecChannel {
                ring: Arc::clone(&ring),
                conns,
            });
        }
    }
    channels
        .into_iter()
        .enumerate()
        .map(|(r, ch)| {
            let mut e = Executor::new(r as u32, nranks, ch, step_bytes, aborts[r].clone());
            e.set_tuning(shape.tuning());
            e
        })
        .collect()
}

/// Runs `collective` on every rank (threads) and returns each rank's wrong-element count.
fn run_case(
    execs: &mut [Executor],
    collective: Collective,
    data: TestData,
    count: usize,
    in_place: bool,
) -> Vec<usize> {
    let nranks = execs.len();
    let esize = data.dtype.size_of_elem();
    let in_len = collective.input_len(count, nranks).unwrap();
    let out_len = collective.output_len(count, nranks).unwrap();
    thread::scope(|s| {
        let handles: Vec<_> = execs
            .iter_mut()
            .enumerate()
            .map(|(rank, exec)| {
                s.spawn(move || {
                    let mut out = vec![0xa5u8; out_len * esize];
                    let mut input = vec![0u8; in_len * esize];
                    data.fill(rank, 0, &mut input);
                    let result = if in_place {
                        // NCCL's in-place layouts: all-gather's input is the rank's block of
                        // the output, reduce-scatter's output the rank's block of the input.
                        let (buf, in_off, out_off) = match collective {
                            Collective::AllGather => {
                                let at = rank * count * esize;
                                out[at..at + input.len()].copy_from_slice(&input);
                                (&mut out, at, 0)
                            }
                            Collective::ReduceScatter => (&mut input, 0, rank * count * esize),
                            _ => {
                                out.copy_from_slice(&input);
                                (&mut out, 0, 0)
                            }
                        };
                        let base = buf.as_mut_ptr();
                        // SAFETY: both ranges lie inside `buf`, which outlives the call.
                        let raw = unsafe {
                            RawBuffers::new(
                                base.wrapping_add(in_off),
                                in_len * esize,
                                base.wrapping_add(out_off),
                                out_len * esize,
                            )
                        };
                        let r = exec.collective(collective, count, data.dtype, data.op, raw);
                        if collective == Collective::ReduceScatter {
                            let at = rank * count * esize;
                            out.copy_from_slice(&input[at..at + out_len * esize]);
                        }
                        r
                    } else {
                        // SAFETY: two separate vectors that outlive the call.
                        let raw = unsafe {
                            RawBuffers::new(
                                input.as_ptr(),
                                input.len(),
                                out.as_mut_ptr(),
                                out.len(),
                            )
                        };
                        exec.collective(collective, count, data.dtype, data.op, raw)
                    };
                    result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    data.count_wrong(Expect::from(collective), rank, count, &out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

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

fn collectives(nranks: u32) -> Vec<Collective> {
    vec![
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast {
            root: nranks.saturating_sub(1) / 2,
        },
        Collective::Reduce {
            root: nranks.saturating_sub(1),
        },
    ]
}

/// Every collective (or only all-reduce), type and op, at small and odd counts, in and out of
/// place, on rings of 1 to 4 ranks split over every channel, in `shape`; returns the
/// protocol and shape of each call that ran (all ranks agree on them).
fn every_collective_small_counts(shape: Shape, only_all_reduce: bool) -> Vec<(Protocol, bool)> {
    let mut ran = Vec::new();
    // Small FIFO slots (4 KiB) so that modest counts span many slices, chunks and loops.
    for (nranks, nchannels) in [(1, 1), (2, 2), (3, 1), (4, 3)] {
        let mut execs = executors_with(nranks, nchannels, 4096, shape);
        // Split even the smallest counts, so every type's channel alignment is exercised.
        for e in &mut execs {
            e.use_all_channels(true);
        }
        let mut seed = 1;
        for collective in collectives(nranks as u32) {
            if only_all_reduce && collective != Collective::AllReduce {
                continue;
            }
            for dtype in TYPES {
                for op in OPS {
                    if !collective.reduces() && op != RedOp::Sum {
                        continue;
                    }
                    for (count, in_place) in [(1, false), (37, true), (1001, false), (4099, true)] {
                        seed += 1;
                        let data = TestData {
                            dtype,
                            op,
                            seed,
                            nranks,
                        };
                        let choice = execs[0].choose(collective, count, dtype).unwrap();
                        ran.push((choice.protocol, choice.algo == Algo::OneShot));
                        let wrong = run_case(&mut execs, collective, data, count, in_place);
                        assert!(
                            wrong.iter().all(|&w| w == 0),
                            "{collective:?} {dtype:?} {op:?} count {count} in_place {in_place} \
                             on {nranks} ranks x {nchannels} channels, {choice:?}: wrong {wrong:?}"
                        );
                    }
                }
            }
        }
    }
    ran
}

#[test]
fn every_collective_type_and_op_small_counts() {
    let ran = every_collective_small_counts(Shape::SIMPLE_RING, false);
    assert!(ran.iter().all(|&c| c == (Protocol::Simple, false)));
}

#[test]
fn every_collective_type_and_op_over_ll() {
    let ran = every_collective_small_counts(Shape::LL_RING, false);
    assert!(ran.iter().all(|&c| c == (Protocol::Ll, false)));
}

#[test]
fn one_shot_all_reduce_every_type_and_op() {
    for protocol in [Protocol::Simple, Protocol::Ll] {
        let shape = Shape {
            protocol,
            one_shot: true,
        };
        let ran = every_collective_small_counts(shape, true);
        // One-shot wherever the message fits half the FIFO (4 SIMPLE steps of 4 KiB, 4 LL
        // steps of 2 KiB), the ring beyond; one rank never goes one-shot.
        let shots = ran.iter().filter(|c| c.1).count();
        assert!(ran.iter().all(|c| c.0 == protocol), "{protocol:?}");
        assert!(
            shots > ran.len() / 2 && shots < ran.len(),
            "{protocol:?}: {shots} of {}",
            ran.len()
        );
    }
}

#[test]
fn large_counts_on_many_channels() {
    for (nranks, nchannels) in [(2, 4), (5, 2)] {
        let mut execs = executors(nranks, nchannels, 64 * 1024);
        for (k, collective) in collectives(nranks as u32).into_iter().enumerate() {
            let data = TestData {
                dtype: DataType::Float32,
                op: RedOp::Sum,
                seed: 99 + k as u64,
                nranks,
            };
            for (count, in_place) in [(1_000_003, false), (777_777, true)] {
                let wrong = run_case(&mut execs, collective, data, count, in_place);
                assert!(
                    wrong.iter().all(|&w| w == 0),
                    "{collective:?} count {count} in_place {in_place} on {nranks}x{nchannels}: {wrong:?}"
                );
            }
        }
    }
}

#[test]
fn random_shapes() {
    // A seeded xorshift picks ranks, channels, FIFO step, protocol and shape, collective,
    // type, op, count and placement; every element of every result is checked.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for case in 0..24 {
        let nranks = 1 + next(6) as usize;
        let nchannels = 1 + next(4) as usize;
        let step_bytes = 512 * (1 + next(16) as usize);
        let shape = Shape {
            protocol: [Protocol::Simple, Protocol::Ll][next(2) as usize],
            one_shot: next(2) == 1,
        };
        let mut execs = executors_with(nranks, nchannels, step_bytes, shape);
        let all = next(2) == 1;
        for e in &mut execs {
            e.use_all_channels(all);
        }
        let collective = collectives(nranks as u32)[next(5) as usize];
        let dtype = TYPES[next(TYPES.len() as u64) as usize];
        let op = OPS[next(5) as usize];
        let count = next(20_000) as usize;
        let in_place = next(2) == 1;
        let data = TestData {
            dtype,
            op,
            seed: case,
            nranks,
        };
        let wrong = run_case(&mut execs, collective, data, count, in_place);
        assert!(
            wrong.iter().all(|&w| w == 0),
            "case {case}: {collective:?} {dtype:?} {op:?} count {count} in_place {in_place} on \
             {nranks} ranks x {nchannels} channels, {step_bytes}-byte steps, {shape:?}: wrong \
             {wrong:?}"
        );
    }
}

/// The expected fp8 results hold in every reduction order: reduce each element with
/// the CPU reference (NCCL's rounding at every step) over a shuffled rank order, as a
/// ring starting anywhere would, and count nothing wrong.
#[test]
fn fp8_data_reduces_exactly_in_any_order() {
    use crate::exec::reduce::Reduction;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for dtype in [DataType::Float8E4M3, DataType::Float8E5M2] {
        for op in RedOp::ALL.iter().copied() {
            for nranks in [1usize, 2, 3, 5, 8, 9, 16, 17, 40] {
                let d = TestData {
                    dtype,
                    op,
                    seed: next(),
                    nranks,
                };
                let count = 301;
                let inputs: Vec<Vec<u8>> = (0..nranks)
                    .map(|r| {
                        let mut b = vec![0u8; count];
                        d.fill(r, 0, &mut b);
                        b
                    })
                    .collect();
                let reduction = Reduction::new(dtype, op, nranks as u32).unwrap();
                let mut out = vec![0u8; count];
                for i in 0..count {
                    let mut order: Vec<usize> = (0..nranks).collect();
                    for k in (1..nranks).rev() {
                        order.swap(k, (next() % (k as u64 + 1)) as usize);
                    }
                    let mut acc = [0u8];
                    reduction
                        .copy_input(&mut acc, &inputs[order[0]][i..=i])
                        .unwrap();
                    for &r in &order[1..] {
                        reduction
                            .reduce_input_in_place(&mut acc, &inputs[r][i..=i])
                            .unwrap();
                    }
                    reduction.finish(&mut acc).unwrap();
                    out[i] = acc[0];
                }
                assert_eq!(
                    d.count_wrong(Expect::AllReduce, 0, count, &out),
                    0,
                    "{dtype} {op} over {nranks} ranks"
                );
                // And a wrong element is seen: the smallest change of one code.
                out[7] ^= 1;
                assert_eq!(
                    d.count_wrong(Expect::AllReduce, 0, count, &out),
                    1,
                    "{dtype} {op} over {nranks} ranks"
                );
            }
        }
    }
}

/// What the executor offers the chooser: its FIFO steps for the one-shot, LL only where
/// every ring connection has an LL buffer, no peer memory, no `WEFT_ALGO`.
#[test]
fn the_chooser_is_offered_this_executors_fifos() {
    let tuning = Tuning {
        enable: ProtocolEnable::parse("LL,Simple").unwrap(),
        ll_step_bytes: 8192,
        model: TuningModel::HOST_SHM,
    };
    let chooser = tuning.chooser(128 << 10);
    assert_eq!(chooser.settings.protocols, tuning.enable);
    assert_eq!(chooser.settings.algo, None);
    assert_eq!(chooser.offer.model, TuningModel::HOST_SHM);
    assert_eq!(chooser.offer.ll, LlOffer::ByDefault);
    assert_eq!(
        chooser.offer.fifo_one_shot,
        Some(FifoSteps {
            simple_bytes: 128 << 10,
            ll_bytes: 8192
        })
    );
    assert_eq!(chooser.offer.peers, PeerCaps::NONE);
    let no_ll = Tuning {
        ll_step_bytes: 0,
        ..tuning
    };
    assert_eq!(no_ll.chooser(4096).offer.ll, LlOffer::NoBuffer);
    // The executor's own words when nothing is left to run.
    let only_ll = Tuning {
        enable: ProtocolEnable::parse("LL").unwrap(),
        ..no_ll
    };
    assert_eq!(
        only_ll
            .choose(Collective::AllGather, 8, 2, 4096)
            .unwrap_err()
            .to_string(),
        "NCCL_PROTO enables LL for AllGather, but the CPU executor runs Simple on this \
         communicator (LL only when every ring connection is SHM): enable Simple"
    );
}
