// NCCL's LL ("low latency") protocol in the GPU kernels: data and its flag in one store.
//
// weft_core::fifo::ll is the reference; every number here is one of its functions:
//   - a connection's LL buffer is 8 slots (step s in slot s % 8) of `ll_step_lines` 8-byte
//     lines, each line { u32 data, u32 flag } little-endian (LlLine, LlGeometry::for_buffer);
//   - a GPU thread moves a *pair* of lines (8 payload bytes, NCCL's 16-byte ncclLLFifoLine)
//     with one vector store of two 8-byte words and polls it with one vector load of two;
//     each word is a single 8-byte access, so each line lands whole, and a pair counts only
//     when both of its lines carry the flag (pair_words, pair_data);
//   - the flag of step s is (u32)(s + 1) (LlGeometry::flag): zeroed memory is "step -1";
//   - a message of n bytes fills pairs 0 .. ceil(n / 8) of the slot, the last zero-padded
//     (LlGeometry::pairs_for);
//   - the sender fills step s only once head + 8 >= s + 1 (LlSender::acquire), where head is
//     the receiver's count of steps read, released after its reads (LlReceiver::post); there
//     is no tail: the flags are the post;
//   - a sender at a step with (s & 0x7ffffff8) == 0x7ffffff8 writes every pair of the slot,
//     past the message with zero data (LlGeometry::cleans, NCCL_LL_CLEAN_MASK), so no line
//     outlives a flag period.
// LL and SIMPLE share a connection's step counter and head (weft_conn_info.step, as NCCL's
// ncclConnInfo): a SIMPLE receiver waits for tail >= step + 1, which only a SIMPLE send of
// that very step stores, so steps taken by LL in between are skipped over correctly.
//
// No direct writes under LL (NCCL's LL primitives have none): the host sets work.direct = 0.
//
// Included by collectives.cu after Fifo, Block, wait_for and give_up, inside its element type
// T; not a header of its own. The arithmetic is in ll_lines.cuh (tested against core on the
// host).

#include "ll_lines.cuh"
#include "ll_pair.cuh"

namespace weft {

// One LL step of `n` elements, all threads of the block: out = finish(pre(a) OP received),
// sent on as lines of send's current step. Sources and destinations are template parameters,
// as for SIMPLE's reduce_copy_of; pre and post (Avg only) are run-time flags, since LL moves
// few bytes and each variant costs NVRTC time. `a` and `out` may alias (in place): each
// element is read before it is written, by the same thread. Every pair's elements past `n`
// stay zero unless received. The caller holds send's credit and posts the steps afterwards.
// A thread whose poll gave up stops its part of the step (ll_finish tells the block).
template <typename E, int OP, bool HAS_A, bool RECV, bool SEND, bool HAS_OUT>
__device__ void ll_step(const Block& b, const Reduction<E, OP>& red, bool pre, bool post, const E* a,
                        E* out, u64 n, const Fifo& send, const Fifo& recv, u32 channel,
                        LlStop halt) {
  constexpr int EPL = 8 / sizeof(E);
  const u64 npairs = ll_pairs_for(n * sizeof(E));
  u64* sline = SEND ? send.ll_buf + ll_slot_line(send.step, send.steps, send.ll_step_lines) : nullptr;
  const u64* rline = RECV ? recv.ll_buf + ll_slot_line(recv.step, recv.steps, recv.ll_step_lines) : nullptr;
  const u32 sflag = ll_flag(send.step);
  const u32 rflag = ll_flag(recv.step);
  bool ok = true;
  for (u64 p = threadIdx.x; p < npairs; p += THREADS) {
    const u64 first = p * EPL;
    const int cnt = (int)min_u64(EPL, n - first);
    LlPair<E> v;
    v.bits = 0;
    if (HAS_A) {
      ll_read_elems(v, a + first, cnt);
      if (pre) {
#pragma unroll
        for (int j = 0; j < EPL; j++)
          if (j < cnt) v.e[j] = red.pre(v.e[j]);
      }
    }
    if (RECV) {
      LlPair<E> r;
      if (!ll_load(b, rline + 2 * p, rflag, &r.bits, recv.peer, WEFT_WAIT_RECV, recv.step + 1, channel, halt)) {
        ok = false;
        break;
      }
      if (HAS_A) {
#pragma unroll
        for (int j = 0; j < EPL; j++)
          if (j < cnt) v.e[j] = red.combine(v.e[j], r.e[j]);
      } else {
        v = r;
      }
    }
    if (post) {
#pragma unroll
      for (int j = 0; j < EPL; j++)
        if (j < cnt) v.e[j] = red.finish(v.e[j]);
    }
    if (SEND) ll_store(sline + 2 * p, v.bits, sflag);
    if (HAS_OUT) ll_write_elems(out + first, v, cnt);
  }
  // Cleaning: every other pair of the slot gets this step's flag (core: LlSlot::clean).
  if (SEND && ok && ll_cleans(send.step)) {
    for (u64 p = npairs + threadIdx.x; p < send.ll_step_lines / 2; p += THREADS) ll_store(sline + 2 * p, 0, sflag);
  }
}

// Thread 0 waits for credit to fill send's next step (head + steps >= step + 1), as SIMPLE's
// sender does for a slot: a connection's first `steps` steps need none (ll_has_credit holds
// with any head), later ones wait until head >= step + 1 - steps. Then the whole block learns
// whether to go on.
__device__ __forceinline__ bool ll_acquire(const Block& b, const Fifo& send, bool sends, u32 channel,
                                           LlStop halt) {
  if (threadIdx.x == 0 && *halt.stop == 0 && sends && !ll_has_credit(0, send.step, send.steps)) {
    if (!wait_for(b, send.counter_mine, send.step + 1 - send.steps, send.peer, WEFT_WAIT_SEND, channel))
      *halt.stop = 1;
  }
  __syncthreads();
  return *halt.stop == 0;
}

// After every thread's part of a step: the barrier orders every thread's reads of the received
// lines before thread 0's release of the head (the sender may then overwrite the slot, 8 steps
// on); the sent lines need no post. A step some thread gave up on is not posted: thread 0
// raises `stop`, which the whole block reads at the next step's opening barrier.
__device__ __forceinline__ void ll_finish(Fifo& send, Fifo& recv, bool sends, bool receives, LlStop halt) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (*halt.failed) {
    *halt.stop = 1;
    return;
  }
  if (receives) store_release(recv.counter_peer, ++recv.step);
  if (sends) ++send.step;
}

