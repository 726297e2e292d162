//! `libnccl-net-weft.so`: an NCCL net plugin over weft's [`weft_net::Net`] backends.
//!
//! Stock NCCL loads it with `NCCL_NET_PLUGIN=weft` (it then opens `libnccl-net-weft.so` from
//! the library path) or `NCCL_NET_PLUGIN=/full/path/libnccl-net-weft.so`, and uses it when
//! `NCCL_NET=weft` (or when it is the first network that initialises). It exports
//! `ncclNetPlugin_v8` .. `ncclNetPlugin_v11`; NCCL 2.28 picks v11.
//!
//! Layers, in the order a call goes through them:
//! - [`abi`]: NCCL's structs and function tables per version, `#[repr(C)]` with asserted
//!   layouts (weft-net's [`weft_net::nccl_abi`], shared with weft's loader of external
//!   plugins).
//! - [`entry`]: the `extern "C"` functions and the exported tables; each body inside
//!   [`boundary!`] (panics become `ncclInternalError`, never unwind into NCCL).
//! - [`adapter`]: any `Net` backend behind `void*` objects (tagged boxes), connect state
//!   between polls, cached device properties.
//! - [`backend`]: which backend (`WEFT_NET_BACKEND`, sockets by default).
//! - [`logger`]: `log` records printed by NCCL's logger.
//!
//! Host memory only: properties say `ptrSupport = NCCL_PTR_HOST`, so NCCL stages GPU data
//! through host buffers; a CUDA registration is refused with a message saying so.

pub use weft_net::nccl_abi as abi;
pub mod adapter;
pub mod backend;
pub mod boundary;
pub mod entry;
pub mod logger;

// The panic boundary needs unwinding: weft-ffi refuses to build with panic = "abort".
