//! The GPU communicator: one rank on one GPU, its P2P connections, and its collectives
//! enqueued on the caller's stream.
//!
//! Init: bootstrap, all-gather each rank's GPU (host, process, PCI bus id), check that
//! every pair of GPUs can reach each other's memory (P2P over NVLink or PCIe), build the
//! channels' rings, allocate this rank's window ([`super::layout`]), share it (the pointer
//! within one process, a CUDA IPC handle across processes), and write the device-side
//! description of every channel and connection (`weft_dev_comm`, `weft_dev_channel`,
//! `weft_channel_peer`, the rings) once. A collective is then one kernel launch on the
//! caller's stream, graph-capturable: its only argument is the call itself.
//!
//! Nothing waits forever: kernels give up on a peer after the communicator's timeout or
//! when the abort flag (host-mapped memory) is raised, and record which peer and which wait
//! in host-mapped memory, which [`GpuComm::check`] turns into an error naming the peer.
//!
//! The peer-pointer algorithms' region ([`super::peer`]) is shared the same way, except for
//! NVLS in its multicast form (`WEFT_NVLS=1` only): VMM memory bound to a multicast object
//! whose file descriptor one rank sends to the others ([`super::multicast`]).

use std::mem::size_of;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::abi::{
    Algorithm, COLL_BATCH_MAX, CONN_DIRECT_WRITE, CONN_HOST_MEMORY, ChannelPeer, CollKind,
    CollWork, ConnInfo, DataType, DevChannel, DevComm, FAULT_ABORTED, FAULT_CLAIMED, FAULT_NONE,
    FAULT_TIMEOUT, KernelArgs, KernelFault, MAX_CHANNELS, P2P_MAX_OPS, P2pArgs, P2pOp,
    PEER_BATCH_MAX, PEER_LANES, PEER_MAX_RANKS, PeerBatch, PeerWork, Protocol, RedOp, RingInfo,
    STEPS, TreeInfo, WAIT_NVLS_FREED, WAIT_NVLS_POSTED, WAIT_PEER_FLAG, WAIT_PEER_START, WAIT_RECV,
};
use weft_core::algo::{Call, GpuAlgo, PeerCaps};
use weft_core::fifo::ll::{LlGeometry, LlLine};
use weft_core::sched::{ChunkSizing, Collective, channels_for};
use weft_core::wire::bootstrap::bus_id_from_str;
use weft_cuda::{Context, Device, DeviceBuffer, HostMapped, HostRegistration, IpcMapping, Stream};
use zerocopy::{FromBytes, IntoBytes};

use super::error::GpuError;
use super::kernels::{Kernels, PeerSource};
use super::layout::{EXCHANGE_OFFSET, Edge, Layout};
use super::multicast::{MulticastRegion, NvlsForm};
use super::peer::RegionPlan;
use super::protocol::GpuProtocols;
pub use super::redop::avg_scale_bits;
use super::redop::{GpuRedOp, KernelRedOp};
use crate::bootstrap::{Bootstrap, UniqueId, identity};
use crate::comm::channels::{SOURCE_SEARCH, TopoInput, agree_on_channels};
use crate::comm::peers::{Peer, Settings};
use crate::comm::{ChannelBounds, CommError, CommOptions};
use crate::transport::shm::ShmMapping;

/// Channels a GPU communicator builds when the topology search cannot run.
pub const DEFAULT_CHANNELS: u32 = 16;
/// The fewest slices a SIMPLE ring primitive is cut into (`CollWork::min_slices`) unless
/// `WEFT_MIN_SLICES` says otherwise: 1, a step that fits one FIFO slot goes whole. NCCL
/// cuts every chunk into 2 (`SlicePerChunk`), but on two H200 over NVLink (2026-11-27,
/// docs/benchmarks.md) 2 lost to 1 from 4 to 32 MiB (all-reduce 84 against 96 GB/s at 4 MiB,
/// reduce-scatter 66 against 96): each slice costs a wait, two barriers and a release.
pub const DEFAULT_MIN_SLICES: u32 = 1;
/// All-reduces of fewer bytes than this go through the FIFO even between ranks of one
/// process; direct writes start here. Measured on two H200 over NVLink without CUDA graphs
/// (2026-11-27, docs/benchmarks.md): direct writes lost from 4 to 16 MiB (96 against 112 GB/s
/// at 4 MiB, 153 against 169 at 8 MiB), tied at 32 MiB and won from 64 MiB (277 against 272,
/// 331 against 326 at 1 GiB). All-gather and broadcast keep them at every size (all-gather
/// 155 against 127 GB/s at 8 MiB).
pub const DIRECT_ALL_REDUCE_MIN_BYTES: usize = 32 << 20;
/// The rings of the communicator's channels: NCCL's ring search over this host's topology
/// (`weft::comm::channels`, the same rings `weft topo` prints), decided by rank 0 for all;
/// where the search cannot run (no topology, ranks sharing a GPU), [`DEFAULT_CHANNELS`]
/// plain rings, as many as `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS` allow.
///
/// Also returns the search's verdict on P2P (`NCCL_P2P_LEVEL` / `NCCL_P2P_DISABLE` against
/// the path between two ranks' GPUs): a pair that may not use it, if any.
#[allow(clippy::type_complexity)]
fn channel_rings(
    bootstrap: &mut Bootstrap,
    peers: &[GpuPeer],
    opts: &CommOptions,
) -> Result<(Vec<Vec<u32>>, Option<(u32, u32, String)>, Vec<u32>), GpuError> {
    let explicit = opts.nchannels.unwrap_or(0);
    let comm_peers: Vec<Peer> = peers
        .iter()
        .enumerate()
        .map(|(r, p)| {
            let settings = Settings {
                transport: 0,
                pid: p.pid,
                nchannels: explicit,
                step_bytes: p.step_bytes,
                cpus: 1,
                protocols: weft_core::tune::ProtocolEnable::default().to_bits(),
                ll_lines: 0,
            };
            let mut peer = Peer::local(r as u32, Some(p.device as i32), settings);
            peer.info.host_hash = p.host_hash;
            peer.with_bus_id(bus_id_from_str(p.bus_id.as_bytes()).unwrap_or(0))
        })
        .collect();
    let env = crate::env::process;
    let plain = |why: &str| {
        let n = u32::try_from(peers.len()).unwrap_or(u32::MAX);
        let count = if explicit > 0 {
            explicit
        } else {
            let get = |names: &[&str]| {
                crate::env::first_value(&env, names).and_then(|v| v.trim().parse::<u32>().ok())
            };
            let max = get(&["WEFT_MAX_NCHANNELS", "NCCL_MAX_NCHANNELS"]).unwrap_or(MAX_CHANNELS);
            let min = get(&["WEFT_MIN_NCHANNELS", "NCCL_MIN_NCHANNELS"]).unwrap_or(1);
            DEFAULT_CHANNELS.min(max).max(min)
        }
        .clamp(1, MAX_CHANNELS);
        log::info!("weft: {count} plain ring channel(s): {why}");
        (0..count).map(|_| (0..n).collect()).collect()
    };
    let (rings, blocked, heads, searched) =
        match agree_on_channels(bootstrap, &comm_peers, TopoInput::Host, &env) {
            Ok(plan) if plan.source == SOURCE_SEARCH || explicit > 0 => {
                log::info!(
                    "weft: {} channel(s) from the {} ({})",
                    plan.nchannels(),
                    plan.source,
                    plan.note
                );
                for line in plan.lines() {
                    log::info!("{line}");
                }
                Ok((
                    plan.rings,
                    plan.p2p_blocked,
                    plan.nvls_heads,
                    plan.source == SOURCE_SEARCH,
                ))
            }
            Ok(plan) => Ok((plain(&plan.note), None, plan.nvls_heads, false)),
            Err(CommError::Bootstrap(e)) => Err(GpuError::Bootstrap(e)),
            Err(e) => Ok((plain(&e.to_string()), None, Vec::new(), false)),
        }?;
    // The searched rings run on two blocks each unless some rank set the count: decided
    // alike everywhere (rank 0 planned the rings, but each rank has its own environment).
    let set_here = channel_count_set(explicit, &env);
    let set_anywhere = bootstrap
        .all_gather(&[u8::from(set_here)])?
        .iter()
        .any(|b| b.first() != Some(&0));
    let rings = if searched && !set_anywhere {
        two_blocks_per_ring(rings)
    } else {
        rings
    };
    // The program's own bounds for this communicator (ncclConfig_t's minCTAs / maxCTAs),
    // the same on every rank: a rank that bounded the agreed plan differently would fall
    // back to plain rings below while the others keep the searched ones (whose orders
    // differ), and their neighbours would not match.
    let encode = |b: Option<ChannelBounds>| -> [u8; 8] {
        let (min, max) = b.map_or((0, 0), |b| (b.min, b.max));
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&min.to_be_bytes());
        out[4..].copy_from_slice(&max.to_be_bytes());
        out
    };
    let mine = encode(opts.channel_bounds);
    for (r, theirs) in bootstrap.all_gather(&mine)?.iter().enumerate() {
        if theirs.as_slice() != mine.as_slice() {
            let show = |b: &[u8]| match (b.get(..4), b.get(4..8)) {
                (Some([0, 0, 0, 0]), Some([0, 0, 0, 0])) => "none".to_string(),
                (Some(lo), Some(hi)) => format!(
                    "{}..={}",
                    u32::from_be_bytes(lo.try_into().unwrap_or_default()),
                    u32::from_be_bytes(hi.try_into().unwrap_or_default())
                ),
                _ => "malformed".to_string(),
            };
            return Err(GpuError::InvalidArgument(format!(
                "rank {r} bounds its channels to {} and this rank to {} (ncclConfig_t's \
                 minCTAs / maxCTAs): every rank of a communicator must pass the same",
                show(theirs),
                show(&mine)
            )));
        }
    }
    let rings = match opts.channel_bounds {
        Some(b) => {
            let bounded = crate::comm::channels::bound_channels(rings, b.min, b.max);
            log::info!(
                "weft: {} channel(s) within the communicator's bounds {}..={}",
                bounded.len(),
                b.min,
                b.max
            );
            bounded
        }
        None => rings,
    };
    // Plain rings are counted from each rank's own NCCL_MIN/MAX_NCHANNELS: rank 0's count
    // wins, or ranks with different environments would lay out their windows differently.
    let counts = bootstrap.all_gather(&(rings.len() as u32).to_be_bytes())?;
    let first = counts
        .first()
        .and_then(|c| c.as_slice().try_into().ok())
        .map_or(0, u32::from_be_bytes) as usize;
    if first == rings.len() {
        return Ok((rings, blocked, heads));
    }
    log::warn!(
        "weft: this rank would build {} channels, rank 0 {first}: using rank 0's (set \
         NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS alike on every rank)",
        rings.len()
    );
    let n = u32::try_from(peers.len()).unwrap_or(u32::MAX);
    Ok((
        (0..first.clamp(1, MAX_CHANNELS as usize))
            .map(|_| (0..n).collect())
            .collect(),
        blocked,
        heads,
    ))
}

/// Whether this rank set its channel count (`WEFT_NCHANNELS`, `NCCL_MIN_NCHANNELS` /
/// `NCCL_MAX_NCHANNELS`, or their WEFT_ names): then the searched rings are not doubled.
fn channel_count_set(explicit: u32, env: &dyn Fn(&str) -> Option<String>) -> bool {
    explicit > 0
        || [
            "WEFT_MIN_NCHANNELS",
            "NCCL_MIN_NCHANNELS",
            "WEFT_MAX_NCHANNELS",
            "NCCL_MAX_NCHANNELS",
        ]
        .iter()
        .any(|v| env(v).is_some())
}

