//! `weft perf`: nccl-tests' measurements (`all_reduce_perf` and friends) on weft.
//!
//! The report is nccl-tests' own: a row per size with the out-of-place and the in-place
//! time, algorithm bandwidth and bus bandwidth, and the number of wrong elements; then the
//! count of wrong values and the average bus bandwidth. Bandwidths follow nccl-tests'
//! definitions: `algbw = bytes / time` (bytes of the whole buffer: `count * nranks`
//! elements for reduce-scatter and all-gather), and `busbw = algbw * factor` with factor
//! `2(n-1)/n` for all-reduce, `(n-1)/n` for reduce-scatter and all-gather, 1 otherwise.
//! Times are averaged over ranks, as nccl-tests' default `-a 1`.
//!
//! Correctness first: every rank fills its input from a seeded generator (`weft_verify`),
//! and the output is checked element by element against the reference computed from every
//! rank's seed: once per size and mode before timing, or after every iteration with
//! `--check`.
//!
//! The measurement is the same on every device; what runs the calls is a [`PerfBackend`]:
//! [`HostRank`] (perf_host.rs: host memory, the CPU executor) or [`CudaRank`]
//! (perf_cuda.rs: device memory, weft's GPU kernels).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use weft_config::Settings;
use weft_core::abi::{DataType, RedOp};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::comm::{CommError, CommOptions, TransportChoice};
use weft_verify::{Expect, TestData};

use crate::args::{Args, parse_size};
use crate::perf_cuda::CudaRank;
use crate::perf_host::HostRank;
use crate::spawn::{ROLE_FLAG, run_local};

