// What every kernel that waits on a peer shares: the GPU clock, acquire loads and release
// stores at system scope, reads of memory another GPU wrote (past L1), and the one wait loop, which polls the communicator's abort flag
// and gives up after weft_dev_comm.timeout_ns, recording in the block's weft_kernel_fault
// which peer and which wait, and raising the abort flag so the other blocks stop too.
#ifndef WEFT_SYNC_CUH
#define WEFT_SYNC_CUH

#include "weft_abi.h"
#include "ring_program.cuh"
#include "reduce.cuh"

namespace weft {

// Spins between two looks at the abort flag and the clock (the flag lives in host memory:
// reading it crosses PCIe).
constexpr u32 SPINS_PER_CHECK = 256;

__device__ __forceinline__ u64 global_timer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ u64 load_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint4 load_volatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The unsigned integer of each element size.
template <int N> struct BitsOf;
template <> struct BitsOf<1> { typedef u8 T; };
template <> struct BitsOf<2> { typedef u16 T; };
template <> struct BitsOf<4> { typedef u32 T; };
template <> struct BitsOf<8> { typedef u64 T; };

// An element of a received slot, past the L1 cache (another GPU wrote it). Every element
// type is plain bits of its size (an integer, a float, or a struct of one integer).
template <typename E>
__device__ __forceinline__ E load_volatile_elem(const E* p) {
  typedef typename BitsOf<sizeof(E)>::T B;
  union {
    B bits;
    E elem;
  } r;
  r.bits = *(const volatile B*)p;
  return r.elem;
}

struct Block {
  const weft_dev_comm* comm;
  volatile u32* abort_flag;
  weft_kernel_fault* fault;
  u32 fault_index;
};

// After giving up, the block holds its stream until the host has heard of the failure:
// until the release word (the u32 after the abort flag, DevComm::abort_flag) is set, which
// the host does when the communicator is aborted, revoked, finalized or destroyed, and when
// a call that waits for the stream is about to report the failure. This is NCCL's contract:
// a collective whose peer failed never completes; the program learns of the failure from
// ncclCommGetAsyncError and aborts the communicator. A kernel that simply returned would
// complete the call with whatever its output held, and a program that trusts completion
// would go on with a wrong result: found on two H200 (2026-11-28), where PyTorch's
// all_reduce on a rank whose peer never joined returned that rank's own input, and no error
// reached PyTorch (it asks ncclCommGetAsyncError about work that has not completed). The
// way out is the host's: its abort always releases.
__device__ void hold_until_heard(const Block& b) {
  const volatile u32* release = b.abort_flag + 1;
  while (*release == 0) {
#if __CUDA_ARCH__ >= 700
    __nanosleep(2000);
#endif
  }
}

// Records why this block gives up (in its host-mapped weft_kernel_fault) and raises the
// abort flag so that the other blocks, and the host, stop too. One thread per block (or warp
// group) calls it. The warp groups of one block (NVLS's three roles) share one record, and
// the first to give up is the one that names the peer (a TIMEOUT; the others then see the
// abort flag): so each claims the record (code NONE -> CLAIMED) before writing, and one that
// lost the claim writes nothing. Atomics on mapped host memory are atomic among the threads
// of this GPU, all that contend for a block's record. The code is written last, after a
// fence, so the host (which skips CLAIMED records) never reads half a record.
__device__ void give_up(const Block& b, u32 code, u32 channel, int peer, u32 kind, u64 step,
                        u64 waited_ns) {
  if (b.fault != nullptr) {
    weft_kernel_fault* f = b.fault + b.fault_index;
    if (atomicCAS(&f->code, (u32)WEFT_FAULT_NONE, (u32)WEFT_FAULT_CLAIMED) == WEFT_FAULT_NONE) {
      volatile weft_kernel_fault* v = f;
      v->channel = channel;
      v->peer = peer;
      v->wait = kind;
      v->step = step;
      v->waited_ns = waited_ns;
      __threadfence_system();
      v->code = code;
    } else {
      // Lost: give the winner (a sibling warp group, running concurrently) up to a
      // millisecond to finish its record before the abort flag sends the host to read it.
      const u64 start = global_timer();
      while (*(volatile u32*)&f->code == WEFT_FAULT_CLAIMED && global_timer() - start < 1000000) {
      }
    }
  }
  __threadfence_system();
  *b.abort_flag = 1;
  __threadfence_system();
  hold_until_heard(b);
}

// Waits (one thread: the one that speaks for its block or warp group) until
// *counter >= need. False when the block must stop.
__device__ bool wait_for(const Block& b, const u64* counter, u64 need, int peer, u32 kind,
                         u32 channel) {
  if (load_acquire(counter) >= need) return true;
  // A wait on this rank itself (NVLS: the gather role waits for the reduce role of its own
  // block) is only late because another wait of the block is: twice the deadline, so that
  // the wait on the rank really missing gives up first and names it; the abort flag it
  // raises then ends this one.
  const u64 timeout_ns = peer == b.comm->rank ? 2 * b.comm->timeout_ns : b.comm->timeout_ns;
  u64 start = global_timer();
  u32 spins = 0;
  for (;;) {
    if (load_acquire(counter) >= need) return true;
    if (++spins < SPINS_PER_CHECK) continue;
    spins = 0;
    u32 code = WEFT_FAULT_NONE;
    u64 now = global_timer();
    if (*b.abort_flag != 0) {
      code = WEFT_FAULT_ABORTED;
    } else if (timeout_ns != 0 && now - start > timeout_ns) {
      code = WEFT_FAULT_TIMEOUT;
    }
    if (code == WEFT_FAULT_NONE) continue;
    give_up(b, code, channel, peer, kind, need, now - start);
    return false;
  }
}

}  // namespace weft

#endif
