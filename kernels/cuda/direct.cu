// One-shot and two-shot all-reduce over peer-mapped windows: no ring, no FIFO, no host
// round trip. Every rank has a data window of weft_peer_work.window_bytes and a flag area,
// both mapped into every rank's process (peer_data[r], peer_flags[r]). One block per
// channel: block c takes its part of the call (core::nvls::channel_part's split) and its own
// slice of every window (the c-th of nchannels equal slices), and goes through its part in
// rounds of one slice, synchronising with block c of every other rank through flags, never
// with the other blocks. The slices are fixed for the whole call because blocks run at
// their own pace: a block in its next round must not write a window byte that a slower
// block's peers still read (a split recomputed per round, shorter in the last round, did
// that: found on an H100, 2026-11-25, as wrong sums in calls of several rounds).
//
// One-shot, LL form (used whenever the window is large enough, see below): no barrier and
//   no fence at all. A system-scope fence or release store costs microseconds on Hopper,
//   and the barrier form's four of them per call were most of its 14.6 us on two H100
//   (2026-11-25); NCCL's LL ring (6.6 us) has none. Each rank stores its input, as LL pairs
//   (ll_pair.cuh: 8 data bytes and the round's flag in one 16-byte store), straight into its
//   own sub-slot of every peer's window, then polls the pairs the peers stored into its own
//   window and reduces them (rank order 0..n-1 on every rank, so all ranks get the same
//   bits) into its output.
//   Layout: block c always uses lane c of the window (LANES equal lanes, whatever the call's
//   channel count, so a lane is only ever used by one block index and its epochs grow
//   without gaps on every rank); a lane is two halves (the epoch's parity), each of nranks
//   sub-slots of lane_pairs pairs (sub-slot r: what rank r stored).
//   Why a half can be reused without a barrier: every thread t moves the same pairs
//   (t, t + THREADS, ...) in every round, and at least pair t (rounds move at least THREADS
//   pairs, padding included). Rank A's thread t writes round e + 1 into half (e + 1) % 2 of
//   peer P only after it read P's pair t of round e, which P's thread t stored after it had
//   read all its pairs of round e - 1, the last round that used that half for those pairs.
//   Across calls the same holds: the lane's epochs continue (weft_peer_work.steps).
//   Flags are the epoch + 1 in 32 bits (ll_flag); every 2^31 epochs a round stores every
//   pair of its sub-slots (ll_cleans, as NCCL's LL cleaning), so no pair is old enough for
//   its flag to come round again.
// One-shot, barrier form (a window too small for the LL form's lanes): per round, copy my
//   input into my slice; barrier; read the slice from every rank's window, reduce (rank
//   order), write my output; barrier (nobody overwrites a window a peer still reads).
// Two-shot, per round:  the round is cut into n segments; copy my input into my slice;
//   barrier; reduce segment `rank` from every rank's slice (the reduce-scatter, by direct
//   reads) and store the result into every rank's slice at the same place (the all-gather,
//   by direct writes: only rank s touches segment s between the two barriers, so this
//   overwrites nothing anyone still reads); barrier; copy my slice to my output. The next
//   round's copy-in only touches my own slice and peers write into it only after the next
//   first barrier, so two barriers per round suffice.
//
// A barrier on channel c with epoch e: store e (release, system scope) into flag `rank` of
// channel c in every rank's flag area, then wait until my flag area holds at least e from
// every rank. Epochs only grow: the block starts from weft_peer_work.steps[c] (device
// memory, so CUDA graph replays count) and writes back the epochs it used. Every wait polls
// the abort flag and gives up after the communicator's timeout, naming the peer
// (WEFT_WAIT_PEER_FLAG).
//
// Every element type and operator of the ring kernels, with their exact semantics
// (reduce.cuh), Avg included.
#include "weft_abi.h"
#include "ring_program.cuh"
#include "reduce.cuh"
#include "sync.cuh"
#include "ll_pair.cuh"
#include "dtype.cuh"
#include "peer_layout.cuh"

#ifndef WEFT_THREADS
#define WEFT_THREADS 512
#endif

