//! Channel search over a topology: NCCL's ring, tree and NVLS graph search
//! (`src/graph/search.cc`), re-derived.
//!
//! A search places, channel after channel, an ordering of the GPUs (and for multi-node
//! communicators the NIC each channel enters and leaves through) such that every path it
//! uses still has `bw` GB/s left: each placed hop subtracts `bw` from every link on its
//! path, and backtracking gives it back. [`compute`] runs NCCL's schedule around that
//! depth-first search: start at the highest speed of the architecture's ladder the
//! hardware can carry, relax (different channels, a simpler tree, farther path types,
//! cross-NIC, lower speed) until something is found, duplicate channels when their
//! bandwidth is high, then try to raise the speed again. Every search step is counted
//! against a budget, so a search ends in bounded time and gives the same answer each run.
//! When nothing fits, it falls back to NCCL's "simple order" and says so in
//! [`Graph::fallback`].
//!
//! - [`trees`]: NCCL's double binary tree across nodes and the `Trees [c] ...` lines.
//! - [`graph_xml`]: NCCL's graph XML (`NCCL_GRAPH_DUMP_FILE` / `NCCL_GRAPH_FILE`).

pub mod graph_xml;
pub mod trees;

use crate::topo::model::{CpuArch, CpuVendor, LinkType, NodeKind, PathType, Topology};
use crate::topo::paths::Paths;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;

/// NCCL's `MAXCHANNELS`: the channels a search may find are the channels kernels can hold.
pub const MAX_CHANNELS: usize = crate::abi::MAX_CHANNELS as usize;
/// NCCL's `NCCL_MAX_NVLS_ARITY`.
pub const MAX_NVLS_ARITY: usize = 32;

/// Total step budget of one [`compute`] (NCCL's `NCCL_SEARCH_GLOBAL_TIMEOUT`).
pub const GLOBAL_STEP_BUDGET: i64 = 1 << 19;
const STEPS_PER_SEARCH: i64 = 1 << 14;
const STEPS_SAME_CHANNELS: i64 = 1 << 8;
const STEPS_PCI_ORDER: i64 = 1 << 10;

const SPEED_INTRA: [f32; 13] = [
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];
const SPEED_INTER: [f32; 19] = [
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
    0.24, 0.12,
];
const SM90_SPEED_INTRA: [f32; 11] = [
    60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
];
const SM90_SPEED_INTER: [f32; 17] = [
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
    0.12,
];
const SM100_SPEED_INTRA: [f32; 12] = [
    90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
];
const SM100_SPEED_INTER: [f32; 20] = [
    96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
    2.4, 1.2, 0.24, 0.12,
];

/// The bandwidth ladder NCCL tries, by smallest compute capability and whether the
/// communicator spans hosts.
pub fn speed_ladder(sm_min: u32, inter: bool) -> &'static [f32] {
    match (sm_min, inter) {
        (100.., false) => &SM100_SPEED_INTRA,
        (100.., true) => &SM100_SPEED_INTER,
        (90.., false) => &SM90_SPEED_INTRA,
        (90.., true) => &SM90_SPEED_INTER,
        (_, false) => &SPEED_INTRA,
        (_, true) => &SPEED_INTER,
    }
}

/// What a graph connects (NCCL's `NCCL_TOPO_PATTERN_*`, same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Tree; NIC traffic split over two GPUs (parent + child 0 on the first, child 1 on the second).
    BalancedTree = 1,
    /// Tree; parent on the first GPU, children on the second.
    SplitTree = 2,
    /// Tree; all NIC traffic on one GPU.
    Tree = 3,
    Ring = 4,
    Nvls = 5,
    CollnetDirect = 6,
}

impl Pattern {
    pub fn from_number(n: i64) -> Option<Pattern> {
        Some(match n {
            1 => Pattern::BalancedTree,
            2 => Pattern::SplitTree,
            3 => Pattern::Tree,
            4 => Pattern::Ring,
            5 => Pattern::Nvls,
            6 => Pattern::CollnetDirect,
            _ => return None,
        })
    }

    fn is_tree(self) -> bool {
        matches!(
            self,
            Pattern::BalancedTree | Pattern::Tree | Pattern::SplitTree
        )
    }
}

/// Why a search ended on NCCL's fallback instead of a searched graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// No ordering carried even the lowest speed: GPUs in index order, 0.1 GB/s, type SYS.
    SimpleOrder,
    /// The pattern needs hardware that is absent (NVLS without NVSwitch or before SM90, no
    /// GPU at all), or is not searched by weft (CollNet Direct, which needs a SHARP-capable
    /// network).
    Unsupported,
}

/// One channel: GPU ranks in order, and for multi-node graphs the NET dev it enters through
/// and the one it leaves through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub gpus: Vec<i32>,
    pub nets: Option<(i32, i32)>,
}

/// The result of a search (NCCL's `ncclTopoGraph`).
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// 0 ring, 1 tree, 2 collnet chain, 3 NVLS, 4 collnet direct.
    pub id: u32,
    pub pattern: Pattern,
    pub cross_nic: u8,
    pub bw_intra: f32,
    pub bw_inter: f32,
    pub latency_inter: f32,
    pub type_intra: PathType,
    pub type_inter: PathType,
    pub same_channels: bool,
    pub channels: Vec<Channel>,
    /// Set when the graph is NCCL's fallback rather than a search result.
    pub fallback: Option<Fallback>,
    /// Whether some search ran out of its step budget (the result may not be the best).
    pub budget_exhausted: bool,
}

impl Graph {
    /// A graph with no channel, marked [`Fallback::Unsupported`]: what is dumped for a
    /// pattern the hardware cannot run or weft does not search, as NCCL dumps it.
    pub fn unsupported(id: u32, pattern: Pattern) -> Graph {
        Graph {
            id,
            pattern,
            cross_nic: 0,
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathType::Loc,
            type_inter: PathType::Loc,
            same_channels: false,
            channels: Vec::new(),
            fallback: Some(Fallback::Unsupported),
            budget_exhausted: false,
        }
    }

    pub fn nchannels(&self) -> usize {
        self.channels.len()
    }

    /// The summary line NCCL prints at INFO level (`ncclTopoPrintGraph`).
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "Pattern {}, crossNic {}, nChannels {}, bw {:.6}/{:.6}, type {}/{}, sameChannels {}",
            self.pattern as u32,
            self.cross_nic,
            self.nchannels(),
            self.bw_intra,
            self.bw_inter,
            self.type_intra,
            self.type_inter,
            u8::from(self.same_channels)
        );
        s
    }
}

