//! `weft topo`: detect (or load) a topology and show what NCCL would make of it.
//!
//! ```text
//! weft topo [--file topo.xml] [--hosts N] [--paths]
//!           [--dump-topo FILE] [--dump-graph FILE] [--svg FILE] [--sysfs DIR]
//! ```
//!
//! Prints the CPUs, GPUs and NICs, the path matrix (`nvidia-smi topo -m` style), and the
//! channels exactly as `NCCL_DEBUG=INFO` prints them (`Pattern 4, ...`, `Channel 00/24 :
//! 0 1 2 3`, `Trees [0] 1/-1/-1->0->-1 ...`, NVLS heads as NCCL's graph lines).
//! `NCCL_TOPO_FILE` (or `WEFT_TOPO_FILE`) loads a file instead of detecting, like
//! `--file`; `NCCL_TOPO_DUMP_FILE` and `NCCL_GRAPH_DUMP_FILE` write NCCL's two XML files,
//! like `--dump-topo` and `--dump-graph`.

use super::detect::{DetectOptions, Note, host_arch};
use super::gpu::GpuProbe;
use super::nic::{NicInputs, NicKind, NicProbe, local_addrs};
use super::source::{TopoError, load_file, local_topology, path_options_from_env, write_file};
use super::sysfs::SysRoot;
use super::{matrix, svg};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use weft_core::search::graph_xml::write_graphs;
use weft_core::search::trees::{tree_links, trees_line};
use weft_core::search::{
    Fallback, Graph, Pattern, SearchOptions, compute, ring_lines, system_line,
};
use weft_core::topo::model::{NodeData, NodeKind};

use weft_core::topo::{PathOptions, Paths, Topology, compute_paths};

pub const USAGE: &str = "usage: weft topo [--file topo.xml] [--hosts N] [--paths] [--dump-topo FILE] [--dump-graph FILE] [--svg FILE] [--sysfs DIR]
  (no --file)        detect this machine (sysfs, CUDA driver, NVML, network devices)
  --file FILE        load NCCL topology XML instead (also NCCL_TOPO_FILE / WEFT_TOPO_FILE)
  --hosts N          search as N identical hosts (default: the hosts in the topology)
  --paths            also print NCCL's per-node path lines
  --dump-topo FILE   write the topology as NCCL_TOPO_DUMP_FILE does (also that variable)
  --dump-graph FILE  write the ring and tree graphs as NCCL_GRAPH_DUMP_FILE does (also that variable)
  --svg FILE         draw the topology with ring 0
  --sysfs DIR        detect from a copy of sysfs at DIR/sys (and DIR/proc); GPUs are not probed
environment (NCCL's names; WEFT_TOPO_FILE, WEFT_TOPO_DUMP_FILE, WEFT_GRAPH_DUMP_FILE and
WEFT_SOCKET_IFNAME come first): NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_DUMP_FILE,
NCCL_NVLS_ENABLE, NCCL_P2P_LEVEL, NCCL_P2P_DISABLE, NCCL_NVB_DISABLE, NCCL_NET_GDR_LEVEL,
NCCL_NET_GDR_C2C, NCCL_NET_GDR_READ, NCCL_PXN_DISABLE, NCCL_PXN_C2C, NCCL_SOCKET_IFNAME,
NCCL_NET (IB or Socket)";

/// What `weft topo` produced: `text` for stdout, `notes` for stderr (also logged).
#[derive(Debug, Clone)]
pub struct TopoOutput {
    pub text: String,
    pub notes: Vec<Note>,
    /// Files written, in order.
    pub written: Vec<PathBuf>,
}

/// Why `weft topo` failed.
#[derive(Debug)]
pub enum TopoCliError {
    /// Bad command line; the message says what and shows the usage.
    Usage(String),
    /// No topology (unreadable or malformed file, detection failure) or a file that could
    /// not be written.
    Topo(TopoError),
}

impl From<TopoError> for TopoCliError {
    fn from(e: TopoError) -> Self {
        TopoCliError::Topo(e)
    }
}

impl std::fmt::Display for TopoCliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopoCliError::Usage(m) => write!(f, "weft topo: {m}\n{USAGE}"),
            TopoCliError::Topo(e) => write!(f, "weft topo: {e}"),
        }
    }
}

impl std::error::Error for TopoCliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopoCliError::Topo(e) => Some(e),
            TopoCliError::Usage(_) => None,
        }
    }
}

