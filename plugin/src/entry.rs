//! The C entry points and the exported tables `ncclNetPlugin_v8` .. `ncclNetPlugin_v11`.
//!
//! NCCL 2.28 looks for `ncclNetPlugin_v11` first, then v10, v9, v8 (`src/plugin/net.cc`),
//! so it picks v11; older NCCLs pick the newest version they know. All versions share one
//! implementation per operation; the per-version functions only convert arguments (`int`
//! versus `size_t` sizes, the v11 context, the v10 configuration, profiler handles, which
//! weft ignores) and fill the version's properties struct.
//!
//! Every function body runs inside [`boundary!`](crate::boundary!): a panic becomes
//! `ncclInternalError`, an error is logged through NCCL's logger with the entry point's name.
//! Out-pointers are set to NULL first, so NCCL never reads a stale comm or request on error.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::{NonNull, null_mut};
use std::sync::{Once, OnceLock};

use weft_net::{Completion, NET_HANDLE_MAXSIZE, NET_MAX_RECVS, NetError, NetErrorKind, PtrKind};

use crate::abi::{
    CommConfig, DebugLogger, MAX_COLLNET_SIZE, MAX_NET_SIZE, NCCL_NET_DEVICE_HOST,
    NCCL_NET_DEVICE_INVALID_VERSION, NCCL_NET_HANDLE_MAXSIZE, NCCL_PTR_CUDA, NCCL_PTR_HOST,
    NcclResult, NetDeviceHandle, ProfilerCallback, VDeviceProps, v8, v9, v10, v11,
};
use crate::adapter::{self, DeviceInfo, Kind, Obj, PluginNet, RawRecv};
use crate::backend;
use crate::boundary;
use weft_config::{Group, Settings};

const _: () = assert!(NET_HANDLE_MAXSIZE == NCCL_NET_HANDLE_MAXSIZE);

/// The name NCCL prints and matches against `NCCL_NET`.
pub const PLUGIN_NAME: &CStr = c"weft";

static NET: OnceLock<Box<dyn PluginNet>> = OnceLock::new();

fn invalid(what: String) -> NetError {
    NetError::new(NetErrorKind::InvalidArgument, what)
}

fn net(entry: &str) -> Result<&'static dyn PluginNet, NetError> {
    NET.get()
        .map(|b| b.as_ref())
        .ok_or_else(|| invalid(format!("{entry} called before a successful init")))
}

/// Keeps this library mapped for the life of the process. NCCL `dlclose`s a net plugin when
/// its last communicator goes away, but the socket backend's helper threads may still be
/// finishing then, and unmapping code under a running thread crashes the process.
fn keep_loaded() {
    static PINNED: Once = Once::new();
    PINNED.call_once(|| {
        if let Err(why) = weft_ffi::pinning::keep_loaded((&raw const ncclNetPlugin_v11) as usize) {
            log::info!("NET/weft : could not pin this library ({why}); it may be unloaded early");
        }
    });
}

/// The first `init` opens the backend; later ones (NCCL 2.27+ calls `init` per communicator)
/// reuse it.
fn start(logger: DebugLogger, abi: u32) -> Result<&'static dyn PluginNet, NetError> {
    // The level even when some variable is bad: that error must reach NCCL's log.
    let level = Settings::from_lookup_or_defaults(&weft_config::lookup::process).debug;
    crate::logger::install(logger, &level);
    keep_loaded();
    if let Some(net) = NET.get() {
        return Ok(net.as_ref());
    }
    // Read once, at the first init: the backend lives as long as the process. Only the
    // network's variables can fail it: the rest are NCCL's or weft's communicator's business.
    let settings = Settings::from_env_or_defaults();
    settings.check_groups(&[Group::Net])?;
    let opened = backend::open(settings.net.backend, &settings.net)?;
    // Two first inits racing both open a backend; the loser's is dropped (it holds no
    // connections yet).
    let first = NET.set(opened).is_ok();
    let net = net("init")?;
    if first {
        log::info!(
            "NET/weft : weft {} net plugin (ncclNet v{abi}), {} backend: {}",
            env!("CARGO_PKG_VERSION"),
            net.backend(),
            net.describe()
        );
        for dev in 0..net.devices() {
            if let Ok(d) = net.device(dev) {
                let gpu = if d.props.ptr_support.contains(weft_net::PtrSupport::CUDA) {
                    "GPUDirect RDMA"
                } else {
                    "host memory only: NCCL stages GPU data through host buffers"
                };
                log::info!(
                    "NET/weft : [{dev}] {} speed {} Mb/s, ptrSupport {:#x} ({gpu}), maxRecvs {}",
                    d.name.to_string_lossy(),
                    d.props.speed_mbps,
                    d.props.ptr_support.bits(),
                    d.props.max_recvs
                );
            }
        }
    }
    Ok(net)
}