/// The searched rings, each run by two blocks (channel `c + n` takes channel `c`'s ring, as
/// `NCCL_MIN_NCHANNELS` repeats them), at most [`MAX_CHANNELS`]: the communicator's channels
/// unless some rank set the count ([`channel_count_set`]; ncclConfig_t's bounds apply after
/// this). weft's ring kernel moves less per block than NCCL's: on two H100 with NCCL's 24
/// channels its all-reduce reached 0.86-0.92x NCCL's bus bandwidth from 64 MiB, with 48
/// 1.02-1.06x up to 1 GiB (2026-11-25).
fn two_blocks_per_ring(rings: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    if rings.is_empty() {
        return rings;
    }
    let n = rings.len() as u32;
    let doubled =
        crate::comm::channels::bound_channels(rings, (2 * n).min(MAX_CHANNELS), MAX_CHANNELS);
    log::info!(
        "weft: {} channel(s): the search's {n} rings, each on two blocks (NCCL_MIN_NCHANNELS / \
         NCCL_MAX_NCHANNELS set the count)",
        doubled.len()
    );
    doubled
}

/// Channels that connect every pair of ranks for send/recv, beyond two ranks (two ranks use
/// every channel: the rings connect them already).
pub const P2P_CHANNELS: u32 = 4;
/// NCCL's SIMPLE FIFO step: 512 KiB (a 4 MiB buffer of 8 steps).
pub const DEFAULT_STEP_BYTES: usize = 512 << 10;
/// The largest FIFO step: the kernels address slots and chunks with 32-bit sizes.
pub const MAX_STEP_BYTES: usize = 64 << 20;
/// Fault records: one per block of a launch.
const FAULT_RECORDS: usize = 2 * MAX_CHANNELS as usize;
/// Where the fault records start in the host-mapped status page (the abort flag is at 0).
const FAULTS_OFFSET: usize = 256;

/// "WGPU": the record each rank all-gathers at init.
const PEER_MAGIC: u32 = 0x5747_5056;
/// The record of builds before `min_slices` joined it (2026-11-27): told apart so that
/// mixing builds is named as such.
const PEER_MAGIC_V1: u32 = 0x5747_5055;

/// What each rank tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GpuPeer {
    host_hash: u64,
    pid: u32,
    device: u32,
    bus_id: String,
    nchannels: u32,
    step_bytes: u64,
    min_slices: u32,
}

impl GpuPeer {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&PEER_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.host_hash.to_be_bytes());
        out.extend_from_slice(&self.pid.to_be_bytes());
        out.extend_from_slice(&self.device.to_be_bytes());
        out.extend_from_slice(&self.nchannels.to_be_bytes());
        out.extend_from_slice(&self.step_bytes.to_be_bytes());
        out.extend_from_slice(&self.min_slices.to_be_bytes());
        out.extend_from_slice(self.bus_id.as_bytes());
        out
    }

    fn decode(rank: usize, b: &[u8]) -> Result<Self, GpuError> {
        let bad = || GpuError::InvalidArgument(format!("rank {rank} sent a malformed GPU record"));
        let u32_at = |at: usize| -> Result<u32, GpuError> {
            Ok(u32::from_be_bytes(
                b.get(at..at + 4)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            ))
        };
        let u64_at = |at: usize| -> Result<u64, GpuError> {
            Ok(u64::from_be_bytes(
                b.get(at..at + 8)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            ))
        };
        if u32_at(0)? == PEER_MAGIC_V1 {
            return Err(GpuError::InvalidArgument(format!(
                "rank {rank} runs an older weft build (its GPU record has no slice count): \
                 run the same build on every rank"
            )));
        }
        if u32_at(0)? != PEER_MAGIC {
            return Err(GpuError::InvalidArgument(format!(
                "rank {rank} is not a GPU rank (it joined with another weft communicator kind)"
            )));
        }
        Ok(GpuPeer {
            host_hash: u64_at(4)?,
            pid: u32_at(12)?,
            device: u32_at(16)?,
            nchannels: u32_at(20)?,
            step_bytes: u64_at(24)?,
            min_slices: u32_at(32)?,
            bus_id: String::from_utf8_lossy(b.get(36..).unwrap_or_default()).into_owned(),
        })
    }
}

/// Where a peer's window is mapped in this process.
#[derive(Debug)]
enum PeerWindow {
    /// This rank's own window.
    Own,
    /// Another rank of this process: its pointer, usable after peer access was enabled.
    SameProcess(u64),
    /// Another process's window, opened from its IPC handle.
    Ipc(IpcMapping),
    /// Another rank's SHM window, mapped and registered here.
    Host(Window),
    /// No connection to this rank.
    None,
}

/// A rank's window: device memory (P2P), or a shared-memory segment pinned and mapped for
/// the GPU (SHM, where some GPUs cannot reach each other: kernels then move data through
/// host memory over PCIe, as NCCL's SHM transport does for device buffers).
#[derive(Debug)]
enum Window {
    Device(DeviceBuffer),
    Host {
        // Dropped first: unregistered before it is unmapped.
        registration: HostRegistration,
        mapping: ShmMapping,
        path: PathBuf,
    },
}

/// Tells a peer's record which kind of window follows.
const WINDOW_DEVICE: u8 = 0;
const WINDOW_HOST: u8 = 1;

impl Window {
    /// A zeroed SHM segment of `bytes`, registered with `ctx`'s device.
    fn host(ctx: &Arc<Context>, rank: usize, bytes: usize) -> Result<Window, GpuError> {
        let dir = std::env::var_os("WEFT_SHM_DIR")
            .map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = dir.join(format!("weft-gpu-{}-{stamp:x}-r{rank}", std::process::id()));
        let mapping = ShmMapping::create(&dir, &path, bytes)
            .map_err(|e| GpuError::InvalidArgument(format!("the SHM window: {e}")))?;
        let (ptr, len) = mapping.bytes();
        // SAFETY: the mapping is page-aligned, `len` bytes long, and outlives the
        // registration (dropped first, see the field order).
        let registration = unsafe { HostRegistration::register(ctx, ptr, len) }?;
        Ok(Window::Host {
            registration,
            mapping,
            path,
        })
    }

    /// What peers need to reach this window.
    fn record(&self) -> Result<Vec<u8>, GpuError> {
        let mut out = Vec::with_capacity(80);
        match self {
            Window::Device(buf) => {
                out.push(WINDOW_DEVICE);
                out.extend_from_slice(&buf.ptr().to_be_bytes());
                out.extend_from_slice(&buf.ipc_handle()?.0);
            }
            Window::Host { mapping, path, .. } => {
                out.push(WINDOW_HOST);
                out.extend_from_slice(&(mapping.bytes().1 as u64).to_be_bytes());
                out.extend_from_slice(path.as_os_str().as_encoded_bytes());
            }
        }
        Ok(out)
    }

    /// Maps `peer`'s window from its record.
    fn open_peer(
        ctx: &Arc<Context>,
        peer: &GpuPeer,
        record: &[u8],
        my_pid: u32,
    ) -> Result<PeerWindow, GpuError> {
        let bad = || GpuError::InvalidArgument("a malformed window record".to_string());
        let word = u64::from_be_bytes(
            record
                .get(1..9)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        match record.first() {
            Some(&WINDOW_DEVICE) if peer.pid == my_pid => {
                let other = Context::primary(Device::get(peer.device as usize)?)?;
                ctx.enable_peer_access(&other)?;
                other.enable_peer_access(ctx)?;
                Ok(PeerWindow::SameProcess(word))
            }
            Some(&WINDOW_DEVICE) => {
                let handle: [u8; 64] = record
                    .get(9..73)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?;
                Ok(PeerWindow::Ipc(IpcMapping::open(
                    ctx,
                    &weft_cuda::IpcMemHandle(handle),
                )?))
            }
            Some(&WINDOW_HOST) => {
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(
                    record.get(9..).ok_or_else(bad)?,
                ));
                let mapping = ShmMapping::open(&path, word)
                    .map_err(|e| GpuError::InvalidArgument(format!("its SHM window: {e}")))?;
                let (ptr, len) = mapping.bytes();
                // SAFETY: as in `Window::host`.
                let registration = unsafe { HostRegistration::register(ctx, ptr, len) }?;
                Ok(PeerWindow::Host(Window::Host {
                    registration,
                    mapping,
                    path,
                }))
            }
            _ => Err(bad()),
        }
    }

    /// The window's address for kernels of this process.
    fn device_ptr(&self) -> u64 {
        match self {
            Window::Device(buf) => buf.ptr(),
            Window::Host { registration, .. } => registration.device_ptr(),
        }
    }

