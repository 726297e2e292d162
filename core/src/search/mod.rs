//! Ring, tree and NVLS channel search over a topology.
