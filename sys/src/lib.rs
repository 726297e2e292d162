//! Raw FFI to libcuda, libnvrtc and libibverbs, resolved at run time with `dlopen`.
//!
//! Nothing here links against a vendor library or needs a CUDA toolkit or rdma-core headers
//! to build. Each library is a table of C function pointers, loaded by `load()`:
//!
//! - [`cuda::CudaDriver`]: the CUDA driver API (devices, contexts, streams, events,
//!   modules, launches, memory, IPC, and the optional virtual-memory `cuMem*` and
//!   multicast `cuMulticast*` calls).
//! - [`nvrtc::Nvrtc`]: the CUDA run-time compiler.
//! - [`verbs::Verbs`]: libibverbs' control path, with the inline data-path helpers
//!   (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) as functions over `ibv_context->ops`.
//!
//! A missing library, or a missing symbol that a table cannot work without, is a
//! [`LoadError`] naming the library, the paths tried and the loader's answer, with a hint.
//! A missing optional symbol is a [`MissingSymbol`] from its accessor. Nothing here panics
//! on a missing library or symbol.
//!
//! This is the `sys` layer of cudarc's split: calls return raw C status codes. Turning
//! them into `Result`s and owning types with `Drop` is weft-driver's work.

pub mod cuda;
mod library;
pub mod nvrtc;
pub mod verbs;

pub use cuda::CudaDriver;
pub use library::{Attempt, LoadError, MissingSymbol};
pub use nvrtc::Nvrtc;
pub use verbs::Verbs;