    /// Removes an SHM window's name (the mappings stay).
    fn unlink(&self) {
        if let Window::Host { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One collective of a group ([`GpuComm::collectives`]): the arguments of
/// [`GpuComm::collective`].
#[derive(Debug, Clone, Copy)]
pub struct GpuCollective {
    pub collective: Collective,
    pub send: u64,
    pub recv: u64,
    pub count: usize,
    pub dtype: DataType,
    pub op: GpuRedOp,
}

/// A group of collectives checked and planned on one communicator, to launch with
/// [`GpuComm::launch_group`] on that communicator.
#[derive(Debug)]
pub struct PlannedGroup {
    /// The communicator's control block address: a group launched on another is refused.
    owner: u64,
    planned: Vec<Planned>,
}

/// What a collective becomes on a communicator, before anything is launched.
#[derive(Debug, Clone, Copy)]
enum Planned {
    /// No element, or one rank in place.
    Nothing,
    /// One rank out of place: a copy on the stream.
    Copy { dst: u64, src: u64, bytes: usize },
    /// A work of the ring kernel of `module`, `op` and `protocol`.
    Ring {
        module: DataType,
        op: RedOp,
        protocol: Protocol,
        work: CollWork,
    },
    /// A work of a peer-pointer kernel.
    Peer {
        source: PeerSource,
        module: DataType,
        op: RedOp,
        work: PeerWork,
        /// The LL one-shot: its blocks keep to lanes of their own, so that calls of any
        /// channel count fuse, side by side.
        spread: bool,
    },
}

/// Calls with equal keys may share a launch ([`super::batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FuseKey {
    /// The same ring entry point, from the same first channel (block `b` runs channel
    /// `channel_lo + b` of every work of a launch: two works from different first channels
    /// would drive one channel from two blocks at once).
    Ring {
        module: DataType,
        op: RedOp,
        protocol: Protocol,
        channel_lo: u32,
    },
    /// The same one-/two-shot entry point and algorithm, and, but for the LL one-shot, the
    /// same channel count (direct.cu's window slices depend on it: see `direct_launch`).
    Direct {
        module: DataType,
        op: RedOp,
        algorithm: u32,
        /// The channel count; 0 for the LL one-shot.
        nchannels: u32,
    },
}

impl Planned {
    fn fuse_key(&self) -> Option<FuseKey> {
        match *self {
            Planned::Nothing | Planned::Copy { .. } => None,
            Planned::Ring {
                module,
                op,
                protocol,
                work,
            } => Some(FuseKey::Ring {
                module,
                op,
                protocol,
                channel_lo: work.channel_lo,
            }),
            Planned::Peer {
                source: PeerSource::Direct,
                module,
                op,
                work,
                spread,
            } => Some(FuseKey::Direct {
                module,
                op,
                algorithm: work.algorithm,
                nchannels: if spread { 0 } else { work.nchannels },
            }),
            // One call per launch (nvls.cu).
            Planned::Peer {
                source: PeerSource::Nvls,
                ..
            } => None,
        }
    }
}

/// One send or receive of a point-to-point group on device memory.
#[derive(Debug, Clone, Copy)]
pub enum GpuP2p {
    Send { peer: usize, buf: u64, bytes: usize },
    Recv { peer: usize, buf: u64, bytes: usize },
}

/// The abort flag of one [`GpuComm`], usable from any thread while the communicator
/// itself is busy (see [`GpuComm::abort_handle`]).
#[derive(Debug, Clone)]
pub struct AbortHandle {
    status: Arc<HostMapped>,
}

impl AbortHandle {
    /// Raises the flag: the communicator's kernels return at their next look at it, and
    /// its next `check` fails.
    pub fn raise(&self) {
        self.status.write_u32(0, 1);
    }

    /// Whether the flag is up (an abort, or a kernel that gave up).
    pub fn is_raised(&self) -> bool {
        self.status.read_u32(0).unwrap_or(0) != 0
    }
}

/// One rank of a GPU communicator.
#[derive(Debug)]
pub struct GpuComm {
    rank: usize,
    nranks: usize,
    ctx: Arc<Context>,
    kernels: Kernels,
    layout: Layout,
    timeout: Duration,
    /// The device-side description (`DevComm` at 0), updated by kernels (FIFO steps).
    control: DeviceBuffer,
    /// Abort flag (u32 at 0) and one `KernelFault` per block (at `FAULTS_OFFSET`); shared
    /// with every [`AbortHandle`].
    status: Arc<HostMapped>,
    // Dropped after `control`: peers' windows, then ours (every buffer holds its own
    // reference to the context, so field order does not matter for the context).
    peer_windows: Vec<PeerWindow>,
    window: Window,
    bootstrap: Bootstrap,
    failed: Option<String>,
    /// Direct writes between ranks of this process (every rank agreed at init).
    direct: bool,
    /// The algorithm `WEFT_ALGO` forces (the same on every rank, checked at init).
    algo: Option<GpuAlgo>,
    /// The peer-pointer algorithms' memory, when `algo` is one of them.
    peer: Option<PeerRegion>,
    /// How calls choose LL or SIMPLE (every rank has the same, checked at init).
    protocols: GpuProtocols,
    /// `CollWork::min_slices` of SIMPLE ring calls (every rank has the same, checked at init).
    min_slices: u32,
}

/// Every rank's peer region ([`super::peer`]) as mapped here.
#[derive(Debug)]
struct PeerRegion {
    plan: RegionPlan,
    /// Index r: rank r's region here (the multicast form: 0 but for this rank's own).
    ptrs: Vec<u64>,
    /// The multicast form: the object's address here.
    mc_base: Option<u64>,
    _memory: RegionMemory,
}

/// What holds a peer region's memory.
#[derive(Debug)]
enum RegionMemory {
    /// Device memory shared by pointer or CUDA IPC. Dropped in order: the peers'
    /// mappings, then ours.
    Unicast {
        _peers: Vec<PeerWindow>,
        _window: Window,
    },
    /// VMM memory bound to a multicast object (NVLS's multicast form).
    Multicast { _region: MulticastRegion },
}

impl PeerRegion {
    /// Allocates this rank's region (zeroed), shares it, and maps every peer's.
    /// Collective: every rank calls it with the same plan.
    fn open(
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        rank: usize,
        peers: &[GpuPeer],
        plan: RegionPlan,
    ) -> Result<PeerRegion, GpuError> {
        let buf = DeviceBuffer::alloc(ctx, plan.bytes as usize)?;
        buf.fill(0)?;
        let window = Window::Device(buf);
        let records = bootstrap.all_gather(&window.record()?)?;
        let my_pid = std::process::id();
        let mut mapped = Vec::with_capacity(peers.len());
        let mut ptrs = Vec::with_capacity(peers.len());
        for (q, (peer, record)) in peers.iter().zip(&records).enumerate() {
            if q == rank {
                ptrs.push(window.device_ptr());
                mapped.push(PeerWindow::Own);
                continue;
            }
            let opened = Window::open_peer(ctx, peer, record, my_pid).map_err(|e| {
                GpuError::Unreachable {
                    peer: q,
                    detail: format!("opening its {} region failed: {e}", plan.algo),
                }
            })?;
            ptrs.push(match &opened {
                PeerWindow::SameProcess(p) => *p,
                PeerWindow::Ipc(m) => m.ptr(),
                _ => {
                    return Err(GpuError::Unreachable {
                        peer: q,
                        detail: format!("its {} region is not device memory", plan.algo),
                    });
                }
            });
            mapped.push(opened);
        }
        Ok(PeerRegion {
            plan,
            ptrs,
            mc_base: None,
            _memory: RegionMemory::Unicast {
                _peers: mapped,
                _window: window,
            },
        })
    }

    /// NVLS's multicast form: this rank's region as VMM memory bound to the group's
    /// multicast object ([`super::multicast`]). Collective, like [`PeerRegion::open`].
    #[allow(clippy::too_many_arguments)]
    fn open_multicast(
        opt_in: weft_cuda::multicast::OptIn,
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        plan: RegionPlan,
        timeout: Duration,
    ) -> Result<PeerRegion, GpuError> {
        let region =
            MulticastRegion::open(opt_in, ctx, bootstrap, &id.to_bytes(), rank, &plan, timeout)?;
        let mut ptrs = vec![0; nranks];
        if let Some(own) = ptrs.get_mut(rank) {
            *own = region.unicast_ptr();
        }
        Ok(PeerRegion {
            plan,
            ptrs,
            mc_base: Some(region.multicast_ptr()),
            _memory: RegionMemory::Multicast { _region: region },
        })
    }
}

fn env_flag(names: &[&str]) -> bool {
    crate::env::first_value(&crate::env::process, names)
        .is_some_and(|v| !matches!(v.trim(), "" | "0"))
}

impl GpuComm {
    /// Joins the communicator of `id` as `rank` of `nranks` on GPU `device` (a CUDA
    /// ordinal of this process). Collective: every rank calls it; it returns once every
    /// connection is in place.
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        device: usize,
        opts: &CommOptions,
    ) -> Result<GpuComm, GpuError> {
        if nranks == 0 || rank >= nranks {
            return Err(GpuError::InvalidArgument(format!(
                "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
            )));
        }
        let dev = Device::get(device)?;
        let ctx = Context::primary(dev)?;
        let step_bytes = opts.step_bytes.unwrap_or(DEFAULT_STEP_BYTES);
        if opts.timeout.is_zero() {
            return Err(GpuError::InvalidArgument(
                "a timeout of 0: kernels would wait on a dead peer forever (WEFT_TIMEOUT)".into(),
            ));
        }
        if step_bytes > MAX_STEP_BYTES {
            return Err(GpuError::InvalidArgument(format!(
                "FIFO steps of {step_bytes} bytes: at most {MAX_STEP_BYTES} (NCCL_BUFFSIZE holds 8 steps)"
            )));
        }
        if step_bytes < 4096 || !step_bytes.is_multiple_of(16) {
            return Err(GpuError::InvalidArgument(format!(
                "FIFO steps of {step_bytes} bytes: use a multiple of 16 of at least 4096 \
                 (WEFT_BUFFSIZE / NCCL_BUFFSIZE holds 8 steps)"
            )));
        }
        let mut protocols = GpuProtocols::from_options(opts);
        protocols.validate().map_err(GpuError::InvalidArgument)?;
        // 0 and 1 both mean one slice per FIFO step: compared across ranks as 1.
        let min_slices = opts.min_slices.unwrap_or(DEFAULT_MIN_SLICES).max(1);
        if min_slices > STEPS {
            return Err(GpuError::InvalidArgument(format!(
                "at least {min_slices} slices per FIFO step: at most {STEPS} (WEFT_MIN_SLICES)"
            )));
        }
        let mut bootstrap = Bootstrap::init(id, rank, nranks, &opts.bootstrap)?;
        // Ranks that chose protocols differently would wait on each other's ends of a
        // connection until the timeout: refuse at init instead.
        let mine = protocols.encode();
        let theirs = bootstrap.all_gather(&mine)?;
        if let Some((q, other)) = theirs.iter().enumerate().find(|(_, o)| **o != mine) {
            return Err(GpuError::InvalidArgument(format!(
                "rank {q} runs with {}, this rank with {}: set NCCL_PROTO, NCCL_LL_BUFFSIZE and \
                 NCCL_P2P_LL_THRESHOLD (or their WEFT_ names) alike on every rank",
                GpuProtocols::describe(other),
                GpuProtocols::describe(&mine)
            )));
        }
        let me = GpuPeer {
            host_hash: identity::host_hash(),
            pid: std::process::id(),
            device: device as u32,
            bus_id: dev.pci_bus_id()?.to_lowercase(),
            nchannels: opts.nchannels.unwrap_or(0),
            step_bytes: step_bytes as u64,
            min_slices,
        };
        let peers = bootstrap
            .all_gather(&me.encode())?
            .iter()
            .enumerate()
            .map(|(r, b)| GpuPeer::decode(r, b))
            .collect::<Result<Vec<_>, _>>()?;
        // P2P where every rank reaches every other's GPU; otherwise every window lives in
        // shared host memory (SHM). Every rank decides from the same all-gathered answers.
        let reach = u8::from(check_peers(rank, &peers)?);
        let unreachable = bootstrap
            .all_gather(&[reach])?
            .iter()
            .any(|a| a.first() != Some(&1));
        let n = u32::try_from(nranks)
            .map_err(|_| GpuError::InvalidArgument("too many ranks".into()))?;
        let (rings, blocked, nvls_heads) = channel_rings(&mut bootstrap, &peers, opts)?;
        if let Some((a, b, kind)) = &blocked {
            log::info!(
                "weft: ranks {a} and {b} are {kind} apart, beyond NCCL_P2P_LEVEL: device data \
                 goes through SHM"
            );
        }
        let via_host = unreachable || blocked.is_some();
        // LL without a setting on P2P windows only (see gpu::protocol); every rank agreed
        // on via_host above.
        protocols.ll_by_default = !via_host;
        // Two ranks: every ring channel already connects the pair both ways, so send/recv
        // takes all of them at no cost in memory (with four channels it reached 136 GB/s
        // over NVLink where NCCL reached 354, two H100, 2026-11-25). More ranks: the first
        // P2P_CHANNELS channels connect every pair, each a FIFO per peer and direction.
        let p2p_channels = if n <= 2 {
            u32::try_from(rings.len()).unwrap_or(P2P_CHANNELS)
        } else {
            P2P_CHANNELS
        };
        // Read mode (NCCL's P2P read: SIMPLE FIFOs in the sender's memory) on device windows
        // only, where every rank takes it: NCCL_P2P_READ_ENABLE, else NCCL's default.
        let read_here = !via_host
            && match opts.p2p_read {
                Some(read) => read,
                None => read_by_default(&dev, rank, &peers),
            };
        let p2p_read = bootstrap
            .all_gather(&[u8::from(read_here)])?
            .iter()
            .all(|a| a.first() == Some(&1));
        let layout = Layout::new(
            rings,
            n,
            p2p_channels,
            step_bytes,
            protocols.ll_buffer_bytes(),
        )
        .with_read(p2p_read);
        let r = rank as u32;
        let bytes = layout.window_bytes(r);

        // This rank's window, zeroed: every counter starts at 0.
        let window = if via_host {
            Window::host(&ctx, rank, bytes)?
        } else {
            let buf = DeviceBuffer::alloc(&ctx, bytes)?;
            buf.fill(0)?;
            Window::Device(buf)
        };
        let shared = bootstrap.all_gather(&window.record()?)?;

        let talks_to = |q: u32| {
            (0..layout.nchannels()).any(|c| layout.connected(c, r, q) || layout.connected(c, q, r))
        };
        let mut peer_windows = Vec::with_capacity(nranks);
        for (q, (peer, record)) in peers.iter().zip(&shared).enumerate() {
            if q == rank {
                peer_windows.push(PeerWindow::Own);
            } else if !talks_to(q as u32) {
                peer_windows.push(PeerWindow::None);
            } else {
                let opened = Window::open_peer(&ctx, peer, record, me.pid).map_err(|e| {
                    GpuError::Unreachable {
                        peer: q,
                        detail: format!(
                            "opening its window (GPU {} in process {}) failed: {e}",
                            peer.bus_id, peer.pid
                        ),
                    }
                })?;
                peer_windows.push(opened);
            }
        }

        // Direct writes unless some rank turned them off (NCCL_P2P_DIRECT_DISABLE=1 or
        // WEFT_P2P_DIRECT=0): both ends of a connection must agree on where data lands.
        let direct_here = !env_flag(&["NCCL_P2P_DIRECT_DISABLE"])
            && crate::env::first_value(&crate::env::process, &["WEFT_P2P_DIRECT"])
                .is_none_or(|v| v.trim() != "0");
        let direct = bootstrap
            .all_gather(&[u8::from(direct_here)])?
            .iter()
            .all(|a| a.first() == Some(&1));
        // WEFT_ALGO: every rank must force the same algorithm (or none).
        let code = |a: Option<GpuAlgo>| a.map_or(0u8, |a| 1 + a as u8);
        let algos = bootstrap.all_gather(&[code(opts.algo)])?;
        if let Some(q) = algos
            .iter()
            .position(|a| a.first() != Some(&code(opts.algo)))
        {
            return Err(GpuError::InvalidArgument(format!(
                "rank {q} and rank {rank} disagree on WEFT_ALGO (this rank: {}): set the same \
                 value on every rank",
                opts.algo.map_or("unset", GpuAlgo::name)
            )));
        }
        // The peer region: for the algorithm WEFT_ALGO forces, or, unforced, for the
        // automatic choice's one-shot all-reduce wherever every rank maps every other's
        // memory (weft_core::algo::Chooser). WEFT_ALGO=ring goes without.
        let region_algo = match opts.algo {
            Some(GpuAlgo::Ring) => None,
            Some(algo) if via_host => {
                return Err(GpuError::InvalidArgument(format!(
                    "{}",
                    weft_core::algo::AlgoError::NotPeerMapped { algo }
                )));
            }
            Some(algo) => Some(algo),
            None if !via_host && (2..=PEER_MAX_RANKS).contains(&nranks) => Some(GpuAlgo::OneShot),
            None => None,
        };
        let setting = |algo: GpuAlgo| match opts.algo {
            Some(_) => format!("WEFT_ALGO={algo}"),
            None => "the automatic one-shot all-reduce (WEFT_ALGO=ring goes without)".to_string(),
        };
        let peer = match region_algo {
            Some(algo) => {
                // NVLS runs its multicast form only with the opt-in (WEFT_NVLS=1), and
                // refuses WEFT_NVLS=1 under NCCL_NVLS_ENABLE=0 rather than quietly run the
                // other form; every rank must choose alike (compared with the plan below).
                let form = if algo == GpuAlgo::Nvls {
                    super::multicast::nvls_form_from_env().map_err(GpuError::InvalidArgument)?
                } else {
                    NvlsForm::Unicast
                };
                // At init rather than at the first call's NVRTC compile.
                if algo == GpuAlgo::Nvls {
                    super::kernels::check_peer_threads(
                        PeerSource::Nvls,
                        super::kernels::kernel_threads(),
                    )?;
                }
                let (major, minor) = dev.compute_capability()?;
                let mut plan = RegionPlan::new(
                    algo,
                    nranks,
                    &nvls_heads,
                    major * 10 + minor,
                    &crate::env::process,
                )?;
                plan.multicast = form == NvlsForm::Multicast;
                if plan.multicast && (major, minor) < weft_kernels::MULTIMEM_MIN_ARCH {
                    return Err(GpuError::InvalidArgument(format!(
                        "WEFT_NVLS=1 on GPU {device} of compute capability {major}.{minor}: \
                         multimem needs sm_90 or newer; unset WEFT_NVLS to run NVLS in its \
                         unicast form"
                    )));
                }
                let bus_ids: Vec<&str> = peers.iter().map(|p| p.bus_id.as_str()).collect();
                if let (true, Some((a, b))) = (
                    plan.multicast,
                    super::multicast::ranks_sharing_a_gpu(&bus_ids),
                ) {
                    return Err(GpuError::InvalidArgument(format!(
                        "WEFT_NVLS=1 with ranks {a} and {b} on one GPU ({}): a multicast object \
                         takes each GPU once; give every rank its own GPU, or unset WEFT_NVLS \
                         to run NVLS in its unicast form",
                        peers[b].bus_id
                    )));
                }
                if algo == GpuAlgo::Nvls {
                    log::info!(
                        "weft: NVLS in its {} form, heads {:?} ({})",
                        if plan.multicast {
                            "multicast (WEFT_NVLS=1)"
                        } else {
                            "unicast (no multicast: WEFT_NVLS=1 is not set)"
                        },
                        plan.nvls.as_ref().map(|(_, h)| h.ranks().to_vec()),
                        if nvls_heads.is_empty() {
                            "every rank: the NVLS search did not run or found none"
                        } else {
                            "from the NVLS search"
                        }
                    );
                }
                // Each rank planned from its own environment and GPU: a rank with a larger
                // plan would write past a smaller peer's region. Refuse any difference.
                let plans = bootstrap.all_gather(&plan.encode())?;
                if let Some((q, why)) =
                    super::peer::first_disagreement(&plans, |p| plan.mismatch(p))
                {
                    return Err(GpuError::InvalidArgument(format!(
                        "{}: rank {q}'s peer region differs from rank {rank}'s in {why}: set it \
                         alike on every rank",
                        setting(algo)
                    )));
                }
                if plan.multicast {
                    let opt_in = weft_cuda::multicast::OptIn::from_env()?;
                    Some(PeerRegion::open_multicast(
                        opt_in,
                        &ctx,
                        &mut bootstrap,
                        id,
                        rank,
                        nranks,
                        plan,
                        opts.timeout,
                    )?)
                } else {
                    Some(PeerRegion::open(&ctx, &mut bootstrap, rank, &peers, plan)?)
                }
            }
            None => None,
        };
        let status = Arc::new(HostMapped::alloc(
            &ctx,
            FAULTS_OFFSET + FAULT_RECORDS * size_of::<KernelFault>(),
        )?);
        let mut comm = GpuComm {
            rank,
            nranks,
            kernels: Kernels::new(&ctx)?,
            control: DeviceBuffer::alloc(&ctx, 64)?,
            ctx,
            layout,
            timeout: opts.timeout,
            status,
            peer_windows,
            window,
            bootstrap,
            failed: None,
            direct,
            algo: opts.algo,
            peer,
            protocols,
            min_slices,
        };
        comm.control = comm.build_control(0)?;
        // Every window is zeroed and mapped before any rank's first kernel writes into one.
        comm.bootstrap.barrier()?;
        // Every peer has mapped the SHM segment by now: its name can go.
        comm.window.unlink();
        log::info!(
            "weft: rank {rank} of {nranks} on GPU {device} ({}): {} channel(s) via {}, {} KiB FIFO \
             steps, {} KiB LL buffers, NCCL_PROTO={}, algorithm: {}",
            me.bus_id,
            comm.layout.nchannels(),
            comm.transport_name(),
            step_bytes / 1024,
            protocols.ll_buffer_bytes() / 1024,
            protocols.enable,
            match (opts.algo, &comm.peer) {
                (Some(algo), _) => format!("{algo} (WEFT_ALGO)"),
                (None, Some(_)) => {
                    let n = nranks as u32;
                    let two = weft_core::algo::two_shot_max_bytes(n);
                    format!(
                        "one-shot all-reduce up to {} KiB{}, else ring",
                        weft_core::algo::one_shot_max_bytes(n) / 1024,
                        if two > 0 {
                            format!(", two-shot up to {} KiB", two / 1024)
                        } else {
                            String::new()
                        }
                    )
                }
                (None, None) => "ring".to_string(),
            }
        );
        Ok(comm)
    }

    /// The address of `rank`'s window here.
    fn window_of(&self, rank: u32) -> Result<u64, GpuError> {
        match self.peer_windows.get(rank as usize) {
            Some(PeerWindow::Own) => Ok(self.window.device_ptr()),
            Some(PeerWindow::SameProcess(p)) => Ok(*p),
            Some(PeerWindow::Ipc(m)) => Ok(m.ptr()),
            Some(PeerWindow::Host(w)) => Ok(w.device_ptr()),
            _ => Err(GpuError::InvalidArgument(format!(
                "no window of rank {rank} is mapped"
            ))),
        }
    }

    /// Whether `a` and `b` may write into each other's user buffers: both ranks live in this
    /// process (so a device pointer of one is valid for the other, with peer access) and
    /// every rank allowed it at init.
    fn direct_between(&self, a: u32, b: u32) -> bool {
        let here = |r: u32| {
            matches!(
                self.peer_windows.get(r as usize),
                Some(PeerWindow::Own | PeerWindow::SameProcess(_))
            )
        };
        self.direct && here(a) && here(b)
    }

    /// The connection end `edge` as seen from this rank.
    fn conn_info(&self, edge: Edge) -> Result<ConnInfo, GpuError> {
        let place = self
            .layout
            .place(edge)
            .ok_or_else(|| GpuError::InvalidArgument(format!("{edge:?} is not a connection")))?;
        let receiver = self.window_of(edge.to)?;
        let sender = self.window_of(edge.from)?;
        let slot = receiver + place.slot as u64;
        let mut buffs = [0u64; 3];
        let mut sizes = [0u32; 3];
        // The kernels take the FIFO wherever it is: written over NVLink and read locally,
        // or (read mode) written locally and read over NVLink.
        let fifo_window = if self.layout.read() { sender } else { receiver };
        buffs[Protocol::Simple.index()] = fifo_window + place.fifo as u64;
        sizes[Protocol::Simple.index()] =
            u32::try_from(self.layout.fifo_bytes()).unwrap_or(u32::MAX);
        if self.layout.ll_bytes() > 0 {
            buffs[Protocol::Ll.index()] = slot + self.layout.ll_offset() as u64;
            sizes[Protocol::Ll.index()] = u32::try_from(self.layout.ll_bytes()).unwrap_or(0);
        }
        Ok(ConnInfo {
            buffs,
            buff_sizes: sizes,
            step_size: u32::try_from(self.layout.step_bytes()).unwrap_or(u32::MAX),
            head: sender + place.head as u64,
            tail: slot,
            sizes_fifo: 0,
            ptr_exchange: sender + (place.head + EXCHANGE_OFFSET) as u64,
            step: 0,
            flags: match self.window {
                Window::Device(_) if self.direct_between(edge.from, edge.to) => CONN_DIRECT_WRITE,
                Window::Device(_) => 0,
                Window::Host { .. } => CONN_HOST_MEMORY,
            },
            steps: STEPS,
            direct_ops: 0,
        })
    }

    /// Writes `DevComm`, the channels, their peers and rings into device memory, every
    /// connection at FIFO step `first_step` (0 on a fresh communicator).
    fn build_control(&self, first_step: u64) -> Result<DeviceBuffer, GpuError> {
        let nch = self.layout.nchannels() as usize;
        let n = self.nranks;
        let channels_at = 64usize;
        let peers_at = channels_at + nch * size_of::<DevChannel>();
        let rings_at = peers_at + nch * n * size_of::<ChannelPeer>();
        let total = rings_at + nch * n * 4;
        let buf = DeviceBuffer::alloc(&self.ctx, total)?;
        let base = buf.ptr();
        let mut bytes = vec![0u8; total];
        let r = self.rank as u32;
        let dev = DevComm {
            rank: self.rank as i32,
            nranks: n as i32,
            n_channels: nch as u32,
            reserved: 0,
            abort_flag: self.status.device_ptr(),
            channels: base + channels_at as u64,
            timeout_ns: u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX),
            fault: self.status.device_ptr() + FAULTS_OFFSET as u64,
        };
        bytes[..size_of::<DevComm>()].copy_from_slice(dev.as_bytes());
        for c in 0..nch {
            let c32 = c as u32;
            let ring = self.layout.ring(c32);
            let pos = ring.iter().position(|&x| x == r).unwrap_or(0);
            let ring_addr = rings_at + c * n * 4;
            for (i, rank) in ring.iter().enumerate() {
                let at = ring_addr + i * 4;
                bytes[at..at + 4].copy_from_slice(&(*rank as i32).to_ne_bytes());
            }
            let ch = DevChannel {
                peers: base + (peers_at + c * n * size_of::<ChannelPeer>()) as u64,
                ring: RingInfo {
                    prev: self.layout.prev(c32, r) as i32,
                    next: self.layout.next(c32, r) as i32,
                    index: pos as i32,
                    reserved: 0,
                    user_ranks: base + ring_addr as u64,
                },
                tree: TreeInfo::default(),
                id: c32,
                npeers: n as u32,
            };
            let at = channels_at + c * size_of::<DevChannel>();
            bytes[at..at + size_of::<DevChannel>()].copy_from_slice(ch.as_bytes());
            for q in 0..n as u32 {
                let mut peer = ChannelPeer::default();
                if self.layout.connected(c32, r, q) {
                    peer.send = self.conn_info(Edge {
                        channel: c32,
                        from: r,
                        to: q,
                    })?;
                    peer.send.step = first_step;
                }
                if self.layout.connected(c32, q, r) {
                    peer.recv = self.conn_info(Edge {
                        channel: c32,
                        from: q,
                        to: r,
                    })?;
                    peer.recv.step = first_step;
                }
                let at = peers_at + (c * n + q as usize) * size_of::<ChannelPeer>();
                bytes[at..at + size_of::<ChannelPeer>()].copy_from_slice(peer.as_bytes());
            }
        }
        buf.copy_from_host(&bytes)?;
        Ok(buf)
    }

