//! Topology: what is connected to what, and how fast.
//!
//! - [`model`]: the graph of GPUs, PCIe switches, NVSwitches, CPUs, NICs and network ports,
//!   with typed links and their bandwidth (NCCL's `ncclTopoSystem`).
//! - [`paths`]: best paths between nodes with NCCL's path types (NVL, PIX, PXB, PHB, SYS...),
//!   and the P2P / GPUDirect RDMA / PXN rules that depend on them.
//! - [`xml`]: a generic XML tree read and written as NCCL's `xml.cc` does.
//! - [`system_xml`]: NCCL's topology XML (`NCCL_TOPO_FILE`, `NCCL_TOPO_DUMP_FILE`) to and
//!   from the model.
pub mod model;
pub mod paths;
pub mod system_xml;
pub mod xml;

pub use model::{LinkType, NodeKind, PathType, Topology};
pub use paths::{GdrMode, PathOptions, Paths, compute_paths};
