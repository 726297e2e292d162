//! The host communicator: ranks connected by channels, and the collectives that run over
//! them on host memory (the CPU executor).
//!
//! [`HostComm::init`] follows NCCL's `ncclCommInitRank`:
//!
//! 1. bootstrap: rendezvous at the unique id's root, then a ring of TCP sockets;
//! 2. all-gather each rank's [`Peer`](peers::Peer) (host hash, pid hash, device, and the
//!    settings every rank must share); two ranks on one device of one host are an error;
//! 3. the channels: rank 0 plans them ([`channels::plan_channels`]: NCCL's ring search over
//!    the host's topology when every rank has a GPU of one host, else the plain ring) and
//!    broadcasts the plan ([`channels::agree_on_channels_with`]);
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
//!
//! Where each part lives: [`HostComm`] itself, its lifecycle and failures in `host`; init,
//! step by step, in `setup`; the collectives (one table of NCCL's buffer layouts for the
//! in-place and out-of-place variants) in `collectives`; send/receive groups in `p2p`.
//! This module holds the options every communicator (host or GPU) is built from,
//! [`CommOptions`].

pub mod channels;
mod collectives;
pub mod connect;
pub mod error;
mod host;
mod p2p;
pub mod peers;
pub mod rings;
pub(crate) mod setup;
pub mod shrink;

#[cfg(test)]
mod test;

use std::time::Duration;

use weft_config::{Settings, table};
use weft_core::abi::DataType;
use weft_core::tune::ProtocolEnable;

pub use connect::{TransportChoice, TransportKind};
pub use error::CommError;
pub use host::HostComm;
pub use p2p::P2pOp;

use crate::bootstrap::BootstrapOptions;
use crate::conn::WaitPolicy;
use crate::conn::layout::{ll_lines_of, ring_step_bytes};
// Named by the options' documentation.
#[cfg(doc)]
use crate::conn::DEFAULT_LL_LINES;

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

/// How a communicator is built. [`CommOptions::from_settings`] takes weft-config's
/// settings; [`CommOptions::from_env`] reads them from the environment.
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
    /// NCCL topology XML for the channel search; `None`: the settings' `WEFT_TOPO_FILE` /
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
    /// settings' (`WEFT_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`) or NCCL's default.
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
    /// communicator (`ncclConfig_t`'s `minCTAs` / `maxCTAs`), applied after the settings'
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
    /// Every other setting init reads (weft-config's, one read of the environment where
    /// the program starts): the NET backends', the SHM directory and switches, the channel
    /// bounds, P2P's switches, the peer region's and the kernels'. [`Self::from_settings`]
    /// keeps the settings it was given; [`Default`]: every variable unset (so a program
    /// that builds its options itself is not steered by the environment).
    pub settings: Settings,
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
            settings: Settings::default(),
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
    /// [`Self::from_settings`] of the process environment ([`Settings::from_env`]: the
    /// values NCCL would ignore are logged once and ignored). A malformed value is an error
    /// naming the variable, the value and what is allowed.
    pub fn from_env() -> Result<Self, CommError> {
        let settings =
            Settings::from_env().map_err(|e| CommError::InvalidArgument(e.to_string()))?;
        Ok(Self::from_settings(&settings))
    }

    /// [`CommOptions::from_env`] over any lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CommError> {
        let settings =
            Settings::from_lookup(&get).map_err(|e| CommError::InvalidArgument(e.to_string()))?;
        Ok(Self::from_settings(&settings))
    }

    /// Defaults overridden by `settings`: `WEFT_NCHANNELS`, `WEFT_TRANSPORT`,
    /// `WEFT_TIMEOUT` (which sets the bootstrap's deadline too), `WEFT_WAIT_SPINS`,
    /// `WEFT_WAIT_YIELDS`, `WEFT_BUFFSIZE` / `NCCL_BUFFSIZE`, `WEFT_PROTO` / `NCCL_PROTO`,
    /// `WEFT_LL_BUFFSIZE` / `NCCL_LL_BUFFSIZE`, `WEFT_ALGO`, `WEFT_MIN_SLICES`,
    /// `NCCL_P2P_READ_ENABLE`, `NCCL_P2P_LL_THRESHOLD`, and the bootstrap's
    /// ([`BootstrapOptions::from_settings`]); the rest of `settings` is kept as
    /// [`CommOptions::settings`], for what init reads from them.
    pub fn from_settings(settings: &Settings) -> CommOptions {
        let t = &settings.transport;
        let mut bootstrap = BootstrapOptions::from_settings(settings);
        if settings.origin(&table::TIMEOUT.info).is_some() {
            bootstrap.timeout = t.timeout;
        }
        let wait = (t.wait_spins.is_some() || t.wait_yields.is_some()).then(|| {
            let base = WaitPolicy::default();
            WaitPolicy {
                spins: t.wait_spins.unwrap_or(base.spins),
                yields: t.wait_yields.unwrap_or(base.yields),
                ..base
            }
        });
        CommOptions {
            nchannels: settings.topology.nchannels,
            transport: t.transport,
            timeout: t.timeout,
            step_bytes: t.buffsize.map(ring_step_bytes),
            wait,
            protocols: t.protocols,
            ll_lines: t.ll_buffsize.map(ll_lines_of),
            algo: settings.gpu.algo,
            p2p_ll_threshold: t.p2p_ll_threshold,
            min_slices: settings.gpu.min_slices,
            p2p_read: t.p2p_read,
            bootstrap,
            settings: settings.clone(),
            ..CommOptions::default()
        }
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
