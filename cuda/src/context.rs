//! A device's primary context: the one the CUDA runtime, PyTorch and NCCL share.

use std::sync::Arc;

use weft_sys::cuda::types::{CUcontext, CUresult};

use crate::device::{Device, driver};
use crate::error::{Result, check};

/// The retained primary context of a device; `Drop` releases it.
#[derive(Debug)]
pub struct Context {
    device: Device,
    raw: CUcontext,
}

// SAFETY: a CUcontext is a handle the driver lets any thread use (cuCtxSetCurrent binds it
// to the calling thread; nothing here keeps thread-local state).
unsafe impl Send for Context {}
// SAFETY: as above; every method only passes the handle to the driver.
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
        Ok(Arc::new(Context { device, raw }))
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
}

impl Drop for Context {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        // SAFETY: retained in `primary`, released once here.
        let r = unsafe { (d.cuDevicePrimaryCtxRelease)(self.device.raw()) };
        if let Err(e) = check(r, "cuDevicePrimaryCtxRelease", Some(self.device.ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}
