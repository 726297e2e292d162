//! What a CUDA call's failure says: the call, the device, the driver's words, a hint.

use std::fmt;

use weft_sys::cuda::types::CUresult;
use weft_sys::{LoadError, MissingSymbol};

/// A failed CUDA operation.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CudaError {
    /// libcuda (or libnvrtc) could not be loaded.
    Load(LoadError),
    /// An optional entry point this operation needs is missing (driver too old).
    Missing(MissingSymbol),
    /// A call returned an error code.
    Call {
        call: &'static str,
        code: u32,
        /// The driver's name and description of the code.
        text: String,
        /// The CUDA ordinal of the device, where the call concerns one.
        device: Option<usize>,
        hint: Option<&'static str>,
    },
    /// NVRTC rejected a program: its log says why.
    Compile {
        program: String,
        text: String,
        log: String,
    },
    /// An argument the call cannot take (a copy longer than its buffer, ...).
    InvalidArgument(String),
    /// An operation weft refuses without an explicit opt-in (NVLink multicast): the text
    /// says which variable to set.
    Refused(String),
}

/// `Result` with [`CudaError`].
pub type Result<T> = std::result::Result<T, CudaError>;

impl CudaError {
    /// The CUDA error code, for a failed call.
    pub fn code(&self) -> Option<u32> {
        match self {
            CudaError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the code is `CUDA_ERROR_NO_DEVICE`.
    pub fn is_no_device(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_NO_DEVICE.0)
    }
}

/// Turns a raw result into `Ok` or a [`CudaError::Call`] naming `call` and `device`.
pub(crate) fn check(result: CUresult, call: &'static str, device: Option<usize>) -> Result<()> {
    if result.is_success() {
        return Ok(());
    }
    let text = match crate::device::driver_table() {
        Ok(d) => d.describe(result),
        Err(_) => result
            .known_name()
            .map_or_else(|| format!("CUDA error {}", result.0), str::to_string),
    };
    let hint = result.hint().or(match result {
        CUresult::CUDA_ERROR_INVALID_PTX => Some(
            "the driver could not compile the PTX: clear the kernel cache (WEFT_CACHE_DIR) \
             and report the NVRTC and driver versions",
        ),
        _ => None,
    });
    let hint = if result == CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
        Some(
            "the PTX was made by a newer NVRTC than the driver supports: update the driver, \
             or point WEFT_NVRTC at the NVRTC of the driver's CUDA version",
        )
    } else {
        hint
    };
    Err(CudaError::Call {
        call,
        code: result.0,
        text,
        device,
        hint,
    })
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::Load(e) => write!(f, "{e}"),
            CudaError::Missing(e) => write!(f, "{e}"),
            CudaError::Call {
                call,
                text,
                device,
                hint,
                ..
            } => {
                write!(f, "{call} failed")?;
                if let Some(d) = device {
                    write!(f, " on GPU {d}")?;
                }
                write!(f, ": {text}")?;
                if let Some(h) = hint {
                    write!(f, " ({h})")?;
                }
                Ok(())
            }
            CudaError::Compile { program, text, log } => {
                write!(
                    f,
                    "NVRTC could not compile {program}: {text}\n{}",
                    log.trim_end()
                )
            }
            CudaError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            CudaError::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<LoadError> for CudaError {
    fn from(e: LoadError) -> Self {
        CudaError::Load(e)
    }
}

impl From<MissingSymbol> for CudaError {
    fn from(e: MissingSymbol) -> Self {
        CudaError::Missing(e)
    }
}
