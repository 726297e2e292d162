//! Init: joining a GPU communicator, step by step.
//!
//! 1. the options, checked ([`GpuSettings`]); bootstrap; every rank's protocol settings
//!    compared;
//! 2. every rank's GPU all-gathered ([`GpuPeer`]), and whether every rank reaches every
//!    other's memory (P2P) or every window goes to shared host memory (SHM);
//! 3. the channels' rings ([`super::channels`]), the connections' layout (P2P read mode
//!    where every rank takes it);
//! 4. the windows, opened and shared ([`Windows`]);
//! 5. the forced algorithm compared, the peer region opened ([`super::region`]);
//! 6. the fault page, the kernels, the control block; a barrier, so that every window is
//!    zeroed and mapped before any rank's first kernel writes into one.

use std::mem::ManuallyDrop;

use weft_core::abi::STEPS;
use weft_core::algo::GpuAlgo;
use weft_cuda::{Context, Device, DeviceBuffer};

use super::GpuComm;
use super::channels::{ChannelRings, channel_rings};
use super::control::write_control;
use super::faults::Faults;
use super::launch::Launcher;
use super::net::NetEnds;
use super::order::StreamOrder;
use super::p2p::p2p_channel_count;
use super::peers::{GpuPeer, check_peers, connection_lines, read_by_default, several_hosts};
use super::plan::{DEFAULT_MIN_SLICES, GATHERED_FORCED_MAX_BYTES, GATHERED_MAX_RANKS, Planner};
use super::region::{PeerRegion, RegionSite, agree_on_plan, region_algo};
use super::windows::Windows;
use crate::bootstrap::{Bootstrap, UniqueId, identity};
use crate::comm::CommOptions;
use crate::gpu::GpuError;
use crate::gpu::kernels::Kernels;
use crate::gpu::layout::Layout;
use crate::gpu::protocol::GpuProtocols;

/// NCCL's SIMPLE FIFO step: 512 KiB (a 4 MiB buffer of 8 steps).
pub const DEFAULT_STEP_BYTES: usize = 512 << 10;
/// The largest FIFO step: the kernels address slots and chunks with 32-bit sizes.
pub const MAX_STEP_BYTES: usize = 64 << 20;

/// The options a communicator runs with, checked; every rank must run with the same.
#[derive(Debug)]
struct GpuSettings {
    step_bytes: usize,
    protocols: GpuProtocols,
    /// At least 1 (0 and 1 both mean one slice per FIFO step).
    min_slices: u32,
}

