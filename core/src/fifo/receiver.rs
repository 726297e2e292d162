//! The receiver's half: read a slice only once the sender has posted all of it.

use super::counters::StepCounters;
use super::error::FifoError;
use super::geometry::{FifoGeometry, steps_ahead};
use super::slice::Slice;

/// The receiving end of a connection: its step counters, as pure state.
///
/// The receiver may read the slice at `step` only while `tail >= step + step_per_slice`,
/// on wrapping differences. `post` frees the slice's slots and returns the new `head`.
/// A tail behind `step` is normal right after `load` (rounding skipped steps the sender will
/// skip too); a tail more than a ring ahead of the posted head is an overrun, reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepReceiver {
    counters: StepCounters,
}

impl StepReceiver {
    /// Starts a kernel on a connection whose step was `saved_step`, rounded up to a chunk
    /// boundary. Publish [`StepReceiver::posted_step`] as the head right away: that returns
    /// the credits of the steps the rounding skipped (as NCCL does on load).
    pub fn load(geometry: FifoGeometry, saved_step: u64) -> Self {
        StepReceiver {
            counters: StepCounters::load(geometry, saved_step),
        }
    }

    pub fn geometry(&self) -> FifoGeometry {
        self.counters.geometry
    }

    /// The step the next `acquire` waits for.
    pub fn next_step(&self) -> u64 {
        self.counters.acquired
    }

    /// Steps consumed and freed: the head to publish, and the step to save at kernel end.
    pub fn posted_step(&self) -> u64 {
        self.counters.posted
    }

    /// Slices acquired and not yet posted.
    pub fn outstanding(&self) -> u64 {
        self.counters.outstanding()
    }

    /// NCCL's rule: `tail >= step + step_per_slice`, on wrapping differences.
    pub fn can_recv(&self, tail: u64) -> bool {
        self.counters
            .geometry
            .can_recv(tail, self.counters.acquired)
    }

    /// The next slice if the sender's `tail` covers it, `None` to wait.
    pub fn acquire(&mut self, tail: u64) -> Result<Option<Slice>, FifoError> {
        let slots = self.counters.geometry.slots();
        let posted = self.counters.posted;
        if steps_ahead(tail, posted) > i64::try_from(slots).unwrap_or(i64::MAX) {
            return Err(FifoError::TailOverrun {
                tail,
                posted,
                slots,
            });
        }
        if !self.can_recv(tail) {
            return Ok(None);
        }
        Ok(Some(self.counters.grant()))
    }

    /// Frees the oldest acquired slice; returns the new head to publish (after the data has
    /// been read out of the slots).
    pub fn post(&mut self, slice: Slice) -> Result<u64, FifoError> {
        self.counters.post(&slice)
    }
}
