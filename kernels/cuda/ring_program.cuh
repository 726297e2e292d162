// The ring program of one rank on one channel: weft_core::sched::RingProgram, step for step.
//
// Plain integer arithmetic, compiled for the GPU (NVRTC) and for the host (g++), so that a
// host test can compare every step it yields with the Rust original (kernels/tests).
// Keep the two in lockstep: a change to core/src/sched/program.rs or partition.rs must be
// made here too, and the comparison test fails until it is.
#ifndef WEFT_RING_PROGRAM_CUH
#define WEFT_RING_PROGRAM_CUH

#ifdef __CUDACC__
#define WEFT_HD __host__ __device__ __forceinline__
#else
#define WEFT_HD inline
#endif

namespace weft {

typedef unsigned long long u64;
typedef unsigned int u32;

// The primitives of core::sched::Primitive.
enum Prim : u32 {
  PRIM_SEND = 0,
  PRIM_RECV = 1,
  PRIM_COPY_SEND = 2,
  PRIM_RECV_COPY_SEND = 3,
  PRIM_RECV_REDUCE_SEND = 4,
  PRIM_RECV_REDUCE_COPY = 5,
  PRIM_RECV_REDUCE_COPY_SEND = 6,
  PRIM_COPY = 7,
};

// weft_coll_kind's numbers (NCCL's ncclFunc order).
enum Coll : u32 {
  COLL_BROADCAST = 0,
  COLL_REDUCE = 1,
  COLL_ALL_GATHER = 2,
  COLL_REDUCE_SCATTER = 3,
  COLL_ALL_REDUCE = 4,
};

WEFT_HD bool prim_sends(u32 p) {
  return p == PRIM_SEND || p == PRIM_COPY_SEND || p == PRIM_RECV_COPY_SEND ||
         p == PRIM_RECV_REDUCE_SEND || p == PRIM_RECV_REDUCE_COPY_SEND;
}
WEFT_HD bool prim_receives(u32 p) {
  return p == PRIM_RECV || p == PRIM_RECV_COPY_SEND || p == PRIM_RECV_REDUCE_SEND ||
         p == PRIM_RECV_REDUCE_COPY || p == PRIM_RECV_REDUCE_COPY_SEND;
}
WEFT_HD bool prim_reads_input(u32 p) {
  return p == PRIM_SEND || p == PRIM_COPY_SEND || p == PRIM_RECV_REDUCE_SEND ||
         p == PRIM_RECV_REDUCE_COPY || p == PRIM_RECV_REDUCE_COPY_SEND || p == PRIM_COPY;
}
WEFT_HD bool prim_writes_output(u32 p) {
  return p == PRIM_RECV || p == PRIM_COPY_SEND || p == PRIM_RECV_COPY_SEND ||
         p == PRIM_RECV_REDUCE_COPY || p == PRIM_RECV_REDUCE_COPY_SEND || p == PRIM_COPY;
}

WEFT_HD u64 div_up(u64 a, u64 b) { return b == 0 ? 0 : (a + b - 1) / b; }
WEFT_HD u64 align_up(u64 a, u64 b) { return div_up(a, b) * b; }
WEFT_HD u64 min_u64(u64 a, u64 b) { return a < b ? a : b; }
WEFT_HD u64 sat_sub(u64 a, u64 b) { return a > b ? a - b : 0; }

// Elements per 16 bytes (core::sched::align_elems).
WEFT_HD u64 align_elems(u64 elem_size) {
  u64 twos = 0;
  while (twos < 4 && ((elem_size >> twos) & 1) == 0) twos++;
  return 16 >> twos;
}

struct Step {
  u32 prim;
  bool post_op;
  u64 input_offset;
  u64 output_offset;
  u64 len;
};

struct RingProgram {
  u32 coll;
  u32 root;
  u64 count;
  u64 chunk;
  u64 align;
  u32 nranks;
  u32 position;
  u32 rank;
  const int* ring;  // rank at each ring position
  u64 part_offset;
  u64 part_len;
  u64 loop_elems;
  u32 steps_per_loop;
  u64 nloops;

  WEFT_HD u32 rank_after(u32 k) const { return (u32)ring[(position + k % nranks) % nranks]; }
  WEFT_HD u32 rank_before(u32 k) const { return rank_after(nranks - k % nranks); }

  // Sets everything from the call; `ring` must outlive the program.
  WEFT_HD void init(u32 coll_, u32 root_, u64 count_, u64 elem_size, u64 chunk_elems,
                    u32 nchannels, u32 channel, const int* ring_, u32 nranks_, u32 rank_) {
    coll = coll_;
    root = root_;
    count = count_;
    chunk = chunk_elems;
    align = align_elems(elem_size);
    ring = ring_;
    nranks = nranks_;
    rank = rank_;
    position = 0;
    for (u32 p = 0; p < nranks; p++)
      if ((u32)ring[p] == rank) position = p;
    // core::sched::channel_part
    u64 per_channel = align_up(div_up(count, nchannels), align);
    u64 start = (u64)channel * per_channel;
    part_offset = start < count ? start : count;
    part_len = min_u64(per_channel, count - part_offset);
    if (nranks == 1) {
      loop_elems = chunk;
      steps_per_loop = 1;
    } else if (coll == COLL_ALL_REDUCE) {
      loop_elems = chunk * nranks;
      steps_per_loop = 2 * nranks - 1;
    } else if (coll == COLL_REDUCE_SCATTER || coll == COLL_ALL_GATHER) {
      loop_elems = chunk;
      steps_per_loop = nranks;
    } else {
      loop_elems = chunk;
      steps_per_loop = 1;
    }
    nloops = div_up(part_len, loop_elems);
  }

  WEFT_HD u32 next() const { return rank_after(1); }
  WEFT_HD u32 prev() const { return rank_before(1); }

