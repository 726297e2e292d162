//! NVRTC (libnvrtc), the CUDA run-time compiler, resolved at run time.
//!
//! weft compiles its kernels from source on the machine that runs them, so only the NVRTC
//! of some CUDA 12 or 13 install is needed, never a toolkit at build time.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int};
use std::sync::OnceLock;

use crate::library::{LibraryInfo, LoadError, OpenedLibrary, fn_table};

/// The compiler's program object.
#[repr(C)]
#[derive(Debug)]
pub struct _nvrtcProgram {
    _private: [u8; 0],
}

/// A program handle (`nvrtcProgram`).
pub type nvrtcProgram = *mut _nvrtcProgram;

/// `nvrtcResult`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct nvrtcResult(pub c_int);

impl nvrtcResult {
    pub const NVRTC_SUCCESS: Self = Self(0);
    pub const NVRTC_ERROR_OUT_OF_MEMORY: Self = Self(1);
    pub const NVRTC_ERROR_PROGRAM_CREATION_FAILURE: Self = Self(2);
    pub const NVRTC_ERROR_INVALID_INPUT: Self = Self(3);
    pub const NVRTC_ERROR_INVALID_PROGRAM: Self = Self(4);
    pub const NVRTC_ERROR_INVALID_OPTION: Self = Self(5);
    /// The source did not compile: read the program log.
    pub const NVRTC_ERROR_COMPILATION: Self = Self(6);
    pub const NVRTC_ERROR_BUILTIN_OPERATION_FAILURE: Self = Self(7);
    pub const NVRTC_ERROR_INTERNAL_ERROR: Self = Self(11);

    /// Whether the call succeeded.
    pub fn is_success(self) -> bool {
        self == Self::NVRTC_SUCCESS
    }
}

/// Names tried by [`Nvrtc::load`], in order: CUDA 13's and CUDA 12's sonames, the
/// unversioned development name, then the default toolkit directory (which not every
/// install adds to the loader's path).
pub const LIBNVRTC_CANDIDATES: &[&str] = &[
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so",
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so.12",
    "/usr/local/cuda/lib64/libnvrtc.so",
];

const LIBNVRTC: LibraryInfo = LibraryInfo {
    name: "libnvrtc.so",
    absent_reason: "no CUDA run-time compiler (NVRTC 12 or 13) on this machine",
    hint: "Install NVRTC (the cuda-nvrtc package of CUDA 12 or 13, or the pip package \
           nvidia-cuda-nvrtc) and add its lib directory to LD_LIBRARY_PATH, or use kernels \
           built ahead of time with nvcc.",
    requires: "NVRTC 11.2+",
    what_is_old: "NVRTC too old",
};

fn_table! {
    /// NVRTC: one `unsafe extern "C" fn` per entry point, as declared in `nvrtc.h`.
    pub struct Nvrtc {
        required {
            nvrtcVersion = "nvrtcVersion": fn(*mut c_int, *mut c_int) -> nvrtcResult;
            nvrtcGetErrorString = "nvrtcGetErrorString": fn(nvrtcResult) -> *const c_char;
            /// Program, source, name, number of headers, header sources, header names.
            nvrtcCreateProgram = "nvrtcCreateProgram": fn(
                *mut nvrtcProgram, *const c_char, *const c_char, c_int,
                *const *const c_char, *const *const c_char,
            ) -> nvrtcResult;
            nvrtcDestroyProgram = "nvrtcDestroyProgram": fn(*mut nvrtcProgram) -> nvrtcResult;
            nvrtcCompileProgram = "nvrtcCompileProgram":
                fn(nvrtcProgram, c_int, *const *const c_char) -> nvrtcResult;
            nvrtcGetPTXSize = "nvrtcGetPTXSize": fn(nvrtcProgram, *mut usize) -> nvrtcResult;
            nvrtcGetPTX = "nvrtcGetPTX": fn(nvrtcProgram, *mut c_char) -> nvrtcResult;
            nvrtcGetCUBINSize = "nvrtcGetCUBINSize": fn(nvrtcProgram, *mut usize) -> nvrtcResult;
            nvrtcGetCUBIN = "nvrtcGetCUBIN": fn(nvrtcProgram, *mut c_char) -> nvrtcResult;
            nvrtcGetProgramLogSize = "nvrtcGetProgramLogSize":
                fn(nvrtcProgram, *mut usize) -> nvrtcResult;
            nvrtcGetProgramLog = "nvrtcGetProgramLog": fn(nvrtcProgram, *mut c_char) -> nvrtcResult;
            nvrtcAddNameExpression = "nvrtcAddNameExpression":
                fn(nvrtcProgram, *const c_char) -> nvrtcResult;
            nvrtcGetLoweredName = "nvrtcGetLoweredName":
                fn(nvrtcProgram, *const c_char, *mut *const c_char) -> nvrtcResult;
        }
        optional {
            nvrtcGetNumSupportedArchs = "nvrtcGetNumSupportedArchs" since "NVRTC 11.2+":
                fn(*mut c_int) -> nvrtcResult;
            nvrtcGetSupportedArchs = "nvrtcGetSupportedArchs" since "NVRTC 11.2+":
                fn(*mut c_int) -> nvrtcResult;
        }
    }
}

impl Nvrtc {
    /// Loads NVRTC from [`LIBNVRTC_CANDIDATES`].
    pub fn load() -> Result<Self, LoadError> {
        Self::load_from(LIBNVRTC_CANDIDATES)
    }

    /// Loads NVRTC from the first of `candidates` (names or paths) that `dlopen` accepts.
    pub fn load_from<S: AsRef<str>>(candidates: &[S]) -> Result<Self, LoadError> {
        let library = OpenedLibrary::open_first(candidates, LIBNVRTC)?;
        Self::resolve(library, LIBNVRTC)
    }

    /// The process-wide table, loaded on first use; a failure is remembered.
    pub fn shared() -> Result<&'static Self, LoadError> {
        static SHARED: OnceLock<Result<Nvrtc, LoadError>> = OnceLock::new();
        SHARED
            .get_or_init(Self::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `"NVRTC_ERROR_COMPILATION (6)"` in NVRTC's own words.
    pub fn describe(&self, result: nvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString accepts any value and returns a static string (or
        // null from a broken library, handled below).
        let text = unsafe { (self.nvrtcGetErrorString)(result) };
        if text.is_null() {
            return format!("NVRTC error {}", result.0);
        }
        // SAFETY: a non-null return is a NUL-terminated static string.
        let c_str = unsafe { core::ffi::CStr::from_ptr(text) };
        format!("{} ({})", c_str.to_string_lossy(), result.0)
    }
}
