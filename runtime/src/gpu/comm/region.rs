//! The peer region: the memory of the peer-pointer algorithms (one-shot, two-shot, NVLS;
//! [`crate::gpu::peer`]), which every rank maps from every other, chosen and planned at
//! init alike on every rank.
//!
//! It is shared as the windows are (the pointer within one process, a CUDA IPC handle
//! across processes), except for NVLS in its multicast form (`WEFT_NVLS=1` only): VMM
//! memory bound to a multicast object whose file descriptor one rank sends to the others
//! ([`crate::gpu::multicast`]).

use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use weft_core::abi::{MAX_CHANNELS, PEER_MAX_RANKS};
use weft_core::algo::GpuAlgo;
use weft_cuda::{Context, Device, DeviceBuffer, Stream};

use super::peers::GpuPeer;
use super::windows::{PeerWindow, Window};
use crate::bootstrap::{Bootstrap, UniqueId};
use crate::config::Settings;
use crate::gpu::GpuError;
use crate::gpu::kernels::PeerSource;
use crate::gpu::multicast::{MulticastRegion, NvlsForm};
use crate::gpu::peer::{RegionPlan, STEPS_AT};

/// Every rank's peer region as mapped here.
#[derive(Debug)]
pub(super) struct PeerRegion {
    pub(super) plan: RegionPlan,
    /// Index r: rank r's region here (the multicast form: 0 but for this rank's own).
    pub(super) ptrs: Vec<u64>,
    /// The multicast form: the object's address here.
    pub(super) mc_base: Option<u64>,
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

/// The algorithm whose peer region init opens: the one `WEFT_ALGO` forces (`forced`), or,
/// unforced, the automatic choice's one-shot all-reduce wherever every rank maps every
/// other's memory (weft_core::algo::Chooser). `WEFT_ALGO=ring` goes without; a forced
/// peer-pointer algorithm over SHM windows (`via_host`) is refused.
pub(super) fn region_algo(
    forced: Option<GpuAlgo>,
    via_host: bool,
    nranks: usize,
) -> Result<Option<GpuAlgo>, GpuError> {
    Ok(match forced {
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
    })
}

/// Where the region is planned: this rank, its GPU, and every rank's.
#[derive(Debug, Clone, Copy)]
pub(super) struct RegionSite<'a> {
    pub(super) rank: usize,
    pub(super) nranks: usize,
    /// This rank's GPU and its CUDA ordinal.
    pub(super) dev: Device,
    pub(super) device: usize,
    pub(super) peers: &'a [GpuPeer],
    /// The NVLS search's heads (empty: it did not run or found none).
    pub(super) nvls_heads: &'a [u32],
}

/// `algo`'s region as planned on this rank from `settings` (the window, NVLS's channels
/// and chunks, the kernels' threads, the NVLS form), checked equal to every rank's plan.
/// `forced` is what `WEFT_ALGO` set (for the errors). Collective: every rank calls it.
pub(super) fn agree_on_plan(
    bootstrap: &mut Bootstrap,
    algo: GpuAlgo,
    forced: Option<GpuAlgo>,
    site: RegionSite<'_>,
    settings: &Settings,
) -> Result<RegionPlan, GpuError> {
    let RegionSite {
        rank,
        nranks,
        dev,
        device,
        peers,
        nvls_heads,
    } = site;
    let setting = |algo: GpuAlgo| match forced {
        Some(_) => format!("WEFT_ALGO={algo}"),
        None => "the automatic one-shot all-reduce (WEFT_ALGO=ring goes without)".to_string(),
    };
    // NVLS runs its multicast form only with the opt-in (WEFT_NVLS=1), and refuses
    // WEFT_NVLS=1 under NCCL_NVLS_ENABLE=0 rather than quietly run the other form; every
    // rank must choose alike (compared with the plan below).
    let form = if algo == GpuAlgo::Nvls {
        crate::gpu::multicast::nvls_form_of(&settings.gpu).map_err(GpuError::InvalidArgument)?
    } else {
        NvlsForm::Unicast
    };
    // At init rather than at the first call's NVRTC compile.
    if algo == GpuAlgo::Nvls {
        crate::gpu::kernels::check_peer_threads(PeerSource::Nvls, settings.kernels.threads)?;
    }
    let (major, minor) = dev.compute_capability()?;
    let mut plan =
        RegionPlan::for_settings(algo, nranks, nvls_heads, major * 10 + minor, settings)?;
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
        crate::gpu::multicast::ranks_sharing_a_gpu(&bus_ids),
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
    // Each rank planned from its own settings and GPU: a rank with a larger plan
    // would write past a smaller peer's region. Refuse any difference.
    let plans =
        bootstrap.all_gather_for(&plan.encode(), "init's all_gather of the peer region plans")?;
    if let Some((q, why)) = crate::gpu::peer::first_disagreement(&plans, |p| plan.mismatch(p)) {
        return Err(GpuError::InvalidArgument(format!(
            "{}: rank {q}'s peer region differs from rank {rank}'s in {why}: set it \
             alike on every rank",
            setting(algo)
        )));
    }
    Ok(plan)
}

