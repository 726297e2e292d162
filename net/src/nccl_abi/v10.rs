//! `ncclNet_v10_t` (NCCL 2.24 .. 2.26): a profiler callback at init, the communicator's
//! configuration (traffic class) at connect, profiler handles on isend and irecv.
//! `ncclNetProperties_v10_t` has v9's layout.

use std::ffi::{c_char, c_int, c_void};

use super::{CommConfig, DebugLogger, NcclResult, NetDeviceHandle, ProfilerCallback};

pub use super::v9::{MakeVDevice, Properties};

/// `ncclNet_v10_t`, exported as `ncclNetPlugin_v10`.
#[repr(C)]
#[derive(Debug)]
#[allow(clippy::type_complexity)]
pub struct Net {
    /// The plugin's name, matched against `NCCL_NET`.
    pub name: *const c_char,
    /// `init(logFunction, profFunction)`.
    pub init: unsafe extern "C" fn(DebugLogger, ProfilerCallback) -> NcclResult,
    /// `devices(ndev*)`.
    pub devices: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    /// `getProperties(dev, props*)`.
    pub get_properties: unsafe extern "C" fn(c_int, *mut Properties) -> NcclResult,
    /// `listen(dev, handle, listenComm*)`.
    pub listen: unsafe extern "C" fn(c_int, *mut c_void, *mut *mut c_void) -> NcclResult,
    /// `connect(dev, config*, handle, sendComm*, sendDevComm*)`.
    pub connect: unsafe extern "C" fn(
        c_int,
        *mut CommConfig,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut NetDeviceHandle,
    ) -> NcclResult,
    /// `accept(listenComm, recvComm*, recvDevComm*)`.
    pub accept: unsafe extern "C" fn(
        *mut c_void,
        *mut *mut c_void,
        *mut *mut NetDeviceHandle,
    ) -> NcclResult,
    /// `regMr(comm, data, size, type, mhandle*)`.
    pub reg_mr: unsafe extern "C" fn(
        *mut c_void,
        *mut c_void,
        usize,
        c_int,
        *mut *mut c_void,
    ) -> NcclResult,
    /// `regMrDmaBuf(comm, data, size, type, offset, fd, mhandle*)`.
    pub reg_mr_dma_buf: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut c_void,
            usize,
            c_int,
            u64,
            c_int,
            *mut *mut c_void,
        ) -> NcclResult,
    >,
    /// `deregMr(comm, mhandle)`.
    pub dereg_mr: unsafe extern "C" fn(*mut c_void, *mut c_void) -> NcclResult,
    /// `isend(sendComm, data, size, tag, mhandle, phandle, request*)`.
    pub isend: unsafe extern "C" fn(
        *mut c_void,
        *mut c_void,
        usize,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut *mut c_void,
    ) -> NcclResult,
    /// `irecv(recvComm, n, data[], sizes[], tags[], mhandles[], phandles[], request*)`.
    pub irecv: unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut usize,
        *mut c_int,
        *mut *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> NcclResult,
    /// `iflush(recvComm, n, data[], int sizes[], mhandles[], request*)`.
    pub iflush: unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut c_int,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> NcclResult,
    /// `test(request, done*, sizes*)`.
    pub test: unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> NcclResult,
    /// `closeSend(sendComm)`.
    pub close_send: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    /// `closeRecv(recvComm)`.
    pub close_recv: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    /// `closeListen(listenComm)`.
    pub close_listen: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    /// `getDeviceMr(comm, mhandle, dptr_mhandle*)`: device networking only.
    pub get_device_mr:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> NcclResult>,
    /// `irecvConsumed(recvComm, n, request)`: device networking only.
    pub irecv_consumed: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> NcclResult>,
    /// `makeVDevice(d*, props*)`: NIC fusion; NULL = NCCL uses the physical devices.
    pub make_v_device: Option<MakeVDevice>,
}

// SAFETY: the table is immutable; its only data pointer is `name`, which points at a
// 'static C string literal.
unsafe impl Sync for Net {}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Net>() == 20 * 8);
    assert!(offset_of!(Net, connect) == 5 * 8);
    assert!(offset_of!(Net, irecv) == 11 * 8);
    assert!(offset_of!(Net, make_v_device) == 19 * 8);
};
