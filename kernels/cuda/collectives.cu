// weft's collective kernels: NCCL's SIMPLE and LL (ll.cuh) protocols over ring channels, one
// block per channel, and the point-to-point kernel of send/recv groups.
//
// Compiled by NVRTC once per element type (-DWEFT_DTYPE=<weft_data_type>), with weft_abi.h
// (generated from weft_core::abi) giving the structs the host fills:
//   weft_dev_comm  -> weft_dev_channel[n_channels] -> weft_channel_peer[nranks]
// Each connection end (weft_conn_info) has a FIFO of `steps` slots of `step_size` bytes in
// the receiver's memory, a tail counter (slots the sender posted) next to it, and a head
// counter (slots the receiver freed) in the sender's memory: each side polls its own
// memory and writes the other's, as NCCL's P2P transport in write mode.
//
// No wait is endless: every wait polls the communicator's abort flag and gives up after
// weft_dev_comm.timeout_ns, recording which peer it waited on in this block's
// weft_kernel_fault (host-mapped) and raising the abort flag so the other blocks stop too.
#include "weft_abi.h"
#include "ring_program.cuh"
#include "ll_lines.cuh"
#include "reduce.cuh"
#include "sync.cuh"
#include "dtype.cuh"

namespace weft {

// Threads per block; the host launches exactly this many (WEFT_KERNEL_THREADS overrides it,
// to measure: a multiple of 32 up to 1024).
#ifndef WEFT_THREADS
#define WEFT_THREADS 512
#endif
constexpr int THREADS = WEFT_THREADS;
// 16-byte packs each thread has in flight (WEFT_KERNEL_UNROLL overrides it, to measure).
#ifndef WEFT_UNROLL
#define WEFT_UNROLL 8
#endif
constexpr int UNROLL = WEFT_UNROLL;
constexpr int PROTO_LL = 0;
constexpr int PROTO_SIMPLE = 2;

// One connection end as a block works it (copied from weft_conn_info into shared memory).
struct Fifo {
  char* buf;          // slot 0 of the FIFO (the receiver's memory)
  u64* counter_mine;  // polled here: head (send side) or tail (receive side)
  u64* counter_peer;  // written here: tail (send side) or head (receive side)
  u64 step;           // slots posted (send) or consumed (receive) so far
  u64 step_size;
  u32 steps;
  int peer;
  // Direct writes (CONN_DIRECT_WRITE, and the work allows them): the sender stores final
  // results straight into the receiver's output, whose address the receiver publishes in
  // the weft_ptr_exchange at `exchange` (in the sender's memory) once per collective.
  bool direct;
  weft_ptr_exchange* exchange;
  u64 ops;  // weft_conn_info.direct_ops
  // The LL buffer (ll.cuh): 8 slots of ll_step_lines 8-byte lines, in the receiver's memory.
  // Its steps are this connection's steps too: LL and SIMPLE share `step` and the head.
  u64* ll_buf;
  u64 ll_step_lines;
  // Point-to-point message tags, one per slot, in the receiver's memory (null: none).
  u64* tags;
  // A proxy-driven connection's step sizes, one per slot (null: none): the sender writes
  // each step's bytes before it posts the step, so that the proxy moves only those.
  u32* sizes;
};

// The block's data movement for one slice: out1 (and out2 if set) = finish(pre(a) OP fifo),
// where `a` is the rank's input (may be null), `fifo` a received slot (may be null);
// `post` applies the reduction's final step. Any of the pointers may alias the user's
// buffers in place: each element is read before it is written, by the same thread.
//
// Which sources and destinations a primitive has is a template parameter (HAS_A, HAS_FIFO,
// HAS_OUT2, PRE, POST), as in NCCL's reduceCopy: the inner loop then carries no test of
// them, which measured ~15 % of a channel's bandwidth on NVLink (docs/benchmarks.md).
template <typename E, int OP, bool HAS_A, bool PRE, bool HAS_FIFO, bool POST>
__device__ __forceinline__ E element(const Reduction<E, OP>& red, const E* a, const E* fifo, u64 i) {
  E v;
  if (HAS_A) {
    v = a[i];
    if (PRE) v = red.pre(v);
    if (HAS_FIFO) v = red.combine(v, load_volatile_elem(fifo + i));
  } else {
    v = load_volatile_elem(fifo + i);
  }
  if (POST) v = red.finish(v);
  return v;
}

// N packs per thread from index `p` on, `stride` packs apart: load every source first (the
// loads of all N packs in flight together), then combine, then store.
template <typename E, int OP, bool HAS_A, bool PRE, bool HAS_FIFO, bool HAS_OUT2, bool POST, int N>
__device__ __forceinline__ void packs(const Reduction<E, OP>& red, const uint4* a, const uint4* fifo,
                                      uint4* out1, uint4* out2, u64 p, u64 stride) {
  constexpr int PER_PACK = 16 / sizeof(E);
  union Pack {
    uint4 v;
    E e[PER_PACK];
  };
  Pack pa[N], pf[N];
#pragma unroll
  for (int u = 0; u < N; u++) {
    if (HAS_A) pa[u].v = a[p + u * stride];
    if (HAS_FIFO) pf[u].v = load_volatile16(fifo + p + u * stride);
  }
#pragma unroll
  for (int u = 0; u < N; u++) {
    Pack r;
#pragma unroll
    for (int j = 0; j < PER_PACK; j++) {
      E v;
      if (HAS_A) {
        v = pa[u].e[j];
        if (PRE) v = red.pre(v);
        if (HAS_FIFO) v = red.combine(v, pf[u].e[j]);
      } else {
        v = pf[u].e[j];
      }
      if (POST) v = red.finish(v);
      r.e[j] = v;
    }
    out1[p + u * stride] = r.v;
    if (HAS_OUT2) out2[p + u * stride] = r.v;
  }
}

template <typename E, int OP, bool HAS_A, bool PRE, bool HAS_FIFO, bool HAS_OUT2, bool POST>
__device__ void reduce_copy_of(const Reduction<E, OP>& red, const E* a, const E* fifo, E* out1,
                               E* out2, u64 nelem) {
  constexpr int PER_PACK = 16 / sizeof(E);
  // A hunk: the UNROLL * 32 consecutive packs one warp moves per iteration.
  constexpr u64 HUNK = (u64)UNROLL * 32;
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int nwarps = THREADS / 32;
  uintptr_t misalign = ((HAS_A ? (uintptr_t)a : 0) | (HAS_FIFO ? (uintptr_t)fifo : 0) |
                        (uintptr_t)out1 | (HAS_OUT2 ? (uintptr_t)out2 : 0)) & 15;
  const u64 npacks = misalign == 0 ? nelem / PER_PACK : 0;
  const uint4* a4 = (const uint4*)a;
  const uint4* f4 = (const uint4*)fifo;
  uint4* o1 = (uint4*)out1;
  uint4* o2 = (uint4*)out2;
  // Whole hunks, no bounds test per pack.
  const u64 hunks = npacks / HUNK;
  for (u64 h = warp; h < hunks; h += nwarps)
    packs<E, OP, HAS_A, PRE, HAS_FIFO, HAS_OUT2, POST, UNROLL>(red, a4, f4, o1, o2, h * HUNK + lane, 32);
  // The packs after the last whole hunk, one per thread.
  for (u64 p = hunks * HUNK + tid; p < npacks; p += THREADS)
    packs<E, OP, HAS_A, PRE, HAS_FIFO, HAS_OUT2, POST, 1>(red, a4, f4, o1, o2, p, 0);
  // What the packs did not cover (a tail, or everything when misaligned).
  for (u64 i = npacks * PER_PACK + tid; i < nelem; i += THREADS) {
    E v = element<E, OP, HAS_A, PRE, HAS_FIFO, POST>(red, a, fifo, i);
    out1[i] = v;
    if (HAS_OUT2) out2[i] = v;
  }
}

// reduce_copy_of with the pre and post steps chosen at run time: only Avg has them, so the
// other operators compile one variant.
template <int OP, bool HAS_A, bool HAS_FIFO, bool HAS_OUT2>
__device__ __forceinline__ void reduce_copy(const Reduction<T, OP>& red, const T* a, bool pre,
                                            const T* fifo, T* out1, T* out2, bool post, u64 n) {
  if (OP != OP_AVG || (!pre && !post))
    reduce_copy_of<T, OP, HAS_A, false, HAS_FIFO, HAS_OUT2, false>(red, a, fifo, out1, out2, n);
  else if (pre && !post)
    reduce_copy_of<T, OP, HAS_A, HAS_A, HAS_FIFO, HAS_OUT2, false>(red, a, fifo, out1, out2, n);
  else if (!pre)
    reduce_copy_of<T, OP, HAS_A, false, HAS_FIFO, HAS_OUT2, true>(red, a, fifo, out1, out2, n);
  else
    reduce_copy_of<T, OP, HAS_A, HAS_A, HAS_FIFO, HAS_OUT2, true>(red, a, fifo, out1, out2, n);
}

// A plain copy of bytes (point-to-point): src to out.
__device__ __forceinline__ void copy_bytes(const u8* src, u8* out, u64 n, bool src_is_fifo) {
  Reduction<u8, OP_SUM> copy;
  copy.init(0, 0, 1);
  if (src_is_fifo)
    reduce_copy_of<u8, OP_SUM, false, false, true, false, false>(copy, nullptr, src, out, nullptr, n);
  else
    reduce_copy_of<u8, OP_SUM, true, false, false, false, false>(copy, src, nullptr, out, nullptr, n);
}

__device__ void load_fifo(Fifo& f, const weft_conn_info& c, bool send, int peer) {
  f.buf = (char*)c.buffs[PROTO_SIMPLE];
  f.counter_mine = (u64*)(send ? c.head : c.tail);
  f.counter_peer = (u64*)(send ? c.tail : c.head);
  f.step = c.step;
  f.step_size = c.step_size;
  f.steps = c.steps;
  f.peer = peer;
  f.direct = false;
  f.exchange = (weft_ptr_exchange*)c.ptr_exchange;
  f.ops = c.direct_ops;
  f.ll_buf = (u64*)c.buffs[PROTO_LL];
  f.ll_step_lines = ll_step_lines(c.buff_sizes[PROTO_LL], c.steps);
  f.tags = (u64*)c.tags;
  f.sizes = send ? (u32*)c.sizes_fifo : nullptr;
}

// The sender's record of a step's size for the proxy (NET), by one thread, before the
// release of the tail that publishes it.
__device__ __forceinline__ void post_size(const Fifo& f, u64 bytes) {
  if (f.sizes != nullptr) ((volatile u32*)f.sizes)[f.step % f.steps] = (u32)bytes;
}

// The tag a point-to-point message leaves in the slot of its first step on a channel
// (core::abi::p2p_tag): its bytes in the low 47 bits, bit 47 set (zeroed memory is no tag),
// the step in the high 16.
__device__ __forceinline__ u64 p2p_tag(u64 bytes, u64 step) {
  return (bytes & ((1ull << 47) - 1)) | (1ull << 47) | (step << 48);
}

// The sender's half, by one thread, before the step is posted (SIMPLE: before the release
// of the tail, which publishes it; LL: before the lines, without a fence).
__device__ __forceinline__ void post_p2p_tag(const Fifo& f, u64 bytes) {
  if (f.tags != nullptr) ((volatile u64*)f.tags)[f.step % f.steps] = p2p_tag(bytes, f.step);
}

// The receiver's half, by one thread, once the first step's data is there and before the
// slot is freed (the sender writes the slot's next tag only after that): the tag must be
// this message's. A tag of this step with another size is a mismatch at once; one of an
// older step is too when `settled` (SIMPLE: the release of the tail published the tag with
// the data), else (LL: the tag may show a moment after the lines) it is waited for until
// the deadline. A mismatch is recorded (FAULT_MISMATCH) and raises the abort flag.
__device__ bool check_p2p_tag(const Block& b, const Fifo& f, u64 bytes, u32 channel, bool settled) {
  if (f.tags == nullptr) return true;
  const volatile u64* slot = (const volatile u64*)f.tags + f.step % f.steps;
  const u64 want = p2p_tag(bytes, f.step);
  const u64 start = global_timer();
  u32 spins = 0;
  for (;;) {
    const u64 got = *slot;
    if (got == want) return true;
    bool give = settled || (got >> 47) == (want >> 47);
    u32 code = WEFT_FAULT_MISMATCH;
    if (!give && ++spins >= SPINS_PER_CHECK) {
      spins = 0;
      const u64 now = global_timer();
      if (*b.abort_flag != 0) {
        give = true;
        code = WEFT_FAULT_ABORTED;
      } else if (b.comm->timeout_ns != 0 && now - start > b.comm->timeout_ns) {
        give = true;
      }
    }
    if (give) {
      give_up(b, code, channel, f.peer, WEFT_WAIT_P2P_TAG, got, want);
      return false;
    }
  }
}

}  // namespace weft