const HELP: &str = "\
usage: weft perf <all-reduce|reduce-scatter|all-gather|broadcast|reduce|sendrecv> [options]

  --device D           cpu (host memory, the CPU executor; default) or cuda (device
                       memory, weft's GPU kernels over P2P/NVLink, one GPU per rank)
  --ranks N            local rank processes to start (default 2; with --device cuda,
                       the number of GPUs)
  -b, --minbytes SIZE  smallest size (default 8); sizes take K, M, G suffixes
  -e, --maxbytes SIZE  largest size (default 64M)
  -f, --stepfactor F   multiply the size by F each step (default 2)
  -i, --stepbytes SIZE add SIZE each step instead (with -f 1)
  -n, --iters N        timed iterations per size (default 20)
  -w, --warmup N       warm-up iterations before the first size (default 5)
  -d, --dtype TYPE     int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double
                       f8e4m3 f8e5m2 (default float; fp8 reductions on GPUs need
                       compute capability 8.9 or newer)
  -o, --op OP          sum prod min max avg (default sum)
  -r, --root R         root of broadcast and reduce (default 0)
  -c, --check [N]      check the result of every iteration (default: once per size,
                       before timing); -c 0 checks nothing (#wrong shows -1)
  --channels N         channels (rings) to build (default WEFT_NCHANNELS, else one per
                       CPU per local rank, at most 4)
  --transport T        auto, shm, net (sockets), ib (verbs: InfiniBand, RoCE) or mesh
                       (verbs, the NIC chosen by subnet) (default auto)
  --timeout SECONDS    deadline of every wait on a peer (default 30)
  --threads            with --device cuda: run every rank as a thread of this process
                       (one process driving all its GPUs, as nccl-tests' -g N)
  -G, --cudagraph N    with --device cuda: record the timed calls into a CUDA graph once
                       and launch it N times (nccl-tests' -G; default 0, no graph)
  --id HEX             join a job as one rank (from `weft unique-id`), with --rank and
                       --nranks or a launcher's variables (torchrun, mpirun, srun)
  --rank R, --nranks N this process's rank and the job's size (with --id)
";

/// The collectives nccl-tests measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfColl {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Reduce,
    SendRecv,
}

impl PerfColl {
    fn parse(text: &str) -> Option<Self> {
        Some(match text.replace('_', "-").as_str() {
            "all-reduce" | "allreduce" => PerfColl::AllReduce,
            "reduce-scatter" | "reducescatter" => PerfColl::ReduceScatter,
            "all-gather" | "allgather" => PerfColl::AllGather,
            "broadcast" => PerfColl::Broadcast,
            "reduce" => PerfColl::Reduce,
            "sendrecv" | "send-recv" => PerfColl::SendRecv,
            _ => return None,
        })
    }

    fn reduces(self) -> bool {
        matches!(
            self,
            PerfColl::AllReduce | PerfColl::ReduceScatter | PerfColl::Reduce
        )
    }

    fn rooted(self) -> bool {
        matches!(self, PerfColl::Broadcast | PerfColl::Reduce)
    }

    /// nccl-tests' bus bandwidth factor.
    fn bus_factor(self, nranks: usize) -> f64 {
        let n = nranks as f64;
        match self {
            PerfColl::AllReduce => 2.0 * (n - 1.0) / n,
            PerfColl::ReduceScatter | PerfColl::AllGather => (n - 1.0) / n,
            _ => 1.0,
        }
    }

    /// (count as printed, input elements, output elements) for a size in bytes, as
    /// nccl-tests' `getCollByteCount`.
    fn counts(self, bytes: u64, esize: usize, nranks: usize) -> (usize, usize, usize) {
        let total = (bytes as usize) / esize;
        match self {
            PerfColl::ReduceScatter => {
                let c = total / nranks;
                (c, c * nranks, c)
            }
            PerfColl::AllGather => {
                let c = total / nranks;
                (c, c, c * nranks)
            }
            _ => (total, total, total),
        }
    }
}

/// When results are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Once per size and mode, before timing.
    Once,
    /// After every timed iteration (with the input refilled before it).
    Every,
    /// Never (nccl-tests' `-c 0`).
    Off,
}

/// Where the buffers live and who runs the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PerfDevice {
    /// Host memory, the CPU executor.
    Cpu,
    /// Device memory, the GPU kernels.
    Cuda,
}

#[derive(Debug, Clone)]
struct PerfArgs {
    coll: PerfColl,
    device: PerfDevice,
    /// `None`: the default (2, or the number of GPUs with `--device cuda`).
    ranks: Option<usize>,
    min_bytes: u64,
    max_bytes: u64,
    factor: u64,
    step_bytes: u64,
    iters: usize,
    warmup: usize,
    dtype: DataType,
    op: RedOp,
    root: usize,
    check: Check,
    channels: Option<u32>,
    transport: Option<TransportChoice>,
    timeout: Option<Duration>,
    /// CUDA graph launches per measurement (nccl-tests' `-G`); 0: no graph.
    graph_launches: usize,
    /// Every rank a thread of this process (one process driving every GPU, as nccl-tests
    /// with `-g N`), instead of a process per rank.
    threads: bool,
    id: Option<String>,
    rank: Option<usize>,
    nranks: Option<usize>,
    role: Option<String>,
}

fn parse_args(argv: &[String]) -> Result<PerfArgs, String> {
    let mut a = Args::new(argv);
    let num = |s: &str| s.trim().parse::<usize>().ok();
    let role = a.value(&[ROLE_FLAG])?;
    let check = match a.optional_number(&["-c", "--check"]) {
        None => Check::Once,
        Some(Some(0)) => Check::Off,
        Some(_) => Check::Every,
    };
    let ranks = a.parsed(&["--ranks"], "a rank count >= 1", num)?;
    let device = a
        .parsed(&["--device"], "cpu or cuda", |s| match s.trim() {
            "cpu" | "host" => Some(PerfDevice::Cpu),
            "cuda" | "gpu" => Some(PerfDevice::Cuda),
            _ => None,
        })?
        .unwrap_or(PerfDevice::Cpu);
    let min_bytes = a.parsed(
        &["-b", "--minbytes"],
        "a size such as 8, 1K, 64M",
        parse_size,
    )?;
    let max_bytes = a.parsed(
        &["-e", "--maxbytes"],
        "a size such as 8, 1K, 64M",
        parse_size,
    )?;
    let factor = a.parsed(&["-f", "--stepfactor"], "a factor >= 1", |s| {
        s.trim().parse::<u64>().ok().filter(|f| *f >= 1)
    })?;
    let step_bytes = a.parsed(&["-i", "--stepbytes"], "a size", parse_size)?;
    let iters = a.parsed(&["-n", "--iters"], "an iteration count", num)?;
    let warmup = a.parsed(
        &["-w", "--warmup", "--warmup_iters"],
        "an iteration count",
        num,
    )?;
    let dtype = a.parsed(
        &["-d", "--dtype", "--datatype"],
        "int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double, f8e4m3 or \
         f8e5m2",
        |s| {
            DataType::from_name(s.trim()).or(match s.trim() {
                "float32" | "f32" => Some(DataType::Float32),
                "float64" | "f64" => Some(DataType::Float64),
                "float16" | "f16" | "fp16" => Some(DataType::Float16),
                "bf16" => Some(DataType::Bfloat16),
                "fp8e4m3" | "float8e4m3" | "e4m3" => Some(DataType::Float8E4M3),
                "fp8e5m2" | "float8e5m2" | "e5m2" => Some(DataType::Float8E5M2),
                "int" => Some(DataType::Int32),
                "char" => Some(DataType::Int8),
                _ => None,
            })
        },
    )?;
    let op = a.parsed(&["-o", "--op"], "sum, prod, min, max or avg", |s| {
        RedOp::from_name(s.trim())
    })?;
    let root = a.parsed(&["-r", "--root"], "a rank", num)?.unwrap_or(0);
    let channels = a.parsed(&["--channels"], "a channel count from 1 to 64", |s| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=64).contains(c))
    })?;
    let transport = a.parsed(
        &["--transport"],
        "auto, shm, net, ib or mesh",
        TransportChoice::parse,
    )?;
    let timeout = a.parsed(&["--timeout"], "seconds", |s| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|t| *t > 0.0 && t.is_finite() && *t < 1e9)
            .map(Duration::from_secs_f64)
    })?;
    let graph_launches = a
        .parsed(&["-G", "--cudagraph"], "a number of graph launches", num)?
        .unwrap_or(0);
    let threads = a.flag(&["--threads"]);
    let id = a.value(&["--id"])?;
    let rank = a.parsed(&["--rank"], "a rank", num)?;
    let nranks = a.parsed(&["--nranks"], "a rank count", num)?;
    let rest = a.rest();
    let coll = match rest {
        [name] => PerfColl::parse(name).ok_or_else(|| format!("unknown collective {name:?}"))?,
        [] => return Err("which collective? (all-reduce, reduce-scatter, ...)".to_string()),
        [_, extra, ..] => return Err(format!("unexpected argument {extra:?}")),
    };
    let factor = factor.unwrap_or(if step_bytes.is_some() { 1 } else { 2 });
    let args = PerfArgs {
        coll,
        device,
        ranks,
        min_bytes: min_bytes.unwrap_or(8),
        max_bytes: max_bytes.unwrap_or(64 << 20),
        factor,
        step_bytes: step_bytes.unwrap_or(1 << 20),
        iters: iters.unwrap_or(20),
        warmup: warmup.unwrap_or(5),
        dtype: dtype.unwrap_or(DataType::Float32),
        op: op.unwrap_or(RedOp::Sum),
        root,
        check,
        channels,
        transport,
        timeout,
        graph_launches,
        threads,
        id,
        rank,
        nranks,
        role,
    };
    if args.ranks == Some(0) {
        return Err("--ranks must be at least 1".to_string());
    }
    if args.min_bytes > args.max_bytes {
        return Err(format!(
            "invalid sizes for 'minbytes' and 'maxbytes': {} > {}",
            args.min_bytes, args.max_bytes
        ));
    }
    if args.threads && args.device != PerfDevice::Cuda {
        return Err("--threads needs --device cuda".to_string());
    }
    if args.graph_launches > 0 && args.check == Check::Every {
        return Err(
            "-G with a check of every iteration: a graph repeats its calls, so in-place \
             results would be reduced again; check once (the default) or drop -G"
                .to_string(),
        );
    }
    if args.graph_launches > 0 && args.device != PerfDevice::Cuda {
        return Err("-G (CUDA graphs) needs --device cuda".to_string());
    }
    if args.factor == 1 && args.step_bytes == 0 {
        return Err("-i 0 with -f 1 would never reach the largest size".to_string());
    }
    Ok(args)
}