#[derive(Debug, Default)]
struct Args {
    file: Option<PathBuf>,
    hosts: Option<usize>,
    paths: bool,
    dump_topo: Option<PathBuf>,
    dump_graph: Option<PathBuf>,
    svg: Option<PathBuf>,
    sysfs: Option<PathBuf>,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Args, TopoCliError> {
    let mut out = Args::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, TopoCliError> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| TopoCliError::Usage(format!("{name} needs a value")))
        };
        match key {
            "-h" | "--help" => out.help = true,
            "-f" | "--file" => out.file = Some(value(key)?.into()),
            "--dump-topo" => out.dump_topo = Some(value(key)?.into()),
            "--dump-graph" => out.dump_graph = Some(value(key)?.into()),
            "--svg" => out.svg = Some(value(key)?.into()),
            "--sysfs" => out.sysfs = Some(value(key)?.into()),
            "--paths" => out.paths = true,
            "--hosts" => {
                let v = value(key)?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=4096).contains(n))
                    .ok_or_else(|| {
                        TopoCliError::Usage(format!("--hosts {v}: expected a number 1..4096"))
                    })?;
                out.hosts = Some(n);
            }
            other => {
                return Err(TopoCliError::Usage(format!("unknown argument `{other}`")));
            }
        }
    }
    Ok(out)
}

/// `weft topo` with `args` (what follows `topo` on the command line), reading the
/// process environment.
pub fn run_topo(args: &[String]) -> Result<TopoOutput, TopoCliError> {
    run_topo_with_env(args, &crate::env::process)
}

