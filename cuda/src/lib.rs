//! weft-cuda: the CUDA layer every GPU part of weft uses.
//!
//! cudarc's split, without its panics: weft-sys holds the raw tables (libcuda and NVRTC,
//! loaded at run time); here every call returns a `Result` whose error names the call, the
//! device and what to try ([`CudaError`]), and owning types free what they hold in `Drop`
//! (a failure there is logged, never a panic). No GPU, no driver or no NVRTC is an error,
//! never a panic and never a link-time dependency.
//!
//! - [`driver()`], [`device_count`]: the loaded, initialised driver.
//! - [`Device`], [`Context`] (a device's primary context): what every other type hangs off.
//!   Each method binds its context first, so callers never juggle current contexts.
//! - [`Stream`], [`Event`], [`Graph`]: ordering, timing, and captured launch sequences.
//! - [`DeviceBuffer`], [`HostMapped`], [`IpcMemHandle`]/[`IpcMapping`], [`ShareableBuffer`]:
//!   device memory, pinned host memory the GPU can address, and the two ways to share device
//!   memory between processes (CUDA IPC handles; VMM allocations exported as file
//!   descriptors).
//! - [`multicast`]: NVLink SHARP multicast objects behind an explicit opt-in
//!   (`WEFT_NVLS=1`), and their unicast stand-in over peer-mapped memory.
//! - [`Module`], [`Function`]: PTX loaded into a context, and kernel launches.
//! - [`compile`] (module `nvrtc`): CUDA C++ to PTX or machine code with NVRTC, cached on
//!   disk; [`bundle`]: machine code compiled ahead of time and shipped in the binary.

pub mod bundle;
mod context;
mod device;
mod error;
mod event;
mod graph;
mod memory;
mod module;
pub mod multicast;
pub mod nvrtc;
mod stream;
mod vmm;

pub use context::Context;
pub use device::{Device, device_count, driver, driver_if_present};
pub use error::{CudaError, Result};
pub use event::Event;
pub use graph::Graph;
pub use memory::{
    DeviceBuffer, HostMapped, HostRegistration, IpcMapping, IpcMemHandle, copy_async,
};
pub use module::{Function, Module};
pub use nvrtc::{CompileOptions, Compiled, compile};
pub use stream::Stream;
pub use vmm::{ShareableBuffer, allocation_granularity, vmm_supported};
pub use weft_sys::CudaDriver;
pub use weft_sys::cuda::types::{CUcontext, CUdevice, CUdeviceptr, CUstream};