pub fn main(argv: &[String]) -> ExitCode {
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("weft perf: {e}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("weft perf: {e}");
            return ExitCode::from(2);
        }
    };
    let mut opts = CommOptions::from_settings(&settings);
    if let Some(c) = args.channels {
        opts.nchannels = Some(c);
    }
    if let Some(t) = args.transport {
        opts.transport = t;
    }
    if let Some(t) = args.timeout {
        opts.timeout = t;
        opts.bootstrap.timeout = t;
    }
    // Who am I: a rank of a local run, a rank of a job, or the launcher of a local run.
    let joined = if let Some(role) = &args.role {
        parse_role(role).map(|(id, r, n)| {
            // Local runs stay on loopback unless told otherwise.
            if opts.socket_ifname.is_none() && settings.net.socket.ifname.is_none() {
                opts.socket_ifname = Some("=lo".to_string());
            }
            (id, r, n)
        })
    } else if let Some(hex) = &args.id {
        match weft_runtime::launcher::resolve(args.rank, args.nranks, |k| std::env::var(k).ok()) {
            Ok(info) => UniqueId::from_hex(hex)
                .map(|id| (id, info.rank, info.world_size))
                .map_err(|e| format!("--id: {e}")),
            Err(e) => Err(e.to_string()),
        }
    } else {
        let ranks = match (args.ranks, args.device) {
            (Some(n), _) => n,
            (None, PerfDevice::Cpu) => 2,
            (None, PerfDevice::Cuda) => match crate::perf_cuda::gpu_count() {
                Ok(0) | Err(_) => {
                    eprintln!(
                        "weft perf: --device cuda: no GPU found ({}); use --device cpu for host memory",
                        crate::perf_cuda::gpu_count()
                            .err()
                            .map_or("CUDA sees 0 devices".to_string(), |e| e.to_string())
                    );
                    return ExitCode::from(2);
                }
                Ok(n) => n,
            },
        };
        if args.threads {
            return run_threads(&args, ranks, &opts);
        }
        return run_local(ranks, argv, opts.bootstrap.clone(), opts.timeout);
    };
    let (id, rank, nranks) = match joined {
        Ok(v) => v,
        Err(e) => {
            eprintln!("weft perf: {e}");
            return ExitCode::from(2);
        }
    };
    let local_rank = weft_runtime::launcher::resolve(None, None, |k| std::env::var(k).ok())
        .ok()
        .and_then(|info| info.local_rank);
    match run_rank(&args, &id, rank, nranks, local_rank, &opts) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("weft perf: rank {rank}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs every rank as a thread of this process, over an in-process rendezvous.
fn run_threads(args: &PerfArgs, nranks: usize, opts: &CommOptions) -> ExitCode {
    let mut bopts = opts.bootstrap.clone();
    if bopts.interface.is_none() && bopts.root_ip.is_none() {
        bopts.root_ip = Some(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    }
    let mut opts = opts.clone();
    if opts.socket_ifname.is_none() {
        opts.socket_ifname = Some("=lo".to_string());
    }
    let (id, root) = match weft_runtime::bootstrap::BootstrapRoot::start(&bopts) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("weft perf: cannot start the rendezvous: {e}");
            return ExitCode::FAILURE;
        }
    };
    let results: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..nranks)
            .map(|rank| {
                let (id, opts) = (&id, &opts);
                scope.spawn(move || {
                    run_rank(args, id, rank, nranks, Some(rank), opts)
                        .map_err(|e| format!("rank {rank}: {e}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a rank thread panicked".to_string()))
            })
            .collect()
    });
    drop(root);
    let mut status = ExitCode::SUCCESS;
    for r in results {
        match r {
            Ok(0) => {}
            Ok(_) => status = ExitCode::FAILURE,
            Err(e) => {
                eprintln!("weft perf: {e}");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}

fn parse_role(role: &str) -> Result<(UniqueId, usize, usize), String> {
    let mut parts = role.split(':');
    let (Some(hex), Some(r), Some(n), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("{ROLE_FLAG} {role:?}: expected ID:RANK:NRANKS"));
    };
    let id = UniqueId::from_hex(hex).map_err(|e| e.to_string())?;
    let r = r
        .parse()
        .map_err(|_| format!("{ROLE_FLAG}: bad rank {r:?}"))?;
    let n = n
        .parse()
        .map_err(|_| format!("{ROLE_FLAG}: bad rank count {n:?}"))?;
    Ok((id, r, n))
}

/// The buffers of one rank in host memory, sized for the largest size: the calls' own
/// buffers on the CPU, the staging of fills and checks on the GPU.
pub struct Buffers {
    pub send: Vec<u8>,
    pub recv: Vec<u8>,
    /// The message copy for in-place sendrecv (sending from the buffer being received into).
    pub staged: Vec<u8>,
}

impl Buffers {
    fn new(bytes: usize, staged: bool) -> Buffers {
        Buffers {
            send: vec![0u8; bytes],
            recv: vec![0u8; bytes],
            staged: if staged { vec![0u8; bytes] } else { Vec::new() },
        }
    }
}

/// One call's shape.
#[derive(Debug, Clone, Copy)]
struct Shape {
    count: usize,
    in_elems: usize,
    out_elems: usize,
}

impl Shape {
    /// The shape of `coll` at a size of `bytes` (nccl-tests' `getCollByteCount`).
    fn of(coll: PerfColl, bytes: u64, esize: usize, nranks: usize) -> Shape {
        let (count, in_elems, out_elems) = coll.counts(bytes, esize, nranks);
        Shape {
            count,
            in_elems,
            out_elems,
        }
    }
}

/// One call as a backend runs it.
#[derive(Debug, Clone, Copy)]
pub struct PerfCall {
    pub coll: PerfColl,
    pub in_place: bool,
    /// Elements as in NCCL's API (per rank for reduce-scatter and all-gather).
    pub count: usize,
    pub in_bytes: usize,
    pub out_bytes: usize,
    pub dtype: DataType,
    pub op: RedOp,
    pub root: usize,
    pub rank: usize,
    pub nranks: usize,
}

/// The channels a backend's communicator built, for the header.
#[derive(Debug, Clone)]
pub struct ChannelSummary {
    pub nchannels: usize,
    /// The first channel's ring.
    pub ring: Vec<u32>,
    /// The first channel's transport to the next rank; `None` on one rank.
    pub transport: Option<String>,
    pub step_bytes: usize,
}

pub type PerfResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Who runs the calls of a measurement, and where their buffers live: the CPU executor on
/// host memory ([`HostRank`]), or the GPU kernels on device memory ([`CudaRank`], with the
/// host [`Buffers`] as staging for fills and checks). The measurement (fills, checks,
/// timings, the report) is the same over both.
pub trait PerfBackend {
    /// The device columns of nccl-tests' `# Using devices` line: the device, a tab, then
    /// what runs the calls.
    fn device_line(&self) -> String;

    /// The channels, for the header.
    fn channels(&self) -> ChannelSummary;

    /// Further header lines, each starting with `#`.
    fn header_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Gets ready to run calls on `dtype` before any rank runs one. Collective.
    fn prepare(&mut self, _dtype: DataType) -> PerfResult<()> {
        Ok(())
    }

    /// Copies a filled input and a poisoned output from the host buffers to where the
    /// calls read them (nothing to do where the calls run on the host buffers).
    fn upload(&mut self, _send: &[u8], _recv: &[u8]) -> PerfResult<()> {
        Ok(())
    }

    /// Waits for the calls issued so far and copies the output into `recv` (nothing to do
    /// where the calls run on the host buffers).
    fn fetch(&mut self, _recv: &mut [u8]) -> PerfResult<()> {
        Ok(())
    }

    /// Issues one call.
    fn run_once(&mut self, call: &PerfCall, host: &mut Buffers) -> PerfResult<()>;

    /// Every rank's `mine`, by rank (control plane). Collective.
    fn exchange(&mut self, mine: &[u8]) -> PerfResult<Vec<Vec<u8>>>;

    /// Waits for this rank's calls, then for every rank. Collective.
    fn barrier(&mut self) -> PerfResult<()>;

    /// Runs between the barrier and the clock, so that the timed calls start with every
    /// rank running. Collective.
    fn settle(&mut self) -> PerfResult<()> {
        Ok(())
    }

    /// Starts the clock of a timed region.
    fn start_clock(&mut self) -> PerfResult<()>;

    /// Microseconds since `start_clock`, once the calls issued since have ended.
    fn stop_clock(&mut self) -> PerfResult<f64>;

    /// nccl-tests' `-G`: `calls` calls recorded once into a graph, the graph launched
    /// `launches` times; the microseconds per launch, or `None` without graphs.
    fn time_graph(
        &mut self,
        _call: &PerfCall,
        _host: &mut Buffers,
        _calls: usize,
        _launches: usize,
    ) -> PerfResult<Option<f64>> {
        Ok(None)
    }

    /// Ends the communicator in step with the other ranks. Collective.
    fn finalize(&mut self) -> PerfResult<()>;
}

/// One rank's measurement over its backend.
struct Rank<'a, B> {
    args: &'a PerfArgs,
    backend: B,
    rank: usize,
    nranks: usize,
    esize: usize,
}