// The LL protocol's primitives: they use Fifo, Block, wait_for and give_up above.
#include "ll.cuh"

namespace weft {

// What one block runs for one primitive of `len` elements: every slice takes one FIFO slot
// of each connection it uses. Returns false when the block must stop.
// `peer_out`: the next rank's output once its pointer has been read (direct sends), else
// null. Direct writes rest on one invariant of the ring programs (core's property test
// final_sends_land_at_the_receivers_output_offset checks both directions): a step that sends
// final data meets, on the next rank, a Recv or RecvCopySend at the same output offset, and
// every such receive meets such a send. So a receiver cannot finish a collective, and
// overwrite its published pointer with the next one, before its sender has read it.
template <int OP>
__device__ bool run_step(const Block& b, const Reduction<T, OP>& red, u32 channel, Fifo& send,
                         Fifo& recv, const Step& st, const T* input, T* output, bool reduces,
                         u32 min_slices, T** peer_out, volatile int* stop) {
  const bool sends = prim_sends(st.prim);
  const bool receives = prim_receives(st.prim);
  // A step that sends final results (it writes them to its own output too) stores them in
  // the receiver's output directly; the receiver's matching step (a Recv or RecvCopySend at
  // the same output offset: core's RingProgram guarantees it) finds them there.
  const bool direct_send = sends && send.direct && prim_writes_output(st.prim);
  const bool direct_recv =
      receives && recv.direct && (st.prim == PRIM_RECV || st.prim == PRIM_RECV_COPY_SEND);
  const u64 align = align_elems(sizeof(T));
  // A ring of one rank has no FIFO: its copy is one piece.
  const u64 max_elems = sends || receives
                            ? (sends ? send.step_size : recv.step_size) / sizeof(T) / align * align
                            : st.len;
  Slicing cut;
  cut.init(st.len, max_elems, align, min_slices);
  for (u64 k = 0; k < cut.n; k++) {
    u64 off = cut.start(k, st.len);
    u64 n = cut.size(k, st.len);
    if (threadIdx.x == 0) {
      bool ok = true;
      if (receives) ok = wait_for(b, recv.counter_mine, recv.step + 1, recv.peer, WEFT_WAIT_RECV, channel);
      // A free slot: the receiver has freed at least step + 1 - steps of them.
      if (ok && sends && send.step + 1 > send.steps)
        ok = wait_for(b, send.counter_mine, send.step + 1 - send.steps, send.peer, WEFT_WAIT_SEND, channel);
      // The receiver's output address, once per collective: it publishes it when its kernel
      // starts, so nothing lands in its buffer before the collective began there.
      if (ok && direct_send && *peer_out == nullptr) {
        ok = wait_for(b, &send.exchange->ops, send.ops, send.peer, WEFT_WAIT_PEER_START, channel);
        if (ok) *peer_out = (T*)*(volatile u64*)&send.exchange->ptr;
      }
      *stop = ok ? 0 : 1;
    }
    __syncthreads();
    if (*stop) return false;
    const T* in = prim_reads_input(st.prim) ? input + st.input_offset + off : nullptr;
    T* out = prim_writes_output(st.prim) ? output + st.output_offset + off : nullptr;
    const T* fifo_in = receives ? (const T*)(recv.buf + (recv.step % recv.steps) * recv.step_size) : nullptr;
    T* fifo_out = !sends        ? nullptr
                  : direct_send ? *peer_out + st.output_offset + off
                                : (T*)(send.buf + (send.step % send.steps) * send.step_size);
    const bool pre = reduces && in != nullptr;
    const bool post = st.post_op && reduces;
    switch (st.prim) {
      case PRIM_SEND:  // reducing collectives' inputs enter the reduction here
        reduce_copy<OP, true, false, false>(red, in, pre, nullptr, fifo_out, nullptr, false, n);
        break;
      case PRIM_COPY_SEND:  // all-gather, broadcast: in place, the copy is skipped
        if (in == out)
          reduce_copy<OP, true, false, false>(red, in, false, nullptr, fifo_out, nullptr, false, n);
        else
          reduce_copy<OP, true, false, true>(red, in, false, nullptr, fifo_out, out, false, n);
        break;
      case PRIM_RECV:  // a direct receive found its data in place
        if (!direct_recv)
          reduce_copy<OP, false, true, false>(red, nullptr, false, fifo_in, out, nullptr, false, n);
        break;
      case PRIM_RECV_COPY_SEND:
        // Direct: the data is in this rank's output already (written by the peer, so read
        // past L1 as a FIFO slot is), and only goes on.
        if (direct_recv)
          reduce_copy<OP, false, true, false>(red, nullptr, false, out, fifo_out, nullptr, false, n);
        else
          reduce_copy<OP, false, true, true>(red, nullptr, false, fifo_in, fifo_out, out, false, n);
        break;
      case PRIM_RECV_REDUCE_SEND:
        reduce_copy<OP, true, true, false>(red, in, pre, fifo_in, fifo_out, nullptr, post, n);
        break;
      case PRIM_RECV_REDUCE_COPY_SEND:
        reduce_copy<OP, true, true, true>(red, in, pre, fifo_in, fifo_out, out, post, n);
        break;
      case PRIM_RECV_REDUCE_COPY:
        reduce_copy<OP, true, true, false>(red, in, pre, fifo_in, out, nullptr, post, n);
        break;
      default:  // PRIM_COPY: a ring of one rank
        reduce_copy<OP, true, false, false>(red, in, pre, nullptr, out, nullptr, post, n);
        break;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The barrier ordered every thread's stores before this release: the peer that sees
      // the new tail sees the data.
      if (sends) {
        post_size(send, direct_send ? 0 : n * sizeof(T));
        store_release(send.counter_peer, ++send.step);
      }
      if (receives) store_release(recv.counter_peer, ++recv.step);
    }
  }
  return true;
}

// LL: the LL entry points (weft_ring_ll_*), which the host launches for work whose protocol
// is LL. SIMPLE and LL are separate kernels, as NCCL's device functions are per protocol: LL
// code in a SIMPLE kernel made ptxas spill registers in its copy loops.
// One collective of a launch on this block's channel; false when the block must stop (a
// peer failed or the communicator was aborted: the fault is recorded).
template <int OP, bool LL>
__device__ bool ring_collective(const weft_dev_comm* comm, const weft_coll_work& w) {
  __shared__ Fifo send, recv;
  __shared__ int stop;
  __shared__ int ll_failed;
  __shared__ int ring[64];
  __shared__ T* peer_out;
  // Block b runs channel b: part b - channel_lo of the work (ring_launch skips the others).
  const u32 channel = blockIdx.x;
  const weft_dev_channel* ch = (const weft_dev_channel*)comm->channels + channel;
  weft_channel_peer* peers = (weft_channel_peer*)ch->peers;
  const u32 nranks = (u32)comm->nranks;
  Block b;
  b.comm = comm;
  b.abort_flag = (volatile u32*)comm->abort_flag;
  b.fault = (weft_kernel_fault*)comm->fault;
  b.fault_index = blockIdx.x;

  // Rings of more than 64 ranks are read from global memory.
  const int* ring_ranks = (const int*)ch->ring.user_ranks;
  if (nranks <= 64) {
    for (u32 i = threadIdx.x; i < nranks; i += THREADS) ring[i] = ring_ranks[i];
    ring_ranks = ring;
  }
  if (threadIdx.x == 0) {
    // No look at the abort flag here: it lives in host memory, and reading it would hold
    // every thread at the barrier below for a PCIe round trip. Waits look at it.
    stop = 0;
    ll_failed = 0;
    peer_out = nullptr;
    if (nranks > 1) {
      load_fifo(send, peers[ch->ring.next].send, true, ch->ring.next);
      load_fifo(recv, peers[ch->ring.prev].recv, false, ch->ring.prev);
      send.direct = w.direct != 0 && (peers[ch->ring.next].send.flags & WEFT_CONN_DIRECT_WRITE) != 0;
      recv.direct = w.direct != 0 && (peers[ch->ring.prev].recv.flags & WEFT_CONN_DIRECT_WRITE) != 0;
      if (send.direct) send.ops++;
      if (recv.direct) {
        // Publish this rank's output to the previous rank: the pointer, then the count.
        recv.ops++;
        *(volatile u64*)&recv.exchange->ptr = (u64)w.recv_buff;
        store_release(&recv.exchange->ops, recv.ops);
      }
    }
  }
  __syncthreads();
  if (stop) return false;

  Reduction<T, OP> red;
  red.init(w.red_op_arg, w.red_op_flags, nranks);
  const bool reduces = w.coll == COLL_ALL_REDUCE || w.coll == COLL_REDUCE_SCATTER || w.coll == COLL_REDUCE;
  RingProgram prog;
  prog.init(w.coll, w.root, w.count, sizeof(T), w.chunk_size / sizeof(T), w.channel_count,
            blockIdx.x - w.channel_lo, ring_ranks, nranks, (u32)comm->rank);
  const T* input = (const T*)w.send_buff;
  T* output = (T*)w.recv_buff;
  // LL on rings of two ranks or more; a ring of one has no connection and copies as SIMPLE
  // does.
  const bool ll = LL && nranks > 1;
  LlStop halt;
  halt.stop = &stop;
  halt.failed = &ll_failed;
  for (u64 loop = 0; loop < prog.nloops; loop++) {
    for (u32 s = 0; s < prog.steps_per_loop; s++) {
      Step st = prog.step(loop, s);
      if (st.len == 0) continue;
      bool ok;
      if (LL && ll)
        ok = run_step_ll<OP>(b, red, channel, send, recv, st, input, output, reduces, halt);
      else
        ok = run_step<OP>(b, red, channel, send, recv, st, input, output, reduces, w.min_slices, &peer_out,
                         &stop);
      if (!ok) return false;
    }
  }
  // An LL failure in the last step leaves `stop` set without failing the step: every
  // thread reads it after this barrier (and before the next work of the launch resets it).
  // A failed block's counters are not worth keeping (the communicator is aborted).
  __syncthreads();
  const bool ok = stop == 0;
  if (threadIdx.x == 0 && nranks > 1 && ok) {
    peers[ch->ring.next].send.step = send.step;
    peers[ch->ring.prev].recv.step = recv.step;
    peers[ch->ring.next].send.direct_ops = send.ops;
    peers[ch->ring.prev].recv.direct_ops = recv.ops;
  }
  return ok;
}

// A launch's collectives (a fused group, or one call): block b runs, in order, the works
// whose channels include b (the host spreads a group's works over the channels), each from
// the counters the previous one on this channel left (thread 0 wrote them back and reads
// them again). Channels do not wait for each other between works, as NCCL's do not: a
// group's calls must not depend on each other.
template <int OP, bool LL>
__device__ void ring_launch(const weft_kernel_args& args) {
  const weft_dev_comm* comm = (const weft_dev_comm*)args.comm;
  for (u32 i = 0; i < args.nworks && i < WEFT_COLL_BATCH_MAX; i++) {
    // Block-uniform: a work on other channels skips this block.
    const u32 lo = args.works[i].channel_lo;
    if (blockIdx.x < lo || blockIdx.x - lo >= args.works[i].channel_count) continue;
    if (!ring_collective<OP, LL>(comm, args.works[i])) return;
    __syncthreads();
  }
}

}  // namespace weft

