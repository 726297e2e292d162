//! The CUDA driver API's types, as laid out in `cuda.h` (CUDA 11.0 to 13.x): handles,
//! the result code, the enums weft passes, and the structs of the virtual memory and
//! multicast APIs.
//!
//! Enums are `#[repr(transparent)]` newtypes over the C integer rather than Rust enums, so
//! that a value a newer driver returns can never be an invalid Rust value.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_ulonglong};

macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque! {
    /// The driver's context object.
    CUctx_st;
    /// The driver's stream object.
    CUstream_st;
    /// The driver's event object.
    CUevent_st;
    /// The driver's module object.
    CUmod_st;
    /// The driver's function object.
    CUfunc_st;
    /// The driver's graph object (a captured sequence of work).
    CUgraph_st;
    /// The driver's executable graph object.
    CUgraphExec_st;
}

/// A device ordinal as the driver hands it out (`cuDeviceGet`).
pub type CUdevice = c_int;
/// A device address (64-bit on every supported platform).
pub type CUdeviceptr = c_ulonglong;
/// A context handle.
pub type CUcontext = *mut CUctx_st;
/// A stream handle; null is the legacy default stream.
pub type CUstream = *mut CUstream_st;
/// An event handle.
pub type CUevent = *mut CUevent_st;
/// A loaded module (cubin or PTX).
pub type CUmodule = *mut CUmod_st;
/// A kernel inside a module.
pub type CUfunction = *mut CUfunc_st;
/// A graph of work captured from a stream.
pub type CUgraph = *mut CUgraph_st;
/// An instantiated graph, ready to launch.
pub type CUgraphExec = *mut CUgraphExec_st;
/// `CUstreamCaptureMode`: which other threads' CUDA calls a capture forbids.
pub type CUstreamCaptureMode = c_uint;
/// Calls from any thread that could interfere fail during the capture (the default).
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: CUstreamCaptureMode = 0;
/// Only this thread's calls are checked.
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: CUstreamCaptureMode = 1;
/// No call is checked.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
/// `CUstreamCaptureStatus`: whether a stream is capturing.
pub type CUstreamCaptureStatus = c_uint;
/// Not capturing.
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
/// Capturing.
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
/// Capturing, but the capture has failed (an illegal call); it must still be ended.
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;
/// A physical allocation (`cuMemCreate`) or a multicast object (`cuMulticastCreate`).
pub type CUmemGenericAllocationHandle = c_ulonglong;

macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $value:expr,)* }) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub c_uint);

        impl $name {
            $($(#[$vdoc])* pub const $variant: Self = Self($value);)*
        }
    };
}

c_enum! {
    /// `CUresult`: what every driver call returns.
    CUresult {
        CUDA_SUCCESS = 0,
        CUDA_ERROR_INVALID_VALUE = 1,
        CUDA_ERROR_OUT_OF_MEMORY = 2,
        CUDA_ERROR_NOT_INITIALIZED = 3,
        CUDA_ERROR_DEINITIALIZED = 4,
        CUDA_ERROR_STUB_LIBRARY = 34,
        CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
        CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36,
        CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
        CUDA_ERROR_NO_DEVICE = 100,
        CUDA_ERROR_INVALID_DEVICE = 101,
        CUDA_ERROR_INVALID_IMAGE = 200,
        CUDA_ERROR_INVALID_CONTEXT = 201,
        CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
        CUDA_ERROR_INVALID_PTX = 218,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
        CUDA_ERROR_INVALID_HANDLE = 400,
        CUDA_ERROR_NOT_FOUND = 500,
        CUDA_ERROR_NOT_READY = 600,
        CUDA_ERROR_ILLEGAL_ADDRESS = 700,
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
        CUDA_ERROR_LAUNCH_TIMEOUT = 702,
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
        CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
        CUDA_ERROR_TOO_MANY_PEERS = 711,
        CUDA_ERROR_LAUNCH_FAILED = 719,
        CUDA_ERROR_NOT_PERMITTED = 800,
        CUDA_ERROR_NOT_SUPPORTED = 801,
        CUDA_ERROR_SYSTEM_NOT_READY = 802,
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
        CUDA_ERROR_TIMEOUT = 909,
        CUDA_ERROR_UNKNOWN = 999,
    }
}