/// Search parameters NCCL takes from the communicator and the environment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchOptions {
    /// The communicator spans several hosts (NCCL's `system->inter`): channels enter and
    /// leave each host through a NIC.
    pub inter: bool,
    pub min_channels: usize,
    pub max_channels: usize,
    /// `NCCL_CROSS_NIC` (0, 1, or 2 = try without then with).
    pub cross_nic: u8,
    /// Total step budget; [`GLOBAL_STEP_BUDGET`] is NCCL's.
    pub step_budget: i64,
}

impl SearchOptions {
    /// NCCL's settings for the ring graph.
    pub fn ring(inter: bool) -> Self {
        SearchOptions {
            inter,
            min_channels: 1,
            max_channels: MAX_CHANNELS / 2,
            cross_nic: 2,
            step_budget: GLOBAL_STEP_BUDGET,
        }
    }

    /// NCCL's settings for the tree graph, which must have as many channels as the ring.
    pub fn tree(inter: bool, ring_channels: usize) -> Self {
        SearchOptions {
            min_channels: ring_channels,
            max_channels: ring_channels,
            ..SearchOptions::ring(inter)
        }
    }

    /// NCCL's settings for the NVLS graph.
    pub fn nvls(inter: bool) -> Self {
        SearchOptions {
            min_channels: 1,
            max_channels: MAX_CHANNELS,
            ..SearchOptions::ring(inter)
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Search,
    Pci,
    Replay,
}

/// Working copy of a graph during the search.
#[derive(Clone)]
struct Work {
    pattern: Pattern,
    cross_nic: u8,
    min_channels: usize,
    max_channels: usize,
    nchannels: usize,
    bw_intra: f32,
    bw_inter: f32,
    latency_inter: f32,
    type_intra: PathType,
    type_inter: PathType,
    same_channels: bool,
    nhops: f32,
    /// `intra[c * ngpus + i]`: GPU index (into `State::gpus`) at position i of channel c.
    intra: Vec<usize>,
    /// `inter[c * 2 + {0, 1}]`: NET index (into `State::nets`) in and out of channel c.
    inter: Vec<usize>,
}

struct State<'a> {
    topo: &'a Topology,
    paths: &'a Paths,
    /// Remaining bandwidth of every link, `bw[node][link]`.
    bw: Vec<Vec<f32>>,
    gpus: Vec<usize>,
    nets: Vec<usize>,
    nvs: Option<usize>,
    net_bw: Vec<f32>,
    used: Vec<u64>,
    inter: bool,
    intel: bool,
}

fn round3(x: f32) -> f32 {
    // NCCL rounds after every subtraction so that float error cannot make a link that
    // should be exactly full look a hair short.
    libm_round(x * 1000.0) / 1000.0
}

fn libm_round(x: f32) -> f32 {
    // core has no f32::round without std; values here are far below 2^23.
    let t = x as i64 as f32;
    let d = x - t;
    if d >= 0.5 {
        t + 1.0
    } else if d <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

impl State<'_> {
    fn kind_of(&self, node: usize) -> Option<NodeKind> {
        self.topo.nodes.get(node).map(|n| n.kind)
    }

    /// Subtracts `bw` along the first `max` hops of the path `from -> to`; returns how many
    /// hops had room (all of them on success).
    fn follow_bw(&mut self, from: usize, to: usize, max: usize, bw: f32) -> usize {
        let Some(path) = self.paths.get(from, to) else {
            return 0;
        };
        let start_is_gpu = self.kind_of(from) == Some(NodeKind::Gpu);
        let mut pci_bw = bw;
        if path.kind == PathType::Phb && start_is_gpu && self.intel {
            // Intel root complexes split GPU P2P traffic into 64-byte TLPs: 20% overhead.
            let crosses_cpu = path.hops.iter().any(|h| {
                let to = self
                    .topo
                    .nodes
                    .get(h.node)
                    .and_then(|n| n.links.get(h.link))
                    .map(|l| l.to);
                to.and_then(|t| self.kind_of(t)) == Some(NodeKind::Cpu)
            });
            if crosses_cpu {
                pci_bw = bw * 6.0 / 5.0;
            }
        }
        for (step, hop) in path.hops.iter().take(max).enumerate() {
            let Some(link) = self
                .topo
                .nodes
                .get(hop.node)
                .and_then(|n| n.links.get(hop.link))
                .copied()
            else {
                return step;
            };
            let fw = if link.kind == LinkType::Pci {
                pci_bw
            } else {
                bw
            };
            // Pre-Volta-class GPUs (< SM80) pay 1/8 of the traffic in the reverse direction
            // when written to by a non-GPU.
            let mut rev = 0.0f32;
            let rem_gpu_old = self
                .topo
                .nodes
                .get(link.to)
                .and_then(|n| n.gpu())
                .is_some_and(|g| g.sm < 80)
                && !start_is_gpu;
            if rem_gpu_old {
                rev = fw / 8.0;
            }
            let rem_power_nvl = link.kind == LinkType::Nvl
                && self
                    .topo
                    .nodes
                    .get(link.to)
                    .and_then(|n| n.cpu())
                    .is_some_and(|c| c.arch_kind() == CpuArch::Power);
            if rem_power_nvl {
                rev += fw;
            }
            let rev_link = if rev != 0.0 {
                self.topo
                    .nodes
                    .get(link.to)
                    .and_then(|n| n.link_to(hop.node, link.kind))
            } else {
                None
            };
            let Some(fwd) = self.bw.get(hop.node).and_then(|l| l.get(hop.link)).copied() else {
                return step;
            };
            let rev_left = rev_link
                .and_then(|r| self.bw.get(link.to).and_then(|l| l.get(r)))
                .copied();
            if fwd < fw || (rev != 0.0 && rev_left.is_some_and(|r| r < rev)) {
                return step;
            }
            if let Some(slot) = self.bw.get_mut(hop.node).and_then(|l| l.get_mut(hop.link)) {
                *slot = round3(*slot - fw);
            }
            if let Some(r) = rev_link {
                if let Some(slot) = self.bw.get_mut(link.to).and_then(|l| l.get_mut(r)) {
                    *slot = round3(*slot - rev);
                }
            }
        }
        max
    }

    /// Tries to use path `from -> to` at the graph's bandwidth (`mult` 1 to take, -1 to give
    /// back, 2 for an NVLS head). Returns whether it fit.
    fn follow(&mut self, w: &mut Work, from: Option<usize>, to: usize, mult: f32) -> bool {
        let Some(from) = from else { return true };
        let (Some(path), Some(rev)) = (self.paths.get(from, to), self.paths.get(to, from)) else {
            return false;
        };
        let (kind, rev_kind, count) = (path.kind, rev.kind, path.hops.len());
        let is_intra = |k: Option<NodeKind>| matches!(k, Some(NodeKind::Gpu) | Some(NodeKind::Nvs));
        let intra = is_intra(self.kind_of(from)) && is_intra(self.kind_of(to));
        let (bw, limit) = if intra {
            (w.bw_intra, w.type_intra)
        } else {
            (w.bw_inter, w.type_inter)
        };
        if kind >= PathType::Dis {
            return false;
        }
        if mult > 0.0 && kind > limit {
            return false;
        }
        if mult > 0.0 && w.pattern.is_tree() && rev_kind > limit {
            return false;
        }
        let bw = bw * mult;
        let done = self.follow_bw(from, to, count, bw);
        if done < count {
            self.follow_bw(from, to, done, -bw);
            return false;
        }
        w.nhops += mult * count as f32;
        true
    }
}

struct Searcher<'a, 'b> {
    st: &'b mut State<'a>,
    best: Work,
    time: i64,
}

impl Searcher<'_, '_> {
    fn ngpus(&self) -> usize {
        self.st.gpus.len()
    }

