//! The communicator: ranks connected by channels, and the collectives that run over them.
//!
//! [`Comm::init`] follows NCCL's `ncclCommInitRank`:
//!
//! 1. bootstrap: rendezvous at the unique id's root, then a ring of TCP sockets;
//! 2. all-gather each rank's [`Peer`](peers::Peer) (host hash, pid hash, device, and the
//!    settings every rank must share); two ranks on one device of one host are an error;
//! 3. the channels: rank 0 plans them ([`channels::plan_channels`]: NCCL's ring search over
//!    the host's topology when every rank has a GPU of one host, else the plain ring) and
//!    broadcasts the plan ([`channels::agree_on_channels`]);
//! 4. per channel a send connection to the ring's next rank and a receive connection from
//!    its previous one, each over the transport [`connect::Transports::choose`] picks,
//!    built with NCCL's setup / exchange / connect handshake ([`connect::handshake`]);
//! 5. a barrier, so that no rank starts a collective before every rank is connected.
//!
//! Collectives take byte slices and a [`DataType`]; lengths are checked against the count
//! each rank's role needs, in-place variants follow NCCL's aliasing (all-gather's input is
//! the rank's block of the output; reduce-scatter's output is the rank's block of the
//! input). Point-to-point connections are built on first use, in a handshake with that peer.
//!
//! Failure: any error in a collective aborts the communicator (every connection is marked
//! aborted, so the peers fail within microseconds too) and later calls return
//! [`CommError::Failed`]. When a peer process of this host has died, the error names it.

pub mod channels;
pub mod connect;
pub mod error;
pub mod peers;
pub mod rings;

#[cfg(test)]
mod test;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_core::abi::{DataType, RedOp};
use weft_core::fifo::NCCL_STEPS;
use weft_core::fifo::ll::{LL_DATA_BYTES, LL_LINE_BYTES};
use weft_core::sched::Collective;
use weft_core::tune::{ProtocolEnable, TuningModel};
use weft_core::wire::bootstrap::bus_id_from_str;

pub use connect::{TransportChoice, TransportKind};
pub use error::CommError;

use crate::bootstrap::{Bootstrap, BootstrapOptions, UniqueId};
use crate::conn::layout::LL_LINES_GRAIN;
use crate::conn::{
    AbortFlag, DEFAULT_LL_LINES, DEFAULT_STEP_BYTES, FifoLayout, FifoRecvEnd, FifoSendEnd,
    WaitPolicy, Waiter, process_alive,
};
use crate::exec::{
    ExecChannel, ExecError, Executor, Job, RawBuffers, RingConns, Tuning, lock, p2p,
};
use crate::net::any::AnyNet;
use crate::net::ib::IbNet;
use crate::net::mesh::MeshNet;
use crate::net::socket::{SocketConfig, SocketNet};
use crate::transport::net::{NetOptions, NetTransport};
use crate::transport::shm::ShmTransport;
use connect::{Planned, Transports};
use peers::{Peer, Settings};

/// The default deadline of every wait on a peer (30 s; `WEFT_TIMEOUT`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Most channels chosen by default ([`peers::default_channels`]: one per CPU per local
/// rank, up to this). A call uses fewer when it is small (256 KiB of traffic per channel,
/// [`crate::exec::CPU_TRAFFIC_SCALE`] times NCCL's rule).
pub const DEFAULT_MAX_CHANNELS: u32 = 4;
/// Bytes per FIFO step when a NET connection is involved (NCCL's 512 KiB SIMPLE steps:
/// every step is a network message).
pub const NET_STEP_BYTES: usize = 512 * 1024;
/// Smallest FIFO step: chunks are cut in 512-byte grains (NCCL's SIMPLE protocol).
pub const MIN_STEP_BYTES: usize = 512;
/// Most channels a communicator may have.
pub const MAX_CHANNELS: u32 = 64;

