//! The sizes FIFO: per slot, how many bytes the sender put in it.

use super::error::FifoError;
use super::geometry::NCCL_STEPS;
use super::slice::Slice;

/// NCCL's marker for a sizes-FIFO slot that holds no size (`connFifo[i].size = -1`).
pub const SIZE_UNUSED: i64 = -1;

/// One byte count per slot, indexed by a slice's first slot. The sender records the size
/// of a slice when it acquires it; the consumer (the receiver, or a NET proxy) takes it
/// before freeing the slice, which empties the entry again. A record into a full entry or a
/// take from an empty one means the two sides disagree on the step, and is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SizesFifo {
    sizes: [Option<u32>; NCCL_STEPS],
}

impl SizesFifo {
    /// All entries unused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `bytes` for `slice`; fails if the consumer has not taken the previous size.
    pub fn record(&mut self, slice: &Slice, bytes: u32) -> Result<(), FifoError> {
        let slot = slice.first_slot();
        match self.sizes.get_mut(slot) {
            Some(entry @ None) => {
                *entry = Some(bytes);
                Ok(())
            }
            Some(Some(pending)) => Err(FifoError::SizeSlotBusy {
                slot,
                bytes: *pending,
            }),
            None => Err(FifoError::SizeMissing {
                slot,
                step: slice.step(),
            }),
        }
    }

    /// The size recorded for `slice`, if any, without taking it.
    pub fn peek(&self, slice: &Slice) -> Option<u32> {
        self.sizes.get(slice.first_slot()).copied().flatten()
    }

    /// Takes the size recorded for `slice`, leaving the entry unused.
    pub fn take(&mut self, slice: &Slice) -> Result<u32, FifoError> {
        let slot = slice.first_slot();
        self.sizes
            .get_mut(slot)
            .and_then(Option::take)
            .ok_or(FifoError::SizeMissing {
                slot,
                step: slice.step(),
            })
    }

    /// The entries as NCCL stores them: bytes, or [`SIZE_UNUSED`].
    pub fn to_raw(&self) -> [i64; NCCL_STEPS] {
        self.sizes.map(|s| s.map_or(SIZE_UNUSED, i64::from))
    }

    /// Reads entries stored the NCCL way; anything but -1 or a `u32` byte count is refused.
    pub fn from_raw(raw: [i64; NCCL_STEPS]) -> Result<Self, FifoError> {
        let mut fifo = SizesFifo::default();
        for (slot, (entry, value)) in fifo.sizes.iter_mut().zip(raw).enumerate() {
            *entry = match value {
                SIZE_UNUSED => None,
                v => Some(u32::try_from(v).map_err(|_| FifoError::BadRawSize { slot, raw: v })?),
            };
        }
        Ok(fifo)
    }
}
