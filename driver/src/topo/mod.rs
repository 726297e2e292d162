//! `weft topo`: what this machine's topology is, and which channels NCCL would build on it.
//!
//! Detection mirrors NCCL's `ncclTopoGetSystem` and produces the same XML that
//! `NCCL_TOPO_DUMP_FILE` writes; everything downstream (model, paths, channel search, the
//! graph XML) is weft-core's, shared with a topology read from `NCCL_TOPO_FILE`.
//!
//! - [`sysfs`]: reading a (possibly fake) sysfs tree: PCI paths, attributes, bus ids.
//! - [`detect`]: the topology XML from sysfs, `/proc/cpuinfo`, the GPUs and the NICs.
//! - [`gpu`]: GPUs through the CUDA driver, their NVLinks through [`nvml`].
//! - [`nvml`]: the few NVML entry points detection needs, loaded at run time.
//! - [`nic`]: network devices from `/sys/class/infiniband` and `/sys/class/net`.
//! - [`matrix`]: the `nvidia-smi topo -m` style path matrix.
//! - [`svg`]: a drawing of the topology with ring 0.
//! - [`source`]: `NCCL_TOPO_FILE` or detection, then `NCCL_TOPO_DUMP_FILE`: where the
//!   communicator and `weft topo` get their topology ([`source::host_topology`]).
//! - [`cli`]: the `weft topo` command as a library entry point ([`cli::run_topo`]).

pub mod cli;
pub mod detect;
pub mod gpu;
pub mod matrix;
pub mod nic;
pub mod nvml;
pub mod source;
pub mod svg;
pub mod sysfs;

#[cfg(test)]
pub(crate) mod fake_sysfs;

pub use cli::{TopoCliError, TopoOutput, run_topo};
pub use detect::{DetectOptions, Detection, Note, detect};
pub use source::{LocalTopology, TopoError, TopoSource, host_topology, local_topology};
