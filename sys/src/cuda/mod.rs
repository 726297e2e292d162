//! The CUDA driver API (libcuda), resolved at run time.
//!
//! [`CudaDriver`] is a table of the 81 driver entry points weft uses. Symbols are looked up
//! by the versioned names that `cuda.h` maps its macros to (`cuMemAlloc` is exported as
//! `cuMemAlloc_v2`); the table's fields carry the unversioned names. The virtual memory
//! (`cuMem*`) and multicast (`cuMulticast*`) calls are optional: a driver too old for them
//! still loads, and their accessors return a [`MissingSymbol`](crate::MissingSymbol) that
//! names the call and the driver it needs.

pub mod types;

use core::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use crate::library::{LibraryInfo, LoadError, OpenedLibrary, fn_table};
use types::*;

/// Names tried by [`CudaDriver::load`], in order: the driver's soname, then the
/// development symlink some installs have instead.
pub const LIBCUDA_CANDIDATES: &[&str] = &["libcuda.so.1", "libcuda.so"];

const LIBCUDA: LibraryInfo = LibraryInfo {
    name: "libcuda.so.1",
    absent_reason: "no NVIDIA driver on this machine",
    hint: "Install the NVIDIA driver; in a container, start it with GPUs (--gpus all with the \
           NVIDIA container toolkit); if the driver lives elsewhere, add its directory to \
           LD_LIBRARY_PATH.",
    requires: "CUDA 11.0+ driver",
    what_is_old: "driver too old",
};

