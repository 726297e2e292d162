//! The GPU path: collectives on device memory, run by CUDA kernels over P2P connections.
//!
//! - [`comm`]: [`GpuComm`], one rank on one GPU: init (bootstrap, peers, P2P windows, the
//!   device-side channel description), collectives and send/recv groups enqueued on the
//!   caller's stream, timeouts and aborts that name the peer.
//! - [`layout`]: where each connection's FIFO, LL buffer and counters live in the ranks'
//!   windows.
//! - [`peer`]: the memory of the peer-pointer algorithms (one-shot, two-shot, NVLS), set by
//!   `WEFT_ALGO`.
//! - [`multicast`]: NVLS in its multicast form (only with the `WEFT_NVLS=1` opt-in): the
//!   peer region bound to an NVLink SHARP multicast object.
//! - [`fd_passing`]: file descriptors between ranks of one host (`SCM_RIGHTS`), for the
//!   multicast object's handle.
//! - [`batch`]: which calls of a group share a kernel launch (NCCL's fused groups).
//! - [`protocol`]: which protocol (LL or SIMPLE) a call runs, alike on every rank.
//! - [`redop`]: [`GpuRedOp`], a call's reduction: a built-in operator or NCCL's `PreMulSum`.
//! - [`kernels`]: the kernels of weft-kernels, compiled with NVRTC per element type.
//! - [`error`]: the error type, [`GpuError`].
//!
//! The CPU executor ([`crate::exec`]) walks the same ring programs (weft_core::sched) and is
//! the reference the GPU tests compare against.

pub mod batch;
pub mod comm;
pub mod error;
pub mod fd_passing;
pub mod kernels;
pub mod layout;
pub mod multicast;
pub mod peer;
pub mod protocol;
pub mod redop;

pub use comm::{
    AbortHandle, DEFAULT_MIN_SLICES, DIRECT_ALL_REDUCE_MIN_BYTES, GpuCollective, GpuComm, GpuP2p,
    PlannedGroup, validate_p2p_group, wait_for_teardowns_at_exit,
};
pub use error::GpuError;
pub use redop::{GpuRedOp, PreMulScalar};
