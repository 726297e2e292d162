//! The GPU path on real GPUs: every collective, type and operator (fp8 reductions where the
//! GPU has them, compute capability 8.9 and newer), in place and out of place, counts that
//! are not powers of two, one rank per GPU as threads of this process
//! (the multi-process form is `weft perf --device cuda -c`, run by scripts/gpu-test.sh);
//! every element of every result checked against `weft_verify`'s reference, outputs
//! poisoned before each call. fp8 arithmetic is also compared with the CPU executor's bit for
//! bit on every operand pair, specials included. Then a send/recv group, and a rank that
//! skips a call: the other's kernel must give up within the timeout with an error naming it.
//!
//! The peer-pointer algorithms (one-shot in its LL and barrier forms, two-shot, NVLS in its
//! unicast form; `WEFT_ALGO`) and the automatic choice get the same treatment for the
//! collectives each runs, from 1 element to 256 MiB per rank, and so does the ring (SIMPLE
//! and LL) at 256 MiB. The NVLS multicast form is never run by any test (it needs `WEFT_NVLS=1`,
//! which no test sets).
//! The same again with LL forced (`NCCL_PROTO=LL`, and `NCCL_P2P_LL_THRESHOLD` past every
//! message for send/recv), LL and SIMPLE calls interleaved on one stream (they share each
//! connection's step counter and head), and a rank that skips an LL call.
//!
//! Where no GPU (or no libcuda) is found, each test prints why it did not run and passes:
//! CI has no GPU; scripts/gpu-test.sh runs these on the GPU machines.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use weft_core::abi::{DataType, MAX_CHANNELS, PEER_LANES, Protocol, RedOp};
use weft_core::algo::GpuAlgo;
use weft_core::sched::Collective;
use weft_core::tune::ProtocolEnable;
use weft_cuda::{DeviceBuffer, Stream};
use weft_runtime::bootstrap::{BootstrapOptions, BootstrapRoot, UniqueId};
use weft_runtime::comm::CommOptions;
use weft_runtime::exec::reduce::{F8E4M3, F8E5M2, Reduction};
use weft_runtime::gpu::{GpuCollective, GpuComm, GpuError, GpuP2p, GpuRedOp, PreMulScalar};
use weft_verify::{Expect, TestData};

/// The GPUs to use, or `None` (with the reason printed) where there are none.
fn gpus() -> Option<usize> {
    match weft_cuda::device_count() {
        Ok(0) => {
            eprintln!("skipped: no GPU (CUDA sees 0 devices)");
            None
        }
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("skipped: no GPU ({e})");
            None
        }
    }
}

/// Runs `body(rank, comm)` on `nranks` threads, one GPU each, and returns what each gave.
fn run_ranks<T: Send + 'static>(
    nranks: usize,
    timeout: Duration,
    body: impl Fn(usize, GpuComm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    run_ranks_with(nranks, timeout, Settings::default(), body)
}

/// Protocol settings every rank of a test starts with (the same on all, as init demands).
/// By default the ring in SIMPLE, send/recv too (the tests of the ring's SIMPLE kernels must
/// not have their small calls taken by LL or the automatic one-shot, which run by default on
/// P2P windows); `automatic_choice_every_type_op_and_size` tests what a user gets.
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// `NCCL_PROTO`'s value; `None`: unset (LL or SIMPLE as the model chooses).
    proto: Option<&'static str>,
    /// `NCCL_P2P_LL_THRESHOLD`; `None`: unset (NCCL's 16 KiB per channel).
    p2p_ll_threshold: Option<usize>,
    /// The algorithm every call must use (as `WEFT_ALGO` does); `None`: the automatic choice.
    algo: Option<GpuAlgo>,
    /// `NCCL_P2P_READ_ENABLE`; `None`: unset (read mode on Ampere NVLink only).
    p2p_read: Option<bool>,
    /// `WEFT_DIRECT_WINDOW` (bytes of the one-/two-shot peer region's data window);
    /// `None`: the environment's, else the default.
    direct_window: Option<u64>,
    /// Ranks stand for this many hosts (`NCCL_HOSTID` per rank, consecutive ranks on one
    /// host): their connections across hosts go over NET; `None`: one host.
    hosts: Option<usize>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::SIMPLE
    }
}

impl Settings {
    /// The default: the ring in SIMPLE, send/recv too.
    const SIMPLE: Settings = Settings {
        proto: Some("Simple"),
        // Send/recv LL up to 0 bytes per channel: never.
        p2p_ll_threshold: Some(0),
        algo: Some(GpuAlgo::Ring),
        p2p_read: None,
        direct_window: None,
        hosts: None,
    };

    /// LL for every collective and every send/recv.
    const LL: Settings = Settings {
        proto: Some("LL"),
        p2p_ll_threshold: Some(usize::MAX),
        ..Settings::SIMPLE
    };

    /// SIMPLE in read mode (`NCCL_P2P_READ_ENABLE=1`): the receivers read the FIFOs.
    const READ: Settings = Settings {
        p2p_read: Some(true),
        ..Settings::SIMPLE
    };

    /// Every call through `algo`.
    fn algo(algo: GpuAlgo) -> Settings {
        Settings {
            algo: Some(algo),
            ..Settings::default()
        }
    }

    /// SIMPLE with the ranks on two hosts (NET between them).
    const TWO_HOSTS: Settings = Settings {
        hosts: Some(2),
        ..Settings::SIMPLE
    };

    /// The one-shot in its barrier form: a data window of 256 KiB, too small for the LL
    /// form's lanes (128 pairs per sub-slot on two ranks, fewer than the block's threads).
    fn one_shot_barrier_form() -> Settings {
        Settings {
            direct_window: Some(256 << 10),
            ..Settings::algo(GpuAlgo::OneShot)
        }
    }
}

/// Loopback options with `timeout`, the rest from the environment, as a program reads it
/// once at its start: the GPU scripts run these tests under NCCL_P2P_DISABLE=1 (SHM
/// windows), WEFT_KERNEL_THREADS and the like.
fn test_options(timeout: Duration) -> CommOptions {
    let mut opts = CommOptions::loopback(timeout);
    opts.settings = weft_runtime::config::Settings::from_env_or_defaults();
    opts
}

/// [`run_ranks`] with protocol and algorithm settings.
fn run_ranks_with<T: Send + 'static>(
    nranks: usize,
    timeout: Duration,
    settings: Settings,
    body: impl Fn(usize, GpuComm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    // WEFT_TIMEOUT shortens the tests' deadline (a hang then fails sooner).
    let timeout = std::env::var("WEFT_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(timeout, |s| timeout.min(Duration::from_secs_f64(s)));
    let bopts = BootstrapOptions::loopback(timeout);
    let (id, root) = BootstrapRoot::start(&bopts).expect("bootstrap root");
    let id: Arc<UniqueId> = Arc::new(id);
    let body = Arc::new(body);
    let handles: Vec<_> = (0..nranks)
        .map(|rank| {
            let (id, body) = (id.clone(), body.clone());
            std::thread::spawn(move || {
                let mut opts = test_options(timeout);
                if let Some(bytes) = settings.direct_window {
                    opts.settings.gpu.direct_window = bytes;
                }
                if let Some(proto) = settings.proto {
                    opts.protocols = ProtocolEnable::parse(proto).unwrap();
                }
                opts.p2p_ll_threshold = settings.p2p_ll_threshold;
                opts.algo = settings.algo;
                opts.p2p_read = settings.p2p_read;
                if let Some(hosts) = settings.hosts {
                    let host = rank * hosts / nranks;
                    opts.settings.bootstrap.hostid = Some(format!("weft-test-host-{host}"));
                    // Each rank stands for a host: loopback is the network between them.
                    opts.socket_ifname = Some("=lo".to_string());
                }
                let comm =
                    GpuComm::init(&id, rank, nranks, rank % gpus().unwrap_or(1).max(1), &opts)
                        .unwrap_or_else(|e| panic!("rank {rank}: init: {e}"));
                // Ranks standing for several hosts must really be joined over NET.
                if settings.hosts.is_some_and(|h| h > 1) {
                    assert!(
                        comm.network().is_some(),
                        "rank {rank}: no NET connection to the other hosts"
                    );
                }
                // Read mode asked for must be what runs (SHM windows have no read mode).
                if settings.p2p_read == Some(true) && comm.transport_name() != "SHM" {
                    assert!(comm.p2p_read(), "rank {rank}: read mode is off");
                }
                body(rank, comm)
            })
        })
        .collect();
    let out = handles
        .into_iter()
        .map(|h| h.join().expect("a rank panicked"))
        .collect();
    drop(root);
    out
}

#[derive(Debug, Clone, Copy)]
struct Case {
    coll: Collective,
    dtype: DataType,
    op: RedOp,
    count: usize,
    in_place: bool,
    seed: u64,
    /// `Some`: a `PreMulSum` call (`op` is then `Sum`, whose data it uses), each rank with
    /// its own scalar (`TestData::premul_scalar`), passed this way.
    premul: Option<ScalarAt>,
}

impl Case {
    /// Input and output elements of one rank (NCCL's layout: reduce-scatter's input and
    /// all-gather's output hold every rank's part).
    fn elems(&self, nranks: usize) -> (usize, usize) {
        match self.coll {
            Collective::ReduceScatter => (self.count * nranks, self.count),
            Collective::AllGather => (self.count, self.count * nranks),
            _ => (self.count, self.count),
        }
    }

    /// The seeded data of the case on `nranks` ranks.
    fn data(&self, nranks: usize) -> TestData {
        TestData {
            dtype: self.dtype,
            op: self.op,
            seed: self.seed,
            nranks,
        }
    }
}

/// Where a `PreMulSum` test passes its scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScalarAt {
    /// `PreMulScalar::Immediate`.
    Host,
    /// `PreMulScalar::Device`: written to device memory before the call; consecutive cases
    /// change the value at the same address, so a kernel that read it at any other time
    /// than its own run would be caught.
    Device,
}

fn cases(nranks: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 1u64;
    let counts = [1usize, 7, 1000, 65_536 + 3, 1_234_567];
    let root = (nranks - 1) as u32;
    for &dtype in DataType::ALL {
        for &count in &counts {
            for in_place in [false, true] {
                let mut push = |coll, op| {
                    seed += 1;
                    out.push(Case {
                        coll,
                        dtype,
                        op,
                        count,
                        in_place,
                        seed,
                        premul: None,
                    });
                };
                for &op in RedOp::ALL {
                    push(Collective::AllReduce, op);
                    push(Collective::ReduceScatter, op);
                    push(Collective::Reduce { root }, op);
                }
                push(Collective::AllGather, RedOp::Sum);
                push(Collective::Broadcast { root }, RedOp::Sum);
            }
        }
    }
    out
}

/// One rank's buffers, allocated once for the largest case: allocating and freeing device
/// memory waits for the whole device, which would stall ranks that share a GPU.
struct Buffers {
    send: DeviceBuffer,
    recv: DeviceBuffer,
    /// A `PreMulSum` call's device-resident scalar (one element of any type).
    scalar: DeviceBuffer,
}

impl Buffers {
    fn new(comm: &GpuComm, bytes: usize) -> Buffers {
        let ctx = comm.context();
        Buffers {
            send: DeviceBuffer::alloc(ctx, bytes).unwrap(),
            recv: DeviceBuffer::alloc(ctx, bytes).unwrap(),
            scalar: DeviceBuffer::alloc(ctx, 8).unwrap(),
        }
    }
}

/// Every rank's kernels loaded, then a barrier (see `GpuComm::prepare`).
fn prepare(comm: &mut GpuComm) {
    comm.prepare(DataType::ALL).unwrap();
    comm.barrier().unwrap();
}