/// [`run_topo`] with an explicit environment lookup (tests).
pub fn run_topo_with_env(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TopoOutput, TopoCliError> {
    let args = parse_args(args)?;
    if args.help {
        return Ok(TopoOutput {
            text: format!("{USAGE}\n"),
            notes: Vec::new(),
            written: Vec::new(),
        });
    }
    let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let sysfs = args.sysfs.clone();
    let local = local_topology(args.file.as_deref(), env, &mut |notes| match &sysfs {
        Some(dir) => {
            notes.push(Note::info(format!(
                "detecting from {}: GPUs are not probed",
                dir.display()
            )));
            DetectOptions {
                root: SysRoot::under(dir),
                gpus: Vec::<GpuProbe>::new(),
                nics: NicInputs {
                    addrs: local_addrs(),
                    ifname_filter: crate::env::first_value(
                        env,
                        &["WEFT_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"],
                    ),
                    net_plugin: nonempty("NCCL_NET"),
                    have_gpus: false,
                },
                host_hash: crate::bootstrap::identity::host_hash(),
                arch: host_arch().to_string(),
            }
        }
        None => DetectOptions::host(env, notes),
    })?;
    let source = local.source.to_string();
    let notes = local.notes;
    let nics = local.nics;
    let topo = local.topology;
    // NCCL_NVLS_ENABLE=0 turns the NVLS search off, as in NCCL (the GPU machines here run
    // with it: their dumps have an empty NVLS graph).
    let nvls = nonempty("NCCL_NVLS_ENABLE").is_none_or(|v| v.trim() != "0");
    let mut notes = notes;
    let path_opts = path_options_from_env(env, &mut notes);
    let view = TopoView::new(topo, args.hosts, nvls, &path_opts);
    let mut text = String::new();
    let _ = writeln!(text, "# weft topo: {source}");
    view.write_devices(&mut text, &nics);
    let _ = writeln!(text, "\nPath matrix");
    text.push_str(&matrix::path_matrix(&view.topo, &view.paths));
    view.write_channels(&mut text, args.paths);

    let mut written: Vec<PathBuf> = local.dumped.into_iter().collect();
    if let Some(p) = args.dump_topo {
        write_file(&p, "topology XML", &local.xml.write())?;
        written.push(p);
    }
    let dump_graph = args
        .dump_graph
        .or_else(|| nonempty("WEFT_GRAPH_DUMP_FILE").map(PathBuf::from))
        .or_else(|| nonempty("NCCL_GRAPH_DUMP_FILE").map(PathBuf::from));
    if let Some(p) = dump_graph {
        write_file(&p, "graph XML", &view.graph_xml())?;
        written.push(p);
    }
    if let Some(p) = args.svg {
        write_file(&p, "SVG drawing", &view.svg(&source))?;
        written.push(p);
    }
    for p in &written {
        let _ = writeln!(text, "wrote {}", p.display());
    }
    Ok(TopoOutput {
        text,
        notes,
        written,
    })
}

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

    fn write_devices(&self, out: &mut String, nics: &[NicProbe]) {
        let t = &self.topo;
        let _ = writeln!(out, "\nCPUs");
        for (i, c) in t.of_kind(NodeKind::Cpu).into_iter().enumerate() {
            let Some(cpu) = t.nodes[c].cpu() else {
                continue;
            };
            let cpus = cpu
                .affinity
                .as_deref()
                .and_then(super::sysfs::cpumask_to_list)
                .unwrap_or_else(|| "unknown".to_string());
            let _ = writeln!(
                out,
                "  CPU{i}  host {}  numa {}  {} {}{}  cpus {cpus}",
                t.nodes[c].host,
                cpu.numa_id,
                cpu.arch,
                cpu.vendor.as_deref().unwrap_or(""),
                match (cpu.family_id, cpu.model_id) {
                    (Some(f), Some(m)) => format!(" family {f} model {m}"),
                    _ => String::new(),
                },
            );
        }
        let gpus = t.of_kind(NodeKind::Gpu);
        let _ = writeln!(out, "\nGPUs");
        if gpus.is_empty() {
            let _ = writeln!(out, "  none (CPU-only view: no channels to search)");
        }
        for (i, g) in gpus.into_iter().enumerate() {
            let Some(gpu) = t.nodes[g].gpu() else {
                continue;
            };
            let numa = t
                .local_cpu_up(g)
                .and_then(|c| t.nodes[c].cpu())
                .map_or(-1, |c| c.numa_id);
            let nvl: Vec<String> = gpu
                .nvlinks
                .iter()
                .map(|l| {
                    let to = if l.tclass.starts_with("0x0680") {
                        "NVSwitch".to_string()
                    } else {
                        l.target.clone()
                    };
                    format!("{}x {to}", l.count)
                })
                .collect();
            let _ = writeln!(
                out,
                "  GPU{i}  rank {}  dev {}  {}  sm{}  numa {numa}  {} GT/s x{}  NVLinks: {}",
                gpu.rank,
                gpu.dev,
                gpu.pci.busid,
                gpu.sm,
                gpu.pci.link_speed.split(" GT/s").next().unwrap_or("?"),
                gpu.pci.link_width,
                if nvl.is_empty() {
                    "none".to_string()
                } else {
                    nvl.join(", ")
                }
            );
        }
        let _ = writeln!(out, "\nNICs");
        let nets = t.of_kind(NodeKind::Net);
        if nets.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for (i, n) in nets.into_iter().enumerate() {
            let Some(net) = t.nodes[n].net() else {
                continue;
            };
            let name = net.name.clone().unwrap_or_default();
            let nic = t.nodes[n].parent;
            let place = match nic.map(|x| &t.nodes[x].data) {
                Some(NodeData::Nic { pci: Some(p) }) => p.busid.clone(),
                _ => "not on PCI".to_string(),
            };
            let _ = write!(
                out,
                "  NIC{i}  {name}  dev {}  port {}  {} Gb/s  gdr {}  {place}",
                net.dev,
                net.port,
                net.speed_mbps as f64 / 1000.0,
                u8::from(net.gdr)
            );
            if let Some(p) = nics.iter().find(|p| p.unused.is_none() && p.name == name) {
                let kind = match &p.kind {
                    NicKind::Ib { link_layer } => format!("IB ({link_layer})"),
                    NicKind::Socket => "socket".to_string(),
                };
                let addrs: Vec<String> = p.addrs.iter().map(|a| a.to_string()).collect();
                let _ = write!(
                    out,
                    "  {kind}{}  {}",
                    if p.is_virtual { ", virtual" } else { "" },
                    if p.up { "up" } else { "down" }
                );
                if !addrs.is_empty() {
                    let _ = write!(out, "  {}", addrs.join(" "));
                }
            }
            out.push('\n');
        }
        for p in nics.iter().filter(|p| p.unused.is_some()) {
            let _ = writeln!(
                out,
                "  -     {}{}  not used: {}",
                p.name,
                if p.port > 0 {
                    format!(" port {}", p.port)
                } else {
                    String::new()
                },
                p.unused.unwrap_or("")
            );
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

    fn write_channels(&self, out: &mut String, with_paths: bool) {
        let _ = writeln!(out, "\nSearch (the lines NCCL_DEBUG=INFO prints)");
        for l in self.channel_lines(with_paths) {
            out.push_str(&l);
            out.push('\n');
        }
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

    pub fn svg(&self, title: &str) -> String {
        svg::render(
            &self.topo,
            self.graphs.as_ref().map(|g| &g.0),
            &format!("weft topo: {title}"),
        )
    }
}

/// Loads a topology file into a view (for callers that want the pieces, not the text).
pub fn view_file(path: &Path, hosts: Option<usize>) -> Result<TopoView, TopoError> {
    let (topo, _) = load_file(path)?;
    Ok(TopoView::new(topo, hosts, true, &PathOptions::default()))
}

#[cfg(test)]
mod tests;
