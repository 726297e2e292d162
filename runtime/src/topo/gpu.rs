//! GPUs through the CUDA driver (bus id and compute capability), their NVLinks through NVML.

use super::detect::Note;
use super::nvml::{Nvml, max_nvlinks};
use core::ffi::{c_char, c_int};
use weft_sys::CudaDriver;
use weft_sys::cuda::types::{CUdevice, CUdevice_attribute};

/// One GPU as detection needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProbe {
    /// CUDA device ordinal.
    pub dev: i32,
    /// PCI bus id, any spelling (normalised by detection).
    pub busid: String,
    /// Compute capability as major * 10 + minor.
    pub sm: u32,
    /// One entry per active NVLink: the far end's bus id as NVML gives it (empty when
    /// unknown, i.e. an NVSwitch NCCL cannot name).
    pub nvlink_targets: Vec<String>,
}

fn cuda_gpus(notes: &mut Vec<Note>) -> Vec<GpuProbe> {
    let cuda = match CudaDriver::shared() {
        Ok(c) => c,
        Err(e) => {
            notes.push(Note::info(format!("no GPUs: {e}")));
            return Vec::new();
        }
    };
    // SAFETY: cuInit(0) has no preconditions and may be called more than once.
    let rc = unsafe { (cuda.cuInit)(0) };
    if !rc.is_success() {
        notes.push(Note::info(format!(
            "no GPUs: cuInit: {}",
            cuda.describe(rc)
        )));
        return Vec::new();
    }
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { (cuda.cuDeviceGetCount)(&mut count) };
    if !rc.is_success() {
        notes.push(Note::warn(format!(
            "cuDeviceGetCount: {}",
            cuda.describe(rc)
        )));
        return Vec::new();
    }
    let mut out = Vec::new();
    for ordinal in 0..count {
        let mut dev = 0;
        // SAFETY: valid out-pointer; the ordinal is below the count the driver gave.
        let rc = unsafe { (cuda.cuDeviceGet)(&mut dev, ordinal) };
        if !rc.is_success() {
            notes.push(Note::warn(format!(
                "cuDeviceGet({ordinal}): {}",
                cuda.describe(rc)
            )));
            continue;
        }
        let busid = match device_busid(cuda, dev, ordinal) {
            Ok(b) => b,
            Err(e) => {
                notes.push(Note::warn(e));
                continue;
            }
        };
        let attr = |a: CUdevice_attribute| {
            let mut v: c_int = 0;
            // SAFETY: valid out-pointer and a device handle from cuDeviceGet.
            let rc = unsafe { (cuda.cuDeviceGetAttribute)(&mut v, a, dev) };
            if rc.is_success() { v } else { 0 }
        };
        let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        out.push(GpuProbe {
            dev: ordinal,
            busid,
            sm: u32::try_from(major * 10 + minor).unwrap_or(0),
            nvlink_targets: Vec::new(),
        });
    }
    out
}

fn device_busid(cuda: &CudaDriver, dev: CUdevice, ordinal: i32) -> Result<String, String> {
    let mut buf = [0 as c_char; 64];
    // SAFETY: the buffer holds `len` bytes; the driver writes a NUL-terminated id.
    let rc = unsafe { (cuda.cuDeviceGetPCIBusId)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
    if !rc.is_success() {
        return Err(format!(
            "cuDeviceGetPCIBusId({ordinal}): {}",
            cuda.describe(rc)
        ));
    }
    Ok(buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8 as char)
        .collect())
}

/// The PCI bus id (`0000:19:00.0`) of CUDA device `ordinal` as this process numbers it
/// (after `CUDA_VISIBLE_DEVICES`): what ranks exchange so that the topology search can
/// tell which GPU each uses.
pub fn bus_id_of(ordinal: i32) -> Result<String, String> {
    let cuda = CudaDriver::shared().map_err(|e| e.to_string())?;
    // SAFETY: cuInit(0) has no preconditions and may be called more than once.
    let rc = unsafe { (cuda.cuInit)(0) };
    if !rc.is_success() {
        return Err(format!("cuInit: {}", cuda.describe(rc)));
    }
    let mut dev = 0;
    // SAFETY: valid out-pointer; the driver checks the ordinal.
    let rc = unsafe { (cuda.cuDeviceGet)(&mut dev, ordinal) };
    if !rc.is_success() {
        return Err(format!("cuDeviceGet({ordinal}): {}", cuda.describe(rc)));
    }
    device_busid(cuda, dev, ordinal)
}

/// Every GPU of this machine with its NVLinks. Without libcuda: no GPUs and an info note;
/// without NVML: GPUs without NVLinks and a warning.
pub fn probe_gpus(notes: &mut Vec<Note>) -> Vec<GpuProbe> {
    let mut gpus = cuda_gpus(notes);
    if gpus.is_empty() {
        return gpus;
    }
    let nvml = match Nvml::load() {
        Ok(n) => n,
        Err(e) => {
            notes.push(Note::warn(format!(
                "NVML unavailable ({e}): NVLinks are not detected, GPUs talk over PCIe only"
            )));
            return gpus;
        }
    };
    for g in &mut gpus {
        match nvml.nvlink_targets(&g.busid, max_nvlinks(g.sm)) {
            Ok(t) => g.nvlink_targets = t,
            Err(e) => notes.push(Note::warn(format!("GPU {}: {e}", g.dev))),
        }
    }
    gpus
}
