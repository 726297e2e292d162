//! NVLink SHARP (NVLS) multicast objects: `cuMulticastCreate`, `AddDevice`, `BindMem`, a
//! multicast mapping, and the object's handle shared between processes as a POSIX file
//! descriptor; and the unicast stand-in the same algorithms run over where multicast must
//! not be used.
//!
//! Creating a multicast object can take a shared host's GPUs out of service (DESIGN.md,
//! "GPU machines"), so nothing here touches one without an explicit opt-in: [`OptIn`] is
//! obtained only from the environment, only when `WEFT_NVLS=1` is set and
//! `NCCL_NVLS_ENABLE=0` is not, and every call that creates, imports, binds or maps a
//! multicast object takes one. No weft test, script or default sets `WEFT_NVLS=1`.
//!
//! The setup, per rank, in NCCL's order (`src/transport/nvls.cc`): one rank creates the
//! object ([`MulticastObject::create`]) and exports it ([`MulticastObject::export_fd`]);
//! the others import it ([`MulticastObject::import`]); each adds its own device
//! ([`MulticastObject::add_device`]); after a barrier (every device must be added before any
//! memory is bound) each binds its own allocation at offset 0 ([`MulticastObject::bind`])
//! and maps the object ([`MulticastObject::map`]). `Drop` unbinds and releases.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use weft_sys::cuda::types::{
    CUdevice_attribute, CUdeviceptr, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationHandleType,
    CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType, CUmulticastGranularity_flags,
    CUmulticastObjectProp,
};

use crate::context::Context;
use crate::device::{Device, driver};
use crate::error::{CudaError, Result, check};
use crate::vmm::{ShareableBuffer, export_posix_fd};

/// The variable that opts in to NVLink multicast.
pub const OPT_IN_VAR: &str = "WEFT_NVLS";
/// NCCL's switch for NVLS; `0` turns weft's multicast off too, whatever `WEFT_NVLS` says.
pub const NCCL_VAR: &str = "NCCL_NVLS_ENABLE";

/// Proof that this process opted in to NVLink multicast. Obtained only through
/// [`OptIn::from_env`].
#[derive(Debug, Clone, Copy)]
pub struct OptIn {
    _private: (),
}

impl OptIn {
    /// Whether the environment allows multicast: `WEFT_NVLS=1` set, `NCCL_NVLS_ENABLE=0`
    /// not. The error says which and what to set. Read from the process environment itself
    /// (through weft-config's table), never from settings a caller built: no test can
    /// opt in by handing over a settings struct.
    pub fn from_env() -> Result<OptIn> {
        let gpu = weft_config::Settings::from_lookup_or_defaults(&weft_config::lookup::process).gpu;
        decide(gpu.nvls.as_deref(), gpu.nvls_enable)?;
        Ok(OptIn { _private: () })
    }
}

/// The opt-in rule on `WEFT_NVLS`'s value (`None`: unset) and whether `NCCL_NVLS_ENABLE`
/// allows NVLS (weft-config: it is not 0). Pure, for tests and for callers that want to say
/// in advance whether the NVLS path may start.
pub fn decide(weft_nvls: Option<&str>, nvls_enable: bool) -> Result<()> {
    if !nvls_enable {
        return Err(CudaError::Refused(format!(
            "NVLink multicast (NVLS) is off: {NCCL_VAR}=0 is set, and weft honours it whatever \
             {OPT_IN_VAR} says; unset {NCCL_VAR} to allow it, or use the NVLS unicast form \
             (WEFT_ALGO=nvls without {OPT_IN_VAR}=1) or another algorithm"
        )));
    }
    match weft_nvls.map(str::trim) {
        Some("1") => Ok(()),
        other => Err(CudaError::Refused(format!(
            "NVLink multicast (NVLS) needs an explicit opt-in: {OPT_IN_VAR} is {}, set \
             {OPT_IN_VAR}=1 to allow cuMulticastCreate (never on shared GPU machines: it can \
             take their GPUs out of service); without it the NVLS algorithms run in their \
             unicast form over peer-mapped buffers",
            match other {
                None => "unset".to_string(),
                Some(v) => format!("'{v}'"),
            }
        ))),
    }
}

/// Whether `device` reports multicast support (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`)
/// and the driver has the calls. Reads an attribute only; creates nothing.
pub fn multicast_supported(device: &Device) -> Result<bool> {
    let d = driver()?;
    let calls = d.cuMulticastCreate().is_ok()
        && d.cuMulticastAddDevice().is_ok()
        && d.cuMulticastBindMem().is_ok()
        && d.cuMulticastUnbind().is_ok()
        && d.cuMulticastGetGranularity().is_ok();
    Ok(calls && device.flag(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED)?)
}

