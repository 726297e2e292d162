//! Planning: what a collective call becomes on this communicator (nothing, a copy, a work
//! of the ring kernel, or a work of a peer-pointer kernel), checked before anything of its
//! group is launched; and which calls may share a launch.

use std::ops::Range;

use weft_core::abi::{
    Algorithm, COLL_BATCH_MAX, CollKind, CollWork, DataType, PEER_ALGO_ONE_SHOT,
    PEER_ALGO_TWO_SHOT, PEER_BATCH_MAX, PEER_LANES, PeerWork, Protocol, RedOp,
};
use weft_core::algo::{Call, GpuAlgo, PeerCaps};
use weft_core::sched::{ChunkSizing, Collective, channels_for};
use weft_cuda::DeviceBuffer;

use super::launch::Launcher;
use super::region::PeerRegion;
use super::windows::Windows;
use crate::gpu::kernels::PeerSource;
use crate::gpu::protocol::GpuProtocols;
use crate::gpu::redop::{GpuRedOp, KernelRedOp};
use crate::gpu::{GpuError, batch};

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

/// With `WEFT_ALGO=oneshot` across hosts, all-reduces of up to this many bytes per rank run
/// gathered (see [`Planned::Gathered`]; the gathering buffer holds as many per rank). Never
/// unasked: on two H200 as two hosts (2026-11-28, PyTorch, one call) it took 62.7 / 58.2 /
/// 97.0 / 154.8 us at 8 B / 1 KiB / 16 KiB / 64 KiB where the ring took 33.5 / 39.0 / 43.8
/// / 75.9: its one network hop is a send/receive group's, and a group across hosts took
/// about twice the ring's two hops (not understood yet). Four ranks over two hosts, where
/// the ring makes six hops, have not measured it.
pub const GATHERED_FORCED_MAX_BYTES: usize = 256 << 10;
/// The most ranks a gathered all-reduce takes: each rank sends its input to every other
/// and keeps a slot of the gathering buffer per rank.
pub const GATHERED_MAX_RANKS: usize = 8;

/// Whether an all-reduce of `bytes` per rank runs gathered on a communicator across hosts
/// that has a gathering buffer, under `WEFT_ALGO` `algo` (only `oneshot` asks for it):
/// `Err` for a call the buffer cannot hold, and for PreMulSum, whose scalar is the owner's
/// (a rank reducing another's input would apply its own).
pub(super) fn runs_gathered(
    algo: Option<GpuAlgo>,
    bytes: usize,
    premul: bool,
) -> Result<bool, String> {
    match algo {
        Some(GpuAlgo::OneShot) if premul => Err(
            "WEFT_ALGO=oneshot across hosts gathers every rank's input and reduces it on each \
             rank, which PreMulSum (a scalar per rank) cannot; unset WEFT_ALGO"
                .to_string(),
        ),
        Some(GpuAlgo::OneShot) if bytes > GATHERED_FORCED_MAX_BYTES => Err(format!(
            "WEFT_ALGO=oneshot across hosts gathers at most {} KiB per rank; this all-reduce \
             has {bytes} bytes: unset WEFT_ALGO or use ring",
            GATHERED_FORCED_MAX_BYTES >> 10
        )),
        Some(GpuAlgo::OneShot) => Ok(true),
        _ => Ok(false),
    }
}

/// One collective of a group ([`GpuComm::collectives`](super::GpuComm::collectives)): the
/// arguments of [`GpuComm::collective`](super::GpuComm::collective).
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
/// [`GpuComm::launch_group`](super::GpuComm::launch_group) on that communicator.
#[derive(Debug)]
pub struct PlannedGroup {
    /// The communicator's control block address: a group launched on another is refused.
    pub(super) owner: u64,
    pub(super) planned: Vec<Planned>,
    /// What the health query shows while it runs: the first call's collective, count and
    /// type, and how many calls the group holds.
    pub(super) first: Option<(&'static str, usize, &'static str)>,
    pub(super) calls: usize,
}

/// The calls of `planned` that share a launch ([`batch::launches`] over their fuse keys).
pub(super) fn launch_ranges(planned: &[Planned]) -> Vec<Range<usize>> {
    let keys: Vec<Option<FuseKey>> = planned.iter().map(Planned::fuse_key).collect();
    batch::launches(&keys, |k| match k {
        FuseKey::Ring { .. } => COLL_BATCH_MAX,
        FuseKey::Direct { .. } => PEER_BATCH_MAX,
    })
}

/// The first lane of each call of one launch (a range of [`launch_ranges`]): the LL
/// one-shot's calls side by side over the lanes ([`batch::spread`]), so that a group's small
/// all-reduces run at once; 0 for every other call.
pub(super) fn lane_los(launch: &[Planned]) -> Vec<u32> {
    let spread_channels = |p: &Planned| match *p {
        Planned::Peer {
            work, spread: true, ..
        } => Some(work.nchannels),
        _ => None,
    };
    let counts: Vec<u32> = launch
        .iter()
        .map(|p| spread_channels(p).unwrap_or(0))
        .collect();
    let los = batch::spread(&counts, PEER_LANES);
    launch
        .iter()
        .zip(los)
        .map(|(p, lo)| if spread_channels(p).is_some() { lo } else { 0 })
        .collect()
}

