//! A slice granted by `acquire`: the proof that its slots may be written (or read) now.

use core::ops::Range;

/// The slots of one slice, from `StepSender::acquire` or `StepReceiver::acquire`, to be
/// handed back to `post` once the data is written (or consumed). Only `acquire` makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slice {
    step: u64,
    first_slot: u8,
    slot_count: u8,
}

impl Slice {
    /// Only `acquire` calls this; `first_slot + slot_count <= slots <= 8` by the geometry.
    pub(super) fn new(step: u64, first_slot: usize, slot_count: u64) -> Self {
        Slice {
            step,
            first_slot: u8::try_from(first_slot).unwrap_or(u8::MAX),
            slot_count: u8::try_from(slot_count).unwrap_or(u8::MAX),
        }
    }

    /// The slice's first step (the counter value it was granted at).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The step after the slice: the value `post` publishes.
    pub fn end_step(&self) -> u64 {
        self.step.wrapping_add(u64::from(self.slot_count))
    }

    /// The slot that holds the slice's first step, and its sizes-FIFO entry.
    pub fn first_slot(&self) -> usize {
        usize::from(self.first_slot)
    }

    /// The slots the slice covers (`step_per_slice` of them, never wrapping the ring).
    pub fn slots(&self) -> Range<usize> {
        let first = usize::from(self.first_slot);
        first..first.saturating_add(usize::from(self.slot_count))
    }
}