/// Runs `case` on this rank and returns the number of wrong elements.
fn run_case(
    rank: usize,
    nranks: usize,
    comm: &mut GpuComm,
    stream: &Stream,
    b: &Buffers,
    c: &Case,
) -> usize {
    let esize = c.dtype.size_of_elem();
    let (in_elems, out_elems) = c.elems(nranks);
    let data = c.data(nranks);
    let big = in_elems.max(out_elems) * esize;
    let mut host = vec![0xa5u8; big];
    // In place, the input sits where NCCL's layout puts it in the output buffer.
    let (in_at, out_at) = match (c.in_place, c.coll) {
        (true, Collective::AllGather) => (rank * c.count * esize, 0),
        (true, Collective::ReduceScatter) => (0, rank * c.count * esize),
        _ => (0, 0),
    };
    let mut input = vec![0u8; in_elems * esize];
    data.fill(rank, 0, &mut input);
    if c.in_place {
        host[in_at..in_at + input.len()].copy_from_slice(&input);
    } else {
        b.send.copy_from_host(&input).unwrap();
    }
    // Poisons the output (and the rest of the buffer).
    b.recv.copy_from_host(&host).unwrap();
    let src = if c.in_place {
        b.recv.ptr() + in_at as u64
    } else {
        b.send.ptr()
    };
    let op = match c.premul {
        None => GpuRedOp::Builtin(c.op),
        Some(ScalarAt::Host) => {
            GpuRedOp::PreMulSum(PreMulScalar::Immediate(data.premul_scalar(rank)))
        }
        Some(ScalarAt::Device) => {
            // The previous call has finished (synchronized): the new value may replace it.
            b.scalar
                .copy_from_host(&data.premul_scalar(rank).to_ne_bytes())
                .unwrap();
            GpuRedOp::PreMulSum(PreMulScalar::Device(b.scalar.ptr()))
        }
    };
    // SAFETY: both buffers (and the scalar's) hold the call's input, output and scalar and
    // outlive the synchronize.
    unsafe {
        comm.collective(
            c.coll,
            src,
            b.recv.ptr() + out_at as u64,
            c.count,
            c.dtype,
            op,
            stream,
        )
    }
    .unwrap_or_else(|e| panic!("rank {rank}: {c:?}: {e}"));
    comm.synchronize(stream)
        .unwrap_or_else(|e| panic!("rank {rank}: {c:?}: {e}"));
    b.recv.copy_to_host(&mut host).unwrap();
    let out = &host[out_at..out_at + out_elems * esize];
    if c.premul.is_some() {
        data.count_wrong_premul_sum(Expect::from(c.coll), rank, c.count, out)
    } else {
        data.count_wrong(Expect::from(c.coll), rank, c.count, out)
    }
}

fn every_collective_on(nranks: usize) {
    every_collective_with(nranks, Settings::default(), Protocol::Simple);
}

/// Every case of [`cases`] under `settings`, each of which must run `protocol`.
fn every_collective_with(nranks: usize, settings: Settings, protocol: Protocol) {
    let name = format!("{protocol:?}");
    check_cases(nranks, settings, Some(protocol), &name, cases(nranks));
}

/// Runs `cases` on `nranks` ranks under `settings`, every element of every call checked.
/// With `protocol`, each call must run it (checked before the call; a ring of one rank
/// copies without a connection, so its protocol is moot).
fn check_cases(
    nranks: usize,
    settings: Settings,
    protocol: Option<Protocol>,
    name: &str,
    cases: Vec<Case>,
) {
    let total = cases.len();
    let started = Instant::now();
    let wrong = run_ranks_with(
        nranks,
        Duration::from_secs(60),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let biggest = cases
                .iter()
                .map(|c| c.count * nranks * c.dtype.size_of_elem())
                .max()
                .unwrap_or(0);
            let buffers = Buffers::new(&comm, biggest);
            prepare(&mut comm);
            let mut failures = Vec::new();
            let mut skipped = 0usize;
            for c in &cases {
                // fp8 reductions where the GPU lacks them: fp8_reductions_are_refused_clearly.
                if c.coll.reduces() && !comm.can_reduce(c.dtype) {
                    skipped += 1;
                    continue;
                }
                if let Some(protocol) = protocol {
                    let runs = comm.protocol_for(c.coll, c.count, c.dtype).unwrap();
                    if nranks > 1 && runs != protocol {
                        failures.push(format!(
                            "rank {rank}: {c:?}: runs {runs:?}, not {protocol:?}"
                        ));
                        continue;
                    }
                }
                let w = run_case(rank, nranks, &mut comm, &stream, &buffers, c);
                if w > 0 {
                    failures.push(format!("rank {rank}: {c:?}: {w} wrong"));
                }
            }
            comm.finalize().unwrap();
            (failures, skipped)
        },
    );
    let skipped = wrong.iter().map(|w| w.1).max().unwrap_or(0);
    let failures: Vec<String> = wrong.into_iter().flat_map(|w| w.0).collect();
    eprintln!(
        "{name} on {nranks} GPU(s): {total} calls per rank ({skipped} fp8 reductions \
         skipped: compute capability below 8.9), {} failed, {:.1} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{name}: {}", failures.join("\n"));
}

/// One call of 256 MiB per rank (the call's largest buffer, an odd element count) for each
/// collective of `colls` and each type, in and out of place by turns; on the reducing
/// collectives the operators take turns over the types, so that every operator runs on
/// every collective at that size (each type with one of them: a full product would spend
/// minutes of checking for nothing the small sizes do not already cover).
fn large_cases(colls: &[Collective], nranks: usize, seed: &mut u64) -> Vec<Case> {
    let mut out = Vec::new();
    for (ci, &coll) in colls.iter().enumerate() {
        for (ti, &dtype) in DataType::ALL.iter().enumerate() {
            let op = if coll.reduces() {
                RedOp::ALL[(ci + ti) % RedOp::ALL.len()]
            } else {
                RedOp::Sum
            };
            // The count per rank whose largest buffer (input or output) is 256 MiB.
            let bytes = match coll {
                Collective::ReduceScatter | Collective::AllGather => (256 << 20) / nranks,
                _ => 256 << 20,
            };
            *seed += 1;
            out.push(Case {
                coll,
                dtype,
                op,
                count: bytes / dtype.size_of_elem() - 3,
                in_place: (ci + ti) % 2 == 1,
                seed: *seed,
                premul: None,
            });
        }
    }
    out
}

/// Every collective the ring runs, the root the last rank.
fn ring_collectives(nranks: usize) -> Vec<Collective> {
    let root = (nranks - 1) as u32;
    vec![
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root },
        Collective::Reduce { root },
    ]
}

/// The ring in SIMPLE at 256 MiB per rank ([`large_cases`]): every collective and type,
/// every operator on each reducing collective.
#[test]
fn every_collective_and_type_at_256_mib_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    let cases = large_cases(&ring_collectives(n), n, &mut 5000);
    check_cases(
        n,
        Settings::SIMPLE,
        Some(Protocol::Simple),
        "ring, 256 MiB",
        cases,
    );
}

/// The same in LL (`NCCL_PROTO=LL`), which NCCL's tuner would never pick at this size but
/// `NCCL_PROTO` can force: its flags wrap many times within one call.
#[test]
fn every_collective_and_type_at_256_mib_in_ll_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    let cases = large_cases(&ring_collectives(n), n, &mut 6000);
    check_cases(
        n,
        Settings::LL,
        Some(Protocol::Ll),
        "ring LL, 256 MiB",
        cases,
    );
}

#[test]
fn every_collective_type_and_op_on_one_gpu() {
    if gpus().is_none() {
        return;
    }
    every_collective_on(1);
}

/// The rank count of the multi-rank tests: every GPU, or with WEFT_TEST_SHARE_GPU=1 on a
/// one-GPU machine, WEFT_TEST_RANKS ranks (default 2) sharing it.
fn multi_ranks() -> Option<usize> {
    let n = gpus()?;
    let shared = std::env::var("WEFT_TEST_SHARE_GPU").is_ok_and(|v| v == "1");
    let ranks = if shared {
        std::env::var("WEFT_TEST_RANKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2)
    } else {
        n
    };
    if ranks < 2 {
        eprintln!("skipped: one GPU only (WEFT_TEST_SHARE_GPU=1 runs several ranks on it)");
        return None;
    }
    Some(ranks)
}

#[test]
fn every_collective_type_and_op_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    every_collective_on(n);
}

/// Read mode forced (`NCCL_P2P_READ_ENABLE=1`, NCCL's default on Ampere NVLink only): every
/// collective, type and op in SIMPLE with the FIFOs in the senders' memory, the same cases,
/// every element checked.
#[test]
fn every_collective_type_and_op_in_read_mode_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    every_collective_with(n, Settings::READ, Protocol::Simple);
}

/// Sends and receives in read mode (SIMPLE, the FIFOs in the senders' memory).
#[test]
fn send_recv_groups_in_read_mode_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    send_recv_groups_with(n, Settings::READ, Protocol::Simple);
}

/// LL forced (`NCCL_PROTO=LL`): every collective, type and op, in and out of place, the
/// same cases as SIMPLE's, every element checked.
#[test]
fn every_collective_type_and_op_in_ll_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    every_collective_with(n, Settings::LL, Protocol::Ll);
}

