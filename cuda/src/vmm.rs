//! Device memory through CUDA's virtual memory management (`cuMemCreate` and friends),
//! exportable as a POSIX file descriptor: the modern way to share device memory between
//! processes (the descriptor travels over a Unix socket with SCM_RIGHTS), where CUDA IPC
//! handles are the fallback.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use weft_sys::cuda::types::{
    CUdevice_attribute, CUdeviceptr, CUmemAccess_flags, CUmemAccessDesc,
    CUmemAllocationGranularity_flags, CUmemAllocationHandleType, CUmemAllocationProp,
    CUmemAllocationPropFlags, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation,
    CUmemLocationType,
};

use crate::context::Context;
use crate::device::{Device, driver};
use crate::error::{Result, check};

/// Whether `device` supports VMM allocations exportable as file descriptors (and the
/// driver has the calls).
pub fn vmm_supported(device: &Device) -> Result<bool> {
    let d = driver()?;
    let calls = d.cuMemCreate().is_ok()
        && d.cuMemMap().is_ok()
        && d.cuMemExportToShareableHandle().is_ok()
        && d.cuMemImportFromShareableHandle().is_ok();
    Ok(calls
        && device
            .flag(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)?
        && device.flag(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        )?)
}

/// The allocation granularity of `device` for [`prop`]'s allocations.
fn granularity(device: &Device) -> Result<usize> {
    allocation_granularity(device, false).map(|g| g as usize)
}

/// The granularity of [`ShareableBuffer`] allocations on `device`: the recommended one
/// (what NCCL rounds NVLS memory to) or the minimum.
pub fn allocation_granularity(device: &Device, recommended: bool) -> Result<u64> {
    let d = driver()?;
    let get = d.cuMemGetAllocationGranularity()?;
    let p = prop(device);
    let flag = if recommended {
        CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    } else {
        CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
    };
    let mut gran = 0usize;
    // SAFETY: `gran` is a valid out-pointer; `p` a valid property struct.
    let r = unsafe { get(&mut gran, &p, flag) };
    check(r, "cuMemGetAllocationGranularity", Some(device.ordinal()))?;
    Ok(gran.max(1) as u64)
}

fn prop(device: &Device) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device.raw(),
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: CUmemAllocationPropFlags::default(),
    }
}

/// A VMM allocation mapped into this process; `Drop` unmaps it, frees the address range
/// and releases the allocation.
#[derive(Debug)]
pub struct ShareableBuffer {
    ctx: Arc<Context>,
    handle: CUmemGenericAllocationHandle,
    ptr: CUdeviceptr,
    len: usize,
    mapped: bool,
}

// SAFETY: handles and addresses only; the driver is thread-safe.
unsafe impl Send for ShareableBuffer {}
// SAFETY: as above.
unsafe impl Sync for ShareableBuffer {}

impl ShareableBuffer {
    /// At least `bytes` (rounded up to the allocation granularity) on `ctx`'s device,
    /// readable and writable by it.
    pub fn alloc(ctx: &Arc<Context>, bytes: usize) -> Result<ShareableBuffer> {
        ctx.bind()?;
        let d = driver()?;
        let dev = ctx.device();
        let ordinal = Some(dev.ordinal());
        let p = prop(&dev);
        let gran = granularity(&dev)?;
        let len = bytes.max(1).next_multiple_of(gran);
        let mut handle: CUmemGenericAllocationHandle = 0;
        let create = d.cuMemCreate()?;
        check(
            // SAFETY: `handle` is a valid out-pointer; `len` is a multiple of the granularity.
            unsafe { create(&mut handle, len, &p, 0) },
            "cuMemCreate",
            ordinal,
        )?;
        let mut buf = ShareableBuffer {
            ctx: ctx.clone(),
            handle,
            ptr: 0,
            len,
            mapped: false,
        };
        buf.map(gran)?;
        buf.grant_access(&dev)?;
        Ok(buf)
    }