// run_step's LL counterpart: one primitive of the ring program, cut into pieces of at most one
// LL step's payload, each piece one step of each connection it uses. False when the block
// must stop (every thread returns it together); a failure in the last piece is seen at the
// next primitive's first piece, or by thread 0 at the end of the kernel (`stop`).
template <int OP>
__device__ bool run_step_ll(const Block& b, const Reduction<T, OP>& red, u32 channel, Fifo& send,
                            Fifo& recv, const Step& st, const T* input, T* output, bool reduces,
                            LlStop halt) {
  const bool sends = prim_sends(st.prim);
  const bool receives = prim_receives(st.prim);
  const u64 align = align_elems(sizeof(T));
  const Fifo& used = sends ? send : recv;
  const u64 max_elems = used.ll_step_lines * 4 / sizeof(T) / align * align;
  Slicing cut;
  cut.init(st.len, max_elems, align);
  for (u64 k = 0; k < cut.n; k++) {
    const u64 off = cut.start(k, st.len);
    const u64 n = cut.size(k, st.len);
    if (!ll_acquire(b, send, sends, channel, halt)) return false;
    const T* in = prim_reads_input(st.prim) ? input + st.input_offset + off : nullptr;
    T* out = prim_writes_output(st.prim) ? output + st.output_offset + off : nullptr;
    const bool pre = reduces && in != nullptr;
    const bool post = st.post_op && reduces;
    switch (st.prim) {
      case PRIM_SEND:
        ll_step<T, OP, true, false, true, false>(b, red, pre, false, in, nullptr, n, send, recv, channel, halt);
        break;
      case PRIM_COPY_SEND:  // in place, the copy is skipped
        if (in == out)
          ll_step<T, OP, true, false, true, false>(b, red, false, false, in, nullptr, n, send, recv, channel, halt);
        else
          ll_step<T, OP, true, false, true, true>(b, red, false, false, in, out, n, send, recv, channel, halt);
        break;
      case PRIM_RECV:
        ll_step<T, OP, false, true, false, true>(b, red, false, false, nullptr, out, n, send, recv, channel, halt);
        break;
      case PRIM_RECV_COPY_SEND:
        ll_step<T, OP, false, true, true, true>(b, red, false, false, nullptr, out, n, send, recv, channel, halt);
        break;
      case PRIM_RECV_REDUCE_SEND:
        ll_step<T, OP, true, true, true, false>(b, red, pre, post, in, nullptr, n, send, recv, channel, halt);
        break;
      case PRIM_RECV_REDUCE_COPY_SEND:
        ll_step<T, OP, true, true, true, true>(b, red, pre, post, in, out, n, send, recv, channel, halt);
        break;
      case PRIM_RECV_REDUCE_COPY:
        ll_step<T, OP, true, true, false, true>(b, red, pre, post, in, out, n, send, recv, channel, halt);
        break;
      default:  // PRIM_COPY belongs to rings of one rank, which run SIMPLE
        ll_step<T, OP, true, false, false, true>(b, red, pre, post, in, out, n, send, recv, channel, halt);
        break;
    }
    ll_finish(send, recv, sends, receives, halt);
  }
  return true;
}

// One block's part of a point-to-point message of `bytes` under LL: `len` bytes in pieces of
// at most one LL step's payload (16-byte aligned, as SIMPLE cuts them), one step each, the
// first carrying the message's tag (check_p2p_tag). A failure in the last piece is left in
// `stop` for thread 0.
__device__ void p2p_ll(const Block& b, Fifo& fifo, bool send, u8* user, u64 len, u64 bytes, u32 channel,
                       LlStop halt) {
  Reduction<u8, OP_SUM> copy;
  copy.init(0, 0, 1);
  Slicing cut;
  cut.init(len, fifo.ll_step_lines * 4 / 16 * 16, 16);
  for (u64 s = 0; s < cut.n && len > 0; s++) {
    const u64 off = cut.start(s, len);
    const u64 n = cut.size(s, len);
    if (!ll_acquire(b, fifo, send, channel, halt)) return;
    if (send && s == 0 && threadIdx.x == 0) post_p2p_tag(fifo, bytes);
    if (send)
      ll_step<u8, OP_SUM, true, false, true, false>(b, copy, false, false, user + off, nullptr, n, fifo, fifo,
                                                   channel, halt);
    else
      ll_step<u8, OP_SUM, false, true, false, true>(b, copy, false, false, nullptr, user + off, n, fifo, fifo,
                                                   channel, halt);
    // Thread 0 checks the tag before ll_finish frees the slot (it reads `failed` after the
    // block's barrier there).
    if (!send && s == 0 && threadIdx.x == 0 && *halt.failed == 0 && !check_p2p_tag(b, fifo, bytes, channel, false))
      *halt.failed = 1;
    ll_finish(fifo, fifo, send, !send, halt);
  }
}

}  // namespace weft
