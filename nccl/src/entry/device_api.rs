//! NCCL 2.28's device API (`nccl_device.h`): its host calls, refused.
//!
//! The device API lets a program's own kernels reach peers' memory through NCCL-managed
//! windows (`ncclDevComm`, LSA barriers). weft does not provide it, but programs link these
//! symbols whether or not they call them: PyTorch 2.11's `libtorch_cuda.so` fails to load
//! against a libnccl without `ncclDevCommDestroy` (seen on an H100, 2026-11-25). So they
//! exist, and each returns `ncclInvalidUsage` with the reason in `ncclGetLastError()`.
//! weft's `nccl.h` does not declare them (NCCL declares them in `nccl_device.h`, which weft
//! does not ship).

use std::ffi::{c_int, c_void};

use super::NcclComm;
use crate::boundary::run;
use crate::result::{ApiError, NcclResult};

/// `ncclTeam_t`, passed by value (`nccl_device/core.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NcclTeam {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

fn device_api(call: &str) -> Result<(), ApiError> {
    Err(ApiError::unsupported(&format!(
        "{call} (NCCL's device API, nccl_device.h)"
    )))
}

/// Refused: weft has no device communicators. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclDevCommCreate(
    _comm: NcclComm,
    _requirements: *const c_void,
    _out_dev_comm: *mut c_void,
) -> NcclResult {
    run("ncclDevCommCreate", || device_api("ncclDevCommCreate"))
}

/// Refused, as [`ncclDevCommCreate`] never made one. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclDevCommDestroy(_comm: NcclComm, _dev_comm: *const c_void) -> NcclResult {
    run("ncclDevCommDestroy", || device_api("ncclDevCommDestroy"))
}

/// Refused. No pointer is read.
#[unsafe(no_mangle)]
pub extern "C" fn ncclLsaBarrierCreateRequirement(
    _team: NcclTeam,
    _n_barriers: c_int,
    _out_handle: *mut c_void,
    _out_requirement: *mut c_void,
) -> NcclResult {
    run("ncclLsaBarrierCreateRequirement", || {
        device_api("ncclLsaBarrierCreateRequirement")
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::result::NCCL_INVALID_USAGE;

    #[test]
    fn every_device_api_call_is_refused_with_its_name() {
        let team = NcclTeam {
            n_ranks: 2,
            rank: 0,
            stride: 1,
        };
        let calls: [(&str, &dyn Fn() -> NcclResult); 3] = [
            ("ncclDevCommCreate", &|| {
                ncclDevCommCreate(std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut())
            }),
            ("ncclDevCommDestroy", &|| {
                ncclDevCommDestroy(std::ptr::null_mut(), std::ptr::null())
            }),
            ("ncclLsaBarrierCreateRequirement", &|| {
                ncclLsaBarrierCreateRequirement(team, 1, std::ptr::null_mut(), std::ptr::null_mut())
            }),
        ];
        for (name, call) in calls {
            assert_eq!(call(), NCCL_INVALID_USAGE, "{name}");
            let last = crate::boundary::this_threads_last_error();
            assert!(last.contains(name) && last.contains("device API"), "{last}");
        }
    }
}