impl CUresult {
    /// Whether the call succeeded.
    pub fn is_success(self) -> bool {
        self == Self::CUDA_SUCCESS
    }

    /// The C name of the codes weft meets most, for errors written when the driver itself
    /// cannot be asked (`cuGetErrorName`); `None` for the others.
    pub fn known_name(self) -> Option<&'static str> {
        Some(match self {
            Self::CUDA_SUCCESS => "CUDA_SUCCESS",
            Self::CUDA_ERROR_INVALID_VALUE => "CUDA_ERROR_INVALID_VALUE",
            Self::CUDA_ERROR_OUT_OF_MEMORY => "CUDA_ERROR_OUT_OF_MEMORY",
            Self::CUDA_ERROR_NOT_INITIALIZED => "CUDA_ERROR_NOT_INITIALIZED",
            Self::CUDA_ERROR_DEINITIALIZED => "CUDA_ERROR_DEINITIALIZED",
            Self::CUDA_ERROR_STUB_LIBRARY => "CUDA_ERROR_STUB_LIBRARY",
            Self::CUDA_ERROR_INSUFFICIENT_DRIVER => "CUDA_ERROR_INSUFFICIENT_DRIVER",
            Self::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER => "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
            Self::CUDA_ERROR_DEVICE_UNAVAILABLE => "CUDA_ERROR_DEVICE_UNAVAILABLE",
            Self::CUDA_ERROR_NO_DEVICE => "CUDA_ERROR_NO_DEVICE",
            Self::CUDA_ERROR_INVALID_DEVICE => "CUDA_ERROR_INVALID_DEVICE",
            Self::CUDA_ERROR_INVALID_IMAGE => "CUDA_ERROR_INVALID_IMAGE",
            Self::CUDA_ERROR_INVALID_CONTEXT => "CUDA_ERROR_INVALID_CONTEXT",
            Self::CUDA_ERROR_NO_BINARY_FOR_GPU => "CUDA_ERROR_NO_BINARY_FOR_GPU",
            Self::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
            Self::CUDA_ERROR_INVALID_PTX => "CUDA_ERROR_INVALID_PTX",
            Self::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            Self::CUDA_ERROR_INVALID_HANDLE => "CUDA_ERROR_INVALID_HANDLE",
            Self::CUDA_ERROR_NOT_FOUND => "CUDA_ERROR_NOT_FOUND",
            Self::CUDA_ERROR_NOT_READY => "CUDA_ERROR_NOT_READY",
            Self::CUDA_ERROR_ILLEGAL_ADDRESS => "CUDA_ERROR_ILLEGAL_ADDRESS",
            Self::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            Self::CUDA_ERROR_LAUNCH_TIMEOUT => "CUDA_ERROR_LAUNCH_TIMEOUT",
            Self::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"
            }
            Self::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
            Self::CUDA_ERROR_CONTEXT_IS_DESTROYED => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            Self::CUDA_ERROR_TOO_MANY_PEERS => "CUDA_ERROR_TOO_MANY_PEERS",
            Self::CUDA_ERROR_LAUNCH_FAILED => "CUDA_ERROR_LAUNCH_FAILED",
            Self::CUDA_ERROR_NOT_PERMITTED => "CUDA_ERROR_NOT_PERMITTED",
            Self::CUDA_ERROR_NOT_SUPPORTED => "CUDA_ERROR_NOT_SUPPORTED",
            Self::CUDA_ERROR_SYSTEM_NOT_READY => "CUDA_ERROR_SYSTEM_NOT_READY",
            Self::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            Self::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => {
                "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"
            }
            Self::CUDA_ERROR_TIMEOUT => "CUDA_ERROR_TIMEOUT",
            Self::CUDA_ERROR_UNKNOWN => "CUDA_ERROR_UNKNOWN",
            _ => return None,
        })
    }

    /// What to try for codes with a usual cause; `None` for the others.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            Self::CUDA_ERROR_NO_DEVICE => {
                "no GPU is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES, and that the container was started with GPUs"
            }
            Self::CUDA_ERROR_INSUFFICIENT_DRIVER | Self::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER => {
                "the NVIDIA driver is older than this call needs: upgrade the driver"
            }
            Self::CUDA_ERROR_STUB_LIBRARY => {
                "the libcuda.so found is the toolkit's link stub, not the driver: remove the stubs directory from LD_LIBRARY_PATH"
            }
            Self::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
                "the user-space libcuda and the kernel module are from different driver versions: reboot or reinstall the driver"
            }
            Self::CUDA_ERROR_DEVICE_UNAVAILABLE => {
                "the GPU is busy or in exclusive-process mode: check nvidia-smi's compute mode and other processes"
            }
            Self::CUDA_ERROR_NO_BINARY_FOR_GPU | Self::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
                "the kernel was built for another architecture or a newer toolkit: rebuild it for this GPU or clear the kernel cache"
            }
            Self::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
                "these two GPUs cannot map each other's memory: use the SHM transport (NCCL_P2P_DISABLE=1)"
            }
            Self::CUDA_ERROR_ILLEGAL_ADDRESS | Self::CUDA_ERROR_LAUNCH_FAILED => {
                "a kernel faulted and the context is lost: rerun with compute-sanitizer to find the access"
            }
            Self::CUDA_ERROR_OUT_OF_MEMORY => {
                "GPU memory is exhausted: check nvidia-smi for other processes"
            }
            _ => return None,
        })
    }
}

