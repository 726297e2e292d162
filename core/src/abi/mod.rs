//! `#[repr(C)]` structs shared with kernels and C callers.