/// Borrows an out-pointer NCCL passed.
///
/// # Safety
/// `ptr` is NULL or valid for writes of `T`.
unsafe fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, NetError> {
    // SAFETY: valid or NULL (contract); as_mut refuses NULL. Every T here is a pointer or an
    // integer, for which any bit pattern NCCL left there is valid.
    unsafe { ptr.as_mut() }.ok_or_else(|| invalid(format!("NULL {what} out-pointer")))
}

fn raw(obj: Option<Obj>) -> *mut c_void {
    obj.map_or(null_mut(), NonNull::as_ptr)
}

fn dev_index(dev: c_int) -> Result<usize, NetError> {
    usize::try_from(dev).map_err(|_| invalid(format!("device index {dev} is negative")))
}

fn ptr_kind(kind: c_int) -> Result<PtrKind, NetError> {
    match kind {
        NCCL_PTR_HOST => Ok(PtrKind::Host),
        NCCL_PTR_CUDA => Ok(PtrKind::Cuda),
        other => Err(invalid(format!(
            "memory type {other:#x} is neither NCCL_PTR_HOST (0x1) nor NCCL_PTR_CUDA (0x2)"
        ))),
    }
}

/// The largest message: `test` reports sizes as `int`.
const MAX_MESSAGE: usize = c_int::MAX as usize;

fn check_size(size: usize, entry: &str) -> Result<(), NetError> {
    if size > MAX_MESSAGE {
        return Err(invalid(format!(
            "{entry} of {size} bytes: more than test() can report (2^31 - 1); weft reports \
             maxP2pBytes = {MAX_NET_SIZE}"
        )));
    }
    Ok(())
}

// ---- shared implementations ----

/// # Safety
/// Pointers as in `ncclNet_t::listen`.
unsafe fn listen(dev: c_int, handle: *mut c_void, listen_comm: *mut *mut c_void) -> NcclResult {
    boundary!("listen", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(listen_comm, "listenComm")? };
        *out = null_mut();
        if handle.is_null() {
            return Err(invalid("NULL handle buffer".into()));
        }
        let mut bytes = [0u8; NET_HANDLE_MAXSIZE];
        let comm = net("listen")?.listen(dev_index(dev)?, &mut bytes)?;
        // SAFETY: NCCL's handle buffer holds NCCL_NET_HANDLE_MAXSIZE bytes; [u8; N] has
        // alignment 1.
        unsafe { handle.cast::<[u8; NET_HANDLE_MAXSIZE]>().write(bytes) };
        *out = comm.as_ptr();
        Ok(())
    })
}

/// # Safety
/// Pointers as in `ncclNet_t::connect`.
unsafe fn connect(dev: c_int, handle: *mut c_void, send_comm: *mut *mut c_void) -> NcclResult {
    boundary!("connect", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(send_comm, "sendComm")? };
        *out = null_mut();
        if handle.is_null() {
            return Err(invalid("NULL handle".into()));
        }
        // SAFETY: the handle NCCL passes is NCCL_NET_HANDLE_MAXSIZE readable bytes.
        let bytes = unsafe { handle.cast::<[u8; NET_HANDLE_MAXSIZE]>().read() };
        *out = raw(net("connect")?.connect(dev_index(dev)?, &bytes, handle as usize)?);
        Ok(())
    })
}

/// # Safety
/// Pointers as in `ncclNet_t::accept`.
unsafe extern "C" fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    _recv_dev_comm: *mut *mut NetDeviceHandle,
) -> NcclResult {
    boundary!("accept", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(recv_comm, "recvComm")? };
        *out = null_mut();
        // SAFETY: NCCL passes the listen comm we returned.
        *out = raw(unsafe { net("accept")?.accept(listen_comm)? });
        Ok(())
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    boundary!("devices", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(ndev, "ndev")? };
        *out = c_int::try_from(net("devices")?.devices()).unwrap_or(c_int::MAX);
        Ok(())
    })
}

unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    mhandle: *mut *mut c_void,
) -> NcclResult {
    boundary!("regMr", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(mhandle, "mhandle")? };
        *out = null_mut();
        let kind = ptr_kind(kind)?;
        // SAFETY: NCCL passes one of our comms and keeps the memory until deregMr.
        let mr = unsafe { net("regMr")?.reg_mr(comm, data.cast(), size, kind)? };
        *out = mr.as_ptr();
        Ok(())
    })
}

unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> NcclResult {
    boundary!("regMrDmaBuf", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(mhandle, "mhandle")? };
        *out = null_mut();
        // NCCL passes a dma-buf only for GPU memory, and only to a device whose ptrSupport
        // has NCCL_PTR_DMABUF; a host-memory dma-buf is nothing weft registers.
        if ptr_kind(kind)? != PtrKind::Cuda {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "regMrDmaBuf of fd {fd} with type {kind}: only NCCL_PTR_CUDA memory is registered through dma-buf"
                ),
            ));
        }
        let net = net("regMrDmaBuf")?;
        // SAFETY: NCCL passes one of our comms and an open fd, and keeps the memory until deregMr.
        let mr = unsafe { net.reg_mr_dmabuf(comm, data.cast(), size, offset, fd) }.map_err(|e| {
            NetError::new(
                e.kind(),
                format!(
                    "DMA-BUF registration (fd {fd}, offset {offset}, {size} bytes) with the {} backend",
                    net.backend()
                ),
            )
            .cause(e)
            .hint("where ptrSupport lacks NCCL_PTR_DMABUF NCCL registers through regMr or stages through host memory")
        })?;
        *out = mr.as_ptr();
        Ok(())
    })
}

unsafe extern "C" fn dereg_mr(_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult {
    boundary!("deregMr", {
        // SAFETY: NCCL passes a registration we returned, once.
        unsafe { net("deregMr")?.dereg_mr(mhandle) }
    })
}

/// # Safety
/// Pointers as in `ncclNet_t::isend`.
unsafe fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    boundary!("isend", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(request, "request")? };
        *out = null_mut();
        check_size(size, "isend")?;
        // Tags are opaque 32-bit values: keep the bits.
        let tag = tag as u32;
        // SAFETY: NCCL keeps the data valid and unchanged until test reports completion.
        *out = raw(unsafe {
            net("isend")?.isend(send_comm, data.cast_const().cast(), size, tag, mhandle)?
        });
        Ok(())
    })
}

/// Reads NCCL's receive arrays into `bufs`.
///
/// # Safety
/// Each array pointer is NULL or holds `n` elements.
unsafe fn recv_arrays<S: Copy>(
    n: c_int,
    data: *mut *mut c_void,
    sizes: *const S,
    size_of: fn(S) -> Option<usize>,
    tags: *const c_int,
    mhandles: *mut *mut c_void,
    bufs: &mut [RawRecv; NET_MAX_RECVS],
) -> Result<usize, NetError> {
    let count = usize::try_from(n)
        .ok()
        .filter(|c| (1..=NET_MAX_RECVS).contains(c))
        .ok_or_else(|| {
            invalid(format!(
                "n = {n} buffers in one grouped receive: weft takes 1 to {NET_MAX_RECVS}"
            ))
        })?;
    if data.is_null() || sizes.is_null() || mhandles.is_null() {
        return Err(invalid("NULL data, sizes or mhandles array".into()));
    }
    // SAFETY: non-NULL arrays of `n` elements from NCCL (contract).
    let data = unsafe { std::slice::from_raw_parts(data.cast_const(), count) };
    // SAFETY: as above.
    let sizes = unsafe { std::slice::from_raw_parts(sizes, count) };
    // SAFETY: as above.
    let mhandles = unsafe { std::slice::from_raw_parts(mhandles.cast_const(), count) };
    let tags: &[c_int] = if tags.is_null() {
        &[]
    } else {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(tags, count) }
    };
    for (i, b) in bufs.iter_mut().take(count).enumerate() {
        let (Some(&d), Some(&s), Some(&m)) = (data.get(i), sizes.get(i), mhandles.get(i)) else {
            break;
        };
        let size = size_of(s).ok_or_else(|| invalid(format!("buffer {i}: negative size")))?;
        // Tags are opaque 32-bit values: keep the bits.
        let tag = tags.get(i).map_or(0, |&t| t as u32);
        *b = RawRecv {
            data: d.cast(),
            size,
            tag,
            mr: m,
        };
    }
    Ok(count)
}

fn int_size(s: c_int) -> Option<usize> {
    usize::try_from(s).ok()
}

