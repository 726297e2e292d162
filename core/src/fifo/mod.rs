//! The step/credit FIFO protocol of NCCL's SIMPLE protocol, as pure state machines.
//!
//! A connection is a ring of `slots` buffers (NCCL_STEPS = 8) and two u64 counters that
//! only grow: `tail`, the steps the sender has filled, and `head`, the steps the receiver
//! has consumed. Data moves a slice (`step_per_slice` steps) at a time:
//!
//! - the sender fills the slice at `step` (slots `step % slots ..`) only while
//!   `head + slots >= step + step_per_slice`, then posts `tail = step + step_per_slice`;
//! - the receiver reads it only while `tail >= step + step_per_slice`, then posts
//!   `head = step + step_per_slice`;
//! - the sender records each slice's byte count in the [`SizesFifo`]; the consumer takes it;
//! - on load, each side rounds the connection's saved step up to a chunk boundary
//!   (`slice_per_chunk * step_per_slice`) and the receiver republishes its head.
//!
//! [`StepSender`] and [`StepReceiver`] hold only counters: the executors (CPU threads,
//! CUDA kernels, the NET proxy) publish what `post` returns and feed back what they read.
//! Every comparison is on wrapping differences ([`steps_ahead`]), so counters may cross
//! `u64::MAX`. The tests check, over every interleaving of small configurations, that no
//! slot is overwritten before it is read, none is read before it is written, and the pair
//! never deadlocks.
//!
//! [`ll`] is NCCL's LL protocol over the same slot ring: data and flag in one 8-byte store,
//! credits through the head as here, no tail.

mod counters;
mod error;
mod geometry;
pub mod ll;
mod receiver;
mod sender;
mod sizes;
mod slice;

pub use error::FifoError;
pub use geometry::{FifoGeometry, NCCL_STEPS, steps_ahead};
pub use receiver::StepReceiver;
pub use sender::StepSender;
pub use sizes::{SIZE_UNUSED, SizesFifo};
pub use slice::Slice;

#[cfg(test)]
mod ll_model_check;
#[cfg(test)]
mod model_check;
#[cfg(test)]
mod test;
