//! weft's NCCL API on GPUs, through the exported functions (the same `extern "C"` code a C
//! program calls): every collective, send/recv in a group and all-to-all, issued from one
//! thread for all ranks inside ncclGroupStart/End as nccl-tests does, each output element
//! checked against a CPU computation. Communicators are made both ways nccl-tests makes
//! them: ncclCommInitAll, and ncclCommInitRank per GPU inside a group.
//!
//! Skipped with a message without a GPU, unless WEFT_REQUIRE_GPU=1 makes that a failure. On a one-GPU machine, WEFT_TEST_SHARE_GPU=1 runs
//! two ranks on it (as driver/tests/gpu.rs does).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use nccl::entry::calls::*;
use nccl::entry::info::*;
use nccl::entry::lifecycle::*;
use nccl::entry::memory::{ncclRedOpCreatePreMulSum, ncclRedOpDestroy};
use nccl::entry::{NcclComm, NcclUniqueId};
use nccl::result::{NCCL_IN_PROGRESS, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_SUCCESS};
use weft_cuda::{Context, Device, DeviceBuffer, Stream};

const INT32: c_int = 2;
const FLOAT32: c_int = 7;
const SUM: c_int = 0;
const MAX: c_int = 2;
/// `ncclScalarResidence_t`.
const SCALAR_DEVICE: c_int = 0;
const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// A skip, or with WEFT_REQUIRE_GPU=1 (set by scripts/nccl-tests.sh on the GPU machine) a
/// failure: a skipped test counts as passed, and a GPU run must not pass by skipping.
fn skip(why: &str) -> Option<Vec<usize>> {
    if std::env::var("WEFT_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("WEFT_REQUIRE_GPU=1 but {why}");
    }
    eprintln!("skipped: {why}");
    None
}

/// The devices of the ranks, or None (skipped) without a GPU.
fn rank_devices() -> Option<Vec<usize>> {
    let n = match weft_cuda::device_count() {
        Ok(0) => return skip("no GPU (weft's libnccl GPU tests need one)"),
        Err(e) => return skip(&format!("no GPU: {e}")),
        Ok(n) => n,
    };
    if std::env::var("WEFT_TEST_SHARE_GPU").is_ok_and(|v| v == "1") {
        return Some(vec![0, 0]);
    }
    if n < 2 {
        return skip("one GPU (WEFT_TEST_SHARE_GPU=1 runs two ranks on it)");
    }
    Some((0..n).collect())
}

fn ok(rc: i32, what: &str) {
    assert_eq!(
        rc,
        NCCL_SUCCESS,
        "{what} returned {rc}: {}",
        nccl::boundary::last_error()
    );
}

/// One rank's GPU, stream and buffers.
struct Rank {
    comm: NcclComm,
    ctx: Arc<Context>,
    stream: Stream,
}

impl Rank {
    fn buffer(&self, bytes: usize) -> DeviceBuffer {
        let b = DeviceBuffer::alloc(&self.ctx, bytes).expect("cuMemAlloc");
        b.fill(0).expect("zero fill");
        b
    }
    fn s(&self) -> *mut c_void {
        self.stream.raw().cast()
    }
}

fn upload_i32(b: &DeviceBuffer, v: &[i32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    b.copy_from_host(&bytes).expect("upload");
}

fn download_i32(b: &DeviceBuffer, n: usize) -> Vec<i32> {
    let mut bytes = vec![0u8; n * 4];
    b.copy_to_host(&mut bytes).expect("download");
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Rank r's input: small values (exact in f32 too), different per rank and element.
fn input(rank: usize, n: usize, salt: u64) -> Vec<i32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (rank as u64 * 7919 + salt);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as i32 - 1000
        })
        .collect()
}