fn size_t_size(s: usize) -> Option<usize> {
    Some(s)
}

/// # Safety
/// Pointers as in `ncclNet_t::irecv`.
#[allow(clippy::too_many_arguments)] // NCCL's signature plus the size reader.
unsafe fn irecv<S: Copy>(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *const S,
    size_of: fn(S) -> Option<usize>,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    boundary!("irecv", {
        // SAFETY: NCCL's out-pointer (v11 may pass NCCL_NET_OPTIONAL_RECV_COMPLETION in it,
        // an input hint weft does not use: every receive completes through test).
        let out = unsafe { out(request, "request")? };
        *out = null_mut();
        if tags.is_null() {
            return Err(invalid("NULL tags array".into()));
        }
        let mut bufs = [RawRecv::default(); NET_MAX_RECVS];
        // SAFETY: NCCL's arrays hold n elements.
        let count = unsafe { recv_arrays(n, data, sizes, size_of, tags, mhandles, &mut bufs)? };
        let bufs = bufs.get(..count).unwrap_or_default();
        for (i, b) in bufs.iter().enumerate() {
            check_size(b.size, &format!("irecv buffer {i}"))?;
        }
        // SAFETY: NCCL keeps the buffers for this receive alone until test reports it done.
        *out = raw(unsafe { net("irecv")?.irecv(recv_comm, bufs)? });
        Ok(())
    })
}

unsafe extern "C" fn iflush(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    boundary!("iflush", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(request, "request")? };
        *out = null_mut();
        let mut bufs = [RawRecv::default(); NET_MAX_RECVS];
        // SAFETY: NCCL's arrays hold n elements.
        let count = unsafe {
            recv_arrays(
                n,
                data,
                sizes.cast_const(),
                int_size,
                std::ptr::null(),
                mhandles,
                &mut bufs,
            )?
        };
        let bufs = bufs.get(..count).unwrap_or_default();
        // A NULL request tells NCCL the flush is complete (host memory needs none).
        // SAFETY: as for irecv: arrays of `n` elements, buffers live until the request completes.
        *out = raw(unsafe { net("iflush")?.iflush(recv_comm, bufs)? });
        Ok(())
    })
}

fn report_sizes(done: &Completion, sizes: *mut c_int) -> Result<(), NetError> {
    if sizes.is_null() {
        return Ok(());
    }
    let done = done.sizes();
    // SAFETY: NCCL's sizes array has one entry per buffer of the request (1 for a send, n for
    // a receive), and the completion has exactly that many.
    let out = unsafe { std::slice::from_raw_parts_mut(sizes, done.len()) };
    for (o, &s) in out.iter_mut().zip(done) {
        *o = c_int::try_from(s)
            .map_err(|_| invalid(format!("completed size {s} does not fit test()'s int")))?;
    }
    Ok(())
}

unsafe extern "C" fn test(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> NcclResult {
    boundary!("test", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let done = unsafe { out(done, "done")? };
        *done = 0;
        // SAFETY: NCCL passes a request we returned that has not completed yet.
        if let Some(c) = unsafe { net("test")?.test(request)? } {
            report_sizes(&c, sizes)?;
            *done = 1;
        }
        Ok(())
    })
}

unsafe extern "C" fn close_send(comm: *mut c_void) -> NcclResult {
    // SAFETY: NCCL closes each comm it got from connect once.
    boundary!("closeSend", unsafe { net("closeSend")?.close_send(comm) })
}

unsafe extern "C" fn close_recv(comm: *mut c_void) -> NcclResult {
    // SAFETY: NCCL closes each comm it got from accept once.
    boundary!("closeRecv", unsafe { net("closeRecv")?.close_recv(comm) })
}

unsafe extern "C" fn close_listen(comm: *mut c_void) -> NcclResult {
    // SAFETY: NCCL closes each comm it got from listen once.
    boundary!("closeListen", unsafe {
        net("closeListen")?.close_listen(comm)
    })
}

/// The properties every version reports, before version-specific fields.
struct Common {
    name: *mut std::ffi::c_char,
    pci_path: *mut std::ffi::c_char,
    guid: u64,
    ptr_support: c_int,
    reg_is_global: c_int,
    speed: c_int,
    port: c_int,
    latency: f32,
    max_comms: c_int,
    max_recvs: c_int,
    v_props: VDeviceProps,
}

fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