impl<B: PerfBackend> Rank<'_, B> {
    fn data(&self, seed: u64) -> TestData {
        TestData {
            dtype: self.args.dtype,
            op: self.args.op,
            seed,
            nranks: self.nranks,
        }
    }

    fn expect(&self) -> Expect {
        let root = self.args.root;
        match self.args.coll {
            PerfColl::AllReduce => Expect::AllReduce,
            PerfColl::ReduceScatter => Expect::ReduceScatter,
            PerfColl::AllGather => Expect::AllGather,
            PerfColl::Broadcast => Expect::Broadcast { root },
            PerfColl::Reduce => Expect::Reduce { root },
            PerfColl::SendRecv => Expect::Recv {
                from: (self.rank + self.nranks - 1) % self.nranks,
            },
        }
    }

    fn shape(&self, bytes: u64) -> Shape {
        Shape::of(self.args.coll, bytes, self.esize, self.nranks)
    }

    fn call(&self, s: Shape, in_place: bool) -> PerfCall {
        PerfCall {
            coll: self.args.coll,
            in_place,
            count: s.count,
            in_bytes: s.in_elems * self.esize,
            out_bytes: s.out_elems * self.esize,
            dtype: self.args.dtype,
            op: self.args.op,
            root: self.args.root,
            rank: self.rank,
            nranks: self.nranks,
        }
    }

    /// Fills the input of one call (and, in place, puts it where NCCL's layout wants it).
    fn fill(&mut self, b: &mut Buffers, s: Shape, in_place: bool, seed: u64) -> PerfResult<()> {
        let data = self.data(seed);
        let (in_bytes, out_bytes) = (s.in_elems * self.esize, s.out_elems * self.esize);
        let recv_bytes = out_bytes.max(in_bytes);
        b.recv[..recv_bytes].fill(0xa5);
        if !in_place {
            data.fill(self.rank, 0, &mut b.send[..in_bytes]);
        } else {
            match self.args.coll {
                PerfColl::AllGather => {
                    let at = self.rank * in_bytes;
                    data.fill(self.rank, 0, &mut b.recv[at..at + in_bytes]);
                }
                _ => data.fill(self.rank, 0, &mut b.recv[..in_bytes]),
            }
        }
        self.backend
            .upload(&b.send[..in_bytes], &b.recv[..recv_bytes])
    }

    /// Brings the output back where the calls run elsewhere than the host buffers.
    fn fetch(&mut self, b: &mut Buffers, s: Shape) -> PerfResult<()> {
        let bytes = s.in_elems.max(s.out_elems) * self.esize;
        self.backend.fetch(&mut b.recv[..bytes])
    }

    /// The output of the last call, as a slice of the rank's result.
    fn output<'b>(&self, b: &'b Buffers, s: Shape, in_place: bool) -> &'b [u8] {
        let out_bytes = s.out_elems * self.esize;
        match (in_place, self.args.coll) {
            (true, PerfColl::ReduceScatter) => {
                let at = self.rank * out_bytes;
                &b.recv[at..at + out_bytes]
            }
            _ => &b.recv[..out_bytes],
        }
    }

    fn run_once(&mut self, b: &mut Buffers, s: Shape, in_place: bool) -> PerfResult<()> {
        let call = self.call(s, in_place);
        self.backend.run_once(&call, b)
    }

    /// Runs `iters` calls and returns their total time in microseconds (the backend's
    /// clock: host time on the CPU, CUDA events on the GPU), or, with `-G`, the time of
    /// one launch of a graph of them.
    fn timed(
        &mut self,
        b: &mut Buffers,
        s: Shape,
        in_place: bool,
        iters: usize,
    ) -> PerfResult<f64> {
        let call = self.call(s, in_place);
        if self.args.graph_launches > 0 {
            let launches = self.args.graph_launches;
            if let Some(us) = self.backend.time_graph(&call, b, iters, launches)? {
                return Ok(us);
            }
        }
        self.backend.start_clock()?;
        for _ in 0..iters {
            self.backend.run_once(&call, b)?;
        }
        self.backend.stop_clock()
    }

    /// Sums `value` over ranks (control plane).
    fn sum_f64(&mut self, value: f64) -> PerfResult<f64> {
        let all = self.backend.exchange(&value.to_be_bytes())?;
        Ok(all
            .iter()
            .map(|b| f64::from_be_bytes(b.as_slice().try_into().unwrap_or([0; 8])))
            .sum())
    }

    /// One column group of a row: (average time in us, wrong elements over all ranks, or
    /// -1 when nothing was checked).
    fn bench(
        &mut self,
        b: &mut Buffers,
        s: Shape,
        in_place: bool,
        seed: u64,
    ) -> PerfResult<(f64, i64)> {
        let expect = self.expect();
        let mut wrong = 0u64;
        // Check once before timing (it doubles as this size's warm-up).
        self.fill(b, s, in_place, seed)?;
        self.run_once(b, s, in_place)?;
        if self.args.check != Check::Off {
            self.fetch(b, s)?;
            let data = self.data(seed);
            let out = self.output(b, s, in_place);
            wrong += data.count_wrong(expect, self.rank, s.count, out) as u64;
        }
        self.backend.barrier()?;
        self.backend.settle()?;
        let mut elapsed_us = 0.0;
        if self.args.check == Check::Every {
            for iter in 0..self.args.iters {
                let seed = seed.wrapping_add(1 + iter as u64);
                self.fill(b, s, in_place, seed)?;
                elapsed_us += self.timed(b, s, in_place, 1)?;
                self.fetch(b, s)?;
                let data = self.data(seed);
                wrong += data.count_wrong(expect, self.rank, s.count, self.output(b, s, in_place))
                    as u64;
            }
        } else {
            elapsed_us = self.timed(b, s, in_place, self.args.iters)?;
        }
        let mine = elapsed_us / self.args.iters.max(1) as f64;
        let avg = self.sum_f64(mine)? / self.nranks as f64;
        let wrong = self.sum_f64(wrong as f64)? as i64;
        Ok((
            avg,
            if self.args.check == Check::Off {
                -1
            } else {
                wrong
            },
        ))
    }

    /// Tells every rank which device this rank uses; rank 0 prints nccl-tests' header.
    fn header(&mut self, out: &mut dyn Write) -> PerfResult<()> {
        let me = format!(
            "{}\t{}\t{}",
            hostname(),
            std::process::id(),
            self.backend.device_line()
        );
        let devices = self.backend.exchange(me.as_bytes())?;
        if self.rank == 0 {
            let channels = self.backend.channels();
            let notes = self.backend.header_notes();
            write_header(out, self.args, &devices, &channels, &notes, self.nranks);
        }
        Ok(())
    }

    /// nccl-tests' warm-up: the largest size, then the smallest; then a barrier.
    fn warm_up(&mut self, b: &mut Buffers) -> PerfResult<()> {
        for s in [
            self.shape(self.args.max_bytes),
            self.shape(self.args.min_bytes),
        ] {
            self.fill(b, s, false, 1)?;
            for _ in 0..self.args.warmup {
                self.run_once(b, s, false)?;
            }
        }
        self.backend.barrier()
    }

    /// The row of size `bytes` (the `k`th): its out-of-place and in-place columns, each
    /// added to `totals`.
    fn row(
        &mut self,
        b: &mut Buffers,
        k: usize,
        bytes: u64,
        totals: &mut Totals,
    ) -> PerfResult<String> {
        let args = self.args;
        let s = self.shape(bytes);
        let printed = (s.in_elems.max(s.out_elems) * self.esize) as u64;
        let redop = if args.coll.reduces() {
            args.op.name()
        } else {
            "none"
        };
        let root: i64 = if args.coll.rooted() {
            args.root as i64
        } else {
            -1
        };
        let mut row = format!(
            "{printed:>12}  {:>12}  {:>8}  {redop:>6}  {root:>6}",
            s.count,
            args.dtype.name()
        );
        for in_place in [false, true] {
            let seed = 0x5eed_0000u64 + (k as u64) * 2 + u64::from(in_place);
            let (us, wrong) = self.bench(b, s, in_place, seed)?;
            let algbw = if us > 0.0 {
                printed as f64 / (us * 1e-6) / 1e9
            } else {
                0.0
            };
            let busbw = algbw * args.coll.bus_factor(self.nranks);
            totals.bw_sum += busbw;
            totals.bw_count += 1;
            totals.wrong += wrong.max(0) as u64;
            row.push_str(&format!(
                "  {}  {algbw:6.2}  {busbw:6.2}  {wrong:5}",
                time_str(us)
            ));
        }
        Ok(row)
    }

    /// Every size's row, printed by rank 0 as it completes (with progress on a terminal);
    /// returns the totals.
    fn rows(&mut self, out: &mut dyn Write, b: &mut Buffers) -> PerfResult<Totals> {
        let sizes = sizes(self.args);
        let main = self.rank == 0;
        let progress = main && std::io::stderr().is_terminal();
        let started = Instant::now();
        let mut totals = Totals::default();
        for (k, &bytes) in sizes.iter().enumerate() {
            if progress && started.elapsed() > Duration::from_secs(1) {
                let s = self.shape(bytes);
                let printed = (s.in_elems.max(s.out_elems) * self.esize) as u64;
                eprint!("\r# [{}/{}] {printed} B ...", k + 1, sizes.len());
                let _ = std::io::stderr().flush();
            }
            let row = self.row(b, k, bytes, &mut totals)?;
            if main {
                if progress && started.elapsed() > Duration::from_secs(1) {
                    eprint!("\r\x1b[K");
                }
                let _ = writeln!(out, "{row}");
                let _ = out.flush();
            }
        }
        Ok(totals)
    }
}