impl PlannedGroup {
    /// What each call became, in call order, for libnccl's `NCCL_DEBUG_SUBSYS=COLL` lines:
    /// the kernel (or copy), protocol or algorithm, channels, and which launch it shares
    /// with its neighbours. Every rank must make the same of matching calls: comparing
    /// these lines across ranks is how a desync shows (issue 27's DDP join run).
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.planned.len());
        for range in launch_ranges(&self.planned) {
            let n = range.len();
            let los = lane_los(&self.planned[range.clone()]);
            for (k, p) in self.planned[range].iter().enumerate() {
                let what = match *p {
                    Planned::Nothing => "nothing".to_string(),
                    Planned::Copy { bytes, .. } => format!("copy of {bytes} bytes"),
                    Planned::Gathered(g) => format!(
                        "gathered across hosts (a send/recv group of {} bytes per peer, then \
                         the reduction)",
                        g.bytes()
                    ),
                    Planned::Ring { protocol, work, .. } => format!(
                        "ring {protocol:?}, {} channel(s), chunk {} bytes",
                        work.channel_count, work.chunk_size
                    ),
                    Planned::Peer { source, work, .. } => {
                        let algo = match work.algorithm {
                            PEER_ALGO_ONE_SHOT => "one-shot",
                            PEER_ALGO_TWO_SHOT => "two-shot",
                            _ => "nvls",
                        };
                        let lo = los[k];
                        format!("{algo} ({source:?}), lanes {lo}..{}", lo + work.nchannels)
                    }
                };
                out.push(if n > 1 {
                    format!("{what}, call {} of {n} in one launch", k + 1)
                } else {
                    what
                });
            }
        }
        out
    }
}