/// The properties of an object for `ndevices` devices and `size` bytes, exportable as a
/// POSIX file descriptor.
pub fn object_prop(ndevices: u32, size: usize) -> CUmulticastObjectProp {
    CUmulticastObjectProp {
        numDevices: ndevices,
        size,
        handleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as u64,
        flags: 0,
    }
}

/// The multicast granularity (`cuMulticastGetGranularity`) for an object of `ndevices`
/// devices and `size` bytes: the recommended one, or the minimum. Queries only.
pub fn granularity(device: &Device, ndevices: u32, size: usize, recommended: bool) -> Result<u64> {
    let d = driver()?;
    let get = d.cuMulticastGetGranularity()?;
    let p = object_prop(ndevices, size);
    let flag = if recommended {
        CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_RECOMMENDED
    } else {
        CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_MINIMUM
    };
    let mut gran = 0usize;
    // SAFETY: `gran` is a valid out-pointer, `p` a valid property struct.
    let r = unsafe { get(&mut gran, &p, flag) };
    check(r, "cuMulticastGetGranularity", Some(device.ordinal()))?;
    Ok(gran.max(1) as u64)
}

/// A multicast object this process created or imported. `Drop` unbinds what this process
/// bound and releases the handle.
#[derive(Debug)]
pub struct MulticastObject {
    ctx: Arc<Context>,
    handle: CUmemGenericAllocationHandle,
    size: usize,
    /// (device, offset, size) of every `bind`, unbound in `Drop`.
    bound: Vec<(Device, usize, usize)>,
}

// SAFETY: a handle and plain data; the driver is thread-safe.
unsafe impl Send for MulticastObject {}
// SAFETY: as above.
unsafe impl Sync for MulticastObject {}

impl MulticastObject {
    /// Creates an object for `ndevices` devices of `size` bytes (a multiple of the
    /// [`granularity`]), on `ctx`'s device.
    pub fn create(
        _opt_in: OptIn,
        ctx: &Arc<Context>,
        ndevices: u32,
        size: usize,
    ) -> Result<MulticastObject> {
        ctx.bind()?;
        let dev = ctx.device();
        if !multicast_supported(&dev)? {
            return Err(CudaError::InvalidArgument(format!(
                "GPU {} has no NVLink multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0, or \
                 the driver predates CUDA 12.1): NVLS needs NVSwitch-connected Hopper or newer; \
                 use WEFT_ALGO=ring, oneshot or twoshot",
                dev.ordinal()
            )));
        }
        let d = driver()?;
        let create = d.cuMulticastCreate()?;
        let p = object_prop(ndevices, size);
        let mut handle: CUmemGenericAllocationHandle = 0;
        check(
            // SAFETY: `handle` is a valid out-pointer, `p` a valid property struct.
            unsafe { create(&mut handle, &p) },
            "cuMulticastCreate",
            Some(dev.ordinal()),
        )?;
        Ok(MulticastObject {
            ctx: ctx.clone(),
            handle,
            size,
            bound: Vec::new(),
        })
    }

