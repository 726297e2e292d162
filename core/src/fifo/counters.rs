//! The counters both ends keep: they differ only in which peer counter gates `acquire`.

use super::error::FifoError;
use super::geometry::FifoGeometry;
use super::slice::Slice;

/// Steps acquired (slices granted) and steps posted (slices handed back), over one geometry.
/// `posted <= acquired` on wrapping differences, and the gap is whole slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct StepCounters {
    pub(super) geometry: FifoGeometry,
    pub(super) acquired: u64,
    pub(super) posted: u64,
}

impl StepCounters {
    /// Both counters at `saved_step` rounded up to a chunk boundary, so the two ends, which
    /// round the same way, agree on where the kernel starts.
    pub(super) fn load(geometry: FifoGeometry, saved_step: u64) -> Self {
        let step = geometry.round_up(saved_step);
        StepCounters {
            geometry,
            acquired: step,
            posted: step,
        }
    }

    /// Slices acquired and not yet posted.
    pub(super) fn outstanding(&self) -> u64 {
        self.acquired
            .wrapping_sub(self.posted)
            .checked_div(self.geometry.step_per_slice())
            .unwrap_or(0)
    }

    /// Grants the slice at `acquired`; the caller has checked the peer's counter allows it.
    pub(super) fn grant(&mut self) -> Slice {
        let sps = self.geometry.step_per_slice();
        let slice = Slice::new(self.acquired, self.geometry.slot_of(self.acquired), sps);
        self.acquired = self.acquired.wrapping_add(sps);
        slice
    }

    /// Takes back the oldest granted slice (posts go in order); returns the new posted step.
    pub(super) fn post(&mut self, slice: &Slice) -> Result<u64, FifoError> {
        if self.acquired == self.posted {
            return Err(FifoError::NothingAcquired { step: slice.step() });
        }
        if slice.step() != self.posted {
            return Err(FifoError::PostOutOfOrder {
                expected: self.posted,
                got: slice.step(),
            });
        }
        self.posted = slice.end_step();
        Ok(self.posted)
    }
}