/// What a collective becomes on a communicator, before anything is launched.
#[derive(Debug, Clone, Copy)]
pub(super) enum Planned {
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
    /// An all-reduce across hosts, gathered: a send/receive group (this rank's input to
    /// every other rank, theirs into the gathering buffer), then every rank reduces all the
    /// inputs in rank order (`collectives.cu`'s `weft_gathered_*`). One network hop where
    /// the ring takes 2(n-1): NCCL's tree takes two (up, then down).
    Gathered(GatheredCall),
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

/// A gathered all-reduce ([`Planned::Gathered`]) as planned.
#[derive(Debug, Clone, Copy)]
pub(super) struct GatheredCall {
    pub(super) module: DataType,
    pub(super) send: u64,
    pub(super) recv: u64,
    pub(super) count: usize,
    /// The gathering buffer: rank r's input at `r * count` elements.
    pub(super) gathered: u64,
    pub(super) red: KernelRedOp,
}

impl GatheredCall {
    pub(super) fn bytes(&self) -> usize {
        self.count * self.module.size_of_elem()
    }
}

/// Calls with equal keys may share a launch ([`crate::gpu::batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FuseKey {
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
    pub(super) fn fuse_key(&self) -> Option<FuseKey> {
        match *self {
            // Two launches of its own (a group, then the reduction).
            Planned::Nothing | Planned::Copy { .. } | Planned::Gathered(_) => None,
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

/// How one rank's calls are planned: the protocol and algorithm choice, the settings every
/// rank agreed on at init, and the peer-pointer algorithms' memory.
#[derive(Debug)]
pub(super) struct Planner {
    pub(super) rank: usize,
    pub(super) nranks: usize,
    /// How calls choose LL or SIMPLE (every rank has the same, checked at init).
    pub(super) protocols: GpuProtocols,
    /// The algorithm `WEFT_ALGO` forces (the same on every rank, checked at init).
    pub(super) algo: Option<GpuAlgo>,
    /// `CollWork::min_slices` of SIMPLE ring calls (every rank has the same, checked at init).
    pub(super) min_slices: u32,
    /// The peer-pointer algorithms' memory, when `algo` is one of them (or, unforced, for
    /// the automatic one-shot).
    pub(super) region: Option<PeerRegion>,
    /// The gathered all-reduce's buffer ([`Planned::Gathered`]): ranks on several hosts,
    /// at most [`GATHERED_MAX_RANKS`], `WEFT_ALGO=oneshot`.
    pub(super) gathered: Option<DeviceBuffer>,
}

impl Planner {
    /// The protocol a call of `collective` on `count` elements of `dtype` runs over
    /// `nchannels` channels (LL or SIMPLE; see [`crate::gpu::protocol`]), the same on every
    /// rank; an error when the protocol settings leave none the kernels can run.
    pub(super) fn protocol_for(
        &self,
        collective: Collective,
        count: usize,
        dtype: DataType,
        nchannels: u32,
    ) -> Result<Protocol, GpuError> {
        let bytes =
            weft_core::tune::call_bytes(collective, count, dtype.size_of_elem(), self.nranks);
        self.protocols
            .choose(
                collective,
                u64::try_from(bytes).unwrap_or(u64::MAX),
                self.nranks,
                nchannels,
            )
            .map_err(GpuError::InvalidArgument)
    }

    /// What `call` becomes over `windows`' connections with `launcher`'s kernels, checked,
    /// without launching anything.
    pub(super) fn plan(
        &self,
        call: &GpuCollective,
        windows: &Windows,
        launcher: &Launcher,
    ) -> Result<Planned, GpuError> {
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
        let layout = windows.layout();
        let kernels = launcher.kernels();
        let esize = dtype.size_of_elem();
        let protocol = self.protocol_for(collective, count, dtype, layout.nchannels())?;
        let sizing = match protocol {
            // NCCL's LL ring: one step's payload per chunk and slice.
            Protocol::Ll => ChunkSizing::one_step(self.protocols.ll_step_data_bytes(), esize),
            _ => ChunkSizing::new(collective, layout.fifo_bytes(), esize),
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
            layout.nchannels(),
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
        if self.nranks == 1 && !changes_data && (!collective.reduces() || kernels.supports(dtype)) {
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
        if let (CollKind::AllReduce, Some(buffer)) = (coll, &self.gathered)
            && runs_gathered(self.algo, count * esize, changes_data)
                .map_err(GpuError::InvalidArgument)?
        {
            kernels.check_supported(dtype)?;
            return Ok(Planned::Gathered(GatheredCall {
                module: dtype,
                send,
                recv,
                count,
                gathered: buffer.ptr(),
                red,
            }));
        }
        let caps = PeerCaps {
            peer_mapped: self.region.is_some(),
            nvls_heads: self.region.as_ref().is_some_and(|p| p.plan.nvls.is_some()),
        };
        let algo = self
            .protocols
            .chooser(self.algo, layout.nchannels(), caps)
            .algorithm(&Call::new(collective, count, esize, self.nranks))
            .map_err(|e| GpuError::InvalidArgument(e.to_string()))?
            .unwrap_or(GpuAlgo::Ring); // None: the tuner's, always the ring on the GPU
        if algo != GpuAlgo::Ring {
            let call = PeerCall {
                algo,
                coll,
                send,
                recv,
                count,
                dtype,
                red,
            };
            return self.plan_peer(call, launcher);
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
                windows.direct()
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
        kernels.check_supported(module)?;
        Ok(Planned::Ring {
            module,
            op: red.op,
            protocol,
            work,
        })
    }

    /// A collective of the peer-pointer algorithm this communicator was set to
    /// (`WEFT_ALGO`) or chose: a work of `direct.cu` or `nvls.cu` (see
    /// [`crate::gpu::peer`]).
    fn plan_peer(&self, call: PeerCall, launcher: &Launcher) -> Result<Planned, GpuError> {
        let PeerCall {
            algo,
            coll,
            send,
            recv,
            count,
            dtype,
            red,
        } = call;
        let Some(region) = &self.region else {
            return Err(GpuError::InvalidArgument(
                "no peer region: this communicator has none (WEFT_ALGO=ring, SHM windows, one \
                 rank, or more than 8 ranks)"
                    .to_string(),
            ));
        };
        let plan = &region.plan;
        let source = region.source();
        // An all-gather only moves bytes: fp8 runs the uint8 module (as on the ring).
        let module = if dtype.is_fp8() && coll == CollKind::AllGather {
            DataType::Uint8
        } else {
            dtype
        };
        launcher.kernels().check_supported(module)?;
        let nchannels = plan.channels(algo, count, dtype, self.nranks);
        let mut work = plan.work(
            algo,
            launcher.control_ptr(),
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
}

/// A call the peer-pointer algorithm `algo` runs, as [`Planner::plan`] read it.
#[derive(Debug, Clone, Copy)]
struct PeerCall {
    algo: GpuAlgo,
    coll: CollKind,
    send: u64,
    recv: u64,
    count: usize,
    dtype: DataType,
    red: KernelRedOp,
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn all_reduces_across_hosts_gather_only_when_asked() {
        // Unforced: never (measured slower than the ring on two hosts).
        assert_eq!(runs_gathered(None, 8, false), Ok(false));
        assert_eq!(runs_gathered(None, 8, true), Ok(false));
        // WEFT_ALGO=ring (or twoshot, nvls: refused elsewhere across hosts): never.
        assert_eq!(runs_gathered(Some(GpuAlgo::Ring), 8, false), Ok(false));
        // WEFT_ALGO=oneshot: up to the buffer's slot, and the refusals name the setting.
        assert_eq!(
            runs_gathered(Some(GpuAlgo::OneShot), GATHERED_FORCED_MAX_BYTES, false),
            Ok(true)
        );
        let too_big = runs_gathered(Some(GpuAlgo::OneShot), GATHERED_FORCED_MAX_BYTES + 1, false)
            .unwrap_err();
        assert!(
            too_big.contains("WEFT_ALGO=oneshot") && too_big.contains("256 KiB"),
            "{too_big}"
        );
        let premul = runs_gathered(Some(GpuAlgo::OneShot), 8, true).unwrap_err();
        assert!(premul.contains("PreMulSum"), "{premul}");
    }
}
