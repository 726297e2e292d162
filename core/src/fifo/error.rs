//! What can go wrong between a sender and a receiver sharing a ring of slots.

use core::fmt;

/// A FIFO protocol violation or a bad configuration. Each variant carries the counters that
/// disagree, so the message says which side is out of step and by how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FifoError {
    /// A geometry parameter out of range (see `FifoGeometry::new`).
    BadGeometry { field: &'static str, value: u64 },
    /// The receiver's head is ahead of every step the sender posted: it returned credits for
    /// data that was never sent.
    HeadAhead { head: u64, posted: u64 },
    /// The sender's tail is further ahead of the receiver than the ring holds: unread slots
    /// were overwritten.
    TailOverrun {
        tail: u64,
        posted: u64,
        slots: usize,
    },
    /// `post` with no slice acquired and not yet posted.
    NothingAcquired { step: u64 },
    /// `post` of a slice other than the oldest one acquired (slices post in order).
    PostOutOfOrder { expected: u64, got: u64 },
    /// The sender records a size into a sizes-FIFO slot the consumer has not emptied.
    SizeSlotBusy { slot: usize, bytes: u32 },
    /// The consumer reads a sizes-FIFO slot that holds no size.
    SizeMissing { slot: usize, step: u64 },
    /// A raw sizes-FIFO entry that is neither -1 (unused) nor a byte count.
    BadRawSize { slot: usize, raw: i64 },
}

impl fmt::Display for FifoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FifoError::BadGeometry { field, value } => write!(
                f,
                "bad FIFO geometry: {field} = {value} (slots: a power of two up to 8; step_per_slice: \
                 a power of two up to slots; slice_per_chunk: a power of two up to 2^24)"
            ),
            FifoError::HeadAhead { head, posted } => write!(
                f,
                "receiver head {head} is ahead of the sender's last posted step {posted}: the two \
                 sides disagree on the connection's step (corrupted counters, or mismatched saved steps)"
            ),
            FifoError::TailOverrun {
                tail,
                posted,
                slots,
            } => write!(
                f,
                "sender tail {tail} is more than {slots} steps past the receiver's step {posted}: \
                 unread slots were overwritten (do both sides use the same number of slots?)"
            ),
            FifoError::NothingAcquired { step } => {
                write!(f, "post of step {step} with no slice acquired")
            }
            FifoError::PostOutOfOrder { expected, got } => write!(
                f,
                "post of step {got} while step {expected} is the oldest unposted slice"
            ),
            FifoError::SizeSlotBusy { slot, bytes } => write!(
                f,
                "sizes FIFO slot {slot} still holds {bytes} bytes the consumer has not taken"
            ),
            FifoError::SizeMissing { slot, step } => {
                write!(f, "sizes FIFO slot {slot} holds no size for step {step}")
            }
            FifoError::BadRawSize { slot, raw } => write!(
                f,
                "sizes FIFO slot {slot} holds {raw}: neither -1 (unused) nor a 32-bit byte count"
            ),
        }
    }
}
