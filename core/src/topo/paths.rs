//! Paths between nodes, computed as NCCL's `paths.cc` does.
//!
//! For every CPU, GPU, NET and NVS node, a breadth-first search from it gives each other
//! node its best path *to* it: the lowest path type first, then the highest bandwidth,
//! then the fewest hops. A path's type is the worst of its links, refined for PCIe: a hop
//! between two switches is PXB, a PCIe hop touching a CPU is PHB, and NVLink through one
//! intermediate GPU is NVB (the only way a path may cross a GPU). Its bandwidth is its
//! narrowest link.
//!
//! Then, as NCCL does: GPU pairs too far apart for P2P (beyond `p2p_level`) are routed
//! through the CPU next to the destination; a GPU whose C2C link to its CPU meets the CPU's
//! PCIe path to a NIC gets P2C; a GPU may reach a NIC through an NVLink peer closer to it
//! (PXN); and GPU<->NIC paths without GPUDirect RDMA are routed through the CPU.

use super::model::{CpuArch, CpuVendor, LOC_BW, LinkType, NodeKind, PathType, Topology};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Options that NCCL reads from its environment, passed in explicitly (core has no env).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathOptions {
    /// `NCCL_P2P_LEVEL` (or `NCCL_P2P_DISABLE=1` as `Some(Loc)`); `None` = NCCL's default
    /// (PXB, or SYS on AMD hosts with at most two GPUs).
    pub p2p_level: Option<PathType>,
    /// `NCCL_NVB_DISABLE`: never route GPU to GPU through a third GPU.
    pub nvb_disable: bool,
    /// `NCCL_NET_GDR_LEVEL`; `None` = P2C when `gdr_c2c`, else PXB.
    pub gdr_level: Option<PathType>,
    /// `NCCL_NET_GDR_C2C` (default on).
    pub gdr_c2c: bool,
    /// `NCCL_NET_GDR_READ`: `None` = default (on from SM80, else only with NVLink peers).
    pub gdr_read: Option<bool>,
    /// `NCCL_PXN_DISABLE`.
    pub pxn_disable: bool,
    /// `NCCL_PXN_C2C` (default on): a PXN relay may reach its NIC through P2C.
    pub pxn_c2c: bool,
}

impl Default for PathOptions {
    fn default() -> Self {
        PathOptions {
            p2p_level: None,
            nvb_disable: false,
            gdr_level: None,
            gdr_c2c: true,
            gdr_read: None,
            pxn_disable: false,
            pxn_c2c: true,
        }
    }
}

/// One hop of a path: leave `node` through its link number `link`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub node: usize,
    pub link: usize,
}

/// The best path from one node to another.
#[derive(Clone, Debug, PartialEq)]
pub struct Path {
    pub kind: PathType,
    pub bw: f32,
    /// Hops from the source to the destination; empty for the node itself.
    pub hops: Vec<Hop>,
}

impl Path {
    fn disconnected() -> Self {
        Path {
            kind: PathType::Dis,
            bw: 0.0,
            hops: Vec::new(),
        }
    }
}

/// How GPUDirect RDMA may be used between a GPU and a NIC (NCCL's `ncclTopoGdrMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdrMode {
    Disabled,
    Default,
    /// Force PCIe mapping: the GPU reaches its CPU through C2C but the NIC through PCIe.
    Pci,
}

/// Paths to every CPU, GPU, NET and NVS node of a topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Paths {
    /// `to[target][source]`, present for targets of those four kinds.
    to: Vec<Option<Vec<Path>>>,
    /// NCCL's "local GPU" of each NET node (`ncclTopoGetLocalGpu`), by node index.
    net_local_gpu: Vec<Option<usize>>,
}

impl Paths {
    /// The path from `from` to `to`, if `to` is a path target and both exist.
    pub fn get(&self, from: usize, to: usize) -> Option<&Path> {
        self.to.get(to)?.as_ref()?.get(from)
    }

    fn get_mut(&mut self, from: usize, to: usize) -> Option<&mut Path> {
        self.to.get_mut(to)?.as_mut()?.get_mut(from)
    }