/// How a communicator is built. [`CommOptions::from_env`] reads the environment.
#[derive(Debug, Clone)]
pub struct CommOptions {
    /// Channels (rings) to build; `None`: what [`channels::plan_channels`] finds (NCCL's
    /// search when every rank has a GPU of one host, else one per CPU per rank of the host,
    /// at most [`DEFAULT_MAX_CHANNELS`]), within `NCCL_MIN_NCHANNELS` /
    /// `NCCL_MAX_NCHANNELS`. `WEFT_NCHANNELS`; wins over those two.
    pub nchannels: Option<u32>,
    /// Which transport connections use. `WEFT_TRANSPORT=auto|shm|net|ib|mesh`.
    pub transport: TransportChoice,
    /// Deadline of every wait on a peer: bootstrap steps, connects, FIFO waits.
    /// `WEFT_TIMEOUT` (seconds).
    pub timeout: Duration,
    /// The rank's device; `None` for host memory (the CPU executor). Two ranks of one host
    /// may not share a device.
    pub device: Option<i32>,
    /// PCI bus id of `device` in NCCL's integer form
    /// ([`bus_id_from_str`](weft_core::wire::bootstrap::bus_id_from_str)), which the channel
    /// search matches against the topology's GPUs; `None`: asked from the CUDA driver.
    pub bus_id: Option<u64>,
    /// NCCL topology XML for the channel search; `None`: `WEFT_TOPO_FILE` /
    /// `NCCL_TOPO_FILE`, else detection. Read on rank 0 only (it plans for all).
    pub topo_file: Option<std::path::PathBuf>,
    /// Bytes per FIFO step; `None`: 128 KiB with SHM only, 512 KiB when NET is involved.
    /// `WEFT_BUFFSIZE` / `NCCL_BUFFSIZE` (the whole FIFO of 8 steps, as in NCCL).
    pub step_bytes: Option<usize>,
    /// How FIFO waits spin, yield and sleep (its `timeout` is replaced by `timeout` above);
    /// `None`: chosen from the number of ranks on this host and its CPUs (see
    /// [`wait_policy_for`]). `WEFT_WAIT_SPINS`, `WEFT_WAIT_YIELDS`.
    pub wait: Option<WaitPolicy>,
    /// Interfaces for NET connections (`NCCL_SOCKET_IFNAME` syntax); `None`: the
    /// environment's (`WEFT_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`) or NCCL's default.
    pub socket_ifname: Option<String>,
    /// Protocols calls may use, per collective (`NCCL_PROTO` syntax: `LL,Simple`, `^LL`,
    /// `LL,Simple;allreduce:^LL`). `WEFT_PROTO`, else `NCCL_PROTO`; default all.
    pub protocols: ProtocolEnable,
    /// Lines per LL step of SHM connections (a multiple of 128; 0: no LL). `None`:
    /// [`DEFAULT_LL_LINES`]. `WEFT_LL_BUFFSIZE` / `NCCL_LL_BUFFSIZE` (bytes of the 8 LL
    /// steps, flags included, as in NCCL).
    pub ll_lines: Option<usize>,
    /// GPU communicators: the algorithm every call it runs must use (`WEFT_ALGO=ring`,
    /// `oneshot`, `twoshot`, `nvls`), for measurement; `None`: the automatic choice
    /// (`weft_core::algo::Chooser`: one-shot for small all-reduces between peer-mapped ranks,
    /// else the ring). Every rank must set the same. The CPU executor ignores it.
    pub algo: Option<weft_core::algo::GpuAlgo>,
    /// GPU send/receive: bytes per channel up to which a message goes LL (NCCL's rule).
    /// `None`: NCCL's 16384 on P2P windows, never on SHM ones (docs/gpu.md).
    /// `WEFT_P2P_LL_THRESHOLD` / `NCCL_P2P_LL_THRESHOLD`.
    pub p2p_ll_threshold: Option<usize>,
    /// GPU communicators: bounds on the channel count set by the program for this
    /// communicator (`ncclConfig_t`'s `minCTAs` / `maxCTAs`), applied after the environment's
    /// `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS` the same way (at most `max`: the first
    /// channels kept; at least `min`: they repeat). `None`: no bound beyond those.
    pub channel_bounds: Option<ChannelBounds>,
    /// GPU SIMPLE rings: the fewest slices (FIFO steps) each primitive is cut into, as NCCL
    /// cuts a chunk into `SlicePerChunk` slices (see `CollWork::min_slices`), 1 to 8.
    /// `None`: [`crate::gpu::DEFAULT_MIN_SLICES`]. `WEFT_MIN_SLICES`, for measurement;
    /// every rank must set the same.
    pub min_slices: Option<u32>,
    /// GPU P2P connections in read mode (SIMPLE FIFOs in the sender's memory, read by the
    /// receiver), as NCCL's `NCCL_P2P_READ_ENABLE`; `None`: NCCL's default, read mode where
    /// every GPU has compute capability 8.0 and every pair is joined by NVLink (judged from
    /// the GPUs each process can see: with one GPU visible per process, set it). Any rank
    /// that does not take read mode turns it off for all. `WEFT_P2P_READ_ENABLE` /
    /// `NCCL_P2P_READ_ENABLE` (0 or 1).
    pub p2p_read: Option<bool>,
    pub bootstrap: BootstrapOptions,
}

/// A communicator's own bounds on its channel count (see [`CommOptions::channel_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelBounds {
    pub min: u32,
    pub max: u32,
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            nchannels: None,
            transport: TransportChoice::Auto,
            timeout: DEFAULT_TIMEOUT,
            device: None,
            bus_id: None,
            topo_file: None,
            step_bytes: None,
            wait: None,
            socket_ifname: None,
            protocols: ProtocolEnable::default(),
            ll_lines: None,
            algo: None,
            p2p_ll_threshold: None,
            channel_bounds: None,
            min_slices: None,
            p2p_read: None,
            bootstrap: BootstrapOptions::default(),
        }
    }
}

/// Busy polls before a wait yields when every local rank has a CPU: about 2 ms of x86
/// `pause` (30-40 ns each on current AMD and Intel cores).
pub const DEDICATED_SPINS: u32 = 65_536;

/// The FIFO wait policy for `local_ranks` rank processes on a host with `cpus` CPUs.
///
/// With a CPU per rank, the peer that will post is running, or will be within a scheduler
/// tick: spin, as MPI libraries do, for about 2 ms ([`DEDICATED_SPINS`]) before yielding,
/// and sleep at most 50 us after that (a message that arrives during a 500 us sleep waits
/// for it, and so does every rank behind this one on the ring). A waiter whose peer was last
/// seen on its own CPU stops spinning at once (`conn`'s wait).
/// A shorter spin costs dearly on a shared host: a yield hands the CPU to whatever else is
/// runnable there for the rest of its time slice, and the message that arrives meanwhile
/// waits for it. Measured with `weft perf all-reduce --ranks 2 -b 8 -e 8` on the 2-CPU build
/// machine while other jobs ran: 6-16 us per call with 256 spins, 0.7-1.3 us with 65536
/// (Open MPI, which never yields: 0.5-1.9 us in the same minutes).
///
/// With more ranks than CPUs (CI machines, laptops), the peer may be waiting for this very
/// CPU: spin only briefly, yield for long (a `sched_yield` that finds nothing else to run
/// costs well under a microsecond), and cap sleeps at 50 us. Measured with `weft perf
/// all-reduce` on 2 CPUs: 8 B on 4 ranks from ~50 us (256 spins, 64 yields) to ~10 us.
///
/// A rank with NET connections has a second busy thread, its proxy, which moves the data
/// the rank waits for: it needs a CPU of its own too, or the rank's spin holds the very CPU
/// the proxy needs. (Seen on 1-vCPU VMs over Soft-RoCE: a 2 ms spin, much longer under
/// emulation, before every step made an 8-byte all-reduce take 22-25 ms.)
pub fn wait_policy_for(local_ranks: usize, net: bool, cpus: usize) -> WaitPolicy {
    let base = WaitPolicy::default();
    let busy_threads = local_ranks.saturating_mul(if net { 2 } else { 1 });
    if busy_threads > cpus {
        WaitPolicy {
            spins: 16,
            yields: 2048,
            max_sleep: Duration::from_micros(50),
            ..base
        }
    } else {
        WaitPolicy {
            spins: DEDICATED_SPINS,
            yields: 2048,
            max_sleep: Duration::from_micros(50),
            ..base
        }
    }
}

