//! Events: points in a stream, for ordering and timing.

use std::sync::Arc;

use weft_sys::cuda::types::{CU_EVENT_DISABLE_TIMING, CUevent, CUresult};

use crate::context::Context;
use crate::device::driver;
use crate::error::{Result, check};
use crate::stream::Stream;

/// An event; `Drop` destroys it.
#[derive(Debug)]
pub struct Event {
    ctx: Arc<Context>,
    raw: CUevent,
}

// SAFETY: a CUevent is a driver handle usable from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A new event; `timing` false makes it cheaper (no timestamps).
    pub fn new(ctx: &Arc<Context>, timing: bool) -> Result<Event> {
        ctx.bind()?;
        let d = driver()?;
        let mut raw: CUevent = std::ptr::null_mut();
        let flags = if timing { 0 } else { CU_EVENT_DISABLE_TIMING };
        check(
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            unsafe { (d.cuEventCreate)(&mut raw, flags) },
            "cuEventCreate",
            Some(ctx.device().ordinal()),
        )?;
        Ok(Event {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn raw(&self) -> CUevent {
        self.raw
    }

    fn ordinal(&self) -> Option<usize> {
        Some(self.ctx.device().ordinal())
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.ctx.bind()?;
        let d = driver()?;
        check(
            // SAFETY: a live event and a live stream.
            unsafe { (d.cuEventRecord)(self.raw, stream.raw()) },
            "cuEventRecord",
            self.ordinal(),
        )
    }

    /// Waits for the recorded point.
    pub fn synchronize(&self) -> Result<()> {
        let d = driver()?;
        check(
            // SAFETY: a live event.
            unsafe { (d.cuEventSynchronize)(self.raw) },
            "cuEventSynchronize",
            self.ordinal(),
        )
    }

    /// Whether the recorded point was reached (never blocks).
    pub fn is_done(&self) -> Result<bool> {
        let d = driver()?;
        // SAFETY: a live event.
        let r = unsafe { (d.cuEventQuery)(self.raw) };
        if r == CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check(r, "cuEventQuery", self.ordinal())?;
        Ok(true)
    }

    /// Milliseconds between two recorded timing events (both reached).
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        let d = driver()?;
        let mut ms = 0f32;
        check(
            // SAFETY: `ms` is a valid out-pointer; both events are live.
            unsafe { (d.cuEventElapsedTime)(&mut ms, start.raw, end.raw) },
            "cuEventElapsedTime",
            start.ordinal(),
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        // SAFETY: created in `new`, destroyed once here.
        let r = unsafe { (d.cuEventDestroy)(self.raw) };
        if let Err(e) = check(r, "cuEventDestroy", self.ordinal()) {
            log::warn!("weft-cuda: {e}");
        }
    }
}