fn every_call_on(ranks: &[Rank]) {
    let n = ranks.len();
    let count = 12_345usize; // not a power of two
    let inputs: Vec<Vec<i32>> = (0..n).map(|r| input(r, count * n, 1)).collect();
    let send: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * n * 4)).collect();
    for (b, v) in send.iter().zip(&inputs) {
        upload_i32(b, v);
    }
    // The same values as f32 (exact: |v| <= 1000), for a float reduction.
    let sendf: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    for (b, v) in sendf.iter().zip(&inputs) {
        let bits: Vec<i32> = v[..count]
            .iter()
            .map(|&x| (x as f32).to_bits() as i32)
            .collect();
        upload_i32(b, &bits);
    }
    let outs =
        |elems: usize| -> Vec<DeviceBuffer> { ranks.iter().map(|r| r.buffer(elems * 4)).collect() };
    let ar = outs(count);
    let mx = outs(count);
    let bc = outs(count);
    let rd = outs(count);
    let ag = outs(count * n);
    let rs = outs(count);
    let p2p = outs(count);
    let a2a = outs(count * n);
    let sp = |b: &DeviceBuffer| b.ptr() as *mut c_void;
    // Every call of every rank in one group, as nccl-tests issues them from one thread.
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        let (c, s) = (rank.comm, rank.s());
        let src = sp(&send[r]);
        ok(
            ncclAllReduce(src, sp(&ar[r]), count, INT32, SUM, c, s),
            "ncclAllReduce",
        );
        ok(
            ncclAllReduce(sp(&sendf[r]), sp(&mx[r]), count, FLOAT32, MAX, c, s),
            "ncclAllReduce max f32",
        );
        ok(
            ncclBroadcast(src, sp(&bc[r]), count, INT32, 1, c, s),
            "ncclBroadcast",
        );
        ok(
            ncclReduce(src, sp(&rd[r]), count, INT32, SUM, 0, c, s),
            "ncclReduce",
        );
        ok(
            ncclAllGather(src, sp(&ag[r]), count, INT32, c, s),
            "ncclAllGather",
        );
        ok(
            ncclReduceScatter(src, sp(&rs[r]), count, INT32, SUM, c, s),
            "ncclReduceScatter",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (collectives)");
    // Send to the next rank, receive from the previous: one P2P group per rank.
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        let (c, s) = (rank.comm, rank.s());
        ok(
            ncclSend(sp(&send[r]), count, INT32, ((r + 1) % n) as c_int, c, s),
            "ncclSend",
        );
        ok(
            ncclRecv(sp(&p2p[r]), count, INT32, ((r + n - 1) % n) as c_int, c, s),
            "ncclRecv",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (send/recv)");
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        ok(
            ncclAlltoAll(sp(&send[r]), sp(&a2a[r]), count, INT32, rank.comm, rank.s()),
            "ncclAlltoAll",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (all-to-all)");
    for rank in ranks {
        rank.stream.synchronize().expect("stream");
        let mut e = -1;
        // SAFETY: a valid out-pointer.
        ok(
            unsafe { ncclCommGetAsyncError(rank.comm, &mut e) },
            "ncclCommGetAsyncError",
        );
        assert_eq!(e, NCCL_SUCCESS, "{}", nccl::boundary::last_error());
    }
    let first = |v: &Vec<i32>| v[..count].to_vec();
    let sum: Vec<i32> = (0..count)
        .map(|i| inputs.iter().map(|v| v[i]).sum())
        .collect();
    let max: Vec<i32> = (0..count)
        .map(|i| inputs.iter().map(|v| v[i]).max().unwrap())
        .collect();
    for r in 0..n {
        assert_eq!(download_i32(&ar[r], count), sum, "all-reduce sum, rank {r}");
        let got: Vec<i32> = download_i32(&mx[r], count)
            .iter()
            .map(|&b| f32::from_bits(b as u32) as i32)
            .collect();
        assert_eq!(got, max, "all-reduce max f32, rank {r}");
        assert_eq!(
            download_i32(&bc[r], count),
            first(&inputs[1]),
            "broadcast, rank {r}"
        );
        let ag_want: Vec<i32> = inputs.iter().flat_map(first).collect();
        assert_eq!(
            download_i32(&ag[r], count * n),
            ag_want,
            "all-gather, rank {r}"
        );
        let rs_want: Vec<i32> = (0..count)
            .map(|i| inputs.iter().map(|v| v[r * count + i]).sum())
            .collect();
        assert_eq!(
            download_i32(&rs[r], count),
            rs_want,
            "reduce-scatter, rank {r}"
        );
        assert_eq!(
            download_i32(&p2p[r], count),
            first(&inputs[(r + n - 1) % n]),
            "recv, rank {r}"
        );
        let a2a_want: Vec<i32> = (0..n)
            .flat_map(|q| inputs[q][r * count..(r + 1) * count].to_vec())
            .collect();
        assert_eq!(
            download_i32(&a2a[r], count * n),
            a2a_want,
            "all-to-all, rank {r}"
        );
    }
    assert_eq!(download_i32(&rd[0], count), sum, "reduce at root 0");
}

/// Several sends and receives per peer in one group with a collective, over every
/// communicator from one thread (PyTorch's `batch_isend_irecv` of several tensors, as
/// nccl-tests drives every GPU): each rank sends the next rank three messages of different
/// counts and itself two, its receives in the order the sends were made; they match in
/// call order per peer and direction, as NCCL matches them.
fn many_sends_per_peer_on(ranks: &[Rank]) {
    let n = ranks.len();
    let counts = [3usize, 70_001, 1_000];
    let total: usize = counts.iter().sum();
    let inputs: Vec<Vec<i32>> = (0..n).map(|r| input(r, total, 3)).collect();
    let send: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(total * 4)).collect();
    let recv: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(total * 4)).collect();
    let own: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(total * 4)).collect();
    let ar: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(total * 4)).collect();
    for (b, v) in send.iter().zip(&inputs) {
        upload_i32(b, v);
    }
    let at = |b: &DeviceBuffer, elems: usize| (b.ptr() + 4 * elems as u64) as *mut c_void;
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        let (c, s) = (rank.comm, rank.s());
        let (next, prev) = (((r + 1) % n) as c_int, ((r + n - 1) % n) as c_int);
        ok(
            ncclAllReduce(at(&send[r], 0), at(&ar[r], 0), total, INT32, SUM, c, s),
            "ncclAllReduce",
        );
        let mut first = 0;
        for (k, &count) in counts.iter().enumerate() {
            ok(
                ncclRecv(at(&recv[r], first), count, INT32, prev, c, s),
                "ncclRecv",
            );
            ok(
                ncclSend(at(&send[r], first), count, INT32, next, c, s),
                "ncclSend",
            );
            // Two messages to itself, the first and the last part.
            if k != 1 {
                ok(
                    ncclSend(at(&send[r], first), count, INT32, r as c_int, c, s),
                    "ncclSend to itself",
                );
                ok(
                    ncclRecv(at(&own[r], first), count, INT32, r as c_int, c, s),
                    "ncclRecv from itself",
                );
            }
            first += count;
        }
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (several sends per peer)");
    for rank in ranks {
        rank.stream.synchronize().expect("stream");
    }
    let sum: Vec<i32> = (0..total)
        .map(|i| inputs.iter().map(|v| v[i]).sum())
        .collect();
    for r in 0..n {
        assert_eq!(download_i32(&ar[r], total), sum, "all-reduce, rank {r}");
        assert_eq!(
            download_i32(&recv[r], total),
            inputs[(r + n - 1) % n],
            "three receives from the previous rank, rank {r}"
        );
        let got = download_i32(&own[r], total);
        let (a, b) = (counts[0], counts[0] + counts[1]);
        assert_eq!(
            got[..a],
            inputs[r][..a],
            "first message to itself, rank {r}"
        );
        assert_eq!(got[b..], inputs[r][b..], "last message to itself, rank {r}");
        assert!(
            got[a..b].iter().all(|&x| x == 0),
            "untouched middle, rank {r}"
        );
    }
}

