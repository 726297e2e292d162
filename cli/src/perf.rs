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

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use weft_config::Settings;
use weft_core::abi::{DataType, RedOp};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::comm::{Comm, CommError, CommOptions, P2pOp, TransportChoice};
use weft_verify::{Expect, TestData};

use crate::args::{Args, parse_size};
use crate::perf_cuda::CudaRank;
use crate::spawn::{ROLE_FLAG, run_local};
use weft_core::sched::Collective;

/// Untimed 4-byte all-reduces before each timing on the CPU (see `Rank::settle`): about
/// 0.4 ms when the ranks run side by side, a few ms (some scheduler balancing periods) when
/// they share a CPU.
const SETTLE_CALLS: usize = 2048;
/// ... or fewer, once one rank has spent this long settling (slow links, emulated VMs).
const SETTLE_TIME: Duration = Duration::from_millis(20);

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

/// The buffers of one rank, sized for the largest size.
struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    /// The message copy for in-place sendrecv (sending from the buffer being received into).
    staged: Vec<u8>,
}

/// One call's shape.
#[derive(Debug, Clone, Copy)]
struct Shape {
    count: usize,
    in_elems: usize,
    out_elems: usize,
}

/// Who runs the calls: the CPU executor on host memory, or the GPU kernels on device
/// memory (with the host buffers as staging for fills and checks).
// One value per process, moved once: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Cpu(Comm),
    Cuda(Box<CudaRank>),
}

struct Rank<'a> {
    args: &'a PerfArgs,
    backend: Backend,
    rank: usize,
    nranks: usize,
    esize: usize,
}

type PerfResult<T> = Result<T, Box<dyn std::error::Error>>;