impl GpuSettings {
    fn from_options(opts: &CommOptions) -> Result<GpuSettings, GpuError> {
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
        let protocols = GpuProtocols::from_options(opts);
        protocols.validate().map_err(GpuError::InvalidArgument)?;
        // 0 and 1 both mean one slice per FIFO step: compared across ranks as 1.
        let min_slices = opts.min_slices.unwrap_or(DEFAULT_MIN_SLICES).max(1);
        if min_slices > STEPS {
            return Err(GpuError::InvalidArgument(format!(
                "at least {min_slices} slices per FIFO step: at most {STEPS} (WEFT_MIN_SLICES)"
            )));
        }
        Ok(GpuSettings {
            step_bytes,
            protocols,
            min_slices,
        })
    }
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
        // What differs from the defaults, as NCCL_DEBUG=INFO lists it at init.
        opts.settings.log_changed_once();
        let dev = Device::get(device)?;
        let ctx = Context::primary(dev)?;
        let mut settings = GpuSettings::from_options(opts)?;
        let mut bootstrap = Bootstrap::init(id, rank, nranks, &opts.bootstrap)?;
        agree_on_protocols(&mut bootstrap, &settings.protocols)?;
        // The options' host id where the program set one (each rank of a test may stand
        // for a host of its own), else the process's (NCCL_HOSTID, else the host).
        let host_hash = match opts.settings.bootstrap.hostid.as_deref() {
            Some(id) => identity::host_hash_of(Some(id)),
            None => identity::host_hash(),
        };
        let me = GpuPeer {
            host_hash,
            pid: std::process::id(),
            device: device as u32,
            bus_id: dev.pci_bus_id()?.to_lowercase(),
            nchannels: opts.nchannels.unwrap_or(0),
            step_bytes: settings.step_bytes as u64,
            min_slices: settings.min_slices,
        };
        let peers = gather_peers(&mut bootstrap, &me)?;
        let status = crate::status::join(&mut bootstrap, rank, nranks)?;
        // P2P where every rank reaches every other's GPU; otherwise every window lives in
        // shared host memory (SHM). Every rank decides from the same all-gathered answers.
        let p2p_disabled = opts.settings.transport.p2p_disable;
        let unreachable = !every_rank(&mut bootstrap, check_peers(rank, &peers, p2p_disabled)?)?;
        let n = u32::try_from(nranks)
            .map_err(|_| GpuError::InvalidArgument("too many ranks".into()))?;
        let ChannelRings {
            rings,
            p2p_blocked,
            nvls_heads,
        } = channel_rings(&mut bootstrap, &peers, opts)?;
        if let Some((a, b, kind)) = &p2p_blocked {
            log::info!(
                "weft: ranks {a} and {b} are {kind} apart, beyond NCCL_P2P_LEVEL: device data \
                 goes through SHM"
            );
        }
        let via_host = unreachable || p2p_blocked.is_some();
        // LL without a setting on P2P windows only (see gpu::protocol); every rank agreed
        // on via_host above.
        settings.protocols.ll_by_default = !via_host;
        // Ranks on several hosts: NET connections carry SIMPLE steps only (`super::net`),
        // so no connection gets an LL buffer. Every rank sees the same peers.
        let multi_host = several_hosts(&peers);
        if multi_host && settings.protocols.ll_lines > 0 {
            log::info!("weft: ranks on several hosts: LL off (NET connections carry SIMPLE only)");
            settings.protocols.ll_lines = 0;
        }
        let p2p_channels = p2p_channel_count(n, rings.len());
        let read = read_mode(&mut bootstrap, opts.p2p_read, via_host, &dev, rank, &peers)?;
        // For the INFO lines, once the NET connections are known.
        let ring_orders = rings.clone();
        let layout = Layout::new(
            rings,
            n,
            p2p_channels,
            settings.step_bytes,
            settings.protocols.ll_buffer_bytes(),
        )
        .with_read(read)
        .with_hosts(peers.iter().map(|p| p.host_hash).collect());
        let windows = Windows::open(
            &ctx,
            &mut bootstrap,
            rank,
            &peers,
            layout,
            via_host,
            &opts.settings.transport,
        )?;
        let mut faults = Faults::new(&ctx, rank, opts.timeout)?;
        let net = NetEnds::open(
            &ctx,
            &mut bootstrap,
            rank,
            &peers,
            windows.layout(),
            opts,
            faults.handle(),
        )?;
        if let Some(net) = &net {
            faults.watch_net(net.failure());
        }
        let windows = windows.with_net(net);
        let net_name = windows.net().map(|n| move |c: u32| n.describe(c));
        let connections = connection_lines(
            rank,
            &peers,
            &ring_orders,
            via_host,
            read,
            net_name.as_ref().map(|f| f as &dyn Fn(u32) -> String),
        );
        agree_on_algo(&mut bootstrap, rank, opts.algo)?;
        // The peer algorithms map every rank's memory: one host only. Across hosts the
        // one-shot runs gathered, over the connections (`Planned::Gathered`), with no region.
        let region_for = if multi_host && opts.algo == Some(GpuAlgo::OneShot) {
            if nranks > GATHERED_MAX_RANKS {
                return Err(GpuError::InvalidArgument(format!(
                    "WEFT_ALGO=oneshot across hosts runs the gathered all-reduce, which takes \
                     at most {GATHERED_MAX_RANKS} ranks; this communicator has {nranks}: \
                     unset WEFT_ALGO or use ring"
                )));
            }
            None
        } else {
            region_algo(opts.algo, via_host || multi_host, nranks)?
        };
        let region = match region_for {
            Some(algo) => {
                let site = RegionSite {
                    rank,
                    nranks,
                    dev,
                    device,
                    peers: &peers,
                    nvls_heads: &nvls_heads,
                };
                let plan = agree_on_plan(&mut bootstrap, algo, opts.algo, site, &opts.settings)?;
                Some(if plan.multicast {
                    let opt_in = weft_cuda::multicast::OptIn::from_env()?;
                    PeerRegion::open_multicast(
                        opt_in,
                        &ctx,
                        &mut bootstrap,
                        id,
                        rank,
                        nranks,
                        plan,
                        opts.timeout,
                    )?
                } else {
                    PeerRegion::open(&ctx, &mut bootstrap, rank, &peers, plan)?
                })
            }
            None => None,
        };
        let gathered = gathered_buffer(&ctx, multi_host, nranks, opts.algo)?;
        let kernels = Kernels::shared(&ctx, &opts.settings.kernels)?;
        let control = write_control(&ctx, &windows, &faults, rank, nranks, 0)?;
        let order = StreamOrder::new(ctx.clone());
        status.board.set_probe(Box::new(order.probe()));
        let comm = GpuComm {
            rank,
            nranks,
            launcher: ManuallyDrop::new(Launcher::new(kernels, control)),
            order,
            status,
            held_up_by: None,
            connections,
            ctx,
            faults: ManuallyDrop::new(faults),
            windows: ManuallyDrop::new(windows),
            bootstrap: ManuallyDrop::new(bootstrap),
            planner: Planner {
                rank,
                nranks,
                protocols: settings.protocols,
                algo: opts.algo,
                min_slices: settings.min_slices,
                region,
                gathered,
            },
        };
        comm.ready(&me.bus_id, device)
    }

    /// The last step of init: waits until every window is zeroed and mapped (before any
    /// rank's first kernel writes into one), then lets go of the SHM window's name.
    fn ready(mut self, bus_id: &str, device: usize) -> Result<GpuComm, GpuError> {
        // Every kernel the bundle holds, before any call can leave one running.
        let peer = self.planner.region.as_ref().map(|p| p.source());
        self.launcher
            .kernels()
            .preload_bundled(peer, PRELOAD_BUDGET)?;
        self.bootstrap.all_gather_for(&[], "init's last barrier")?;
        // Every peer has mapped the SHM segment by now: its name can go.
        self.windows.unlink_own();
        let protocols = self.planner.protocols;
        log::info!(
            "weft: rank {} of {} on GPU {device} ({bus_id}): {} channel(s) via {}, {} KiB FIFO \
             steps, {} KiB LL buffers, NCCL_PROTO={}, algorithm: {}",
            self.rank,
            self.nranks,
            self.windows.layout().nchannels(),
            self.transport_name(),
            self.windows.layout().step_bytes() / 1024,
            protocols.ll_buffer_bytes() / 1024,
            protocols.enable,
            describe_algorithm(
                self.planner.algo,
                self.planner.region.is_some(),
                self.nranks
            )
        );
        Ok(self)
    }
}