    /// Reserves an address range and maps the allocation there.
    fn map(&mut self, align: usize) -> Result<()> {
        let d = driver()?;
        let ordinal = Some(self.ctx.device().ordinal());
        let reserve = d.cuMemAddressReserve()?;
        check(
            // SAFETY: `ptr` is a valid out-pointer; no fixed address is asked for.
            unsafe { reserve(&mut self.ptr, self.len, align, 0, 0) },
            "cuMemAddressReserve",
            ordinal,
        )?;
        let map = d.cuMemMap()?;
        check(
            // SAFETY: the range was just reserved for `len` bytes; the handle covers them.
            unsafe { map(self.ptr, self.len, 0, self.handle, 0) },
            "cuMemMap",
            ordinal,
        )?;
        self.mapped = true;
        Ok(())
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The physical allocation (what `cuMulticastBindMem` binds).
    pub(crate) fn handle(&self) -> CUmemGenericAllocationHandle {
        self.handle
    }

    /// The device whose context mapped it.
    pub fn device(&self) -> Device {
        self.ctx.device()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lets `device` read and write the mapping.
    pub fn grant_access(&self, device: &Device) -> Result<()> {
        let d = driver()?;
        let desc = CUmemAccessDesc {
            location: CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: device.raw(),
            },
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let set = d.cuMemSetAccess()?;
        check(
            // SAFETY: the range is mapped; one descriptor.
            unsafe { set(self.ptr, self.len, &desc, 1) },
            "cuMemSetAccess",
            Some(device.ordinal()),
        )
    }

    /// Sets every byte to `byte`; on return the device holds it (NVLS counters must read
    /// 0 on every rank before any peer's first post reaches them).
    pub fn fill(&self, byte: u8) -> Result<()> {
        let d = driver()?;
        // On the context's own stream, never behind the legacy default stream
        // (`Context::copy_and_wait`).
        self.ctx
            .copy_and_wait("cuMemsetD8Async (VMM buffer)", |stream| {
                // SAFETY: the mapping holds `len` bytes, readable and writable by this device.
                unsafe { (d.cuMemsetD8Async)(self.ptr, byte, self.len, stream) }
            })
    }

    /// A file descriptor for the allocation, to pass to another process.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        export_posix_fd(&self.ctx, self.handle, "cuMemExportToShareableHandle")
    }

    /// Maps another process's allocation (its [`ShareableBuffer::export_fd`]) of `bytes`
    /// into `ctx`, readable and writable by `ctx`'s device.
    pub fn import(ctx: &Arc<Context>, fd: BorrowedFd<'_>, bytes: usize) -> Result<ShareableBuffer> {
        ctx.bind()?;
        let d = driver()?;
        let dev = ctx.device();
        let import = d.cuMemImportFromShareableHandle()?;
        let mut handle: CUmemGenericAllocationHandle = 0;
        check(
            // SAFETY: for a POSIX descriptor the handle argument is the fd cast to a pointer.
            unsafe {
                import(
                    &mut handle,
                    fd.as_raw_fd() as usize as *mut core::ffi::c_void,
                    CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                )
            },
            "cuMemImportFromShareableHandle",
            Some(dev.ordinal()),
        )?;
        let gran = granularity(&dev)?;
        let mut buf = ShareableBuffer {
            ctx: ctx.clone(),
            handle,
            ptr: 0,
            len: bytes.max(1).next_multiple_of(gran),
            mapped: false,
        };
        buf.map(gran)?;
        buf.grant_access(&dev)?;
        Ok(buf)
    }
}

impl Drop for ShareableBuffer {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        let ordinal = Some(self.ctx.device().ordinal());
        let report = |r, call| {
            if let Err(e) = check(r, call, ordinal) {
                log::warn!("weft-cuda: {e}");
            }
        };
        if self.mapped {
            if let Ok(unmap) = d.cuMemUnmap() {
                // SAFETY: mapped in `map`, unmapped once here.
                report(unsafe { unmap(self.ptr, self.len) }, "cuMemUnmap");
            }
        }
        if self.ptr != 0 {
            if let Ok(free) = d.cuMemAddressFree() {
                // SAFETY: reserved in `map`, freed once here.
                report(unsafe { free(self.ptr, self.len) }, "cuMemAddressFree");
            }
        }
        if let Ok(release) = d.cuMemRelease() {
            // SAFETY: created or imported once, released once here.
            report(unsafe { release(self.handle) }, "cuMemRelease");
        }
    }
}

/// A POSIX file descriptor for a `cuMemCreate` allocation or a multicast object (`handle`),
/// owned by the caller; `call` names the export in errors.
pub(crate) fn export_posix_fd(
    ctx: &Context,
    handle: CUmemGenericAllocationHandle,
    call: &'static str,
) -> Result<OwnedFd> {
    let d = driver()?;
    let export = d.cuMemExportToShareableHandle()?;
    let mut fd: libc::c_int = -1;
    check(
        // SAFETY: for a POSIX descriptor the out-pointer is an int.
        unsafe {
            export(
                (&mut fd as *mut libc::c_int).cast(),
                handle,
                CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        },
        call,
        Some(ctx.device().ordinal()),
    )?;
    // SAFETY: the driver just created this descriptor for us to own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