impl Rank<'_> {
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

    /// Fills the input of one call (and, in place, puts it where NCCL's layout wants it).
    fn fill(&self, b: &mut Buffers, s: Shape, in_place: bool, seed: u64) -> PerfResult<()> {
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
        if let Backend::Cuda(c) = &self.backend {
            c.upload(&b.send[..in_bytes], &b.recv[..recv_bytes])?;
        }
        Ok(())
    }

    /// Brings the output back from the GPU (nothing to do on the host).
    fn fetch(&mut self, b: &mut Buffers, s: Shape) -> PerfResult<()> {
        if let Backend::Cuda(c) = &mut self.backend {
            c.synchronize()?;
            let bytes = s.in_elems.max(s.out_elems) * self.esize;
            c.download(&mut b.recv[..bytes])?;
        }
        Ok(())
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
        let (dtype, op, root) = (self.args.dtype, self.args.op, self.args.root);
        let (in_bytes, out_bytes) = (s.in_elems * self.esize, s.out_elems * self.esize);
        let c = match &mut self.backend {
            Backend::Cpu(c) => c,
            Backend::Cuda(g) => {
                let collective = match self.args.coll {
                    PerfColl::AllReduce => Some(Collective::AllReduce),
                    PerfColl::ReduceScatter => Some(Collective::ReduceScatter),
                    PerfColl::AllGather => Some(Collective::AllGather),
                    PerfColl::Broadcast => Some(Collective::Broadcast { root: root as u32 }),
                    PerfColl::Reduce => Some(Collective::Reduce { root: root as u32 }),
                    PerfColl::SendRecv => None,
                };
                // In place, the input sits in the output buffer: NCCL's layout puts an
                // all-gather's at this rank's block and a reduce-scatter's at the start.
                let (in_offset, out_offset) = match self.args.coll {
                    PerfColl::AllGather if in_place => (self.rank * in_bytes, 0),
                    PerfColl::ReduceScatter if in_place => (0, self.rank * out_bytes),
                    _ => (0, 0),
                };
                let place = crate::perf_cuda::Placement {
                    in_place,
                    in_offset,
                    out_offset,
                };
                g.enqueue(collective, place, s.count, in_bytes, dtype, op)?;
                return Ok(());
            }
        };
        let send = &b.send[..in_bytes];
        match (self.args.coll, in_place) {
            (PerfColl::AllReduce, false) => c.all_reduce(send, &mut b.recv[..out_bytes], dtype, op),
            (PerfColl::AllReduce, true) => {
                c.all_reduce_in_place(&mut b.recv[..out_bytes], dtype, op)
            }
            (PerfColl::ReduceScatter, false) => {
                c.reduce_scatter(send, &mut b.recv[..out_bytes], dtype, op)
            }
            (PerfColl::ReduceScatter, true) => {
                c.reduce_scatter_in_place(&mut b.recv[..in_bytes], dtype, op)
            }
            (PerfColl::AllGather, false) => c.all_gather(send, &mut b.recv[..out_bytes], dtype),
            (PerfColl::AllGather, true) => c.all_gather_in_place(&mut b.recv[..out_bytes], dtype),
            (PerfColl::Broadcast, false) => {
                c.broadcast(send, &mut b.recv[..out_bytes], dtype, root)
            }
            (PerfColl::Broadcast, true) => {
                c.broadcast_in_place(&mut b.recv[..out_bytes], dtype, root)
            }
            (PerfColl::Reduce, false) => c.reduce(send, &mut b.recv[..out_bytes], dtype, op, root),
            (PerfColl::Reduce, true) => {
                c.reduce_in_place(&mut b.recv[..out_bytes], dtype, op, root)
            }
            (PerfColl::SendRecv, _) => {
                let next = (self.rank + 1) % self.nranks;
                let prev = (self.rank + self.nranks - 1) % self.nranks;
                let src: &[u8] = if in_place {
                    // Sending from the buffer that receives: stage the message first (part
                    // of the timed work, as the copy is what in-place costs here).
                    b.staged[..in_bytes].copy_from_slice(&b.recv[..in_bytes]);
                    &b.staged[..in_bytes]
                } else {
                    send
                };
                c.group(&mut [
                    P2pOp::Send {
                        peer: next,
                        buf: src,
                    },
                    P2pOp::Recv {
                        peer: prev,
                        buf: &mut b.recv[..out_bytes],
                    },
                ])
            }
        }?;
        Ok(())
    }

    /// Sums `value` over ranks (control plane).
    fn exchange(&mut self, mine: &[u8]) -> PerfResult<Vec<Vec<u8>>> {
        Ok(match &mut self.backend {
            Backend::Cpu(c) => c.exchange(mine)?,
            Backend::Cuda(g) => g.comm.exchange(mine)?,
        })
    }

    fn barrier(&mut self) -> PerfResult<()> {
        match &mut self.backend {
            Backend::Cpu(c) => c.barrier()?,
            Backend::Cuda(g) => {
                g.synchronize()?;
                g.comm.barrier()?
            }
        }
        Ok(())
    }

    /// On the CPU, a few untimed 4-byte all-reduces between the barrier and the clock. The
    /// barrier is over TCP: the ranks sleep in it, and the scheduler may wake them on one
    /// CPU, where they take turns instead of running side by side until it separates them,
    /// which spinning ranks make it do. (MPI's benchmark gets the same from its per-size
    /// warm-up and its spinning MPI_Barrier.)
    fn settle(&mut self) -> PerfResult<()> {
        if let Backend::Cpu(c) = &mut self.backend {
            let started = Instant::now();
            for _ in 0..SETTLE_CALLS {
                // Each call carries "I have settled long enough"; every rank gets the same
                // maximum, so all stop after the same call.
                let mut done = u32::from(started.elapsed() > SETTLE_TIME).to_ne_bytes();
                c.all_reduce_in_place(&mut done, DataType::Uint32, RedOp::Max)?;
                if u32::from_ne_bytes(done) != 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Runs `iters` calls and returns their total time in microseconds: host time around
    /// the calls on the CPU, CUDA events around them on the GPU.
    fn timed(
        &mut self,
        b: &mut Buffers,
        s: Shape,
        in_place: bool,
        iters: usize,
    ) -> PerfResult<f64> {
        if self.args.graph_launches > 0 {
            if let Backend::Cuda(g) = &self.backend {
                // nccl-tests' -G: the calls recorded once into a CUDA graph, the graph
                // launched N times; the time per call is the total over iters * N.
                g.begin_graph()?;
                let recorded = (0..iters).try_for_each(|_| self.run_once(b, s, in_place));
                let Backend::Cuda(g) = &mut self.backend else {
                    return Err("the backend changed during a capture".into());
                };
                let graph = g.end_graph();
                recorded?;
                let graph = graph?;
                g.time_start()?;
                for _ in 0..self.args.graph_launches {
                    graph.launch(&g.stream)?;
                }
                return Ok(g.time_stop()? / self.args.graph_launches as f64);
            }
        }
        if let Backend::Cuda(g) = &self.backend {
            g.time_start()?;
        }
        let t = Instant::now();
        for _ in 0..iters {
            self.run_once(b, s, in_place)?;
        }
        Ok(match &mut self.backend {
            Backend::Cpu(_) => t.elapsed().as_secs_f64() * 1e6,
            Backend::Cuda(g) => g.time_stop()?,
        })
    }

    fn sum_f64(&mut self, value: f64) -> PerfResult<f64> {
        let all = self.exchange(&value.to_be_bytes())?;
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
        self.barrier()?;
        self.settle()?;
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
    let esize = args.dtype.size_of_elem();
    let max_shape = {
        let (count, in_elems, out_elems) = args.coll.counts(args.max_bytes, esize, nranks);
        Shape {
            count,
            in_elems,
            out_elems,
        }
    };
    let max_bytes = max_shape.in_elems.max(max_shape.out_elems) * esize;
    let backend = match args.device {
        PerfDevice::Cpu => Backend::Cpu(Comm::init(id, rank, nranks, opts)?),
        PerfDevice::Cuda => {
            let device = crate::perf_cuda::device_for(rank, local_rank)?;
            Backend::Cuda(Box::new(CudaRank::init(
                id,
                rank,
                nranks,
                device,
                opts,
                max_bytes,
                args.coll == PerfColl::SendRecv,
            )?))
        }
    };
    let mut r = Rank {
        args,
        backend,
        rank,
        nranks,
        esize,
    };
    let main = rank == 0;
    // Only rank 0 prints; it holds stdout for the whole run, so the other ranks (threads of
    // this process with --threads) must not wait for it.
    let mut out: Box<dyn Write> = if main {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::sink())
    };
    let out = &mut out;
    let me = match &r.backend {
        Backend::Cpu(_) => format!(
            "{}\t{}\tcpu\t[host memory] weft CPU executor",
            hostname(),
            std::process::id()
        ),
        Backend::Cuda(g) => format!(
            "{}\t{}\t{:>3}\t[{}] {} weft GPU kernels",
            hostname(),
            std::process::id(),
            g.device,
            g.bus_id,
            g.name
        ),
    };
    let all = r.exchange(me.as_bytes())?;
    if main {
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
        for (k, entry) in all.iter().enumerate() {
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
        let (nchannels, ring, transport, step_bytes) = match &r.backend {
            Backend::Cpu(c) => (
                c.nchannels(),
                c.rings().first().cloned().unwrap_or_default(),
                c.channel_transports()
                    .first()
                    .and_then(|k| k.map(|(send, _)| send.name().to_string())),
                c.step_bytes(),
            ),
            Backend::Cuda(g) => (
                g.comm.nchannels() as usize,
                g.comm.rings().first().cloned().unwrap_or_default(),
                Some(g.comm.transport_name().to_string()),
                g.comm.step_bytes(),
            ),
        };
        let _ = writeln!(
            out,
            "#  {nchannels} channel(s), ring {ring:?}, transport {}, {} KiB FIFO steps",
            if nranks > 1 {
                transport.unwrap_or_default()
            } else {
                "none (1 rank)".to_string()
            },
            step_bytes / 1024
        );
        if let Backend::Cuda(g) = &r.backend {
            // Which protocols the sizes below may run (LL by default on P2P windows, on SHM
            // windows only where a setting asked for it; docs/gpu.md).
            let p = g.comm.protocols();
            let _ = writeln!(
                out,
                "#  protocols: {} (NCCL_PROTO {}), {} KiB LL buffers, send/recv LL {}",
                p.available(),
                p.enable,
                p.ll_buffer_bytes() / 1024,
                p.p2p_threshold()
                    .filter(|t| *t > 0)
                    .map_or("never".to_string(), |t| format!("up to {t} B per channel"))
            );
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
    let shape = |bytes: u64| {
        let (count, in_elems, out_elems) = args.coll.counts(bytes, esize, nranks);
        Shape {
            count,
            in_elems,
            out_elems,
        }
    };
    let mut b = Buffers {
        send: vec![0u8; max_bytes],
        recv: vec![0u8; max_bytes],
        staged: if args.coll == PerfColl::SendRecv {
            vec![0u8; max_bytes]
        } else {
            Vec::new()
        },
    };
    if let Backend::Cuda(g) = &mut r.backend {
        // Every rank's kernels loaded before any rank launches one (a module load waits
        // for the device; see GpuComm::prepare).
        g.comm.prepare(&[args.dtype, DataType::Uint8])?;
        g.comm.barrier()?;
    }
    // nccl-tests' warm-up: the largest size, then the smallest.
    for s in [max_shape, shape(args.min_bytes)] {
        r.fill(&mut b, s, false, 1)?;
        for _ in 0..args.warmup {
            r.run_once(&mut b, s, false)?;
        }
    }
    r.barrier()?;

    let progress = main && std::io::stderr().is_terminal();
    let started = Instant::now();
    let (mut bw_sum, mut bw_count, mut wrong_total) = (0.0f64, 0usize, 0u64);
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
    for (k, &bytes) in sizes.iter().enumerate() {
        let s = shape(bytes);
        let printed = (s.in_elems.max(s.out_elems) * r.esize) as u64;
        if progress && started.elapsed() > Duration::from_secs(1) {
            eprint!("\r# [{}/{}] {printed} B ...", k + 1, sizes.len());
            let _ = std::io::stderr().flush();
        }
        let mut row = format!(
            "{printed:>12}  {:>12}  {:>8}  {redop:>6}  {root:>6}",
            s.count,
            args.dtype.name()
        );
        for in_place in [false, true] {
            let seed = 0x5eed_0000u64 + (k as u64) * 2 + u64::from(in_place);
            let (us, wrong) = r.bench(&mut b, s, in_place, seed)?;
            let algbw = if us > 0.0 {
                printed as f64 / (us * 1e-6) / 1e9
            } else {
                0.0
            };
            let busbw = algbw * args.coll.bus_factor(nranks);
            bw_sum += busbw;
            bw_count += 1;
            wrong_total += wrong.max(0) as u64;
            row.push_str(&format!(
                "  {}  {algbw:6.2}  {busbw:6.2}  {wrong:5}",
                time_str(us)
            ));
        }
        if main {
            if progress && started.elapsed() > Duration::from_secs(1) {
                eprint!("\r\x1b[K");
            }
            let _ = writeln!(out, "{row}");
            let _ = out.flush();
        }
    }
    if main {
        let avg = if bw_count > 0 {
            bw_sum / bw_count as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "# Out of bounds values : {wrong_total} {}",
            if wrong_total == 0 { "OK" } else { "FAILED" }
        );
        let _ = writeln!(out, "# Avg bus bandwidth    : {} ", fmt_g(avg));
        let _ = writeln!(out, "#");
        // nccl-tests ends with NCCL's last error, empty after a clean run.
        let _ = writeln!(out);
        let _ = out.flush();
    }
    match &mut r.backend {
        Backend::Cpu(c) => c.finalize()?,
        Backend::Cuda(g) => g.comm.finalize()?,
    }
    Ok(wrong_total)
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
