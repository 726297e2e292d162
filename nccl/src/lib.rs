//! weft's `libnccl.so.2`: NCCL's C API (version 2.28) over weft's GPU communicator
//! ([`weft_runtime::gpu::GpuComm`]), so that programs built for NCCL (nccl-tests, PyTorch) run on
//! weft unchanged. `include/nccl.h` declares what it exports; docs/nccl-api.md says what
//! is honoured and what is refused (`ncclInvalidUsage`, with the reason in
//! `ncclGetLastError`).
//!
//! Layers, from C inwards:
//! - [`entry`]: the exported functions, each inside [`boundary`] (no panic crosses into C).
//! - [`issue`] and [`group`]: calls queued in groups, issued at the outermost end.
//! - [`comm`]: the communicator behind a handle, and the handle registry.
//! - [`redop`]: each communicator's `PreMulSum` operators (`ncclRedOpCreatePreMulSum`).
//! - [`config`], [`types`], [`result`]: `ncclConfig_t`, data types and operators,
//!   result codes: the pure mappings, unit-tested here.
//! - [`debug`]: `NCCL_DEBUG` lines in NCCL's format.
//! - [`unload`]: an exit waits briefly for GPU communicators' teardowns in flight, and the
//!   library stays mapped while they may run.

pub mod boundary;
pub mod comm;
pub mod config;
pub mod debug;
pub mod entry;
pub mod group;
pub mod issue;
pub mod redop;
pub mod result;
pub mod types;
pub mod unload;

/// The NCCL version weft's API matches (`NCCL_VERSION_CODE` of its `nccl.h`).
pub const NCCL_MAJOR: i32 = 2;
pub const NCCL_MINOR: i32 = 28;
pub const NCCL_PATCH: i32 = 3;
pub const NCCL_VERSION_CODE: i32 = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