/// The gathered all-reduce's buffer (`Planned::Gathered`), a slot of
/// `GATHERED_FORCED_MAX_BYTES` per rank: ranks on several hosts with `WEFT_ALGO=oneshot`
/// (every rank agreed on both; init refused such a communicator of more than
/// `GATHERED_MAX_RANKS` before this).
fn gathered_buffer(
    ctx: &std::sync::Arc<Context>,
    multi_host: bool,
    nranks: usize,
    algo: Option<GpuAlgo>,
) -> Result<Option<DeviceBuffer>, GpuError> {
    if !(multi_host && algo == Some(GpuAlgo::OneShot)) {
        return Ok(None);
    }
    Ok(Some(DeviceBuffer::alloc(
        ctx,
        nranks * GATHERED_FORCED_MAX_BYTES,
    )?))
}

/// How long init may spend loading the kernel bundle's modules (init plus first all-reduce
/// went from about 0.10 s to 0.27 s on two H200 with it; see `Kernels::preload_bundled`).
const PRELOAD_BUDGET: std::time::Duration = std::time::Duration::from_secs(1);

/// Refuses ranks that chose protocols differently: they would wait on each other's ends
/// of a connection until the timeout.
fn agree_on_protocols(bootstrap: &mut Bootstrap, protocols: &GpuProtocols) -> Result<(), GpuError> {
    let mine = protocols.encode();
    let theirs = bootstrap.all_gather_for(&mine, "init's all_gather of the protocols")?;
    if let Some((q, other)) = theirs.iter().enumerate().find(|(_, o)| **o != mine) {
        return Err(GpuError::InvalidArgument(format!(
            "rank {q} runs with {}, this rank with {}: set NCCL_PROTO, NCCL_LL_BUFFSIZE and \
             NCCL_P2P_LL_THRESHOLD (or their WEFT_ names) alike on every rank",
            GpuProtocols::describe(other),
            GpuProtocols::describe(&mine)
        )));
    }
    Ok(())
}

