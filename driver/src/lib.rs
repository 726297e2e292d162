//! weft-driver: the runtime that turns weft-core's logic into connected ranks.
//!
//! - [`bootstrap`]: unique id, root rendezvous, the ring of TCP sockets, all-gather, barrier.
//! - [`launcher`]: rank and world size from torchrun, Open MPI, PMI or Slurm variables.
//! - [`conn`]: host FIFO connections (step/credit protocol over shared memory), ends and waits.
//! - [`transport`]: the `Transport` trait (NCCL's `ncclTransport`), the SHM and NET transports.
//! - [`proxy`]: the thread that moves NET connections' FIFO slots over the network.
//! - [`net`]: the `Net` trait and its backends: the weft-net crate, re-exported.
//! - [`comm`]: the communicator: init (bootstrap, peers, rings, connections) and collectives.
//! - [`exec`]: the CPU executor: ring programs over FIFO connections, one thread per channel;
//!   [`exec::reduce`] holds its reduction kernels.
//! - [`gpu`]: the GPU path: CUDA kernels over P2P (NVLink) connections, on device memory.
//! - [`verify`]: seeded test data and the exact expected result of each collective.
//! - [`capi`]: the C ABI (`weft.h`), every entry point behind a panic boundary.
//! - [`topo`]: topology detection and `weft topo` (paths, channels, NCCL's XML files, SVG).

// weft.h is generated from `capi` alone: cbindgen skips a module whose docs say
// `cbindgen:ignore` (otherwise every public constant of the driver would land in the header).
/// cbindgen:ignore
pub mod bootstrap;
pub mod capi;
/// cbindgen:ignore
pub mod comm;
/// cbindgen:ignore
pub mod conn;
/// cbindgen:ignore
pub mod copy;
/// cbindgen:ignore
pub use weft_net::env;
/// cbindgen:ignore
pub mod exec;
/// cbindgen:ignore
pub mod gpu;
/// cbindgen:ignore
pub mod launcher;
/// cbindgen:ignore
pub use weft_net as net;
/// cbindgen:ignore
pub mod proxy;
/// cbindgen:ignore
pub mod topo;
/// cbindgen:ignore
pub mod transport;
/// cbindgen:ignore
pub mod verify;