impl CommOptions {
    /// Defaults overridden by `WEFT_NCHANNELS`, `WEFT_TRANSPORT`, `WEFT_TIMEOUT`,
    /// `WEFT_BUFFSIZE`/`NCCL_BUFFSIZE` and the bootstrap's variables. A malformed value is
    /// an error naming the variable.
    pub fn from_env() -> Result<Self, CommError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`CommOptions::from_env`] over any lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CommError> {
        let bad = |var: &str, value: &str, want: &str| {
            CommError::InvalidArgument(format!("{var}={value:?}: expected {want}"))
        };
        let mut opts = CommOptions {
            bootstrap: BootstrapOptions::from_lookup(&get),
            ..CommOptions::default()
        };
        if let Some(v) = get("WEFT_NCHANNELS") {
            let n: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_CHANNELS).contains(n))
                .ok_or_else(|| bad("WEFT_NCHANNELS", &v, "a channel count from 1 to 64"))?;
            opts.nchannels = Some(n);
        }
        if let Some(v) = get("WEFT_TRANSPORT") {
            opts.transport = TransportChoice::parse(&v)
                .ok_or_else(|| bad("WEFT_TRANSPORT", &v, "auto, shm, net, ib or mesh"))?;
        }
        if let Some(v) = get("WEFT_TIMEOUT") {
            let secs: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0 && s.is_finite() && *s < 1e9)
                .ok_or_else(|| bad("WEFT_TIMEOUT", &v, "a positive number of seconds"))?;
            opts.timeout = Duration::from_secs_f64(secs);
            opts.bootstrap.timeout = opts.timeout;
        }
        for (var, field) in [("WEFT_WAIT_SPINS", 0), ("WEFT_WAIT_YIELDS", 1)] {
            if let Some(v) = get(var) {
                let n: u32 = v.trim().parse().map_err(|_| bad(var, &v, "a count"))?;
                let policy = opts.wait.get_or_insert_with(WaitPolicy::default);
                if field == 0 {
                    policy.spins = n;
                } else {
                    policy.yields = n;
                }
            }
        }
        for var in ["WEFT_BUFFSIZE", "NCCL_BUFFSIZE"] {
            if let Some(v) = get(var) {
                let total: usize = v
                    .trim()
                    .parse()
                    .ok()
                    .filter(|t| *t >= 4096)
                    .ok_or_else(|| bad(var, &v, "bytes for the 8 FIFO steps, e.g. 4194304"))?;
                opts.step_bytes = Some((total / NCCL_STEPS) & !63);
                break;
            }
        }
        for var in ["WEFT_PROTO", "NCCL_PROTO"] {
            if let Some(v) = get(var) {
                opts.protocols = ProtocolEnable::parse(&v).map_err(|e| {
                    let token = v.get(e.at.0..e.at.1).unwrap_or("");
                    CommError::InvalidArgument(format!("{var}={v:?}: {e}: {token:?}"))
                })?;
                break;
            }
        }
        if let Some(v) = get("WEFT_MIN_SLICES") {
            let n: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=NCCL_STEPS as u32).contains(n))
                .ok_or_else(|| bad("WEFT_MIN_SLICES", &v, "a slice count from 1 to 8"))?;
            opts.min_slices = Some(n);
        }
        for var in ["WEFT_P2P_READ_ENABLE", "NCCL_P2P_READ_ENABLE"] {
            if let Some(v) = get(var) {
                opts.p2p_read = match v.trim() {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => return Err(bad(var, &v, "0 or 1")),
                };
                break;
            }
        }
        if let Some(v) = get("WEFT_ALGO") {
            opts.algo = weft_core::algo::GpuAlgo::parse(&v)
                .map_err(|e| CommError::InvalidArgument(format!("WEFT_ALGO={v:?}: {e}")))?;
        }
        for var in ["WEFT_LL_BUFFSIZE", "NCCL_LL_BUFFSIZE"] {
            if let Some(v) = get(var) {
                let total: usize = v.trim().parse().map_err(|_| {
                    bad(
                        var,
                        &v,
                        "bytes for the 8 LL steps (8-byte lines), e.g. 131072, or 0",
                    )
                })?;
                let lines = total / NCCL_STEPS / LL_LINE_BYTES;
                opts.ll_lines = Some(lines - lines % LL_LINES_GRAIN);
                break;
            }
        }
        for var in ["WEFT_P2P_LL_THRESHOLD", "NCCL_P2P_LL_THRESHOLD"] {
            if let Some(v) = get(var) {
                let bytes: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(var, &v, "bytes per channel, e.g. 16384"))?;
                opts.p2p_ll_threshold = Some(bytes);
                break;
            }
        }
        Ok(opts)
    }

    /// Single-host tests: loopback bootstrap and NET, deadline `timeout`.
    pub fn loopback(timeout: Duration) -> Self {
        CommOptions {
            timeout,
            socket_ifname: Some("=lo".to_string()),
            bootstrap: BootstrapOptions::loopback(timeout),
            ..CommOptions::default()
        }
    }
}

/// The [`DataType`] of a Rust element type (`i8`, `u8`, `i32`, `u32`, `i64`, `u64`,
/// [`F16`](crate::exec::reduce::F16), [`Bf16`](crate::exec::reduce::Bf16), `f32`, `f64`),
/// for typed buffers passed as bytes with zerocopy's `as_bytes` / `as_mut_bytes`:
/// `comm.all_reduce(a.as_bytes(), b.as_mut_bytes(), dtype_of::<f32>(), RedOp::Sum)`.
pub fn dtype_of<T: crate::exec::reduce::Element>() -> DataType {
    T::DTYPE
}