    /// Tests only: restarts every connection at FIFO step `step`, as if that many steps had
    /// gone through each (and the one-/two-shot epochs of every lane at `step`): heads and
    /// tails at `step`, the kernels' step counters at `step`,
    /// every LL line flagged as written at `step - 1` (`LlGeometry::initial_flag`, zero data),
    /// direct-write counts at 0. A GPU test can then cross the LL flag's 32-bit wrap and its
    /// cleaning steps without running 2^31 steps first. Collective: every rank calls it with
    /// the same step and nothing in flight; P2P windows only (device memory).
    #[doc(hidden)]
    pub fn restart_steps_for_test(&mut self, step: u64) -> Result<(), GpuError> {
        self.ctx.synchronize()?;
        self.bootstrap.barrier()?;
        let Window::Device(buf) = &self.window else {
            return Err(GpuError::InvalidArgument(
                "restart_steps_for_test: SHM windows are not supported".into(),
            ));
        };
        let line = LlLine::pack(0, LlGeometry::nccl(2).map_or(0, |g| g.initial_flag(step)));
        let image = self.layout.restart_image(self.rank as u32, step, line);
        buf.copy_from_host(&image)?;
        // The one-/two-shot epochs of every channel (lane) restart at `step` too, so that the
        // LL one-shot crosses its cleaning rounds and its 32-bit flag wrap. Stale pairs carry
        // older flags, and every call has ended. Not NVLS: its counters hold steps too.
        if let Some(region) = self.peer.as_ref().filter(|r| r.plan.nvls.is_none()) {
            let epochs: Vec<u8> = (0..MAX_CHANNELS).flat_map(|_| step.to_ne_bytes()).collect();
            let staged = DeviceBuffer::alloc(&self.ctx, epochs.len())?;
            staged.copy_from_host(&epochs)?;
            let stream = Stream::new(&self.ctx)?;
            let own = region.ptrs.get(self.rank).copied().unwrap_or(0) + super::peer::STEPS_AT;
            // SAFETY: the region holds MAX_CHANNELS epochs at STEPS_AT; both buffers live
            // past the synchronize below.
            unsafe { weft_cuda::copy_async(own, staged.ptr(), epochs.len(), &stream)? };
            stream.synchronize()?;
        }
        self.control = self.build_control(step)?;
        self.bootstrap.barrier()?;
        Ok(())
    }

