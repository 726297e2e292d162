//! weft-driver: the runtime that turns weft-core's logic into connected ranks.
//!
//! - [`bootstrap`]: unique id, root rendezvous, the ring of TCP sockets, all-gather, barrier.
//! - [`launcher`]: rank and world size from torchrun, Open MPI, PMI or Slurm variables.
//! - [`net`]: the `Net` trait (the shape of NCCL's `ncclNet_v8_t`) and its backends.
//! - [`capi`]: the C ABI (`weft.h`), every entry point behind a panic boundary.

pub mod bootstrap;
pub mod capi;
pub mod launcher;
pub mod net;