  WEFT_HD u64 block_size(u64 loop) const {
    u64 rest = sat_sub(part_len, loop * loop_elems);
    if (coll == COLL_ALL_REDUCE && nranks > 1 && rest < loop_elems) {
      return min_u64(align_up(div_up(rest, nranks), align), chunk);
    }
    return chunk;
  }

  WEFT_HD u32 prim_at(u32 s) const {
    u32 n = nranks;
    if (n == 1) return PRIM_COPY;
    switch (coll) {
      case COLL_ALL_REDUCE:
        if (s == 0) return PRIM_SEND;
        if (s < n - 1) return PRIM_RECV_REDUCE_SEND;
        if (s == n - 1) return PRIM_RECV_REDUCE_COPY_SEND;
        if (s < 2 * n - 2) return PRIM_RECV_COPY_SEND;
        return PRIM_RECV;
      case COLL_REDUCE_SCATTER:
        if (s == 0) return PRIM_SEND;
        if (s < n - 1) return PRIM_RECV_REDUCE_SEND;
        return PRIM_RECV_REDUCE_COPY;
      case COLL_ALL_GATHER:
        if (s == 0) return PRIM_COPY_SEND;
        if (s < n - 1) return PRIM_RECV_COPY_SEND;
        return PRIM_RECV;
      case COLL_BROADCAST:
        if (rank == root) return PRIM_COPY_SEND;
        if (next() == root) return PRIM_RECV;
        return PRIM_RECV_COPY_SEND;
      default:  // COLL_REDUCE
        if (prev() == root) return PRIM_SEND;
        if (rank == root) return PRIM_RECV_REDUCE_COPY;
        return PRIM_RECV_REDUCE_SEND;
    }
  }

  // Step `s` of loop `loop` (s < steps_per_loop, loop < nloops).
  WEFT_HD Step step(u64 loop, u32 s) const {
    u32 n = nranks;
    Step st;
    st.prim = prim_at(s);
    st.post_op = false;
    st.input_offset = 0;
    st.output_offset = 0;
    st.len = 0;
    u64 loop_chunk = block_size(loop);
    u64 loop_start = loop * loop_elems;
    u64 rest = sat_sub(part_len, loop_start);
    u64 data_offset = part_offset + loop_start;
    bool reduces = coll == COLL_ALL_REDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE;
    if (n == 1 || coll != COLL_ALL_REDUCE) st.len = min_u64(loop_chunk, rest);
    if (n == 1) {
      st.input_offset = data_offset;
      st.output_offset = data_offset;
      st.post_op = reduces;
      return st;
    }
    switch (coll) {
      case COLL_ALL_REDUCE: {
        u32 back = s < n ? s + 1 : (s < 2 * n - 2 ? s - n + 1 : n - 1);
        u64 block = (position + n - back % n) % n;
        u64 block_offset = block * loop_chunk;
        st.len = min_u64(loop_chunk, sat_sub(rest, block_offset));
        u64 offset = min_u64(data_offset + block_offset, part_offset + part_len);
        st.input_offset = offset;
        st.output_offset = offset;
        st.post_op = st.prim == PRIM_RECV_REDUCE_COPY_SEND;
        break;
      }
      case COLL_REDUCE_SCATTER: {
        u64 owner = rank_before(s + 1);
        st.input_offset = data_offset + owner * count;
        if (st.prim == PRIM_RECV_REDUCE_COPY) {
          st.output_offset = data_offset;
          st.post_op = true;
        }
        break;
      }
      case COLL_ALL_GATHER: {
        u64 owner = rank_before(s);
        st.output_offset = data_offset + owner * count;
        if (st.prim == PRIM_COPY_SEND) st.input_offset = data_offset;
        break;
      }
      case COLL_BROADCAST:
        if (prim_reads_input(st.prim)) st.input_offset = data_offset;
        st.output_offset = data_offset;
        break;
      default:  // COLL_REDUCE
        st.input_offset = data_offset;
        if (st.prim == PRIM_RECV_REDUCE_COPY) {
          st.output_offset = data_offset;
          st.post_op = true;
        }
        break;
    }
    return st;
  }
};

// Slice `k` of a step of `len` elements cut into pieces of at most `max` (a multiple of
// `align`): the CPU executor's balanced cut (exec/ring.rs `slices`) with each piece rounded
// up to 16 bytes, so that every piece after the first starts 16-byte aligned. Both ends of
// a connection cut the same way, so their FIFO slots match one for one.
//
// `min_n` (weft_coll_work.min_slices): a step that fits in fewer pieces is still cut into
// up to `min_n` pieces at least 1/32 of `max` wide (the last may be shorter), as NCCL cuts
// every chunk into SlicePerChunk slices: the next rank starts on the first piece while the
// next is in flight.
struct Slicing {
  u64 n;
  u64 each;
  WEFT_HD void init(u64 len, u64 max, u64 align, u64 min_n = 1) {
    if (max == 0) max = 1;
    n = div_up(len, max);
    if (n == 0) n = 1;
    if (n < min_n) {
      u64 floor = align_up(max / 32, align);
      u64 most = floor == 0 ? 1 : len / floor;
      u64 want = min_u64(min_n, most);
      if (want > n) n = want;
    }
    each = min_u64(align_up(div_up(len, n), align), max);
    // Rounding each piece up may leave the last ones empty: drop them (both ends agree).
    if (each > 0) n = div_up(len, each);
    if (n == 0) n = 1;
  }
  WEFT_HD u64 start(u64 k, u64 len) const { return min_u64(k * each, len); }
  WEFT_HD u64 size(u64 k, u64 len) const { return min_u64(each, len - start(k, len)); }
};

}  // namespace weft

#endif
