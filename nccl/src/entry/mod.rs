//! The exported functions, NCCL's names and signatures, each inside the panic boundary.
//!
//! - [`info`]: version, unique ids, error texts.
//! - [`lifecycle`]: communicators: init, split, finalize, destroy, abort, queries.
//! - [`calls`]: collectives, sends and receives, groups.
//! - [`memory`]: `ncclMemAlloc`, registrations, reduction operators.
//! - [`device_api`]: NCCL 2.28's device-API host calls, which programs link: refused.

pub mod calls;
pub mod device_api;
pub mod info;
pub mod lifecycle;
pub mod memory;

use std::ffi::c_void;

use crate::result::ApiError;

/// `ncclComm_t`: the address of a registered [`crate::comm::Comm`].
pub type NcclComm = *mut c_void;
/// `cudaStream_t`.
pub type CudaStream = *mut c_void;

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

/// Refuses a null pointer argument, naming it: `non_null(p, "version")?` returns
/// `ncclInvalidArgument` with "version is NULL" (`From<ArgError> for ApiError`).
pub use weft_ffi::arg::non_null;

/// A count or rank from C as an index: negative values are invalid arguments.
pub fn index(value: i32, name: &str) -> Result<usize, ApiError> {
    usize::try_from(value)
        .map_err(|_| ApiError::invalid_argument(format!("{name} {value} is negative")))
}
