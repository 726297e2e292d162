//! Device memory, host memory the GPU can address, and CUDA IPC between processes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use weft_sys::cuda::types::{
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE,
    CU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_PORTABLE, CUdeviceptr, CUipcMemHandle,
};

use crate::context::Context;
use crate::device::driver;
use crate::error::{CudaError, Result, check};
use crate::stream::Stream;

/// Device memory from `cuMemAlloc`; `Drop` frees it.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// `bytes` of device memory (at least one byte is allocated, so the address is real).
    pub fn alloc(ctx: &Arc<Context>, bytes: usize) -> Result<DeviceBuffer> {
        ctx.bind()?;
        let d = driver()?;
        let mut ptr: CUdeviceptr = 0;
        check(
            // SAFETY: `ptr` is a valid out-pointer; the context is current.
            unsafe { (d.cuMemAlloc)(&mut ptr, bytes.max(1)) },
            "cuMemAlloc",
            Some(ctx.device().ordinal()),
        )?;
        Ok(DeviceBuffer {
            ctx: ctx.clone(),
            ptr,
            len: bytes,
        })
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn ordinal(&self) -> Option<usize> {
        Some(self.ctx.device().ordinal())
    }

    fn fits(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes > self.len {
            return Err(CudaError::InvalidArgument(format!(
                "{what} of {bytes} bytes into a device buffer of {}",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `src` to the start of the buffer; on return the device holds it. The copy
    /// runs on the context's own stream (`Context::copy_and_wait`): it waits for no
    /// kernel, and no kernel waits for it.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        self.fits(src.len(), "a copy")?;
        if src.is_empty() {
            return Ok(());
        }
        let d = driver()?;
        self.ctx.copy_and_wait("cuMemcpyHtoDAsync", |stream| {
            // SAFETY: the buffer holds at least src.len() bytes (checked); src is readable
            // until the copy has ended (`copy_and_wait` waits for it).
            unsafe { (d.cuMemcpyHtoDAsync)(self.ptr, src.as_ptr().cast(), src.len(), stream) }
        })
    }

    /// Copies the start of the buffer into `dst`; on return `dst` holds it. It does not
    /// wait for kernels on other streams: synchronize the stream that wrote the buffer
    /// first.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        self.fits(dst.len(), "a copy")?;
        if dst.is_empty() {
            return Ok(());
        }
        let d = driver()?;
        self.ctx.copy_and_wait("cuMemcpyDtoHAsync", |stream| {
            // SAFETY: the buffer holds at least dst.len() bytes (checked); dst is writable
            // until the copy has ended (`copy_and_wait` waits for it).
            unsafe { (d.cuMemcpyDtoHAsync)(dst.as_mut_ptr().cast(), self.ptr, dst.len(), stream) }
        })
    }

    /// Sets every byte to `byte`; on return the device holds it (on the context's own
    /// stream, as `copy_from_host`).
    pub fn fill(&self, byte: u8) -> Result<()> {
        let d = driver()?;
        self.ctx.copy_and_wait("cuMemsetD8Async", |stream| {
            // SAFETY: the buffer holds `len` bytes.
            unsafe { (d.cuMemsetD8Async)(self.ptr, byte, self.len, stream) }
        })
    }

    /// A handle another process opens with [`IpcMapping::open`].
    pub fn ipc_handle(&self) -> Result<IpcMemHandle> {
        self.ctx.bind()?;
        let d = driver()?;
        let mut h = CUipcMemHandle {
            reserved: [0; weft_sys::cuda::types::CU_IPC_HANDLE_SIZE],
        };
        check(
            // SAFETY: `h` is a valid out-pointer; `ptr` is the base of a cuMemAlloc allocation.
            unsafe { (d.cuIpcGetMemHandle)(&mut h, self.ptr) },
            "cuIpcGetMemHandle",
            self.ordinal(),
        )?;
        Ok(IpcMemHandle(h.reserved.map(|c| c as u8)))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: allocated in `alloc`, freed once here.
        let r = unsafe { (d.cuMemFree)(self.ptr) };
        if let Err(e) = check(r, "cuMemFree", self.ordinal()) {
            log::warn!("weft-cuda: {e}");
        }
    }
}

/// Enqueues a copy of `bytes` from `src` to `dst` (device or mapped host addresses) on
/// `stream`.
///
/// # Safety
///
/// Both ranges must be valid for `bytes` until the stream reaches the copy.
pub unsafe fn copy_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    stream.context().bind()?;
    let d = driver()?;
    check(
        // SAFETY: the caller's promise; the stream is live.
        unsafe { (d.cuMemcpyAsync)(dst, src, bytes, stream.raw()) },
        "cuMemcpyAsync",
        Some(stream.context().device().ordinal()),
    )
}

/// The 64 bytes that name a device allocation to another process.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IpcMemHandle(pub [u8; 64]);

impl std::fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex: String = self.0[..8].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "IpcMemHandle({hex}..)")
    }
}