    /// Type of the path, `Dis` when there is none.
    pub fn kind(&self, from: usize, to: usize) -> PathType {
        self.get(from, to).map_or(PathType::Dis, |p| p.kind)
    }

    /// Bandwidth of the path, 0 when there is none.
    pub fn bw(&self, from: usize, to: usize) -> f32 {
        self.get(from, to).map_or(0.0, |p| p.bw)
    }

    /// The line NCCL prints for a node's paths at INFO level (`printNodePaths`):
    /// `GPU/0-60 :GPU/0-60 (0/5000.0/LOC) GPU/0-70 (2/370.8/NVL) ... `, listing for each
    /// target kind it has paths to (GPU, NVS, CPU, NET) every node of that kind with
    /// hops/bandwidth/type.
    pub fn describe(&self, topo: &Topology, from: usize) -> String {
        use core::fmt::Write;
        let mut line = topo.label(from);
        line.push_str(" :");
        for kind in [NodeKind::Gpu, NodeKind::Nvs, NodeKind::Cpu, NodeKind::Net] {
            let targets = topo.of_kind(kind);
            // NCCL only has paths to a kind that its search from that kind reached.
            if !targets.iter().any(|&t| self.kind(from, t) != PathType::Dis) {
                continue;
            }
            for t in targets {
                let (hops, bw, kind) = self
                    .get(from, t)
                    .map_or((0, 0.0, PathType::Dis), |p| (p.hops.len(), p.bw, p.kind));
                let _ = write!(line, "{} ({hops}/{bw:.1}/{kind}) ", topo.label(t));
            }
        }
        line
    }

    /// The GPU (node index) that NCCL considers local to a NET node.
    pub fn net_local_gpu(&self, net: usize) -> Option<usize> {
        self.net_local_gpu.get(net).copied().flatten()
    }
}

fn is_target(kind: NodeKind) -> bool {
    matches!(
        kind,
        NodeKind::Cpu | NodeKind::Gpu | NodeKind::Net | NodeKind::Nvs
    )
}

/// Breadth-first search from `base`, filling `out[source]` with the path source -> base.
fn bfs(topo: &Topology, base: usize, opts: &PathOptions) -> Vec<Path> {
    let n = topo.nodes.len();
    let mut out = vec![Path::disconnected(); n];
    let Some(base_slot) = out.get_mut(base) else {
        return out;
    };
    *base_slot = Path {
        kind: PathType::Loc,
        bw: LOC_BW,
        hops: Vec::new(),
    };
    let mut frontier = vec![base];
    while !frontier.is_empty() {
        let mut next: Vec<usize> = Vec::new();
        for &node in &frontier {
            let Some(node_ref) = topo.nodes.get(node) else {
                continue;
            };
            let Some(path) = out.get(node).cloned() else {
                continue;
            };
            for link in &node_ref.links {
                let rem = link.to;
                let Some(rem_ref) = topo.nodes.get(rem) else {
                    continue;
                };
                // A path may cross a GPU only as NVLink GPU -> GPU -> base, one hop from base.
                if node != base
                    && node_ref.kind == NodeKind::Gpu
                    && (opts.nvb_disable
                        || link.kind != LinkType::Nvl
                        || rem_ref.kind != NodeKind::Gpu
                        || path.hops.len() > 1)
                {
                    continue;
                }
                let bw = path.bw.min(link.bw);
                let mut kind = if link.kind == LinkType::Net {
                    PathType::Loc
                } else {
                    link.kind.as_path()
                };
                if node_ref.kind == NodeKind::Pci && rem_ref.kind == NodeKind::Pci {
                    kind = PathType::Pxb;
                }
                if link.kind == LinkType::Pci
                    && (node_ref.kind == NodeKind::Cpu || rem_ref.kind == NodeKind::Cpu)
                {
                    kind = PathType::Phb;
                }
                if node != base
                    && node_ref.kind == NodeKind::Gpu
                    && path.kind == PathType::Nvl
                    && kind == PathType::Nvl
                {
                    kind = PathType::Nvb;
                }
                let kind = kind.max(path.kind);
                let Some(rem_path) = out.get(rem) else {
                    continue;
                };
                let hops_len = path.hops.len().saturating_add(1);
                let better = kind < rem_path.kind
                    || (kind == rem_path.kind && rem_path.bw < bw)
                    || (kind == rem_path.kind
                        && rem_path.bw == bw
                        && rem_path.hops.len() > hops_len);
                if !better {
                    continue;
                }
                // The first hop is the reverse link rem -> node.
                let Some(rev) = rem_ref.link_to(node, link.kind) else {
                    continue;
                };
                let mut hops = Vec::with_capacity(hops_len);
                hops.push(Hop {
                    node: rem,
                    link: rev,
                });
                hops.extend_from_slice(&path.hops);
                if let Some(slot) = out.get_mut(rem) {
                    *slot = Path { kind, bw, hops };
                }
                if !next.contains(&rem) {
                    next.push(rem);
                }
            }
        }
        frontier = next;
    }
    out
}