/// In-place calls, as PyTorch and nccl-tests' in-place runs make them (all-reduce with
/// send == recv, all-gather from recv + rank * count, reduce-scatter into send + rank *
/// recvcount), and a reduce at the last rank rather than 0.
fn in_place_on(ranks: &[Rank]) {
    let n = ranks.len();
    let count = 4_099usize; // not a power of two
    let inputs: Vec<Vec<i32>> = (0..n).map(|r| input(r, count * n, 2)).collect();
    let ar: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let ag: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * n * 4)).collect();
    let rs: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * n * 4)).collect();
    let rd: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    for r in 0..n {
        upload_i32(&ar[r], &inputs[r][..count]);
        let mut own = vec![0i32; count * n];
        own[r * count..(r + 1) * count].copy_from_slice(&inputs[r][..count]);
        upload_i32(&ag[r], &own);
        upload_i32(&rs[r], &inputs[r]);
    }
    let at = |b: &DeviceBuffer, elems: usize| (b.ptr() + (elems * 4) as u64) as *mut c_void;
    let root = n - 1;
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        let (c, s) = (rank.comm, rank.s());
        ok(
            ncclAllReduce(at(&ar[r], 0), at(&ar[r], 0), count, INT32, SUM, c, s),
            "ncclAllReduce in place",
        );
        ok(
            ncclAllGather(at(&ag[r], r * count), at(&ag[r], 0), count, INT32, c, s),
            "ncclAllGather in place",
        );
        ok(
            ncclReduceScatter(
                at(&rs[r], 0),
                at(&rs[r], r * count),
                count,
                INT32,
                SUM,
                c,
                s,
            ),
            "ncclReduceScatter in place",
        );
        // The reduce reads this rank's own all-gather slot, which the in-place all-gather
        // in the same group rewrites with the same values: stable whatever the order.
        ok(
            ncclReduce(
                at(&ag[r], r * count),
                at(&rd[r], 0),
                count,
                INT32,
                SUM,
                root as c_int,
                c,
                s,
            ),
            "ncclReduce at the last rank",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (in place)");
    for rank in ranks {
        rank.stream.synchronize().expect("stream");
    }
    let sum_block = |b: usize| -> Vec<i32> {
        (0..count)
            .map(|i| inputs.iter().map(|v| v[b * count + i]).sum())
            .collect()
    };
    let ag_want: Vec<i32> = inputs.iter().flat_map(|v| v[..count].to_vec()).collect();
    for r in 0..n {
        assert_eq!(
            download_i32(&ar[r], count),
            sum_block(0),
            "in-place all-reduce, rank {r}"
        );
        assert_eq!(
            download_i32(&ag[r], count * n),
            ag_want,
            "in-place all-gather, rank {r}"
        );
        let got = download_i32(&rs[r], count * n);
        assert_eq!(
            got[r * count..(r + 1) * count].to_vec(),
            sum_block(r),
            "in-place reduce-scatter, rank {r}"
        );
    }
    assert_eq!(
        download_i32(&rd[root], count),
        sum_block(0),
        "reduce at root {root}"
    );
}

