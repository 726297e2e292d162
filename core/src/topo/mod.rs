//! Topology graph: nodes, links, paths; NCCL topology XML.
