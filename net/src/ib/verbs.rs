//! Owning types over libibverbs objects (weft-sys holds the raw table): an opened device, a
//! protection domain, a completion queue and a memory region. Each holds an `Arc` of what
//! must outlive it (MR -> PD -> device, CQ -> device), so drop order never matters, and each
//! `Drop` releases its object; a failed release is logged, never a panic.

use std::ffi::CStr;
use std::sync::Arc;

use weft_sys::Verbs;
use weft_sys::verbs::types::*;

use crate::{NetError, NetErrorKind};

/// The errno of the last failed verb, as text (verbs set errno and return null or -1).
pub(crate) fn last_errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A verb's non-zero return value (an errno number) as an error.
pub(crate) fn errno_error(rc: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(rc.abs())
}

/// An opened RDMA device (`ibv_context`).
pub(crate) struct Context {
    pub verbs: &'static Verbs,
    pub raw: *mut ibv_context,
    pub name: String,
}

// SAFETY: rdma-core's verbs are thread safe: every call on a context may come from any
// thread (the library and providers lock internally), and the pointer is owned here.
unsafe impl Send for Context {}
// SAFETY: as above; shared references only call thread-safe verbs.
unsafe impl Sync for Context {}

impl Context {
    /// Opens `device` (from `ibv_get_device_list`).
    ///
    /// # Safety
    /// `device` must come from a device list that is still alive.
    pub unsafe fn open(verbs: &'static Verbs, device: *mut ibv_device) -> Result<Self, NetError> {
        // SAFETY: the caller vouches for `device`.
        let name = unsafe { (verbs.ibv_get_device_name)(device) };
        // SAFETY: a NUL-terminated string that lives as long as the device list.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        let raw = unsafe { (verbs.ibv_open_device)(device) };
        if raw.is_null() {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_open_device({name}) failed"),
            )
            .cause(last_errno())
            .hint("check /dev/infiniband permissions and that the device's driver is loaded"));
        }
        Ok(Context { verbs, raw, name })
    }

    pub fn query_device(&self) -> Result<ibv_device_attr, NetError> {
        // SAFETY: ibv_device_attr is plain data; the call fills it.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a writable attribute struct.
        let rc = unsafe { (self.verbs.ibv_query_device)(self.raw, &mut attr) };
        if rc != 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_query_device({}) failed", self.name),
            )
            .cause(errno_error(rc)));
        }
        Ok(attr)
    }

    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr, NetError> {
        // SAFETY: ibv_port_attr is plain data valid as zeroes (the compat entry point fills
        // it up to `link_layer`, so it must start zeroed).
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a writable attribute struct.
        let rc = unsafe { (self.verbs.ibv_query_port)(self.raw, port, &mut attr) };
        if rc != 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_query_port({} port {port}) failed", self.name),
            )
            .cause(errno_error(rc)));
        }
        Ok(attr)
    }

    pub fn query_gid(&self, port: u8, index: u32) -> Option<[u8; 16]> {
        let mut gid = ibv_gid::from_bytes([0; 16]);
        // SAFETY: a live context and a writable gid.
        let rc = unsafe { (self.verbs.ibv_query_gid)(self.raw, port, index as i32, &mut gid) };
        (rc == 0).then(|| gid.bytes())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object made from this context holds an Arc of it, so none is left.
        let rc = unsafe { (self.verbs.ibv_close_device)(self.raw) };
        if rc != 0 {
            log::warn!(
                "ibv_close_device({}) failed: {}",
                self.name,
                errno_error(rc)
            );
        }
    }
}

/// A protection domain.
pub(crate) struct Pd {
    pub ctx: Arc<Context>,
    pub raw: *mut ibv_pd,
}

// SAFETY: verbs objects may be used from any thread (see `Context`).
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn new(ctx: Arc<Context>) -> Result<Self, NetError> {
        // SAFETY: a live context.
        let raw = unsafe { (ctx.verbs.ibv_alloc_pd)(ctx.raw) };
        if raw.is_null() {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_alloc_pd({}) failed", ctx.name),
            )
            .cause(last_errno()));
        }
        Ok(Pd { ctx, raw })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of this PD holds an Arc of it, so none is left.
        let rc = unsafe { (self.ctx.verbs.ibv_dealloc_pd)(self.raw) };
        if rc != 0 {
            log::warn!(
                "ibv_dealloc_pd({}) failed: {}",
                self.ctx.name,
                errno_error(rc)
            );
        }
    }
}

/// A completion queue without a completion channel (weft polls).
pub(crate) struct Cq {
    pub ctx: Arc<Context>,
    pub raw: *mut ibv_cq,
}

// SAFETY: verbs objects may be used from any thread (see `Context`).
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub fn new(ctx: Arc<Context>, entries: u32) -> Result<Self, NetError> {
        // SAFETY: a live context; no channel, vector 0.
        let raw = unsafe {
            (ctx.verbs.ibv_create_cq)(
                ctx.raw,
                entries as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if raw.is_null() {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_create_cq({}, {entries} entries) failed", ctx.name),
            )
            .cause(last_errno()));
        }
        Ok(Cq { ctx, raw })
    }

    /// Polls up to `out.len()` completions; returns how many were written.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize, NetError> {
        let n = out.len().min(i32::MAX as usize) as i32;
        // SAFETY: a live CQ and room for `n` completions.
        let got = unsafe { weft_sys::verbs::ibv_poll_cq(self.raw, n, out.as_mut_ptr()) };
        if got < 0 {
            return Err(NetError::new(
                NetErrorKind::Io(std::io::ErrorKind::Other),
                format!("ibv_poll_cq on {} failed", self.ctx.name),
            )
            .cause(errno_error(got)));
        }
        Ok(got as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc of it, so none is left.
        let rc = unsafe { (self.ctx.verbs.ibv_destroy_cq)(self.raw) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_cq({}) failed: {}",
                self.ctx.name,
                errno_error(rc)
            );
        }
    }
}

