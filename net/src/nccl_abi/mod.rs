//! NCCL's net plugin ABI, declared from the field order of NCCL's `net_v8.h` .. `net_v11.h`
//! (NCCL 2.28), one module per version. Every struct is `#[repr(C)]` and its size and field
//! offsets on x86-64 are asserted at compile time, so a field added in the wrong place fails
//! the build instead of corrupting NCCL's memory.
//!
//! Nothing here has behaviour. Both sides of the ABI use these declarations: weft's own
//! plugin (`libnccl-net-weft.so`, crate weft-nccl-net) fills the tables with its functions,
//! and [`crate::external`] calls the tables of a plugin it loaded.

use std::ffi::{c_char, c_int, c_ulong, c_void};

pub mod v10;
pub mod v11;
pub mod v8;
pub mod v9;

/// NCCL's `ncclResult_t` (an `enum`, passed as a C `int`).
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;
/// `ncclSystemError`: a system call or the network failed.
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`: NCCL used the plugin wrongly, or the plugin has a bug (or panicked).
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidUsage`: most likely the user's mistake (configuration, size mismatch).
pub const NCCL_INVALID_USAGE: NcclResult = 5;
/// `ncclRemoteError`: the peer went away or never answered.
pub const NCCL_REMOTE_ERROR: NcclResult = 6;

/// NCCL's name for a result code (`ncclSystemError`...), as NCCL's messages print them;
/// a code NCCL does not define is `unknown ncclResult_t`.
pub fn result_name(code: NcclResult) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "unknown ncclResult_t",
    }
}

/// Bytes NCCL reserves for a listen handle (`NCCL_NET_HANDLE_MAXSIZE`).
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// `NCCL_PTR_HOST`: host memory.
pub const NCCL_PTR_HOST: c_int = 0x1;
/// `NCCL_PTR_CUDA`: CUDA device memory.
pub const NCCL_PTR_CUDA: c_int = 0x2;
/// `NCCL_PTR_DMABUF`: memory registered through a DMA-BUF file descriptor.
pub const NCCL_PTR_DMABUF: c_int = 0x4;
/// `NCCL_NET_MAX_DEVS_PER_NIC`: the most physical devices in one virtual (fused) device.
pub const NCCL_NET_MAX_DEVS_PER_NIC: usize = 4;
/// `NCCL_NET_DEVICE_HOST`: no device-side networking (the proxy thread drives the plugin).
pub const NCCL_NET_DEVICE_HOST: c_int = 0;
/// `NCCL_NET_DEVICE_INVALID_VERSION`: the device networking version for host-only plugins.
pub const NCCL_NET_DEVICE_INVALID_VERSION: c_int = 0;
/// `MAX_NET_SIZE`: what NCCL's compatibility layers report as `maxP2pBytes` (1 GiB); it keeps
/// every size within the `int` that `test` reports sizes in.
pub const MAX_NET_SIZE: usize = 1 << 30;
/// `MAX_COLLNET_SIZE`: NCCL's default `maxCollBytes` (512 MiB).
pub const MAX_COLLNET_SIZE: usize = 512 << 20;

/// `ncclDebugLogLevel` values.
pub mod log_level {
    use std::ffi::c_int;
    /// `NCCL_LOG_WARN`.
    pub const WARN: c_int = 2;
    /// `NCCL_LOG_INFO`.
    pub const INFO: c_int = 3;
    /// `NCCL_LOG_TRACE`.
    pub const TRACE: c_int = 5;
}

/// `ncclDebugLogSubSys` flags.
pub mod log_subsys {
    use std::ffi::c_ulong;
    /// `NCCL_INIT`.
    pub const INIT: c_ulong = 0x1;
    /// `NCCL_NET`.
    pub const NET: c_ulong = 0x10;
    /// `NCCL_ALL`.
    pub const ALL: c_ulong = !0;
}

/// `ncclDebugLogger_t`: `void (*)(ncclDebugLogLevel, unsigned long flags, const char* file,
/// int line, const char* fmt, ...)`.
pub type DebugLogger = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;

/// `ncclProfilerCallback_t`; weft records no profiler events, so it is only accepted.
pub type ProfilerCallback = Option<
    unsafe extern "C" fn(
        e_handle: *mut *mut c_void,
        kind: c_int,
        p_handle: *mut c_void,
        plugin_id: i64,
        ext_data: *mut c_void,
    ) -> NcclResult,
>;

/// `ncclNetDeviceHandle_v7_t` (the same up to v11): what a plugin with device-side
/// networking hands back from connect/accept. weft is host-only and never writes one.
#[repr(C)]
#[derive(Debug)]
pub struct NetDeviceHandle {
    /// `ncclNetDeviceType`.
    pub net_device_type: c_int,
    /// Version of the device networking code.
    pub net_device_version: c_int,
    /// Device-side handle.
    pub handle: *mut c_void,
    /// Its size.
    pub size: usize,
    /// Whether the proxy must still progress the connection.
    pub needs_proxy_progress: c_int,
}

/// `ncclNetVDeviceProps_v9_t` .. `_v11_t`: the physical devices fused into one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct VDeviceProps {
    /// How many entries of `devs` are used.
    pub ndevs: c_int,
    /// Physical device indices.
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC],
}

/// `ncclNetCommConfig_v10_t` / `_v11_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CommConfig {
    /// Traffic class (QoS) for this communicator's connections; -1 when unset.
    pub traffic_class: c_int,
}

/// `ncclNetCommAttr_v11_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CommAttr {
    /// Peer and flow hints NCCL passes to `setNetAttr`.
    pub max_concurrent_peers: i32,
    /// See `max_concurrent_peers`.
    pub min_concurrent_peers: i32,
    /// See `max_concurrent_peers`.
    pub max_flows_per_peer: i32,
    /// See `max_concurrent_peers`.
    pub min_flows_per_peer: i32,
}

/// `ncclNetAttr_v11_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NetAttr {
    /// Hints for send comms.
    pub send_comm_attr: CommAttr,
    /// Hints for receive comms.
    pub recv_comm_attr: CommAttr,
    /// The collective, algorithm and protocol the hints are for.
    pub op: u32,
    /// See `op`.
    pub algo: u32,
    /// See `op`.
    pub proto: u32,
}

// x86-64 (LP64) layouts, from the C declarations' field order.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NetDeviceHandle>() == 32);
    assert!(offset_of!(NetDeviceHandle, handle) == 8);
    assert!(offset_of!(NetDeviceHandle, size) == 16);
    assert!(offset_of!(NetDeviceHandle, needs_proxy_progress) == 24);
    assert!(size_of::<VDeviceProps>() == 20);
    assert!(size_of::<CommConfig>() == 4);
    assert!(size_of::<CommAttr>() == 16);
    assert!(size_of::<NetAttr>() == 44);
    assert!(offset_of!(NetAttr, op) == 32);
    assert!(offset_of!(NetAttr, proto) == 40);
};
