//! `ncclResult_t`: NCCL's codes, their texts, and the error every entry point returns.

use std::fmt;

use weft_cuda::CudaError;
use weft_runtime::bootstrap::BootstrapError;
use weft_runtime::gpu::GpuError;

/// `ncclResult_t` (a C enum: an `int`).
pub type NcclResult = i32;

pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
pub const NCCL_INVALID_USAGE: NcclResult = 5;
pub const NCCL_REMOTE_ERROR: NcclResult = 6;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
pub const NCCL_NUM_RESULTS: NcclResult = 8;

/// `ncclGetErrorString`'s text: NCCL's wording, so that logs read the same with either
/// library. NUL-terminated for C.
pub fn error_string(code: NcclResult) -> &'static str {
    match code {
        NCCL_SUCCESS => "no error\0",
        NCCL_UNHANDLED_CUDA_ERROR => {
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0"
        }
        NCCL_SYSTEM_ERROR => "unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
        NCCL_INTERNAL_ERROR => "internal error - please report this issue to the weft developers\0",
        NCCL_INVALID_ARGUMENT => "invalid argument (run with NCCL_DEBUG=WARN for details)\0",
        NCCL_INVALID_USAGE => "invalid usage (run with NCCL_DEBUG=WARN for details)\0",
        NCCL_REMOTE_ERROR => "remote process exited or there was a network error\0",
        NCCL_IN_PROGRESS => "NCCL operation in progress\0",
        _ => "unknown result code\0",
    }
}

/// A failed call: the code returned to C and the text `ncclGetLastError` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: NcclResult,
    pub message: String,
}

impl ApiError {
    pub fn new(code: NcclResult, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> ApiError {
        ApiError::new(NCCL_INVALID_ARGUMENT, message)
    }

    pub fn invalid_usage(message: impl Into<String>) -> ApiError {
        ApiError::new(NCCL_INVALID_USAGE, message)
    }

    /// What weft does not do (yet): NCCL's code for a call it cannot serve, and the text
    /// says so rather than pretending success.
    pub fn unsupported(what: &str) -> ApiError {
        ApiError::invalid_usage(format!(
            "{what} is not supported by weft's libnccl (see docs/nccl-api.md)"
        ))
    }

    /// Prefixes the entry point, as NCCL's warnings name the call.
    pub fn context(mut self, entry: &str) -> ApiError {
        self.message = format!("{entry}: {}", self.message);
        self
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The code NCCL would return for a CUDA failure: a missing libcuda is a system error
/// (NCCL's own loader says so), a failing call an unhandled CUDA error.
pub fn cuda_code(err: &CudaError) -> NcclResult {
    match err {
        CudaError::Load(_) | CudaError::Missing(_) => NCCL_SYSTEM_ERROR,
        CudaError::Call { .. } => NCCL_UNHANDLED_CUDA_ERROR,
        CudaError::InvalidArgument(_) => NCCL_INVALID_ARGUMENT,
        CudaError::Refused(_) => NCCL_INVALID_USAGE,
        _ => NCCL_INTERNAL_ERROR,
    }
}

fn bootstrap_code(err: &BootstrapError) -> NcclResult {
    match err {
        BootstrapError::InvalidArgument(_) => NCCL_INVALID_ARGUMENT,
        // A peer that went away or never came: NCCL's remote error.
        e if e.culprit().is_some() => NCCL_REMOTE_ERROR,
        _ => NCCL_SYSTEM_ERROR,
    }
}

impl From<GpuError> for ApiError {
    fn from(err: GpuError) -> ApiError {
        let code = match &err {
            GpuError::InvalidArgument(_) => NCCL_INVALID_ARGUMENT,
            GpuError::Cuda(e) => cuda_code(e),
            GpuError::Bootstrap(e) => bootstrap_code(e),
            GpuError::Unreachable { .. } => NCCL_SYSTEM_ERROR,
            GpuError::PeerTimeout { .. } | GpuError::HeldUp { .. } | GpuError::Aborted { .. } => {
                NCCL_REMOTE_ERROR
            }
            // Sends and receives that do not match: the program's calls, as NCCL's
            // argument checks call what they catch.
            GpuError::P2pMismatch { .. } => NCCL_INVALID_USAGE,
            _ => NCCL_INTERNAL_ERROR,
        };
        ApiError::new(code, err.to_string())
    }
}

impl From<CudaError> for ApiError {
    fn from(err: CudaError) -> ApiError {
        ApiError::new(cuda_code(&err), err.to_string())
    }
}

impl From<BootstrapError> for ApiError {
    fn from(err: BootstrapError) -> ApiError {
        ApiError::new(bootstrap_code(&err), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_nul_terminated_text() {
        let texts: Vec<&str> = (NCCL_SUCCESS..NCCL_NUM_RESULTS).map(error_string).collect();
        for (code, text) in texts.iter().enumerate() {
            assert!(text.ends_with('\0'), "code {code}");
            assert_eq!(text.matches('\0').count(), 1, "code {code}");
            assert!(!texts[..code].contains(text), "code {code} repeats a text");
        }
        assert_eq!(error_string(99), "unknown result code\0");
        assert_eq!(error_string(-1), "unknown result code\0");
    }

    #[test]
    fn gpu_errors_map_to_nccl_codes() {
        let e: ApiError = GpuError::InvalidArgument("count".into()).into();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("count"));
        let e: ApiError = GpuError::Aborted {
            rank: 2,
            why: "user".into(),
        }
        .into();
        assert_eq!(e.code, NCCL_REMOTE_ERROR);
        // A deadline whose root the health query found elsewhere: the peer's failure too.
        let e: ApiError = GpuError::HeldUp {
            timeout: "rank 1: the kernel waited 10.0 s".into(),
            holder: 3,
            why: "it did not answer".into(),
        }
        .into();
        assert_eq!(e.code, NCCL_REMOTE_ERROR);
        assert!(e.message.contains("names rank 3"), "{}", e.message);
        let e: ApiError = CudaError::InvalidArgument("too long".into()).into();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        // A receive that met a send of another size, and one that found no send at all.
        let tag = weft_core::abi::p2p_tag;
        let e: ApiError = GpuError::P2pMismatch {
            rank: 1,
            peer: 0,
            channel: 2,
            found: tag(1000, 5),
            wanted: tag(1200, 5),
        }
        .into();
        assert_eq!(e.code, NCCL_INVALID_USAGE);
        assert!(
            e.message
                .contains("a receive of 1200 bytes from rank 0 met a send of 1000 bytes"),
            "{}",
            e.message
        );
        let e: ApiError = GpuError::P2pMismatch {
            rank: 1,
            peer: 0,
            channel: 0,
            found: 0,
            wanted: tag(64, 3),
        }
        .into();
        assert!(
            e.message.contains("found no message of rank 0"),
            "{}",
            e.message
        );
    }
}