fn common(dev: c_int) -> Result<Common, NetError> {
    let index = dev_index(dev)?;
    let d: &DeviceInfo = net("getProperties")?.device(index)?;
    let p = &d.props;
    Ok(Common {
        name: d.name.as_ptr().cast_mut(),
        pci_path: d
            .pci_path
            .as_ref()
            .map_or(null_mut(), |c| c.as_ptr().cast_mut()),
        guid: p.guid,
        ptr_support: clamp(p.ptr_support.bits()),
        reg_is_global: c_int::from(p.reg_is_global),
        speed: clamp(p.speed_mbps),
        port: clamp(p.port),
        latency: p.latency_us,
        max_comms: clamp(p.max_comms),
        max_recvs: clamp(p.max_recvs),
        v_props: VDeviceProps {
            ndevs: 1,
            devs: [dev, 0, 0, 0],
        },
    })
}

unsafe extern "C" fn get_properties_v8(dev: c_int, props: *mut v8::Properties) -> NcclResult {
    boundary!("getProperties", {
        let c = common(dev)?;
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(props, "props")? };
        *out = v8::Properties {
            name: c.name,
            pci_path: c.pci_path,
            guid: c.guid,
            ptr_support: c.ptr_support,
            reg_is_global: c.reg_is_global,
            speed: c.speed,
            port: c.port,
            latency: c.latency,
            max_comms: c.max_comms,
            max_recvs: c.max_recvs,
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
        };
        Ok(())
    })
}

unsafe extern "C" fn get_properties_v9(dev: c_int, props: *mut v9::Properties) -> NcclResult {
    boundary!("getProperties", {
        let c = common(dev)?;
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(props, "props")? };
        *out = v9::Properties {
            name: c.name,
            pci_path: c.pci_path,
            guid: c.guid,
            ptr_support: c.ptr_support,
            reg_is_global: c.reg_is_global,
            force_flush: 0,
            speed: c.speed,
            port: c.port,
            latency: c.latency,
            max_comms: c.max_comms,
            max_recvs: c.max_recvs,
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
            v_props: c.v_props,
            max_p2p_bytes: MAX_NET_SIZE,
            max_coll_bytes: MAX_COLLNET_SIZE,
        };
        Ok(())
    })
}

unsafe extern "C" fn get_properties_v11(dev: c_int, props: *mut v11::Properties) -> NcclResult {
    boundary!("getProperties", {
        let c = common(dev)?;
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(props, "props")? };
        *out = v11::Properties {
            name: c.name,
            pci_path: c.pci_path,
            guid: c.guid,
            ptr_support: c.ptr_support,
            reg_is_global: c.reg_is_global,
            force_flush: 0,
            speed: c.speed,
            port: c.port,
            latency: c.latency,
            max_comms: c.max_comms,
            max_recvs: c.max_recvs,
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
            v_props: c.v_props,
            max_p2p_bytes: MAX_NET_SIZE,
            max_coll_bytes: MAX_COLLNET_SIZE,
            max_multi_request_size: 1,
        };
        Ok(())
    })
}

// ---- per-version wrappers ----

unsafe extern "C" fn init_v8(logger: DebugLogger) -> NcclResult {
    boundary!("init", start(logger, 8).map(drop))
}

unsafe extern "C" fn init_v9(logger: DebugLogger) -> NcclResult {
    boundary!("init", start(logger, 9).map(drop))
}

unsafe extern "C" fn init_v10(logger: DebugLogger, _profiler: ProfilerCallback) -> NcclResult {
    boundary!("init", start(logger, 10).map(drop))
}

/// What a v11 `init` returns as its context.
#[derive(Debug)]
struct Context {
    comm_id: u64,
    traffic_class: c_int,
}

unsafe extern "C" fn init_v11(
    ctx: *mut *mut c_void,
    comm_id: u64,
    config: *mut CommConfig,
    logger: DebugLogger,
    _profiler: ProfilerCallback,
) -> NcclResult {
    boundary!("init", {
        // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
        let out = unsafe { out(ctx, "ctx")? };
        *out = null_mut();
        // SAFETY: NULL or NCCL's configuration for this communicator.
        let traffic_class = unsafe { config.as_ref() }.map_or(-1, |c| c.traffic_class);
        start(logger, 11)?;
        log::debug!(
            "NET/weft : init for communicator {comm_id:#018x}, traffic class {traffic_class}"
        );
        *out = adapter::into_obj(
            Kind::Context,
            Context {
                comm_id,
                traffic_class,
            },
        )
        .as_ptr();
        Ok(())
    })
}

