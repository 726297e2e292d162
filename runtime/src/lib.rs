//! weft-runtime: the runtime that turns weft-core's logic into connected ranks, on host
//! memory and on GPUs. A library only (rlib): the C surfaces (weft-capi's libweft,
//! weft-nccl's libnccl.so.2) and the `weft` command (weft-cli) are crates above it.
//!
//! - [`config`]: the settings every part below takes, read from the environment once
//!   (the weft-config crate, re-exported).
//! - [`bootstrap`]: unique id, root rendezvous, the ring of TCP sockets, all-gather, barrier.
//! - [`launcher`]: rank and world size from torchrun, Open MPI, PMI or Slurm variables.
//! - [`conn`]: host FIFO connections (step/credit protocol over shared memory), ends and waits.
//! - [`copy`]: the host bulk copy loop every FIFO step and executor copy goes through.
//! - [`transport`]: the `Transport` trait (NCCL's `ncclTransport`), the SHM and NET transports.
//! - [`proxy`]: the thread that moves NET connections' FIFO slots over the network.
//! - [`net`]: the `Net` trait and its backends: the weft-net crate, re-exported.
//! - [`topo`]: topology detection (sysfs, CUDA, NVML, NICs) or `NCCL_TOPO_FILE`, and the
//!   searched channel graphs.
//! - [`comm`]: the host communicator: init (bootstrap, peers, rings, connections) and
//!   collectives on host memory.
//! - [`exec`]: the CPU executor: ring programs over FIFO connections, one thread per channel;
//!   [`exec::reduce`] holds its reduction kernels.
//! - [`status`]: the job health query: what every rank of a communicator is doing, and
//!   the rank that holds the job up.
//! - [`gpu`]: the device communicator: CUDA kernels over P2P (NVLink) connections, on device
//!   memory.

pub mod bootstrap;
pub mod comm;
pub mod conn;
pub mod copy;
/// The settings every part of the runtime takes (weft-config).
pub use weft_config as config;
pub mod exec;
pub mod gpu;
pub mod launcher;
pub use weft_net as net;
pub mod proxy;
pub mod status;
pub mod topo;
pub mod transport;