fn_table! {
    /// The CUDA driver API: one `unsafe extern "C" fn` per entry point, each exactly as
    /// declared in `cuda.h`. Calling one is `unsafe`: the arguments must satisfy the CUDA
    /// documentation of that call.
    pub struct CudaDriver {
        required {
            cuInit = "cuInit": fn(c_uint) -> CUresult;
            cuDriverGetVersion = "cuDriverGetVersion": fn(*mut c_int) -> CUresult;
            cuGetErrorString = "cuGetErrorString": fn(CUresult, *mut *const c_char) -> CUresult;
            cuGetErrorName = "cuGetErrorName": fn(CUresult, *mut *const c_char) -> CUresult;

            cuDeviceGet = "cuDeviceGet": fn(*mut CUdevice, c_int) -> CUresult;
            cuDeviceGetCount = "cuDeviceGetCount": fn(*mut c_int) -> CUresult;
            cuDeviceGetName = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice) -> CUresult;
            cuDeviceGetAttribute = "cuDeviceGetAttribute":
                fn(*mut c_int, CUdevice_attribute, CUdevice) -> CUresult;
            cuDeviceGetPCIBusId = "cuDeviceGetPCIBusId":
                fn(*mut c_char, c_int, CUdevice) -> CUresult;
            cuDeviceTotalMem = "cuDeviceTotalMem_v2": fn(*mut usize, CUdevice) -> CUresult;
            cuDeviceCanAccessPeer = "cuDeviceCanAccessPeer":
                fn(*mut c_int, CUdevice, CUdevice) -> CUresult;
            cuDeviceGetP2PAttribute = "cuDeviceGetP2PAttribute":
                fn(*mut c_int, CUdevice_P2PAttribute, CUdevice, CUdevice) -> CUresult;
            cuDevicePrimaryCtxRetain = "cuDevicePrimaryCtxRetain":
                fn(*mut CUcontext, CUdevice) -> CUresult;
            cuDevicePrimaryCtxRelease = "cuDevicePrimaryCtxRelease_v2": fn(CUdevice) -> CUresult;

            cuCtxSetCurrent = "cuCtxSetCurrent": fn(CUcontext) -> CUresult;
            cuCtxGetCurrent = "cuCtxGetCurrent": fn(*mut CUcontext) -> CUresult;
            cuCtxPushCurrent = "cuCtxPushCurrent_v2": fn(CUcontext) -> CUresult;
            cuCtxPopCurrent = "cuCtxPopCurrent_v2": fn(*mut CUcontext) -> CUresult;
            cuCtxGetDevice = "cuCtxGetDevice": fn(*mut CUdevice) -> CUresult;
            cuCtxSynchronize = "cuCtxSynchronize": fn() -> CUresult;
            cuCtxEnablePeerAccess = "cuCtxEnablePeerAccess": fn(CUcontext, c_uint) -> CUresult;

            cuStreamCreate = "cuStreamCreate": fn(*mut CUstream, c_uint) -> CUresult;
            cuStreamDestroy = "cuStreamDestroy_v2": fn(CUstream) -> CUresult;
            cuStreamSynchronize = "cuStreamSynchronize": fn(CUstream) -> CUresult;
            cuStreamQuery = "cuStreamQuery": fn(CUstream) -> CUresult;
            cuStreamWaitEvent = "cuStreamWaitEvent": fn(CUstream, CUevent, c_uint) -> CUresult;

            cuEventCreate = "cuEventCreate": fn(*mut CUevent, c_uint) -> CUresult;
            cuEventDestroy = "cuEventDestroy_v2": fn(CUevent) -> CUresult;
            cuEventRecord = "cuEventRecord": fn(CUevent, CUstream) -> CUresult;
            cuEventSynchronize = "cuEventSynchronize": fn(CUevent) -> CUresult;
            cuEventQuery = "cuEventQuery": fn(CUevent) -> CUresult;
            cuEventElapsedTime = "cuEventElapsedTime": fn(*mut f32, CUevent, CUevent) -> CUresult;

            cuModuleLoadData = "cuModuleLoadData": fn(*mut CUmodule, *const c_void) -> CUresult;
            cuModuleUnload = "cuModuleUnload": fn(CUmodule) -> CUresult;
            cuModuleGetFunction = "cuModuleGetFunction":
                fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult;
            cuFuncSetAttribute = "cuFuncSetAttribute":
                fn(CUfunction, CUfunction_attribute, c_int) -> CUresult;
            /// Grid x, y, z; block x, y, z; dynamic shared memory bytes; stream; kernel
            /// parameters (an array of pointers to each argument); extra (null).
            cuLaunchKernel = "cuLaunchKernel": fn(
                CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
                CUstream, *mut *mut c_void, *mut *mut c_void,
            ) -> CUresult;

            cuMemGetInfo = "cuMemGetInfo_v2": fn(*mut usize, *mut usize) -> CUresult;
            cuMemAlloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize) -> CUresult;
            cuMemFree = "cuMemFree_v2": fn(CUdeviceptr) -> CUresult;
            cuMemHostAlloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint) -> CUresult;
            cuMemFreeHost = "cuMemFreeHost": fn(*mut c_void) -> CUresult;
            cuMemHostGetDevicePointer = "cuMemHostGetDevicePointer_v2":
                fn(*mut CUdeviceptr, *mut c_void, c_uint) -> CUresult;
            cuPointerGetAttribute = "cuPointerGetAttribute":
                fn(*mut c_void, CUpointer_attribute, CUdeviceptr) -> CUresult;
            cuMemcpyHtoD = "cuMemcpyHtoD_v2": fn(CUdeviceptr, *const c_void, usize) -> CUresult;
            cuMemcpyDtoH = "cuMemcpyDtoH_v2": fn(*mut c_void, CUdeviceptr, usize) -> CUresult;
            cuMemcpyDtoD = "cuMemcpyDtoD_v2": fn(CUdeviceptr, CUdeviceptr, usize) -> CUresult;
            /// Unified addressing: either side may be host or device memory.
            cuMemcpyAsync = "cuMemcpyAsync":
                fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CUresult;
            cuMemcpyHtoDAsync = "cuMemcpyHtoDAsync_v2":
                fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
            cuMemcpyDtoHAsync = "cuMemcpyDtoHAsync_v2":
                fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CUresult;
            cuMemcpyDtoDAsync = "cuMemcpyDtoDAsync_v2":
                fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CUresult;
            cuMemsetD8 = "cuMemsetD8_v2": fn(CUdeviceptr, u8, usize) -> CUresult;
            cuMemsetD8Async = "cuMemsetD8Async": fn(CUdeviceptr, u8, usize, CUstream) -> CUresult;

            cuIpcGetMemHandle = "cuIpcGetMemHandle":
                fn(*mut CUipcMemHandle, CUdeviceptr) -> CUresult;
            cuIpcOpenMemHandle = "cuIpcOpenMemHandle_v2":
                fn(*mut CUdeviceptr, CUipcMemHandle, c_uint) -> CUresult;
            cuIpcCloseMemHandle = "cuIpcCloseMemHandle": fn(CUdeviceptr) -> CUresult;
        }
        optional {
            cuMemCreate = "cuMemCreate" since "CUDA 10.2+":
                fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp,
                   c_ulonglong) -> CUresult;
            cuMemRelease = "cuMemRelease" since "CUDA 10.2+":
                fn(CUmemGenericAllocationHandle) -> CUresult;
            cuMemAddressReserve = "cuMemAddressReserve" since "CUDA 10.2+":
                fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, c_ulonglong) -> CUresult;
            cuMemAddressFree = "cuMemAddressFree" since "CUDA 10.2+":
                fn(CUdeviceptr, usize) -> CUresult;
            cuMemMap = "cuMemMap" since "CUDA 10.2+":
                fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, c_ulonglong)
                    -> CUresult;
            cuMemUnmap = "cuMemUnmap" since "CUDA 10.2+": fn(CUdeviceptr, usize) -> CUresult;
            cuMemSetAccess = "cuMemSetAccess" since "CUDA 10.2+":
                fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize) -> CUresult;
            cuMemGetAllocationGranularity = "cuMemGetAllocationGranularity" since "CUDA 10.2+":
                fn(*mut usize, *const CUmemAllocationProp, CUmemAllocationGranularity_flags)
                    -> CUresult;
            /// For `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` the first argument points to
            /// an `int`; for `CU_MEM_HANDLE_TYPE_FABRIC` to a 64-byte `CUmemFabricHandle`.
            cuMemExportToShareableHandle = "cuMemExportToShareableHandle" since "CUDA 10.2+":
                fn(*mut c_void, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                   c_ulonglong) -> CUresult;
            /// For a POSIX file descriptor, the second argument is the fd cast to a pointer.
            cuMemImportFromShareableHandle = "cuMemImportFromShareableHandle"
                since "CUDA 10.2+":
                fn(*mut CUmemGenericAllocationHandle, *mut c_void, CUmemAllocationHandleType)
                    -> CUresult;
            cuMemRetainAllocationHandle = "cuMemRetainAllocationHandle" since "CUDA 11.0+":
                fn(*mut CUmemGenericAllocationHandle, *mut c_void) -> CUresult;

            /// Pins an existing host range and maps it for the device (a shared-memory
            /// segment that kernels of several processes reach through PCIe).
            cuMemHostRegister = "cuMemHostRegister_v2" since "CUDA 4.0+":
                fn(*mut c_void, usize, c_uint) -> CUresult;
            cuMemHostUnregister = "cuMemHostUnregister" since "CUDA 4.0+": fn(*mut c_void) -> CUresult;
            /// Reading an attribute also loads the function under lazy loading
            /// (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2).
            cuFuncGetAttribute = "cuFuncGetAttribute" since "CUDA 2.2+":
                fn(*mut c_int, CUfunction_attribute, CUfunction) -> CUresult;
            /// Stream capture into a graph (what nccl-tests' `-G` and PyTorch's CUDA graphs do).
            cuStreamBeginCapture = "cuStreamBeginCapture_v2" since "CUDA 10.1+":
                fn(CUstream, CUstreamCaptureMode) -> CUresult;
            cuStreamEndCapture = "cuStreamEndCapture" since "CUDA 10.0+":
                fn(CUstream, *mut CUgraph) -> CUresult;
            /// Whether a stream is being captured (a communicator orders its launches on
            /// several streams with events, which must not cross a capture's edge).
            cuStreamIsCapturing = "cuStreamIsCapturing" since "CUDA 10.0+":
                fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
            cuGraphInstantiate = "cuGraphInstantiateWithFlags" since "CUDA 11.4+":
                fn(*mut CUgraphExec, CUgraph, c_ulonglong) -> CUresult;
            cuGraphLaunch = "cuGraphLaunch" since "CUDA 10.0+": fn(CUgraphExec, CUstream) -> CUresult;
            cuGraphExecDestroy = "cuGraphExecDestroy" since "CUDA 10.0+": fn(CUgraphExec) -> CUresult;
            cuGraphDestroy = "cuGraphDestroy" since "CUDA 10.0+": fn(CUgraph) -> CUresult;

            /// Creates an NVLink multicast object. Never called by weft's tests or scripts:
            /// on shared hosts it can take GPUs out of service (see DESIGN.md).
            cuMulticastCreate = "cuMulticastCreate" since "CUDA 12.1+":
                fn(*mut CUmemGenericAllocationHandle, *const CUmulticastObjectProp) -> CUresult;
            cuMulticastAddDevice = "cuMulticastAddDevice" since "CUDA 12.1+":
                fn(CUmemGenericAllocationHandle, CUdevice) -> CUresult;
            cuMulticastBindMem = "cuMulticastBindMem" since "CUDA 12.1+":
                fn(CUmemGenericAllocationHandle, usize, CUmemGenericAllocationHandle, usize,
                   usize, c_ulonglong) -> CUresult;
            cuMulticastBindAddr = "cuMulticastBindAddr" since "CUDA 12.1+":
                fn(CUmemGenericAllocationHandle, usize, CUdeviceptr, usize, c_ulonglong)
                    -> CUresult;
            cuMulticastUnbind = "cuMulticastUnbind" since "CUDA 12.1+":
                fn(CUmemGenericAllocationHandle, CUdevice, usize, usize) -> CUresult;
            cuMulticastGetGranularity = "cuMulticastGetGranularity" since "CUDA 12.1+":
                fn(*mut usize, *const CUmulticastObjectProp, CUmulticastGranularity_flags)
                    -> CUresult;
        }
    }
}

