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
use weft_core::topo::model::{NodeData, NodeKind, PathType};

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
    run_topo_with_env(args, &|k| std::env::var(k).ok())
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
                    ifname_filter: nonempty("WEFT_SOCKET_IFNAME")
                        .or_else(|| nonempty("NCCL_SOCKET_IFNAME")),
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
                empty_graph(3, Pattern::Nvls)
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
                empty_graph(0, Pattern::Ring),
                empty_graph(1, Pattern::BalancedTree),
                empty_graph(3, Pattern::Nvls),
            ),
        };
        let direct = empty_graph(4, Pattern::CollnetDirect);
        let chain = empty_graph(2, Pattern::Tree);
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

/// A graph with no channel, as NCCL dumps a pattern it did not search.
fn empty_graph(id: u32, pattern: Pattern) -> Graph {
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

/// Loads a topology file into a view (for callers that want the pieces, not the text).
pub fn view_file(path: &Path, hosts: Option<usize>) -> Result<TopoView, TopoError> {
    let (topo, _) = load_file(path)?;
    Ok(TopoView::new(topo, hosts, true, &PathOptions::default()))
}

#[cfg(test)]
mod tests {
    use super::super::fake_sysfs::FakeSys;
    use super::*;
    use weft_core::search::graph_xml::parse_graphs;
    use weft_core::topo::system_xml::{parse_topology, write_topology};
    use weft_core::topo::xml::XmlNode;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/topo")
            .join(name)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn nvls_off(k: &str) -> Option<String> {
        (k == "NCCL_NVLS_ENABLE").then(|| "0".to_string())
    }

    fn run(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> TopoOutput {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        run_topo_with_env(&args, env).unwrap()
    }

    /// The text after `NCCL INFO ` of the lines of an NCCL log, with each line's rank.
    fn nccl_lines(log: &str) -> Vec<(i64, String)> {
        log.lines()
            .filter_map(|l| {
                let at = l.find(" NCCL INFO ")?;
                let rank = l[..at]
                    .rsplit('[')
                    .next()?
                    .trim_end_matches(']')
                    .parse()
                    .ok()?;
                Some((rank, l[at + " NCCL INFO ".len()..].to_string()))
            })
            .collect()
    }

    /// Checks our Pattern, Channel and Trees lines against rank 0's (and every rank's
    /// Trees) lines of an NCCL log.
    fn assert_channels_match(out: &str, log: &str) {
        let nccl = nccl_lines(log);
        let ours: Vec<&str> = out.lines().collect();
        let ours_of = |prefix: &str| -> Vec<String> {
            ours.iter()
                .filter(|l| l.starts_with(prefix))
                .map(|l| l.to_string())
                .collect()
        };
        let theirs_of = |prefix: &str| -> Vec<String> {
            nccl.iter()
                .filter(|(r, l)| *r == 0 && l.starts_with(prefix) && !l.contains(" via "))
                .map(|(_, l)| l.clone())
                .collect()
        };
        assert_eq!(ours_of("Pattern"), theirs_of("Pattern"));
        let channels = theirs_of("Channel");
        assert!(!channels.is_empty());
        // Some logs keep only the first channel lines; each kept one must be ours, in order.
        let ours_channels = ours_of("Channel");
        assert_eq!(ours_channels[..channels.len()], channels[..]);
        for (rank, line) in nccl.iter().filter(|(_, l)| l.starts_with("Trees")) {
            assert!(
                ours.contains(&format!("[{rank}] {line}").as_str()),
                "rank {rank}: {line}\nnot in\n{out}"
            );
        }
    }

    #[test]
    fn h200_fixture_prints_nccls_lines_and_dumps_its_files() {
        let tmp = FakeSys::new("cli-h200");
        let (t, g, s) = (
            tmp.dir.join("t.xml"),
            tmp.dir.join("g.xml"),
            tmp.dir.join("s.svg"),
        );
        let out = run(
            &[
                "--file",
                fixture("h200x4-measured.xml").to_str().unwrap(),
                "--dump-topo",
                t.to_str().unwrap(),
                "--dump-graph",
                t.with_file_name("g.xml").to_str().unwrap(),
                &format!("--svg={}", s.display()),
            ],
            &nvls_off,
        );
        assert_channels_match(
            &out.text,
            include_str!("../../../tests/fixtures/topo/h200x4-measured-nccl-info.txt"),
        );
        let ring: Vec<&str> = out
            .text
            .lines()
            .filter(|l| l.starts_with("Channel "))
            .collect();
        assert_eq!(ring.len(), 24);
        for (c, l) in ring.iter().enumerate() {
            assert_eq!(*l, format!("Channel {c:02}/24 : 0 1 2 3"));
        }
        // NCCL's two dumps, byte for byte.
        assert_eq!(
            std::fs::read_to_string(&t).unwrap(),
            include_str!("../../../tests/fixtures/topo/h200x4-measured.xml")
        );
        assert_eq!(
            std::fs::read_to_string(&g).unwrap(),
            include_str!("../../../tests/fixtures/topo/h200x4-measured-graph.xml")
        );
        assert_eq!(out.written, [t, g, s]);
        assert!(out.notes.is_empty(), "{:?}", out.notes);
    }

    #[test]
    fn weft_written_fixtures_print_nccls_measured_lines() {
        for (topo, log) in [
            ("weft-h200x4-nvs9.xml", "weft-h200x4-nvs9-nccl-info.txt"),
            ("weft-h200x4-mesh6.xml", "weft-h200x4-mesh6-nccl-info.txt"),
            (
                "weft-h200x4-pairs18.xml",
                "weft-h200x4-pairs18-nccl-info.txt",
            ),
        ] {
            let out = run(&["--file", fixture(topo).to_str().unwrap()], &nvls_off);
            let log = std::fs::read_to_string(fixture(log)).unwrap();
            assert_channels_match(&out.text, &log);
            // Every ring line NCCL printed, not only the first ones.
            let theirs: Vec<String> = nccl_lines(&log)
                .into_iter()
                .filter(|(_, l)| l.starts_with("Channel") && !l.contains(" via "))
                .map(|(_, l)| l)
                .collect();
            let ours: Vec<&str> = out
                .text
                .lines()
                .filter(|l| l.starts_with("Channel "))
                .collect();
            assert_eq!(ours, theirs, "{topo}");
        }
    }

    #[test]
    fn two_and_four_hosts_print_nccls_inter_node_lines() {
        for (topo, log, hosts) in [
            (
                "h200x4-as-2hosts-measured.xml",
                "h200x4-as-2hosts-measured-nccl-info.txt",
                "2",
            ),
            (
                "h200x4-as-4hosts-measured.xml",
                "h200x4-as-4hosts-measured-nccl-info.txt",
                "4",
            ),
        ] {
            let out = run(
                &["--file", fixture(topo).to_str().unwrap(), "--hosts", hosts],
                &nvls_off,
            );
            assert_channels_match(&out.text, &std::fs::read_to_string(fixture(log)).unwrap());
        }
    }

    fn matrix_cell(text: &str, row: &str, col: &str) -> String {
        let mut lines = text.lines().skip_while(|l| *l != "Path matrix").skip(1);
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        let c = header.iter().position(|h| *h == col).unwrap();
        let line = lines.find(|l| l.split('\t').next() == Some(row)).unwrap();
        line.split('\t').nth(c).unwrap().trim().to_string()
    }

    #[test]
    fn path_matrix_cells() {
        let dgx = run(
            &["--file", fixture("dgx-h100.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        for (row, col, want) in [
            ("GPU0", "GPU0", "X"),
            ("GPU0", "GPU7", "NV18"),
            ("GPU0", "NIC0", "PIX"),
            ("GPU0", "NIC1", "PXB"),
            // NCCL reaches a far NIC through an NVLink peer (PXN), not through the CPU.
            ("GPU0", "NIC2", "PXN"),
            ("NIC0", "GPU2", "PHB"),
            ("NIC0", "NIC4", "SYS"),
            ("NIC5", "NIC4", "PXB"),
            ("GPU5", "CPU Affinity", "32-63,96-127"),
            ("NIC3", "NUMA Affinity", "0"),
        ] {
            assert_eq!(matrix_cell(&dgx, row, col), want, "{row} {col}");
        }
        let pcie = run(
            &["--file", fixture("pcie-2socket.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&pcie, "GPU0", "GPU1"), "PIX");
        assert_eq!(matrix_cell(&pcie, "GPU1", "GPU2"), "SYS");
        assert_eq!(matrix_cell(&pcie, "GPU2", "NIC0"), "SYS");
        // NCCL_P2P_DISABLE: GPUs reach each other through the CPU.
        let no_p2p = run_topo_with_env(
            &[
                "--file".into(),
                fixture("pcie-2socket.xml").to_str().unwrap().into(),
            ],
            &|k| (k == "NCCL_P2P_DISABLE").then(|| "1".to_string()),
        )
        .unwrap()
        .text;
        assert_eq!(matrix_cell(&no_p2p, "GPU0", "GPU1"), "PHB");
        let bad = run_topo_with_env(
            &[
                "--file".into(),
                fixture("pcie-2socket.xml").to_str().unwrap().into(),
            ],
            &|k| (k == "NCCL_P2P_LEVEL").then(|| "FAST".to_string()),
        )
        .unwrap();
        assert_eq!(matrix_cell(&bad.text, "GPU0", "GPU1"), "PIX");
        assert_eq!(
            bad.notes[0].text,
            "NCCL_P2P_LEVEL=FAST ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5"
        );
        let hgx = run(
            &["--file", fixture("hgx-h100-4gpu.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&hgx, "GPU0", "GPU3"), "NV6");
        let h200 = run(
            &["--file", fixture("h200x4-measured.xml").to_str().unwrap()],
            &no_env,
        )
        .text;
        assert_eq!(matrix_cell(&h200, "GPU3", "GPU1"), "NV18");
        assert_eq!(matrix_cell(&h200, "GPU3", "NIC0"), "PHB");
        assert_eq!(matrix_cell(&h200, "GPU3", "NUMA Affinity"), "N/A");
    }

    /// Every topology fixture: loads, prints a row per GPU and NIC, its SVG is well-formed
    /// XML naming every GPU, and its dumps read back to the same topology and ring.
    /// Graph fixtures are refused with a message that says what they are.
    #[test]
    fn every_fixture_runs() {
        let tmp = FakeSys::new("cli-all");
        let mut systems = 0;
        for entry in std::fs::read_dir(fixture("")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("xml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let args: Vec<String> = [
                "--file",
                path.to_str().unwrap(),
                "--svg",
                tmp.dir.join("s.svg").to_str().unwrap(),
                "--dump-topo",
                tmp.dir.join("t.xml").to_str().unwrap(),
                "--dump-graph",
                tmp.dir.join("g.xml").to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let result = run_topo_with_env(&args, &no_env);
            if text.starts_with("<graphs") {
                let e = result.unwrap_err().to_string();
                assert!(
                    e.contains("expected <system> (is this a graph file?)"),
                    "{e}"
                );
                assert!(e.contains(path.to_str().unwrap()), "{e}");
                continue;
            }
            systems += 1;
            let out = result.unwrap();
            let (topo, _) = parse_topology(&text).unwrap();
            let gpus = topo.of_kind(NodeKind::Gpu).len();
            let nets = topo.of_kind(NodeKind::Net).len();
            let rows = |p: &str| {
                out.text
                    .lines()
                    .skip_while(|l| *l != "Path matrix")
                    .filter(|l| l.starts_with(p) && l.contains('\t'))
                    .count()
            };
            assert_eq!(
                (rows("GPU"), rows("NIC")),
                (gpus, nets),
                "{}",
                path.display()
            );
            let svg = std::fs::read_to_string(tmp.dir.join("s.svg")).unwrap();
            let doc = XmlNode::parse(&svg).unwrap();
            assert_eq!(doc.name, "svg");
            for g in topo.of_kind(NodeKind::Gpu) {
                let gi = topo.nodes[g].gpu().unwrap();
                let label = format!(">GPU{} (dev {}, sm{})<", gi.rank, gi.dev, gi.sm);
                assert!(svg.contains(&label), "{label} in {}", path.display());
            }
            let dumped = std::fs::read_to_string(tmp.dir.join("t.xml")).unwrap();
            assert_eq!(parse_topology(&dumped).unwrap().0, topo);
            let graphs = parse_graphs(
                &std::fs::read_to_string(tmp.dir.join("g.xml")).unwrap(),
                &topo,
            )
            .unwrap();
            assert_eq!(graphs.len(), 5);
            let view = TopoView::new(topo, None, true, &PathOptions::default());
            if let Some((ring, _, _)) = &view.graphs {
                assert_eq!(graphs[0].channels, ring.channels);
            }
        }
        assert!(systems >= 10, "{systems}");
    }

    #[test]
    fn malformed_files_name_element_attribute_line_and_column() {
        let tmp = FakeSys::new("cli-bad");
        let good = include_str!("../../../tests/fixtures/topo/h200x4-measured.xml");
        let bad_attr = good.replacen("link_width=\"0\"", "link_width=\"wide\"", 2);
        let cases = [
            (
                bad_attr,
                "<pci> at line 3, column 5: `link_width=\"wide\"` is not a valid value",
            ),
            (
                good[..good.len() - 40].to_string(),
                "XML error: the file ends while <gpu> is still open (truncated file?)",
            ),
            (
                good.replacen("<gpu dev=\"0\" sm=\"90\"", "<gpu sm=\"90\"", 1),
                "<gpu> at line 4, column 7 has no `dev` attribute",
            ),
            (
                good.replacen("</pci>", "</pcx>", 1),
                "at line 7, column 5: </pcx> closes <pci>",
            ),
        ];
        for (text, want) in cases {
            let p = tmp.dir.join("bad.xml");
            std::fs::write(&p, &text).unwrap();
            let e = run_topo_with_env(&["--file".into(), p.to_str().unwrap().into()], &no_env)
                .unwrap_err();
            assert!(
                matches!(e, TopoCliError::Topo(TopoError::Parse { .. })),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(msg.contains("bad.xml"), "{msg}");
        }
        // NCCL_TOPO_FILE is honoured, and a missing file names itself.
        let missing = tmp.dir.join("nope.xml");
        let m = missing.to_str().unwrap().to_string();
        let e = run_topo_with_env(&[], &|k| (k == "NCCL_TOPO_FILE").then(|| m.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read topology file") && e.contains("nope.xml"),
            "{e}"
        );
    }

    #[test]
    fn bad_arguments_say_what_and_show_usage() {
        for (args, want) in [
            (vec!["--frobnicate"], "unknown argument `--frobnicate`"),
            (vec!["--hosts", "0"], "--hosts 0: expected a number"),
            (vec!["--svg"], "--svg needs a value"),
        ] {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let e = run_topo_with_env(&args, &no_env).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, TopoCliError::Usage(_)));
            assert!(
                msg.contains(want) && msg.contains("usage: weft topo"),
                "{msg}"
            );
        }
        let help = run(&["--help"], &no_env);
        assert!(help.text.starts_with("usage: weft topo"));
    }

    #[test]
    fn dump_env_vars_write_nccls_files() {
        let tmp = FakeSys::new("cli-env");
        let t = tmp.dir.join("topo.xml").to_str().unwrap().to_string();
        let g = tmp.dir.join("graph.xml").to_str().unwrap().to_string();
        let file = fixture("dgx-h100.xml").to_str().unwrap().to_string();
        let env = |k: &str| match k {
            "NCCL_TOPO_FILE" => Some(file.clone()),
            "NCCL_TOPO_DUMP_FILE" => Some(t.clone()),
            "NCCL_GRAPH_DUMP_FILE" => Some(g.clone()),
            _ => None,
        };
        let out = run(&[], &env);
        assert!(
            out.text
                .contains("NVLS nHeads 8 heads (ranks) 0 1 2 3 4 5 6 7")
        );
        assert!(out.text.contains("Pattern 5, crossNic 0, nChannels 8"));
        assert!(out.text.contains("\n 7 : GPU/0-df000\n"));
        assert_eq!(
            std::fs::read_to_string(&t).unwrap(),
            write_topology(
                &parse_topology(include_str!("../../../tests/fixtures/topo/dgx-h100.xml"))
                    .unwrap()
                    .0
            )
        );
        let graphs = parse_graphs(
            &std::fs::read_to_string(&g).unwrap(),
            &parse_topology(include_str!("../../../tests/fixtures/topo/dgx-h100.xml"))
                .unwrap()
                .0,
        )
        .unwrap();
        assert_eq!(graphs[4].pattern, Pattern::Nvls);
        assert_eq!(graphs[4].nchannels(), 8);
    }

    /// `--sysfs`: a fake tree with an active InfiniBand HCA behind a PCIe switch.
    #[test]
    fn fake_sysfs_detection_through_the_cli() {
        let fake = FakeSys::new("cli-sysfs");
        let up = "pci0000:40/0000:40:01.0/0000:41:00.0";
        for p in ["pci0000:40/0000:40:01.0", up, &format!("{up}/0000:42:02.0")] {
            fake.pci(
                p,
                &[
                    ("class", "0x060400"),
                    ("max_link_speed", "16.0 GT/s PCIe"),
                    ("max_link_width", "16"),
                    ("numa_node", "1"),
                ],
            );
        }
        let hca = format!("{up}/0000:42:02.0/0000:43:00.0");
        fake.pci(
            &hca,
            &[
                ("class", "0x020700"),
                ("max_link_speed", "16.0 GT/s PCIe"),
                ("max_link_width", "16"),
                ("numa_node", "1"),
            ],
        );
        fake.ib(
            "mlx5_3",
            &hca,
            "0c42:a103:0070:1b2e",
            &[(1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")],
        );
        fake.file("sys/devices/system/node/node1/cpumap", "ff00\n");
        fake.cpuinfo("GenuineIntel", 6, 143);
        let out = run(&["--sysfs", fake.dir.to_str().unwrap()], &no_env);
        let t = &out.text;
        assert!(t.contains("  CPU0  host 0  numa 1  "), "{t}");
        assert!(
            t.contains("GenuineIntel family 6 model 143  cpus 8-15"),
            "{t}"
        );
        assert!(
            t.contains(
                "  NIC0  mlx5_3  dev 0  port 1  200 Gb/s  gdr 0  0000:43:00.0  IB (Ethernet)  up"
            ),
            "{t}"
        );
        assert!(t.contains("NIC0\t X \t8-15\t1\n"), "{t}");
        assert!(t.contains("no GPU: no channels"), "{t}");
        assert_eq!(
            out.notes[0].text,
            format!("detecting from {}: GPUs are not probed", fake.dir.display())
        );
    }

    /// This machine, whatever it has: detection succeeds and prints a CPU. Without a CUDA
    /// driver (as on the build machines) that is the CPU-only view, and a note says why.
    #[test]
    fn detection_on_this_machine() {
        let out = run(&[], &no_env);
        let t = &out.text;
        assert!(t.starts_with("# weft topo: detected from /sys\n"), "{t}");
        assert!(t.contains("\nCPUs\n  CPU0  host 0  numa "), "{t}");
        assert!(t.contains("\nPath matrix\n"), "{t}");
        if weft_sys::CudaDriver::shared().is_err() {
            assert!(
                t.contains("  none (CPU-only view: no channels to search)"),
                "{t}"
            );
            assert!(t.contains("no GPU: no channels"), "{t}");
            assert!(
                out.notes
                    .iter()
                    .any(|n| n.level == log::Level::Info && n.text.contains("libcuda.so.1")),
                "{:?}",
                out.notes
            );
        }
    }
}
