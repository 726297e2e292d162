//! The sender's half: fill a slice only while the receiver has freed its slots.

use super::counters::StepCounters;
use super::error::FifoError;
use super::geometry::{FifoGeometry, steps_ahead};
use super::slice::Slice;

/// The sending end of a connection: its step counters, as pure state.
///
/// The receiver publishes `head` (steps it has consumed); the sender publishes `tail` (steps
/// it has filled). The sender may fill the slice at `step` only while
/// `head + slots >= step + step_per_slice`: every slot of the slice was consumed a full ring
/// ago. Comparisons are on wrapping differences, so counters may cross `u64::MAX`.
///
/// Acquiring and posting are separate, as in NCCL where one thread waits for credit while
/// another posts the previous slice: several slices may be acquired before the oldest is
/// posted, and posts go in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepSender {
    counters: StepCounters,
}

impl StepSender {
    /// Starts a kernel on a connection whose step was `saved_step`, rounded up to a chunk
    /// boundary (the receiver rounds the same way, so both sides agree).
    pub fn load(geometry: FifoGeometry, saved_step: u64) -> Self {
        StepSender {
            counters: StepCounters::load(geometry, saved_step),
        }
    }

    pub fn geometry(&self) -> FifoGeometry {
        self.counters.geometry
    }

    /// The step the next `acquire` asks credit for.
    pub fn next_step(&self) -> u64 {
        self.counters.acquired
    }

    /// Steps posted so far: the last tail published, and the step to save at kernel end.
    pub fn posted_step(&self) -> u64 {
        self.counters.posted
    }

    /// Slices acquired and not yet posted.
    pub fn outstanding(&self) -> u64 {
        self.counters.outstanding()
    }

    /// NCCL's rule: `head + slots >= step + step_per_slice`, on wrapping differences.
    pub fn can_send(&self, head: u64) -> bool {
        self.counters
            .geometry
            .can_send(head, self.counters.acquired)
    }

    /// The next slice if the receiver's `head` leaves room for it, `None` to wait. A head
    /// past every posted step is a protocol violation, reported instead of trusted.
    pub fn acquire(&mut self, head: u64) -> Result<Option<Slice>, FifoError> {
        let posted = self.counters.posted;
        if steps_ahead(head, posted) > 0 {
            return Err(FifoError::HeadAhead { head, posted });
        }
        if !self.can_send(head) {
            return Ok(None);
        }
        Ok(Some(self.counters.grant()))
    }

    /// Marks the oldest acquired slice as filled; returns the new tail to publish (after the
    /// data and its size are visible to the receiver).
    pub fn post(&mut self, slice: Slice) -> Result<u64, FifoError> {
        self.counters.post(&slice)
    }
}
