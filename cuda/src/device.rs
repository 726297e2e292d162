//! The loaded driver and its devices.

use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

use weft_sys::CudaDriver;
use weft_sys::cuda::types::{CUdevice, CUdevice_P2PAttribute, CUdevice_attribute, CUresult};

use crate::error::{CudaError, Result, check};

/// The raw table, loaded once (no `cuInit`): for error texts.
pub(crate) fn driver_table() -> Result<&'static CudaDriver> {
    Ok(CudaDriver::shared()?)
}

/// The driver table if libcuda is already in this process (loaded by weft, or by the
/// caller's CUDA runtime), without loading it: for callers that must not pull libcuda into
/// a process that has no use for it.
pub fn driver_if_present() -> Option<&'static CudaDriver> {
    // SAFETY: dlopen with RTLD_NOLOAD maps nothing and runs no initialiser: it answers
    // whether the library is already loaded; the name is a NUL-terminated literal.
    let handle = unsafe {
        libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_LOCAL,
        )
    };
    if handle.is_null() {
        return None;
    }
    // SAFETY: `handle` came from the dlopen above; closing drops only its reference.
    unsafe { libc::dlclose(handle) };
    driver_table().ok()
}

/// The driver, loaded and initialised (`cuInit(0)`) once per process; a failure is
/// remembered (a driver does not appear during a process's life).
pub fn driver() -> Result<&'static CudaDriver> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    let d = driver_table()?;
    INIT.get_or_init(|| {
        // SAFETY: cuInit takes flags 0 and may be called from any thread, any number of times.
        check(unsafe { (d.cuInit)(0) }, "cuInit", None)
    })
    .clone()?;
    Ok(d)
}

/// GPUs the driver shows this process; 0 where it reports none (`CUDA_ERROR_NO_DEVICE`).
pub fn device_count() -> Result<usize> {
    let d = match driver() {
        Ok(d) => d,
        Err(e) if e.is_no_device() => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer.
    let r = unsafe { (d.cuDeviceGetCount)(&mut n) };
    if r == CUresult::CUDA_ERROR_NO_DEVICE {
        return Ok(0);
    }
    check(r, "cuDeviceGetCount", None)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// A GPU: its CUDA ordinal in this process and the driver's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    ordinal: usize,
    raw: CUdevice,
}

impl Device {
    /// The device of CUDA ordinal `ordinal`.
    pub fn get(ordinal: usize) -> Result<Device> {
        let d = driver()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::InvalidArgument(format!(
                "GPU {ordinal} does not exist: this process sees {count} GPU(s) \
                 (CUDA_VISIBLE_DEVICES?)"
            )));
        }
        let mut raw: CUdevice = 0;
        let ord = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        check(
            // SAFETY: `raw` is a valid out-pointer; the ordinal was checked against the count.
            unsafe { (d.cuDeviceGet)(&mut raw, ord) },
            "cuDeviceGet",
            Some(ordinal),
        )?;
        Ok(Device { ordinal, raw })
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn raw(&self) -> CUdevice {
        self.raw
    }

    fn attribute(&self, attr: CUdevice_attribute) -> Result<i32> {
        let d = driver()?;
        let mut v: c_int = 0;
        check(
            // SAFETY: `v` is a valid out-pointer and `raw` a device handle from cuDeviceGet.
            unsafe { (d.cuDeviceGetAttribute)(&mut v, attr, self.raw) },
            "cuDeviceGetAttribute",
            Some(self.ordinal),
        )?;
        Ok(v)
    }

    /// A boolean attribute.
    pub(crate) fn flag(&self, attr: CUdevice_attribute) -> Result<bool> {
        Ok(self.attribute(attr)? != 0)
    }

    /// The product name ("NVIDIA H200").
    pub fn name(&self) -> Result<String> {
        let d = driver()?;
        let mut buf = [0 as c_char; 256];
        check(
            // SAFETY: the buffer holds 256 bytes, the length passed.
            unsafe { (d.cuDeviceGetName)(buf.as_mut_ptr(), 256, self.raw) },
            "cuDeviceGetName",
            Some(self.ordinal),
        )?;
        Ok(c_string(&buf))
    }

    /// The PCI bus id as NCCL prints it: `0000:19:00.0`, lowercase.
    pub fn pci_bus_id(&self) -> Result<String> {
        let d = driver()?;
        let mut buf = [0 as c_char; 64];
        check(
            // SAFETY: the buffer holds 64 bytes, the length passed.
            unsafe { (d.cuDeviceGetPCIBusId)(buf.as_mut_ptr(), 64, self.raw) },
            "cuDeviceGetPCIBusId",
            Some(self.ordinal),
        )?;
        Ok(c_string(&buf).to_lowercase())
    }

    /// (major, minor): (9, 0) for Hopper.
    pub fn compute_capability(&self) -> Result<(u32, u32)> {
        let major =
            self.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor =
            self.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok((
            u32::try_from(major).unwrap_or(0),
            u32::try_from(minor).unwrap_or(0),
        ))
    }

    pub fn multiprocessor_count(&self) -> Result<u32> {
        let n = self.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// Whether this device can map `peer`'s memory (P2P over NVLink or PCIe).
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if peer.raw == self.raw {
            return Ok(true);
        }
        let d = driver()?;
        let mut v: c_int = 0;
        check(
            // SAFETY: `v` is a valid out-pointer; both are device handles.
            unsafe { (d.cuDeviceCanAccessPeer)(&mut v, self.raw, peer.raw) },
            "cuDeviceCanAccessPeer",
            Some(self.ordinal),
        )?;
        Ok(v != 0)
    }

    /// Whether this device and `peer` are joined by NVLink, as far as CUDA tells: atomics
    /// run natively between them (`CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`), which
    /// NVLink offers and PCIe does not. `false` for the device itself.
    pub fn nvlink_to(&self, peer: &Device) -> Result<bool> {
        if peer.raw == self.raw {
            return Ok(false);
        }
        let d = driver()?;
        let mut v: c_int = 0;
        check(
            // SAFETY: `v` is a valid out-pointer; both are device handles.
            unsafe {
                (d.cuDeviceGetP2PAttribute)(
                    &mut v,
                    CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                    self.raw,
                    peer.raw,
                )
            },
            "cuDeviceGetP2PAttribute",
            Some(self.ordinal),
        )?;
        Ok(v != 0)
    }

    /// Bytes of device memory.
    pub fn total_memory(&self) -> Result<usize> {
        let d = driver()?;
        let mut v: usize = 0;
        check(
            // SAFETY: `v` is a valid out-pointer.
            unsafe { (d.cuDeviceTotalMem)(&mut v, self.raw) },
            "cuDeviceTotalMem",
            Some(self.ordinal),
        )?;
        Ok(v)
    }
}

fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    CStr::from_bytes_with_nul(&[bytes.as_slice(), &[0]].concat())
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}
