//! weft-ffi: what weft's three C surfaces share at their edge, so that each keeps only its
//! own result codes and how it reports them.
//!
//! The surfaces are libweft (crate weft-capi, `weft_status` and `weft_last_error()`),
//! weft's `libnccl.so.2` (crate weft-nccl, `ncclResult_t` and `ncclGetLastError()`) and the
//! NCCL net plugin `libnccl-net-weft.so` (crate weft-nccl-net, `ncclResult_t` and NCCL's
//! logger). A library loaded inside someone else's process (PyTorch, NCCL) must neither
//! unwind into C (undefined behaviour; in practice an abort with no message) nor hand C a
//! dangling error text. Modules, in the order a call meets them:
//!
//! - [`boundary`]: [`Surface`] (a surface's codes and how it records a failure) and
//!   [`status_call`] / [`value_call`], which run an entry point's body under
//!   `catch_unwind` and turn an error or a panic into the surface's code, the panic's
//!   message recorded; [`catch`] and [`Panic`] for the rest.
//! - [`arg`]: pointer arguments from C: NULL, lengths that cannot exist, misalignment,
//!   strings that are not UTF-8, as an [`ArgError`] naming the argument, and the macros
//!   ([`arg_ref!`], [`arg_mut!`], [`arg_slice!`], [`arg_slice_mut!`], [`arg_cstr!`]) that
//!   return it from a body as the surface's own error.
//! - [`last_error`]: the text C reads after a failure: [`ThreadLastError`] (per thread,
//!   valid until that thread's next call, libweft's) and [`ProcessLastError`] (one buffer
//!   that is never freed, NCCL's).
//! - [`pinning`]: keeping a library mapped while its helper threads may run.

pub mod arg;
pub mod boundary;
pub mod last_error;
pub mod pinning;

pub use arg::ArgError;
pub use boundary::{Panic, Surface, catch, status_call, value_call};
pub use last_error::{ProcessLastError, ThreadLastError};

// The boundary needs unwinding: with panic = "abort" a panic would kill the process that
// loaded the library instead of returning the surface's internal-error code.
#[cfg(panic = "abort")]
compile_error!("weft-ffi (the C surfaces' panic boundary) must be built with panic = \"unwind\"");