c_enum! {
    /// `CUdevice_attribute`: the attributes weft queries (the C enum has ~140).
    CUdevice_attribute {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
        CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
        CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
        CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
        CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
        CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES = 98,
        /// Named `..._VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` before CUDA 12.
        CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED = 102,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
        CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED = 128,
        CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132,
    }
}

c_enum! {
    /// `CUdevice_P2PAttribute`: what `cuDeviceGetP2PAttribute` reports of a pair of GPUs.
    CUdevice_P2PAttribute {
        CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1,
        CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2,
        /// Atomics that run natively over the link: NVLink has them, PCIe does not.
        CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
    }
}

c_enum! {
    /// `CUpointer_attribute` (the ones weft reads).
    CUpointer_attribute {
        CU_POINTER_ATTRIBUTE_CONTEXT = 1,
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6,
        CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    }
}

c_enum! {
    /// `CUfunction_attribute` (the one weft sets).
    CUfunction_attribute {
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    }
}

c_enum! {
    /// `CUmemAllocationType`.
    CUmemAllocationType {
        CU_MEM_ALLOCATION_TYPE_INVALID = 0,
        CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    }
}

c_enum! {
    /// `CUmemAllocationHandleType`: how a physical allocation may be shared. A bit set
    /// where a field takes several (`requestedHandleTypes`, `handleTypes`).
    CUmemAllocationHandleType {
        CU_MEM_HANDLE_TYPE_NONE = 0,
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
        CU_MEM_HANDLE_TYPE_FABRIC = 8,
    }
}

c_enum! {
    /// `CUmemLocationType`.
    CUmemLocationType {
        CU_MEM_LOCATION_TYPE_INVALID = 0,
        CU_MEM_LOCATION_TYPE_DEVICE = 1,
        CU_MEM_LOCATION_TYPE_HOST = 2,
        CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    }
}

c_enum! {
    /// `CUmemAccess_flags`.
    CUmemAccess_flags {
        CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
        CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
        CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    }
}

c_enum! {
    /// `CUmemAllocationGranularity_flags`.
    CUmemAllocationGranularity_flags {
        CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
    }
}

c_enum! {
    /// `CUmulticastGranularity_flags`.
    CUmulticastGranularity_flags {
        CU_MULTICAST_GRANULARITY_MINIMUM = 0,
        CU_MULTICAST_GRANULARITY_RECOMMENDED = 1,
    }
}

/// `cuStreamCreate` flag: the stream does not synchronise with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `cuEventCreate` flag: no timing data (cheaper to record and wait on).
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `cuEventCreate` flag: the event may be shared with `cuIpcGetEventHandle`.
pub const CU_EVENT_INTERPROCESS: c_uint = 4;
/// `cuMemHostAlloc` flag: pinned for every context, not only the current one.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
/// `cuMemHostAlloc` flag: mapped into the device address space.
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
/// `cuMemHostAlloc` flag: write-combined (fast for the GPU to read, slow for the CPU).
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
/// `cuIpcOpenMemHandle` flag: enable peer access lazily.
pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `cuMemHostRegister`: the range is pinned for every context.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
/// `cuMemHostRegister`: the range is mapped into the device address space.
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
/// `CUmemAllocationProp::allocFlags::usage` bit: the allocation may be the target of
/// GPUDirect RDMA over PCIe.
pub const CU_MEM_CREATE_USAGE_GPU_DIRECT_RDMA_OVER_PCIE: u16 = 4;
/// Size of an IPC handle's payload.
pub const CU_IPC_HANDLE_SIZE: usize = 64;