// One entry point per reduction and protocol; non-reducing collectives use the sum ones.
// `__grid_constant__`: the works are read in place, by reference at a run-time index, from
// the parameter space (without it the compiler may copy all 720 bytes to each thread's
// local memory to take their address).
#define WEFT_RING_ENTRY(name, op)                                                  \
  extern "C" __global__ void __launch_bounds__(weft::THREADS, 1)                  \
      name(const __grid_constant__ weft_kernel_args args) {                        \
    weft::ring_launch<op, false>(args);                                            \
  }
WEFT_RING_ENTRY(weft_ring_sum, weft::OP_SUM)
WEFT_RING_ENTRY(weft_ring_prod, weft::OP_PROD)
WEFT_RING_ENTRY(weft_ring_max, weft::OP_MAX)
WEFT_RING_ENTRY(weft_ring_min, weft::OP_MIN)
WEFT_RING_ENTRY(weft_ring_avg, weft::OP_AVG)
#define WEFT_RING_LL_ENTRY(name, op)                                               \
  extern "C" __global__ void __launch_bounds__(weft::THREADS, 1)                  \
      name(const __grid_constant__ weft_kernel_args args) {                        \
    weft::ring_launch<op, true>(args);                                             \
  }
WEFT_RING_LL_ENTRY(weft_ring_ll_sum, weft::OP_SUM)
WEFT_RING_LL_ENTRY(weft_ring_ll_prod, weft::OP_PROD)
WEFT_RING_LL_ENTRY(weft_ring_ll_max, weft::OP_MAX)
WEFT_RING_LL_ENTRY(weft_ring_ll_min, weft::OP_MIN)
WEFT_RING_LL_ENTRY(weft_ring_ll_avg, weft::OP_AVG)

