//! Streams: ordered queues of work on one device.

use std::sync::Arc;

use weft_sys::cuda::types::{
    CU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_NON_BLOCKING, CUresult, CUstream,
    CUstreamCaptureStatus,
};

use crate::context::Context;
use crate::device::driver;
use crate::error::{CudaError, Result, check};
use crate::event::Event;

/// A stream; `Drop` destroys it unless it was borrowed ([`Stream::from_raw`]).
#[derive(Debug)]
pub struct Stream {
    ctx: Arc<Context>,
    raw: CUstream,
    owned: bool,
}

// SAFETY: a CUstream is a driver handle usable from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; methods only pass the handle to the driver.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new non-blocking stream (it does not wait for the legacy default stream).
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        ctx.bind()?;
        let d = driver()?;
        let mut raw: CUstream = std::ptr::null_mut();
        check(
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            unsafe { (d.cuStreamCreate)(&mut raw, CU_STREAM_NON_BLOCKING) },
            "cuStreamCreate",
            Some(ctx.device().ordinal()),
        )?;
        Ok(Stream {
            ctx: ctx.clone(),
            raw,
            owned: true,
        })
    }

    /// A caller's stream, used but never destroyed here.
    ///
    /// # Safety
    ///
    /// `raw` must be a stream of `ctx` (or null, the legacy default stream) that outlives
    /// the returned value.
    pub unsafe fn from_raw(ctx: &Arc<Context>, raw: CUstream) -> Stream {
        Stream {
            ctx: ctx.clone(),
            raw,
            owned: false,
        }
    }

    pub fn raw(&self) -> CUstream {
        self.raw
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn ordinal(&self) -> Option<usize> {
        Some(self.ctx.device().ordinal())
    }

    /// Waits until everything enqueued so far has run.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        let d = driver()?;
        check(
            // SAFETY: a live stream of the current context.
            unsafe { (d.cuStreamSynchronize)(self.raw) },
            "cuStreamSynchronize",
            self.ordinal(),
        )
    }

    /// Whether everything enqueued so far has run (never blocks).
    pub fn is_done(&self) -> Result<bool> {
        self.ctx.bind()?;
        let d = driver()?;
        // SAFETY: a live stream of the current context.
        let r = unsafe { (d.cuStreamQuery)(self.raw) };
        if r == CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check(r, "cuStreamQuery", self.ordinal())?;
        Ok(true)
    }

    /// Whether the stream is being captured into a graph (an invalidated capture counts:
    /// it is still open). An error where the handle is no longer a stream.
    pub fn is_capturing(&self) -> Result<bool> {
        self.ctx.bind()?;
        let d = driver()?;
        let is_capturing = d.cuStreamIsCapturing().map_err(CudaError::from)?;
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        check(
            // SAFETY: `status` is a valid out-pointer; the stream is the caller's.
            unsafe { is_capturing(self.raw, &mut status) },
            "cuStreamIsCapturing",
            self.ordinal(),
        )?;
        Ok(status != CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.ctx.bind()?;
        let d = driver()?;
        check(
            // SAFETY: a live stream and a live event; flags 0.
            unsafe { (d.cuStreamWaitEvent)(self.raw, event.raw(), 0) },
            "cuStreamWaitEvent",
            self.ordinal(),
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let Ok(d) = driver() else { return };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: created in `new`, destroyed once here.
        let r = unsafe { (d.cuStreamDestroy)(self.raw) };
        if let Err(e) = check(r, "cuStreamDestroy", self.ordinal()) {
            log::warn!("weft-cuda: {e}");
        }
    }
}