unsafe extern "C" fn finalize_v11(ctx: *mut c_void) -> NcclResult {
    boundary!("finalize", {
        // SAFETY: NCCL finalizes each context from init once.
        let c: Context = unsafe { adapter::take(ctx, Kind::Context)? };
        log::debug!(
            "NET/weft : finalize for communicator {:#018x} (traffic class {})",
            c.comm_id,
            c.traffic_class
        );
        Ok(())
    })
}

unsafe extern "C" fn listen_v8(
    dev: c_int,
    handle: *mut c_void,
    comm: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { listen(dev, handle, comm) }
}

unsafe extern "C" fn listen_v11(
    _ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    comm: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { listen(dev, handle, comm) }
}

unsafe extern "C" fn connect_v8(
    dev: c_int,
    handle: *mut c_void,
    comm: *mut *mut c_void,
    _dev_comm: *mut *mut NetDeviceHandle,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { connect(dev, handle, comm) }
}

unsafe extern "C" fn connect_v10(
    dev: c_int,
    _config: *mut CommConfig,
    handle: *mut c_void,
    comm: *mut *mut c_void,
    _dev_comm: *mut *mut NetDeviceHandle,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { connect(dev, handle, comm) }
}

unsafe extern "C" fn connect_v11(
    _ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    comm: *mut *mut c_void,
    _dev_comm: *mut *mut NetDeviceHandle,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { connect(dev, handle, comm) }
}

unsafe extern "C" fn isend_v8(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    let Ok(size) = usize::try_from(size) else {
        return boundary!("isend", {
            // SAFETY: NCCL passes NULL (which `out` refuses) or a writable slot of this type.
            *unsafe { out(request, "request")? } = null_mut();
            Err(invalid(format!("isend of a negative size ({size})")))
        });
    };
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { isend(comm, data, size, tag, mhandle, request) }
}

unsafe extern "C" fn isend_v9(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { isend(comm, data, size, tag, mhandle, request) }
}

unsafe extern "C" fn isend_v10(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    _phandle: *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe { isend(comm, data, size, tag, mhandle, request) }
}

unsafe extern "C" fn irecv_v8(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe {
        irecv(
            comm,
            n,
            data,
            sizes.cast_const(),
            int_size,
            tags,
            mhandles,
            request,
        )
    }
}

unsafe extern "C" fn irecv_v9(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe {
        irecv(
            comm,
            n,
            data,
            sizes.cast_const(),
            size_t_size,
            tags,
            mhandles,
            request,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn irecv_v10(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    _phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: NCCL passes what ncclNet_t documents for this call: the callee's # Safety.
    unsafe {
        irecv(
            comm,
            n,
            data,
            sizes.cast_const(),
            size_t_size,
            tags,
            mhandles,
            request,
        )
    }
}

// ---- the exported tables ----

/// The v11 table (NCCL 2.27, 2.28). Device networking, NIC fusion and network attributes
/// are left NULL, as in NCCL's own socket transport.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v11: v11::Net = v11::Net {
    name: PLUGIN_NAME.as_ptr(),
    init: init_v11,
    devices,
    get_properties: get_properties_v11,
    listen: listen_v11,
    connect: connect_v11,
    accept,
    reg_mr,
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
    finalize: finalize_v11,
    set_net_attr: None,
};

/// The v10 table (NCCL 2.24 .. 2.26).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v10: v10::Net = v10::Net {
    name: PLUGIN_NAME.as_ptr(),
    init: init_v10,
    devices,
    get_properties: get_properties_v9,
    listen: listen_v8,
    connect: connect_v10,
    accept,
    reg_mr,
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
};

/// The v9 table (NCCL 2.22, 2.23).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v9: v9::Net = v9::Net {
    name: PLUGIN_NAME.as_ptr(),
    init: init_v9,
    devices,
    get_properties: get_properties_v9,
    listen: listen_v8,
    connect: connect_v8,
    accept,
    reg_mr,
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    dereg_mr,
    isend: isend_v9,
    irecv: irecv_v9,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
};

/// The v8 table (NCCL 2.19 .. 2.21).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v8: v8::Net = v8::Net {
    name: PLUGIN_NAME.as_ptr(),
    init: init_v8,
    devices,
    get_properties: get_properties_v8,
    listen: listen_v8,
    connect: connect_v8,
    accept,
    reg_mr,
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    dereg_mr,
    isend: isend_v8,
    irecv: irecv_v8,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
};