/// Another process's device allocation, mapped here; `Drop` unmaps it.
#[derive(Debug)]
pub struct IpcMapping {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
}

// SAFETY: only an address and a context handle.
unsafe impl Send for IpcMapping {}
// SAFETY: as above.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Maps the allocation behind `handle` into `ctx` (peer access enabled on demand).
    pub fn open(ctx: &Arc<Context>, handle: &IpcMemHandle) -> Result<IpcMapping> {
        ctx.bind()?;
        let d = driver()?;
        let h = CUipcMemHandle {
            reserved: handle.0.map(|b| b as core::ffi::c_char),
        };
        let mut ptr: CUdeviceptr = 0;
        check(
            // SAFETY: `ptr` is a valid out-pointer; the handle is passed by value.
            unsafe { (d.cuIpcOpenMemHandle)(&mut ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) },
            "cuIpcOpenMemHandle",
            Some(ctx.device().ordinal()),
        )?;
        Ok(IpcMapping {
            ctx: ctx.clone(),
            ptr,
        })
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: opened in `open`, closed once here.
        let r = unsafe { (d.cuIpcCloseMemHandle)(self.ptr) };
        if let Err(e) = check(r, "cuIpcCloseMemHandle", Some(self.ctx.device().ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}

/// Pinned host memory mapped into the GPU's address space (`cuMemHostAlloc` with
/// DEVICEMAP | PORTABLE), zeroed: flags and records that kernels and the host share.
/// `Drop` frees it.
#[derive(Debug)]
pub struct HostMapped {
    ctx: Arc<Context>,
    host: *mut u8,
    device: CUdeviceptr,
    len: usize,
}

// SAFETY: the memory is shared with the GPU by design; every access here is atomic.
unsafe impl Send for HostMapped {}
// SAFETY: as above.
unsafe impl Sync for HostMapped {}

impl HostMapped {
    /// `bytes` (rounded up to 8) of zeroed, device-mapped pinned host memory.
    pub fn alloc(ctx: &Arc<Context>, bytes: usize) -> Result<HostMapped> {
        let len = bytes.max(8).next_multiple_of(8);
        ctx.bind()?;
        let d = driver()?;
        let mut host: *mut core::ffi::c_void = std::ptr::null_mut();
        let ordinal = Some(ctx.device().ordinal());
        check(
            // SAFETY: `host` is a valid out-pointer; the context is current.
            unsafe {
                (d.cuMemHostAlloc)(
                    &mut host,
                    len,
                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE,
                )
            },
            "cuMemHostAlloc",
            ordinal,
        )?;
        // Owned from here on, so an error below still frees it.
        let mut mapped = HostMapped {
            ctx: ctx.clone(),
            host: host.cast(),
            device: 0,
            len,
        };
        // SAFETY: `host` points to `len` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(mapped.host, 0, len) };
        let mut device: CUdeviceptr = 0;
        check(
            // SAFETY: `device` is a valid out-pointer; `host` was allocated with DEVICEMAP.
            unsafe { (d.cuMemHostGetDevicePointer)(&mut device, host, 0) },
            "cuMemHostGetDevicePointer",
            ordinal,
        )?;
        mapped.device = device;
        Ok(mapped)
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    pub fn device_ptr(&self) -> CUdeviceptr {
        self.device
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn word<T>(&self, index: usize) -> Option<*mut T> {
        let size = std::mem::size_of::<T>();
        let end = index.checked_add(1)?.checked_mul(size)?;
        (end <= self.len).then(|| {
            // SAFETY: index * size + size <= len: the word lies inside the allocation,
            // which is 8-byte aligned (page aligned, in fact), and so is the word.
            unsafe { self.host.add(index * size).cast::<T>() }
        })
    }

    /// The `index`-th `u32` (atomic load), or `None` past the end.
    pub fn read_u32(&self, index: usize) -> Option<u32> {
        // SAFETY: in bounds and aligned (`word`); the GPU writes it concurrently, hence atomic.
        self.word::<u32>(index)
            .map(|p| unsafe { AtomicU32::from_ptr(p) }.load(Ordering::SeqCst))
    }

    /// Stores `value` as the `index`-th `u32`; false past the end.
    pub fn write_u32(&self, index: usize, value: u32) -> bool {
        self.word::<u32>(index)
            // SAFETY: in bounds and aligned (`word`).
            .map(|p| unsafe { AtomicU32::from_ptr(p) }.store(value, Ordering::SeqCst))
            .is_some()
    }

    /// The `index`-th `u64` (atomic load), or `None` past the end.
    pub fn read_u64(&self, index: usize) -> Option<u64> {
        // SAFETY: in bounds and aligned (`word`).
        self.word::<u64>(index)
            .map(|p| unsafe { AtomicU64::from_ptr(p) }.load(Ordering::SeqCst))
    }

    /// Stores `value` as the `index`-th `u64`; false past the end.
    pub fn write_u64(&self, index: usize, value: u64) -> bool {
        self.word::<u64>(index)
            // SAFETY: in bounds and aligned (`word`).
            .map(|p| unsafe { AtomicU64::from_ptr(p) }.store(value, Ordering::SeqCst))
            .is_some()
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: allocated in `alloc`, freed once here.
        let r = unsafe { (d.cuMemFreeHost)(self.host.cast()) };
        if let Err(e) = check(r, "cuMemFreeHost", Some(self.ctx.device().ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}

/// Host memory allocated elsewhere (a shared-memory segment, say), pinned and mapped into
/// the device's address space (`cuMemHostRegister` with DEVICEMAP | PORTABLE); `Drop`
/// unregisters it. The memory itself stays its owner's.
#[derive(Debug)]
pub struct HostRegistration {
    ctx: Arc<Context>,
    host: *mut u8,
    device: CUdeviceptr,
}

// SAFETY: an address pair; the registration is a driver-side record usable from any thread.
unsafe impl Send for HostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Registers `len` bytes at `host`.
    ///
    /// # Safety
    ///
    /// `host` must be page-aligned, valid for reads and writes of `len` bytes, and stay
    /// mapped until the returned value is dropped.
    pub unsafe fn register(
        ctx: &Arc<Context>,
        host: *mut u8,
        len: usize,
    ) -> Result<HostRegistration> {
        ctx.bind()?;
        let d = driver()?;
        let ordinal = Some(ctx.device().ordinal());
        let register = d.cuMemHostRegister().map_err(CudaError::from)?;
        // SAFETY: the caller's promise on the range.
        let r = unsafe {
            register(
                host.cast(),
                len,
                CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE,
            )
        };
        check(r, "cuMemHostRegister", ordinal)?;
        // Owned from here on, so an error below still unregisters.
        let mut reg = HostRegistration {
            ctx: ctx.clone(),
            host,
            device: 0,
        };
        let mut device: CUdeviceptr = 0;
        // SAFETY: `device` is a valid out-pointer; the range was registered with DEVICEMAP.
        let r = unsafe { (d.cuMemHostGetDevicePointer)(&mut device, host.cast(), 0) };
        check(r, "cuMemHostGetDevicePointer", ordinal)?;
        reg.device = device;
        Ok(reg)
    }

    /// The range's address for kernels.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.device
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        let Ok(unregister) = d.cuMemHostUnregister() else {
            return;
        };
        if self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: registered in `register`, unregistered once here.
        let r = unsafe { unregister(self.host.cast()) };
        if let Err(e) = check(r, "cuMemHostUnregister", Some(self.ctx.device().ordinal())) {
            log::warn!("weft-cuda: {e}");
        }
    }
}
