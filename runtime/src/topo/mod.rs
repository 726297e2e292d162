//! Topology: what this machine is, and which channels NCCL would build on it.
//!
//! Detection mirrors NCCL's `ncclTopoGetSystem` and produces the same XML that
//! `NCCL_TOPO_DUMP_FILE` writes; everything downstream (model, paths, channel search, the
//! graph XML) is weft-core's, shared with a topology read from `NCCL_TOPO_FILE`.
//!
//! - [`sysfs`]: reading a (possibly fake) sysfs tree: PCI paths, attributes, bus ids.
//! - [`mod@detect`]: the topology XML from sysfs, `/proc/cpuinfo`, the GPUs and the NICs.
//! - [`gpu`]: GPUs through the CUDA driver, their NVLinks through [`nvml`].
//! - [`nvml`]: the few NVML entry points detection needs, loaded at run time.
//! - [`nic`]: network devices from `/sys/class/infiniband` and `/sys/class/net`.
//! - [`source`]: `NCCL_TOPO_FILE` or detection, then `NCCL_TOPO_DUMP_FILE`: where the
//!   communicator and `weft topo` get their topology ([`source::host_topology`]).
//! - [`view`]: a topology with its paths and searched graphs, and NCCL's log lines for them
//!   (the `weft topo` command itself is weft-cli's).

pub mod detect;
pub mod gpu;
pub mod nic;
pub mod nvml;
pub mod source;
pub mod sysfs;
pub mod view;

// A test helper, but always built: behind a feature, the crates whose tests use it (weft-cli)
// would build this crate twice (with and without the feature) in every workspace build.
#[doc(hidden)]
pub mod fake_sysfs;

pub use detect::{DetectOptions, Detection, Note, detect};
pub use source::{LocalTopology, TopoError, TopoSource, host_topology, local_topology};
