//! Loads libcuda, libnvrtc and libibverbs and prints what each offers: the path that
//! loaded, its version, the optional symbols it lacks, and the devices it sees. A missing
//! library prints its `LoadError`. Calls nothing that allocates or creates anything (in
//! particular never `cuMulticastCreate`).
//!
//! `cargo run -p weft-sys --example probe_libraries`

use std::ffi::CStr;

use weft_sys::cuda::types::{CUdevice_attribute, CUresult};
use weft_sys::{CudaDriver, Nvrtc, Verbs};

fn missing_optional(
    symbols: &[(&'static str, &'static str)],
    has: impl Fn(&str) -> bool,
) -> String {
    let missing: Vec<&str> = symbols
        .iter()
        .map(|(symbol, _)| *symbol)
        .filter(|symbol| !has(symbol))
        .collect();
    if missing.is_empty() {
        String::from("none")
    } else {
        missing.join(", ")
    }
}

fn probe_cuda() {
    let driver = match CudaDriver::load() {
        Ok(driver) => driver,
        Err(err) => {
            println!("cuda:   {err}");
            return;
        }
    };
    let mut version = 0;
    // SAFETY: writes one int; valid before cuInit.
    let status = unsafe { (driver.cuDriverGetVersion)(&mut version) };
    println!(
        "cuda:   {} (driver API {}.{}, {}); optional symbols missing: {}",
        driver.path(),
        version / 1000,
        version % 1000 / 10,
        driver.describe(status),
        missing_optional(CudaDriver::OPTIONAL_SYMBOLS, |symbol| driver.has(symbol)),
    );
    // SAFETY: cuInit(0) is the documented first call.
    let status = unsafe { (driver.cuInit)(0) };
    if !status.is_success() {
        println!("cuda:   cuInit: {}", driver.describe(status));
        return;
    }
    let mut count = 0;
    // SAFETY: writes one int.
    let status = unsafe { (driver.cuDeviceGetCount)(&mut count) };
    if status != CUresult::CUDA_SUCCESS {
        println!("cuda:   cuDeviceGetCount: {}", driver.describe(status));
        return;
    }
    for ordinal in 0..count {
        let mut device = 0;
        // SAFETY: writes one CUdevice for an ordinal below the count.
        let status = unsafe { (driver.cuDeviceGet)(&mut device, ordinal) };
        if !status.is_success() {
            println!(
                "cuda:   cuDeviceGet({ordinal}): {}",
                driver.describe(status)
            );
            continue;
        }
        let mut bus_id = [0 as std::ffi::c_char; 32];
        // SAFETY: writes at most 32 bytes, NUL-terminated.
        let status = unsafe { (driver.cuDeviceGetPCIBusId)(bus_id.as_mut_ptr(), 32, device) };
        let bus_id = if status.is_success() {
            // SAFETY: NUL-terminated by the driver on success.
            unsafe { CStr::from_ptr(bus_id.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            driver.describe(status)
        };
        let attribute = |attribute: CUdevice_attribute| {
            let mut value = -1;
            // SAFETY: writes one int for a valid device.
            unsafe { (driver.cuDeviceGetAttribute)(&mut value, attribute, device) };
            value
        };
        println!(
            "cuda:   device {ordinal}: {bus_id}, sm_{}{}, {} SMs, vmm {}, multicast {}, gdr {}",
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED),
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
        );
    }
}

fn probe_nvrtc() {
    match Nvrtc::load() {
        Ok(nvrtc) => {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: writes two ints.
            let status = unsafe { (nvrtc.nvrtcVersion)(&mut major, &mut minor) };
            println!(
                "nvrtc:  {} (version {major}.{minor}, {}); optional symbols missing: {}",
                nvrtc.path(),
                nvrtc.describe(status),
                missing_optional(Nvrtc::OPTIONAL_SYMBOLS, |symbol| nvrtc.has(symbol)),
            );
        }
        Err(err) => println!("nvrtc:  {err}"),
    }
}

fn probe_verbs() {
    let verbs = match Verbs::load() {
        Ok(verbs) => verbs,
        Err(err) => {
            println!("verbs:  {err}");
            return;
        }
    };
    let mut count = 0;
    // SAFETY: writes the count; the list is freed below.
    let list = unsafe { (verbs.ibv_get_device_list)(&mut count) };
    println!(
        "verbs:  {}; {count} devices; optional symbols missing: {}",
        verbs.path(),
        missing_optional(Verbs::OPTIONAL_SYMBOLS, |symbol| verbs.has(symbol)),
    );
    if list.is_null() {
        return;
    }
    // SAFETY: a non-null list holds `count` device pointers.
    let devices = unsafe { std::slice::from_raw_parts(list, usize::try_from(count).unwrap_or(0)) };
    for (index, device) in devices.iter().enumerate() {
        // SAFETY: a device from the list; returns its name, a static string.
        let name = unsafe { (verbs.ibv_get_device_name)(*device) };
        if !name.is_null() {
            // SAFETY: NUL-terminated.
            let name = unsafe { CStr::from_ptr(name) };
            println!("verbs:  device {index}: {}", name.to_string_lossy());
        }
    }
    // SAFETY: freed once, after the last use of its devices.
    unsafe { (verbs.ibv_free_device_list)(list) };
}

fn main() {
    probe_cuda();
    probe_nvrtc();
    probe_verbs();
}
