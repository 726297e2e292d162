//! `ncclNet_v11_t` and `ncclNetProperties_v11_t` (NCCL 2.27 .. 2.28, the newest that 2.28
//! loads): `init` is called once per communicator and returns a context that `listen`,
//! `connect`, `finalize` and `setNetAttr` receive; properties gain `maxMultiRequestSize`.

use std::ffi::{c_char, c_int, c_void};

use super::{
    CommConfig, DebugLogger, NcclResult, NetAttr, NetDeviceHandle, ProfilerCallback, VDeviceProps,
};

pub use super::v9::MakeVDevice;

/// `ncclNetProperties_v11_t`.
#[repr(C)]
#[derive(Debug)]
pub struct Properties {
    /// Device name, for logs.
    pub name: *mut c_char,
    /// The PCI device directory in sysfs, or NULL for a virtual device.
    pub pci_path: *mut c_char,
    /// Unique per physical port.
    pub guid: u64,
    /// `NCCL_PTR_*` bits.
    pub ptr_support: c_int,
    /// Whether a registration is valid for every comm.
    pub reg_is_global: c_int,
    /// Whether NCCL must call `iflush` after every receive.
    pub force_flush: c_int,
    /// Port speed in Mbit/s.
    pub speed: c_int,
    /// Port number.
    pub port: c_int,
    /// Latency in microseconds.
    pub latency: f32,
    /// The most comms.
    pub max_comms: c_int,
    /// The most buffers in one grouped receive.
    pub max_recvs: c_int,
    /// `ncclNetDeviceType`.
    pub net_device_type: c_int,
    /// Device networking version.
    pub net_device_version: c_int,
    /// The physical devices behind this one.
    pub v_props: VDeviceProps,
    /// The largest point-to-point transfer.
    pub max_p2p_bytes: usize,
    /// The largest collective transfer.
    pub max_coll_bytes: usize,
    /// The most requests in one multi-request (1: none).
    pub max_multi_request_size: c_int,
}

/// `ncclNet_v11_t`, exported as `ncclNetPlugin_v11`.
#[repr(C)]
#[derive(Debug)]
#[allow(clippy::type_complexity)]
pub struct Net {
    /// The plugin's name, matched against `NCCL_NET`.
    pub name: *const c_char,
    /// `init(ctx*, commId, config*, logFunction, profFunction)`.
    pub init: unsafe extern "C" fn(
        *mut *mut c_void,
        u64,
        *mut CommConfig,
        DebugLogger,
        ProfilerCallback,
    ) -> NcclResult,
    /// `devices(ndev*)`.
    pub devices: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    /// `getProperties(dev, props*)`.
    pub get_properties: unsafe extern "C" fn(c_int, *mut Properties) -> NcclResult,
    /// `listen(ctx, dev, handle, listenComm*)`.
    pub listen:
        unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut *mut c_void) -> NcclResult,
    /// `connect(ctx, dev, handle, sendComm*, sendDevComm*)`.
    pub connect: unsafe extern "C" fn(
        *mut c_void,
        c_int,
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
    pub make_v_device: Option<unsafe extern "C" fn(*mut c_int, *mut VDeviceProps) -> NcclResult>,
    /// `finalize(ctx)`: the end of one `init`'s context.
    pub finalize: unsafe extern "C" fn(*mut c_void) -> NcclResult,
    /// `setNetAttr(ctx, attr*)`: tuning hints; NULL = ignored.
    pub set_net_attr: Option<unsafe extern "C" fn(*mut c_void, *mut NetAttr) -> NcclResult>,
}

// SAFETY: the table is immutable; its only data pointer is `name`, which points at a
// 'static C string literal.
unsafe impl Sync for Net {}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Properties>() == 112);
    assert!(offset_of!(Properties, v_props) == 64);
    assert!(offset_of!(Properties, max_p2p_bytes) == 88);
    assert!(offset_of!(Properties, max_coll_bytes) == 96);
    assert!(offset_of!(Properties, max_multi_request_size) == 104);
    assert!(size_of::<Net>() == 22 * 8);
    assert!(offset_of!(Net, listen) == 4 * 8);
    assert!(offset_of!(Net, test) == 13 * 8);
    assert!(offset_of!(Net, make_v_device) == 19 * 8);
    assert!(offset_of!(Net, finalize) == 20 * 8);
    assert!(offset_of!(Net, set_net_attr) == 21 * 8);
};