/// `CUipcMemHandle`: an opaque handle another process opens with `cuIpcOpenMemHandle`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUipcMemHandle {
    /// The driver's opaque bytes.
    pub reserved: [c_char; CU_IPC_HANDLE_SIZE],
}

/// `CUmemLocation`: where memory lives. (CUDA 13.2 turned `id` into a union of the same
/// size; the device id stays at offset 4.)
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemLocation {
    /// Device, host or host NUMA node.
    pub type_: CUmemLocationType,
    /// The device ordinal or NUMA node.
    pub id: c_int,
}

/// `CUmemAllocationProp::allocFlags`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CUmemAllocationPropFlags {
    /// `CUmemAllocationCompType`; 0 for none.
    pub compressionType: u8,
    /// Non-zero when the allocation will be used with GPUDirect RDMA.
    pub gpuDirectRDMACapable: u8,
    /// `CU_MEM_CREATE_USAGE_*` bits.
    pub usage: u16,
    /// Must be zero.
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`: what `cuMemCreate` allocates.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_snake_case)]
pub struct CUmemAllocationProp {
    /// Always pinned for weft.
    pub type_: CUmemAllocationType,
    /// The handle types it may be exported as.
    pub requestedHandleTypes: CUmemAllocationHandleType,
    /// The device it lives on.
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32HandleMetaData: *mut core::ffi::c_void,
    /// Compression, RDMA capability, usage.
    pub allocFlags: CUmemAllocationPropFlags,
}

/// `CUmemAccessDesc`: who may access a mapped range, and how.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    /// The device (or host) being granted access.
    pub location: CUmemLocation,
    /// Read or read-write.
    pub flags: CUmemAccess_flags,
}

/// `CUmulticastObjectProp`: what `cuMulticastCreate` makes. Building one is harmless;
/// creating the object is not done by any weft test (see DESIGN.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_snake_case)]
pub struct CUmulticastObjectProp {
    /// How many devices will be added.
    pub numDevices: c_uint,
    /// Size in bytes, a multiple of the multicast granularity.
    pub size: usize,
    /// `CUmemAllocationHandleType` bits it may be exported as.
    pub handleTypes: c_ulonglong,
    /// Must be zero.
    pub flags: c_ulonglong,
}

#[cfg(test)]
mod test {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// The x86-64 and aarch64 layouts of `cuda.h` (CUDA 12.x and 13.x), written down
    /// from the header: no CUDA toolkit is needed to check them.
    #[test]
    fn struct_layouts_match_cuda_h() {
        assert_eq!(size_of::<CUipcMemHandle>(), 64);
        assert_eq!(size_of::<CUmemLocation>(), 8);
        assert_eq!(offset_of!(CUmemLocation, id), 4);
        assert_eq!(size_of::<CUmemAllocationPropFlags>(), 8);
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(offset_of!(CUmemAllocationProp, location), 8);
        assert_eq!(offset_of!(CUmemAllocationProp, win32HandleMetaData), 16);
        assert_eq!(offset_of!(CUmemAllocationProp, allocFlags), 24);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(size_of::<CUmulticastObjectProp>(), 32);
        assert_eq!(offset_of!(CUmulticastObjectProp, size), 8);
        assert_eq!(offset_of!(CUmulticastObjectProp, handleTypes), 16);
        assert_eq!(size_of::<CUresult>(), 4);
    }

    #[test]
    fn every_named_result_has_its_own_name() {
        let mut seen = std::collections::BTreeSet::new();
        for code in 0..1000 {
            if let Some(name) = CUresult(code).known_name() {
                assert!(name.starts_with("CUDA_"), "{code}: {name}");
                assert!(seen.insert(name), "{name} named twice");
            }
        }
        assert_eq!(CUresult(2).known_name(), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(CUresult(100).known_name(), Some("CUDA_ERROR_NO_DEVICE"));
        assert_eq!(CUresult(12345).known_name(), None);
        assert!(
            CUresult::CUDA_ERROR_STUB_LIBRARY
                .hint()
                .unwrap()
                .contains("stub")
        );
    }
}
