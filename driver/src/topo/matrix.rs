//! The path matrix `nvidia-smi topo -m` prints, over weft-core's paths: a row and a column
//! per GPU and per NIC, `X` on the diagonal, `NV#` for # bonded NVLinks, otherwise the
//! path type NCCL uses (PIX, PXB, PHB, SYS, and NVB, P2C, PXN, C2C, NET, DIS where they
//! apply), then each GPU's CPU affinity and NUMA node.

use super::sysfs::cpumask_to_list;
use weft_core::topo::model::{NodeKind, PathType, nvlink_bw};
use weft_core::topo::{Paths, Topology};

/// The text of one cell: the path from node `a` to node `b`.
pub fn cell(topo: &Topology, paths: &Paths, a: usize, b: usize) -> String {
    if a == b {
        return "X".to_string();
    }
    let Some(p) = paths.get(a, b) else {
        return PathType::Dis.to_string();
    };
    if p.kind == PathType::Nvl {
        let sm = topo
            .nodes
            .get(a)
            .and_then(|n| n.gpu())
            .or_else(|| topo.nodes.get(b).and_then(|n| n.gpu()))
            .map_or(0, |g| g.sm);
        let per_link = nvlink_bw(sm);
        return format!("NV{}", (p.bw / per_link).round() as u32);
    }
    p.kind.to_string()
}

/// Row/column labels, in order: `GPU0`.. then `NIC0`.., with the node each stands for.
pub fn labels(topo: &Topology) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = topo
        .of_kind(NodeKind::Gpu)
        .into_iter()
        .enumerate()
        .map(|(i, n)| (format!("GPU{i}"), n))
        .collect();
    out.extend(
        topo.of_kind(NodeKind::Net)
            .into_iter()
            .enumerate()
            .map(|(i, n)| (format!("NIC{i}"), n)),
    );
    out
}

/// The whole matrix with its legend, tab-separated as `nvidia-smi topo -m` prints it.
pub fn path_matrix(topo: &Topology, paths: &Paths) -> String {
    let labels = labels(topo);
    let mut out = String::new();
    for (l, _) in &labels {
        out.push('\t');
        out.push_str(l);
    }
    out.push_str("\tCPU Affinity\tNUMA Affinity\n");
    for (row, a) in &labels {
        out.push_str(row);
        for (_, b) in &labels {
            out.push('\t');
            let c = cell(topo, paths, *a, *b);
            if c == "X" {
                out.push_str(" X ");
            } else {
                out.push_str(&c);
            }
        }
        let cpu = topo
            .local_cpu_up(*a)
            .and_then(|c| topo.nodes.get(c))
            .and_then(|n| n.cpu());
        let affinity = cpu
            .and_then(|c| c.affinity.as_deref())
            .and_then(cpumask_to_list)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "N/A".to_string());
        let numa = cpu
            .filter(|c| c.numa_id >= 0)
            .map_or_else(|| "N/A".to_string(), |c| c.numa_id.to_string());
        out.push_str(&format!("\t{affinity}\t{numa}\n"));
    }
    out.push_str(
        "\nLegend:\n\n  X    = Self\n  \
         SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n  \
         PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n  \
         PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n  \
         PIX  = Connection traversing at most a single PCIe bridge\n  \
         NV#  = Connection traversing a bonded set of # NVLinks\n",
    );
    let nics: Vec<(String, usize)> = labels
        .iter()
        .filter(|(l, _)| l.starts_with("NIC"))
        .cloned()
        .collect();
    if !nics.is_empty() {
        out.push_str("\nNIC Legend:\n\n");
        for (l, n) in nics {
            let name = topo
                .nodes
                .get(n)
                .and_then(|x| x.net())
                .and_then(|x| x.name.clone())
                .unwrap_or_else(|| "?".to_string());
            out.push_str(&format!("  {l}: {name}\n"));
        }
    }
    out
}
