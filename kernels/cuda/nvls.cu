// NVLS (NVLink SHARP) all-reduce, reduce-scatter and all-gather for the ranks of one host,
// in NCCL's one-node shape (src/device/all_reduce.h, NCCL_ALGO_NVLS): one head per rank,
// and in each block three warp groups that run concurrently, each with its own waits:
//
//   scatter  copies this rank's input, chunk by chunk, into its own (unicast) scatter slot
//            of each head, and posts it;
//   reduce   (head `me` only) waits until every rank posted, reduces all ranks' copies of
//            its scatter slot with one multimem.ld_reduce per pack through the multicast
//            address, stores the result into every rank's broadcast slot with multimem.st,
//            frees the scatter slot and posts the broadcast;
//   gather   waits for each head's broadcast, copies it from its own (unicast) broadcast
//            slot to the output, and frees the slot.
//
// Reduce-scatter uses the same roles with the result kept local (head `me` reduces the
// chunks of its own output segment into its own broadcast slot, and only its own gather
// copies it out); all-gather has each rank scatter only its own chunk, and its reduce role
// store it with multimem.st to every rank (any element type: a store moves bits).
//
// The *unicast form* (WEFT_PEER_ALGO_NVLS_UNICAST) is the same algorithm with each multicast
// access replaced by one access per rank over peer-mapped memory (peer_data / peer_flags):
// the load-reduce by loads from every rank's copy reduced in rank order with weft's exact
// reductions (reduce.cuh: every type and operator, Avg included), the store by a store to
// every rank. It needs no multicast object: the form the shared GPU machines run.
//
// Memory: core::nvls::Layout (buffers per head, direction and channel of NVLS_STEPS slots of
// chunk_size bytes; counter blocks per head, direction and channel with one `posted` and one
// `freed` u64 per rank, each written only by that rank). Counters count steps and only grow;
// each block starts from weft_peer_work.steps[channel] and writes back what it used. Every
// wait polls the abort flag, gives up after the communicator's timeout and names the rank it
// waited on (WEFT_WAIT_NVLS_POSTED, WEFT_WAIT_NVLS_FREED).
#include "weft_abi.h"
#include "ring_program.cuh"
#include "reduce.cuh"
#include "sync.cuh"
#include "dtype.cuh"
#include "multimem.cuh"
#include "peer_layout.cuh"

#ifndef WEFT_THREADS
#define WEFT_THREADS 512
#endif

namespace weft {

constexpr int NTHREADS = WEFT_THREADS;
static_assert(NTHREADS % 32 == 0 && NTHREADS >= 256, "NVLS needs at least 8 warps per block");

struct Nvls {
  const weft_peer_work* w;
  Block b;
  int rank;
  int nranks;
  int me;  // this rank's head index, -1 if none
  u32 c;
  bool mc;
  u32 coll;
  u64 chunk_elems;
  u64 cstart;  // the channel's first element
  u64 ccount;  // the channel's elements
  u64 base;    // steps done before this launch

