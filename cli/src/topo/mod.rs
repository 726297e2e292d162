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

use std::fmt::Write as _;
use std::path::PathBuf;
use weft_config::Settings;
use weft_core::topo::model::NodeData;
use weft_core::topo::model::NodeKind;
use weft_runtime::bootstrap::identity::host_hash_of;
use weft_runtime::topo::detect::{DetectOptions, Note, host_arch};
use weft_runtime::topo::gpu::GpuProbe;
use weft_runtime::topo::nic::{NicInputs, NicKind, NicProbe, local_addrs};
use weft_runtime::topo::source::{TopoError, local_topology, path_options, write_file};
use weft_runtime::topo::sysfs::{SysRoot, cpumask_to_list};
use weft_runtime::topo::view::TopoView;

mod matrix;
mod svg;

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

/// `weft topo` with `args` (what follows `topo` on the command line), with the process
/// environment's settings (a bad value of theirs is ignored with a warning: the topology
/// variables are NCCL's, which NCCL ignores too).
pub fn run_topo(args: &[String]) -> Result<TopoOutput, TopoCliError> {
    run_topo_with(args, &Settings::from_env_or_defaults())
}

/// [`run_topo`] with `settings` (tests).
pub fn run_topo_with(args: &[String], settings: &Settings) -> Result<TopoOutput, TopoCliError> {
    let args = parse_args(args)?;
    if args.help {
        return Ok(TopoOutput {
            text: format!("{USAGE}\n"),
            notes: Vec::new(),
            written: Vec::new(),
        });
    }
    let sysfs = args.sysfs.clone();
    let local = local_topology(
        args.file.as_deref(),
        &settings.topology,
        &mut |notes| match &sysfs {
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
                        ifname_filter: settings.net.socket.ifname.clone(),
                        net_plugin: settings.net.nccl_net.clone(),
                        have_gpus: false,
                    },
                    host_hash: host_hash_of(settings.bootstrap.hostid.as_deref()),
                    arch: host_arch().to_string(),
                }
            }
            None => DetectOptions::host(settings, notes),
        },
    )?;
    let source = local.source.to_string();
    let notes = local.notes;
    let nics = local.nics;
    let topo = local.topology;
    // NCCL_NVLS_ENABLE=0 turns the NVLS search off, as in NCCL (the GPU machines here run
    // with it: their dumps have an empty NVLS graph).
    let nvls = settings.gpu.nvls_enable;
    let mut notes = notes;
    let path_opts = path_options(settings, &mut notes);
    let view = TopoView::new(topo, args.hosts, nvls, &path_opts);
    let mut text = String::new();
    let _ = writeln!(text, "# weft topo: {source}");
    write_devices(&view, &mut text, &nics);
    let _ = writeln!(text, "\nPath matrix");
    text.push_str(&matrix::path_matrix(&view.topo, &view.paths));
    write_channels(&view, &mut text, args.paths);

    let mut written: Vec<PathBuf> = local.dumped.into_iter().collect();
    if let Some(p) = args.dump_topo {
        write_file(&p, "topology XML", &local.xml.write())?;
        written.push(p);
    }
    let dump_graph = args
        .dump_graph
        .or_else(|| settings.topology.graph_dump_file.clone());
    if let Some(p) = dump_graph {
        write_file(&p, "graph XML", &view.graph_xml())?;
        written.push(p);
    }
    if let Some(p) = args.svg {
        write_file(&p, "SVG drawing", &draw_svg(&view, &source))?;
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

fn write_devices(view: &TopoView, out: &mut String, nics: &[NicProbe]) {
    let t = &view.topo;
    let _ = writeln!(out, "\nCPUs");
    for (i, c) in t.of_kind(NodeKind::Cpu).into_iter().enumerate() {
        let Some(cpu) = t.nodes[c].cpu() else {
            continue;
        };
        let cpus = cpu
            .affinity
            .as_deref()
            .and_then(cpumask_to_list)
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

fn write_channels(view: &TopoView, out: &mut String, with_paths: bool) {
    let _ = writeln!(out, "\nSearch (the lines NCCL_DEBUG=INFO prints)");
    for l in view.channel_lines(with_paths) {
        out.push_str(&l);
        out.push('\n');
    }
}

fn draw_svg(view: &TopoView, title: &str) -> String {
    svg::render(
        &view.topo,
        view.graphs.as_ref().map(|g| &g.0),
        &format!("weft topo: {title}"),
    )
}

#[cfg(test)]
mod tests;