/// What the rows add up to: bus bandwidths for the average, wrong elements.
#[derive(Debug, Default)]
struct Totals {
    bw_sum: f64,
    bw_count: usize,
    wrong: u64,
}

fn time_str(us: f64) -> String {
    if us >= 10000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// The sizes measured: from the smallest to the largest, times the factor or plus the step.
fn sizes(args: &PerfArgs) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = args.min_bytes;
    while size <= args.max_bytes {
        sizes.push(size);
        size = if args.factor > 1 {
            size.saturating_mul(args.factor)
        } else {
            size.saturating_add(args.step_bytes)
        };
        if size == *sizes.last().unwrap_or(&0) {
            break;
        }
    }
    sizes
}

/// nccl-tests' header: the run's parameters, every rank's device (`devices`: the lines
/// each rank sent), the channels, `notes`, and the column titles.
fn write_header(
    out: &mut dyn Write,
    args: &PerfArgs,
    devices: &[Vec<u8>],
    channels: &ChannelSummary,
    notes: &[String],
    nranks: usize,
) {
    let step = if args.factor > 1 {
        format!("{}(factor)", args.factor)
    } else {
        format!("{}(bytes)", args.step_bytes)
    };
    let _ = writeln!(
        out,
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} agg iters: 1 validation: {} graph: {}",
        args.min_bytes,
        args.max_bytes,
        args.warmup,
        args.iters,
        match args.check {
            Check::Once => 1,
            Check::Every => args.iters,
            Check::Off => 0,
        },
        args.graph_launches
    );
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "# Using devices");
    for (k, entry) in devices.iter().enumerate() {
        let text = String::from_utf8_lossy(entry);
        let mut f = text.splitn(4, '\t');
        let (host, pid, dev, what) = (
            f.next().unwrap_or("?"),
            f.next().unwrap_or("?"),
            f.next().unwrap_or("?"),
            f.next().unwrap_or(""),
        );
        let _ = writeln!(
            out,
            "#  Rank {k:2} Group  0 Pid {pid:>6} on {host:>10} device {dev} {what}"
        );
    }
    let _ = writeln!(
        out,
        "#  {} channel(s), ring {:?}, transport {}, {} KiB FIFO steps",
        channels.nchannels,
        channels.ring,
        if nranks > 1 {
            channels.transport.clone().unwrap_or_default()
        } else {
            "none (1 rank)".to_string()
        },
        channels.step_bytes / 1024
    );
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(out, "#");
    let _ = writeln!(
        out,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    );
    let _ = writeln!(
        out,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        out,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    let _ = out.flush();
}