namespace weft {

constexpr int DTHREADS = WEFT_THREADS;

// Flag of rank `from` on channel `c` in the flag area at `area`.
__device__ __forceinline__ u64* peer_flag(u64 area, u32 c, int from) {
  return (u64*)(area + (u64)c * WEFT_PEER_FLAGS_STRIDE + (u64)from * 8);
}

// All ranks' block `c` meet here. False when the block must stop (abort or timeout).
__device__ bool barrier(const Block& b, const weft_peer_work& w, int rank, int nranks, u32 c,
                        u64 epoch, volatile int* stop) {
  if (threadIdx.x == 0) {
    // Every thread's stores to windows precede this: the __syncthreads below orders them
    // before thread 0's release stores, and the fence makes them visible system-wide.
    __threadfence_system();
    for (int p = 0; p < nranks; p++) store_release(peer_flag(w.peer_flags[p], c, rank), epoch);
    bool ok = true;
    for (int p = 0; p < nranks && ok; p++)
      ok = wait_for(b, peer_flag(w.peer_flags[rank], c, p), epoch, p, WEFT_WAIT_PEER_FLAG, c);
    *stop = ok ? 0 : 1;
  }
  __syncthreads();
  return *stop == 0;
}

// dst[i] = src[i] for n elements; `volatile_src`: src was written by another GPU.
template <bool VOLATILE_SRC>
__device__ void copy_elems(const T* src, T* dst, u64 n) {
  constexpr u64 PER_PACK = 16 / sizeof(T);
  const bool aligned = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0;
  const u64 npacks = aligned ? n / PER_PACK : 0;
  for (u64 p = threadIdx.x; p < npacks; p += DTHREADS) {
    uint4 v = VOLATILE_SRC ? load_volatile16((const uint4*)src + p) : ((const uint4*)src)[p];
    ((uint4*)dst)[p] = v;
  }
  for (u64 i = npacks * PER_PACK + threadIdx.x; i < n; i += DTHREADS)
    dst[i] = VOLATILE_SRC ? load_volatile_elem(src + i) : src[i];
}

// out[i] = finish(win_0[i] OP ... OP win_{n-1}[i]) for `len` elements at element offset
// `off` of every rank's window (each rank pre-multiplied its own input on the way in:
// pre_copy); with `scatter_back`, the result is also stored into every rank's window at the
// same place (two-shot's all-gather).
template <int OP>
__device__ void reduce_windows(const Reduction<T, OP>& red, const weft_peer_work& w, int nranks,
                               u64 off, u64 len, T* out, bool scatter_back) {
  constexpr u64 PER_PACK = 16 / sizeof(T);
  union Pack {
    uint4 v;
    T e[PER_PACK];
  };
  // Windows are 16-byte aligned allocations and `off` a multiple of 16 bytes (the channel
  // and segment splits align to 16 bytes): whole packs, then the last elements.
  const u64 npacks = len / PER_PACK;
  for (u64 p = threadIdx.x; p < npacks; p += DTHREADS) {
    Pack acc;
    acc.v = load_volatile16((const T*)w.peer_data[0] + off + p * PER_PACK);
    for (int r = 1; r < nranks; r++) {
      Pack x;
      x.v = load_volatile16((const T*)w.peer_data[r] + off + p * PER_PACK);
#pragma unroll
      for (u64 j = 0; j < PER_PACK; j++) acc.e[j] = red.combine(acc.e[j], x.e[j]);
    }
#pragma unroll
    for (u64 j = 0; j < PER_PACK; j++) acc.e[j] = red.finish(acc.e[j]);
    if (out != nullptr) {
      // The output may be misaligned: element stores.
#pragma unroll
      for (u64 j = 0; j < PER_PACK; j++) out[p * PER_PACK + j] = acc.e[j];
    }
    if (scatter_back)
      for (int r = 0; r < nranks; r++) ((uint4*)((T*)w.peer_data[r] + off))[p] = acc.v;
  }
  for (u64 i = npacks * PER_PACK + threadIdx.x; i < len; i += DTHREADS) {
    T v = load_volatile_elem((const T*)w.peer_data[0] + off + i);
    for (int r = 1; r < nranks; r++)
      v = red.combine(v, load_volatile_elem((const T*)w.peer_data[r] + off + i));
    v = red.finish(v);
    if (out != nullptr) out[i] = v;
    if (scatter_back)
      for (int r = 0; r < nranks; r++) ((T*)w.peer_data[r])[off + i] = v;
  }
}

__device__ __forceinline__ void channel_part(u64 count, u32 nch, u32 c, u64* start, u64* len) {
  peer_channel_part(count, sizeof(T), nch, c, start, len);
}

// The LL one-shot's lanes (see the top of this file); the host gives a call at most this
// many channels (RegionPlan::channels).
constexpr u32 LL_LANES = WEFT_PEER_LANES;

// Pairs of one rank's sub-slot in a lane, or 0 where the window is too small for the LL form
// (every thread must own at least one pair of every sub-slot).
__device__ __forceinline__ u64 ll_lane_pairs(u64 window_bytes, int nranks) {
  const u64 pairs = window_bytes / LL_LANES / 16 / 2 / (u64)nranks;
  return pairs >= (u64)DTHREADS ? pairs : 0;
}

// The one-shot all-reduce in its LL form, for part `part` of the call on lane c (block c).
// `epoch` is the lane's, advanced once per round. False when the block must stop.
template <int OP>
__device__ bool ll_one_shot(const Block& b, const Reduction<T, OP>& red, const weft_peer_work& w,
                            int rank, int nranks, u32 c, u32 part, u64 lane_pairs, u64* epoch) {
  __shared__ int stop, failed;
  constexpr int EPL = 8 / sizeof(T);
  if (threadIdx.x == 0) stop = failed = 0;
  __syncthreads();
  const LlStop halt{&stop, &failed};
  const u64 lane_u64s = lane_pairs * 2 * 2 * (u64)nranks;  // two halves of nranks sub-slots
  const T* in = (const T*)w.send_buff;
  T* out = (T*)w.recv_buff;
  u64 part_start, part_len;
  channel_part(w.count, w.nchannels, part, &part_start, &part_len);
  const u64 round_elems = lane_pairs * EPL;
  for (u64 done = 0; done < part_len; done += round_elems) {
    const u64 n = min_u64(round_elems, part_len - done);
    const u64 e = ++*epoch;
    const u32 flag = ll_flag(e);
    const u64 npairs = ll_pairs_for(n * sizeof(T));
    const u64 moved = ll_cleans(e) ? lane_pairs : (npairs > (u64)DTHREADS ? npairs : (u64)DTHREADS);
    const u64 half = e & 1;
    const T* src = in + part_start + done;
    T* dst = out + part_start + done;
    // Pair i of rank `from`'s sub-slot of this round's half, in rank p's window.
    auto pair_at = [&](int p, int from, u64 i) -> u64* {
      return (u64*)w.peer_data[p] + (u64)c * lane_u64s + ((half * nranks + from) * lane_pairs + i) * 2;
    };
    // My pair i (pre-multiplied where the operator says so), zero past the message.
    auto mine = [&](u64 i) {
      LlPair<T> v;
      v.bits = 0;
      if (i < npairs) {
        const u64 first = i * EPL;
        const int cnt = (int)min_u64(n - first, (u64)EPL);
        ll_read_elems(v, src + first, cnt);
#pragma unroll
        for (int j = 0; j < EPL; j++)
          if (j < cnt) v.e[j] = red.pre(v.e[j]);
      }
      return v;
    };
    for (u64 i = threadIdx.x; i < moved; i += DTHREADS) {
      const LlPair<T> v = mine(i);
      for (int p = 0; p < nranks; p++)
        if (p != rank) ll_store(pair_at(p, rank, i), v.bits, flag);
    }
    // Whether this thread stopped (its wait gave up, or saw another's give up).
    int broke = 0;
    for (u64 i = threadIdx.x; i < moved && !broke; i += DTHREADS) {
      LlPair<T> acc;
      for (int p = 0; p < nranks; p++) {
        LlPair<T> x;
        if (p == rank) {
          x = mine(i);
        } else if (!ll_load(b, pair_at(rank, p, i), flag, &x.bits, p, WEFT_WAIT_PEER_FLAG, e, c,
                            halt)) {
          broke = 1;
          break;
        }
        if (p == 0) {
          acc = x;
        } else {
#pragma unroll
          for (int j = 0; j < EPL; j++) acc.e[j] = red.combine(acc.e[j], x.e[j]);
        }
      }
      if (broke) break;
      if (i < npairs) {
#pragma unroll
        for (int j = 0; j < EPL; j++) acc.e[j] = red.finish(acc.e[j]);
        const u64 first = i * EPL;
        ll_write_elems(dst + first, acc, (int)min_u64(n - first, (u64)EPL));
      }
    }
    // Every thread leaves the round here together: one that stopped tells all (a read of
    // `failed` after a plain barrier could miss a give-up already in the next round).
    if (__syncthreads_or(broke)) return false;
  }
  return true;
}

template <int OP>
__device__ bool direct_all_reduce(const weft_peer_work& w) {
  __shared__ int stop;
  const weft_dev_comm* comm = (const weft_dev_comm*)w.comm;
  const int rank = comm->rank;
  const int nranks = comm->nranks;
  // Block c: lane c and steps[c]; its part of the call is c - lane_lo (lane_lo is 0 but for
  // the LL one-shot's fused calls, which the host spreads over the lanes).
  const u32 c = blockIdx.x;
  const u32 part = c - w.lane_lo;
  Block b;
  b.comm = comm;
  b.abort_flag = (volatile u32*)comm->abort_flag;
  b.fault = (weft_kernel_fault*)comm->fault;
  b.fault_index = blockIdx.x;
  Reduction<T, OP> red;
  red.init(w.red_op_arg, w.red_op_flags, (u64)nranks);
  u64* steps = (u64*)w.steps + c;
  u64 epoch = *steps;
  const T* in = (const T*)w.send_buff;
  T* out = (T*)w.recv_buff;
  const bool two_shot = w.algorithm == WEFT_PEER_ALGO_TWO_SHOT;
  const u64 align = align_elems(sizeof(T));
  // This block's slice of every window (16-byte aligned, as reduce_windows needs) and its
  // part of the call.
  const u64 slice_elems = w.window_bytes / sizeof(T) / w.nchannels / align * align;
  if (slice_elems == 0 || nranks > WEFT_PEER_MAX_RANKS) return true;  // the host refuses these
  if (!two_shot && w.nchannels <= LL_LANES) {
    const u64 lane_pairs = ll_lane_pairs(w.window_bytes, nranks);
    if (lane_pairs != 0) {
      const bool ok = ll_one_shot<OP>(b, red, w, rank, nranks, c, part, lane_pairs, &epoch);
      if (ok && threadIdx.x == 0) *steps = epoch;
      return ok;
    }
  }
  const u64 slice = (u64)part * slice_elems;
  T* mine = (T*)w.peer_data[rank] + slice;
  u64 part_start, part_len;
  channel_part(w.count, w.nchannels, part, &part_start, &part_len);
  for (u64 done = 0; done < part_len; done += slice_elems) {
    const u64 n = min_u64(slice_elems, part_len - done);
    const T* src = in + part_start + done;
    T* dst = out + part_start + done;
    pre_copy<T, OP>(red, src, mine, n, threadIdx.x, DTHREADS);
    __syncthreads();
    if (!barrier(b, w, rank, nranks, c, ++epoch, &stop)) return false;
    if (!two_shot) {
      reduce_windows<OP>(red, w, nranks, slice, n, dst, false);
      __syncthreads();
      if (!barrier(b, w, rank, nranks, c, ++epoch, &stop)) return false;
    } else {
      // Segment `rank` of the round: [g0, g0 + glen) of the slice.
      const u64 seg = align_up(div_up(n, (u64)nranks), align);
      const u64 g0 = min_u64((u64)rank * seg, n), glen = min_u64(seg, n - g0);
      reduce_windows<OP>(red, w, nranks, slice + g0, glen, nullptr, true);
      __syncthreads();
      if (!barrier(b, w, rank, nranks, c, ++epoch, &stop)) return false;
      copy_elems<true>(mine, dst, n);
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) *steps = epoch;
  return true;
}

// A launch's all-reduces (a fused group, or one call): block c runs, in order, the works
// whose lanes (lane_lo to lane_lo + nchannels - 1) include c. The LL one-shot's works are
// spread over the lanes by the host (each lane is its own: block c only ever touches lane
// c of the windows), so a group's small all-reduces run side by side. The barrier form and
// two-shot start every work at lane 0 with the same channel count (the host's rule): their
// window slices depend on the count, and a block must not write a slice that another
// block of the previous work may still be using on a peer. Each work starts from the epoch
// the previous one on this lane left in steps[c] (written and read again by this block, a
// barrier between).
template <int OP>
__device__ void direct_launch(const weft_peer_batch& batch) {
  for (u32 i = 0; i < batch.nworks && i < WEFT_PEER_BATCH_MAX; i++) {
    const u32 lo = batch.works[i].lane_lo;
    if (blockIdx.x < lo || blockIdx.x - lo >= batch.works[i].nchannels) continue;
    if (!direct_all_reduce<OP>(batch.works[i])) return;
    __syncthreads();
  }
}

}  // namespace weft

// One entry point per reduction: weft_peer_work.algorithm picks one-shot or two-shot.
// `__grid_constant__`: the works are read in place from the parameter space (see
// collectives.cu).
#define WEFT_DIRECT_ENTRY(name, op)                                                            \
  extern "C" __global__ void __launch_bounds__(WEFT_THREADS, 1)                              \
      name(const __grid_constant__ weft_peer_batch batch) {                                  \
    weft::direct_launch<op>(batch);                                                          \
  }
WEFT_DIRECT_ENTRY(weft_direct_sum, weft::OP_SUM)
WEFT_DIRECT_ENTRY(weft_direct_prod, weft::OP_PROD)
WEFT_DIRECT_ENTRY(weft_direct_max, weft::OP_MAX)
WEFT_DIRECT_ENTRY(weft_direct_min, weft::OP_MIN)
WEFT_DIRECT_ENTRY(weft_direct_avg, weft::OP_AVG)