/// A point-to-point operation of a [`Comm::group`].
#[derive(Debug)]
pub enum P2pOp<'a> {
    Send { peer: usize, buf: &'a [u8] },
    Recv { peer: usize, buf: &'a mut [u8] },
}

/// One rank's communicator.
#[derive(Debug)]
pub struct Comm {
    rank: usize,
    nranks: usize,
    // Dropped first: the connection ends, so that the transports below see them closed.
    executor: Executor,
    p2p_send: HashMap<u32, Arc<Mutex<FifoSendEnd>>>,
    p2p_recv: HashMap<u32, Arc<Mutex<FifoRecvEnd>>>,
    transports: Transports,
    peers: Vec<Peer>,
    rings: Vec<Vec<u32>>,
    /// Transport of each channel's (send, recv) connection; `None` on a single rank.
    channel_kinds: Vec<Option<(TransportKind, TransportKind)>>,
    step_bytes: usize,
    abort: AbortFlag,
    failed: Option<String>,
    bootstrap: Bootstrap,
}

impl Comm {
    /// Joins the communicator of `id` as `rank` of `nranks` (see the module documentation).
    /// Every rank must call it; it returns once all are connected.
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        opts: &CommOptions,
    ) -> Result<Comm, CommError> {
        if nranks == 0 || rank >= nranks || u32::try_from(nranks).is_err() {
            return Err(CommError::InvalidArgument(format!(
                "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
            )));
        }
        if let Some(n) = opts.nchannels {
            if !(1..=MAX_CHANNELS).contains(&n) {
                return Err(CommError::InvalidArgument(format!(
                    "{n} channels: use 1 to {MAX_CHANNELS}"
                )));
            }
        }
        // The calling thread runs channel 0 of every call: its waits must wake on time.
        crate::exec::pool::tighten_timer_slack();
        let ll_lines = opts.ll_lines.unwrap_or(DEFAULT_LL_LINES);
        let mut bootstrap = Bootstrap::init(id, rank, nranks, &opts.bootstrap)?;
        let mut me = Peer::local(
            rank as u32,
            opts.device,
            Settings {
                transport: opts.transport.number(),
                pid: std::process::id(),
                nchannels: opts.nchannels.unwrap_or(0),
                step_bytes: opts.step_bytes.map_or(0, |b| b as u64),
                cpus: std::thread::available_parallelism()
                    .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
                protocols: opts.protocols.to_bits(),
                ll_lines: u32::try_from(ll_lines).unwrap_or(u32::MAX),
            },
        );
        match (opts.device, opts.bus_id) {
            (Some(_), Some(bus_id)) => me = me.with_bus_id(bus_id),
            // The topology search maps ranks to GPUs by bus id; without one (no CUDA driver)
            // every rank keeps the plain ring.
            (Some(dev), None) => match crate::topo::gpu::bus_id_of(dev)
                .and_then(|b| bus_id_from_str(b.as_bytes()).map_err(|e| format!("{b}: {e}")))
            {
                Ok(bus_id) => me = me.with_bus_id(bus_id),
                Err(e) => log::info!("rank {rank}: no PCI bus id for device {dev}: {e}"),
            },
            (None, _) => {}
        }
        let gathered = bootstrap.all_gather(&me.encode()?)?;
        let peers = gathered
            .iter()
            .enumerate()
            .map(|(r, bytes)| Peer::decode(r, bytes))
            .collect::<Result<Vec<Peer>, CommError>>()?;
        peers::check(rank, &peers)?;
        let plan = channels::agree_on_channels(
            &mut bootstrap,
            &peers,
            match &opts.topo_file {
                Some(path) => channels::TopoInput::File(path),
                None => channels::TopoInput::Host,
            },
            &crate::env::process,
        )?;
        if rank == 0 {
            log::info!(
                "{} channels ({}, {} before NCCL_MIN/MAX_NCHANNELS): {}",
                plan.nchannels(),
                plan.source,
                plan.found,
                plan.note
            );
            for line in plan.lines() {
                log::info!("{line}");
            }
        }

        let abort = AbortFlag::new();
        let rings = plan.rings;
        // Only `choose` is asked of the probe: its SHM transport never waits.
        let probe_shm =
            ShmTransport::new(FifoLayout::default(), WaitPolicy::default(), abort.clone());
        let probe = Transports::new(opts.transport, probe_shm, Box::new(|| Err(String::new())));
        // Every rank looks at every ring edge, so all pick the same step size.
        let any_net = nranks > 1
            && rings.iter().any(|ring| {
                ring.iter()
                    .zip(ring.iter().cycle().skip(1))
                    .any(|(&a, &b)| {
                        peers
                            .get(a as usize)
                            .zip(peers.get(b as usize))
                            .is_some_and(|(a, b)| probe.choose(a, b) == TransportKind::Net)
                    })
            });
        let local_ranks = peers.iter().filter(|p| p.same_host(&me)).count();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let policy = opts
            .wait
            .unwrap_or_else(|| wait_policy_for(local_ranks, any_net, cpus))
            .with_timeout(opts.timeout);
        let waiter = Waiter {
            policy,
            abort: abort.clone(),
            peer_pid: None,
        };
        let step_bytes = opts.step_bytes.unwrap_or(if any_net {
            NET_STEP_BYTES
        } else {
            DEFAULT_STEP_BYTES
        });
        if step_bytes < MIN_STEP_BYTES {
            return Err(CommError::InvalidArgument(format!(
                "FIFO steps of {step_bytes} bytes: at least {MIN_STEP_BYTES} (NCCL's 512-byte \
                 grain; WEFT_BUFFSIZE / NCCL_BUFFSIZE of at least 4096)"
            )));
        }
        let layout = FifoLayout::new(NCCL_STEPS, step_bytes).map_err(|e| {
            CommError::InvalidArgument(format!("FIFO of {step_bytes}-byte steps: {e}"))
        })?;
        let tuning = Tuning {
            enable: opts.protocols,
            // Every rank computes this alike: `any_net` from the shared peer table, the LL
            // size checked equal on every rank.
            ll_step_bytes: if nranks > 1 && !any_net {
                ll_lines.saturating_mul(LL_DATA_BYTES)
            } else {
                0
            },
            model: TuningModel::HOST_SHM,
        };
        // A protocol set that leaves a collective nothing to run fails here, not mid-job.
        for c in [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::Broadcast { root: 0 },
            Collective::Reduce { root: 0 },
        ] {
            tuning.choose(c, 0, nranks, step_bytes)?;
        }
        let net_options = NetOptions {
            layout,
            waiter: waiter.clone(),
            connect_timeout: opts.timeout,
            ..NetOptions::default()
        };
        let ifname = opts.socket_ifname.clone();
        let choice = opts.transport;
        let make_net = move || {
            let net = if choice == TransportChoice::Ib {
                AnyNet::Ib(IbNet::from_env().map_err(|e| e.to_string())?)
            } else if choice == TransportChoice::Mesh {
                AnyNet::Mesh(MeshNet::from_env().map_err(|e| e.to_string())?)
            } else {
                let mut config = SocketConfig::from_env().map_err(|e| e.to_string())?;
                if ifname.is_some() {
                    config.ifname = ifname.clone();
                }
                AnyNet::Socket(SocketNet::new(config).map_err(|e| e.to_string())?)
            };
            NetTransport::new(Arc::new(net), net_options.clone()).map_err(|e| e.to_string())
        };
        // Only SHM connections get an LL buffer: the NET proxy moves SIMPLE slots only.
        let shm_layout = layout.with_ll_lines(ll_lines).map_err(|e| {
            CommError::InvalidArgument(format!("LL buffer of {ll_lines} lines per step: {e}"))
        })?;
        let shm = ShmTransport::new(shm_layout, waiter.policy, abort.clone());
        let shm = match std::env::var_os("WEFT_SHM_DIR") {
            Some(dir) => shm.with_dir(dir),
            None => shm,
        };
        let mut transports = Transports::new(opts.transport, shm, Box::new(make_net));

        let mut channels = Vec::with_capacity(rings.len());
        let mut channel_kinds = Vec::with_capacity(rings.len());
        let me = peers.get(rank).copied().unwrap_or(me);
        for (c, ring) in rings.iter().enumerate() {
            let ring_arc: Arc<[u32]> = ring.as_slice().into();
            if nranks == 1 {
                channels.push(ExecChannel {
                    ring: ring_arc,
                    conns: None,
                });
                channel_kinds.push(None);
                continue;
            }
            let sched_ring = weft_core::sched::Ring::new(ring).map_err(ExecError::from)?;
            let pos = sched_ring.position(rank as u32).unwrap_or(0);
            let (next, prev) = (
                sched_ring.rank_after(pos, 1),
                sched_ring.rank_before(pos, 1),
            );
            let peer = |r: u32| peers.get(r as usize).copied().unwrap_or(me);
            let (send_kind, recv_kind) = (
                transports.choose(&me, &peer(next)),
                transports.choose(&me, &peer(prev)),
            );
            transports.check(send_kind, &me, &peer(next))?;
            transports.check(recv_kind, &me, &peer(prev))?;
            let (tag_send, tag_recv) = connect::ring_tags(c as u32);
            let channel = c as u32;
            let (mut sends, mut recvs) = connect::handshake(
                rank as u32,
                &mut bootstrap,
                &mut transports,
                &[Planned {
                    peer: next,
                    channel,
                    kind: send_kind,
                    tag: tag_send,
                }],
                &[Planned {
                    peer: prev,
                    channel,
                    kind: recv_kind,
                    tag: tag_recv,
                }],
            )?;
            let (Some(send), Some(recv)) = (sends.pop(), recvs.pop()) else {
                return Err(CommError::InvalidArgument(
                    "handshake returned no connection".to_string(),
                ));
            };
            log::info!(
                "{} : {prev} -> {rank} via {}, {rank} -> {next} via {}",
                rings::describe(c, rings.len(), ring),
                recv_kind.name(),
                send_kind.name()
            );
            channels.push(ExecChannel {
                ring: ring_arc,
                conns: Some(Arc::new(Mutex::new(RingConns::new(send, recv)))),
            });
            channel_kinds.push(Some((send_kind, recv_kind)));
        }
        bootstrap.barrier()?;
        let mut executor = Executor::new(rank as u32, nranks, channels, step_bytes, abort.clone());
        executor.set_tuning(tuning);
        Ok(Comm {
            rank,
            nranks,
            executor,
            p2p_send: HashMap::new(),
            p2p_recv: HashMap::new(),
            transports,
            peers,
            rings,
            channel_kinds,
            step_bytes,
            abort,
            failed: None,
            bootstrap,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn nchannels(&self) -> usize {
        self.rings.len()
    }

    /// The ring of each channel.
    pub fn rings(&self) -> &[Vec<u32>] {
        &self.rings
    }

    /// The transport of each channel's connections: (to the next rank, from the previous);
    /// `None` on a communicator of one rank, which has no connections.
    pub fn channel_transports(&self) -> &[Option<(TransportKind, TransportKind)>] {
        &self.channel_kinds
    }

    /// Bytes per FIFO step (the largest message one post carries).
    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// The pid of each rank.
    pub fn peer_pids(&self) -> Vec<u32> {
        self.peers.iter().map(|p| p.settings.pid).collect()
    }

    /// A flag that aborts this communicator from any thread: every wait ends at its next
    /// check and the call in progress fails.
    pub fn abort_flag(&self) -> AbortFlag {
        self.abort.clone()
    }

    /// Waits until every rank has called it (over the bootstrap network).
    pub fn barrier(&mut self) -> Result<(), CommError> {
        self.usable()?;
        Ok(self.bootstrap.barrier()?)
    }

    /// Every rank's `mine`, by rank, over the bootstrap network (control data such as
    /// timings or host names; not for bulk data). Collective: every rank must call it.
    pub fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        self.usable()?;
        Ok(self.bootstrap.all_gather(mine)?)
    }

    /// Ends the communicator in step with the others (NCCL's `ncclCommFinalize`): closes
    /// every connection, then waits until every rank has closed its own, so that no
    /// transport sees a peer vanish while it still expects data. Collective; the
    /// communicator accepts no operation afterwards. Dropping without it is fine too: the
    /// peers then see connections closed at whatever point each was.
    pub fn finalize(&mut self) -> Result<(), CommError> {
        self.usable()?;
        self.executor.close_connections();
        self.p2p_send.clear();
        self.p2p_recv.clear();
        self.failed = Some("the communicator was finalized".to_string());
        Ok(self.bootstrap.barrier()?)
    }

    fn usable(&self) -> Result<(), CommError> {
        match &self.failed {
            Some(first) => Err(CommError::Failed(first.clone())),
            None => Ok(()),
        }
    }

    /// Records a failure: names a dead peer of this host when there is one.
    fn failure(&mut self, err: ExecError) -> CommError {
        let me = self.peers.get(self.rank).copied();
        let dead = self.peers.iter().enumerate().find(|(r, p)| {
            *r != self.rank && me.is_some_and(|m| m.same_host(p)) && !process_alive(p.settings.pid)
        });
        let err = match dead {
            Some((rank, p)) => CommError::PeerDied {
                rank,
                pid: p.settings.pid,
                cause: err,
            },
            None => CommError::Exec(err),
        };
        self.failed.get_or_insert_with(|| err.to_string());
        self.abort.abort();
        // The executor marked the ring connections aborted; the point-to-point ones too,
        // so that a peer blocked in a send or receive with us fails at once as well.
        for end in self.p2p_send.values() {
            lock(end).abort();
        }
        for end in self.p2p_recv.values() {
            lock(end).abort();
        }
        err
    }

    fn count_of(len: usize, dtype: DataType, what: &str) -> Result<usize, CommError> {
        let esize = dtype.size_of_elem();
        if !len.is_multiple_of(esize) {
            return Err(CommError::InvalidArgument(format!(
                "{what} buffer of {len} bytes is not a whole number of {} ({esize}-byte) elements",
                dtype.name()
            )));
        }
        Ok(len / esize)
    }

    fn check_len(what: &str, len: usize, want: usize) -> Result<(), CommError> {
        if len == want {
            Ok(())
        } else {
            Err(CommError::InvalidArgument(format!(
                "{what} buffer holds {len} bytes, the call needs {want}"
            )))
        }
    }

    fn check_root(&self, root: usize) -> Result<u32, CommError> {
        if root < self.nranks {
            Ok(root as u32)
        } else {
            Err(CommError::InvalidArgument(format!(
                "root {root} out of range for {} ranks",
                self.nranks
            )))
        }
    }

    /// Runs a collective on raw buffers with NCCL's semantics: `count` as in NCCL's API,
    /// `send` and `recv` may alias as NCCL allows (in-place layouts).
    ///
    /// # Safety
    ///
    /// `send` must be readable for the input length of `collective` (`count`, or `nranks *
    /// count` for reduce-scatter; broadcast reads it only on the root) and `recv` writable
    /// for its output length (`count`, `nranks * count` for all-gather; reduce writes it
    /// only on the root), in elements of `dtype`, for the whole call, and nothing else may
    /// use `recv` meanwhile. Lengths that a rank does not use may be 0.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective_raw(
        &mut self,
        collective: Collective,
        send: *const u8,
        send_len: usize,
        recv: *mut u8,
        recv_len: usize,
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.usable()?;
        // SAFETY: forwarded from this function's contract.
        let buffers = unsafe { RawBuffers::new(send, send_len, recv, recv_len) };
        match self
            .executor
            .collective(collective, count, dtype, op, buffers)
        {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failure(e)),
        }
    }

    fn out_of_place(
        &mut self,
        collective: Collective,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        // SAFETY: two live slices of the lengths passed; `recv` is borrowed mutably for the
        // call, so nothing else uses it, and Rust guarantees the two do not overlap.
        unsafe {
            self.collective_raw(
                collective,
                send.as_ptr(),
                send.len(),
                recv.as_mut_ptr(),
                recv.len(),
                count,
                dtype,
                op,
            )
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn in_place(
        &mut self,
        collective: Collective,
        buf: &mut [u8],
        input: std::ops::Range<usize>,
        output: std::ops::Range<usize>,
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        if input.end > buf.len() || output.end > buf.len() {
            return Err(CommError::InvalidArgument(format!(
                "in-place buffer of {} bytes is too short",
                buf.len()
            )));
        }
        let base = buf.as_mut_ptr();
        // SAFETY: both ranges lie inside `buf` (checked), which is borrowed mutably for the
        // whole call; the executor handles the aliasing of input and output.
        unsafe {
            self.collective_raw(
                collective,
                base.wrapping_add(input.start),
                input.len(),
                base.wrapping_add(output.start),
                output.len(),
                count,
                dtype,
                op,
            )
        }
    }

    /// `recv[i] = op over ranks of send[i]`. Both buffers hold the same number of elements.
    pub fn all_reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let count = Self::count_of(send.len(), dtype, "send")?;
        Self::check_len("receive", recv.len(), send.len())?;
        self.out_of_place(Collective::AllReduce, send, recv, count, dtype, op)
    }

    /// All-reduce with the result written over the input.
    pub fn all_reduce_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let count = Self::count_of(buf.len(), dtype, "in-place")?;
        let all = 0..buf.len();
        self.in_place(
            Collective::AllReduce,
            buf,
            all.clone(),
            all,
            count,
            dtype,
            op,
        )
    }

    /// `recv` (count elements) = block `rank` of the element-wise reduction of every rank's
    /// `send` (`nranks * count` elements).
    pub fn reduce_scatter(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let count = Self::count_of(recv.len(), dtype, "receive")?;
        Self::check_len("send", send.len(), recv.len().saturating_mul(self.nranks))?;
        self.out_of_place(Collective::ReduceScatter, send, recv, count, dtype, op)
    }

    /// Reduce-scatter in place: `buf` is the whole input (`nranks * count` elements); the
    /// result lands in block `rank` of it (NCCL's in-place layout).
    pub fn reduce_scatter_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let total = Self::count_of(buf.len(), dtype, "in-place")?;
        if total % self.nranks != 0 {
            return Err(CommError::InvalidArgument(format!(
                "in-place reduce-scatter buffer of {total} elements is not {} equal blocks",
                self.nranks
            )));
        }
        let count = total / self.nranks;
        let block = count * dtype.size_of_elem();
        let at = self.rank * block;
        let all = 0..buf.len();
        self.in_place(
            Collective::ReduceScatter,
            buf,
            all,
            at..at + block,
            count,
            dtype,
            op,
        )
    }

    /// `recv` (`nranks * count` elements) = every rank's `send` (count elements), in rank
    /// order.
    pub fn all_gather(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
    ) -> Result<(), CommError> {
        let count = Self::count_of(send.len(), dtype, "send")?;
        Self::check_len(
            "receive",
            recv.len(),
            send.len().saturating_mul(self.nranks),
        )?;
        self.out_of_place(Collective::AllGather, send, recv, count, dtype, RedOp::Sum)
    }

    /// All-gather in place: this rank's input is already in block `rank` of `buf`.
    pub fn all_gather_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
    ) -> Result<(), CommError> {
        let total = Self::count_of(buf.len(), dtype, "in-place")?;
        if total % self.nranks != 0 {
            return Err(CommError::InvalidArgument(format!(
                "in-place all-gather buffer of {total} elements is not {} equal blocks",
                self.nranks
            )));
        }
        let count = total / self.nranks;
        let block = count * dtype.size_of_elem();
        let at = self.rank * block;
        let all = 0..buf.len();
        self.in_place(
            Collective::AllGather,
            buf,
            at..at + block,
            all,
            count,
            dtype,
            RedOp::Sum,
        )
    }

    /// `recv` = the root's `send` on every rank. `send` is read only on the root (other
    /// ranks may pass an empty slice).
    pub fn broadcast(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let count = Self::count_of(recv.len(), dtype, "receive")?;
        if self.rank == root as usize || !send.is_empty() {
            Self::check_len("send", send.len(), recv.len())?;
        }
        let c = Collective::Broadcast { root };
        self.out_of_place(c, send, recv, count, dtype, RedOp::Sum)
    }

    /// Broadcast in place: the root's `buf` goes to every rank's `buf`.
    pub fn broadcast_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let count = Self::count_of(buf.len(), dtype, "in-place")?;
        let all = 0..buf.len();
        let c = Collective::Broadcast { root };
        self.in_place(c, buf, all.clone(), all, count, dtype, RedOp::Sum)
    }

    /// On the root, `recv[i] = op over ranks of send[i]`; `recv` is written only there
    /// (other ranks may pass an empty slice).
    pub fn reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let count = Self::count_of(send.len(), dtype, "send")?;
        if self.rank == root as usize || !recv.is_empty() {
            Self::check_len("receive", recv.len(), send.len())?;
        }
        let c = Collective::Reduce { root };
        self.out_of_place(c, send, recv, count, dtype, op)
    }

    /// Reduce in place: the result replaces the root's `buf`.
    pub fn reduce_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let count = Self::count_of(buf.len(), dtype, "in-place")?;
        let all = 0..buf.len();
        let c = Collective::Reduce { root };
        self.in_place(c, buf, all.clone(), all, count, dtype, op)
    }

    /// Sends `buf` to `peer`, which must call [`Comm::recv`] (or a group with a receive)
    /// with the same length.
    pub fn send(&mut self, buf: &[u8], peer: usize) -> Result<(), CommError> {
        self.group(&mut [P2pOp::Send { peer, buf }])
    }

    /// Receives from `peer` into `buf` (the sender sends exactly `buf.len()` bytes).
    pub fn recv(&mut self, buf: &mut [u8], peer: usize) -> Result<(), CommError> {
        self.group(&mut [P2pOp::Recv { peer, buf }])
    }

    /// Runs point-to-point operations together, as between NCCL's `ncclGroupStart` and
    /// `ncclGroupEnd`: transfers with different peers progress at the same time (so a ring
    /// of ranks that each send to the next and receive from the previous cannot deadlock);
    /// operations with the same peer in the same direction run in order. A send to this
    /// rank pairs with a receive from it, in order.
    pub fn group(&mut self, ops: &mut [P2pOp<'_>]) -> Result<(), CommError> {
        self.usable()?;
        let mut send_peers: Vec<u32> = Vec::new();
        let mut recv_peers: Vec<u32> = Vec::new();
        let mut self_sends: Vec<&[u8]> = Vec::new();
        let mut self_recvs: Vec<usize> = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            let (peer, list) = match op {
                P2pOp::Send { peer, .. } => (*peer, &mut send_peers),
                P2pOp::Recv { peer, .. } => (*peer, &mut recv_peers),
            };
            if peer >= self.nranks {
                return Err(CommError::InvalidArgument(format!(
                    "peer {peer} out of range for {} ranks",
                    self.nranks
                )));
            }
            if peer == self.rank {
                match op {
                    P2pOp::Send { buf, .. } => self_sends.push(buf),
                    P2pOp::Recv { .. } => self_recvs.push(k),
                }
            } else if !list.contains(&(peer as u32)) {
                list.push(peer as u32);
            }
        }
        if self_sends.len() != self_recvs.len() {
            return Err(CommError::InvalidArgument(format!(
                "{} send(s) to this rank but {} receive(s) from it in one group",
                self_sends.len(),
                self_recvs.len()
            )));
        }
        let sends_to_self: Vec<Vec<u8>> = self_sends.iter().map(|b| b.to_vec()).collect();
        for (data, k) in sends_to_self.iter().zip(&self_recvs) {
            if let Some(P2pOp::Recv { buf, .. }) = ops.get_mut(*k) {
                Self::check_len("receive (from this rank)", buf.len(), data.len())?;
                buf.copy_from_slice(data);
            }
        }
        self.connect_p2p(&send_peers, &recv_peers)?;

        // One job per (direction, peer), running that pair's operations in order. Sends
        // come first: when each peer gets little enough from this group that the sends
        // never wait for credit (see `slots_of`), the jobs run one after the
        // other on this thread, sends then receives, and no worker is woken.
        let sequential = send_peers.iter().all(|&peer| {
            let slots: usize = ops
                .iter()
                .filter_map(|op| match op {
                    P2pOp::Send { peer: p, buf } if *p as u32 == peer => Some(buf.len()),
                    _ => None,
                })
                .map(|bytes| self.slots_of(bytes))
                .sum();
            slots <= NCCL_STEPS / 2
        });
        let mut jobs: Vec<Job> = Vec::new();
        for &peer in &send_peers {
            let Some(end) = self.p2p_send.get(&peer).cloned() else {
                continue;
            };
            let bufs: Vec<RawBuffers> = ops
                .iter()
                .filter_map(|op| match op {
                    P2pOp::Send { peer: p, buf } if *p as u32 == peer => {
                        // SAFETY: `buf` is borrowed for the whole call (through `ops`), and
                        // `run` waits for every job before returning.
                        Some(unsafe {
                            RawBuffers::new(buf.as_ptr(), buf.len(), std::ptr::null_mut(), 0)
                        })
                    }
                    _ => None,
                })
                .collect();
            jobs.push(Box::new(move || {
                let mut end = lock(&end);
                for b in bufs {
                    p2p::send(&mut end, &b, 0..b.input_len())?;
                }
                Ok(())
            }));
        }
        for &peer in &recv_peers {
            let Some(end) = self.p2p_recv.get(&peer).cloned() else {
                continue;
            };
            let bufs: Vec<RawBuffers> = ops
                .iter_mut()
                .filter_map(|op| match op {
                    P2pOp::Recv { peer: p, buf } if *p as u32 == peer => {
                        // SAFETY: `buf` is borrowed mutably for the whole call (through
                        // `ops`), and `run` waits for every job before returning.
                        Some(unsafe {
                            RawBuffers::new(std::ptr::null(), 0, buf.as_mut_ptr(), buf.len())
                        })
                    }
                    _ => None,
                })
                .collect();
            jobs.push(Box::new(move || {
                let mut end = lock(&end);
                for b in bufs {
                    p2p::recv(&mut end, &b, 0..b.output_len())?;
                }
                Ok(())
            }));
        }
        if jobs.is_empty() {
            return Ok(());
        }
        match self.executor.run_with(jobs, !sequential) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.failure(e)),
        }
    }

    /// FIFO slots a message of `bytes` takes (a zero-byte message still takes one).
    ///
    /// Why groups whose messages to each peer take at most half of the 8 slots may run
    /// sequentially (sends, then receives) without deadlock: a rank X blocked on credit to
    /// Y has filled all 8 slots with messages Y has not received; Y has received every
    /// group before its current one, so X's unreceived messages span X's groups from Y's
    /// current one to X's own, at most 4 slots each, and 8 slots need X to be at least two
    /// groups ahead of Y. A cycle of ranks blocked on credit would need each to be two
    /// groups ahead of the next, around the cycle: impossible. A rank running its group in
    /// parallel receives whatever it blocks on, so it is never part of such a cycle.
    fn slots_of(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.step_bytes.max(1)).max(1)
    }

    /// Builds the point-to-point connections not built yet (a handshake with each peer,
    /// which builds its side in the matching call).
    fn connect_p2p(&mut self, sends: &[u32], recvs: &[u32]) -> Result<(), CommError> {
        let me = self.peers.get(self.rank).copied();
        let channel = self.rings.len() as u32;
        let (tag_send, tag_recv) = connect::p2p_tags();
        let plan = |peer: u32, tag: u32, transports: &Transports| -> Option<Planned> {
            let (m, p) = (me?, self.peers.get(peer as usize)?);
            Some(Planned {
                peer,
                channel,
                kind: transports.choose(&m, p),
                tag,
            })
        };
        let new_sends: Vec<Planned> = sends
            .iter()
            .filter(|p| !self.p2p_send.contains_key(p))
            .filter_map(|&p| plan(p, tag_send, &self.transports))
            .collect();
        let new_recvs: Vec<Planned> = recvs
            .iter()
            .filter(|p| !self.p2p_recv.contains_key(p))
            .filter_map(|&p| plan(p, tag_recv, &self.transports))
            .collect();
        if new_sends.is_empty() && new_recvs.is_empty() {
            return Ok(());
        }
        let (s, r) = connect::handshake(
            self.rank as u32,
            &mut self.bootstrap,
            &mut self.transports,
            &new_sends,
            &new_recvs,
        )?;
        for (p, end) in new_sends.iter().zip(s) {
            self.p2p_send.insert(p.peer, Arc::new(Mutex::new(end)));
        }
        for (p, end) in new_recvs.iter().zip(r) {
            self.p2p_recv.insert(p.peer, Arc::new(Mutex::new(end)));
        }
        Ok(())
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.failed.is_some() {
            self.executor.abort_connections();
        }
    }
}