  __device__ u64 buffer(u32 h, u32 dir, u64 step) const {
    return nvls_slot(h, dir, w->layout_channels, c, w->chunk_size, step);
  }
  __device__ u64 counter(u32 h, u32 dir, bool posted, int of_rank) const {
    return nvls_counter(h, dir, w->layout_channels, c, posted, of_rank);
  }
  // This rank's own copy of a counter (unicast mapping).
  __device__ u64* mine(u64 off) const { return (u64*)(w->peer_flags[rank] + off); }
  // The multicast form reaches the same memory through two aliases (multicast and unicast
  // addresses): accesses through one are ordered with those through the other only across
  // fence.proxy.alias. Each role's threads execute it after a successful wait and before
  // the barrier that precedes a post; the posting / waiting thread once more around its
  // counter access (counters too are written through one alias and read through the other).
  __device__ void alias_fence() const {
#if __CUDA_ARCH__ >= 900
    if (mc) fence_proxy_alias();
#endif
  }
  // Sets a counter in every rank's copy.
  __device__ void post_all(u64 off, u64 v) const {
#if __CUDA_ARCH__ >= 900
    if (mc) {
      fence_proxy_alias();
      multimem_st_release(w->mc_credit + off, v);
      return;
    }
#endif
    for (int r = 0; r < nranks; r++) store_release((u64*)(w->peer_flags[r] + off), v);
  }
  __device__ void post_local(u64 off, u64 v) const {
    alias_fence();
    store_release(mine(off), v);
  }
  __device__ bool wait(u64 off, u64 need, int peer, u32 kind) const {
    const bool ok = wait_for(b, mine(off), need, peer, kind, c);
    if (ok) alias_fence();
    return ok;
  }
};

__device__ __forceinline__ void head_part(const Nvls& n, u64 s, u32 h, u64* start, u64* len) {
  nvls_head_part(n.coll == COLL_ALL_REDUCE, n.ccount, n.chunk_elems, n.w->nheads, sizeof(T), s, h,
                 start, len);
}

__device__ __forceinline__ u64 nloops(const Nvls& n) {
  return nvls_nloops(n.coll == COLL_ALL_REDUCE, n.ccount, n.chunk_elems, n.w->nheads);
}

__device__ __forceinline__ void role_sync(u32 id, u32 nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

// dst[i] = src[i], `tid` of `nth` threads; VOLATILE_SRC: another GPU wrote src.
template <bool VOLATILE_SRC>
__device__ void copy_part(const T* src, T* dst, u64 n, u32 tid, u32 nth) {
  constexpr u64 PER_PACK = 16 / sizeof(T);
  const bool aligned = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0;
  const u64 npacks = aligned ? n / PER_PACK : 0;
  for (u64 p = tid; p < npacks; p += nth)
    ((uint4*)dst)[p] = VOLATILE_SRC ? load_volatile16((const uint4*)src + p) : ((const uint4*)src)[p];
  for (u64 i = npacks * PER_PACK + tid; i < n; i += nth)
    dst[i] = VOLATILE_SRC ? load_volatile_elem(src + i) : src[i];
}

// Scatter: this rank's input chunks into its own scatter slot of each head, pre-multiplied
// (Avg, PreMulSum) with this rank's own factor (pre_copy says why here).
template <int OP>
__device__ void scatter_role(const Nvls& n, const Reduction<T, OP>& red, u32 tid, u32 nth,
                             volatile int* stop) {
  const T* in = (const T*)n.w->send_buff;
  const u64 loops = nloops(n);
  for (u64 s = 0; s < loops; s++) {
    const u64 step = n.base + s;
    for (u32 h = 0; h < n.w->nheads; h++) {
      if (n.coll == COLL_ALL_GATHER && (int)h != n.me) continue;
      const int head_rank = n.w->heads[h];
      if (tid == 0) {
        bool ok = step + 1 <= NVLS_STEPS ||
                  n.wait(n.counter(h, SCATTER, false, head_rank), step + 1 - NVLS_STEPS, head_rank,
                         WEFT_WAIT_NVLS_FREED);
        *stop = ok ? 0 : 1;
      }
      role_sync(1, nth);
      if (*stop) return;
      n.alias_fence();
      u64 start, len;
      head_part(n, s, h, &start, &len);
      // Reduce-scatter: head h's output segment of the input.
      const u64 seg = n.coll == COLL_REDUCE_SCATTER ? (u64)head_rank * n.w->count : 0;
      T* slot = (T*)(n.w->peer_data[n.rank] + n.buffer(h, SCATTER, step));
      pre_copy<T, OP>(red, in + seg + n.cstart + start, slot, len, tid, nth);
      n.alias_fence();
      role_sync(1, nth);
      if (tid == 0) {
        __threadfence_system();
        const u64 off = n.counter(h, SCATTER, true, n.rank);
        if (n.coll == COLL_ALL_GATHER)
          n.post_local(off, step + 1);
        else
          n.post_all(off, step + 1);
      }
    }
  }
}

// The reduction of every rank's copy of the 16-byte pack at `off` (unicast form); each rank
// pre-multiplied its copy when it scattered it.
template <int OP>
__device__ __forceinline__ uint4 unicast_load_reduce(const Nvls& n, const Reduction<T, OP>& red,
                                                     u64 off) {
  constexpr u64 PER_PACK = 16 / sizeof(T);
  union Pack {
    uint4 v;
    T e[PER_PACK];
  } acc, x;
  acc.v = load_volatile16((const void*)(n.w->peer_data[0] + off));
  for (int r = 1; r < n.nranks; r++) {
    x.v = load_volatile16((const void*)(n.w->peer_data[r] + off));
#pragma unroll
    for (u64 j = 0; j < PER_PACK; j++) acc.e[j] = red.combine(acc.e[j], x.e[j]);
  }
#pragma unroll
  for (u64 j = 0; j < PER_PACK; j++) acc.e[j] = red.finish(acc.e[j]);
  return acc.v;
}

// Reduce (head `me`): load-reduce the scatter slot, store the broadcast slot.
template <int OP>
__device__ void reduce_role(const Nvls& n, const Reduction<T, OP>& red, u32 tid, u32 nth,
                            volatile int* stop) {
  const u32 me = (u32)n.me;
  const u64 loops = nloops(n);
  const bool ag = n.coll == COLL_ALL_GATHER;
  const bool rs = n.coll == COLL_REDUCE_SCATTER;
  for (u64 s = 0; s < loops; s++) {
    const u64 step = n.base + s;
    if (tid == 0) {
      bool ok = true;
      // Every rank's chunk is in its scatter slot (all-gather: only this rank's).
      for (int r = 0; r < n.nranks && ok; r++) {
        if (ag && r != n.rank) continue;
        ok = n.wait(n.counter(me, SCATTER, true, r), step + 1, r, WEFT_WAIT_NVLS_POSTED);
      }
      // Every rank that reads the broadcast slot has finished with its previous use.
      for (int r = 0; r < n.nranks && ok && step + 1 > NVLS_STEPS; r++) {
        if (rs && r != n.rank) continue;
        ok = n.wait(n.counter(me, BROADCAST, false, r), step + 1 - NVLS_STEPS, r,
                    WEFT_WAIT_NVLS_FREED);
      }
      *stop = ok ? 0 : 1;
    }
    role_sync(3, nth);
    if (*stop) return;
    n.alias_fence();
    u64 start, len;
    head_part(n, s, me, &start, &len);
    const u64 npacks = div_up(len * sizeof(T), 16);
    const u64 src = n.buffer(me, SCATTER, step);
    const u64 dst = n.buffer(me, BROADCAST, step);
    for (u64 p = tid; p < npacks; p += nth) {
      uint4 v;
      v.x = v.y = v.z = v.w = 0;
      if (ag) {
        v = load_volatile16((const void*)(n.w->peer_data[n.rank] + src + 16 * p));
      } else if (n.mc) {
#if __CUDA_ARCH__ >= 900
        // Only the types and operators the hardware reduces have a MultimemLoad; the
        // kernel's entry refused the others.
        if constexpr (MultimemOk<T, OP>::value) v = MultimemLoad<T, OP>::load(n.w->mc_data + src + 16 * p);
#endif
      } else {
        v = unicast_load_reduce<OP>(n, red, src + 16 * p);
      }
      if (rs) {
        *(uint4*)(n.w->peer_data[n.rank] + dst + 16 * p) = v;
      } else if (n.mc) {
#if __CUDA_ARCH__ >= 900
        multimem_st16(n.w->mc_data + dst + 16 * p, v);
#endif
      } else {
        for (int r = 0; r < n.nranks; r++) *(uint4*)(n.w->peer_data[r] + dst + 16 * p) = v;
      }
    }
    n.alias_fence();
    role_sync(3, nth);
    if (tid == 0) {
      __threadfence_system();
      const u64 freed = n.counter(me, SCATTER, false, n.rank);
      const u64 posted = n.counter(me, BROADCAST, true, n.rank);
      if (ag) n.post_local(freed, step + 1); else n.post_all(freed, step + 1);
      if (rs) n.post_local(posted, step + 1); else n.post_all(posted, step + 1);
    }
  }
}

// Gather: each head's broadcast slot to the output.
__device__ void gather_role(const Nvls& n, u32 tid, u32 nth, volatile int* stop) {
  T* out = (T*)n.w->recv_buff;
  const u64 loops = nloops(n);
  for (u64 s = 0; s < loops; s++) {
    const u64 step = n.base + s;
    for (u32 h = 0; h < n.w->nheads; h++) {
      if (n.coll == COLL_REDUCE_SCATTER && (int)h != n.me) continue;
      const int head_rank = n.w->heads[h];
      if (tid == 0) {
        bool ok = n.wait(n.counter(h, BROADCAST, true, head_rank), step + 1, head_rank,
                         WEFT_WAIT_NVLS_POSTED);
        *stop = ok ? 0 : 1;
      }
      role_sync(2, nth);
      if (*stop) return;
      n.alias_fence();
      u64 start, len;
      head_part(n, s, h, &start, &len);
      // All-gather: head h's segment of the output.
      const u64 seg = n.coll == COLL_ALL_GATHER ? (u64)head_rank * n.w->count : 0;
      const T* slot = (const T*)(n.w->peer_data[n.rank] + n.buffer(h, BROADCAST, step));
      copy_part<true>(slot, out + seg + n.cstart + start, len, tid, nth);
      n.alias_fence();
      role_sync(2, nth);
      if (tid == 0) {
        __threadfence_system();
        const u64 off = n.counter(h, BROADCAST, false, n.rank);
        if (n.coll == COLL_REDUCE_SCATTER)
          n.post_local(off, step + 1);
        else
          n.post_all(off, step + 1);
      }
    }
  }
}

template <int OP>
__device__ void nvls_collective(const weft_peer_work& w) {
  __shared__ int stop[3];
  const weft_dev_comm* comm = (const weft_dev_comm*)w.comm;
  Nvls n;
  n.w = &w;
  n.b.comm = comm;
  n.b.abort_flag = (volatile u32*)comm->abort_flag;
  n.b.fault = (weft_kernel_fault*)comm->fault;
  n.b.fault_index = blockIdx.x;
  n.rank = comm->rank;
  n.nranks = comm->nranks;
  n.me = -1;
  for (u32 h = 0; h < w.nheads && h < WEFT_PEER_MAX_RANKS; h++)
    if (w.heads[h] == n.rank) n.me = (int)h;
  n.c = blockIdx.x;
  n.mc = w.algorithm == WEFT_PEER_ALGO_NVLS;
  n.coll = w.coll;
  n.chunk_elems = w.chunk_size / sizeof(T);
  // One node: a head per rank; the multicast form reduces only where the hardware does.
  const bool reduces = w.coll != COLL_ALL_GATHER;
  if (n.me < 0 || (int)w.nheads != n.nranks || n.nranks > WEFT_PEER_MAX_RANKS ||
      n.chunk_elems == 0 || (n.mc && reduces && !MultimemOk<T, OP>::value) ||
      (n.mc && __CUDA_ARCH__ < 900)) {
    // The host refuses all of these before launching; should one get here, stop every
    // block rather than compute garbage.
    if (threadIdx.x == 0) *n.b.abort_flag = 1;
    return;
  }
  if (threadIdx.x == 0) stop[0] = stop[1] = stop[2] = 0;
  __syncthreads();
  peer_channel_part(w.count, sizeof(T), w.nchannels, n.c, &n.cstart, &n.ccount);
  u64* steps = (u64*)w.steps + n.c;
  n.base = *steps;
  // The three collectives share the counters and steps[c], and each posts some `freed`
  // counters only locally (all-gather: the scatter slot's; reduce-scatter: the broadcast
  // slot's, and only for its own head), so after NVLS_STEPS such steps another
  // collective's "freed >= step + 1 - NVLS_STEPS" would wait forever on a stale copy.
  // So every launch first publishes, to every rank, this rank's `freed` counters for every
  // head and both directions, set to `base`. Sound because: (1) stream order makes every
  // earlier launch on this rank finished, so it reads no slot of a step below `base` any
  // more; (2) `base` is at least every value this rank posted before (a launch's posts are
  // at most its base + nloops, written back to steps[c] when it ends; one that gave up
  // leaves the communicator aborted, never launched on again); (3) only this rank writes
  // these counters, and the roles' later posts (> base) are ordered after this one by the
  // fence and barrier below. Posting every `freed` to every rank in every role instead
  // would still leave reduce-scatter's other heads unposted; this covers all three.
  if (threadIdx.x == 0) {
    for (u32 h = 0; h < w.nheads; h++)
      for (u32 dir = SCATTER; dir <= BROADCAST; dir++) n.post_all(n.counter(h, dir, false, n.rank), n.base);
    __threadfence_system();
  }
  __syncthreads();
  Reduction<T, OP> red;
  red.init(w.red_op_arg, w.red_op_flags, (u64)n.nranks);

  // NCCL's warp split for a one-node NVLS all-reduce of 16 warps: reduce 7 warps up to 6
  // ranks, 5 beyond; the rest shared by scatter (the larger half) and gather.
  const u32 warps = NTHREADS / 32;
  const u32 reduce_w = (n.nranks <= 6 ? 7 : 5) * warps / 16;
  const u32 scatter_w = (warps - reduce_w + 1) / 2;
  const u32 gather_w = warps - reduce_w - scatter_w;
  const u32 warp = threadIdx.x / 32;
  const u32 lane = threadIdx.x % 32;
  if (warp < scatter_w) {
    scatter_role<OP>(n, red, warp * 32 + lane, scatter_w * 32, &stop[0]);
  } else if (warp < scatter_w + gather_w) {
    gather_role(n, (warp - scatter_w) * 32 + lane, gather_w * 32, &stop[1]);
  } else {
    reduce_role<OP>(n, red, (warp - scatter_w - gather_w) * 32 + lane, reduce_w * 32, &stop[2]);
  }
  __syncthreads();
  if (threadIdx.x == 0 && stop[0] == 0 && stop[1] == 0 && stop[2] == 0) *steps = n.base + nloops(n);
}

}  // namespace weft

// One entry point per reduction NVLS has; all-gather uses the sum one. The unicast form
// runs every operator (reduce.cuh) through the same entries; prod and avg exist for it.
#define WEFT_NVLS_ENTRY(name, op)                                                            \
  extern "C" __global__ void __launch_bounds__(WEFT_THREADS, 1) name(weft_peer_work work) { \
    weft::nvls_collective<op>(work);                                                       \
  }
WEFT_NVLS_ENTRY(weft_nvls_sum, weft::OP_SUM)
WEFT_NVLS_ENTRY(weft_nvls_prod, weft::OP_PROD)
WEFT_NVLS_ENTRY(weft_nvls_max, weft::OP_MAX)
WEFT_NVLS_ENTRY(weft_nvls_min, weft::OP_MIN)
WEFT_NVLS_ENTRY(weft_nvls_avg, weft::OP_AVG)
