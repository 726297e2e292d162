//! Version, unique ids and error texts.

use std::ffi::{c_char, c_int};

use weft_runtime::bootstrap::{BootstrapOptions, UniqueId};

use super::{NcclComm, NcclUniqueId, non_null};
use crate::boundary::{last_error_ptr, run, run_value};
use crate::debug;
use crate::result::{NcclResult, error_string};

/// # Safety
///
/// `version` must be null or point to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    run("ncclGetVersion", || {
        non_null(version, "version")?;
        debug::version_once(0);
        // SAFETY: checked non-null; the caller's promise makes it writable.
        unsafe { version.write(crate::NCCL_VERSION_CODE) };
        Ok(())
    })
}

/// Starts a bootstrap root in this process (a background thread, as NCCL's does) and
/// writes its id.
///
/// # Safety
///
/// `unique_id` must be null or point to a writable `ncclUniqueId`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut NcclUniqueId) -> NcclResult {
    run("ncclGetUniqueId", || {
        non_null(unique_id, "uniqueId")?;
        debug::version_once(0);
        let id = UniqueId::new(&BootstrapOptions::from_env())?;
        let bytes = id.to_bytes();
        // SAFETY: checked non-null; the caller's promise makes 128 bytes writable.
        unsafe { unique_id.write(NcclUniqueId { internal: bytes }) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    run_value("ncclGetErrorString", c"internal error".as_ptr(), || {
        error_string(result).as_ptr().cast()
    })
}

/// The text of the last failure in this process (any communicator, any thread, as in
/// NCCL); "" before any.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: NcclComm) -> *const c_char {
    run_value("ncclGetLastError", c"".as_ptr(), last_error_ptr)
}

/// NCCL re-reads its debug variables; weft reads `NCCL_DEBUG` once per process, so this
/// only says so at WARN (it returns nothing to report through).
#[unsafe(no_mangle)]
pub extern "C" fn ncclResetDebugInit() {
    run_value("ncclResetDebugInit", (), || {
        debug::warn(
            0,
            "ncclResetDebugInit: weft reads NCCL_DEBUG once per process; the setting stays",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{NCCL_INVALID_ARGUMENT, NCCL_SUCCESS};

    #[test]
    fn version_and_null_out_pointer() {
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { ncclGetVersion(&mut v) }, NCCL_SUCCESS);
        // SAFETY: null is refused, never written.
        let rc = unsafe { ncclGetVersion(std::ptr::null_mut()) };
        assert_eq!(rc, NCCL_INVALID_ARGUMENT);
        assert_eq!(v, 22803);
    }
}