/// nccl-tests' last lines: the wrong values and the average bus bandwidth.
fn write_summary(out: &mut dyn Write, totals: &Totals) {
    let avg = if totals.bw_count > 0 {
        totals.bw_sum / totals.bw_count as f64
    } else {
        0.0
    };
    let wrong = totals.wrong;
    let _ = writeln!(
        out,
        "# Out of bounds values : {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    let _ = writeln!(out, "# Avg bus bandwidth    : {} ", fmt_g(avg));
    let _ = writeln!(out, "#");
    // nccl-tests ends with NCCL's last error, empty after a clean run.
    let _ = writeln!(out);
    let _ = out.flush();
}

/// Runs the whole measurement as `rank`; returns the wrong-element total (rank 0 prints).
fn run_rank(
    args: &PerfArgs,
    id: &UniqueId,
    rank: usize,
    nranks: usize,
    local_rank: Option<usize>,
    opts: &CommOptions,
) -> PerfResult<u64> {
    if args.coll.rooted() && args.root >= nranks {
        return Err(CommError::InvalidArgument(format!(
            "--root {} out of range for {nranks} ranks",
            args.root
        ))
        .into());
    }
    match args.device {
        PerfDevice::Cpu => measure(args, HostRank::init(id, rank, nranks, opts)?, rank, nranks),
        PerfDevice::Cuda => {
            let device = crate::perf_cuda::device_for(rank, local_rank)?;
            let backend = CudaRank::init(
                id,
                rank,
                nranks,
                device,
                opts,
                max_bytes(args, nranks),
                args.coll == PerfColl::SendRecv,
            )?;
            measure(args, backend, rank, nranks)
        }
    }
}

/// Bytes of the largest buffer of the largest size.
fn max_bytes(args: &PerfArgs, nranks: usize) -> usize {
    let esize = args.dtype.size_of_elem();
    let s = Shape::of(args.coll, args.max_bytes, esize, nranks);
    s.in_elems.max(s.out_elems) * esize
}

/// The measurement as `rank` over `backend`: the header, the warm-up, a row per size, the
/// summary; returns the wrong-element total.
fn measure<B: PerfBackend>(
    args: &PerfArgs,
    backend: B,
    rank: usize,
    nranks: usize,
) -> PerfResult<u64> {
    let mut r = Rank {
        args,
        backend,
        rank,
        nranks,
        esize: args.dtype.size_of_elem(),
    };
    // Only rank 0 prints; it holds stdout for the whole run, so the other ranks (threads of
    // this process with --threads) must not wait for it.
    let mut out: Box<dyn Write> = if rank == 0 {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::sink())
    };
    r.header(&mut out)?;
    let mut b = Buffers::new(max_bytes(args, nranks), args.coll == PerfColl::SendRecv);
    r.backend.prepare(args.dtype)?;
    r.warm_up(&mut b)?;
    let totals = r.rows(&mut out, &mut b)?;
    if rank == 0 {
        write_summary(&mut out, &totals);
    }
    r.backend.finalize()?;
    Ok(totals.wrong)
}