    fn flag(w: &Work) -> u64 {
        1u64.checked_shl(u32::try_from(w.nchannels).unwrap_or(u32::MAX))
            .unwrap_or(0)
    }

    fn intra_at(w: &Work, c: usize, i: usize, ngpus: usize) -> Option<usize> {
        w.intra.get(c.checked_mul(ngpus)?.checked_add(i)?).copied()
    }

    fn set_intra(w: &mut Work, c: usize, i: usize, ngpus: usize, g: usize) {
        let Some(idx) = c.checked_mul(ngpus).and_then(|x| x.checked_add(i)) else {
            return;
        };
        if w.intra.len() <= idx {
            w.intra.resize(idx.saturating_add(1), 0);
        }
        if let Some(slot) = w.intra.get_mut(idx) {
            *slot = g;
        }
    }

    fn set_inter(w: &mut Work, c: usize, which: usize, n: usize) {
        let Some(idx) = c.checked_mul(2).and_then(|x| x.checked_add(which)) else {
            return;
        };
        if w.inter.len() <= idx {
            w.inter.resize(idx.saturating_add(1), 0);
        }
        if let Some(slot) = w.inter.get_mut(idx) {
            *slot = n;
        }
    }

    fn inter_at(w: &Work, c: usize, which: usize) -> Option<usize> {
        w.inter.get(c.checked_mul(2)?.checked_add(which)?).copied()
    }

    /// NCCL's `ncclTopoCompareGraphs`: is `w` better than the best so far?
    fn better(&self, w: &Work) -> bool {
        let r = &self.best;
        if w.nchannels < w.min_channels {
            return false;
        }
        if w.pattern == Pattern::Nvls {
            return (w.nchannels > r.nchannels && w.nchannels <= self.ngpus())
                || (w.nchannels as f32) * w.bw_inter > (r.nchannels as f32) * r.bw_inter;
        }
        let (a, b) = (
            (w.nchannels as f32) * w.bw_intra,
            (r.nchannels as f32) * r.bw_intra,
        );
        if a > b {
            return true;
        }
        if a < b {
            return false;
        }
        w.pattern == r.pattern && w.cross_nic == r.cross_nic && w.nhops < r.nhops
    }

    // The arguments mirror the search state NCCL threads through its recursion.
    #[allow(clippy::too_many_arguments)]
    fn try_gpu(
        &mut self,
        w: &mut Work,
        step: usize,
        back_net: Option<usize>,
        back_first: Option<usize>,
        order: Order,
        from: Option<usize>,
        g: usize,
    ) {
        let Some(&gnode) = self.st.gpus.get(g) else {
            return;
        };
        if !self.st.follow(w, from, gnode, 1.0) {
            return;
        }
        let flag = Self::flag(w);
        if let Some(u) = self.st.used.get_mut(g) {
            *u ^= flag;
        }
        self.rec_gpu(w, Some(g), step, back_net, back_first, order);
        if let Some(u) = self.st.used.get_mut(g) {
            *u ^= flag;
        }
        self.st.follow(w, from, gnode, -1.0);
    }

    /// GPUs to try after `g`, best first (NCCL's `ncclTopoSearchNextGpuSort`).
    fn next_gpus(&self, w: &Work, g: usize, sort_net: i8) -> Vec<usize> {
        let ngpus = self.ngpus();
        let flag = Self::flag(w);
        let Some(&gnode) = self.st.gpus.get(g) else {
            return Vec::new();
        };
        let net_node = if sort_net != 0 {
            Self::inter_at(w, w.nchannels, 0).and_then(|n| self.st.nets.get(n).copied())
        } else {
            None
        };
        // (inter bw, inter pci bw, -inter hops, intra bw, -intra hops, -start) sorted descending.
        let mut scored: Vec<(usize, [f32; 6])> = Vec::new();
        for i in 1..ngpus {
            let Some(cand) = g.checked_add(i).and_then(|x| x.checked_rem(ngpus)) else {
                continue;
            };
            let Some(&cnode) = self.st.gpus.get(cand) else {
                continue;
            };
            let Some(p) = self.st.paths.get(gnode, cnode) else {
                continue;
            };
            if p.hops.is_empty() || self.st.used.get(cand).is_some_and(|u| u & flag != 0) {
                continue;
            }
            let mut s = [0.0f32; 6];
            if let Some(net) = net_node {
                if let Some(np) = self.st.paths.get(net, cnode) {
                    s[0] = (np.bw as i64) as f32;
                    s[2] = -(np.hops.len() as f32);
                }
                // NCCL keeps these scores as ints.
                s[1] = (self.gpu_pci_bw(cnode) as i64) as f32;
            }
            s[3] = (p.bw as i64) as f32;
            s[4] = -(p.hops.len() as f32);
            s[5] = -(i as f32);
            scored.push((cand, s));
        }
        scored.sort_by(|a, b| {
            for (x, y) in b.1.iter().zip(a.1.iter()) {
                match x.partial_cmp(y) {
                    Some(core::cmp::Ordering::Equal) | None => continue,
                    Some(o) => return o,
                }
            }
            core::cmp::Ordering::Equal
        });
        let same_intra = scored.windows(2).all(|p| match p {
            [a, b] => a.1[3] == b.1[3] && a.1[4] == b.1[4],
            _ => true,
        });
        let mut next: Vec<usize> = if sort_net == -1 && same_intra {
            scored.iter().rev().map(|s| s.0).collect()
        } else {
            scored.iter().map(|s| s.0).collect()
        };
        if self.st.nvs.is_some() {
            // NVSwitches do best when each GPU talks to few peers: only neighbours by index.
            let prev = g
                .checked_add(ngpus)
                .and_then(|x| x.checked_sub(1))
                .and_then(|x| x.checked_rem(ngpus));
            let nxt = g.checked_add(1).and_then(|x| x.checked_rem(ngpus));
            let first: Vec<Option<usize>> = match w.pattern {
                Pattern::Ring => vec![nxt, prev],
                Pattern::SplitTree | Pattern::BalancedTree => vec![prev, nxt],
                _ => vec![nxt],
            };
            let mut first: Vec<usize> = first.into_iter().flatten().collect();
            first.dedup();
            let mut count = 0usize;
            for f in first {
                if let Some(pos) = next.iter().position(|&x| x == f) {
                    next.remove(pos);
                    next.insert(0, f);
                    count = count.saturating_add(1);
                }
            }
            next.truncate(count);
        }
        next
    }

