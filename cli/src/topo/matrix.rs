//! The path matrix `nvidia-smi topo -m` prints, over weft-core's paths: a row and a column
//! per GPU and per NIC, `X` on the diagonal, `NV#` for # bonded NVLinks, otherwise the
//! path type NCCL uses (PIX, PXB, PHB, SYS, and NVB, P2C, PXN, C2C, NET, DIS where they
//! apply), then each GPU's CPU affinity and NUMA node.

use weft_core::topo::model::{NodeKind, PathType, nvlink_bw};
use weft_core::topo::{Paths, Topology};
use weft_runtime::topo::sysfs::cpumask_to_list;

const LEGEND: [(&str, &str); 12] = [
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    ),
    (
        "PHB",
        "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    ),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
    ("NVB", "NVLink through one intermediate GPU"),
    ("C2C", "Chip-to-chip link between a GPU and its CPU"),
    ("P2C", "GPU to NIC through C2C to the CPU, then PCIe"),
    (
        "PXN",
        "GPU to NIC through an NVLink peer GPU next to the NIC (NCCL's PXN)",
    ),
    ("NET", "Through the network"),
    ("DIS", "No path"),
];

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
    let mut body = String::new();
    for (row, a) in &labels {
        body.push_str(row);
        for (_, b) in &labels {
            body.push('\t');
            let c = cell(topo, paths, *a, *b);
            if c == "X" {
                body.push_str(" X ");
            } else {
                body.push_str(&c);
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
        body.push_str(&format!("\t{affinity}\t{numa}\n"));
    }
    out.push_str(&body);
    out.push_str("\nLegend:\n\n");
    for (name, what) in LEGEND.iter().copied() {
        // NCCL's extra types only when they appear.
        let always = matches!(name, "X" | "SYS" | "PHB" | "PXB" | "PIX" | "NV#");
        if always || body.contains(&format!("\t{name}")) {
            out.push_str(&format!("  {name:<4} = {what}\n"));
        }
    }
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
