//! A device's primary context: the one the CUDA runtime, PyTorch and NCCL share.

use std::sync::{Arc, Mutex, PoisonError};

use weft_sys::cuda::types::{CU_STREAM_NON_BLOCKING, CUcontext, CUresult, CUstream};

use crate::device::{Device, driver};
use crate::error::{Result, check};

/// The retained primary context of a device; `Drop` releases it.
#[derive(Debug)]
pub struct Context {
    device: Device,
    raw: CUcontext,
    /// weft's own stream for its waited-for copies and fills (null until the first). Not
    /// the legacy default stream: a program may leave that stream waiting on a collective
    /// still in flight (PyTorch's barrier makes its default stream wait for the
    /// all-reduce's end), and a copy queued there would wait with it; a communicator's
    /// init would then hang until the collective ended, and the collective may be waiting
    /// for that very init on another rank.
    copies: Mutex<CUstream>,
}

// SAFETY: a CUcontext and a CUstream are handles the driver lets any thread use
// (cuCtxSetCurrent binds the context to the calling thread; nothing here keeps
// thread-local state).
unsafe impl Send for Context {}
// SAFETY: as above; every method only passes the handles to the driver, the copy stream
// behind its lock.
unsafe impl Sync for Context {}

impl Context {
    /// Retains `device`'s primary context.
    pub fn primary(device: Device) -> Result<Arc<Context>> {
        let d = driver()?;
        let mut raw: CUcontext = std::ptr::null_mut();
        check(
            // SAFETY: `raw` is a valid out-pointer; the device handle comes from cuDeviceGet.
            unsafe { (d.cuDevicePrimaryCtxRetain)(&mut raw, device.raw()) },
            "cuDevicePrimaryCtxRetain",
            Some(device.ordinal()),
        )?;
        Ok(Arc::new(Context {
            device,
            raw,
            copies: Mutex::new(std::ptr::null_mut()),
        }))
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// Makes this the calling thread's current context.
    pub fn bind(&self) -> Result<()> {
        let d = driver()?;
        check(
            // SAFETY: `raw` is a retained context.
            unsafe { (d.cuCtxSetCurrent)(self.raw) },
            "cuCtxSetCurrent",
            Some(self.device.ordinal()),
        )
    }

    /// Lets kernels of this context access `peer`'s memory; already enabled is fine.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<()> {
        if peer.raw == self.raw {
            return Ok(());
        }
        self.bind()?;
        let d = driver()?;
        // SAFETY: both contexts are retained; flags must be 0.
        let r = unsafe { (d.cuCtxEnablePeerAccess)(peer.raw, 0) };
        if r == CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check(r, "cuCtxEnablePeerAccess", Some(self.device.ordinal()))
    }

    /// Waits for every stream of this context.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        let d = driver()?;
        check(
            // SAFETY: no arguments; the context is current.
            unsafe { (d.cuCtxSynchronize)() },
            "cuCtxSynchronize",
            Some(self.device.ordinal()),
        )
    }

    /// Enqueues work on the context's copy stream with `enqueue` and waits for it to end;
    /// `call` names the enqueued call in errors. The work waits for nothing else: neither
    /// the legacy default stream nor the program's kernels (see `copies`). One copy at a
    /// time per `Context` value (each `Context::primary` makes one, with its own stream).
    pub(crate) fn copy_and_wait(
        &self,
        call: &'static str,
        enqueue: impl FnOnce(CUstream) -> CUresult,
    ) -> Result<()> {
        self.bind()?;
        let d = driver()?;
        let ordinal = Some(self.device.ordinal());
        let mut stream = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
        if stream.is_null() {
            check(
                // SAFETY: `stream` is a valid out-pointer; the context is current.
                unsafe { (d.cuStreamCreate)(&mut *stream, CU_STREAM_NON_BLOCKING) },
                "cuStreamCreate (weft's copy stream)",
                ordinal,
            )?;
        }
        check(enqueue(*stream), call, ordinal)?;
        check(
            // SAFETY: a live stream of the current context.
            unsafe { (d.cuStreamSynchronize)(*stream) },
            call,
            ordinal,
        )
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        let copies = *self
            .copies
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if !copies.is_null() && self.bind().is_ok() {
            // SAFETY: created in `copy_and_wait`, destroyed once here, before the context
            // is released.
            let r = unsafe { (d.cuStreamDestroy)(copies) };
            if let Err(e) = check(
                r,
                "cuStreamDestroy (weft's copy stream)",
                Some(self.device.ordinal()),
            ) {
                log::warn!("weft-cuda: {e}");
            }
        }
        // SAFETY: retained in `primary`, released once here.
        let r = unsafe { (d.cuDevicePrimaryCtxRelease)(self.device.raw()) };
        if let Err(e) = check(r, "cuDevicePrimaryCtxRelease", Some(self.device.ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}