/// `ncclRedOpCreatePreMulSum` through the exports: each rank with its own scalar, an int32
/// operator with host-immediate scalars (all-reduce out of place, reduce at the last rank)
/// and a float32 one with device scalars written after the operator was created (the
/// kernel reads them when it runs; reduce-scatter in place, all-reduce in place), all in
/// one group; then the refusals: another type, another rank's communicator, after destroy.
fn premul_sum_on(ranks: &[Rank]) {
    let n = ranks.len();
    let count = 3_001usize;
    let inputs: Vec<Vec<i32>> = (0..n).map(|r| input(r, count * n, 3)).collect();
    // Different per rank: odd integers, some negative; powers of two for floats (exact).
    let int_scalar = |r: usize| {
        if r % 2 == 1 {
            -(r as i32) - 2
        } else {
            r as i32 + 3
        }
    };
    let float_scalar = |r: usize| [0.5f32, 2.0, 0.25, 4.0][r % 4];
    let mut int_ops = vec![0 as c_int; n];
    let mut float_ops = vec![0 as c_int; n];
    let scalars: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(4)).collect();
    for (r, rank) in ranks.iter().enumerate() {
        let mut s = int_scalar(r);
        // SAFETY: a valid out-pointer; the host scalar is read now.
        ok(
            unsafe {
                ncclRedOpCreatePreMulSum(
                    &mut int_ops[r],
                    (&mut s as *mut i32).cast(),
                    INT32,
                    SCALAR_HOST_IMMEDIATE,
                    rank.comm,
                )
            },
            "ncclRedOpCreatePreMulSum (int32, host)",
        );
        // SAFETY: a valid out-pointer; the device scalar is only recorded.
        ok(
            unsafe {
                ncclRedOpCreatePreMulSum(
                    &mut float_ops[r],
                    scalars[r].ptr() as *mut c_void,
                    FLOAT32,
                    SCALAR_DEVICE,
                    rank.comm,
                )
            },
            "ncclRedOpCreatePreMulSum (float32, device)",
        );
        assert!(
            int_ops[r] >= 5 && float_ops[r] >= 5,
            "operators follow ncclNumOps"
        );
        // After creation: the value the kernels must see.
        upload_i32(&scalars[r], &[float_scalar(r).to_bits() as i32]);
    }
    let send: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let ar: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let rd: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let rs: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * n * 4)).collect();
    let arf: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let as_f32 =
        |v: &[i32]| -> Vec<i32> { v.iter().map(|&x| (x as f32).to_bits() as i32).collect() };
    for r in 0..n {
        upload_i32(&send[r], &inputs[r][..count]);
        upload_i32(&rs[r], &as_f32(&inputs[r]));
        upload_i32(&arf[r], &as_f32(&inputs[r][..count]));
    }
    let at = |b: &DeviceBuffer, elems: usize| (b.ptr() + (elems * 4) as u64) as *mut c_void;
    let root = n - 1;
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks.iter().enumerate() {
        let (c, s) = (rank.comm, rank.s());
        ok(
            ncclAllReduce(
                at(&send[r], 0),
                at(&ar[r], 0),
                count,
                INT32,
                int_ops[r],
                c,
                s,
            ),
            "ncclAllReduce (PreMulSum int32)",
        );
        ok(
            ncclReduce(
                at(&send[r], 0),
                at(&rd[r], 0),
                count,
                INT32,
                int_ops[r],
                root as c_int,
                c,
                s,
            ),
            "ncclReduce (PreMulSum int32)",
        );
        ok(
            ncclReduceScatter(
                at(&rs[r], 0),
                at(&rs[r], r * count),
                count,
                FLOAT32,
                float_ops[r],
                c,
                s,
            ),
            "ncclReduceScatter in place (PreMulSum float32, device scalar)",
        );
        ok(
            ncclAllReduce(
                at(&arf[r], 0),
                at(&arf[r], 0),
                count,
                FLOAT32,
                float_ops[r],
                c,
                s,
            ),
            "ncclAllReduce in place (PreMulSum float32, device scalar)",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (PreMulSum)");
    for rank in ranks {
        rank.stream.synchronize().expect("stream");
    }
    let int_want: Vec<i32> = (0..count)
        .map(|i| {
            (0..n).fold(0i32, |acc, r| {
                acc.wrapping_add(inputs[r][i].wrapping_mul(int_scalar(r)))
            })
        })
        .collect();
    let float_want = |b: usize| -> Vec<i32> {
        (0..count)
            .map(|i| {
                let v: f32 = (0..n)
                    .map(|r| inputs[r][b * count + i] as f32 * float_scalar(r))
                    .sum();
                v.to_bits() as i32
            })
            .collect()
    };
    for r in 0..n {
        assert_eq!(
            download_i32(&ar[r], count),
            int_want,
            "PreMulSum all-reduce, rank {r}"
        );
        let got = download_i32(&rs[r], count * n);
        assert_eq!(
            got[r * count..(r + 1) * count].to_vec(),
            float_want(r),
            "PreMulSum reduce-scatter in place, rank {r}"
        );
        assert_eq!(
            download_i32(&arf[r], count),
            float_want(0),
            "PreMulSum all-reduce in place, rank {r}"
        );
    }
    assert_eq!(
        download_i32(&rd[root], count),
        int_want,
        "PreMulSum reduce at {root}"
    );

    // Refusals, outside a group so that each call returns its own error.
    let (c0, s0) = (ranks[0].comm, ranks[0].s());
    let refused = |rc: i32, what: &str, needle: &str| {
        assert_eq!(rc, NCCL_INVALID_ARGUMENT, "{what} returned {rc}");
        let e = nccl::boundary::last_error();
        assert!(e.contains(needle), "{what}: {e}");
    };
    refused(
        ncclAllReduce(
            at(&arf[0], 0),
            at(&arf[0], 0),
            count,
            FLOAT32,
            int_ops[0],
            c0,
            s0,
        ),
        "an int32 operator on float32 data",
        "created for",
    );
    if n > 1 {
        refused(
            ncclAllReduce(
                at(&ar[0], 0),
                at(&ar[0], 0),
                count,
                INT32,
                int_ops[1],
                c0,
                s0,
            ),
            "rank 1's operator on rank 0's communicator",
            "unknown to this communicator",
        );
        refused(
            ncclRedOpDestroy(int_ops[1], c0),
            "destroying rank 1's operator on rank 0's communicator",
            "unknown to this communicator",
        );
    }
    for (r, rank) in ranks.iter().enumerate() {
        ok(
            ncclRedOpDestroy(int_ops[r], rank.comm),
            "ncclRedOpDestroy (int32)",
        );
        ok(
            ncclRedOpDestroy(float_ops[r], rank.comm),
            "ncclRedOpDestroy (float32)",
        );
    }
    refused(
        ncclAllReduce(
            at(&ar[0], 0),
            at(&ar[0], 0),
            count,
            INT32,
            int_ops[0],
            c0,
            s0,
        ),
        "a destroyed operator",
        "destroyed",
    );
    refused(
        ncclRedOpDestroy(int_ops[0], c0),
        "a second destroy",
        "destroyed",
    );
}

/// `ncclGroupSimulateEnd` costs a group's calls without running them (PyTorch's
/// `_time_estimator`): an all-reduce and a send/receive pair per rank get a positive
/// estimate, larger for a larger all-reduce, and the output buffers keep their poison.
fn simulate_on(ranks: &[Rank]) {
    let n = ranks.len();
    let estimate = |count: usize, out: &[DeviceBuffer]| -> f32 {
        let mut sim = NcclSimInfo::default();
        ok(ncclGroupStart(), "ncclGroupStart");
        for (r, rank) in ranks.iter().enumerate() {
            let p = out[r].ptr() as *mut c_void;
            // The buffers hold `count` int32 elements and outlive the group.
            ok(
                ncclAllReduce(p, p, count, 2, 0, rank.comm, rank.s()),
                "ncclAllReduce (simulated)",
            );
            let peer = ((r + 1) % n) as c_int;
            ok(
                ncclSend(p, count, 2, peer, rank.comm, rank.s()),
                "ncclSend (simulated)",
            );
            let from = ((r + n - 1) % n) as c_int;
            ok(
                ncclRecv(p, count, 2, from, rank.comm, rank.s()),
                "ncclRecv (simulated)",
            );
        }
        // SAFETY: a whole ncclSimInfo_t.
        ok(
            unsafe { ncclGroupSimulateEnd((&mut sim as *mut NcclSimInfo).cast()) },
            "ncclGroupSimulateEnd",
        );
        sim.estimated_time
    };
    let count = 1 << 20;
    let out: Vec<DeviceBuffer> = ranks.iter().map(|r| r.buffer(count * 4)).collect();
    let poison = vec![0x5a5a_5a5a_i32; count];
    for b in &out {
        upload_i32(b, &poison);
    }
    let small = estimate(1000, &out);
    let large = estimate(count, &out);
    assert!(
        small > 0.0 && large > small,
        "estimates {small} us and {large} us"
    );
    for r in ranks {
        r.stream.synchronize().unwrap();
    }
    for (r, b) in out.iter().enumerate() {
        assert!(
            download_i32(b, count) == poison,
            "rank {r}: a simulated group wrote its output"
        );
    }
    eprintln!("simulated: 1000 elements {small} us, {count} elements {large} us");
}

/// `ncclCommShrink` without the last rank (which does not call it): the survivors, each on
/// its own thread (their new communicator's init waits for all of them), get a
/// communicator of one rank fewer, ranked in parent order, whose all-reduce is every
/// survivor's sum, checked element by element. `flags` is NCCL_SHRINK_DEFAULT (0) or
/// NCCL_SHRINK_ABORT (1: the parent is unusable afterwards).
fn shrink_on(ranks: &[Rank], flags: c_int) {
    let n = ranks.len();
    let survivors = n - 1;
    let count = 10_001usize;
    let exclude = [(n - 1) as c_int];
    let shrunk: Vec<usize> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks[..survivors]
            .iter()
            .map(|rank| {
                let comm = rank.comm as usize;
                let ctx = rank.ctx.clone();
                let mut exclude = exclude;
                scope.spawn(move || {
                    ctx.bind().unwrap();
                    let mut out: NcclComm = std::ptr::null_mut();
                    // SAFETY: one rank to exclude; `out` is writable; NULL config.
                    let rc = unsafe {
                        ncclCommShrink(
                            comm as NcclComm,
                            exclude.as_mut_ptr(),
                            1,
                            &mut out,
                            std::ptr::null_mut(),
                            flags,
                        )
                    };
                    ok(rc, "ncclCommShrink");
                    out as usize
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, &c) in shrunk.iter().enumerate() {
        let (mut count, mut rank) = (0, 0);
        // SAFETY: valid out-pointers.
        ok(
            unsafe { ncclCommCount(c as NcclComm, &mut count) },
            "ncclCommCount",
        );
        // SAFETY: as above.
        ok(
            unsafe { ncclCommUserRank(c as NcclComm, &mut rank) },
            "ncclCommUserRank",
        );
        assert_eq!((count as usize, rank as usize), (survivors, r));
    }
    let inputs: Vec<Vec<i32>> = (0..survivors).map(|r| input(r, count, 9)).collect();
    let bufs: Vec<DeviceBuffer> = ranks[..survivors]
        .iter()
        .map(|r| r.buffer(count * 4))
        .collect();
    let outs: Vec<DeviceBuffer> = ranks[..survivors]
        .iter()
        .map(|r| r.buffer(count * 4))
        .collect();
    for (b, v) in bufs.iter().zip(&inputs) {
        upload_i32(b, v);
    }
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, rank) in ranks[..survivors].iter().enumerate() {
        let (send, recv) = (bufs[r].ptr() as *mut c_void, outs[r].ptr() as *mut c_void);
        ok(
            ncclAllReduce(send, recv, count, 2, 0, shrunk[r] as NcclComm, rank.s()),
            "ncclAllReduce on the shrunk communicator",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd");
    let want: Vec<i32> = (0..count)
        .map(|i| inputs.iter().map(|v| v[i]).sum())
        .collect();
    for (r, rank) in ranks[..survivors].iter().enumerate() {
        rank.stream.synchronize().unwrap();
        let got = download_i32(&outs[r], count);
        let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong, 0,
            "rank {r} of the shrunk communicator: {wrong} wrong"
        );
        ok(
            ncclCommDestroy(shrunk[r] as NcclComm),
            "ncclCommDestroy (shrunk)",
        );
    }
    eprintln!("shrunk {n} ranks to {survivors} (flags {flags}): all-reduce of {count} right");
}

fn ranks_from(comms: Vec<NcclComm>, devices: &[usize]) -> Vec<Rank> {
    comms
        .into_iter()
        .zip(devices)
        .enumerate()
        .map(|(r, (comm, &d))| {
            let (mut count, mut rank, mut dev) = (0, 0, 0);
            // SAFETY: valid out-pointers.
            ok(unsafe { ncclCommCount(comm, &mut count) }, "ncclCommCount");
            // SAFETY: as above.
            ok(
                unsafe { ncclCommUserRank(comm, &mut rank) },
                "ncclCommUserRank",
            );
            // SAFETY: as above.
            ok(
                unsafe { ncclCommCuDevice(comm, &mut dev) },
                "ncclCommCuDevice",
            );
            assert_eq!(
                (count as usize, rank as usize, dev as usize),
                (devices.len(), r, d)
            );
            let ctx = Context::primary(Device::get(d).expect("device")).expect("context");
            let stream = Stream::new(&ctx).expect("stream");
            Rank { comm, ctx, stream }
        })
        .collect()
}

fn destroy(ranks: Vec<Rank>) {
    for r in ranks {
        ok(ncclCommDestroy(r.comm), "ncclCommDestroy");
    }
}

/// One communicator per GPU of `devices`, by ncclCommInitAll.
fn init_all(devices: &[usize]) -> Vec<Rank> {
    let n = devices.len();
    let list: Vec<c_int> = devices.iter().map(|&d| d as c_int).collect();
    let mut comms = vec![std::ptr::null_mut(); n];
    // SAFETY: n handles and n device numbers.
    ok(
        unsafe { ncclCommInitAll(comms.as_mut_ptr(), n as c_int, list.as_ptr()) },
        "ncclCommInitAll",
    );
    ranks_from(comms, devices)
}

#[test]
fn every_call_through_comm_init_all() {
    let Some(devices) = rank_devices() else {
        return;
    };
    let ranks = init_all(&devices);
    every_call_on(&ranks);
    many_sends_per_peer_on(&ranks);
    in_place_on(&ranks);
    premul_sum_on(&ranks);
    simulate_on(&ranks);
    shrink_on(&ranks, 0);
    destroy(ranks);
}

/// NCCL 2.28's `ncclCommRevoke`: rank 0 alone enters an all-reduce the others never join
/// (its kernel waits on them); revoking it from the host returns promptly, the kernel is
/// gone, the communicator reports no error but refuses more calls and finalize; the others
/// are revoked too (nothing in flight there), and the survivors of a shrink of the revoked
/// communicators run a correct all-reduce.
#[test]
fn revoke_ends_a_call_no_peer_joined_and_shrink_goes_on() {
    let Some(devices) = rank_devices() else {
        return;
    };
    let ranks = init_all(&devices);
    let count = 4096usize;
    let buf = ranks[0].buffer(count * 4);
    let p = buf.ptr() as *mut c_void;
    ranks[0].ctx.bind().unwrap();
    ok(
        ncclAllReduce(p, p, count, 2, 0, ranks[0].comm, ranks[0].s()),
        "ncclAllReduce on rank 0 alone",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    ok(
        ncclCommRevoke(ranks[0].comm, REVOKE_DEFAULT),
        "ncclCommRevoke",
    );
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "revoke took {took:?}"
    );
    ranks[0]
        .stream
        .synchronize()
        .expect("the revoked kernel has ended");
    let mut state = -1;
    // SAFETY: a valid out-pointer.
    ok(
        unsafe { ncclCommGetAsyncError(ranks[0].comm, &mut state) },
        "ncclCommGetAsyncError",
    );
    assert_eq!(
        state, NCCL_SUCCESS,
        "a revoked communicator reports no error"
    );
    assert_eq!(
        ncclAllReduce(p, p, count, 2, 0, ranks[0].comm, ranks[0].s()),
        NCCL_INVALID_USAGE
    );
    assert_eq!(ncclCommFinalize(ranks[0].comm), NCCL_INVALID_ARGUMENT);
    assert_eq!(
        ncclCommRevoke(ranks[0].comm, REVOKE_DEFAULT),
        NCCL_INVALID_ARGUMENT
    );
    for r in &ranks[1..] {
        r.ctx.bind().unwrap();
        ok(
            ncclCommRevoke(r.comm, REVOKE_DEFAULT),
            "ncclCommRevoke (idle)",
        );
    }
    eprintln!("revoked rank 0's stuck all-reduce in {took:?}");
    shrink_on(&ranks, 0);
    destroy(ranks);
}

/// A fresh `ncclGetUniqueId`.
fn unique_id() -> NcclUniqueId {
    let mut id = NcclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    ok(unsafe { ncclGetUniqueId(&mut id) }, "ncclGetUniqueId");
    id
}

/// `cudaSetDevice`'s effect: GPU `d`'s primary context current on this thread.
fn set_device(d: usize) {
    Context::primary(Device::get(d).unwrap())
        .unwrap()
        .bind()
        .unwrap();
}

/// Non-blocking communicators (`ncclConfig_t.blocking` 0, issue 26): one thread inits
/// every rank without a group, each `ncclCommInitRankConfig` returning `ncclInProgress` at
/// once (the ranks wait for each other in the background), then polls
/// `ncclCommGetAsyncError` until each says `ncclSuccess`, as NCCL's examples do; the
/// communicators then run every call.
#[test]
fn non_blocking_inits_return_in_progress_and_complete() {
    let Some(devices) = rank_devices() else {
        return;
    };
    let n = devices.len();
    let id = unique_id();
    let mut comms = vec![std::ptr::null_mut(); n];
    for (r, &d) in devices.iter().enumerate() {
        set_device(d);
        let mut config = nccl::config::NcclConfig {
            blocking: 0,
            ..Default::default()
        };
        // SAFETY: valid pointers; the config made as NCCL_CONFIG_INITIALIZER.
        let rc = unsafe {
            ncclCommInitRankConfig(&mut comms[r], n as c_int, id, r as c_int, &mut config)
        };
        assert_eq!(rc, NCCL_IN_PROGRESS, "rank {r}: ncclCommInitRankConfig");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for (r, &comm) in comms.iter().enumerate() {
        loop {
            let mut state = NCCL_IN_PROGRESS;
            // SAFETY: a valid out-pointer.
            ok(
                unsafe { ncclCommGetAsyncError(comm, &mut state) },
                "ncclCommGetAsyncError",
            );
            if state == NCCL_SUCCESS {
                break;
            }
            assert_eq!(state, NCCL_IN_PROGRESS, "rank {r}'s init failed");
            assert!(
                std::time::Instant::now() < deadline,
                "rank {r}'s init still in progress after 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let ranks = ranks_from(comms, &devices);
    every_call_on(&ranks);
    destroy(ranks);
}

#[test]
fn every_call_through_comm_init_rank_in_a_group() {
    let Some(devices) = rank_devices() else {
        return;
    };
    let n = devices.len();
    let id = unique_id();
    let mut comms = vec![std::ptr::null_mut(); n];
    ok(ncclGroupStart(), "ncclGroupStart");
    for (r, &d) in devices.iter().enumerate() {
        set_device(d);
        // SAFETY: a valid out-pointer.
        ok(
            unsafe { ncclCommInitRank(&mut comms[r], n as c_int, id, r as c_int) },
            "ncclCommInitRank",
        );
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (init)");
    let ranks = ranks_from(comms, &devices);
    every_call_on(&ranks);
    many_sends_per_peer_on(&ranks);
    in_place_on(&ranks);
    premul_sum_on(&ranks);
    // Last: NCCL_SHRINK_ABORT leaves the parents unusable.
    shrink_on(&ranks, 1);
    destroy(ranks);
}
