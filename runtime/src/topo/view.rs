//! A topology with its paths and searched ring, tree and NVLS graphs, and the lines
//! `NCCL_DEBUG=INFO` prints for them: what the communicator plans channels from and what
//! `weft topo` shows.

use super::source::{TopoError, load_file};
use std::fmt::Write as _;
use std::path::Path;
use weft_core::search::graph_xml::write_graphs;
use weft_core::search::trees::{tree_links, trees_line};
use weft_core::search::{
    Fallback, Graph, Pattern, SearchOptions, compute, ring_lines, system_line,
};
use weft_core::topo::model::NodeKind;
use weft_core::topo::{PathOptions, Paths, Topology, compute_paths};

/// A topology with its paths and searched graphs.
pub struct TopoView {
    pub topo: Topology,
    pub paths: Paths,
    pub nnodes: usize,
    /// Ring, tree and NVLS graphs; `None` without GPUs.
    pub graphs: Option<(Graph, Graph, Graph)>,
}

impl std::fmt::Debug for TopoView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopoView")
            .field("nodes", &self.topo.nodes.len())
            .field("nnodes", &self.nnodes)
            .finish()
    }
}

impl TopoView {
    /// Computes paths and, when there are GPUs, the ring, tree and NVLS graphs for
    /// `hosts` identical hosts (default: the hosts the topology holds).
    pub fn new(
        topo: Topology,
        hosts: Option<usize>,
        nvls: bool,
        path_opts: &PathOptions,
    ) -> TopoView {
        let paths = compute_paths(&topo, path_opts);
        let nnodes = hosts.unwrap_or(topo.hosts.len()).max(1);
        let inter = nnodes > 1;
        let graphs = if topo.of_kind(NodeKind::Gpu).is_empty() {
            None
        } else {
            let ring = compute(&topo, &paths, 0, Pattern::Ring, &SearchOptions::ring(inter));
            let tree = compute(
                &topo,
                &paths,
                1,
                Pattern::BalancedTree,
                &SearchOptions::tree(inter, ring.nchannels()),
            );
            let nvls = if nvls {
                compute(&topo, &paths, 3, Pattern::Nvls, &SearchOptions::nvls(inter))
            } else {
                Graph::unsupported(3, Pattern::Nvls)
            };
            Some((ring, tree, nvls))
        };
        TopoView {
            topo,
            paths,
            nnodes,
            graphs,
        }
    }

    /// NCCL's `ncclTopoPrintGraph` lines: the summary, then ` 0 : GPU/0-60 GPU/0-70 ...`
    /// per channel (with the NETs for inter-node graphs; NVLS lists only each head).
    pub fn graph_lines(&self, g: &Graph) -> Vec<String> {
        let t = &self.topo;
        let mut out = vec![g.summary()];
        let inter = self.nnodes > 1 && !t.of_kind(NodeKind::Net).is_empty();
        let net_label = |dev: i32| {
            t.nodes
                .iter()
                .position(|n| n.net().is_some_and(|x| x.dev == dev))
                .map_or_else(|| format!("NET/?-{dev:x}"), |n| t.label(n))
        };
        for (c, ch) in g.channels.iter().enumerate() {
            let mut line = format!("{c:2} :");
            if inter {
                if let Some((i, _)) = ch.nets {
                    let _ = write!(line, " {}", net_label(i));
                }
            }
            for r in &ch.gpus {
                let label = t
                    .gpu_by_rank(*r)
                    .map_or_else(|| format!("GPU/?-{r}"), |n| t.label(n));
                let _ = write!(line, " {label}");
                if g.id == 3 {
                    break;
                }
            }
            if inter {
                if let Some((_, o)) = ch.nets {
                    let _ = write!(line, " {}", net_label(o));
                }
            }
            out.push(line);
        }
        out
    }

    /// Every line of the channel section.
    pub fn channel_lines(&self, with_paths: bool) -> Vec<String> {
        let mut out = Vec::new();
        let t = &self.topo;
        let inter = self.nnodes > 1;
        out.push(system_line(t, &self.paths, inter));
        if with_paths {
            for kind in [NodeKind::Gpu, NodeKind::Net] {
                for n in t.of_kind(kind) {
                    out.push(self.paths.describe(t, n));
                }
            }
        }
        let Some((ring, tree, nvls)) = &self.graphs else {
            out.push("no GPU: no channels".to_string());
            return out;
        };
        for g in [ring, tree] {
            out.extend(self.graph_lines(g));
            if let Some(f) = g.fallback {
                out.push(format!(
                    "note: graph {} is NCCL's fallback ({f:?}), not a search result",
                    g.id
                ));
            }
        }
        out.extend(ring_lines(ring, self.nnodes));
        let comm = ring.nchannels().min(tree.nchannels());
        let nranks = t.of_kind(NodeKind::Gpu).len().saturating_mul(self.nnodes);
        for rank in 0..nranks as i64 {
            let links = tree_links(tree, self.nnodes, rank, comm);
            out.push(format!("[{rank}] {}", trees_line(&links, rank)));
        }
        if nvls.fallback.is_none() {
            out.extend(self.graph_lines(nvls));
            let heads: Vec<String> = nvls
                .channels
                .iter()
                .filter_map(|c| c.gpus.first())
                .map(|r| r.to_string())
                .collect();
            out.push(format!(
                "NVLS nHeads {} heads (ranks) {}",
                heads.len(),
                heads.join(" ")
            ));
        } else if nvls.pattern == Pattern::Nvls
            && nvls.id == 3
            && nvls.fallback == Some(Fallback::Unsupported)
        {
            out.push("NVLS: not possible here (needs an NVSwitch and sm90+) or disabled (NCCL_NVLS_ENABLE=0)".to_string());
        }
        out
    }

    /// NCCL's graph XML: ring, tree, CollNet Direct, CollNet chain and NVLS graphs in
    /// NCCL's order (the CollNet ones empty: weft has no CollNet; all empty without GPUs).
    pub fn graph_xml(&self) -> String {
        let (ring, tree, nvls) = match &self.graphs {
            Some((r, t, n)) => (r.clone(), t.clone(), n.clone()),
            None => (
                Graph::unsupported(0, Pattern::Ring),
                Graph::unsupported(1, Pattern::BalancedTree),
                Graph::unsupported(3, Pattern::Nvls),
            ),
        };
        let direct = Graph::unsupported(4, Pattern::CollnetDirect);
        let chain = Graph::unsupported(2, Pattern::Tree);
        write_graphs(&[&ring, &tree, &direct, &chain, &nvls], &self.topo)
    }
}

/// Loads a topology file into a view (for callers that want the pieces, not the text).
pub fn view_file(path: &Path, hosts: Option<usize>) -> Result<TopoView, TopoError> {
    let (topo, _) = load_file(path)?;
    Ok(TopoView::new(topo, hosts, true, &PathOptions::default()))
}