/// LL and SIMPLE calls back to back on one stream, no synchronisation between them: both
/// protocols advance the same step counter and head of each connection, so a SIMPLE call
/// after LL ones (and the reverse) must find its slots and credits where the other left
/// them. `NCCL_PROTO=LL,Simple` lets the model choose: LL for the small calls, SIMPLE for
/// the large ones (checked). Then the same in a CUDA graph replayed three times.
#[test]
fn ll_and_simple_calls_interleave_on_one_stream() {
    let Some(n) = multi_ranks() else { return };
    let settings = Settings {
        proto: Some("LL,Simple"),
        p2p_ll_threshold: None,
        ..Settings::SIMPLE
    };
    let dtype = DataType::Float32;
    let esize = dtype.size_of_elem();
    // Small and large alternating, odd counts; more LL calls than FIFO slots in a row.
    let counts = [
        7usize, 1000, 4_000_003, 3, 65_539, 5, 9, 11, 13, 15, 17, 19, 21, 8_000_001, 1,
    ];
    let biggest = counts.iter().max().copied().unwrap_or(0);
    let wrong = run_ranks_with(
        n,
        Duration::from_secs(60),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let ctx = comm.context().clone();
            let send = DeviceBuffer::alloc(&ctx, biggest * esize).unwrap();
            let outs: Vec<DeviceBuffer> = counts
                .iter()
                .map(|c| DeviceBuffer::alloc(&ctx, c * esize).unwrap())
                .collect();
            prepare(&mut comm);
            let protocols: Vec<Protocol> = counts
                .iter()
                .map(|&c| comm.protocol_for(Collective::AllReduce, c, dtype).unwrap())
                .collect();
            let mut failures = Vec::new();
            if !(protocols.contains(&Protocol::Ll) && protocols.contains(&Protocol::Simple)) {
                failures.push(format!(
                    "rank {rank}: the model chose {protocols:?}, not both"
                ));
            }
            let data = TestData {
                dtype,
                op: RedOp::Sum,
                seed: 300,
                nranks: n,
            };
            let mut input = vec![0u8; biggest * esize];
            data.fill(rank, 0, &mut input);
            send.copy_from_host(&input).unwrap();
            let run_all = |what: &str, comm: &mut GpuComm, failures: &mut Vec<String>| {
                for (c, out) in counts.iter().zip(&outs) {
                    out.copy_from_host(&vec![0xa5u8; c * esize]).unwrap();
                }
                comm.barrier().unwrap();
                let graph = what == "graph";
                if graph {
                    weft_cuda::Graph::begin_capture(&stream).unwrap();
                }
                for (&c, out) in counts.iter().zip(&outs) {
                    // SAFETY: the buffers outlive the synchronize below.
                    unsafe {
                        comm.collective(
                            Collective::AllReduce,
                            send.ptr(),
                            out.ptr(),
                            c,
                            dtype,
                            RedOp::Sum,
                            &stream,
                        )
                    }
                    .unwrap_or_else(|e| panic!("rank {rank}: {c} elements: {e}"));
                }
                if graph {
                    let g = weft_cuda::Graph::end_capture(&stream).unwrap();
                    for replay in 0..3 {
                        for (c, out) in counts.iter().zip(&outs) {
                            out.copy_from_host(&vec![0xa5u8; c * esize]).unwrap();
                        }
                        comm.barrier().unwrap();
                        g.launch(&stream).unwrap();
                        comm.synchronize(&stream).unwrap();
                        check_all(
                            rank,
                            &format!("graph replay {replay}"),
                            &counts,
                            &outs,
                            &data,
                            failures,
                        );
                        comm.barrier().unwrap();
                    }
                } else {
                    comm.synchronize(&stream).unwrap();
                    check_all(rank, what, &counts, &outs, &data, failures);
                }
            };
            run_all("back to back", &mut comm, &mut failures);
            run_all("graph", &mut comm, &mut failures);
            comm.finalize().unwrap();
            failures
        },
    );
    let failures: Vec<String> = wrong.into_iter().flatten().collect();
    eprintln!(
        "{n} GPU(s): LL and SIMPLE interleaved, back to back and in graph replays, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Calls of one communicator on two streams run in call order, as NCCL's do (PyTorch runs
/// a synchronous collective on the current stream and an asynchronous one on its NCCL
/// stream; DDP's join mode mixes both). Every rank issues a float SUM on stream 1, then an
/// int64 MAX on stream 2; rank 0's stream 1 is first kept busy with copies, so that its MAX
/// would run first, against the other ranks' SUM, if nothing ordered the two. One-shot,
/// ring SIMPLE and ring LL; every element of both results checked, ten rounds each.
#[test]
fn calls_on_two_streams_run_in_call_order() {
    let Some(n) = multi_ranks() else { return };
    let cases = [
        ("one-shot", Settings::algo(GpuAlgo::OneShot)),
        ("ring SIMPLE", Settings::SIMPLE),
        ("ring LL", Settings::LL),
    ];
    let mut failures = Vec::new();
    for (name, settings) in cases {
        let wrong = run_ranks_with(
            n,
            Duration::from_secs(60),
            settings,
            move |rank, mut comm| {
                let ctx = comm.context().clone();
                let (s1, s2) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
                prepare(&mut comm);
                let sum = TestData {
                    dtype: DataType::Float32,
                    op: RedOp::Sum,
                    seed: 400,
                    nranks: n,
                };
                let max = TestData {
                    dtype: DataType::Int64,
                    op: RedOp::Max,
                    seed: 401,
                    nranks: n,
                };
                let calls = [(sum, 1000usize, &s1), (max, 7usize, &s2)];
                let bufs: Vec<(DeviceBuffer, DeviceBuffer)> = calls
                    .iter()
                    .map(|(d, c, _)| {
                        let bytes = c * d.dtype.size_of_elem();
                        let mut input = vec![0u8; bytes];
                        d.fill(rank, 0, &mut input);
                        let send = DeviceBuffer::alloc(&ctx, bytes).unwrap();
                        send.copy_from_host(&input).unwrap();
                        (send, DeviceBuffer::alloc(&ctx, bytes).unwrap())
                    })
                    .collect();
                // Rank 0's stream 1 copies 2 GiB first (milliseconds on an H100).
                const BUSY: usize = 256 << 20;
                let busy = (rank == 0).then(|| {
                    (
                        DeviceBuffer::alloc(&ctx, BUSY).unwrap(),
                        DeviceBuffer::alloc(&ctx, BUSY).unwrap(),
                    )
                });
                let mut failures = Vec::new();
                for round in 0..10 {
                    for ((d, c, _), (_, out)) in calls.iter().zip(&bufs) {
                        out.copy_from_host(&vec![0xa5u8; c * d.dtype.size_of_elem()])
                            .unwrap();
                    }
                    comm.barrier().unwrap();
                    if let Some((a, b)) = &busy {
                        for _ in 0..8 {
                            // SAFETY: both buffers hold BUSY bytes and outlive the sync below.
                            unsafe { weft_cuda::copy_async(b.ptr(), a.ptr(), BUSY, &s1) }.unwrap();
                        }
                    }
                    for ((d, c, stream), (send, out)) in calls.iter().zip(&bufs) {
                        // SAFETY: the buffers outlive the synchronize below.
                        unsafe {
                            comm.collective(
                                Collective::AllReduce,
                                send.ptr(),
                                out.ptr(),
                                *c,
                                d.dtype,
                                d.op,
                                stream,
                            )
                        }
                        .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    }
                    let synced = comm.synchronize(&s1).and_then(|()| comm.synchronize(&s2));
                    if let Err(e) = synced {
                        failures.push(format!("rank {rank}: round {round}: {e}"));
                        break;
                    }
                    for ((d, c, _), (_, out)) in calls.iter().zip(&bufs) {
                        let mut host = vec![0u8; c * d.dtype.size_of_elem()];
                        out.copy_to_host(&mut host).unwrap();
                        let w = d.count_wrong(Expect::from(Collective::AllReduce), rank, *c, &host);
                        if w > 0 {
                            failures.push(format!(
                                "rank {rank}: round {round}: {:?} {:?} of {c}: {w} wrong",
                                d.dtype, d.op
                            ));
                        }
                    }
                }
                if failures.is_empty() {
                    comm.finalize().unwrap();
                }
                failures
            },
        );
        failures.extend(wrong.into_iter().flatten().map(|f| format!("{name}: {f}")));
    }
    eprintln!(
        "{n} GPU(s): calls on two streams, one-shot and ring: {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// LL across the 32-bit flag's wrap and NCCL's cleaning steps (`(s & 0x7ffffff8) ==
/// 0x7ffffff8`: the 8 steps before 2^31 and before 2^32), reached by restarting every
/// connection just before them (`restart_steps_for_test`): small all-reduces in LL, a
/// large one in SIMPLE now and then, and LL send/recv rounds, every result checked, until
/// every connection of channel 0 is past the wrap.
#[test]
fn ll_crosses_the_flag_wrap_and_its_cleaning_steps() {
    let Some(n) = multi_ranks() else { return };
    let settings = Settings {
        proto: Some("LL,Simple"),
        p2p_ll_threshold: Some(usize::MAX),
        ..Settings::SIMPLE
    };
    let dtype = DataType::Float32;
    let esize = dtype.size_of_elem();
    // 16 MB: SIMPLE by the model on 2 to 8 GPUs (its LL/SIMPLE crossover is below 5 MB there).
    let large = 4_000_003usize;
    for start in [0x7fff_ffe0u64, 0xffff_ffe0] {
        let wrong = run_ranks_with(
            n,
            Duration::from_secs(60),
            settings,
            move |rank, mut comm| {
                let stream = Stream::new(comm.context()).unwrap();
                let ctx = comm.context().clone();
                let send = DeviceBuffer::alloc(&ctx, large * esize).unwrap();
                let recv = DeviceBuffer::alloc(&ctx, large * esize).unwrap();
                prepare(&mut comm);
                comm.restart_steps_for_test(start).unwrap();
                let mut failures = Vec::new();
                let mut seen = Vec::new();
                for call in 0..160u64 {
                    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
                    let data = TestData {
                        dtype,
                        op: RedOp::Sum,
                        seed: 500 + call,
                        nranks: n,
                    };
                    let count = if call % 40 == 39 {
                        large
                    } else {
                        1 + (call as usize * 37) % 3000
                    };
                    let mut input = vec![0u8; count * esize];
                    data.fill(rank, 0, &mut input);
                    send.copy_from_host(&input).unwrap();
                    recv.copy_from_host(&vec![0xa5u8; count * esize]).unwrap();
                    if call % 7 == 3 {
                        let bytes = count * esize;
                        seen.push(comm.p2p_protocol_for(bytes));
                        let ops = [
                            GpuP2p::Send {
                                peer: next,
                                buf: send.ptr(),
                                bytes,
                            },
                            GpuP2p::Recv {
                                peer: prev,
                                buf: recv.ptr(),
                                bytes,
                            },
                        ];
                        // SAFETY: both buffers hold `bytes` and outlive the synchronize.
                        unsafe { comm.group(&ops, &stream) }.unwrap();
                    } else {
                        seen.push(
                            comm.protocol_for(Collective::AllReduce, count, dtype)
                                .unwrap(),
                        );
                        // SAFETY: the buffers outlive the synchronize.
                        unsafe {
                            comm.collective(
                                Collective::AllReduce,
                                send.ptr(),
                                recv.ptr(),
                                count,
                                dtype,
                                RedOp::Sum,
                                &stream,
                            )
                        }
                        .unwrap();
                    }
                    comm.synchronize(&stream).unwrap_or_else(|e| {
                        panic!("rank {rank}: start {start:#x}, call {call}: {e}")
                    });
                    let mut out = vec![0u8; count * esize];
                    recv.copy_to_host(&mut out).unwrap();
                    let expect = if call % 7 == 3 {
                        Expect::Recv { from: prev }
                    } else {
                        Expect::from(Collective::AllReduce)
                    };
                    let w = data.count_wrong(expect, rank, count, &out);
                    if w > 0 {
                        failures.push(format!(
                            "rank {rank}: start {start:#x}, call {call}: {w} wrong"
                        ));
                    }
                }
                if !(seen.contains(&Protocol::Ll) && seen.contains(&Protocol::Simple)) {
                    failures.push(format!("rank {rank}: protocols run: {seen:?}"));
                }
                comm.finalize().unwrap();
                failures
            },
        );
        let failures: Vec<String> = wrong.into_iter().flatten().collect();
        eprintln!(
            "{n} GPU(s): LL from step {start:#x} across the cleaning steps and the wrap, {} failed",
            failures.len()
        );
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// Checks each all-reduce output of [`ll_and_simple_calls_interleave_on_one_stream`].
fn check_all(
    rank: usize,
    what: &str,
    counts: &[usize],
    outs: &[DeviceBuffer],
    data: &TestData,
    failures: &mut Vec<String>,
) {
    let esize = data.dtype.size_of_elem();
    for (&c, out) in counts.iter().zip(outs) {
        let mut host = vec![0u8; c * esize];
        out.copy_to_host(&mut host).unwrap();
        let w = data.count_wrong(Expect::from(Collective::AllReduce), rank, c, &host);
        if w > 0 {
            failures.push(format!("rank {rank}: {what}: all-reduce of {c}: {w} wrong"));
        }
    }
}

/// Direct writes (ranks of one process) when collectives follow each other on the stream
/// with no synchronisation between them, each into another buffer, and when a captured CUDA
/// graph replays one over new data: a sender must always store into the buffer of the
/// receiver's current call. Every element of every output is checked.
#[test]
fn direct_writes_back_to_back_and_in_graph_replays() {
    let Some(n) = multi_ranks() else { return };
    // All-reduces write directly from DIRECT_ALL_REDUCE_MIN_BYTES (32 MiB) on.
    let count = 9 * 1024 * 1024 + 5;
    assert!(count * 4 >= weft_runtime::gpu::DIRECT_ALL_REDUCE_MIN_BYTES);
    let dtype = DataType::Float32;
    let esize = dtype.size_of_elem();
    let calls = [
        (Collective::AllReduce, RedOp::Sum),
        (Collective::AllGather, RedOp::Sum),
        (Collective::Broadcast { root: 1 }, RedOp::Sum),
        (Collective::AllReduce, RedOp::Max),
    ];
    let wrong = run_ranks(n, Duration::from_secs(60), move |rank, mut comm| {
        let stream = Stream::new(comm.context()).unwrap();
        let ctx = comm.context().clone();
        let send = DeviceBuffer::alloc(&ctx, count * esize).unwrap();
        let outs: Vec<DeviceBuffer> = calls
            .iter()
            .map(|_| DeviceBuffer::alloc(&ctx, count * n * esize).unwrap())
            .collect();
        prepare(&mut comm);
        let mut failures = Vec::new();
        let mut check = |what: &str, out: &DeviceBuffer, coll: Collective, data: &TestData| {
            let out_elems = if coll == Collective::AllGather {
                count * n
            } else {
                count
            };
            let mut host = vec![0u8; out_elems * esize];
            out.copy_to_host(&mut host).unwrap();
            let w = data.count_wrong(Expect::from(coll), rank, count, &host);
            if w > 0 {
                failures.push(format!("rank {rank}: {what}: {w} wrong"));
            }
        };
        // 1. Four calls back to back from one input, one synchronize.
        let shared = TestData {
            dtype,
            op: RedOp::Sum,
            seed: 100,
            nranks: n,
        };
        let mut input = vec![0u8; count * esize];
        shared.fill(rank, 0, &mut input);
        send.copy_from_host(&input).unwrap();
        for out in &outs {
            out.copy_from_host(&vec![0xa5u8; count * n * esize])
                .unwrap();
        }
        for (&(coll, op), out) in calls.iter().zip(&outs) {
            // SAFETY: the buffers outlive the synchronize below.
            unsafe { comm.collective(coll, send.ptr(), out.ptr(), count, dtype, op, &stream) }
                .unwrap_or_else(|e| panic!("rank {rank}: {coll:?}: {e}"));
        }
        comm.synchronize(&stream).unwrap();
        for (&(coll, op), out) in calls.iter().zip(&outs) {
            check(
                &format!("back to back {coll:?} {op:?}"),
                out,
                coll,
                &TestData { op, ..shared },
            );
        }
        // 2. One all-reduce captured in a graph, replayed over three inputs.
        weft_cuda::Graph::begin_capture(&stream).unwrap();
        // SAFETY: as above; the graph runs only before the synchronizes below.
        let captured = unsafe {
            comm.collective(
                Collective::AllReduce,
                send.ptr(),
                outs[0].ptr(),
                count,
                dtype,
                RedOp::Sum,
                &stream,
            )
        };
        let graph = weft_cuda::Graph::end_capture(&stream).unwrap();
        captured.unwrap();
        for replay in 0..3u64 {
            let d = TestData {
                seed: 200 + replay,
                ..shared
            };
            d.fill(rank, 0, &mut input);
            send.copy_from_host(&input).unwrap();
            outs[0]
                .copy_from_host(&vec![0xa5u8; count * esize])
                .unwrap();
            // Every rank's input is in place before any rank's replay reads it.
            comm.barrier().unwrap();
            graph.launch(&stream).unwrap();
            comm.synchronize(&stream).unwrap();
            check(
                &format!("graph replay {replay}"),
                &outs[0],
                Collective::AllReduce,
                &d,
            );
            comm.barrier().unwrap();
        }
        comm.finalize().unwrap();
        failures
    });
    let failures: Vec<String> = wrong.into_iter().flatten().collect();
    eprintln!(
        "{n} GPU(s): direct writes back to back and in graph replays, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The ranks on two hosts (each GPU a host on two GPUs; two GPUs per host on four): every
/// collective through NET connections between the hosts (and P2P within one), a few types
/// with every operator on one, sizes across a FIFO step and far past a ring of them, in and
/// out of place, every element checked.
#[test]
fn every_collective_across_two_hosts() {
    let Some(n) = multi_ranks() else { return };
    let mut out = Vec::new();
    let mut seed = 9000u64;
    let root = (n - 1) as u32;
    for (dtype, ops) in [
        (DataType::Float32, RedOp::ALL),
        (DataType::Bfloat16, &[RedOp::Sum][..]),
        (DataType::Int64, &[RedOp::Max][..]),
        (DataType::Uint8, &[RedOp::Sum][..]),
    ] {
        for count in [1usize, 1000, 65_536 + 3, 1_234_567, 9_000_001] {
            for in_place in [false, true] {
                let mut push = |coll, op| {
                    seed += 1;
                    out.push(Case {
                        coll,
                        dtype,
                        op,
                        count,
                        in_place,
                        seed,
                        premul: None,
                    });
                };
                for &op in ops {
                    push(Collective::AllReduce, op);
                    push(Collective::ReduceScatter, op);
                    push(Collective::Reduce { root }, op);
                }
                push(Collective::AllGather, RedOp::Sum);
                push(Collective::Broadcast { root }, RedOp::Sum);
            }
        }
    }
    check_cases(
        n,
        Settings::TWO_HOSTS,
        Some(Protocol::Simple),
        "two hosts",
        out,
    );
}

/// The gathered all-reduce across hosts (each rank's input to every other by a send/recv
/// group, every rank reducing them all in rank order), forced with `WEFT_ALGO=oneshot` up
/// to its 256 KiB per rank (it is never chosen unasked): every type and operator, in and
/// out of place, counts from one element to the buffer's slot. Every element checked; the
/// rank-order reduction gives every rank the same bits, as the one-shot's.
#[test]
fn gathered_all_reduces_across_two_hosts() {
    let Some(n) = multi_ranks() else { return };
    let mut out = Vec::new();
    let mut seed = 9500u64;
    for &dtype in DataType::ALL {
        for &op in RedOp::ALL {
            let max = (256 << 10) / dtype.size_of_elem();
            for count in [1usize, 7, 1000, 16_384 + 5, max] {
                for in_place in [false, true] {
                    seed += 1;
                    out.push(Case {
                        coll: Collective::AllReduce,
                        dtype,
                        op,
                        count,
                        in_place,
                        seed,
                        premul: None,
                    });
                }
            }
        }
    }
    check_cases(
        n,
        Settings {
            algo: Some(GpuAlgo::OneShot),
            ..Settings::TWO_HOSTS
        },
        Some(Protocol::Simple),
        "gathered across two hosts",
        out,
    );
}

/// Sends and receives between ranks of two hosts.
#[test]
fn send_recv_groups_across_two_hosts() {
    let Some(n) = multi_ranks() else { return };
    send_recv_groups_with(n, Settings::TWO_HOSTS, Protocol::Simple);
    many_messages_per_peer_with(n, Settings::TWO_HOSTS);
}

#[test]
fn send_recv_groups_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    send_recv_groups_with(n, Settings::default(), Protocol::Simple);
}

/// LL forced for every message (`NCCL_P2P_LL_THRESHOLD` past the largest).
#[test]
fn send_recv_groups_in_ll_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    send_recv_groups_with(n, Settings::LL, Protocol::Ll);
}

/// A ring of sends and receives of odd sizes under `settings`, each message running
/// `protocol` (checked before the call), every byte checked.
fn send_recv_groups_with(n: usize, settings: Settings, protocol: Protocol) {
    let counts = [1usize, 4097, 3 << 20, 40_000_001];
    let wrong = run_ranks_with(
        n,
        Duration::from_secs(60),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            // Allocated once and every kernel loaded before any rank launches one: a module
            // load or a free waits for the whole device, which would stall ranks sharing it.
            let b = Buffers::new(&comm, counts[3]);
            prepare(&mut comm);
            let (send, recv) = (&b.send, &b.recv);
            let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
            let mut wrong = 0usize;
            for (k, &bytes) in counts.iter().enumerate() {
                assert_eq!(comm.p2p_protocol_for(bytes), protocol, "{bytes} bytes");
                let data = TestData {
                    dtype: DataType::Uint8,
                    op: RedOp::Sum,
                    seed: 77 + k as u64,
                    nranks: n,
                };
                let mut input = vec![0u8; bytes];
                data.fill(rank, 0, &mut input);
                send.copy_from_host(&input).unwrap();
                // Poisoned the way the collectives' outputs are (a copy, not a device memset).
                recv.copy_from_host(&vec![0xa5u8; bytes]).unwrap();
                let ops = [
                    GpuP2p::Send {
                        peer: next,
                        buf: send.ptr(),
                        bytes,
                    },
                    GpuP2p::Recv {
                        peer: prev,
                        buf: recv.ptr(),
                        bytes,
                    },
                ];
                // SAFETY: both buffers hold `bytes` and outlive the synchronize.
                unsafe { comm.group(&ops, &stream) }.unwrap();
                comm.synchronize(&stream)
                    .unwrap_or_else(|e| panic!("rank {rank}: send/recv of {bytes} bytes: {e}"));
                let mut out = vec![0u8; bytes];
                recv.copy_to_host(&mut out).unwrap();
                wrong += data.count_wrong(Expect::Recv { from: prev }, rank, bytes, &out);
            }
            comm.finalize().unwrap();
            wrong
        },
    );
    assert_eq!(wrong, vec![0; n], "wrong bytes per rank");
}

/// Several messages per peer and direction in one group (PyTorch's `batch_isend_irecv`
/// with many tensors): each rank sends every other rank a few messages of mixed sizes, 20
/// to the next rank (more than one launch holds), two to itself, its calls in an order of
/// its own (per peer and direction in order, as NCCL matches them); every byte checked.
#[test]
fn many_messages_per_peer_in_one_group_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    many_messages_per_peer_with(n, Settings::default());
}

/// The same with LL forced for every message.
#[test]
fn many_messages_per_peer_in_ll_on_every_gpu() {
    let Some(n) = multi_ranks() else { return };
    many_messages_per_peer_with(n, Settings::LL);
}

/// The messages `from` sends `to` in a group of [`many_messages_per_peer_with`]: their sizes.
fn messages(from: usize, to: usize, n: usize) -> Vec<usize> {
    const SIZES: [usize; 8] = [1, 4097, 100_003, (3 << 20) + 1, 0, 64, 1 << 19, 40_000];
    let count = if from == to {
        2
    } else if to == (from + 1) % n {
        20
    } else {
        3
    };
    (0..count)
        .map(|i| SIZES[(i + 7 * from + 3 * to) % SIZES.len()])
        .collect()
}

/// 256-byte aligned offsets of `sizes` laid end to end, and the total.
fn offsets(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0;
    let offs = sizes
        .iter()
        .map(|&b| {
            let o = at;
            at += b.div_ceil(256) * 256;
            o
        })
        .collect();
    (offs, at.max(256))
}

fn many_messages_per_peer_with(n: usize, settings: Settings) {
    let wrong = run_ranks_with(
        n,
        Duration::from_secs(60),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let seed =
                |from: usize, to: usize, i: usize| 1000 + (from * 64 + to) as u64 * 64 + i as u64;
            let data = |seed| TestData {
                dtype: DataType::Uint8,
                op: RedOp::Sum,
                seed,
                nranks: n,
            };
            // Every message this rank sends, then every one it receives, each in its own
            // place of one buffer: (peer, index, size, offset).
            let mut sends = Vec::new();
            let mut recvs = Vec::new();
            for p in 0..n {
                for (i, b) in messages(rank, p, n).into_iter().enumerate() {
                    sends.push((p, i, b));
                }
                for (i, b) in messages(p, rank, n).into_iter().enumerate() {
                    recvs.push((p, i, b));
                }
            }
            let (send_at, send_total) = offsets(&sends.iter().map(|m| m.2).collect::<Vec<_>>());
            let (recv_at, recv_total) = offsets(&recvs.iter().map(|m| m.2).collect::<Vec<_>>());
            let send_buf = DeviceBuffer::alloc(comm.context(), send_total).unwrap();
            let recv_buf = DeviceBuffer::alloc(comm.context(), recv_total).unwrap();
            prepare(&mut comm);
            let mut host = vec![0u8; send_total];
            for (&(p, i, b), &at) in sends.iter().zip(&send_at) {
                data(seed(rank, p, i)).fill(rank, 0, &mut host[at..at + b]);
            }
            send_buf.copy_from_host(&host).unwrap();
            recv_buf.copy_from_host(&vec![0xa5u8; recv_total]).unwrap();
            // One queue per peer and direction, in message order.
            let queue =
                |msgs: &[(usize, usize, usize)], at: &[usize], base: u64, p: usize, send: bool| {
                    msgs.iter()
                        .zip(at)
                        .filter(|(m, _)| m.0 == p)
                        .map(|(&(peer, _, bytes), &o)| {
                            let buf = base + o as u64;
                            if send {
                                GpuP2p::Send { peer, buf, bytes }
                            } else {
                                GpuP2p::Recv { peer, buf, bytes }
                            }
                        })
                        .collect::<Vec<GpuP2p>>()
                };
            let mut queues: Vec<Vec<GpuP2p>> = Vec::new();
            for p in 0..n {
                queues.push(queue(&sends, &send_at, send_buf.ptr(), p, true));
                queues.push(queue(&recvs, &recv_at, recv_buf.ptr(), p, false));
            }
            // This rank's call order: a queue that still holds calls, picked by a generator
            // seeded per rank (each queue's calls stay in order).
            let mut ops = Vec::new();
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ rank as u64;
            while queues.iter().any(|q| !q.is_empty()) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let live: Vec<usize> = (0..queues.len())
                    .filter(|&q| !queues[q].is_empty())
                    .collect();
                let q = live[(x % live.len() as u64) as usize];
                ops.push(queues[q].remove(0));
            }
            // SAFETY: every message lies inside its buffer, which outlives the synchronize.
            unsafe { comm.group(&ops, &stream) }.unwrap();
            comm.synchronize(&stream)
                .unwrap_or_else(|e| panic!("rank {rank}: {} messages: {e}", ops.len()));
            let mut out = vec![0u8; recv_total];
            recv_buf.copy_to_host(&mut out).unwrap();
            let mut wrong = 0usize;
            for (&(p, i, b), &at) in recvs.iter().zip(&recv_at) {
                let bad = data(seed(p, rank, i)).count_wrong(
                    Expect::Recv { from: p },
                    rank,
                    b,
                    &out[at..at + b],
                );
                if bad > 0 {
                    eprintln!("rank {rank}: message {i} of {b} bytes from rank {p}: {bad} wrong");
                }
                wrong += bad;
            }
            comm.finalize().unwrap();
            wrong
        },
    );
    assert_eq!(wrong, vec![0; n], "wrong bytes per rank");
}

/// The GPU's fp8 arithmetic (hardware conversions, saturation, infinities, NaNs, signed
/// zeros) against the CPU executor's, bit for bit, on every operand pair: rank 0 holds
/// every code 256 times, rank 1 each code 256 times in a row, and an all-reduce combines
/// them with each op. The verify data of the other tests are finite and exact; these are not.
#[test]
fn fp8_every_operand_pair_matches_the_cpu() {
    if multi_ranks().is_none() {
        return;
    }
    let results = run_ranks(2, Duration::from_secs(60), |rank, mut comm| {
        let n = 1usize << 16;
        let mine: Vec<u8> = (0..n)
            .map(|i| if rank == 0 { i as u8 } else { (i >> 8) as u8 })
            .collect();
        let stream = Stream::new(comm.context()).unwrap();
        let b = Buffers::new(&comm, n);
        prepare(&mut comm);
        let mut outs = Vec::new();
        for dtype in [DataType::Float8E4M3, DataType::Float8E5M2] {
            if !comm.can_reduce(dtype) {
                continue;
            }
            for &op in RedOp::ALL {
                b.send.copy_from_host(&mine).unwrap();
                b.recv.copy_from_host(&vec![0xa5u8; n]).unwrap();
                // SAFETY: both buffers hold n one-byte elements and outlive the synchronize.
                unsafe {
                    comm.collective(
                        Collective::AllReduce,
                        b.send.ptr(),
                        b.recv.ptr(),
                        n,
                        dtype,
                        op,
                        &stream,
                    )
                }
                .unwrap();
                comm.synchronize(&stream).unwrap();
                let mut out = vec![0u8; n];
                b.recv.copy_to_host(&mut out).unwrap();
                outs.push((dtype, op, out));
            }
        }
        comm.finalize().unwrap();
        outs
    });
    if results[0].is_empty() {
        eprintln!("skipped: this GPU does not reduce fp8 (compute capability below 8.9)");
        return;
    }
    let a: Vec<u8> = (0..1usize << 16).map(|i| i as u8).collect();
    let b: Vec<u8> = (0..1usize << 16).map(|i| (i >> 8) as u8).collect();
    let mut wrong = Vec::new();
    for (dtype, op, out) in &results[0] {
        let is_nan = |x: u8| match dtype {
            DataType::Float8E4M3 => F8E4M3(x).is_nan(),
            _ => F8E5M2(x).is_nan(),
        };
        // The CPU in NCCL's order for two ranks: pre(b) + pre(a) (every op commutes).
        let reduction = Reduction::new(*dtype, *op, 2).unwrap();
        let mut want = vec![0u8; a.len()];
        reduction.copy_input(&mut want, &a).unwrap();
        reduction.reduce_input_in_place(&mut want, &b).unwrap();
        reduction.finish(&mut want).unwrap();
        let bad: Vec<usize> = (0..a.len())
            .filter(|&i| out[i] != want[i] && !(is_nan(out[i]) && is_nan(want[i])))
            .collect();
        if let Some(&i) = bad.first() {
            wrong.push(format!(
                "{dtype} {op}: {} of 65536 pairs differ, first {:#04x} {op} {:#04x}: GPU {:#04x}, \
                 CPU {:#04x}",
                bad.len(),
                a[i],
                b[i],
                out[i],
                want[i]
            ));
        }
        // Both ranks hold the same result.
        assert_eq!(
            &results[1]
                .iter()
                .find(|r| r.0 == *dtype && r.1 == *op)
                .unwrap()
                .2,
            out
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Below compute capability 8.9, an fp8 reduction is an error that names the GPU and its
/// architecture (copies of fp8 run there, in every_collective_type_and_op_on_one_gpu).
#[test]
fn fp8_reductions_are_refused_clearly() {
    if gpus().is_none() {
        return;
    }
    let results = run_ranks(1, Duration::from_secs(30), |_, mut comm| {
        let (major, minor) = comm.context().device().compute_capability().unwrap();
        let stream = Stream::new(comm.context()).unwrap();
        let buf = DeviceBuffer::alloc(comm.context(), 1024).unwrap();
        let mut errors = Vec::new();
        for dtype in [DataType::Float8E4M3, DataType::Float8E5M2] {
            assert_eq!(comm.can_reduce(dtype), (major, minor) >= (8, 9));
            if comm.can_reduce(dtype) {
                continue;
            }
            // SAFETY: the buffer holds the 1024 one-byte elements and outlives the call.
            let r = unsafe {
                comm.collective(
                    Collective::AllReduce,
                    buf.ptr(),
                    buf.ptr(),
                    1024,
                    dtype,
                    RedOp::Sum,
                    &stream,
                )
            };
            errors.push(r.expect_err("an fp8 reduction below sm_89").to_string());
        }
        comm.finalize().unwrap();
        ((major, minor), errors)
    });
    let ((major, minor), errors) = &results[0];
    if errors.is_empty() {
        eprintln!("sm_{major}{minor} reduces fp8: every_collective_type_and_op_* check it");
    }
    for text in errors {
        assert!(
            text.contains("need compute capability 8.9 or newer")
                && text.contains(&format!("this is GPU 0, sm_{major}{minor}")),
            "{text}"
        );
    }
}

#[test]
fn a_rank_that_skips_a_call_is_named_within_the_timeout() {
    if multi_ranks().is_none() {
        return;
    }
    a_skipped_call_is_named(Settings::default());
}

/// The same with LL: every thread of rank 0's blocks polls its own lines, and the first to
/// give up names the peer.
#[test]
fn a_rank_that_skips_an_ll_call_is_named_within_the_timeout() {
    if multi_ranks().is_none() {
        return;
    }
    a_skipped_call_is_named(Settings::LL);
}

/// Across hosts (NET between them): rank 0's all-reduce gives up on rank 1, named.
#[test]
fn a_rank_that_skips_a_call_across_hosts_is_named() {
    if multi_ranks().is_none() {
        return;
    }
    a_skipped_call_is_named(Settings::TWO_HOSTS);
}

/// What every rank of a skipped-call test does before rank 0 enters the call: a stream, a
/// buffer of `bytes` filled with ones, the float kernels loaded, and a barrier (so that the
/// deadline measures the wait on the rank that sits out, not a compilation).
fn ready_for_a_skipped_call(comm: &mut GpuComm, bytes: usize) -> (Stream, DeviceBuffer) {
    let stream = Stream::new(comm.context()).unwrap();
    let buf = DeviceBuffer::alloc(comm.context(), bytes).unwrap();
    buf.fill(1).unwrap();
    comm.prepare(&[DataType::Float32]).unwrap();
    comm.barrier().unwrap();
    (stream, buf)
}

/// NCCL's contract for a failed call, which PyTorch relies on: it never looks complete
/// before the program has heard of the failure. Rank 0 enters an all-reduce that rank 1
/// sits out; past rank 0's deadline its kernel has given up but still holds the stream
/// (the call's end has not come, so nothing reads its output as good), `check` names rank
/// 1 without releasing it, and the synchronize that reports the failure lets the stream
/// end.
#[test]
fn a_call_that_gave_up_does_not_complete_until_reported() {
    if multi_ranks().is_none() {
        return;
    }
    let gate = Arc::new(Barrier::new(2));
    let results = run_ranks_with(
        2,
        Duration::from_secs(2),
        Settings::default(),
        move |rank, mut comm| {
            let (stream, buf) = ready_for_a_skipped_call(&mut comm, 1 << 20);
            let mut seen = None;
            if rank == 0 {
                // SAFETY: the buffer outlives the synchronize below.
                unsafe {
                    comm.collective(
                        Collective::AllReduce,
                        buf.ptr(),
                        buf.ptr(),
                        1 << 18,
                        DataType::Float32,
                        RedOp::Sum,
                        &stream,
                    )
                }
                .unwrap();
                // Past the 2 s deadline (WEFT_TIMEOUT may shorten it, never lengthen it).
                std::thread::sleep(Duration::from_millis(3500));
                let held = !stream.is_done().unwrap();
                let named = comm.check().map_err(|e| (e.culprit(), e.to_string()));
                let still_held = !stream.is_done().unwrap();
                let reported = comm.synchronize(&stream).map_err(|e| e.culprit());
                let ended = stream.is_done().unwrap();
                seen = Some((held, named, still_held, reported, ended));
            }
            gate.wait();
            seen
        },
    );
    let (held, named, still_held, reported, ended) = results[0].clone().expect("rank 0 ran");
    let (culprit, text) = named.expect_err("check names the failure");
    assert_eq!(culprit, Some(1), "{text}");
    assert!(
        held && still_held,
        "the call looked complete before it was reported: {text}"
    );
    assert_eq!(reported, Err(Some(1)), "the synchronize reports it");
    assert!(
        ended,
        "the synchronize that reported the failure lets the stream end"
    );
}

/// Raises a communicator's abort flag `after` unless disarmed first: a test whose call might
/// wait after all (the bug it is about) then fails instead of hanging.
struct Rescue {
    done: Arc<std::sync::atomic::AtomicBool>,
    watch: std::thread::JoinHandle<()>,
}

impl Rescue {
    fn arm(handle: weft_runtime::gpu::AbortHandle, after: Duration) -> Rescue {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            let done = done.clone();
            std::thread::spawn(move || {
                let until = Instant::now() + after;
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    if Instant::now() >= until {
                        handle.raise();
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Rescue { done, watch }
    }

    fn disarm(self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
        self.watch.join().unwrap();
    }
}

/// A launch never waits for another kernel of the communicator: rank 0 receives from rank
/// 1, which never sends, then all-reduces a type it has not used yet on another stream.
/// Loading a module waits for the device to be idle, so before the kernels were loaded at
/// init that launch blocked the calling thread (and PyTorch's communicator with it) until
/// the receive's deadline (two H200, 2026-11-28). Rank 0 then aborts its own calls.
#[test]
fn a_launch_never_waits_for_a_receive_in_flight() {
    if multi_ranks().is_none() {
        return;
    }
    let gate = Arc::new(Barrier::new(2));
    let results = run_ranks_with(
        2,
        Duration::from_secs(4),
        Settings::default(),
        move |rank, mut comm| {
            let recv_stream = Stream::new(comm.context()).unwrap();
            let stream = Stream::new(comm.context()).unwrap();
            let buf = DeviceBuffer::alloc(comm.context(), 1 << 20).unwrap();
            buf.fill(1).unwrap();
            comm.barrier().unwrap();
            let mut took = None;
            if rank == 0 {
                let recv = [GpuP2p::Recv {
                    peer: 1,
                    buf: buf.ptr(),
                    bytes: 4096,
                }];
                // SAFETY: the buffer outlives the synchronizes below.
                unsafe { comm.group(&recv, &recv_stream) }.unwrap();
                // Should the launch below block after all (a module loaded there), the
                // receive is aborted after 5 s so that the test fails instead of hanging.
                let rescue = Rescue::arm(comm.abort_handle(), Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(200));
                let t = Instant::now();
                // SAFETY: as above; a type no call of this communicator used before.
                unsafe {
                    comm.collective(
                        Collective::AllReduce,
                        buf.ptr() + 8192,
                        buf.ptr() + 8192,
                        1024,
                        DataType::Float64,
                        RedOp::Sum,
                        &stream,
                    )
                }
                .unwrap();
                took = Some(t.elapsed());
                rescue.disarm();
                comm.abort("the test is done");
                let _ = comm.synchronize(&recv_stream);
                let _ = comm.synchronize(&stream);
            }
            gate.wait();
            took
        },
    );
    let took = results[0].expect("rank 0 ran");
    assert!(
        took < Duration::from_secs(1),
        "the all-reduce's launch took {took:?} while a receive was in flight"
    );
}

/// A communicator initialises while the program's legacy default stream waits on a
/// collective still in flight: PyTorch's barrier leaves its default stream waiting on the
/// all-reduce's end, and a rank that meanwhile initialises another communicator (a
/// non-blocking split in PyTorch's `test_shrink_group_multiple_comms`) must not queue its
/// copies behind that wait: the all-reduce waits for a rank that is itself in that init.
/// On four H200 (2026-11-28) rank 1's init waited there until the all-reduce's deadline.
#[test]
fn an_init_never_waits_behind_the_default_stream() {
    if multi_ranks().is_none() {
        return;
    }
    run_ranks_with(
        2,
        Duration::from_secs(20),
        Settings::default(),
        move |rank, mut comm| {
            let ctx = comm.context().clone();
            let stream = Stream::new(&ctx).unwrap();
            let buf = DeviceBuffer::alloc(&ctx, 1024).unwrap();
            buf.copy_from_host(&[1u8; 1024]).unwrap();
            comm.barrier().unwrap();
            // SAFETY: the legacy default stream of `ctx` (null) lives as long as `ctx`.
            let legacy = unsafe { Stream::from_raw(&ctx, std::ptr::null_mut()) };
            let collective = |comm: &mut GpuComm| {
                // SAFETY: `buf` outlives the synchronize below.
                unsafe {
                    comm.collective(
                        Collective::AllReduce,
                        buf.ptr(),
                        buf.ptr(),
                        256,
                        DataType::Int32,
                        RedOp::Sum,
                        &stream,
                    )
                }
                .unwrap()
            };
            if rank == 1 {
                // The all-reduce waits for rank 0, which joins only after the init below;
                // the default stream waits for its end, as PyTorch's barrier leaves it.
                collective(&mut comm);
                let end = weft_cuda::Event::new(&ctx, false).unwrap();
                end.record(&stream).unwrap();
                legacy.wait_event(&end).unwrap();
            }
            // Should the init wait after all, the all-reduce is aborted after 15 s (its kernel
            // then ends, and the default stream's wait with it): the test fails, not hangs.
            let rescue = Rescue::arm(comm.abort_handle(), Duration::from_secs(15));
            let bopts = BootstrapOptions::loopback(Duration::from_secs(20));
            let t = Instant::now();
            let id = weft_runtime::comm::shrink::agree_on_id(
                rank,
                &[0, 1],
                &bopts,
                |root, ranks, data| comm.broadcast_among(root, ranks, data),
                GpuError::InvalidArgument,
            )
            .unwrap();
            // The first communicator's settings (as `run_ranks_with`'s): the kernels it
            // loaded are shared, so this init loads no module (a load waits for the device
            // to be idle, which `a_launch_never_waits_for_a_receive_in_flight` is about).
            let opts = test_options(Duration::from_secs(20));
            let device = rank % gpus().unwrap_or(1).max(1);
            let second = GpuComm::init(&id, rank, 2, device, &opts)
                .unwrap_or_else(|e| panic!("rank {rank}: the second init: {e}"));
            let took = t.elapsed();
            rescue.disarm();
            // Here, before the calls below meet a communicator the rescue may have aborted.
            assert!(
                took < Duration::from_secs(5),
                "rank {rank}: the second init took {took:?} while the default stream waited"
            );
            if rank == 0 {
                collective(&mut comm);
            }
            comm.synchronize(&stream).unwrap();
            legacy.synchronize().unwrap();
            let mut out = vec![0u8; 1024];
            buf.copy_to_host(&mut out).unwrap();
            let want = 0x0202_0202i32.to_ne_bytes();
            assert!(
                out.chunks_exact(4).all(|w| w == want),
                "rank {rank}: the all-reduce's result is wrong"
            );
            drop(second);
        },
    );
}

fn a_skipped_call_is_named(settings: Settings) {
    let gate = Arc::new(Barrier::new(2));
    let results = run_ranks_with(
        2,
        Duration::from_secs(3),
        settings,
        move |rank, mut comm| {
            let (stream, buf) = ready_for_a_skipped_call(&mut comm, 64 << 20);
            let mut outcome = None;
            let mut status = None;
            if rank == 1 {
                // Sitting the call out, it asks the job what holds it up (issue 26's health
                // query): rank 0 has been in a collective this rank has not begun.
                std::thread::sleep(Duration::from_millis(1500));
                let report = comm.status().query(weft_runtime::status::QUERY_DEADLINE);
                status = Some((
                    report.culprit().map(|c| (c.rank, c.why)),
                    report.to_string(),
                ));
            }
            if rank == 0 {
                let t = Instant::now();
                // SAFETY: the buffer outlives the synchronize.
                let r = unsafe {
                    comm.collective(
                        Collective::AllReduce,
                        buf.ptr(),
                        buf.ptr(),
                        16 << 20,
                        DataType::Float32,
                        RedOp::Sum,
                        &stream,
                    )
                };
                let r = r.and_then(|()| comm.synchronize(&stream));
                outcome = Some((
                    r.map_err(|e: GpuError| (e.culprit(), e.to_string())),
                    t.elapsed(),
                ));
            }
            // Rank 1 sat out; both now leave without finalize (their FIFOs disagree).
            gate.wait();
            (outcome, status)
        },
    );
    let (culprit, report) = results[1].1.clone().expect("rank 1 asked");
    eprintln!("{settings:?}: the health query while rank 0 waited:\n{report}");
    let (who, why) = culprit.unwrap_or_else(|| panic!("no rank named:\n{report}"));
    assert_eq!(who, 1, "{report}");
    assert!(why.contains("has not begun collective #1"), "{report}");
    let (result, took) = results[0].0.clone().expect("rank 0 ran");
    let (culprit, text) = result.expect_err("the all-reduce cannot finish without rank 1");
    assert_eq!(culprit, Some(1), "{text}");
    assert!(text.contains("rank 1"), "{text}");
    assert!(
        took < Duration::from_secs(15),
        "gave up only after {took:?}: {text}"
    );
    eprintln!("{settings:?}: rank 0 gave up after {took:?}: {text}");
}

/// Sends and receives that do not match, SIMPLE and LL: rank 1's receive is refused with
/// an error naming rank 0 (at once where a tag of the step shows another size, at the
/// deadline where no send comes), never a hang and never garbage taken as data.
#[test]
fn mismatched_sends_and_receives_are_named() {
    if multi_ranks().is_none() {
        return;
    }
    for (settings, name) in [(Settings::default(), "SIMPLE"), (Settings::LL, "LL")] {
        // Sizes that differ: 1000 bytes sent, 1200 expected.
        let r = p2p_mismatch(settings, &[1000], &[&[1200]]);
        let text = expect_named(&r[0], name);
        assert!(
            text.contains("1200 bytes") && text.contains("1000"),
            "{name}: {text}"
        );
        // A large send met by a smaller receive (more channels on the sender's side).
        let r = p2p_mismatch(settings, &[3 << 20], &[&[1 << 20]]);
        let text = expect_named(&r[0], name);
        assert!(text.contains(&format!("{}", 1 << 20)), "{name}: {text}");
        // A receive whose sender never calls: the deadline.
        let r = p2p_mismatch(settings, &[], &[&[4096]]);
        let text = expect_named(&r[0], name);
        assert!(text.contains("gave up"), "{name}: {text}");
        // Two sends, one receive: the second send waits for rank 1's next receive (NCCL
        // matches in call order across groups too), whose other size is then refused.
        let r = p2p_mismatch(settings, &[100, 100], &[&[100], &[200]]);
        assert!(r[0].is_ok(), "{name}: the first receive: {:?}", r[0]);
        let text = expect_named(&r[1], name);
        assert!(
            text.contains("200 bytes") && text.contains("100 bytes"),
            "{name}: {text}"
        );
    }
}

type Outcome = Result<(), (Option<usize>, String)>;

/// Rank 1's outcome, named and within the test's deadline: its error's text.
fn expect_named(r: &Outcome, name: &str) -> String {
    let (culprit, text) = r.clone().expect_err("rank 1's receive must fail");
    assert_eq!(culprit, Some(0), "{name}: {text}");
    assert!(text.contains("rank 0"), "{name}: {text}");
    eprintln!("{name}: {text}");
    text
}

/// Rank 0 sends rank 1 messages of `sends` bytes in one group; rank 1 receives `groups`
/// (a group each, in order) from rank 0 and stops at its first failure. Rank 1's outcome per
/// group; both leave without finalize (their FIFOs disagree).
fn p2p_mismatch(settings: Settings, sends: &[usize], groups: &[&[usize]]) -> Vec<Outcome> {
    let sends = sends.to_vec();
    let groups: Vec<Vec<usize>> = groups.iter().map(|g| g.to_vec()).collect();
    let gate = Arc::new(Barrier::new(2));
    let results = run_ranks_with(
        2,
        Duration::from_secs(3),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let buf = DeviceBuffer::alloc(comm.context(), 8 << 20).unwrap();
            comm.prepare(&[DataType::Uint8]).unwrap();
            comm.barrier().unwrap();
            let mut outcomes = Vec::new();
            let t = Instant::now();
            if rank == 0 && !sends.is_empty() {
                let ops: Vec<GpuP2p> = sends
                    .iter()
                    .map(|&bytes| GpuP2p::Send {
                        peer: 1,
                        buf: buf.ptr(),
                        bytes,
                    })
                    .collect();
                // SAFETY: the buffer holds every message and outlives the synchronize.
                let _ =
                    unsafe { comm.group(&ops, &stream) }.and_then(|()| comm.synchronize(&stream));
            }
            if rank == 1 {
                for g in &groups {
                    let ops: Vec<GpuP2p> = g
                        .iter()
                        .map(|&bytes| GpuP2p::Recv {
                            peer: 0,
                            buf: buf.ptr(),
                            bytes,
                        })
                        .collect();
                    // SAFETY: as above.
                    let r = unsafe { comm.group(&ops, &stream) }
                        .and_then(|()| comm.synchronize(&stream))
                        .map_err(|e: GpuError| (e.culprit(), e.to_string()));
                    let failed = r.is_err();
                    outcomes.push(r);
                    if failed {
                        break;
                    }
                }
                assert!(
                    t.elapsed() < Duration::from_secs(15),
                    "rank 1 took {:?}: {outcomes:?}",
                    t.elapsed()
                );
            }
            gate.wait();
            outcomes
        },
    );
    results[1].clone()
}

/// The cases of a peer-pointer algorithm: the collectives it runs, every type and operator,
/// in and out of place, counts from one element (8 bytes for a 64-bit type) to odd ones,
/// and [`large_cases`]: a call of 256 MiB per rank for each collective and type.
fn algo_cases(algo: GpuAlgo, nranks: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 1000u64;
    let colls: &[Collective] = match algo {
        GpuAlgo::Nvls => &[
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
        ],
        _ => &[Collective::AllReduce],
    };
    for &dtype in DataType::ALL {
        for count in [1usize, 2, 7, 1000, 65_536 + 3, 1_234_567] {
            for in_place in [false, true] {
                for &coll in colls {
                    let ops: &[RedOp] = if coll.reduces() {
                        RedOp::ALL
                    } else {
                        &[RedOp::Sum]
                    };
                    for &op in ops {
                        seed += 1;
                        out.push(Case {
                            coll,
                            dtype,
                            op,
                            count,
                            in_place,
                            seed,
                            premul: None,
                        });
                    }
                }
            }
        }
    }
    out.extend(large_cases(colls, nranks, &mut seed));
    out
}

fn every_case_with(settings: Settings, name: &'static str) {
    let Some(nranks) = multi_ranks() else { return };
    let cases = algo_cases(settings.algo.unwrap_or(GpuAlgo::OneShot), nranks);
    check_cases(nranks, settings, None, name, cases);
}

#[test]
fn one_shot_all_reduce_every_type_op_and_size() {
    every_case_with(Settings::algo(GpuAlgo::OneShot), "oneshot");
}

/// The one-shot's barrier form: a window too small for the LL form's lanes
/// (`WEFT_DIRECT_WINDOW` of 256 KiB: 128 pairs per sub-slot on two ranks, fewer than the
/// block's threads), set in the communicators' settings.
#[test]
fn one_shot_barrier_form_every_type_op_and_size() {
    every_case_with(Settings::one_shot_barrier_form(), "oneshot, barrier form");
}

/// The LL one-shot across its cleaning rounds and its 32-bit flag wrap, every element
/// checked. Four calls first fill every pair of every lane, leaving the flags of epochs 0-4
/// behind (an epoch's flag is `epoch + 1`), which are also the flags of epochs 2^32 + 0-4.
/// Then every lane's epoch restarts 16 before the cleaning rounds and the wrap
/// (`GpuComm::restart_steps_for_test`), and 16 calls that use every lane but only an eighth
/// of each carry the lanes to the wrap without touching the other pairs, so only the
/// cleaning rounds (0xfffffff8..0xffffffff, which write whole lanes) rewrite them. Past the
/// wrap, six calls read whole lanes at epochs 2^32 + 0-5: without the cleaning they would take
/// the stale pairs for fresh ones. Then a mix of sizes (lane 0 alone, one or two rounds per
/// lane), so that the lanes' epochs drift apart. At the end every lane's epoch must have moved
/// on from the restart point (the restart took effect). Written after the two-H100 run of
/// 2026-11-25 (not yet run on a GPU).
#[test]
fn one_shot_crosses_its_cleaning_rounds_and_the_flag_wrap() {
    let Some(n) = multi_ranks() else { return };
    for start in [0x7fff_fff0u64, 0xffff_fff0] {
        let wrong = run_ranks_with(
            n,
            Duration::from_secs(60),
            Settings::algo(GpuAlgo::OneShot),
            move |rank, mut comm| {
                let stream = Stream::new(comm.context()).unwrap();
                let biggest = 300_007 * n * 8;
                let buffers = Buffers::new(&comm, biggest);
                prepare(&mut comm);
                let mut failures = Vec::new();
                let mut run = |comm: &mut GpuComm, what: &str, count, dtype, in_place, seed| {
                    let c = Case {
                        coll: Collective::AllReduce,
                        dtype,
                        op: RedOp::Sum,
                        count,
                        in_place,
                        seed,
                        premul: None,
                    };
                    let w = run_case(rank, n, comm, &stream, &buffers, &c);
                    if w > 0 {
                        failures.push(format!(
                            "rank {rank}: start {start:#x}, {what}: {c:?}: {w} wrong"
                        ));
                    }
                };
                let f32 = DataType::Float32;
                // 262,144 floats: one round of whole lanes on two ranks (32 lanes of 32 KiB
                // of data), several on more.
                for call in 0..4u64 {
                    run(&mut comm, "filling", 262_144, f32, false, 6000 + call);
                }
                comm.restart_steps_for_test(start).unwrap();
                // 32,768 floats (doubles): all 32 lanes, 4 (8) KiB of each, one round.
                for call in 0..16u64 {
                    let dtype = if call % 4 == 3 {
                        DataType::Float64
                    } else {
                        f32
                    };
                    run(
                        &mut comm,
                        "to the wrap",
                        32_768,
                        dtype,
                        call % 2 == 0,
                        7000 + call,
                    );
                }
                for call in 0..6u64 {
                    run(
                        &mut comm,
                        "whole lanes past the wrap",
                        262_144,
                        f32,
                        call % 2 == 1,
                        7100 + call,
                    );
                }
                for call in 0..18u64 {
                    let count = match call % 3 {
                        0 => 300_007,
                        1 => 7,
                        _ => 65_539,
                    };
                    let dtype = if call % 5 == 4 {
                        DataType::Float64
                    } else {
                        f32
                    };
                    run(&mut comm, "mixed", count, dtype, call % 3 == 0, 7200 + call);
                }
                // Every lane ran the 22 calls that use them all, from `start`.
                let epochs = comm.lane_epochs_for_test().unwrap();
                if epochs.len() != MAX_CHANNELS as usize {
                    failures.push(format!(
                        "rank {rank}: {} lane epochs read, expected {MAX_CHANNELS}",
                        epochs.len()
                    ));
                }
                for (lane, epoch) in epochs.iter().take(PEER_LANES as usize).enumerate() {
                    let moved = epoch.wrapping_sub(start);
                    if !(22..=1000).contains(&moved) {
                        failures.push(format!(
                            "rank {rank}: lane {lane} at epoch {epoch:#x} after the calls from \
                             {start:#x}: the restart did not take effect"
                        ));
                    }
                }
                comm.finalize().unwrap();
                failures
            },
        );
        let failures: Vec<String> = wrong.into_iter().flatten().collect();
        eprintln!(
            "{n} GPU(s): one-shot from epoch {start:#x} across the cleaning rounds and the wrap, \
             {} failed",
            failures.len()
        );
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// What a user gets without WEFT_ALGO: one-shot (LL form) for small all-reduces, the ring
/// above `weft_core::algo::one_shot_max_bytes`.
#[test]
fn automatic_choice_every_type_op_and_size() {
    let auto = Settings {
        proto: None,
        p2p_ll_threshold: None,
        algo: None,
        ..Settings::SIMPLE
    };
    every_case_with(auto, "automatic choice");
}

#[test]
fn two_shot_all_reduce_every_type_op_and_size() {
    every_case_with(Settings::algo(GpuAlgo::TwoShot), "twoshot");
}

/// NVLS in its unicast form (no multicast object: `WEFT_NVLS` is never set by a test).
#[test]
fn nvls_unicast_every_collective_type_op_and_size() {
    assert!(
        std::env::var("WEFT_NVLS").is_err(),
        "WEFT_NVLS is set: no test may opt in to NVLink multicast"
    );
    every_case_with(Settings::algo(GpuAlgo::Nvls), "nvls");
}

/// NVLS (unicast form) with its three collectives mixed on one communicator: they share one
/// set of counters and steps, and all-gather and reduce-scatter post some `freed` counters
/// only locally, so without the kernel's start-of-launch post the all-reduce after eight
/// all-gathers, and the all-gather after eight reduce-scatters, waited for a slot forever.
/// Every element of every call is checked.
#[test]
fn nvls_unicast_collectives_mixed_on_one_communicator() {
    assert!(
        std::env::var("WEFT_NVLS").is_err(),
        "WEFT_NVLS is set: no test may opt in to NVLink multicast"
    );
    let Some(nranks) = multi_ranks() else { return };
    let case = |coll, seed| Case {
        coll,
        dtype: DataType::Float32,
        op: RedOp::Sum,
        count: 65_536 + 3,
        in_place: false,
        seed,
        premul: None,
    };
    let mut calls: Vec<Case> = (0..8)
        .map(|i| case(Collective::AllGather, 3000 + i))
        .collect();
    calls.push(case(Collective::AllReduce, 3100));
    calls.extend((0..8).map(|i| case(Collective::ReduceScatter, 3200 + i)));
    calls.push(case(Collective::AllGather, 3300));
    calls.push(case(Collective::AllReduce, 3301));
    let wrong = run_ranks_with(
        nranks,
        Duration::from_secs(30),
        Settings::algo(GpuAlgo::Nvls),
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let biggest = calls
                .iter()
                .map(|c| c.count * nranks * c.dtype.size_of_elem())
                .max()
                .unwrap_or(0);
            let buffers = Buffers::new(&comm, biggest);
            prepare(&mut comm);
            let mut failures = Vec::new();
            for (i, c) in calls.iter().enumerate() {
                let w = run_case(rank, nranks, &mut comm, &stream, &buffers, c);
                if w > 0 {
                    failures.push(format!("rank {rank}: call {i}: {c:?}: {w} wrong"));
                }
            }
            comm.finalize().unwrap();
            failures
        },
    );
    let failures: Vec<String> = wrong.into_iter().flatten().collect();
    eprintln!(
        "NVLS unicast, collectives mixed on {nranks} GPU(s): {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A rank that skips a call of a peer-pointer algorithm: the other's kernel gives up on
/// its barrier or slot within the timeout and names it.
#[test]
fn peer_algorithms_name_a_rank_that_skips_a_call() {
    if multi_ranks().is_none() {
        return;
    }
    for algo in [GpuAlgo::OneShot, GpuAlgo::TwoShot, GpuAlgo::Nvls] {
        let gate = Arc::new(Barrier::new(2));
        let results = run_ranks_with(
            2,
            Duration::from_secs(3),
            Settings::algo(algo),
            move |rank, mut comm| {
                let (stream, buf) = ready_for_a_skipped_call(&mut comm, 64 << 20);
                let mut outcome = None;
                if rank == 0 {
                    let t = Instant::now();
                    // SAFETY: the buffer outlives the synchronize.
                    let r = unsafe {
                        comm.collective(
                            Collective::AllReduce,
                            buf.ptr(),
                            buf.ptr(),
                            16 << 20,
                            DataType::Float32,
                            RedOp::Sum,
                            &stream,
                        )
                    };
                    let r = r.and_then(|()| comm.synchronize(&stream));
                    outcome = Some((
                        r.map_err(|e: GpuError| (e.culprit(), e.to_string())),
                        t.elapsed(),
                    ));
                }
                gate.wait();
                outcome
            },
        );
        let (result, took) = results[0].clone().expect("rank 0 ran");
        let (culprit, text) = result.expect_err("the all-reduce cannot finish without rank 1");
        assert_eq!(culprit, Some(1), "{algo}: {text}");
        assert!(text.contains("rank 1"), "{algo}: {text}");
        assert!(
            took < Duration::from_secs(15),
            "{algo}: gave up only after {took:?}: {text}"
        );
        eprintln!("{algo}: rank 0 gave up after {took:?}: {text}");
    }
}

/// `PreMulSum` cases for the collectives `colls`: every type, in and out of place, the
/// scalar on the host and on the device, each rank with its own scalar.
fn premul_cases(colls: &[Collective]) -> Vec<Case> {
    let mut out = Vec::new();
    let mut seed = 5000u64;
    for &dtype in DataType::ALL {
        for count in [1usize, 7, 1000, 65_536 + 3] {
            for in_place in [false, true] {
                for &coll in colls {
                    for at in [ScalarAt::Host, ScalarAt::Device] {
                        seed += 1;
                        out.push(Case {
                            coll,
                            dtype,
                            op: RedOp::Sum,
                            count,
                            in_place,
                            seed,
                            premul: Some(at),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Every `PreMulSum` case of `colls` under `settings`, every element checked against
/// `sum over ranks of scalar_r * in_r`.
fn premul_sum_with(
    nranks: usize,
    settings: Settings,
    colls: &'static [Collective],
    what: &'static str,
) {
    let cases = premul_cases(colls);
    let total = cases.len();
    let started = Instant::now();
    let wrong = run_ranks_with(
        nranks,
        Duration::from_secs(60),
        settings,
        move |rank, mut comm| {
            let stream = Stream::new(comm.context()).unwrap();
            let biggest = cases
                .iter()
                .map(|c| c.count * nranks * c.dtype.size_of_elem())
                .max()
                .unwrap_or(0);
            let buffers = Buffers::new(&comm, biggest);
            prepare(&mut comm);
            let mut failures = Vec::new();
            let mut skipped = 0usize;
            for c in &cases {
                if !comm.can_reduce(c.dtype) {
                    skipped += 1;
                    continue;
                }
                let w = run_case(rank, nranks, &mut comm, &stream, &buffers, c);
                if w > 0 {
                    failures.push(format!("rank {rank}: {what}: {c:?}: {w} wrong"));
                }
            }
            comm.finalize().unwrap();
            (failures, skipped)
        },
    );
    let skipped = wrong.iter().map(|w| w.1).max().unwrap_or(0);
    let failures: Vec<String> = wrong.into_iter().flat_map(|w| w.0).collect();
    eprintln!(
        "PreMulSum, {what}, {nranks} rank(s): {total} calls per rank ({skipped} fp8 skipped), \
         {} failed, {:.1} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const RING_REDUCTIONS: &[Collective] = &[
    Collective::AllReduce,
    Collective::ReduceScatter,
    Collective::Reduce { root: 0 },
];

#[test]
fn premul_sum_on_one_gpu() {
    if gpus().is_none() {
        return;
    }
    premul_sum_with(1, Settings::default(), RING_REDUCTIONS, "ring of one");
}

#[test]
fn premul_sum_ring_simple_and_ll() {
    let Some(nranks) = multi_ranks() else { return };
    premul_sum_with(nranks, Settings::default(), RING_REDUCTIONS, "ring SIMPLE");
    premul_sum_with(nranks, Settings::LL, RING_REDUCTIONS, "ring LL");
}

#[test]
fn premul_sum_peer_algorithms() {
    assert!(
        std::env::var("WEFT_NVLS").is_err(),
        "WEFT_NVLS is set: no test may opt in to NVLink multicast"
    );
    let Some(nranks) = multi_ranks() else { return };
    const ALL_REDUCE: &[Collective] = &[Collective::AllReduce];
    const NVLS: &[Collective] = &[Collective::AllReduce, Collective::ReduceScatter];
    premul_sum_with(
        nranks,
        Settings::algo(GpuAlgo::OneShot),
        ALL_REDUCE,
        "one-shot",
    );
    premul_sum_with(
        nranks,
        Settings::algo(GpuAlgo::TwoShot),
        ALL_REDUCE,
        "two-shot",
    );
    premul_sum_with(nranks, Settings::algo(GpuAlgo::Nvls), NVLS, "NVLS unicast");
}

/// A null device scalar is refused before anything is launched, naming the fault.
#[test]
fn premul_sum_refuses_a_null_device_scalar() {
    if gpus().is_none() {
        return;
    }
    let errs = run_ranks(1, Duration::from_secs(30), |_, mut comm| {
        let stream = Stream::new(comm.context()).unwrap();
        let b = Buffers::new(&comm, 64);
        // SAFETY: refused before any launch; the buffers are valid anyway.
        let r = unsafe {
            comm.collective(
                Collective::AllReduce,
                b.send.ptr(),
                b.recv.ptr(),
                4,
                DataType::Float32,
                GpuRedOp::PreMulSum(PreMulScalar::Device(0)),
                &stream,
            )
        };
        comm.finalize().unwrap();
        r.map_err(|e| e.to_string())
    });
    let e = errs[0].clone().unwrap_err();
    assert!(e.contains("null"), "{e}");
}

/// One call of a fused group, with buffers of its own (a group's calls are independent).
struct GroupCall {
    case: Case,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    out_elems: usize,
}

/// Enqueues `cases` (out of place, built-in operators) with one `GpuComm::collectives` and
/// no synchronisation between them, then checks every element of every output (poisoned
/// first). Returns the launches made and the failures.
fn run_group(
    rank: usize,
    nranks: usize,
    comm: &mut GpuComm,
    cases: &[Case],
) -> (usize, Vec<String>) {
    let stream = Stream::new(comm.context()).unwrap();
    let mut calls = Vec::new();
    for c in cases {
        let esize = c.dtype.size_of_elem();
        let (in_elems, out_elems) = c.elems(nranks);
        let data = c.data(nranks);
        let mut input = vec![0u8; in_elems * esize];
        data.fill(rank, 0, &mut input);
        let send = DeviceBuffer::alloc(comm.context(), input.len()).unwrap();
        send.copy_from_host(&input).unwrap();
        let recv = DeviceBuffer::alloc(comm.context(), out_elems * esize).unwrap();
        recv.copy_from_host(&vec![0xa5u8; out_elems * esize])
            .unwrap();
        calls.push(GroupCall {
            case: *c,
            send,
            recv,
            out_elems,
        });
    }
    let group: Vec<GpuCollective> = calls
        .iter()
        .map(|g| GpuCollective {
            collective: g.case.coll,
            send: g.send.ptr(),
            recv: g.recv.ptr(),
            count: g.case.count,
            dtype: g.case.dtype,
            op: GpuRedOp::Builtin(g.case.op),
        })
        .collect();
    // SAFETY: every call has buffers of its own, which outlive the synchronize below.
    let launches = unsafe { comm.collectives(&group, &stream) }
        .unwrap_or_else(|e| panic!("rank {rank}: group of {}: {e}", group.len()));
    comm.synchronize(&stream)
        .unwrap_or_else(|e| panic!("rank {rank}: group of {}: {e}", group.len()));
    let mut failures = Vec::new();
    for g in &calls {
        let c = &g.case;
        let mut out = vec![0u8; g.out_elems * c.dtype.size_of_elem()];
        g.recv.copy_to_host(&mut out).unwrap();
        let w = c
            .data(nranks)
            .count_wrong(Expect::from(c.coll), rank, c.count, &out);
        if w > 0 {
            failures.push(format!("rank {rank}: {c:?} in a group: {w} wrong"));
        }
    }
    (launches, failures)
}

/// A group case: out of place, a built-in operator.
fn group_case(coll: Collective, dtype: DataType, op: RedOp, count: usize, seed: u64) -> Case {
    Case {
        coll,
        dtype,
        op,
        count,
        in_place: false,
        seed,
        premul: None,
    }
}

/// Groups (`GpuComm::collectives`, what `ncclGroupEnd` issues) whose consecutive calls of
/// one kernel share a launch, as NCCL fuses a group: every element of every call checked,
/// and the launches counted. Under the automatic choice (small all-reduces one-shot, the
/// rest on the ring in LL or SIMPLE), forced LL, and forced two-shot.
#[test]
fn group_calls_fuse_into_fewer_launches_with_every_element_right() {
    let Some(nranks) = multi_ranks() else { return };
    let root = (nranks - 1) as u32;
    let f32s = DataType::Float32;
    let sum = RedOp::Sum;
    let auto = Settings {
        proto: None,
        p2p_ll_threshold: None,
        algo: None,
        ..Settings::SIMPLE
    };
    // (settings, name, cases, launches expected).
    let mut groups: Vec<(Settings, &str, Vec<Case>, usize)> = Vec::new();
    let mut seed = 7000u64;
    let mut next = || {
        seed += 1;
        seed
    };
    // Six equal small all-reduces: the automatic one-shot, one channel count, so 4 + 2.
    let small: Vec<Case> = (0..6)
        .map(|_| group_case(Collective::AllReduce, f32s, sum, 1000, next()))
        .collect();
    groups.push((auto, "six small all-reduces (one-shot)", small, 2));
    // LL one-shots of four sizes (1, 3, 20 and 32 blocks): one launch, spread over the lanes
    // side by side (the last wraps to lane 0, after the first on that lane).
    let lanes: Vec<Case> = [1000usize, 3000, 20_000, 70_000]
        .iter()
        .map(|&n| group_case(Collective::AllReduce, f32s, sum, n, next()))
        .collect();
    groups.push((
        auto,
        "one-shots of four sizes (spread over lanes)",
        lanes,
        1,
    ));
    // Ten all-gathers of one size on the ring: 8 + 2.
    let gathers: Vec<Case> = (0..10)
        .map(|_| group_case(Collective::AllGather, f32s, sum, 65_536 + 3, next()))
        .collect();
    groups.push((
        Settings::SIMPLE,
        "ten all-gathers (ring SIMPLE)",
        gathers.clone(),
        2,
    ));
    groups.push((Settings::LL, "ten all-gathers (ring LL)", gathers, 2));
    // Every ring collective, sum, large enough for SIMPLE, of different sizes (so different
    // channel counts) in one launch; then a max and a bfloat16 call, each a launch of its
    // own; then the sum ones again, a launch more.
    let mut mixed = vec![
        group_case(Collective::AllReduce, f32s, sum, 4 << 20, next()),
        group_case(Collective::ReduceScatter, f32s, sum, 1 << 20, next()),
        group_case(Collective::AllGather, f32s, sum, 3 << 18, next()),
        group_case(Collective::Broadcast { root }, f32s, sum, 2 << 20, next()),
        group_case(Collective::Reduce { root }, f32s, sum, 5 << 20, next()),
        group_case(Collective::AllReduce, f32s, RedOp::Max, 4 << 20, next()),
        group_case(
            Collective::AllReduce,
            DataType::Bfloat16,
            sum,
            4 << 20,
            next(),
        ),
    ];
    mixed.push(group_case(
        Collective::AllReduce,
        f32s,
        sum,
        4 << 20,
        next(),
    ));
    groups.push((Settings::SIMPLE, "mixed ring collectives", mixed, 4));
    // All-gathers of different sizes in LL (different channel counts): one launch.
    let ll_sizes: Vec<Case> = [7usize, 1000, 65_536 + 3, 300_000]
        .iter()
        .map(|&n| group_case(Collective::AllGather, f32s, sum, n, next()))
        .collect();
    groups.push((
        Settings::LL,
        "all-gathers of four sizes (ring LL)",
        ll_sizes,
        1,
    ));
    // Avg (the scalar in each work) on three reducing collectives: one launch.
    let avg = vec![
        group_case(Collective::AllReduce, f32s, RedOp::Avg, 3 << 20, next()),
        group_case(Collective::ReduceScatter, f32s, RedOp::Avg, 1 << 20, next()),
        group_case(
            Collective::Reduce { root },
            f32s,
            RedOp::Avg,
            77_777,
            next(),
        ),
    ];
    groups.push((Settings::SIMPLE, "Avg on the ring", avg, 1));
    // Five equal two-shot all-reduces: 4 + 1.
    let two: Vec<Case> = (0..5)
        .map(|_| group_case(Collective::AllReduce, f32s, sum, 300_001, next()))
        .collect();
    groups.push((
        Settings::algo(GpuAlgo::TwoShot),
        "five two-shot all-reduces",
        two,
        2,
    ));
    // Mixed sizes under the automatic choice: the one-shot ones of one channel count fuse,
    // the others stand apart; only the results are checked.
    let various: Vec<Case> = [1usize, 1000, 1000, 70_000, 3 << 20, 3 << 20, 2, 2]
        .iter()
        .map(|&n| group_case(Collective::AllReduce, f32s, sum, n, next()))
        .collect();
    groups.push((auto, "all-reduces of mixed sizes (automatic)", various, 0));

    // The one-shot's barrier form (a window too small for the LL lanes): five equal
    // all-reduces of several rounds on every lane, 4 + 1.
    let barrier: Vec<Case> = (0..5)
        .map(|_| group_case(Collective::AllReduce, f32s, sum, 200_001, next()))
        .collect();
    groups.push((
        Settings::one_shot_barrier_form(),
        "five barrier-form one-shots",
        barrier,
        2,
    ));

    let mut failures = Vec::new();
    for (settings, name, cases, expected) in groups {
        let calls = cases.len();
        let out = run_ranks_with(
            nranks,
            Duration::from_secs(60),
            settings,
            move |rank, mut comm| {
                // Without a peer region (SHM windows) the peer algorithms cannot run and
                // small all-reduces take the ring: the launch counts assume P2P.
                assert_ne!(
                    comm.transport_name(),
                    "SHM",
                    "rank {rank}: the group test needs P2P between the GPUs"
                );
                prepare(&mut comm);
                let result = run_group(rank, nranks, &mut comm, &cases);
                comm.finalize().unwrap();
                result
            },
        );
        for (rank, (launches, wrong)) in out.into_iter().enumerate() {
            eprintln!("{name}: rank {rank}: {calls} calls in {launches} launches");
            failures.extend(wrong);
            let fused = if expected == 0 {
                launches < calls
            } else {
                launches == expected
            };
            if !fused {
                failures.push(format!(
                    "{name}: rank {rank}: {calls} calls in {launches} launches, expected {}",
                    if expected == 0 {
                        format!("fewer than {calls}")
                    } else {
                        expected.to_string()
                    }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