    /// Tests only: this rank's one-/two-shot epoch of every lane (channel), as its kernels
    /// left them (`peer::STEPS_AT`), after the context's work ends; empty without a
    /// one-/two-shot peer region.
    #[doc(hidden)]
    pub fn lane_epochs_for_test(&self) -> Result<Vec<u64>, GpuError> {
        let Some(region) = self.peer.as_ref().filter(|r| r.plan.nvls.is_none()) else {
            return Ok(Vec::new());
        };
        // Whatever the caller left in flight ends first.
        self.ctx.synchronize()?;
        let bytes = MAX_CHANNELS as usize * size_of::<u64>();
        let staged = DeviceBuffer::alloc(&self.ctx, bytes)?;
        let stream = Stream::new(&self.ctx)?;
        let own = region.ptrs.get(self.rank).copied().unwrap_or(0) + super::peer::STEPS_AT;
        // SAFETY: the region holds MAX_CHANNELS epochs at STEPS_AT; `staged` holds as many
        // bytes; both live past the synchronize below.
        unsafe { weft_cuda::copy_async(staged.ptr(), own, bytes, &stream)? };
        stream.synchronize()?;
        let mut image = vec![0u8; bytes];
        staged.copy_to_host(&mut image)?;
        Ok(image
            .chunks_exact(size_of::<u64>())
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
            .collect())
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// "P2P" (device memory over NVLink or PCIe), "P2P/read" (the same in read mode) or
    /// "SHM" (host memory), as NCCL's `NCCL_DEBUG=INFO` names its transports.
    pub fn transport_name(&self) -> &'static str {
        match self.window {
            Window::Device(_) if self.layout.read() => "P2P/read",
            Window::Device(_) => "P2P",
            Window::Host { .. } => "SHM",
        }
    }