namespace weft {

// The gathered all-reduce (ranks on several hosts, small calls): a send/receive group has
// put every other rank's input in `gathered` (rank r's at element r * count; this rank's
// slot unused, its input is `own`), and each rank reduces them all itself, in rank order,
// as the one-shot reduces its windows (direct.cu): pre() on every input (float Avg scales
// by 1/nranks; PreMulSum is never planned here, its scalar is the owner's), combine in
// rank order, finish(). So every rank computes the same bits, one network hop after the
// call starts instead of the ring's 2(n-1). Nothing here waits: the group before it did.
template <int OP>
__device__ void gathered_reduce(u64 out, u64 own, u64 gathered, u64 count, u64 red_op_arg,
                                u32 red_op_flags, u32 nranks, u32 rank) {
  Reduction<T, OP> red;
  red.init(red_op_arg, red_op_flags, (u64)nranks);
  const T* mine = (const T*)own;
  const T* all = (const T*)gathered;
  T* dst = (T*)out;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    T acc = red.pre(rank == 0 ? mine[i] : all[i]);
    for (u32 r = 1; r < nranks; r++)
      acc = red.combine(acc, red.pre(r == rank ? mine[i] : all[(u64)r * count + i]));
    dst[i] = red.finish(acc);
  }
}

}  // namespace weft

