// Where the peer-pointer kernels' data lives and how a call is cut: weft_core::nvls's
// layout and loops, and its channel split, as plain integer arithmetic compiled for the GPU
// (NVRTC) and for the host (g++), so that a host test (kernels/tests/peer_layout.rs) can
// compare every offset and every part with the Rust original. Keep the two in lockstep.
#ifndef WEFT_PEER_LAYOUT_CUH
#define WEFT_PEER_LAYOUT_CUH

#include "ring_program.cuh"

namespace weft {

// core::nvls: CREDIT_BLOCK, POSTED_OFFSET, FREED_OFFSET, LAST_CHUNK_ALIGN, STEPS.
constexpr u64 CREDIT_BLOCK = 128;
constexpr u64 POSTED_OFFSET = 0;
constexpr u64 FREED_OFFSET = 64;
constexpr u64 LAST_CHUNK_ALIGN = 16384;
constexpr u64 NVLS_STEPS = 8;
// core::nvls::Direction.
constexpr u32 SCATTER = 0;
constexpr u32 BROADCAST = 1;

// The slot step `step` uses in head `h`'s buffer of direction `dir` on channel `c`
// (core::nvls::Layout::slot_offset), for a layout of `nch` channels and `chunk`-byte slots.
WEFT_HD u64 nvls_slot(u32 h, u32 dir, u64 nch, u32 c, u64 chunk, u64 step) {
  u64 block = ((u64)h * 2 + dir) * nch + c;
  return block * chunk * NVLS_STEPS + (step % NVLS_STEPS) * chunk;
}

// Rank `of_rank`'s posted (or freed) counter in the block of (h, dir, c)
// (core::nvls::Layout::credit_offset + POSTED_OFFSET / FREED_OFFSET + 8 * rank).
WEFT_HD u64 nvls_counter(u32 h, u32 dir, u64 nch, u32 c, bool posted, int of_rank) {
  u64 block = ((u64)h * 2 + dir) * nch + c;
  return block * CREDIT_BLOCK + (posted ? POSTED_OFFSET : FREED_OFFSET) + (u64)of_rank * 8;
}

// The elements channel `c` of `nch` carries of `count` (core::nvls::channel_part): equal
// parts rounded up to 16 bytes, the last ones short or empty.
WEFT_HD void peer_channel_part(u64 count, u64 esize, u64 nch, u64 c, u64* start, u64* len) {
  u64 per = align_up(div_up(count, nch), align_elems(esize));
  u64 s = min_u64(c * per, count);
  *start = s;
  *len = min_u64(per, count - s);
}

// Elements per loop of a channel: all-reduce takes a chunk per head (core::nvls::Loops with
// `nheads` heads); reduce-scatter and all-gather one chunk, at the same place of every
// head's segment (core::nvls::Loops with one head, per segment).
WEFT_HD u64 nvls_loop_elems(bool all_reduce, u64 chunk_elems, u64 nheads) {
  return all_reduce ? chunk_elems * nheads : chunk_elems;
}

WEFT_HD u64 nvls_nloops(bool all_reduce, u64 ccount, u64 chunk_elems, u64 nheads) {
  return div_up(ccount, nvls_loop_elems(all_reduce, chunk_elems, nheads));
}

// The elements head `h` carries in loop `s` of a channel of `ccount` elements, as (first
// element within the channel, or within the head's segment of it, and count).
WEFT_HD void nvls_head_part(bool all_reduce, u64 ccount, u64 chunk_elems, u64 nheads, u64 esize,
                            u64 s, u64 h, u64* start, u64* len) {
  const u64 per_head = all_reduce ? nheads : 1;
  const u64 loop_elems = chunk_elems * per_head;
  const u64 off = s * loop_elems;
  u64 chunk = chunk_elems;
  if (off < ccount && ccount - off < loop_elems) {
    const u64 align = LAST_CHUNK_ALIGN / esize > 0 ? LAST_CHUNK_ALIGN / esize : 1;
    chunk = min_u64(align_up(div_up(ccount - off, per_head), align), chunk_elems);
  }
  const u64 first = all_reduce ? off + h * chunk : off;
  *start = min_u64(first, ccount);
  *len = min_u64(chunk, ccount - *start);
}

}  // namespace weft

#endif