    /// Whether P2P connections run in read mode (SIMPLE FIFOs in the senders' memory).
    pub fn p2p_read(&self) -> bool {
        self.layout.read()
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn nchannels(&self) -> u32 {
        self.layout.nchannels()
    }

    /// The ring of each channel.
    pub fn rings(&self) -> Vec<Vec<u32>> {
        (0..self.layout.nchannels())
            .map(|c| self.layout.ring(c).to_vec())
            .collect()
    }

    /// Bytes of one FIFO step.
    pub fn step_bytes(&self) -> usize {
        self.layout.step_bytes()
    }

    /// The device's primary context (the one every buffer of this rank belongs to).
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Whether this rank's GPU reduces `dtype`: every type but fp8, which needs compute
    /// capability 8.9 or newer. Every type moves (all-gather, broadcast, send/receive)
    /// everywhere.
    pub fn can_reduce(&self, dtype: DataType) -> bool {
        self.kernels.supports(dtype)
    }

    /// Compiles and loads the kernels of `dtypes` now rather than at their first call (and
    /// those of the peer-pointer algorithm `WEFT_ALGO` set, if any).
    /// Loading a module waits for the device to be idle, so a rank that loads one while a
    /// peer's kernel on the same GPU waits for it would stall both until the timeout: ranks
    /// that share a GPU (tests) call this for every type they use, then a barrier.
    /// An fp8 type prepares the uint8 kernels its copies run, and its own where this GPU
    /// reduces fp8 (compute capability 8.9 and newer; elsewhere its reductions fail when
    /// called, saying why).
    pub fn prepare(&self, dtypes: &[DataType]) -> Result<(), GpuError> {
        // A communicator with a peer region (WEFT_ALGO, or the automatic one-shot) runs its
        // modules too.
        let peer = self.peer.as_ref().map(|p| {
            if p.plan.nvls.is_some() {
                PeerSource::Nvls
            } else {
                PeerSource::Direct
            }
        });
        self.kernels.prepare(dtypes, peer)
    }

    /// Every rank's `mine`, by rank, over the bootstrap network (control data only).
    pub fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, GpuError> {
        Ok(self.bootstrap.all_gather(mine)?)
    }

    /// Waits until every rank has called it (host side only: say nothing of the streams).
    pub fn barrier(&mut self) -> Result<(), GpuError> {
        Ok(self.bootstrap.barrier()?)
    }

    /// A handle on the abort flag that needs no `&mut self`: a caller that keeps the
    /// communicator behind a lock held across blocking calls (`synchronize`, `finalize`)
    /// raises the flag through it without waiting for the lock, and the blocked call ends.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            status: self.status.clone(),
        }
    }

    /// Makes every kernel of this communicator return at its next look at the flag, and
    /// every later call fail (NCCL's `ncclCommAbort`, without the teardown).
    pub fn abort(&mut self, why: &str) {
        self.status.write_u32(0, 1);
        if self.failed.is_none() {
            self.failed = Some(why.to_string());
        }
    }

    /// The communicator's asynchronous error (NCCL's `ncclCommGetAsyncError`): what a
    /// kernel recorded when it gave up, or the reason of an abort.
    pub fn check(&mut self) -> Result<(), GpuError> {
        // A kernel that records a fault raises the abort flag too: one load on the fast path.
        if self.failed.is_none() && self.status.read_u32(0).unwrap_or(0) == 0 {
            return Ok(());
        }
        if let Some(fault) = self.first_fault() {
            let err = self.fault_error(&fault);
            self.failed.get_or_insert_with(|| err.to_string());
            return Err(err);
        }
        if let Some(why) = &self.failed {
            return Err(GpuError::Aborted(why.clone()));
        }
        if self.status.read_u32(0).unwrap_or(0) != 0 {
            return Err(GpuError::Aborted("the abort flag is set".to_string()));
        }
        Ok(())
    }

    fn first_fault(&self) -> Option<KernelFault> {
        let words = size_of::<KernelFault>() / 4;
        (0..FAULT_RECORDS)
            .filter_map(|i| {
                let first = (FAULTS_OFFSET + i * size_of::<KernelFault>()) / 4;
                let raw: Vec<u32> = (first..first + words)
                    .map(|w| self.status.read_u32(w).unwrap_or(0))
                    .collect();
                KernelFault::read_from_bytes(raw.as_bytes()).ok()
            })
            // FAULT_CLAIMED: a kernel thread is still writing it (the next check reads it).
            .filter(|f| f.code != FAULT_NONE && f.code != FAULT_CLAIMED)
            // The timed-out wait is the root cause; the others saw its abort.
            .min_by_key(|f| (f.code != FAULT_TIMEOUT, std::cmp::Reverse(f.waited_ns)))
    }

    fn fault_error(&self, f: &KernelFault) -> GpuError {
        if f.code == FAULT_ABORTED && self.failed.is_some() {
            return GpuError::Aborted(self.failed.clone().unwrap_or_default());
        }
        let waiting_for = match f.wait {
            WAIT_RECV => "data from",
            WAIT_PEER_START => "the start of this collective (its output buffer's address) on",
            WAIT_PEER_FLAG => "the one-shot data (LL pairs) or one-/two-shot barrier flag of",
            WAIT_NVLS_POSTED => "NVLS data (a scattered or reduced chunk) from",
            WAIT_NVLS_FREED => "an NVLS slot to be freed by",
            _ => "a free FIFO slot from",
        };
        match f.code {
            FAULT_TIMEOUT => GpuError::PeerTimeout {
                rank: self.rank,
                peer: f.peer.max(0) as usize,
                channel: f.channel,
                waiting_for,
                waited: Duration::from_nanos(f.waited_ns),
            },
            _ => GpuError::Aborted(format!(
                "a kernel stopped on channel {} while waiting for {waiting_for} rank {}",
                f.channel, f.peer
            )),
        }
    }

    /// A stream of another GPU's context would launch the kernels there.
    fn check_stream(&self, stream: &Stream) -> Result<(), GpuError> {
        if stream.context().raw() == self.ctx.raw() {
            return Ok(());
        }
        Err(GpuError::InvalidArgument(format!(
            "a stream of GPU {} given to rank {}'s communicator on GPU {}",
            stream.context().device().ordinal(),
            self.rank,
            self.ctx.device().ordinal()
        )))
    }

    /// The protocol a call of `collective` on `count` elements of `dtype` runs (LL or
    /// SIMPLE; see [`super::protocol`]), the same on every rank; an error when the protocol
    /// settings leave none the kernels can run.
    pub fn protocol_for(
        &self,
        collective: Collective,
        count: usize,
        dtype: DataType,
    ) -> Result<Protocol, GpuError> {
        let bytes =
            weft_core::tune::call_bytes(collective, count, dtype.size_of_elem(), self.nranks);
        self.protocols
            .choose(
                collective,
                u64::try_from(bytes).unwrap_or(u64::MAX),
                self.nranks,
                self.layout.nchannels(),
            )
            .map_err(GpuError::InvalidArgument)
    }

    /// The protocol settings every call chooses from (the same on every rank).
    pub fn protocols(&self) -> GpuProtocols {
        self.protocols
    }

    /// The protocol a send or receive of `bytes` runs (both ends compute the same).
    pub fn p2p_protocol_for(&self, bytes: usize) -> Protocol {
        self.protocols
            .p2p(bytes, p2p_channels_for(bytes, self.layout.p2p_channels()))
    }

    /// Enqueues `collective` on `stream`: `count` elements as in NCCL's API (per rank for
    /// reduce-scatter and all-gather), from device memory `send` to device memory `recv`
    /// (equal for in place; in-place all-gather and reduce-scatter use NCCL's layout).
    ///
    /// # Safety
    ///
    /// `send` and `recv` must be device memory of this rank's GPU (or accessible from it),
    /// valid for the collective's input and output lengths until the stream reaches this
    /// call's end. Between ranks of one process (direct writes), the previous rank's GPU
    /// stores into `recv` too: it must be memory that peer access covers (`cuMemAlloc`);
    /// for pool (`cudaMallocAsync`) or VMM memory without access granted to the peer GPUs,
    /// set `NCCL_P2P_DIRECT_DISABLE=1` (as with NCCL); every rank must enqueue the same collectives in the same order; and the
    /// calls of one communicator must not run concurrently: enqueue them on one stream, or
    /// order their streams with events (they share the connections' FIFOs and counters).
    /// `op` is a [`RedOp`] or a [`GpuRedOp`] (NCCL's `PreMulSum`); with a
    /// [`super::PreMulScalar::Device`] scalar, that address must also stay valid until the
    /// stream reaches this call's end.
    // NCCL's calls take these same arguments (ncclAllReduce has seven and the comm).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective(
        &mut self,
        collective: Collective,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        op: impl Into<GpuRedOp>,
        stream: &Stream,
    ) -> Result<(), GpuError> {
        let call = GpuCollective {
            collective,
            send,
            recv,
            count,
            dtype,
            op: op.into(),
        };
        // SAFETY: the caller's promise, passed on.
        unsafe { self.collectives(&[call], stream) }.map(|_| ())
    }

    /// Enqueues `calls` on `stream` in order, as a group of NCCL's (`ncclGroupStart`, the
    /// calls, `ncclGroupEnd`): consecutive calls that run the same kernel function (one
    /// type, operator and protocol on the ring; one type, operator, algorithm and channel
    /// count on one-/two-shot) share a launch, up to `COLL_BATCH_MAX` ring or
    /// `PEER_BATCH_MAX` peer calls ([`super::batch`]). Every call is checked before any is
    /// launched. Returns the number of kernel launches made.
    ///
    /// Each channel runs a launch's calls in order, but channels do not wait for each other
    /// between calls: as with NCCL (which also reorders a group's calls), no call of a
    /// group may read or write what another call of the same group writes.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`], for every call.
    pub unsafe fn collectives(
        &mut self,
        calls: &[GpuCollective],
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        self.check_stream(stream)?;
        let group = self.plan_group(calls)?;
        // SAFETY: the caller's promise for every call, passed on.
        unsafe { self.launch_planned(&group.planned, stream) }
    }

    /// Checks and plans `calls` (what [`GpuComm::collectives`] does before launching),
    /// launching nothing: libnccl plans every communicator's calls of a group before it
    /// launches any, so that a refusal never leaves a group launched on some communicators
    /// and not on others.
    pub fn plan_group(&mut self, calls: &[GpuCollective]) -> Result<PlannedGroup, GpuError> {
        self.check()?;
        let planned = calls
            .iter()
            .map(|c| self.plan(c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PlannedGroup {
            owner: self.control.ptr(),
            planned,
        })
    }

    /// Launches a group [`GpuComm::plan_group`] planned on this communicator, on `stream`.
    /// Returns the number of kernel launches made.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`], for every call of the group.
    pub unsafe fn launch_group(
        &mut self,
        group: &PlannedGroup,
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        self.check()?;
        self.check_stream(stream)?;
        if group.owner != self.control.ptr() {
            return Err(GpuError::InvalidArgument(format!(
                "a group planned on another communicator given to rank {}'s",
                self.rank
            )));
        }
        // SAFETY: the caller's promise for every call, passed on.
        unsafe { self.launch_planned(&group.planned, stream) }
    }

    /// Launches planned calls, consecutive ones of one kernel together
    /// ([`super::batch::launches`]); the communicator and the stream already checked.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`], for every call.
    unsafe fn launch_planned(
        &self,
        planned: &[Planned],
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        let keys: Vec<Option<FuseKey>> = planned.iter().map(Planned::fuse_key).collect();
        let ranges = super::batch::launches(&keys, |k| match k {
            FuseKey::Ring { .. } => COLL_BATCH_MAX,
            FuseKey::Direct { .. } => PEER_BATCH_MAX,
        });
        let mut launches = 0;
        for range in ranges {
            // SAFETY: the caller's promise for every call, passed on.
            launches += unsafe { self.launch(&planned[range], stream) }?;
        }
        Ok(launches)
    }

    /// What `call` becomes on this communicator, checked, without launching anything.
    fn plan(&self, call: &GpuCollective) -> Result<Planned, GpuError> {
        let GpuCollective {
            collective,
            send,
            recv,
            count,
            dtype,
            op,
        } = *call;
        if count == 0 {
            return Ok(Planned::Nothing);
        }
        let esize = dtype.size_of_elem();
        let protocol = self.protocol_for(collective, count, dtype)?;
        let sizing = match protocol {
            // NCCL's LL ring: one step's payload per chunk and slice.
            Protocol::Ll => ChunkSizing::one_step(self.protocols.ll_step_data_bytes(), esize),
            _ => ChunkSizing::new(collective, self.layout.fifo_bytes(), esize),
        }
        .map_err(|e| GpuError::InvalidArgument(e.to_string()))?;
        // LL moves twice the bytes and NCCL counts its traffic 4 times
        // (`trafficPerByte *= 4` in enqueue.cc): it spreads over more channels sooner.
        let traffic_count = match protocol {
            Protocol::Ll => count.saturating_mul(4),
            _ => count,
        };
        let nchannels = channels_for(
            collective,
            traffic_count,
            esize,
            self.nranks,
            self.layout.nchannels(),
        );
        let (coll, root) = match collective {
            Collective::AllReduce => (CollKind::AllReduce, 0),
            Collective::ReduceScatter => (CollKind::ReduceScatter, 0),
            Collective::AllGather => (CollKind::AllGather, 0),
            Collective::Broadcast { root } => (CollKind::Broadcast, root),
            Collective::Reduce { root } => (CollKind::Reduce, root),
        };
        if root as usize >= self.nranks {
            return Err(GpuError::InvalidArgument(format!(
                "root {root} of {} ranks",
                self.nranks
            )));
        }
        // Collectives that do not reduce run the sum entry and ignore the operator.
        let op = if collective.reduces() {
            op
        } else {
            GpuRedOp::Builtin(RedOp::Sum)
        };
        let changes_data = matches!(op, GpuRedOp::PreMulSum(_));
        let red = op.for_kernel(dtype, self.nranks)?;
        // A communicator of one rank: the output of every collective is its input (Avg
        // divides by one), so, as NCCL, copy it (in place: nothing to do) instead of
        // launching a kernel. PreMulSum scales, and a reduction this GPU cannot run is
        // still refused, so those go on to the kernel.
        if self.nranks == 1
            && !changes_data
            && (!collective.reduces() || self.kernels.supports(dtype))
        {
            if send == recv {
                return Ok(Planned::Nothing);
            }
            // One rank's input and output have the same length in every collective.
            return Ok(Planned::Copy {
                dst: recv,
                src: send,
                bytes: count * esize,
            });
        }
        let caps = PeerCaps {
            peer_mapped: self.peer.is_some(),
            nvls_heads: self.peer.as_ref().is_some_and(|p| p.plan.nvls.is_some()),
        };
        let algo = self
            .protocols
            .chooser(self.algo, self.layout.nchannels(), caps)
            .algorithm(&Call::new(collective, count, esize, self.nranks))
            .map_err(|e| GpuError::InvalidArgument(e.to_string()))?
            .unwrap_or(GpuAlgo::Ring); // None: the tuner's, always the ring on the GPU
        if algo != GpuAlgo::Ring {
            return self.plan_peer(algo, coll, send, recv, count, dtype, red);
        }
        let chunk_bytes = sizing.chunk_elems() * esize;
        let work = CollWork {
            send_buff: send,
            recv_buff: recv,
            count: count as u64,
            red_op_arg: red.arg,
            chunk_size: u32::try_from(chunk_bytes).unwrap_or(u32::MAX),
            root,
            coll: coll as u32,
            dtype: dtype as u32,
            redop: red.op as u32,
            algorithm: Algorithm::Ring as u32,
            protocol: protocol as u32,
            channel_lo: 0,
            channel_count: nchannels,
            slice_steps: 1,
            chunk_steps: u32::try_from(sizing.chunk_steps()).unwrap_or(u32::MAX),
            // The kernel uses it on connections flagged CONN_DIRECT_WRITE only; LL lines
            // always go through the connection's buffer.
            direct: u32::from(
                self.direct
                    && protocol == Protocol::Simple
                    && match coll {
                        CollKind::AllReduce => {
                            count.saturating_mul(esize) >= DIRECT_ALL_REDUCE_MIN_BYTES
                        }
                        CollKind::AllGather | CollKind::Broadcast => true,
                        _ => false,
                    },
            ),
            red_op_flags: red.flags,
            // LL cuts its own way (one step's payload per chunk).
            min_slices: if protocol == Protocol::Simple {
                self.min_slices
            } else {
                1
            },
        };
        // Collectives that do not reduce only copy elements: fp8 ones copy as uint8 does,
        // which needs no fp8 instructions (NCCL too takes fp8 all-gathers and broadcasts
        // on any GPU, and refuses only reductions).
        let module = if dtype.is_fp8() && !collective.reduces() {
            DataType::Uint8
        } else {
            dtype
        };
        // Refused here, before any call of a group launches, rather than at the launch.
        self.kernels.check_supported(module)?;
        Ok(Planned::Ring {
            module,
            op: red.op,
            protocol,
            work,
        })
    }

    /// A collective of the peer-pointer algorithm this communicator was set to
    /// (`WEFT_ALGO`) or chose: a work of `direct.cu` or `nvls.cu` (see [`super::peer`]).
    #[allow(clippy::too_many_arguments)]
    fn plan_peer(
        &self,
        algo: GpuAlgo,
        coll: CollKind,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DataType,
        red: KernelRedOp,
    ) -> Result<Planned, GpuError> {
        let Some(region) = &self.peer else {
            return Err(GpuError::InvalidArgument(
                "no peer region: this communicator has none (WEFT_ALGO=ring, SHM windows, one \
                 rank, or more than 8 ranks)"
                    .to_string(),
            ));
        };
        let plan = &region.plan;
        let source = if plan.nvls.is_some() {
            PeerSource::Nvls
        } else {
            PeerSource::Direct
        };
        // An all-gather only moves bytes: fp8 runs the uint8 module (as on the ring).
        let module = if dtype.is_fp8() && coll == CollKind::AllGather {
            DataType::Uint8
        } else {
            dtype
        };
        self.kernels.check_supported(module)?;
        let nchannels = plan.channels(algo, count, dtype, self.nranks);
        let mut work = plan.work(
            algo,
            self.control.ptr(),
            &region.ptrs,
            self.rank,
            coll,
            send,
            recv,
            count as u64,
            module,
            red.op,
            red.arg,
            nchannels,
        );
        work.red_op_flags = red.flags;
        if let Some(mc_base) = region.mc_base {
            if let Some(why) = plan.multicast_refusal(coll, dtype, red.op) {
                return Err(GpuError::InvalidArgument(why));
            }
            plan.set_multicast(&mut work, mc_base);
        }
        Ok(Planned::Peer {
            source,
            module,
            op: red.op,
            work,
            spread: algo == GpuAlgo::OneShot
                && nchannels <= PEER_LANES
                && plan.ll_one_shot(self.nranks),
        })
    }

    /// Launches `planned` (calls [`super::batch::launches`] put together: one call, or
    /// several of one fuse key) on `stream`. Returns the kernel launches made (0 or 1).
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`], for every call.
    unsafe fn launch(&self, planned: &[Planned], stream: &Stream) -> Result<usize, GpuError> {
        debug_assert!(
            planned.len() <= 1
                || (planned[0].fuse_key().is_some()
                    && planned
                        .iter()
                        .all(|p| p.fuse_key() == planned[0].fuse_key())),
            "a launch of calls that do not share a kernel"
        );
        debug_assert!(planned.len() <= COLL_BATCH_MAX.max(PEER_BATCH_MAX));
        match planned.first() {
            None | Some(Planned::Nothing) => Ok(0),
            Some(Planned::Copy { dst, src, bytes }) => {
                // SAFETY: the caller's promise: both buffers hold the call's bytes.
                unsafe { weft_cuda::copy_async(*dst, *src, *bytes, stream)? };
                Ok(0)
            }
            Some(&Planned::Ring {
                module,
                op,
                protocol,
                work,
            }) => {
                let mut args = KernelArgs::one(self.control.ptr(), work);
                for (slot, p) in args.works.iter_mut().zip(planned).skip(1) {
                    if let Planned::Ring { work, .. } = p {
                        *slot = *work;
                    }
                }
                args.nworks = planned.len().min(COLL_BATCH_MAX) as u32;
                let n = args.nworks as usize;
                let counts: Vec<u32> = args.works[..n].iter().map(|w| w.channel_count).collect();
                let total = self.layout.nchannels();
                for (w, lo) in args.works[..n]
                    .iter_mut()
                    .zip(super::batch::spread(&counts, total))
                {
                    w.channel_lo = lo;
                }
                let grid = args
                    .works()
                    .iter()
                    .map(|w| w.channel_lo + w.channel_count)
                    .max()
                    .unwrap_or(1);
                let kernels = self.kernels.get(module)?;
                let mut params = [(&mut args as *mut KernelArgs).cast::<core::ffi::c_void>()];
                // SAFETY: the ring kernels take one `weft_kernel_args` by value, which
                // `params` points to; the buffers are the caller's promise; the control
                // block and windows live as long as `self`, which synchronizes before
                // freeing them.
                unsafe {
                    kernels.ring(op, protocol).launch(
                        (grid, 1, 1),
                        (kernels.threads(), 1, 1),
                        0,
                        stream,
                        &mut params,
                    )?;
                }
                Ok(1)
            }
            Some(&Planned::Peer {
                source,
                module,
                op,
                work,
                spread,
            }) => {
                let kernels = self.kernels.peer(source, module)?;
                let block = (kernels.threads(), 1, 1);
                if source == PeerSource::Nvls {
                    // NVLS runs one call per launch (nvls.cu's start-of-launch post of its
                    // counters assumes it): never fused (`fuse_key`).
                    let grid = (work.nchannels, 1, 1);
                    let mut work = work;
                    let mut params = [(&mut work as *mut PeerWork).cast::<core::ffi::c_void>()];
                    // SAFETY: the NVLS kernels take one `weft_peer_work` by value, which
                    // `params` points to; the buffers are the caller's promise; the
                    // regions live as long as `self`.
                    unsafe {
                        kernels
                            .get(op)
                            .launch(grid, block, 0, stream, &mut params)?
                    };
                    return Ok(1);
                }
                let mut batch = PeerBatch::one(work);
                for (slot, p) in batch.works.iter_mut().zip(planned).skip(1) {
                    if let Planned::Peer { work, .. } = p {
                        *slot = *work;
                    }
                }
                batch.nworks = planned.len().min(PEER_BATCH_MAX) as u32;
                let n = batch.nworks as usize;
                if spread {
                    let counts: Vec<u32> = batch.works[..n].iter().map(|w| w.nchannels).collect();
                    let los = super::batch::spread(&counts, PEER_LANES);
                    for (w, lo) in batch.works[..n].iter_mut().zip(los) {
                        w.lane_lo = lo;
                    }
                }
                let grid = batch
                    .works()
                    .iter()
                    .map(|w| w.lane_lo + w.nchannels)
                    .max()
                    .unwrap_or(1);
                let grid = (grid, 1, 1);
                let mut params = [(&mut batch as *mut PeerBatch).cast::<core::ffi::c_void>()];
                // SAFETY: the one-/two-shot kernels take one `weft_peer_batch` by value,
                // which `params` points to; the buffers are the caller's promise; the
                // regions live as long as `self`.
                unsafe {
                    kernels
                        .get(op)
                        .launch(grid, block, 0, stream, &mut params)?
                };
                Ok(1)
            }
        }
    }

    /// Enqueues a group of sends and receives on `stream`, run at once (NCCL's
    /// `ncclGroupStart` / `ncclSend` / `ncclRecv` / `ncclGroupEnd`). A peer takes at most
    /// one send and one receive per group; the matching call on the peer must have the
    /// same byte count.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`]: each buffer is device memory valid for its bytes until
    /// the stream reaches this call's end.
    pub unsafe fn group(&mut self, ops: &[GpuP2p], stream: &Stream) -> Result<(), GpuError> {
        self.check()?;
        self.check_stream(stream)?;
        validate_p2p_group(self.rank, self.nranks, ops)?;
        let mut launch = P2pArgs {
            comm: self.control.ptr(),
            ..P2pArgs::default()
        };
        let mut blocks = 0u32;
        let mut seen: Vec<(usize, bool)> = Vec::new();
        let mut to_self: Vec<(u64, usize)> = Vec::new();
        let mut from_self: Vec<(u64, usize)> = Vec::new();
        for op in ops {
            let (peer, buf, bytes, send) = match *op {
                GpuP2p::Send { peer, buf, bytes } => (peer, buf, bytes, true),
                GpuP2p::Recv { peer, buf, bytes } => (peer, buf, bytes, false),
            };
            if peer >= self.nranks {
                return Err(GpuError::InvalidArgument(format!(
                    "peer {peer} of {} ranks",
                    self.nranks
                )));
            }
            if seen.contains(&(peer, send)) {
                return Err(GpuError::InvalidArgument(format!(
                    "two {} rank {peer} in one group: weft's GPU path takes one each way per peer and group",
                    if send { "sends to" } else { "receives from" }
                )));
            }
            seen.push((peer, send));
            if peer == self.rank {
                if send {
                    to_self.push((buf, bytes))
                } else {
                    from_self.push((buf, bytes))
                }
                continue;
            }
            if bytes == 0 {
                continue;
            }
            let nch = p2p_channels_for(bytes, self.layout.p2p_channels());
            let slot = launch.ops.get_mut(launch.nops as usize).ok_or_else(|| {
                GpuError::InvalidArgument(format!(
                    "more than {P2P_MAX_OPS} sends and receives in one group"
                ))
            })?;
            *slot = P2pOp {
                buff: buf,
                bytes: bytes as u64,
                peer: peer as i32,
                send: u32::from(send),
                block_lo: blocks,
                nchannels: nch,
                protocol: self.protocols.p2p(bytes, nch) as u32,
                reserved: 0,
            };
            launch.nops += 1;
            blocks += nch;
        }
        // Everything is checked before anything is enqueued.
        if from_self.len() != to_self.len() {
            return Err(GpuError::InvalidArgument(
                "a send to this rank without its receive (or the reverse)".into(),
            ));
        }
        if let Some(((_, n), (_, m))) = from_self.iter().zip(&to_self).find(|(a, b)| a.1 != b.1) {
            return Err(GpuError::InvalidArgument(format!(
                "a send of {m} bytes to this rank meets a receive of {n}"
            )));
        }
        // Each block of a launch has its own fault record.
        if blocks as usize > FAULT_RECORDS {
            return Err(GpuError::InvalidArgument(format!(
                "a point-to-point group of {blocks} blocks, more than the {FAULT_RECORDS} one \
                 launch can record faults for: split the group"
            )));
        }
        // A rank's message to itself is a copy on the stream.
        for ((dst, n), (src, _)) in from_self.iter().zip(&to_self) {
            // SAFETY: both are the caller's device buffers of `n` bytes.
            unsafe { weft_cuda::copy_async(*dst, *src, *n, stream)? };
        }
        if launch.nops == 0 {
            return Ok(());
        }
        // Every op of this launch runs on one dtype-independent kernel; the uint8 module
        // is as good as any.
        let kernels = self.kernels.get(DataType::Uint8)?;
        let mut params = [(&mut launch as *mut P2pArgs).cast::<core::ffi::c_void>()];
        // SAFETY: the kernel takes one `weft_p2p_args` by value; buffers as promised.
        unsafe {
            kernels.p2p().launch(
                (blocks, 1, 1),
                (kernels.threads(), 1, 1),
                0,
                stream,
                &mut params,
            )?;
        }
        Ok(())
    }

    /// Waits for `stream` to finish, then reports what a kernel recorded. A healthy queue
    /// may take as long as it needs (every wait of weft's kernels has its own deadline, so
    /// the stream ends); once the abort flag is up (a kernel gave up, or `abort`), the
    /// stream gets a few seconds to drain, then this returns an error instead of waiting on
    /// whatever else holds the stream.
    pub fn synchronize(&mut self, stream: &Stream) -> Result<(), GpuError> {
        const DRAIN: Duration = Duration::from_secs(5);
        let mut spins = 0u32;
        let mut aborted_at: Option<Instant> = None;
        while !stream.is_done()? {
            if aborted_at.is_none() && self.status.read_u32(0).unwrap_or(0) != 0 {
                aborted_at = Some(Instant::now());
            }
            if aborted_at.is_some_and(|t| t.elapsed() > DRAIN) {
                self.check()?;
                return Err(GpuError::Aborted(format!(
                    "rank {}: the GPU stream did not finish {} s after the abort flag was \
                     raised; something other than weft's kernels is holding it",
                    self.rank,
                    DRAIN.as_secs()
                )));
            }
            spins += 1;
            if spins > 1000 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
        self.check()
    }

    /// Ends the communicator in step with the others: waits for this rank's work, then for
    /// every rank, so that no window is freed while a peer's kernel still writes into it.
    pub fn finalize(&mut self) -> Result<(), GpuError> {
        self.ctx.synchronize()?;
        self.bootstrap.barrier()?;
        Ok(())
    }
}