impl CudaDriver {
    /// Loads the driver from [`LIBCUDA_CANDIDATES`]. Does not call `cuInit`.
    pub fn load() -> Result<Self, LoadError> {
        Self::load_from(LIBCUDA_CANDIDATES)
    }

    /// Loads the driver from the first of `candidates` (names or paths) that `dlopen`
    /// accepts.
    pub fn load_from<S: AsRef<str>>(candidates: &[S]) -> Result<Self, LoadError> {
        let library = OpenedLibrary::open_first(candidates, LIBCUDA)?;
        Self::resolve(library, LIBCUDA)
    }

    /// The process-wide table, loaded on first use. A failure is remembered: the driver
    /// does not appear during a process's life.
    pub fn shared() -> Result<&'static Self, LoadError> {
        static SHARED: OnceLock<Result<CudaDriver, LoadError>> = OnceLock::new();
        SHARED
            .get_or_init(Self::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `"CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"`, asking the driver for the name and
    /// description, and falling back to [`CUresult::known_name`] where it has none.
    pub fn describe(&self, result: CUresult) -> String {
        let name = self
            .c_text(self.cuGetErrorName, result)
            .or_else(|| result.known_name().map(str::to_owned))
            .unwrap_or_else(|| String::from("CUDA_ERROR_UNRECOGNISED"));
        let mut text = match self.c_text(self.cuGetErrorString, result) {
            Some(description) => format!("{name} ({}): {description}", result.0),
            None => format!("{name} ({})", result.0),
        };
        if let Some(hint) = result.hint() {
            text.push_str("; ");
            text.push_str(hint);
        }
        text
    }

    fn c_text(
        &self,
        query: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
        result: CUresult,
    ) -> Option<String> {
        let mut text: *const c_char = core::ptr::null();
        // SAFETY: cuGetErrorName/cuGetErrorString only write a pointer to a static string
        // through the out-parameter (or leave it null and return an error); both may be
        // called before cuInit.
        let status = unsafe { query(result, &mut text) };
        if !status.is_success() || text.is_null() {
            return None;
        }
        // SAFETY: on success the driver set `text` to a NUL-terminated static string.
        let c_str = unsafe { core::ffi::CStr::from_ptr(text) };
        Some(c_str.to_string_lossy().into_owned())
    }
}