impl PeerRegion {
    /// Allocates this rank's region (zeroed), shares it, and maps every peer's.
    /// Collective: every rank calls it with the same plan.
    pub(super) fn open(
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        rank: usize,
        peers: &[GpuPeer],
        plan: RegionPlan,
    ) -> Result<PeerRegion, GpuError> {
        let window = Window::device(ctx, plan.bytes as usize)?;
        let records =
            bootstrap.all_gather_for(&window.record()?, "init's all_gather of the peer regions")?;
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
    /// multicast object ([`crate::gpu::multicast`]). Collective, like [`PeerRegion::open`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open_multicast(
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

    /// The kernels that run on it: `nvls.cu` for NVLS, `direct.cu` for one-/two-shot.
    pub(super) fn source(&self) -> PeerSource {
        if self.plan.nvls.is_some() {
            PeerSource::Nvls
        } else {
            PeerSource::Direct
        }
    }

    /// Whether it is a one-/two-shot region, whose lanes keep epochs at `STEPS_AT`.
    pub(super) fn has_lane_epochs(&self) -> bool {
        self.plan.nvls.is_none()
    }

    /// Tests only: sets this rank's epoch of every lane to `step`; nothing may be in
    /// flight.
    pub(super) fn restart_epochs(
        &self,
        ctx: &Arc<Context>,
        rank: usize,
        step: u64,
    ) -> Result<(), GpuError> {
        let epochs: Vec<u8> = (0..MAX_CHANNELS).flat_map(|_| step.to_ne_bytes()).collect();
        let staged = DeviceBuffer::alloc(ctx, epochs.len())?;
        staged.copy_from_host(&epochs)?;
        let stream = Stream::new(ctx)?;
        let own = self.ptrs.get(rank).copied().unwrap_or(0) + STEPS_AT;
        // SAFETY: the region holds MAX_CHANNELS epochs at STEPS_AT; both buffers live
        // past the synchronize below.
        unsafe { weft_cuda::copy_async(own, staged.ptr(), epochs.len(), &stream)? };
        stream.synchronize()?;
        Ok(())
    }

    /// Tests only: this rank's epoch of every lane, as its kernels left them; the
    /// context's work must have ended.
    pub(super) fn lane_epochs(
        &self,
        ctx: &Arc<Context>,
        rank: usize,
    ) -> Result<Vec<u64>, GpuError> {
        let bytes = MAX_CHANNELS as usize * size_of::<u64>();
        let staged = DeviceBuffer::alloc(ctx, bytes)?;
        let stream = Stream::new(ctx)?;
        let own = self.ptrs.get(rank).copied().unwrap_or(0) + STEPS_AT;
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
}
