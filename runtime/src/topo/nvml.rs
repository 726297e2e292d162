//! The handful of NVML calls topology detection needs (NVLink state and far end), loaded
//! from `libnvidia-ml.so.1` at run time. Missing NVML is not an error: detection then
//! reports no NVLinks and says so.

use core::ffi::{c_char, c_int, c_uint};
use std::ffi::CString;

/// `nvmlReturn_t`; 0 is success.
type NvmlReturn = c_int;
/// `nvmlDevice_t`: an opaque handle.
type NvmlDevice = *mut core::ffi::c_void;

/// `NVML_NVLINK_CAP_P2P_SUPPORTED`.
const NVLINK_CAP_P2P_SUPPORTED: c_uint = 0;
/// `NVML_FEATURE_ENABLED`.
const FEATURE_ENABLED: c_uint = 1;

/// `nvmlPciInfo_t` (the v3 layout, current since CUDA 9).
#[repr(C)]
#[derive(Clone, Copy)]
struct NvmlPciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

type InitFn = unsafe extern "C" fn() -> NvmlReturn;
type HandleByBusIdFn = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
type LinkCapFn = unsafe extern "C" fn(NvmlDevice, c_uint, c_uint, *mut c_uint) -> NvmlReturn;
type LinkStateFn = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_uint) -> NvmlReturn;
type RemotePciFn = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlPciInfo) -> NvmlReturn;

/// NVML, loaded and initialised. The library stays loaded for the process's life (NVML is
/// not meant to be unloaded while handles exist; NCCL never unloads it either).
pub struct Nvml {
    handle_by_bus_id: HandleByBusIdFn,
    link_cap: LinkCapFn,
    link_state: LinkStateFn,
    remote_pci: RemotePciFn,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

fn symbol<T: Copy>(lib: &libloading::Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: every `T` this is called with is the exact C prototype of `name` from
    // nvml.h, and the library is leaked below so the pointer stays valid.
    unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| {
        format!(
            "{} missing from libnvidia-ml.so.1 ({e}): driver too old?",
            String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name))
        )
    })
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and calls `nvmlInit_v2`.
    pub fn load() -> Result<Nvml, String> {
        // SAFETY: loading NVML runs only its own initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| format!("libnvidia-ml.so.1 not loadable: {e}"))?;
        let init: InitFn = symbol(&lib, b"nvmlInit_v2\0")?;
        let nvml = Nvml {
            handle_by_bus_id: symbol(&lib, b"nvmlDeviceGetHandleByPciBusId_v2\0")?,
            link_cap: symbol(&lib, b"nvmlDeviceGetNvLinkCapability\0")?,
            link_state: symbol(&lib, b"nvmlDeviceGetNvLinkState\0")?,
            remote_pci: symbol(&lib, b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0")?,
        };
        // SAFETY: nvmlInit_v2 takes no arguments and may be called more than once.
        let rc = unsafe { init() };
        if rc != 0 {
            return Err(format!("nvmlInit_v2 failed with NVML error {rc}"));
        }
        // Keep the code mapped: the function pointers above live as long as the process.
        std::mem::forget(lib);
        Ok(nvml)
    }

    /// Far-end bus ids of the active, P2P-capable NVLinks of the GPU at `busid`, one entry
    /// per link (NCCL's loop in `ncclTopoGetXmlFromGpu`), lower case as NCCL writes them;
    /// an NVLink whose far end NVML cannot name gives an empty string.
    pub fn nvlink_targets(&self, busid: &str, max_links: u32) -> Result<Vec<String>, String> {
        let c_busid = CString::new(busid).map_err(|_| format!("bad bus id {busid:?}"))?;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated bus id and a valid out-pointer, as nvml.h requires.
        let rc = unsafe { (self.handle_by_bus_id)(c_busid.as_ptr(), &mut dev) };
        if rc != 0 {
            return Err(format!(
                "nvmlDeviceGetHandleByPciBusId_v2({busid}) failed with NVML error {rc}"
            ));
        }
        let mut out = Vec::new();
        for link in 0..max_links {
            let mut cap: c_uint = 0;
            // SAFETY: `dev` is a handle NVML returned; `cap` is a valid out-pointer.
            let rc = unsafe { (self.link_cap)(dev, link, NVLINK_CAP_P2P_SUPPORTED, &mut cap) };
            if rc != 0 || cap == 0 {
                continue;
            }
            let mut state: c_uint = 0;
            // SAFETY: as above.
            let rc = unsafe { (self.link_state)(dev, link, &mut state) };
            if rc != 0 || state != FEATURE_ENABLED {
                continue;
            }
            let mut info = NvmlPciInfo {
                bus_id_legacy: [0; 16],
                domain: 0,
                bus: 0,
                device: 0,
                pci_device_id: 0,
                pci_sub_system_id: 0,
                bus_id: [0; 32],
            };
            // SAFETY: `info` is an nvmlPciInfo_t NVML fills in.
            let rc = unsafe { (self.remote_pci)(dev, link, &mut info) };
            if rc != 0 {
                continue;
            }
            let bytes: Vec<u8> = info
                .bus_id
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            let text = if bytes.iter().all(|b| b.is_ascii_graphic()) {
                String::from_utf8_lossy(&bytes).to_ascii_lowercase()
            } else {
                String::new()
            };
            out.push(text);
        }
        Ok(out)
    }
}

/// NVLinks NCCL probes per GPU, by compute capability.
pub fn max_nvlinks(sm: u32) -> u32 {
    match sm {
        0..60 => 0,
        60..70 => 4,
        70..80 => 6,
        80..90 => 12,
        _ => 18,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_info_layout_matches_nvml_h() {
        assert_eq!(std::mem::size_of::<NvmlPciInfo>(), 16 + 5 * 4 + 32);
        assert_eq!(std::mem::offset_of!(NvmlPciInfo, bus_id), 36);
        assert_eq!(max_nvlinks(52), 0);
        assert_eq!(max_nvlinks(70), 6);
        assert_eq!(max_nvlinks(86), 12);
        assert_eq!(max_nvlinks(90), 18);
        assert_eq!(max_nvlinks(100), 18);
    }

    /// Where NVML is missing (the build machines), loading says which library and why.
    #[test]
    fn missing_nvml_is_an_error_naming_the_library() {
        if let Err(e) = Nvml::load() {
            assert!(e.starts_with("libnvidia-ml.so.1 not loadable: "), "{e}");
        }
    }
}
