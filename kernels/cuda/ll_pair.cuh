// LL pairs in device code: how a thread stores and polls a pair of LL lines (data and flag in
// one store, ll_lines.cuh's arithmetic), the wait that keeps the deadline and the abort flag
// while polling, and how the threads of a block agree to stop. Used by the LL ring (ll.cuh)
// and the LL one-shot all-reduce (direct.cu). Needs Block, give_up and global_timer
// (sync.cuh) first.
#ifndef WEFT_LL_PAIR_CUH
#define WEFT_LL_PAIR_CUH

#include "ll_lines.cuh"

namespace weft {

// How the threads of a block agree to stop, without a barrier ever being skipped by some of
// them: two shared words, each read only where no thread can be writing it.
//   failed: set (atomically, by the first) by a thread whose poll gave up, during a step;
//           read by the other pollers (to leave their polls) and, after the step's closing
//           barrier, by thread 0 alone.
//   stop:   written by thread 0 alone (its credit wait gave up, or it found `failed` set),
//           before the barrier that opens the next step, after which every thread reads it.
// So a failure in a step surfaces at the next step's opening barrier, where every thread
// returns together.
struct LlStop {
  volatile int* stop;
  volatile int* failed;
};

// Host-memory looks (the abort flag) per LL poll check: every thread of a block polls its own
// lines, and 512 threads reading a host-mapped word every 256 spins would load PCIe.
constexpr u32 LL_CHECKS_PER_ABORT_LOOK = 16;

// Both lines of a pair (ll_pair_words), one 8-byte access each.
__device__ __forceinline__ void ll_store(u64* dst, u64 data, u32 flag) {
  u64 lo, hi;
  ll_pair_words(data, flag, &lo, &hi);
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(dst), "l"(lo), "l"(hi) : "memory");
}

// The pair's 8 payload bytes if both lines carry `flag` (ll_pair_data).
__device__ __forceinline__ bool ll_try_load(const u64* src, u32 flag, u64* data) {
  u64 lo, hi;
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(src) : "memory");
  return ll_pair_data(lo, hi, flag, data);
}

// Polls one pair until it carries `flag`. Every thread polls its own pairs, so every thread
// keeps the deadline: the first to give up (claiming `failed` atomically) records the fault
// and raises the abort flag; the others see `failed` at their next check and leave quietly.
// `kind` and `need` go into the fault record (WEFT_WAIT_*, and the step or epoch waited for).
// False when the block must stop.
__device__ bool ll_load(const Block& b, const u64* src, u32 flag, u64* data, int peer, u32 kind,
                        u64 need, u32 channel, LlStop halt) {
  if (ll_try_load(src, flag, data)) return true;
  const u64 start = global_timer();
  u32 spins = 0, checks = 0;
  for (;;) {
    if (ll_try_load(src, flag, data)) return true;
    if (++spins < SPINS_PER_CHECK) continue;
    spins = 0;
    if (*halt.failed) return false;
    const u64 now = global_timer();
    u32 code = WEFT_FAULT_NONE;
    if (++checks % LL_CHECKS_PER_ABORT_LOOK == 0 && *b.abort_flag != 0) {
      code = WEFT_FAULT_ABORTED;
    } else if (b.comm->timeout_ns != 0 && now - start > b.comm->timeout_ns) {
      code = WEFT_FAULT_TIMEOUT;
    }
    if (code == WEFT_FAULT_NONE) continue;
    if (atomicExch((int*)halt.failed, 1) == 0) give_up(b, code, channel, peer, kind, need, now - start);
    return false;
  }
}

// 8 payload bytes as elements of E.
template <typename E> union LlPair {
  u64 bits;
  E e[8 / sizeof(E)];
};

// `cnt` elements from `src` (user memory) into a zeroed pair: one 8-byte load when whole and
// aligned, else element by element (misaligned pieces, the last pair).
template <typename E>
__device__ __forceinline__ void ll_read_elems(LlPair<E>& v, const E* src, int cnt) {
  constexpr int EPL = 8 / sizeof(E);
  if (cnt == EPL && ((uintptr_t)src & 7) == 0) {
    v.bits = *(const u64*)src;
  } else {
#pragma unroll
    for (int j = 0; j < EPL; j++)
      if (j < cnt) v.e[j] = src[j];
  }
}

template <typename E>
__device__ __forceinline__ void ll_write_elems(E* dst, const LlPair<E>& v, int cnt) {
  constexpr int EPL = 8 / sizeof(E);
  if (cnt == EPL && ((uintptr_t)dst & 7) == 0) {
    *(u64*)dst = v.bits;
  } else {
#pragma unroll
    for (int j = 0; j < EPL; j++)
      if (j < cnt) dst[j] = v.e[j];
  }
}

}  // namespace weft

#endif