    fn gpu_pci_bw(&self, gnode: usize) -> f32 {
        let Some(n) = self.st.topo.nodes.get(gnode) else {
            return -1.0;
        };
        for l in n.links.iter().filter(|l| l.kind == LinkType::Pci) {
            if let Some(back) = self
                .st
                .topo
                .nodes
                .get(l.to)
                .and_then(|p| p.links.iter().find(|b| b.to == gnode))
            {
                return l.bw.min(back.bw);
            }
        }
        -1.0
    }

    fn rec_gpu(
        &mut self,
        w: &mut Work,
        g: Option<usize>,
        step: usize,
        back_net: Option<usize>,
        back_first: Option<usize>,
        order: Order,
    ) {
        if self.time <= 0 {
            return;
        }
        self.time = self.time.saturating_sub(1);
        let ngpus = self.ngpus();
        if step == ngpus {
            w.nchannels = w.nchannels.saturating_add(1);
            if self.better(w) {
                self.best = w.clone();
                if w.nchannels == w.max_channels {
                    self.time = -1;
                }
            }
            if w.nchannels < w.max_channels {
                self.rec(w);
            }
            w.nchannels = w.nchannels.saturating_sub(1);
            return;
        }
        let Some(g) = g else { return };
        Self::set_intra(w, w.nchannels, step, ngpus, g);
        if Some(step) == back_net {
            if !self.st.inter {
                return;
            }
            let Some(start) = Self::inter_at(w, w.nchannels, 0) else {
                return;
            };
            let candidates = self.select_nets(Some(w.type_inter), Some(g));
            for n in candidates {
                if !self.check_net(w, start, n, step) {
                    continue;
                }
                let (Some(&gnode), Some(&nnode)) = (self.st.gpus.get(g), self.st.nets.get(n))
                else {
                    continue;
                };
                let saved = w.bw_inter;
                let mut next_back = None;
                if w.pattern == Pattern::BalancedTree {
                    if step == 0 {
                        next_back = Some(1);
                    }
                    w.bw_inter /= 2.0;
                }
                let ok = self.st.follow(w, Some(gnode), nnode, 1.0);
                w.bw_inter = saved;
                if ok {
                    Self::set_inter(w, w.nchannels, 1, n);
                    self.rec_gpu(w, Some(g), step, next_back, back_first, order);
                    if w.pattern == Pattern::BalancedTree {
                        w.bw_inter /= 2.0;
                    }
                    self.st.follow(w, Some(gnode), nnode, -1.0);
                    w.bw_inter = saved;
                }
            }
        } else if w.pattern == Pattern::Nvls {
            self.try_nvls(w, g);
        } else if step.saturating_add(1) < ngpus {
            let next: Vec<usize> = match order {
                Order::Pci => vec![step.saturating_add(1)],
                Order::Replay => w
                    .nchannels
                    .checked_sub(1)
                    .and_then(|c| Self::intra_at(w, c, step.saturating_add(1), ngpus))
                    .into_iter()
                    .collect(),
                Order::Search => {
                    let sort_net = match back_net {
                        None => 0,
                        Some(b) if b == step.saturating_add(1) => 1,
                        Some(_) => -1,
                    };
                    self.next_gpus(w, g, sort_net)
                }
            };
            let from = self.st.gpus.get(g).copied();
            for n in next {
                self.try_gpu(
                    w,
                    step.saturating_add(1),
                    back_net,
                    back_first,
                    order,
                    from,
                    n,
                );
            }
        } else if Some(step) == back_first {
            let Some(first) = Self::intra_at(w, w.nchannels, 0, ngpus) else {
                return;
            };
            let (Some(&gnode), Some(&fnode)) = (self.st.gpus.get(g), self.st.gpus.get(first))
            else {
                return;
            };
            if self.st.follow(w, Some(gnode), fnode, 1.0) {
                self.rec_gpu(
                    w,
                    Some(first),
                    step.saturating_add(1),
                    back_net,
                    None,
                    order,
                );
                self.st.follow(w, Some(gnode), fnode, -1.0);
            }
        } else {
            self.rec_gpu(w, Some(g), ngpus, None, None, order);
        }
    }

    /// NVLS: GPU `head` pulls from the NVSwitch twice (reduce + broadcast) and every other
    /// GPU once, in both directions (NCCL's `ncclTopoSearchTryNvls`).
    fn try_nvls(&mut self, w: &mut Work, head: usize) {
        let Some(nvs) = self.st.nvs else { return };
        let gpus = self.st.gpus.clone();
        let mult = |d: usize| if d == head { 2.0 } else { 1.0 };
        let mut down = 0usize;
        let mut ok = true;
        for (d, &gnode) in gpus.iter().enumerate() {
            if !self.st.follow(w, Some(nvs), gnode, mult(d)) {
                ok = false;
                break;
            }
            down = d.saturating_add(1);
        }
        let mut up = 0usize;
        if ok {
            for (d, &gnode) in gpus.iter().enumerate() {
                if !self.st.follow(w, Some(gnode), nvs, mult(d)) {
                    ok = false;
                    break;
                }
                up = d.saturating_add(1);
            }
            if ok {
                let n = self.ngpus();
                self.rec_gpu(w, None, n, None, None, Order::Search);
            }
        }
        for (d, &gnode) in gpus.iter().enumerate().take(up) {
            self.st.follow(w, Some(gnode), nvs, -mult(d));
        }
        for (d, &gnode) in gpus.iter().enumerate().take(down) {
            self.st.follow(w, Some(nvs), gnode, -mult(d));
        }
    }