impl Drop for GpuComm {
    fn drop(&mut self) {
        // Kernels still running would write into freed memory: let them end (their waits
        // end at the timeout at the latest).
        if let Err(e) = self.ctx.synchronize() {
            log::warn!(
                "weft: rank {}: synchronizing before teardown failed: {e}",
                self.rank
            );
        }
    }
}

/// The refusals of [`GpuComm::group`] for `rank` of `nranks`, without launching anything:
/// a caller issuing several groups (NCCL's group over several communicators) checks every
/// one before launching any, so that a refusal never leaves a group half-launched.
pub fn validate_p2p_group(rank: usize, nranks: usize, ops: &[GpuP2p]) -> Result<(), GpuError> {
    let mut seen: Vec<(usize, bool)> = Vec::new();
    let (mut to_self, mut from_self) = (Vec::new(), Vec::new());
    let mut launched = 0usize;
    for op in ops {
        let (peer, bytes, send) = match *op {
            GpuP2p::Send { peer, bytes, .. } => (peer, bytes, true),
            GpuP2p::Recv { peer, bytes, .. } => (peer, bytes, false),
        };
        if peer >= nranks {
            return Err(GpuError::InvalidArgument(format!(
                "peer {peer} of {nranks} ranks"
            )));
        }
        if seen.contains(&(peer, send)) {
            return Err(GpuError::InvalidArgument(format!(
                "two {} rank {peer} in one group: weft's GPU path takes one each way per peer and group",
                if send { "sends to" } else { "receives from" }
            )));
        }
        seen.push((peer, send));
        if peer == rank {
            if send {
                to_self.push(bytes)
            } else {
                from_self.push(bytes)
            }
        } else if bytes > 0 {
            launched += 1;
        }
    }
    if launched > P2P_MAX_OPS {
        return Err(GpuError::InvalidArgument(format!(
            "more than {P2P_MAX_OPS} sends and receives in one group ({launched}; an \
             all-to-all over more than {} ranks needs more)",
            P2P_MAX_OPS / 2 + 1
        )));
    }
    if from_self.len() != to_self.len() {
        return Err(GpuError::InvalidArgument(
            "a send to this rank without its receive (or the reverse)".into(),
        ));
    }
    if let Some((n, m)) = from_self.iter().zip(&to_self).find(|(a, b)| a != b) {
        return Err(GpuError::InvalidArgument(format!(
            "a send of {m} bytes to this rank meets a receive of {n}"
        )));
    }
    Ok(())
}

