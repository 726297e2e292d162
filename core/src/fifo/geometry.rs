//! The shape of a ring: how many slots, how many steps a slice takes, how many slices a chunk.

use super::error::FifoError;

/// NCCL's number of slots per connection buffer (`NCCL_STEPS`).
pub const NCCL_STEPS: usize = 8;

/// Slots in the ring and the slice/chunk sizes in steps, validated once.
///
/// Every count is a power of two. For `slots` and the chunk this is what makes the u64
/// counters wrap safely: 2^64 is then a multiple of both, so `step % slots` and the
/// rounding to a chunk boundary carry on seamlessly from `u64::MAX` to 0. `step_per_slice`
/// then divides `slots`, so a slice never straddles the end of the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FifoGeometry {
    slots: u8,
    step_per_slice: u8,
    slice_per_chunk: u32,
}

impl FifoGeometry {
    /// NCCL's SIMPLE protocol for point-to-point: 8 slots, one step per slice and chunk.
    pub const P2P: FifoGeometry = FifoGeometry {
        slots: 8,
        step_per_slice: 1,
        slice_per_chunk: 1,
    };

    /// Validates the three counts; see the type's documentation for the rules.
    pub fn new(
        slots: usize,
        step_per_slice: usize,
        slice_per_chunk: usize,
    ) -> Result<Self, FifoError> {
        let bad = |field, value: usize| FifoError::BadGeometry {
            field,
            value: u64::try_from(value).unwrap_or(u64::MAX),
        };
        if !slots.is_power_of_two() || slots > NCCL_STEPS {
            return Err(bad("slots", slots));
        }
        if !step_per_slice.is_power_of_two() || step_per_slice > slots {
            return Err(bad("step_per_slice", step_per_slice));
        }
        let spc = u32::try_from(slice_per_chunk)
            .ok()
            .filter(|s| s.is_power_of_two() && *s <= 1 << 24)
            .ok_or(bad("slice_per_chunk", slice_per_chunk))?;
        Ok(FifoGeometry {
            // Both fit: they are at most NCCL_STEPS (8).
            slots: u8::try_from(slots).map_err(|_| bad("slots", slots))?,
            step_per_slice: u8::try_from(step_per_slice)
                .map_err(|_| bad("step_per_slice", step_per_slice))?,
            slice_per_chunk: spc,
        })
    }

    /// NCCL's geometry for a collective: [`NCCL_STEPS`] slots (all-reduce uses 2 steps per
    /// slice and 2 slices per chunk).
    pub fn simple(step_per_slice: usize, slice_per_chunk: usize) -> Result<Self, FifoError> {
        Self::new(NCCL_STEPS, step_per_slice, slice_per_chunk)
    }

    pub fn slots(&self) -> usize {
        usize::from(self.slots)
    }

    pub fn step_per_slice(&self) -> u64 {
        u64::from(self.step_per_slice)
    }

    pub fn slice_per_chunk(&self) -> u64 {
        u64::from(self.slice_per_chunk)
    }

    /// Steps per chunk: `slice_per_chunk * step_per_slice`, a power of two.
    pub fn chunk_steps(&self) -> u64 {
        // At most 2^24 * 8: no overflow; saturating only to satisfy the lint.
        self.slice_per_chunk().saturating_mul(self.step_per_slice())
    }

    /// The slot that holds `step`.
    pub fn slot_of(&self, step: u64) -> usize {
        let slots = u64::from(self.slots);
        // slots is a power of two, so the mask is the remainder; the result is below 8.
        usize::try_from(step & slots.wrapping_sub(1)).unwrap_or(0)
    }

    /// NCCL's send rule for a sender whose next slice starts at `step`, given the receiver's
    /// published `head`: `head + slots >= step + step_per_slice`, on wrapping differences.
    pub fn can_send(&self, head: u64, step: u64) -> bool {
        // slots - step_per_slice: at least 0 (validated), at most 7.
        let window = i64::from(self.slots).saturating_sub(i64::from(self.step_per_slice));
        steps_ahead(step, head) <= window
    }

    /// NCCL's receive rule for a receiver whose next slice starts at `step`, given the
    /// sender's published `tail`: `tail >= step + step_per_slice`, on wrapping differences.
    pub fn can_recv(&self, tail: u64, step: u64) -> bool {
        steps_ahead(tail, step) >= i64::from(self.step_per_slice)
    }

    /// `step` rounded up to the next chunk boundary, as a connection's step is when a
    /// kernel loads it (NCCL: `roundUp(step, SlicePerChunk*StepPerSlice)`), so that every
    /// chunk starts on a slice boundary. Wraps past `u64::MAX` to 0, which is a boundary.
    pub fn round_up(&self, step: u64) -> u64 {
        let mask = self.chunk_steps().wrapping_sub(1);
        match step & mask {
            0 => step,
            rem => step.wrapping_add(mask.wrapping_sub(rem).wrapping_add(1)),
        }
    }
}

/// How far `later` is ahead of `earlier`, for counters that may have wrapped: the wrapping
/// difference read as signed. Correct while the true distance is under 2^63 steps, which the
/// protocol guarantees (its counters stay within a few rings of each other).
pub fn steps_ahead(later: u64, earlier: u64) -> i64 {
    // Reinterpreting the two's-complement difference as signed is the point of this cast.
    #[allow(clippy::cast_possible_wrap)]
    let ahead = later.wrapping_sub(earlier) as i64;
    ahead
}