/// C's `%g`: 6 significant digits, no trailing zeros; scientific (`1.5e-05`) below 1e-4
/// and from 1e6.
fn fmt_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let exp = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&exp) {
        let mantissa = v / 10f64.powi(exp);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim(format!("{mantissa:.5}")), exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim(format!("{v:.decimals$}"))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nccl_tests_counts_and_factors() {
        assert_eq!(PerfColl::AllGather.counts(1000, 4, 3), (83, 83, 249));
        assert_eq!(PerfColl::ReduceScatter.counts(1000, 4, 3), (83, 249, 83));
        assert_eq!(PerfColl::AllReduce.counts(8, 4, 4), (2, 2, 2));
        assert!((PerfColl::AllReduce.bus_factor(4) - 1.5).abs() < 1e-12);
        assert!((PerfColl::AllGather.bus_factor(4) - 0.75).abs() < 1e-12);
        assert_eq!(PerfColl::Broadcast.bus_factor(4), 1.0);
    }

    #[test]
    fn formats_like_c() {
        assert_eq!(time_str(12.345), "  12.35");
        assert_eq!(time_str(123.45), "  123.5");
        assert_eq!(time_str(12345.6), "  12346");
        assert_eq!(fmt_g(1.234567), "1.23457");
        assert_eq!(fmt_g(0.5), "0.5");
        assert_eq!(fmt_g(12.0), "12");
        assert_eq!(fmt_g(3.70078e-5), "3.70078e-05");
        assert_eq!(fmt_g(0.000123), "0.000123");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
    }

    #[test]
    fn args() {
        let a = parse_args(&[
            "all-reduce".into(),
            "--ranks".into(),
            "4".into(),
            "-e".into(),
            "1M".into(),
        ])
        .unwrap();
        assert_eq!(
            (a.coll, a.ranks, a.max_bytes, a.factor),
            (PerfColl::AllReduce, Some(4), 1 << 20, 2)
        );
        assert_eq!(a.device, PerfDevice::Cpu);
        let g = parse_args(&["all-gather".into(), "--device".into(), "cuda".into()]).unwrap();
        assert_eq!((g.device, g.ranks), (PerfDevice::Cuda, None));
        assert!(parse_args(&["all-gather".into(), "--device".into(), "tpu".into()]).is_err());
        let graph = ["all-reduce", "--device", "cuda", "-G", "10"].map(String::from);
        assert_eq!(parse_args(&graph).unwrap().graph_launches, 10);
        let threads = ["all-reduce", "--device", "cuda", "--threads"].map(String::from);
        assert!(parse_args(&threads).unwrap().threads);
        let cpu_threads = ["all-reduce", "--threads"].map(String::from);
        assert!(
            parse_args(&cpu_threads)
                .unwrap_err()
                .contains("--device cuda")
        );
        let checked = ["all-reduce", "--device", "cuda", "-G", "2", "-c", "1"].map(String::from);
        assert!(parse_args(&checked).unwrap_err().contains("-G"));
        let no_gpu = ["all-reduce", "-G", "10"].map(String::from);
        assert!(parse_args(&no_gpu).unwrap_err().contains("--device cuda"));
        assert!(parse_args(&["bogus".into()]).is_err());
        assert!(
            parse_args(&[
                "reduce".into(),
                "-b".into(),
                "2M".into(),
                "-e".into(),
                "1M".into()
            ])
            .is_err()
        );
    }
}