    /// Imports an object another process created (its [`MulticastObject::export_fd`]).
    pub fn import(
        _opt_in: OptIn,
        ctx: &Arc<Context>,
        fd: BorrowedFd<'_>,
        size: usize,
    ) -> Result<MulticastObject> {
        ctx.bind()?;
        let d = driver()?;
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
            "cuMemImportFromShareableHandle (multicast object)",
            Some(ctx.device().ordinal()),
        )?;
        Ok(MulticastObject {
            ctx: ctx.clone(),
            handle,
            size,
            bound: Vec::new(),
        })
    }

    /// A file descriptor for the object, to pass to the other ranks' processes (over a
    /// Unix socket with SCM_RIGHTS).
    pub fn export_fd(&self) -> Result<OwnedFd> {
        export_posix_fd(
            &self.ctx,
            self.handle,
            "cuMemExportToShareableHandle (multicast object)",
        )
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Adds `device` to the object. Every rank adds its own before any rank binds memory.
    pub fn add_device(&self, device: &Device) -> Result<()> {
        let d = driver()?;
        let add = d.cuMulticastAddDevice()?;
        check(
            // SAFETY: a live handle and a device the driver enumerated.
            unsafe { add(self.handle, device.raw()) },
            "cuMulticastAddDevice",
            Some(device.ordinal()),
        )
    }

    /// Binds `size` bytes of `memory` from `mem_offset` at `mc_offset` of the object, for
    /// `memory`'s device. Offsets and size must be multiples of the granularity.
    pub fn bind(
        &mut self,
        mc_offset: usize,
        memory: &ShareableBuffer,
        mem_offset: usize,
        size: usize,
    ) -> Result<()> {
        let fits = |off: usize, len: usize| off.checked_add(size).is_some_and(|end| end <= len);
        if !fits(mc_offset, self.size) || !fits(mem_offset, memory.len()) {
            return Err(CudaError::InvalidArgument(format!(
                "cuMulticastBindMem: {size} bytes at object offset {mc_offset} (object {} bytes) \
                 from memory offset {mem_offset} (memory {} bytes) do not fit",
                self.size,
                memory.len()
            )));
        }
        let dev = memory.device();
        let d = driver()?;
        let bind = d.cuMulticastBindMem()?;
        check(
            // SAFETY: live handles; the ranges were checked against both sizes above.
            unsafe { bind(self.handle, mc_offset, memory.handle(), mem_offset, size, 0) },
            "cuMulticastBindMem",
            Some(dev.ordinal()),
        )?;
        self.bound.push((dev, mc_offset, size));
        Ok(())
    }

    /// Maps the whole object into this process, readable and writable by `ctx`'s device:
    /// the multicast address the kernels' `multimem` instructions take.
    pub fn map(&self, granularity: u64) -> Result<MulticastMapping> {
        self.ctx.bind()?;
        let d = driver()?;
        let dev = self.ctx.device();
        let ordinal = Some(dev.ordinal());
        let mut m = MulticastMapping {
            ctx: self.ctx.clone(),
            ptr: 0,
            len: self.size,
            mapped: false,
        };
        let reserve = d.cuMemAddressReserve()?;
        check(
            // SAFETY: `ptr` is a valid out-pointer; no fixed address is asked for.
            unsafe { reserve(&mut m.ptr, m.len, granularity as usize, 0, 0) },
            "cuMemAddressReserve (multicast)",
            ordinal,
        )?;
        let map = d.cuMemMap()?;
        check(
            // SAFETY: the range was just reserved for `len` bytes; the object covers them.
            unsafe { map(m.ptr, m.len, 0, self.handle, 0) },
            "cuMemMap (multicast)",
            ordinal,
        )?;
        m.mapped = true;
        let desc = CUmemAccessDesc {
            location: CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: dev.raw(),
            },
            flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let set = d.cuMemSetAccess()?;
        check(
            // SAFETY: the range is mapped; one descriptor.
            unsafe { set(m.ptr, m.len, &desc, 1) },
            "cuMemSetAccess (multicast)",
            ordinal,
        )?;
        Ok(m)
    }
}

impl Drop for MulticastObject {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        let report = |r, call, dev: Option<usize>| {
            if let Err(e) = check(r, call, dev) {
                log::warn!("weft-cuda: {e}");
            }
        };
        if let Ok(unbind) = d.cuMulticastUnbind() {
            for (dev, off, size) in self.bound.drain(..) {
                // SAFETY: bound once in `bind`, unbound once here.
                let r = unsafe { unbind(self.handle, dev.raw(), off, size) };
                report(r, "cuMulticastUnbind", Some(dev.ordinal()));
            }
        }
        if let Ok(release) = d.cuMemRelease() {
            // SAFETY: created or imported once, released once here.
            let r = unsafe { release(self.handle) };
            report(
                r,
                "cuMemRelease (multicast)",
                Some(self.ctx.device().ordinal()),
            );
        }
    }
}

/// The multicast address range of an object in this process. Drop it before the object.
#[derive(Debug)]
pub struct MulticastMapping {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
    mapped: bool,
}

impl MulticastMapping {
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MulticastMapping {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        let ordinal = Some(self.ctx.device().ordinal());
        if self.mapped {
            if let Ok(unmap) = d.cuMemUnmap() {
                // SAFETY: mapped in `MulticastObject::map`, unmapped once here.
                if let Err(e) = check(unsafe { unmap(self.ptr, self.len) }, "cuMemUnmap", ordinal) {
                    log::warn!("weft-cuda: {e}");
                }
            }
        }
        if self.ptr != 0 {
            if let Ok(free) = d.cuMemAddressFree() {
                // SAFETY: reserved in `MulticastObject::map`, freed once here.
                let r = unsafe { free(self.ptr, self.len) };
                if let Err(e) = check(r, "cuMemAddressFree", ordinal) {
                    log::warn!("weft-cuda: {e}");
                }
            }
        }
    }
}

