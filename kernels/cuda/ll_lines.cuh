// The LL protocol's arithmetic (weft_core::fifo::ll), as plain integer functions compiled for
// the GPU (NVRTC, used by ll.cuh) and for the host (g++), so that a host test compares each
// with its Rust original over random and edge-case steps (kernels/tests/ll_lines.rs). Keep
// the two in lockstep: a change to core/src/fifo/ll.rs must be made here too.
#ifndef WEFT_LL_LINES_CUH
#define WEFT_LL_LINES_CUH

#include "ring_program.cuh"

namespace weft {

// NCCL_LL_CLEAN_MASK (core: NCCL_LL_CLEAN_MASK): 32-bit flags, 8 slots.
constexpr u64 LL_CLEAN_MASK = 0x7ffffff8ull;

// LlGeometry::flag: step + 1 in 32 bits, so zeroed memory reads as "written at step -1".
WEFT_HD u32 ll_flag(u64 step) { return (u32)(step + 1); }

// LlGeometry::cleans: the sender writes every pair of this step's slot.
WEFT_HD bool ll_cleans(u64 step) { return (step & LL_CLEAN_MASK) == LL_CLEAN_MASK; }

// LlGeometry::for_buffer(buff_size).lines_per_step(): 8-byte lines per slot.
WEFT_HD u64 ll_step_lines(u64 buff_size, u64 steps) { return steps == 0 ? 0 : buff_size / steps / 8; }

// LlGeometry::line_index(step, 0): the first line of step's slot.
WEFT_HD u64 ll_slot_line(u64 step, u64 steps, u64 step_lines) { return (step % steps) * step_lines; }

// LlGeometry::pairs_for: 16-byte pairs (8 payload bytes each) a message of `bytes` fills.
WEFT_HD u64 ll_pairs_for(u64 bytes) { return div_up(bytes, 8); }

// pair_words: the two 8-byte lines that carry `data` (low 4 bytes first) under `flag`.
WEFT_HD void ll_pair_words(u64 data, u32 flag, u64* lo, u64* hi) {
  const u64 f = (u64)flag << 32;
  *lo = (data & 0xffffffffull) | f;
  *hi = (data >> 32) | f;
}

// pair_data: the payload of a loaded pair if both of its lines carry `flag`.
WEFT_HD bool ll_pair_data(u64 lo, u64 hi, u32 flag, u64* data) {
  if ((u32)(lo >> 32) != flag || (u32)(hi >> 32) != flag) return false;
  *data = (lo & 0xffffffffull) | (hi << 32);
  return true;
}

// LlSender::acquire's credit: the slot of `step` is free once head + steps >= step + 1.
WEFT_HD bool ll_has_credit(u64 head, u64 step, u64 steps) { return step + 1 <= steps || head >= step + 1 - steps; }

}  // namespace weft

#endif
