//! Executors: what runs a ring program's steps over connected buffers. So far the
//! element-wise kernels the CPU executor is built on.

pub mod reduce;