/// Channels a point-to-point message of `bytes` uses: one per 512 KiB, at most `max`.
/// The sender and the receiver compute it from the same byte count.
pub fn p2p_channels_for(bytes: usize, max: u32) -> u32 {
    u32::try_from(bytes.div_ceil(512 << 10))
        .unwrap_or(u32::MAX)
        .clamp(1, max.max(1))
}

/// Checks that all ranks are on one host, no two on one GPU, with the same explicit
/// settings; returns whether this rank can reach every other's GPU memory directly (P2P:
/// not disabled, peer access possible, the peer's GPU visible here). `WEFT_TEST_SHARE_GPU=1`
/// lets ranks share a GPU: only for testing the protocol on machines with one GPU (the
/// ranks' kernels must then fit on the GPU together).
fn check_peers(me: usize, peers: &[GpuPeer]) -> Result<bool, GpuError> {
    let mine = &peers[me];
    let mut reach = true;
    if env_flag(&["WEFT_P2P_DISABLE", "NCCL_P2P_DISABLE"]) && peers.len() > 1 {
        log::info!("weft: P2P disabled (NCCL_P2P_DISABLE): device data goes through SHM");
        reach = false;
    }
    for (q, p) in peers.iter().enumerate() {
        if q == me {
            continue;
        }
        if p.host_hash != mine.host_hash {
            return Err(GpuError::Unreachable {
                peer: q,
                detail: "it is on another host, and weft's GPU path connects the GPUs of one \
                         host only (NET for device memory is not implemented yet)"
                    .to_string(),
            });
        }
        if p.bus_id == mine.bus_id && !env_flag(&["WEFT_TEST_SHARE_GPU"]) {
            return Err(GpuError::InvalidArgument(format!(
                "ranks {me} and {q} both use GPU {} (one rank per GPU, as NCCL's \"Duplicate GPU detected\")",
                p.bus_id
            )));
        }
        if p.step_bytes != mine.step_bytes
            || p.nchannels != mine.nchannels
            || p.min_slices != mine.min_slices
        {
            return Err(GpuError::InvalidArgument(format!(
                "rank {q} runs with {} channels, {}-byte FIFO steps and at least {} slices per \
                 step, this rank with {}, {} and {} (0 channels: the default): start every rank \
                 with the same WEFT_NCHANNELS, NCCL_BUFFSIZE and WEFT_MIN_SLICES",
                p.nchannels,
                p.step_bytes,
                p.min_slices,
                mine.nchannels,
                mine.step_bytes,
                mine.min_slices
            )));
        }
        if p.bus_id == mine.bus_id {
            // Ranks sharing a GPU (tests on one-GPU machines): same memory, no P2P needed.
            continue;
        }
        let here = Device::get(mine.device as usize)?;
        match local_device_of(&p.bus_id)? {
            Some(d) if here.can_access_peer(&d)? => {}
            Some(_) => {
                log::info!(
                    "weft: GPU {} cannot access GPU {} (rank {q}) directly: device data goes through SHM",
                    mine.bus_id,
                    p.bus_id
                );
                reach = false;
            }
            None => {
                log::info!(
                    "weft: rank {q}'s GPU {} is not visible here (CUDA_VISIBLE_DEVICES?): device data goes through SHM",
                    p.bus_id
                );
                reach = false;
            }
        }
    }
    Ok(reach)
}

/// NCCL's default for P2P read mode (`ncclTopoCheckP2p`): GPUs of compute capability 8.0
/// (Ampere) joined by NVLink, here every pair `rank` has with a GPU this process can see
/// (CUDA's native-atomics P2P attribute standing for NVLink). A peer's GPU this process
/// cannot see (`CUDA_VISIBLE_DEVICES` isolating each process) or a failed query answers no:
/// every rank must still reach the vote that follows, and write mode is always correct.
fn read_by_default(dev: &Device, rank: usize, peers: &[GpuPeer]) -> bool {
    let ampere = |d: &Device| d.compute_capability().is_ok_and(|cc| cc == (8, 0));
    if !ampere(dev) {
        return false;
    }
    peers.iter().enumerate().all(|(q, p)| {
        q == rank
            || match local_device_of(&p.bus_id) {
                Ok(Some(d)) => ampere(&d) && dev.nvlink_to(&d).unwrap_or(false),
                Ok(None) => false,
                Err(e) => {
                    log::info!("weft: P2P read mode off: looking up rank {q}'s GPU failed: {e}");
                    false
                }
            }
    })
}

/// The device of this process with PCI bus id `bus_id`.
fn local_device_of(bus_id: &str) -> Result<Option<Device>, GpuError> {
    for i in 0..weft_cuda::device_count()? {
        let d = Device::get(i)?;
        if d.pci_bus_id()?.eq_ignore_ascii_case(bus_id) {
            return Ok(Some(d));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn searched_rings_run_on_two_blocks_unless_the_count_was_set() {
        let rings: Vec<Vec<u32>> = (0..24).map(|c| vec![c % 2, 1 - c % 2]).collect();
        let doubled = two_blocks_per_ring(rings.clone());
        assert_eq!(doubled.len(), 48);
        for (c, ring) in doubled.iter().enumerate() {
            assert_eq!(ring, &rings[c % 24], "channel {c}");
        }
        // At most MAX_CHANNELS.
        let many: Vec<Vec<u32>> = (0..40).map(|_| vec![0, 1]).collect();
        assert_eq!(two_blocks_per_ring(many).len(), MAX_CHANNELS as usize);
        // A count the user set.
        let none = |_: &str| None;
        assert!(!channel_count_set(0, &none));
        assert!(channel_count_set(24, &none));
        for var in [
            "NCCL_MIN_NCHANNELS",
            "NCCL_MAX_NCHANNELS",
            "WEFT_MAX_NCHANNELS",
        ] {
            let set = |v: &str| (v == var).then(|| "24".to_string());
            assert!(channel_count_set(0, &set), "{var}");
        }
    }

    #[test]
    fn p2p_groups_are_validated_before_anything_launches() {
        let send = |peer, bytes| GpuP2p::Send {
            peer,
            buf: 0x1000,
            bytes,
        };
        let recv = |peer, bytes| GpuP2p::Recv {
            peer,
            buf: 0x2000,
            bytes,
        };
        assert!(
            validate_p2p_group(0, 4, &[send(1, 7), recv(1, 7), send(0, 3), recv(0, 3)]).is_ok()
        );
        let msg = |ops: &[GpuP2p]| validate_p2p_group(0, 20, ops).unwrap_err().to_string();
        assert!(msg(&[send(1, 7), send(1, 9)]).contains("two sends to rank 1"));
        assert!(msg(&[recv(25, 7)]).contains("peer 25 of 20"));
        assert!(msg(&[send(0, 4)]).contains("without its receive"));
        assert!(msg(&[send(0, 4), recv(0, 5)]).contains("send of 4 bytes"));
        // 16 ops to others fit; the 17th is refused. Empty messages and self copies
        // take no slot.
        let mut ops: Vec<GpuP2p> = (1..=8).flat_map(|p| [send(p, 100), recv(p, 100)]).collect();
        ops.extend([send(0, 5), recv(0, 5), send(9, 0)]);
        assert!(validate_p2p_group(0, 20, &ops).is_ok());
        ops.push(recv(9, 1));
        assert!(msg(&ops).contains("more than 16"), "{}", msg(&ops));
    }

    #[test]
    fn peer_record_round_trips() {
        let p = GpuPeer {
            host_hash: 0x1234_5678_9abc_def0,
            pid: 4242,
            device: 1,
            bus_id: "0000:19:00.0".to_string(),
            nchannels: 0,
            step_bytes: 512 << 10,
            min_slices: 3,
        };
        assert_eq!(GpuPeer::decode(3, &p.encode()).unwrap(), p);
        let mut bad = p.encode();
        bad[0] ^= 1;
        assert!(
            GpuPeer::decode(3, &bad)
                .unwrap_err()
                .to_string()
                .contains("rank 3")
        );
        assert!(GpuPeer::decode(2, &p.encode()[..20]).is_err());
        let mut old = p.encode();
        old[..4].copy_from_slice(&PEER_MAGIC_V1.to_be_bytes());
        let err = GpuPeer::decode(1, &old).unwrap_err().to_string();
        assert!(err.contains("rank 1 runs an older weft build"), "{err}");
    }

    #[test]
    fn p2p_channels_grow_with_the_message() {
        assert_eq!(p2p_channels_for(8, 4), 1);
        assert_eq!(p2p_channels_for(512 << 10, 4), 1);
        assert_eq!(p2p_channels_for((512 << 10) + 1, 4), 2);
        assert_eq!(p2p_channels_for(1 << 30, 4), 4);
        assert_eq!(p2p_channels_for(1 << 30, 0), 1);
    }

    #[test]
    fn avg_scales_match_the_cpu_executor() {
        assert_eq!(
            avg_scale_bits(DataType::Float32, RedOp::Avg, 4),
            u64::from(0.25f32.to_bits())
        );
        assert_eq!(
            avg_scale_bits(DataType::Float64, RedOp::Avg, 3),
            (1.0f64 / 3.0).to_bits()
        );
        assert_eq!(avg_scale_bits(DataType::Float16, RedOp::Avg, 2), 0x3800);
        assert_eq!(avg_scale_bits(DataType::Bfloat16, RedOp::Avg, 2), 0x3f00);
        // 1/2 is 0x30 in E4M3 (exponent 6 of bias 7) and 0x38 in E5M2 (binary16's 0x3800);
        // float(1/3) rounds to 0.34375 (0x2b) and 0.3125 (0x35).
        assert_eq!(avg_scale_bits(DataType::Float8E4M3, RedOp::Avg, 2), 0x30);
        assert_eq!(avg_scale_bits(DataType::Float8E5M2, RedOp::Avg, 2), 0x38);
        assert_eq!(avg_scale_bits(DataType::Float8E4M3, RedOp::Avg, 3), 0x2b);
        assert_eq!(avg_scale_bits(DataType::Float8E5M2, RedOp::Avg, 3), 0x35);
        assert_eq!(avg_scale_bits(DataType::Int32, RedOp::Avg, 2), 0);
        assert_eq!(avg_scale_bits(DataType::Float32, RedOp::Sum, 2), 0);
    }
}
