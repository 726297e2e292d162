//! Chunk and slice scheduling, and the per-rank ring programs of each collective.
//!
//! This is the plan that every executor runs: the CPU executor (host buffers, threads, FIFO
//! slots) and the CUDA kernels (one block per channel) walk the same sequence of steps, so the
//! CPU one can serve as the reference the GPU one is compared against.
//!
//! How a collective call becomes steps, in the order NCCL's SIMPLE ring does it:
//!
//! 1. [`sizing`]: the connection buffer is cut into [`STEPS`] FIFO steps; a *chunk* is
//!    `chunk_steps` of them (2 MiB for all-reduce with NCCL's default 4 MiB buffer) and is sent
//!    as `chunk_steps / slice_steps` *slices* whose size follows NCCL's rule
//!    `max(divUp(nelem, 16 * slicesPerChunk) * 16, sliceSize / 32)`.
//! 2. [`partition`]: the `count` elements are split into one contiguous, 16-byte aligned part
//!    per channel (NCCL's "channel-balanced distribution"); trailing channels may get nothing.
//! 3. [`program`]: for a rank's position on the channel's [`Ring`], a [`RingProgram`] iterates
//!    over its part in loops (`nranks * chunk` elements per loop for all-reduce, `chunk`
//!    otherwise) and yields [`RingStep`]s: a [`Primitive`] (send, recvReduceSend, ...) with the
//!    element offsets in the user's input and output buffers it touches.
//!
//! Whom a step receives from and sends to is implied by the ring: always the ring's previous
//! and next rank ([`RingProgram::prev`], [`RingProgram::next`]). A primitive that sends or
//! receives uses `chunk_steps` FIFO steps of that connection even when its `len` is 0, which
//! keeps both ends' step counters equal without any extra message.
//!
//! NCCL's *direct* variants (`directSend`, `directRecv`, ...) are the same steps with a
//! different transport (peer reads or writes the user buffer); that choice belongs to the
//! executor, not to the plan.

pub mod collective;
pub mod partition;
pub mod program;
pub mod ring;
pub mod sizing;

pub use collective::{Collective, Primitive};
pub use partition::{ChannelPart, align_elems, channel_part, channels_for};
pub use program::{ProgramSpec, RingProgram, RingStep};
pub use ring::Ring;
pub use sizing::{ChunkSizing, DEFAULT_BUFFER_BYTES, STEPS, Slices};

use core::fmt;

/// Why a schedule cannot be built. Each variant carries the values at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedError {
    /// A ring with no ranks (`nranks = 0`).
    NoRanks,
    /// More ranks than a `u32` rank number can name.
    TooManyRanks { nranks: usize },
    /// `rank` is not below `nranks`.
    RankOutOfRange { rank: u32, nranks: usize },
    /// The Broadcast / Reduce root is not below `nranks`.
    RootOutOfRange { root: u32, nranks: usize },
    /// A ring entry names a rank that does not exist.
    RingEntryOutOfRange {
        position: usize,
        rank: u32,
        nranks: usize,
    },
    /// A rank appears twice on a ring (so another one is missing).
    RingDuplicate { rank: u32 },
    /// `nchannels = 0`.
    NoChannels,
    /// `channel` is not below `nchannels`.
    ChannelOutOfRange { channel: u32, nchannels: u32 },
    /// A chunk of 0 elements would never make progress.
    ZeroChunk,
    /// An element size of 0 bytes.
    ZeroElementSize,
    /// The connection buffer is too small for one grain per step.
    BufferTooSmall {
        buffer_bytes: usize,
        min_bytes: usize,
    },
    /// A buffer length (`count` times `nranks` elements) does not fit in `usize`.
    TooLarge { count: usize, nranks: usize },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SchedError::NoRanks => write!(f, "ring has no ranks: nranks must be at least 1"),
            SchedError::TooManyRanks { nranks } => {
                write!(
                    f,
                    "ring of {nranks} ranks: at most {} are supported",
                    u32::MAX
                )
            }
            SchedError::RankOutOfRange { rank, nranks } => {
                write!(f, "rank {rank} out of range for {nranks} ranks")
            }
            SchedError::RootOutOfRange { root, nranks } => write!(
                f,
                "root {root} out of range for {nranks} ranks: pass a root in 0..{nranks}"
            ),
            SchedError::RingEntryOutOfRange {
                position,
                rank,
                nranks,
            } => write!(
                f,
                "ring position {position} holds rank {rank}, but there are only {nranks} ranks"
            ),
            SchedError::RingDuplicate { rank } => write!(
                f,
                "rank {rank} appears twice on the ring: a ring must be a permutation of the ranks"
            ),
            SchedError::NoChannels => write!(f, "no channels: nchannels must be at least 1"),
            SchedError::ChannelOutOfRange { channel, nchannels } => {
                write!(f, "channel {channel} out of range for {nchannels} channels")
            }
            SchedError::ZeroChunk => write!(f, "chunk of 0 elements: chunk_elems must be >= 1"),
            SchedError::ZeroElementSize => write!(f, "element size of 0 bytes"),
            SchedError::BufferTooSmall {
                buffer_bytes,
                min_bytes,
            } => write!(
                f,
                "connection buffer of {buffer_bytes} bytes is too small (needs >= {min_bytes}): \
                 raise NCCL_BUFFSIZE / WEFT_BUFFSIZE"
            ),
            SchedError::TooLarge { count, nranks } => write!(
                f,
                "{count} elements x {nranks} ranks does not fit in memory addresses"
            ),
        }
    }
}

impl core::error::Error for SchedError {}

/// `ceil(a / b)`, 0 when `b` is 0 (callers never pass 0; this keeps the function total).
pub(crate) const fn div_up(a: usize, b: usize) -> usize {
    match (a.checked_div(b), a.checked_rem(b)) {
        (Some(q), Some(r)) if r != 0 => q.saturating_add(1),
        (Some(q), _) => q,
        _ => 0,
    }
}

/// `a` rounded up to a multiple of `align`, saturating at the largest multiple that fits.
pub(crate) const fn align_up(a: usize, align: usize) -> usize {
    match a.checked_next_multiple_of(align) {
        Some(v) => v,
        None => match usize::MAX.checked_rem(align) {
            Some(r) => usize::MAX.saturating_sub(r),
            None => a,
        },
    }
}
