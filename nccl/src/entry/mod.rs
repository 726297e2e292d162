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

/// Refuses a null pointer argument, naming it.
pub fn non_null<T>(p: *const T, name: &str) -> Result<(), ApiError> {
    if p.is_null() {
        return Err(ApiError::invalid_argument(format!("{name} is NULL")));
    }
    Ok(())
}

/// A count or rank from C as an index: negative values are invalid arguments.
pub fn index(value: i32, name: &str) -> Result<usize, ApiError> {
    usize::try_from(value)
        .map_err(|_| ApiError::invalid_argument(format!("{name} {value} is negative")))
}