/// NCCL's `mergePathType`: C2C followed by PHB is P2C, otherwise the worse type.
fn merge_path_type(a: PathType, b: PathType) -> PathType {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    if hi == PathType::Phb && lo == PathType::C2c {
        PathType::P2c
    } else {
        hi
    }
}

/// Mirrors the low bits of `val` within `pow2` (NCCL's `mirrorBits`).
fn mirror_bits(val: usize, pow2: usize) -> usize {
    let mut mirror = 0usize;
    let mut b = 1usize;
    let mut mb = pow2 >> 1;
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

impl Paths {
    /// Nodes of `kind` closest to `from`: highest bandwidth, then lowest type (NCCL's
    /// `ncclTopoGetLocal`). Returns them with that type.
    pub fn local(&self, topo: &Topology, from: usize, kind: NodeKind) -> (Vec<usize>, PathType) {
        let mut best_bw = 0.0f32;
        let mut best_type = PathType::Dis;
        let mut found: Vec<usize> = Vec::new();
        for cand in topo.of_kind(kind) {
            let Some(p) = self.get(from, cand) else {
                continue;
            };
            if p.bw > best_bw || (p.bw == best_bw && p.kind < best_type) {
                best_bw = p.bw;
                best_type = p.kind;
                found.clear();
            }
            if p.bw == best_bw && p.kind == best_type {
                found.push(cand);
            }
        }
        (found, best_type)
    }

    /// The CPU closest to `gpu` (fewest hops among the local ones).
    pub fn local_cpu(&self, topo: &Topology, gpu: usize) -> Option<usize> {
        let (cpus, _) = self.local(topo, gpu, NodeKind::Cpu);
        cpus.into_iter()
            .min_by_key(|&c| self.get(gpu, c).map_or(usize::MAX, |p| p.hops.len()))
    }

    /// The NET NCCL gives `gpu` for channel `channel` (`ncclTopoGetLocalNet`, AUTO policy):
    /// GPUs sharing the same closest NICs spread over them by device number.
    pub fn local_net(&self, topo: &Topology, gpu: usize, channel: usize) -> Option<usize> {
        let (nets, _) = self.local(topo, gpu, NodeKind::Net);
        let first = *nets.first()?;
        let (gpus, _) = self.local(topo, first, NodeKind::Gpu);
        let ngpus = gpus.len().max(1);
        let per_gpu = nets.len().div_ceil(ngpus).max(1);
        let dev = topo.nodes.get(gpu)?.gpu()?.dev;
        let mut net = usize::try_from(dev)
            .unwrap_or(0)
            .checked_rem(ngpus)
            .unwrap_or(0);
        if nets.len().is_power_of_two() {
            net = mirror_bits(net, nets.len());
        }
        net = net.saturating_add(channel.checked_rem(per_gpu).unwrap_or(0));
        nets.get(net.checked_rem(nets.len())?).copied()
    }

    fn compute_local_gpu(&self, topo: &Topology, net: usize) -> Option<usize> {
        let (gpus, _) = self.local(topo, net, NodeKind::Gpu);
        for c in 0..64 {
            for &g in &gpus {
                if self.local_net(topo, g, c) == Some(net) {
                    return Some(g);
                }
            }
        }
        None
    }

    /// Whether GPUs `a` and `b` may use P2P (NCCL's `ncclTopoCheckP2p`, without the NVML
    /// query the driver adds): the path type is within the P2P level.
    pub fn p2p_allowed(&self, topo: &Topology, a: usize, b: usize, opts: &PathOptions) -> bool {
        self.kind(a, b) <= p2p_level(topo, opts)
    }

    /// Whether P2P between `a` and `b` should use reads (NVLink between two SM80 GPUs).
    pub fn p2p_read(&self, topo: &Topology, a: usize, b: usize) -> bool {
        let sm = |i: usize| topo.nodes.get(i).and_then(|n| n.gpu()).map(|g| g.sm);
        self.kind(a, b) == PathType::Nvl && sm(a) == Some(80) && sm(b) == Some(80)
    }

    /// GPUDirect RDMA between `gpu` and `net` (NCCL's `ncclTopoCheckGdr`); `read` is the
    /// send direction (the NIC reads GPU memory).
    pub fn gdr_mode(
        &self,
        topo: &Topology,
        gpu: usize,
        net: usize,
        read: bool,
        opts: &PathOptions,
    ) -> GdrMode {
        let (Some(g), Some(n)) = (
            topo.nodes.get(gpu).and_then(|x| x.gpu()),
            topo.nodes.get(net).and_then(|x| x.net()),
        ) else {
            return GdrMode::Disabled;
        };
        if !n.gdr || !g.gdr {
            return GdrMode::Disabled;
        }
        if read {
            match opts.gdr_read {
                Some(false) => return GdrMode::Disabled,
                Some(true) => {}
                None if g.sm < 80 => {
                    // Before Ampere, GDR reads compete with other PCI flows: allow them only
                    // when the GPU has an NVLink peer (or is alone).
                    let gpus = topo.of_kind(NodeKind::Gpu);
                    let nvlink = gpus.len() == 1
                        || gpus
                            .iter()
                            .any(|&o| o != gpu && self.kind(gpu, o) == PathType::Nvl);
                    if !nvlink {
                        return GdrMode::Disabled;
                    }
                }
                None => {}
            }
        }
        let level = opts.gdr_level.unwrap_or(if opts.gdr_c2c {
            PathType::P2c
        } else {
            PathType::Pxb
        });
        let mut via = gpu;
        let mut distance = self.kind(gpu, net);
        if distance == PathType::Pxn {
            // Use the relay GPU's distance.
            if let Some(relay) = self.pxn_relay(topo, gpu, net) {
                via = relay;
                distance = self.kind(relay, net);
            }
        }
        if distance > level {
            return GdrMode::Disabled;
        }
        match self.local_cpu(topo, via) {
            Some(c) if self.kind(via, c) == PathType::C2c && distance != PathType::P2c => {
                GdrMode::Pci
            }
            _ => GdrMode::Default,
        }
    }

    /// The intermediate GPU of a PXN path from `gpu` to `net` (the GPU it crosses).
    pub fn pxn_relay(&self, topo: &Topology, gpu: usize, net: usize) -> Option<usize> {
        let path = self.get(gpu, net)?;
        if path.kind != PathType::Pxn {
            return Some(gpu);
        }
        path.hops
            .iter()
            .skip(1)
            .map(|h| h.node)
            .find(|&n| topo.nodes.get(n).is_some_and(|x| x.kind == NodeKind::Gpu))
    }

    /// Replaces path src -> dst with src -> via -> dst (NCCL's `addInterStep`).
    fn add_inter_step(&mut self, via: usize, src: usize, dst: usize, via_is_gpu: bool) {
        let (Some(first), Some(second)) =
            (self.get(src, via).cloned(), self.get(via, dst).cloned())
        else {
            return;
        };
        let kind = if via_is_gpu {
            PathType::Pxn
        } else {
            merge_path_type(first.kind, second.kind)
        };
        let mut hops = first.hops;
        hops.extend_from_slice(&second.hops);
        let bw = first.bw.min(second.bw);
        if let Some(p) = self.get_mut(src, dst) {
            *p = Path { kind, bw, hops };
        }
    }
}

fn p2p_level(topo: &Topology, opts: &PathOptions) -> PathType {
    if let Some(l) = opts.p2p_level {
        return l;
    }
    let gpus = topo.of_kind(NodeKind::Gpu).len();
    match topo.cpu_kind() {
        Some((CpuArch::X86, CpuVendor::Amd)) if gpus <= 2 => PathType::Sys,
        _ => PathType::Pxb,
    }
}

/// Computes all paths of `topo` (NCCL's `ncclTopoComputePaths` for one process that sees
/// every GPU: no peer-info based trimming).
pub fn compute_paths(topo: &Topology, opts: &PathOptions) -> Paths {
    let n = topo.nodes.len();
    let mut paths = Paths {
        to: vec![None; n],
        net_local_gpu: vec![None; n],
    };
    for (i, node) in topo.nodes.iter().enumerate() {
        if is_target(node.kind) {
            if let Some(slot) = paths.to.get_mut(i) {
                *slot = Some(bfs(topo, i, opts));
            }
        }
    }
    let gpus = topo.of_kind(NodeKind::Gpu);
    let nets = topo.of_kind(NodeKind::Net);

    // GPUs too far apart for P2P talk through the CPU next to the destination.
    for &g in &gpus {
        for &p in &gpus {
            if !paths.p2p_allowed(topo, p, g, opts) {
                if let Some(cpu) = paths.local_cpu(topo, g) {
                    paths.add_inter_step(cpu, p, g, false);
                }
            }
        }
    }

    // C2C to the CPU then PCIe to the NIC is P2C.
    for &g in &gpus {
        let Some(c) = paths.local_cpu(topo, g) else {
            continue;
        };
        let (local_nets, _) = paths.local(topo, g, NodeKind::Net);
        for net in local_nets {
            if merge_path_type(paths.kind(g, c), paths.kind(net, c)) == PathType::P2c {
                if let Some(p) = paths.get_mut(g, net) {
                    p.kind = p.kind.min(PathType::P2c);
                }
                if let Some(p) = paths.get_mut(net, g) {
                    p.kind = p.kind.min(PathType::P2c);
                }
            }
        }
    }

    for &net in &nets {
        let local = paths.compute_local_gpu(topo, net);
        if let Some(slot) = paths.net_local_gpu.get_mut(net) {
            *slot = local;
        }
    }

    for &net in &nets {
        for &g in &gpus {
            if !opts.pxn_disable {
                if let Some(peer) = paths.net_local_gpu(net) {
                    let pxn_type = if opts.pxn_c2c {
                        PathType::P2c
                    } else {
                        PathType::Pxb
                    };
                    let same_host =
                        topo.nodes.get(peer).map(|x| x.host) == topo.nodes.get(g).map(|x| x.host);
                    if peer != g
                        && paths.kind(peer, net) <= pxn_type
                        && paths.gdr_mode(topo, peer, net, true, opts) != GdrMode::Disabled
                        && paths.kind(peer, g) <= PathType::Nvl
                        && same_host
                        && (paths.bw(peer, net) > paths.bw(g, net)
                            || paths.kind(g, net) > PathType::Pxn)
                    {
                        paths.add_inter_step(peer, g, net, true);
                    }
                }
            }
            if paths.kind(g, net) < PathType::Phb
                && paths.gdr_mode(topo, g, net, false, opts) == GdrMode::Disabled
            {
                if let Some(cpu) = paths.local_cpu(topo, g) {
                    paths.add_inter_step(cpu, net, g, false);
                    paths.add_inter_step(cpu, g, net, false);
                }
            }
        }
    }
    paths
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn merge_and_mirror_helpers() {
        assert_eq!(merge_path_type(PathType::C2c, PathType::Phb), PathType::P2c);
        assert_eq!(merge_path_type(PathType::Phb, PathType::C2c), PathType::P2c);
        assert_eq!(merge_path_type(PathType::Nvl, PathType::Sys), PathType::Sys);
        assert_eq!(mirror_bits(1, 8), 4);
        assert_eq!(mirror_bits(3, 8), 6);
        assert_eq!(mirror_bits(0, 4), 0);
        assert_eq!(mirror_bits(1, 2), 1);
    }
}