#define WEFT_GATHERED_ENTRY(name, op)                                                       \
  extern "C" __global__ void __launch_bounds__(weft::THREADS, 1)                           \
      name(weft::u64 out, weft::u64 own, weft::u64 gathered, weft::u64 count,              \
           weft::u64 red_op_arg, weft::u32 red_op_flags, weft::u32 nranks, weft::u32 rank) {  \
    weft::gathered_reduce<op>(out, own, gathered, count, red_op_arg, red_op_flags, nranks, \
                              rank);                                                        \
  }
WEFT_GATHERED_ENTRY(weft_gathered_sum, weft::OP_SUM)
WEFT_GATHERED_ENTRY(weft_gathered_prod, weft::OP_PROD)
WEFT_GATHERED_ENTRY(weft_gathered_max, weft::OP_MAX)
WEFT_GATHERED_ENTRY(weft_gathered_min, weft::OP_MIN)
WEFT_GATHERED_ENTRY(weft_gathered_avg, weft::OP_AVG)

namespace weft {

// Bytes of `op` that channel `k` of its `nchannels` carries (16-byte aligned parts, as the
// collectives' channel split).
__device__ __forceinline__ void p2p_part(const weft_p2p_op& op, u32 k, u64* offset, u64* len) {
  u64 per = align_up(div_up(op.bytes, op.nchannels), 16);
  u64 start = min_u64((u64)k * per, op.bytes);
  *offset = start;
  *len = min_u64(per, op.bytes - start);
}

// One block's share of one send or receive of a point-to-point launch (channel `k` of the
// op's channels), a FIFO slot per slice of at most one step. Returns false when the block
// must stop (a wait gave up: the fault is recorded).
__device__ bool p2p_op(const weft_p2p_args& args, const weft_p2p_op& op, u32 k) {
  __shared__ Fifo fifo;
  __shared__ int stop;
  __shared__ int ll_failed;
  const weft_dev_comm* comm = (const weft_dev_comm*)args.comm;
  const weft_dev_channel* ch = (const weft_dev_channel*)comm->channels + k;
  weft_channel_peer* peer = (weft_channel_peer*)ch->peers + op.peer;
  Block b;
  b.comm = comm;
  b.abort_flag = (volatile u32*)comm->abort_flag;
  b.fault = (weft_kernel_fault*)comm->fault;
  b.fault_index = blockIdx.x;
  if (threadIdx.x == 0) {
    // No look at the abort flag here: it lives in host memory, and reading it would hold
    // every thread at the barrier below for a PCIe round trip. Waits look at it.
    stop = 0;
    ll_failed = 0;
    load_fifo(fifo, op.send ? peer->send : peer->recv, op.send != 0, op.peer);
  }
  __syncthreads();
  if (stop) return false;
  u64 offset, len;
  p2p_part(op, k, &offset, &len);
  char* user = (char*)op.buff + offset;
  if (op.protocol == PROTO_LL) {
    LlStop halt;
    halt.stop = &stop;
    halt.failed = &ll_failed;
    p2p_ll(b, fifo, op.send != 0, (u8*)user, len, op.bytes, k, halt);
    // Thread 0 alone reads `stop` (see LlStop); the barrier hands its verdict to the block.
    if (threadIdx.x == 0 && stop == 0) {
      if (op.send)
        peer->send.step = fifo.step;
      else
        peer->recv.step = fifo.step;
    }
    __syncthreads();
    return stop == 0;
  }
  Slicing cut;
  cut.init(len, fifo.step_size / 16 * 16, 16);
  for (u64 s = 0; s < cut.n && len > 0; s++) {
    u64 off = cut.start(s, len);
    u64 n = cut.size(s, len);
    if (threadIdx.x == 0) {
      bool ok;
      if (op.send)
        ok = fifo.step + 1 <= fifo.steps ||
             wait_for(b, fifo.counter_mine, fifo.step + 1 - fifo.steps, op.peer, WEFT_WAIT_SEND, k);
      else
        ok = wait_for(b, fifo.counter_mine, fifo.step + 1, op.peer, WEFT_WAIT_RECV, k) &&
             (s != 0 || check_p2p_tag(b, fifo, op.bytes, k, true));
      stop = ok ? 0 : 1;
    }
    __syncthreads();
    if (stop) return false;
    char* slot = fifo.buf + (fifo.step % fifo.steps) * fifo.step_size;
    if (op.send)
      copy_bytes((const u8*)(user + off), (u8*)slot, n, false);
    else
      copy_bytes((const u8*)slot, (u8*)(user + off), n, true);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (op.send && s == 0) post_p2p_tag(fifo, op.bytes);
      if (op.send) post_size(fifo, n);
      store_release(fifo.counter_peer, ++fifo.step);
    }
  }
  if (threadIdx.x == 0) {
    if (op.send)
      peer->send.step = fifo.step;
    else
      peer->recv.step = fifo.step;
  }
  return true;
}

// One block of a point-to-point launch: in order, every op whose blocks include this one.
// The host gives each (peer, direction) one range of blocks and lists its ops in call
// order, so a block runs the messages of its connection one after the other, each from the
// FIFO step the previous one left (thread 0 wrote it back and reads it again), as the peer's
// block of the same channel runs their matches.
__device__ void p2p_block(const weft_p2p_args& args) {
  for (u32 o = 0; o < args.nops && o < WEFT_P2P_MAX_OPS; o++) {
    const weft_p2p_op& op = args.ops[o];
    // Block-uniform: an op on other blocks skips this one.
    if (blockIdx.x < op.block_lo || blockIdx.x - op.block_lo >= op.nchannels) continue;
    if (!p2p_op(args, op, blockIdx.x - op.block_lo)) return;
    // Every thread is done with this op's FIFO before thread 0 loads the next one's.
    __syncthreads();
  }
}

}  // namespace weft

extern "C" __global__ void __launch_bounds__(weft::THREADS, 1) weft_p2p(weft_p2p_args args) {
  weft::p2p_block(args);
}