/// A registered memory region.
pub(crate) struct Mr {
    pub pd: Arc<Pd>,
    pub raw: *mut ibv_mr,
    pub lkey: u32,
    pub rkey: u32,
}

// SAFETY: verbs objects may be used from any thread (see `Context`).
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `addr..addr+len` with `access` (`IBV_ACCESS_*`).
    ///
    /// # Safety
    /// The memory must stay allocated until this `Mr` is dropped.
    pub unsafe fn register(
        pd: Arc<Pd>,
        addr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<Self, NetError> {
        let ctx = &pd.ctx;
        // SAFETY: a live PD; the caller keeps the memory alive for the MR's life.
        let raw = unsafe { (ctx.verbs.ibv_reg_mr)(pd.raw, addr.cast(), len, access as i32) };
        if raw.is_null() {
            let err = last_errno();
            return Err(NetError::new(
                NetErrorKind::Io(err.kind()),
                format!("ibv_reg_mr({}, {len} bytes at {addr:p}) failed", ctx.name),
            )
            .cause(err)
            .hint(
                "registration pins memory: raise the locked-memory limit (ulimit -l \
                 unlimited, or memlock in limits.conf / the container's settings)",
            ));
        }
        // SAFETY: a fresh, non-null MR from ibv_reg_mr.
        let mr = unsafe { &*raw };
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        Ok(Mr {
            pd,
            raw,
            lkey,
            rkey,
        })
    }
}

impl Mr {
    /// Registers `len` bytes of the dma-buf `fd` from `offset`, seen by the NIC at I/O
    /// virtual address `iova` (the buffer's address, so that FIFO entries carry it as is).
    ///
    /// # Safety
    /// `fd` must be an open dma-buf whose memory stays allocated until this `Mr` is dropped
    /// (the fd itself may be closed after the call: the kernel MR holds the dma-buf).
    pub unsafe fn register_dmabuf(
        pd: Arc<Pd>,
        fd: i32,
        offset: u64,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<Self, NetError> {
        let ctx = &pd.ctx;
        let reg = ctx.verbs.ibv_reg_dmabuf_mr().map_err(|e| {
            NetError::new(
                NetErrorKind::Unsupported,
                format!("dma-buf registration on {} is not available", ctx.name),
            )
            .cause(e)
        })?;
        // SAFETY: a live PD; the caller keeps the dma-buf alive for the MR's life.
        let raw = unsafe { reg(pd.raw, offset, len, iova, fd, access as i32) };
        if raw.is_null() {
            let err = last_errno();
            return Err(NetError::new(
                NetErrorKind::Io(err.kind()),
                format!(
                    "ibv_reg_dmabuf_mr({}, fd {fd}, offset {offset}, {len} bytes at iova {iova:#x}) failed",
                    ctx.name
                ),
            )
            .cause(err)
            .hint(
                "the kernel (5.12+) and the NIC driver must support dma-buf, and the fd must \
                 come from cuMemGetHandleForAddressRange covering offset..offset+len",
            ));
        }
        // SAFETY: a fresh, non-null MR from ibv_reg_dmabuf_mr.
        let mr = unsafe { &*raw };
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        Ok(Mr {
            pd,
            raw,
            lkey,
            rkey,
        })
    }
}

/// Asks the kernel whether it registers dma-bufs, as NCCL does: a registration of fd -1
/// fails with `EBADF` where dma-buf is supported and `EOPNOTSUPP` / `EPROTONOSUPPORT` where
/// it is not.
pub(crate) fn probe_dmabuf(pd: &Pd) -> super::gdr::DmaBufProbe {
    use super::gdr::DmaBufProbe;
    let Ok(reg) = pd.ctx.verbs.ibv_reg_dmabuf_mr() else {
        return DmaBufProbe::NoSymbol;
    };
    // SAFETY: a live PD; fd -1 names no memory, so nothing can be registered or pinned.
    let raw = unsafe { reg(pd.raw, 0, 0, 0, -1, 0) };
    if raw.is_null() {
        return DmaBufProbe::Errno(last_errno().raw_os_error().unwrap_or(0));
    }
    // SAFETY: an MR the probe just made (it should not exist); released at once.
    unsafe { (pd.ctx.verbs.ibv_dereg_mr)(raw) };
    DmaBufProbe::Registered
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR is ours; requests using it were completed or their QP destroyed
        // (the comms hold the MRs they post from until they are closed).
        let rc = unsafe { (self.pd.ctx.verbs.ibv_dereg_mr)(self.raw) };
        if rc != 0 {
            log::warn!(
                "ibv_dereg_mr({}) failed: {}",
                self.pd.ctx.name,
                errno_error(rc)
            );
        }
    }
}