/// The unicast stand-in for a multicast object: every rank's NVLS memory mapped into this
/// process (its own allocation, and each peer's imported from the descriptor the peer
/// exported), so that a kernel can do by one load or store per peer what `multimem` does
/// by one instruction. Needs no opt-in: it is plain peer-to-peer access.
#[derive(Debug)]
pub struct UnicastGroup {
    rank: usize,
    /// Index r: rank r's memory as mapped here (`rank`'s is the allocation itself).
    windows: Vec<ShareableBuffer>,
}

impl UnicastGroup {
    /// The group from this rank's allocation and the peers' imported ones, in rank order
    /// (`windows[rank]` is `own`). All must have the same length.
    pub fn new(rank: usize, own: ShareableBuffer, peers: Vec<ShareableBuffer>) -> Result<Self> {
        let mut windows = peers;
        if rank > windows.len() {
            return Err(CudaError::InvalidArgument(format!(
                "NVLS unicast group: rank {rank} with only {} peers",
                windows.len()
            )));
        }
        windows.insert(rank, own);
        let len = windows.first().map_or(0, ShareableBuffer::len);
        if let Some((r, w)) = windows.iter().enumerate().find(|(_, w)| w.len() != len) {
            return Err(CudaError::InvalidArgument(format!(
                "NVLS unicast group: rank {r}'s memory is {} bytes, rank 0's {len}: every rank \
                 must allocate the same layout (core::nvls::Layout)",
                w.len()
            )));
        }
        Ok(UnicastGroup { rank, windows })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Every rank's memory as this process's device addresses it, in rank order.
    pub fn ptrs(&self) -> Vec<CUdeviceptr> {
        self.windows.iter().map(ShareableBuffer::ptr).collect()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn multicast_needs_weft_nvls_1() {
        for weft in [None, Some("0"), Some(""), Some("yes"), Some("true")] {
            let e = decide(weft, true).unwrap_err().to_string();
            assert!(e.contains("set WEFT_NVLS=1"), "{weft:?}: {e}");
            assert!(e.contains("unicast form"), "{weft:?}: {e}");
            assert!(matches!(decide(weft, true), Err(CudaError::Refused(_))));
        }
        assert!(
            decide(None, true)
                .unwrap_err()
                .to_string()
                .contains("WEFT_NVLS is unset")
        );
        assert!(
            decide(Some("yes"), true)
                .unwrap_err()
                .to_string()
                .contains("WEFT_NVLS is 'yes'")
        );
        assert!(decide(Some("1"), true).is_ok());
        assert!(decide(Some(" 1 "), true).is_ok());
    }

    #[test]
    fn nccl_nvls_enable_0_wins_over_the_opt_in() {
        for weft in [None, Some("1"), Some("0")] {
            let e = decide(weft, false).unwrap_err().to_string();
            assert!(e.contains("NCCL_NVLS_ENABLE=0 is set"), "{weft:?}: {e}");
            assert!(e.contains("unset NCCL_NVLS_ENABLE"), "{weft:?}: {e}");
        }
    }

    #[test]
    fn the_environment_of_tests_never_opts_in() {
        // No test or script sets WEFT_NVLS=1 (DESIGN.md): the gate read from this process's
        // environment must refuse. Should someone run the tests opted in, say so loudly
        // rather than pass: nothing here calls cuMulticastCreate either way.
        let opted_in = std::env::var(OPT_IN_VAR).is_ok_and(|v| v.trim() == "1")
            && std::env::var(NCCL_VAR).map_or(true, |v| v.trim() != "0");
        // Read by hand, apart from the gate, so that a mistake in the gate's reading shows.
        match OptIn::from_env() {
            Ok(_) => assert!(opted_in, "OptIn granted without WEFT_NVLS=1"),
            Err(e) => {
                assert!(!opted_in);
                assert!(matches!(e, CudaError::Refused(_)), "{e}");
            }
        }
        assert!(
            !opted_in,
            "WEFT_NVLS=1 is set in the test environment; no test or script may set it"
        );
    }

    #[test]
    fn object_prop_asks_for_a_file_descriptor_handle() {
        let p = object_prop(2, 1 << 21);
        assert_eq!(p.numDevices, 2);
        assert_eq!(p.size, 1 << 21);
        assert_eq!(p.handleTypes, 1);
        assert_eq!(p.flags, 0);
    }
}
