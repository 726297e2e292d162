//! Modules (PTX or cubin loaded into a context) and kernel launches.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use weft_sys::cuda::types::{CUfunction, CUfunction_attribute, CUmodule};

use crate::context::Context;
use crate::device::driver;
use crate::error::{CudaError, Result, check};
use crate::stream::Stream;

/// A loaded module; `Drop` unloads it (after every [`Function`] of it is gone).
#[derive(Debug)]
pub struct Module {
    ctx: Arc<Context>,
    raw: CUmodule,
}

// SAFETY: a CUmodule is a driver handle usable from any thread.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Module {
    /// Loads PTX (NUL-terminated or not) or a cubin into `ctx`.
    pub fn load(ctx: &Arc<Context>, image: &[u8]) -> Result<Arc<Module>> {
        let mut owned;
        let image = if image.starts_with(b"\x7fELF") || image.last() == Some(&0) {
            image
        } else {
            owned = image.to_vec();
            owned.push(0);
            owned.as_slice()
        };
        ctx.bind()?;
        let d = driver()?;
        let mut raw: CUmodule = std::ptr::null_mut();
        check(
            // SAFETY: `raw` is a valid out-pointer; the image is a NUL-terminated PTX text or
            // an ELF cubin, alive for the call.
            unsafe { (d.cuModuleLoadData)(&mut raw, image.as_ptr().cast()) },
            "cuModuleLoadData",
            Some(ctx.device().ordinal()),
        )?;
        Ok(Arc::new(Module {
            ctx: ctx.clone(),
            raw,
        }))
    }

    /// The kernel `name` (an `extern "C"` entry point).
    pub fn function(self: &Arc<Module>, name: &str) -> Result<Function> {
        let c_name = CString::new(name)
            .map_err(|_| CudaError::InvalidArgument(format!("kernel name {name:?} has a NUL")))?;
        self.ctx.bind()?;
        let d = driver()?;
        let mut raw: CUfunction = std::ptr::null_mut();
        check(
            // SAFETY: `raw` is a valid out-pointer; the module is loaded; the name is a C string.
            unsafe { (d.cuModuleGetFunction)(&mut raw, self.raw, c_name.as_ptr()) },
            "cuModuleGetFunction",
            Some(self.ctx.device().ordinal()),
        )
        .map_err(|e| match e {
            CudaError::Call {
                code, text, device, ..
            } => CudaError::Call {
                call: "cuModuleGetFunction",
                code,
                text: format!("{text} (kernel {name})"),
                device,
                hint: None,
            },
            other => other,
        })?;
        let f = Function {
            module: self.clone(),
            raw,
            name: name.to_string(),
        };
        // Under lazy loading (the default since CUDA 12.2) a kernel is loaded at its first
        // launch, and that load can wait for the device to go idle: a kernel that spins on
        // another rank's concurrently running kernel would then wait for itself (NCCL
        // forces the load at init for the same reason). Reading an attribute loads it now.
        f.max_threads_per_block()?;
        Ok(f)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: loaded in `load`, unloaded once here.
        let r = unsafe { (d.cuModuleUnload)(self.raw) };
        if let Err(e) = check(r, "cuModuleUnload", Some(self.ctx.device().ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}

/// A kernel of a loaded module.
#[derive(Debug, Clone)]
pub struct Function {
    module: Arc<Module>,
    raw: CUfunction,
    name: String,
}

// SAFETY: a CUfunction is a driver handle usable from any thread.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most threads a block of this kernel may have (its registers decide).
    pub fn max_threads_per_block(&self) -> Result<u32> {
        let d = driver()?;
        let get = d.cuFuncGetAttribute().map_err(CudaError::from)?;
        let mut v: core::ffi::c_int = 0;
        // SAFETY: `v` is a valid out-pointer; a live function.
        let r = unsafe {
            get(
                &mut v,
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                self.raw,
            )
        };
        check(
            r,
            "cuFuncGetAttribute",
            Some(self.module.ctx.device().ordinal()),
        )?;
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// Allows up to `bytes` of dynamic shared memory per block.
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> Result<()> {
        let d = driver()?;
        check(
            // SAFETY: a live function; the attribute takes an int.
            unsafe {
                (d.cuFuncSetAttribute)(
                    self.raw,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    i32::try_from(bytes).unwrap_or(i32::MAX),
                )
            },
            "cuFuncSetAttribute",
            Some(self.module.ctx.device().ordinal()),
        )
    }

    /// Enqueues the kernel on `stream`.
    ///
    /// # Safety
    ///
    /// `args` must match the kernel's parameters in number, order and type: each element
    /// points to one argument's value, alive for the call. Whatever memory the kernel
    /// touches must stay valid until the stream reaches it.
    pub unsafe fn launch(
        &self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        stream: &Stream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        stream.context().bind()?;
        let d = driver()?;
        check(
            // SAFETY: the caller's promise on `args`; a live function and stream.
            unsafe {
                (d.cuLaunchKernel)(
                    self.raw,
                    grid.0,
                    grid.1,
                    grid.2,
                    block.0,
                    block.1,
                    block.2,
                    shared_bytes,
                    stream.raw(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
            Some(stream.context().device().ordinal()),
        )
        .map_err(|e| match e {
            CudaError::Call {
                code,
                text,
                device,
                hint,
                ..
            } => CudaError::Call {
                call: "cuLaunchKernel",
                code,
                text: format!(
                    "{text} (kernel {}, grid {grid:?}, block {block:?})",
                    self.name
                ),
                device,
                hint,
            },
            other => other,
        })
    }
}