/// Every rank's GPU record, by rank.
fn gather_peers(bootstrap: &mut Bootstrap, me: &GpuPeer) -> Result<Vec<GpuPeer>, GpuError> {
    bootstrap
        .all_gather_for(&me.encode(), "init's all_gather of the GPUs")?
        .iter()
        .enumerate()
        .map(|(r, b)| GpuPeer::decode(r, b))
        .collect()
}

/// Whether every rank answers yes (a vote every rank takes alike).
pub(super) fn every_rank(bootstrap: &mut Bootstrap, mine: bool) -> Result<bool, GpuError> {
    Ok(bootstrap
        .all_gather_for(&[u8::from(mine)], "init's all_gather of a vote")?
        .iter()
        .all(|a| a.first() == Some(&1)))
}

/// Whether P2P connections run in read mode (NCCL's P2P read: SIMPLE FIFOs in the
/// sender's memory): on device windows only, where every rank takes it, as
/// `NCCL_P2P_READ_ENABLE` (`asked`) says, else NCCL's default.
fn read_mode(
    bootstrap: &mut Bootstrap,
    asked: Option<bool>,
    via_host: bool,
    dev: &Device,
    rank: usize,
    peers: &[GpuPeer],
) -> Result<bool, GpuError> {
    let read_here = !via_host
        && match asked {
            Some(read) => read,
            None => read_by_default(dev, rank, peers),
        };
    every_rank(bootstrap, read_here)
}

/// Refuses ranks that force different algorithms (`WEFT_ALGO`), or some one and others
/// none.
fn agree_on_algo(
    bootstrap: &mut Bootstrap,
    rank: usize,
    algo: Option<GpuAlgo>,
) -> Result<(), GpuError> {
    let code = |a: Option<GpuAlgo>| a.map_or(0u8, |a| 1 + a as u8);
    let algos = bootstrap.all_gather_for(&[code(algo)], "init's all_gather of WEFT_ALGO")?;
    if let Some(q) = algos.iter().position(|a| a.first() != Some(&code(algo))) {
        return Err(GpuError::InvalidArgument(format!(
            "rank {q} and rank {rank} disagree on WEFT_ALGO (this rank: {}): set the same \
             value on every rank",
            algo.map_or("unset", GpuAlgo::name)
        )));
    }
    Ok(())
}

/// The algorithm calls run, for the init log: the forced one, or the automatic choice.
fn describe_algorithm(forced: Option<GpuAlgo>, has_region: bool, nranks: usize) -> String {
    match (forced, has_region) {
        (Some(algo), _) => format!("{algo} (WEFT_ALGO)"),
        (None, true) => {
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
        (None, false) => "ring".to_string(),
    }
}