    /// NETs to try, preferred ones first (NCCL's `ncclTopoSelectNets`, channel-first order).
    fn select_nets(&self, type_inter: Option<PathType>, gpu: Option<usize>) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        let st = &self.st;
        for (gi, &gnode) in st.gpus.iter().enumerate() {
            if gpu.is_some_and(|x| x != gi) {
                continue;
            }
            let mut locals: Vec<usize> = Vec::new();
            for c in 0..MAX_CHANNELS {
                let Some(nn) = st.paths.local_net(st.topo, gnode, c) else {
                    break;
                };
                let Some(ni) = st.nets.iter().position(|&x| x == nn) else {
                    break;
                };
                if locals.first() == Some(&ni) {
                    break;
                }
                locals.push(ni);
            }
            for n in locals {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        let Some(type_inter) = type_inter else {
            return out;
        };
        for t in PathType::ALL.iter().take_while(|t| **t <= type_inter) {
            for (gi, &gnode) in st.gpus.iter().enumerate() {
                if gpu.is_some_and(|x| x != gi) {
                    continue;
                }
                for (ni, &nnode) in st.nets.iter().enumerate().take(MAX_CHANNELS) {
                    if st.paths.kind(gnode, nnode) == *t && !out.contains(&ni) {
                        out.push(ni);
                    }
                }
            }
        }
        out
    }

    /// NCCL's `ncclTopoSearchCheckNet`: may a channel that entered at `start` leave at `n`?
    fn check_net(&self, w: &Work, start: usize, n: usize, step: usize) -> bool {
        let (Some(&sn), Some(&nn)) = (self.st.nets.get(start), self.st.nets.get(n)) else {
            return false;
        };
        let (Some(s), Some(x)) = (
            self.st.topo.nodes.get(sn).and_then(|v| v.net()),
            self.st.topo.nodes.get(nn).and_then(|v| v.net()),
        ) else {
            return false;
        };
        if w.pattern == Pattern::Tree && n != start {
            return false;
        }
        if w.pattern == Pattern::Ring && w.cross_nic == 2 {
            let odd = w.nchannels & 1 == 1;
            if odd
                && w.nchannels
                    .checked_sub(1)
                    .and_then(|c| Self::inter_at(w, c, 0))
                    != Some(n)
            {
                return false;
            }
        } else if w.cross_nic == 0 && (x.guid != s.guid || x.port != s.port) {
            return false;
        }
        if w.pattern == Pattern::BalancedTree
            && step != 0
            && Self::inter_at(w, w.nchannels, 1) != Some(n)
        {
            return false;
        }
        true
    }

    fn rec_net(&mut self, w: &mut Work, back_net: Option<usize>, back_first: Option<usize>) {
        let bw = w.bw_inter;
        let nets = self.select_nets(Some(w.type_inter), None);
        let count = nets.len();
        let mut found = false;
        for i in 0..count {
            if matches!(w.pattern, Pattern::Nvls | Pattern::CollnetDirect) && found {
                break;
            }
            let Some(&n) = w
                .nchannels
                .checked_add(i)
                .and_then(|x| x.checked_rem(count))
                .and_then(|k| nets.get(k))
            else {
                continue;
            };
            let Some(&nnode) = self.st.nets.get(n) else {
                continue;
            };
            let Some(info) = self.st.topo.nodes.get(nnode).and_then(|v| v.net()).cloned() else {
                continue;
            };
            if self.st.net_bw.get(n).is_some_and(|b| *b < bw) {
                continue;
            }
            if w.pattern == Pattern::Ring
                && w.cross_nic == 2
                && w.nchannels & 1 == 1
                && w.nchannels
                    .checked_sub(1)
                    .and_then(|c| Self::inter_at(w, c, 1))
                    != Some(n)
            {
                continue;
            }
            Self::set_inter(w, w.nchannels, 0, n);
            w.latency_inter = info.latency;
            // All ports of one NIC share its bandwidth.
            let same_port: Vec<usize> = self
                .st
                .nets
                .iter()
                .enumerate()
                .filter(|(_, x)| {
                    self.st
                        .topo
                        .nodes
                        .get(**x)
                        .and_then(|v| v.net())
                        .is_some_and(|o| o.guid == info.guid && o.port == info.port)
                })
                .map(|(k, _)| k)
                .collect();
            for &k in &same_port {
                if let Some(b) = self.st.net_bw.get_mut(k) {
                    *b -= bw;
                }
            }
            if matches!(w.pattern, Pattern::Nvls | Pattern::CollnetDirect) {
                if w.nchannels < count {
                    if let Some(local) = self
                        .st
                        .paths
                        .net_local_gpu(nnode)
                        .and_then(|g| self.st.gpus.iter().position(|&x| x == g))
                    {
                        let ngpus = self.ngpus();
                        let dup =
                            (0..w.nchannels).any(|c| Self::intra_at(w, c, 0, ngpus) == Some(local));
                        if !dup {
                            self.try_gpu(
                                w,
                                0,
                                back_net,
                                back_first,
                                Order::Search,
                                Some(nnode),
                                local,
                            );
                            found = true;
                        }
                    }
                }
            } else if w.nchannels > 0 && w.same_channels {
                let ngpus = self.ngpus();
                if let Some(g) = Self::intra_at(w, w.nchannels.saturating_sub(1), 0, ngpus) {
                    self.try_gpu(w, 0, back_net, back_first, Order::Replay, Some(nnode), g);
                }
            } else {
                if w.nchannels == 0 && self.st.nvs.is_none() {
                    // PCI order first, as a reference, on its own small budget.
                    let saved = self.time;
                    self.time = STEPS_PCI_ORDER;
                    self.try_gpu(w, 0, back_net, back_first, Order::Pci, Some(nnode), 0);
                    let perfect = self.time == -1;
                    self.time = if perfect { -1 } else { saved };
                }
                let local = self
                    .st
                    .paths
                    .net_local_gpu(nnode)
                    .and_then(|g| self.st.gpus.iter().position(|&x| x == g));
                if let Some(l) = local {
                    self.try_gpu(w, 0, back_net, back_first, Order::Search, Some(nnode), l);
                }
                let (locals, kind) = self.st.paths.local(self.st.topo, nnode, NodeKind::Gpu);
                if kind != PathType::Dis {
                    for lg in locals {
                        let Some(gi) = self.st.gpus.iter().position(|&x| x == lg) else {
                            continue;
                        };
                        if Some(gi) == local {
                            continue;
                        }
                        self.try_gpu(w, 0, back_net, back_first, Order::Search, Some(nnode), gi);
                    }
                }
            }
            for &k in &same_port {
                if let Some(b) = self.st.net_bw.get_mut(k) {
                    *b += bw;
                }
            }
        }
    }

    fn rec(&mut self, w: &mut Work) {
        let ngpus = self.ngpus();
        let (back_net, back_first) = if self.st.inter {
            let b = match w.pattern {
                Pattern::Ring => ngpus.saturating_sub(1),
                Pattern::SplitTree => 1,
                _ => 0,
            };
            (Some(b), None)
        } else {
            (
                None,
                if w.pattern == Pattern::Ring {
                    Some(ngpus.saturating_sub(1))
                } else {
                    None
                },
            )
        };
        if self.st.inter {
            self.rec_net(w, back_net, back_first);
            return;
        }
        if w.pattern == Pattern::Nvls {
            let head = w.nchannels;
            self.try_gpu(w, 0, back_net, back_first, Order::Search, None, head);
            return;
        }
        if w.nchannels == 0 {
            self.try_gpu(w, 0, back_net, back_first, Order::Pci, None, 0);
        } else if let Some(g) = Self::intra_at(w, w.nchannels.saturating_sub(1), 0, ngpus) {
            self.try_gpu(w, 0, back_net, back_first, Order::Replay, None, g);
        }
        if !w.same_channels || w.nchannels == 0 {
            for g in 0..ngpus {
                self.try_gpu(w, 0, back_net, back_first, Order::Search, None, g);
            }
        }
    }
}

fn gpu_path_extremes(
    paths: &Paths,
    gpus: &[usize],
    targets: &[usize],
    skip_self: bool,
) -> (PathType, PathType) {
    let mut lo = PathType::Sys;
    let mut hi = PathType::Loc;
    for &g in gpus {
        for &t in targets {
            if skip_self && g == t {
                continue;
            }
            let k = paths.kind(g, t);
            lo = lo.min(k);
            hi = hi.max(k);
        }
    }
    (lo, hi)
}

/// Whether the GPUs form exactly two NVLink islands (NCCL's `ncclTopoSplitNvLink`).
fn split_nvlink(paths: &Paths, gpus: &[usize]) -> bool {
    let mut domain: Vec<usize> = (0..gpus.len()).collect();
    for (g, &a) in gpus.iter().enumerate() {
        let d = domain.get(g).copied().unwrap_or(g);
        for (p, &b) in gpus.iter().enumerate().skip(g.saturating_add(1)) {
            if paths.kind(a, b) == PathType::Nvl {
                if let Some(slot) = domain.get_mut(p) {
                    *slot = d;
                }
            }
        }
    }
    let mut counts = vec![0usize; gpus.len()];
    for &d in &domain {
        if let Some(c) = counts.get_mut(d) {
            *c = c.saturating_add(1);
        }
    }
    counts.iter().filter(|&&c| c > 1).count() == 2
}

/// NCCL's `ncclTopoDupChannels`: fast channels are split in two to use more SMs.
fn dup_channels(w: &mut Work, sm_min: u32, ngpus: usize) {
    if w.nchannels == 0 || w.pattern == Pattern::Nvls || w.bw_intra < 25.0 {
        return;
    }
    if sm_min > 80 && w.bw_intra < 50.0 && w.nchannels > 4 {
        return;
    }
    let dup = w.nchannels.saturating_mul(2).min(w.max_channels);
    let n = w.nchannels;
    for c in n..dup {
        let src = c.saturating_sub(n);
        for i in 0..ngpus {
            if let Some(g) = Searcher::intra_at(w, src, i, ngpus) {
                Searcher::set_intra(w, c, i, ngpus, g);
            }
        }
        for k in 0..2 {
            if let Some(x) = Searcher::inter_at(w, src, k) {
                Searcher::set_inter(w, c, k, x);
            }
        }
    }
    let div = dup.div_ceil(n.max(1)) as f32;
    w.bw_intra /= div;
    w.bw_inter /= div;
    w.nchannels = dup;
}

/// Per-channel bandwidth ceilings NCCL's search starts from (`ncclTopoSearchInit`):
/// the best path bandwidth from a GPU to another GPU (or to a NIC when `inter`), and the
/// largest total NVLink (or PCIe) bandwidth of a GPU.
pub fn system_bw(topo: &Topology, paths: &Paths, inter: bool) -> (f32, f32) {
    let gpus = topo.of_kind(NodeKind::Gpu);
    let nets = topo.of_kind(NodeKind::Net);
    let inter = inter && !nets.is_empty();
    let ngpus = gpus.len();
    // Per-channel ceilings: the best path bandwidth a GPU has, and its total NVLink (or PCI)
    // bandwidth (NCCL's `ncclTopoSearchInit`).
    if !inter && ngpus == 1 {
        (crate::topo::model::LOC_BW, crate::topo::model::LOC_BW)
    } else {
        let mut mb = 0.0f32;
        let mut tb = 0.0f32;
        for &g in &gpus {
            let targets = if inter { &nets } else { &gpus };
            for &t in targets {
                if let Some(p) = paths.get(g, t) {
                    if !p.hops.is_empty() {
                        mb = mb.max(p.bw);
                    }
                }
            }
            if let Some(n) = topo.nodes.get(g) {
                let nvl: f32 = n
                    .links
                    .iter()
                    .filter(|l| l.kind == LinkType::Nvl)
                    .map(|l| l.bw)
                    .sum();
                let pci = n
                    .links
                    .iter()
                    .filter(|l| l.kind == LinkType::Pci)
                    .map(|l| l.bw)
                    .next_back()
                    .unwrap_or(0.0);
                tb = tb.max(nvl.max(pci));
            }
        }
        (mb, tb)
    }
}

/// NCCL's `=== System : maxBw 370.8 totalBw 370.8 ===` line.
pub fn system_line(topo: &Topology, paths: &Paths, inter: bool) -> String {
    let (max_bw, total_bw) = system_bw(topo, paths, inter);
    let mut s = String::new();
    let _ = write!(
        s,
        "=== System : maxBw {max_bw:.1} totalBw {total_bw:.1} ==="
    );
    s
}

/// Runs NCCL's search for `pattern` (graph `id`) over `topo` with its `paths`.
pub fn compute(
    topo: &Topology,
    paths: &Paths,
    id: u32,
    pattern: Pattern,
    opts: &SearchOptions,
) -> Graph {
    let gpus = topo.of_kind(NodeKind::Gpu);
    let nets = topo.of_kind(NodeKind::Net);
    let nvs = topo.of_kind(NodeKind::Nvs).first().copied();
    let ngpus = gpus.len();
    let sm_min = topo.sm_range().map_or(0, |r| r.0);
    let inter = opts.inter && !nets.is_empty();
    let cpu_kind = topo.cpu_kind();
    let mut pattern = pattern;
    let cross_nic_param = if nets.len() > 1
        && matches!(
            pattern,
            Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree
        ) {
        opts.cross_nic
    } else {
        0
    };
    let mut min_channels = opts.min_channels.max(1);
    let mut max_channels = opts.max_channels.clamp(1, MAX_CHANNELS);

    if ngpus == 0 {
        return Graph::unsupported(id, pattern);
    }
    if pattern == Pattern::Nvls && (nvs.is_none() || sm_min < 90) {
        return Graph::unsupported(id, pattern);
    }
    if pattern == Pattern::Nvls {
        max_channels = max_channels.min(MAX_NVLS_ARITY).min(ngpus);
    }
    if pattern == Pattern::CollnetDirect {
        return Graph::unsupported(id, pattern);
    }
    if ngpus == 1 && pattern != Pattern::Ring {
        pattern = Pattern::Tree;
    }
    if !inter && pattern == Pattern::Nvls {
        min_channels = max_channels;
    }
    if pattern == Pattern::Ring
        && split_nvlink(paths, &gpus)
        && max_channels >= 2
        && min_channels == 1
    {
        min_channels = 2;
    }

    let (mut min_intra, mut max_intra) = (PathType::Loc, PathType::Sys);
    let (mut min_inter, mut max_inter) = (PathType::Pix, PathType::Sys);
    if ngpus > 1 {
        (min_intra, max_intra) = gpu_path_extremes(paths, &gpus, &gpus, true);
    }
    if inter {
        (min_inter, max_inter) = gpu_path_extremes(paths, &gpus, &nets, false);
        max_intra = max_inter;
    }
    if sm_min < 90 {
        max_inter = PathType::Sys;
    }

    let (max_bw, mut total_bw) = system_bw(topo, paths, inter);
    if ngpus > 1 && pattern != Pattern::Ring {
        total_bw *= ngpus as f32 / (ngpus.saturating_sub(1)) as f32;
    }

    let ladder = speed_ladder(sm_min, inter);
    let last = ladder.len().saturating_sub(1);
    let speed = |i: usize| ladder.get(i).copied().unwrap_or(0.0);
    let mut si = 0usize;
    while (speed(si) > max_bw || speed(si) * min_channels as f32 > total_bw) && si < last {
        si = si.saturating_add(1);
    }

    let intel = matches!(cpu_kind, Some((CpuArch::X86, CpuVendor::Intel)));
    let mut state = State {
        topo,
        paths,
        bw: topo
            .nodes
            .iter()
            .map(|n| n.links.iter().map(|l| l.bw).collect())
            .collect(),
        gpus: gpus.clone(),
        nets: nets.clone(),
        nvs,
        net_bw: nets
            .iter()
            .map(|&n| {
                topo.nodes
                    .get(n)
                    .and_then(|x| x.net())
                    .map_or(0.0, |x| x.bw())
            })
            .collect(),
        used: vec![0; ngpus],
        inter,
        intel,
    };
    let try_same = pattern != Pattern::Nvls;
    let blank = Work {
        pattern,
        cross_nic: u8::from(cross_nic_param == 1),
        min_channels,
        max_channels,
        nchannels: 0,
        bw_intra: 0.0,
        bw_inter: 0.0,
        latency_inter: 0.0,
        type_intra: min_intra,
        type_inter: min_inter,
        same_channels: try_same,
        nhops: 0.0,
        intra: Vec::new(),
        inter: Vec::new(),
    };
    let mut tmp = blank.clone();
    tmp.bw_intra = speed(si);
    tmp.bw_inter = speed(si);
    let mut best = blank.clone();
    best.nchannels = 0;
    let mut global = opts.step_budget;
    let mut pass = 1;
    let mut exhausted = false;

    loop {
        // One search at the current settings.
        let budget = if tmp.same_channels {
            STEPS_SAME_CHANNELS
        } else {
            STEPS_PER_SEARCH
        };
        tmp.nchannels = 0;
        global = global.saturating_sub(budget);
        let mut s = Searcher {
            st: &mut state,
            best: best.clone(),
            time: budget,
        };
        let mut w = tmp.clone();
        s.rec(&mut w);
        let time = s.time;
        best = s.best;
        if time == 0 {
            exhausted = true;
        }

        let mut done = time == -1 || (best.nchannels as f32) * best.bw_inter >= total_bw;
        if !done && pass == 1 {
            let cpu_amd = matches!(cpu_kind, Some((CpuArch::X86, CpuVendor::Amd)));
            if tmp.same_channels && !(cpu_amd && tmp.type_intra == PathType::Sys) {
                tmp.same_channels = false;
                continue;
            }
            tmp.same_channels = try_same;
            global = global.saturating_add(time.max(0));
            if global < 0 && best.nchannels > 0 {
                done = true;
            }
            if !done {
                if sm_min >= 90 && tmp.pattern == Pattern::BalancedTree {
                    tmp.pattern = Pattern::Tree;
                    continue;
                }
                tmp.pattern = pattern;
                let max_i = if inter { tmp.type_inter } else { max_intra };
                if tmp.type_intra < max_i
                    && (best.nchannels == 0 || tmp.type_intra < best.type_intra)
                {
                    tmp.type_intra = tmp.type_intra.next();
                    if tmp.type_intra < PathType::Dis {
                        continue;
                    }
                }
                tmp.type_intra = min_intra;
                if inter
                    && tmp.type_inter < max_inter
                    && (best.nchannels == 0
                        || tmp.type_inter < best.type_inter
                        || tmp.type_inter < PathType::Pxn)
                {
                    tmp.type_inter = tmp.type_inter.next();
                    if tmp.type_inter < PathType::Dis {
                        continue;
                    }
                }
                tmp.type_inter = min_inter;
                if cross_nic_param == 2
                    && tmp.cross_nic == 0
                    && matches!(pattern, Pattern::Ring | Pattern::BalancedTree)
                {
                    tmp.cross_nic = 2;
                    continue;
                }
                tmp.cross_nic = u8::from(cross_nic_param == 1);
                if si < last
                    && (best.nchannels == 0 || speed(si.saturating_add(1)) / best.bw_inter > 0.49)
                {
                    si = si.saturating_add(1);
                    tmp.bw_intra = speed(si);
                    tmp.bw_inter = speed(si);
                    continue;
                }
                si = 0;
                while speed(si) > max_bw && si < last {
                    si = si.saturating_add(1);
                }
                tmp.bw_intra = speed(si);
                tmp.bw_inter = speed(si);
            }
        }
        // Pass 1 is over (solution or not): duplicate, then see whether faster fits.
        let mut time_now = time;
        if pass == 1 {
            time_now = -1;
            dup_channels(&mut best, sm_min, ngpus);
            tmp = best.clone();
            si = 0;
            while speed(si) > best.bw_inter && si < last {
                si = si.saturating_add(1);
            }
            tmp.bw_intra = speed(si);
            tmp.bw_inter = speed(si);
            tmp.min_channels = best.nchannels;
            pass = 2;
        }
        if time_now != 0 && si > 0 && best.nchannels > 0 && global > 0 {
            if pattern == Pattern::Ring {
                si = si.saturating_sub(1);
                tmp.bw_intra = speed(si);
                tmp.bw_inter = speed(si);
                continue;
            } else if pattern == Pattern::Nvls
                && tmp.bw_inter == best.bw_inter
                && tmp.bw_inter < tmp.bw_intra * 2.0
            {
                tmp.min_channels = best.nchannels;
                tmp.max_channels = best.nchannels;
                si = si.saturating_sub(1);
                tmp.bw_inter = speed(si);
                continue;
            } else if tmp.bw_intra == best.bw_intra && tmp.bw_intra < tmp.bw_inter * 2.0 {
                si = si.saturating_sub(1);
                tmp.bw_intra = speed(si);
                continue;
            }
        }
        break;
    }

    let mut fallback = None;
    if best.nchannels == 0 && pattern != Pattern::Nvls {
        // NCCL's last resort: GPUs in index order over whatever path there is.
        fallback = Some(Fallback::SimpleOrder);
        best = blank;
        best.nchannels = 1;
        best.intra = (0..ngpus).collect();
        best.bw_intra = 0.1;
        best.type_intra = PathType::Sys;
        let s = Searcher {
            st: &mut state,
            best: best.clone(),
            time: 0,
        };
        let first = s.select_nets(None, Some(0)).first().copied();
        let lastn = s
            .select_nets(None, Some(ngpus.saturating_sub(1)))
            .first()
            .copied();
        if let (true, Some(a), Some(b)) = (inter, first, lastn) {
            best.inter = vec![a, b];
            best.bw_inter = 0.1;
            best.type_inter = PathType::Sys;
        } else {
            best.bw_inter = 0.0;
            best.type_inter = PathType::Dis;
        }
    }

    let rank_of = |g: usize| {
        gpus.get(g)
            .and_then(|&n| topo.nodes.get(n))
            .and_then(|n| n.gpu())
            .map_or(-1, |x| x.rank)
    };
    let dev_of = |k: usize| {
        nets.get(k)
            .and_then(|&n| topo.nodes.get(n))
            .and_then(|n| n.net())
            .map_or(-1, |x| x.dev)
    };
    let mut channels = Vec::with_capacity(best.nchannels);
    for c in 0..best.nchannels {
        let len = if pattern == Pattern::Nvls { 1 } else { ngpus };
        let gs: Vec<i32> = (0..len)
            .filter_map(|i| Searcher::intra_at(&best, c, i, ngpus))
            .map(rank_of)
            .collect();
        let nets_c = if inter && (fallback.is_none() || best.inter.len() >= 2) {
            match (
                Searcher::inter_at(&best, c, 0),
                Searcher::inter_at(&best, c, 1),
            ) {
                (Some(a), Some(b)) => Some((dev_of(a), dev_of(b))),
                _ => None,
            }
        } else {
            None
        };
        channels.push(Channel {
            gpus: gs,
            nets: nets_c,
        });
    }
    Graph {
        id,
        pattern: best.pattern,
        cross_nic: best.cross_nic,
        bw_intra: best.bw_intra,
        bw_inter: best.bw_inter,
        latency_inter: best.latency_inter,
        type_intra: best.type_intra,
        type_inter: best.type_inter,
        same_channels: best.same_channels,
        channels,
        fallback,
        budget_exhausted: exhausted,
    }
}

/// The ring of each of a communicator's channels, in communicator ranks, as NCCL builds them
/// from the ring graph: `nchannels` graph channels (NCCL's `comm->nChannels`, the smaller of
/// the ring and tree graphs' counts) are doubled after the trees are connected (up to 64;
/// `ncclTopoPostset`), channel `c` running graph channel `c % nchannels`, and each ring
/// visits the `nnodes` hosts in order, host `k` holding ranks `k * ngpus ..`. `NCCL_MIN_NCHANNELS`
/// and `NCCL_MAX_NCHANNELS` act on this result (they are the caller's).
pub fn comm_rings(ring: &Graph, nchannels: usize, nnodes: usize) -> Vec<Vec<i64>> {
    let nchannels = nchannels.min(ring.nchannels());
    let ngpus = ring.channels.first().map_or(0, |c| c.gpus.len());
    let n = nchannels.saturating_mul(2).min(MAX_CHANNELS);
    let mut out = Vec::with_capacity(n);
    for c in 0..n {
        let Some(ch) = c.checked_rem(nchannels).and_then(|k| ring.channels.get(k)) else {
            continue;
        };
        let mut ranks = Vec::with_capacity(ngpus.saturating_mul(nnodes));
        for node in 0..nnodes {
            for &r in &ch.gpus {
                ranks.push(i64::from(r).saturating_add((node as i64).saturating_mul(ngpus as i64)));
            }
        }
        out.push(ranks);
    }
    out
}

/// The ring lines NCCL prints at INFO level (`Channel 00/24 : 0 1 2 3`) for a communicator of
/// `nnodes` identical hosts whose ring graph is `ring` ([`comm_rings`] with the ring's
/// channel count, which is the tree's too in every measured case).
pub fn ring_lines(ring: &Graph, nnodes: usize) -> Vec<String> {
    let rings = comm_rings(ring, ring.nchannels(), nnodes);
    let n = rings.len();
    rings
        .iter()
        .enumerate()
        .map(|(c, ranks)| {
            let mut line = String::new();
            let _ = write!(line, "Channel {c:02}/{n:02} :");
            for r in ranks {
                let _ = write!(line, " {r}");
            }
            line
        })
        .collect()
}
