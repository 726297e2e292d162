//! The GPU communicator: one rank on one GPU, its P2P connections, and its collectives
//! enqueued on the caller's stream.
//!
//! Init (`setup`): bootstrap, all-gather each rank's GPU (host, process, PCI bus id),
//! check that every pair of GPUs can reach each other's memory (P2P over NVLink or PCIe),
//! build the channels' rings, allocate this rank's window ([`crate::gpu::layout`]), share
//! it (the pointer within one process, a CUDA IPC handle across processes), and write the
//! device-side description of every channel and connection (`weft_dev_comm`,
//! `weft_dev_channel`, `weft_channel_peer`, the rings) once. A collective is then one
//! kernel launch on the caller's stream, graph-capturable: its only argument is the call
//! itself.
//!
//! Nothing waits forever: kernels give up on a peer after the communicator's timeout or
//! when the abort flag (host-mapped memory) is raised, and record which peer and which wait
//! in host-mapped memory, which [`GpuComm::check`] turns into an error naming the peer.
//!
//! [`GpuComm`] is a short struct of parts, each owning what its job needs:
//!
//! - `setup`: init, step by step; `peers`: the record each rank all-gathers and what a
//!   rank concludes from everyone's; `channels`: the channels' rings, alike on every rank.
//! - `windows`: this rank's window and its peers', and where each connection end lies.
//! - `region`: the peer-pointer algorithms' memory ([`crate::gpu::peer`]), shared the
//!   same way, except for NVLS in its multicast form (`WEFT_NVLS=1` only): VMM memory bound
//!   to a multicast object whose file descriptor one rank sends to the others
//!   ([`crate::gpu::multicast`]).
//! - `control`: the device-side description the kernels read.
//! - `plan`: what a call becomes (protocol, algorithm, the kernel's work), checked before
//!   anything of its group launches.
//! - `launch`: enqueueing planned calls, consecutive ones of one kernel together.
//! - `p2p`: send/receive groups.
//! - `faults`: the abort flag, the kernels' deadline, and a kernel's fault as an error.
//! - `parting`: teardown, freeing what peers may still touch once they let go.

mod channels;
mod control;
mod faults;
mod launch;
mod net;
mod nic;
mod order;
mod p2p;
mod parting;
mod peers;
mod plan;
mod region;
mod setup;
mod windows;

use std::mem::ManuallyDrop;
use std::sync::Arc;

use weft_core::abi::{DataType, Protocol};
use weft_core::fifo::ll::{LlGeometry, LlLine};
use weft_core::sched::Collective;
use weft_cuda::{Context, Stream};

use super::error::GpuError;
use super::protocol::GpuProtocols;
use super::redop::GpuRedOp;
pub use super::redop::avg_scale_bits;
use crate::bootstrap::Bootstrap;
use crate::status::StatusView;
pub use channels::DEFAULT_CHANNELS;
pub use faults::AbortHandle;
use faults::Faults;
use launch::{Launcher, check_stream};
use order::StreamOrder;
use p2p::P2pPlan;
pub use p2p::{GpuP2p, P2P_CHANNELS, p2p_channels_for, validate_p2p_group};
pub use parting::wait_for_teardowns_at_exit;
pub use plan::{DEFAULT_MIN_SLICES, DIRECT_ALL_REDUCE_MIN_BYTES, GpuCollective, PlannedGroup};
use plan::{GatheredCall, Planned, Planner, launch_ranges};
pub use setup::{DEFAULT_STEP_BYTES, MAX_STEP_BYTES};
use windows::Windows;

/// One rank of a GPU communicator.
#[derive(Debug)]
pub struct GpuComm {
    rank: usize,
    nranks: usize,
    ctx: Arc<Context>,
    // Teardown hands the device and pinned memory (the windows, the peer region, the
    // control block, the fault page, the gathering buffer) and the bootstrap to a thread
    // that frees them once the peers let go (`parting`): peers may still touch the
    // windows, and a free waits for the whole GPU, which another communicator's kernel may
    // keep busy. Every buffer holds its own reference to the context.
    /// The kernels and the control block every launch passes them (taken by teardown
    /// only).
    launcher: ManuallyDrop<Launcher>,
    /// The abort flag, the kernels' fault records, the first failure (taken by teardown
    /// only).
    faults: ManuallyDrop<Faults>,
    /// This rank's window, its peers', and the connections' layout in them (taken by
    /// teardown only).
    windows: ManuallyDrop<Windows>,
    /// Taken by teardown only.
    bootstrap: ManuallyDrop<Bootstrap>,
    /// What calls become: protocols, algorithm, the peer region.
    planner: Planner,
    /// Launches run in call order whatever streams they come on.
    order: StreamOrder,
    /// NCCL's INFO line per ring connection this rank sends on.
    connections: Vec<String>,
    /// This rank's side of the health query: its launches (not yet its kernels' waits).
    status: StatusView,
    /// What the health query said at this rank's first deadline (asked once): the rank
    /// holding the job up, where it is neither this rank nor the one its kernel waited on.
    held_up_by: Option<Option<(usize, String)>>,
}

impl GpuComm {
    /// Tests only: restarts every connection at FIFO step `step`, as if that many steps had
    /// gone through each (and the one-/two-shot epochs of every lane at `step`): heads and
    /// tails at `step`, the kernels' step counters at `step`,
    /// every LL line flagged as written at `step - 1` (`LlGeometry::initial_flag`, zero data),
    /// direct-write counts at 0. A GPU test can then cross the LL flag's 32-bit wrap and its
    /// cleaning steps without running 2^31 steps first. Collective: every rank calls it with
    /// the same step and nothing in flight; P2P windows only (device memory).
    #[doc(hidden)]
    pub fn restart_steps_for_test(&mut self, step: u64) -> Result<(), GpuError> {
        self.faults.release_for_teardown();
        self.ctx.synchronize()?;
        self.bootstrap.barrier()?;
        let Some(buf) = self.windows.own_device_buffer() else {
            return Err(GpuError::InvalidArgument(
                "restart_steps_for_test: SHM windows are not supported".into(),
            ));
        };
        let line = LlLine::pack(0, LlGeometry::nccl(2).map_or(0, |g| g.initial_flag(step)));
        let image = self
            .windows
            .layout()
            .restart_image(self.rank as u32, step, line);
        buf.copy_from_host(&image)?;
        // The one-/two-shot epochs of every channel (lane) restart at `step` too, so that the
        // LL one-shot crosses its cleaning rounds and its 32-bit flag wrap. Stale pairs carry
        // older flags, and every call has ended. Not NVLS: its counters hold steps too.
        if let Some(region) = self.planner.region.as_ref().filter(|r| r.has_lane_epochs()) {
            region.restart_epochs(&self.ctx, self.rank, step)?;
        }
        let control = control::write_control(
            &self.ctx,
            &self.windows,
            &self.faults,
            self.rank,
            self.nranks,
            step,
        )?;
        self.launcher.set_control(control);
        self.bootstrap.barrier()?;
        Ok(())
    }

    /// Tests only: this rank's one-/two-shot epoch of every lane (channel), as its kernels
    /// left them (`peer::STEPS_AT`), after the context's work ends; empty without a
    /// one-/two-shot peer region.
    #[doc(hidden)]
    pub fn lane_epochs_for_test(&self) -> Result<Vec<u64>, GpuError> {
        let Some(region) = self.planner.region.as_ref().filter(|r| r.has_lane_epochs()) else {
            return Ok(Vec::new());
        };
        // Whatever the caller left in flight ends first.
        self.faults.release_for_teardown();
        self.ctx.synchronize()?;
        region.lane_epochs(&self.ctx, self.rank)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// "P2P" (device memory over NVLink or PCIe), "P2P/read" (the same in read mode) or
    /// "SHM" (host memory), as NCCL's `NCCL_DEBUG=INFO` names its transports.
    pub fn transport_name(&self) -> &'static str {
        self.windows.transport_name()
    }

    /// The NET backend that joins this rank to ranks of other hosts (`Socket`, `IB`, ...);
    /// `None` where every rank is on this host.
    pub fn network(&self) -> Option<String> {
        self.windows.net().map(|n| n.backend())
    }

    /// NCCL's INFO line per ring connection this rank sends on (`Channel 00/0 : 0[0] ->
    /// 1[1] via P2P/IPC/read`), for libnccl's `NCCL_DEBUG=INFO`.
    pub fn connection_lines(&self) -> &[String] {
        &self.connections
    }

    /// Whether P2P connections run in read mode (SIMPLE FIFOs in the senders' memory).
    pub fn p2p_read(&self) -> bool {
        self.windows.layout().read()
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn nchannels(&self) -> u32 {
        self.windows.layout().nchannels()
    }

    /// The ring of each channel.
    pub fn rings(&self) -> Vec<Vec<u32>> {
        let layout = self.windows.layout();
        (0..layout.nchannels())
            .map(|c| layout.ring(c).to_vec())
            .collect()
    }

    /// Bytes of one FIFO step.
    pub fn step_bytes(&self) -> usize {
        self.windows.layout().step_bytes()
    }

    /// The device's primary context (the one every buffer of this rank belongs to).
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Whether this rank's GPU reduces `dtype`: every type but fp8, which needs compute
    /// capability 8.9 or newer. Every type moves (all-gather, broadcast, send/receive)
    /// everywhere.
    pub fn can_reduce(&self, dtype: DataType) -> bool {
        self.launcher.kernels().supports(dtype)
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
        let peer = self.planner.region.as_ref().map(|p| p.source());
        self.launcher.kernels().prepare(dtypes, peer)
    }

    /// Every rank's `mine`, by rank, over the bootstrap network (control data only).
    pub fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, GpuError> {
        Ok(self.bootstrap.all_gather(mine)?)
    }

    /// `root`'s `data` to every rank of `ranks` (which must hold `root` and this rank) over
    /// the bootstrap; the other ranks take no part: what a shrink, which leaves some ranks
    /// out, agrees through.
    pub fn broadcast_among(
        &mut self,
        root: usize,
        ranks: &[usize],
        data: &[u8],
    ) -> Result<Vec<u8>, GpuError> {
        Ok(self.bootstrap.broadcast(root, ranks, data)?)
    }

    /// Waits until every rank has called it (host side only: say nothing of the streams).
    pub fn barrier(&mut self) -> Result<(), GpuError> {
        Ok(self.bootstrap.barrier()?)
    }

    /// A handle on the abort flag that needs no `&mut self`: a caller that keeps the
    /// communicator behind a lock held across blocking calls (`synchronize`, `finalize`)
    /// raises the flag through it without waiting for the lock, and the blocked call ends.
    pub fn abort_handle(&self) -> AbortHandle {
        self.faults.handle()
    }

    /// Ends what runs on this communicator and leaves it as it was, as NCCL's
    /// `NCCL_SHRINK_ABORT` does to a shrink's parent: nothing when its last launch has
    /// finished; else the abort flag goes up, the kernels leave their waits (within
    /// `drain`), and the flag and the fault records are cleared. Calls that were cut short
    /// leave the ranks' FIFOs out of step: such a communicator is for destroying, not for
    /// more collectives. An error when the kernels did not stop within `drain`.
    pub fn stop_in_flight(&mut self, drain: std::time::Duration) -> Result<(), GpuError> {
        if self.order.idle()? {
            return Ok(());
        }
        self.revoke(drain)
    }

    /// NCCL's `ncclCommRevoke`: the abort flag goes up whatever is in flight, the kernels
    /// leave their waits (within `drain`; none waits on a dead peer past its next look at
    /// the flag), then the flag and the fault records are cleared, so that the
    /// communicator reports no error of its own. What was cut short leaves the ranks'
    /// FIFOs out of step: such a communicator is for destroying, splitting or shrinking.
    /// An error when the kernels did not stop within `drain`.
    pub fn revoke(&mut self, drain: std::time::Duration) -> Result<(), GpuError> {
        self.faults.handle().raise();
        let deadline = std::time::Instant::now() + drain;
        while !self.order.idle()? {
            if std::time::Instant::now() >= deadline {
                return Err(GpuError::Aborted {
                    rank: self.rank,
                    why: format!(
                        "its kernels did not stop within {:.1} s of the abort flag",
                        drain.as_secs_f64()
                    ),
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        self.faults.clear();
        self.held_up_by = None;
        Ok(())
    }

    /// This rank's side of the health query (`crate::status`): ask every rank of the
    /// communicator what it launched last and whether it finished, from any thread.
    pub fn status(&self) -> StatusView {
        self.status.clone()
    }

    /// Makes every kernel of this communicator return at its next look at the flag, and
    /// every later call fail (NCCL's `ncclCommAbort`, without the teardown); stops the NET
    /// proxy, if any.
    pub fn abort(&mut self, why: &str) {
        self.faults.abort(why);
        if let Some(net) = self.windows.net() {
            net.abort();
        }
    }

    /// The communicator's asynchronous error (NCCL's `ncclCommGetAsyncError`): what a
    /// kernel recorded when it gave up, or the reason of an abort. At the first deadline
    /// the job's health query is asked (up to `QUERY_DEADLINE`) which rank holds the job
    /// up: a kernel that waited on a neighbour only names the neighbour, which may itself
    /// be waiting on a dead rank (a killed rank on another host made its host-mates' ring
    /// neighbours name each other, found on four H200, 2026-11-28).
    pub fn check(&mut self) -> Result<(), GpuError> {
        let err = match self.faults.check() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Where the failure began, for the others' health queries: a send/recv mismatch
        // here; a deadline or a NET failure is a symptom of a failure elsewhere.
        let here = matches!(err, GpuError::P2pMismatch { .. });
        self.status.board.failed(&err.to_string(), here);
        let GpuError::PeerTimeout { peer, .. } = &err else {
            return Err(err);
        };
        let peer = *peer;
        if self.held_up_by.is_none() {
            let report = self.status.query(crate::status::QUERY_DEADLINE);
            log::error!(
                "weft: rank {}: the job at this rank's deadline: {report}",
                self.rank
            );
            self.held_up_by = Some(
                report
                    .culprit()
                    .filter(|c| c.rank as usize != self.rank && c.rank as usize != peer)
                    .map(|c| (c.rank as usize, c.why)),
            );
        }
        match self.held_up_by.clone().flatten() {
            Some((holder, why)) => Err(GpuError::HeldUp {
                timeout: err.to_string(),
                holder,
                why,
            }),
            None => Err(err),
        }
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
        self.planner
            .protocol_for(collective, count, dtype, self.windows.layout().nchannels())
    }

    /// The time weft predicts for `call` on this communicator, in microseconds (what NCCL's
    /// `ncclGroupSimulateEnd` reports): NCCL's ring model over NVLink for its protocol and
    /// channels ([`weft_core::tune::TuningModel::nvlink`]), whichever algorithm runs it.
    pub fn predict_us(&self, call: &GpuCollective) -> Result<f64, GpuError> {
        if call.count == 0 {
            return Ok(0.0);
        }
        let nchannels = self.windows.layout().nchannels();
        let protocol = self.protocol_for(call.collective, call.count, call.dtype)?;
        let bytes = weft_core::tune::call_bytes(
            call.collective,
            call.count,
            call.dtype.size_of_elem(),
            self.nranks,
        );
        Ok(predict_ring_us(
            call.collective,
            bytes,
            self.nranks,
            nchannels,
            protocol,
        ))
    }

    /// The time weft predicts for a send or receive of `bytes`, in microseconds: one hop of
    /// the same model, on the channels and protocol the message takes.
    pub fn predict_p2p_us(&self, bytes: usize) -> f64 {
        let channels = p2p_channels_for(bytes, self.windows.layout().p2p_channels());
        let protocol = self.planner.protocols.p2p(bytes, channels);
        predict_ring_us(
            Collective::Broadcast { root: 0 },
            bytes,
            2,
            channels,
            protocol,
        )
    }

    /// The protocol settings every call chooses from (the same on every rank).
    pub fn protocols(&self) -> GpuProtocols {
        self.planner.protocols
    }

    /// The protocol a send or receive of `bytes` runs (both ends compute the same).
    pub fn p2p_protocol_for(&self, bytes: usize) -> Protocol {
        let channels = p2p_channels_for(bytes, self.windows.layout().p2p_channels());
        self.planner.protocols.p2p(bytes, channels)
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
    /// set `NCCL_P2P_DIRECT_DISABLE=1` (as with NCCL); and every rank must enqueue the same
    /// collectives in the same order. Calls may come on different streams: each launch of
    /// a communicator runs after its previous one, as NCCL's do (launches into a graph
    /// capture aside).
    /// `op` is a [`weft_core::abi::RedOp`] or a [`GpuRedOp`] (NCCL's `PreMulSum`); with a
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
        check_stream(&self.ctx, self.rank, stream)?;
        let group = self.plan_group(calls)?;
        // SAFETY: the caller's promise for every call, passed on.
        unsafe { self.launch_planned(&group, stream) }
    }

    /// Launches a planned group on `stream`, after this communicator's previous launch.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`], for every call of the group.
    unsafe fn launch_planned(
        &mut self,
        group: &PlannedGroup,
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        let captured = self.order.before_launch(stream)?;
        if let Some((op, count, dtype)) = group.first {
            self.status
                .board
                .launched(op, group.calls, count, dtype, true);
        }
        let launch_all = || -> Result<usize, GpuError> {
            let mut launches = 0;
            for range in launch_ranges(&group.planned) {
                let calls = &group.planned[range];
                launches += match calls.first() {
                    // SAFETY: the caller's promise for every call, passed on.
                    Some(Planned::Gathered(call)) => unsafe { self.launch_gathered(call, stream) },
                    // SAFETY: as above.
                    _ => unsafe { self.launcher.launch(calls, self.nchannels(), stream) },
                }?;
            }
            Ok(launches)
        };
        let launched = launch_all();
        // Marked even after a failure: an earlier launch of the group may be queued.
        let marked = self.order.after_launch(stream, captured);
        self.wake_net();
        let launches = launched?;
        marked?;
        Ok(launches)
    }

    /// Checks and plans `calls` (what [`GpuComm::collectives`] does before launching),
    /// launching nothing: libnccl plans every communicator's calls of a group before it
    /// launches any, so that a refusal never leaves a group launched on some communicators
    /// and not on others.
    pub fn plan_group(&mut self, calls: &[GpuCollective]) -> Result<PlannedGroup, GpuError> {
        self.check()?;
        let planned = calls
            .iter()
            .map(|c| self.planner.plan(c, &self.windows, &self.launcher))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PlannedGroup {
            owner: self.launcher.control_ptr(),
            planned,
            first: calls
                .first()
                .map(|c| (c.collective.name(), c.count, c.dtype.name())),
            calls: calls.len(),
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
        check_stream(&self.ctx, self.rank, stream)?;
        if group.owner != self.launcher.control_ptr() {
            return Err(GpuError::InvalidArgument(format!(
                "a group planned on another communicator given to rank {}'s",
                self.rank
            )));
        }
        // SAFETY: the caller's promise for every call, passed on.
        unsafe { self.launch_planned(group, stream) }
    }

    /// Enqueues a group of sends and receives on `stream`, run at once (NCCL's
    /// `ncclGroupStart` / `ncclSend` / `ncclRecv` / `ncclGroupEnd`). A peer takes any
    /// number of sends and receives; the n-th send to a peer meets the peer's n-th receive
    /// from this rank (call order per peer and direction, as in NCCL), which must have the
    /// same byte count. One launch, or a few for groups larger than one launch holds.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`]: each buffer is device memory valid for its bytes until
    /// the stream reaches this call's end.
    pub unsafe fn group(&mut self, ops: &[GpuP2p], stream: &Stream) -> Result<(), GpuError> {
        self.check()?;
        check_stream(&self.ctx, self.rank, stream)?;
        validate_p2p_group(self.rank, self.nranks, ops)?;
        // Everything is checked before anything is enqueued.
        let plan = P2pPlan::plan(
            self.rank,
            ops,
            self.windows.layout().p2p_channels(),
            &self.planner.protocols,
        )?;
        let captured = self.order.before_launch(stream)?;
        self.status
            .board
            .launched("send/recv group", 1, ops.len(), "operations", false);
        // SAFETY: the caller's promise, passed on.
        let launched = unsafe { self.launcher.launch_p2p(plan, stream) };
        // Marked even after a failure: a copy or an earlier launch may be queued.
        let marked = self.order.after_launch(stream, captured);
        self.wake_net();
        launched?;
        marked
    }

    /// Enqueues a gathered all-reduce ([`Planned::Gathered`]): a send/receive group that
    /// sends this rank's input to every other rank and receives theirs into the gathering
    /// buffer (every rank makes the same group, so the n-th send to a peer meets its n-th
    /// receive), then the reduction. Returns the kernel launches made.
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`] for the call's buffers.
    unsafe fn launch_gathered(
        &self,
        call: &GatheredCall,
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        let bytes = call.bytes();
        let mut ops = Vec::with_capacity(2 * self.nranks);
        for peer in (0..self.nranks).filter(|&q| q != self.rank) {
            ops.push(GpuP2p::Send {
                peer,
                buf: call.send,
                bytes,
            });
            ops.push(GpuP2p::Recv {
                peer,
                buf: call.gathered + (peer * bytes) as u64,
                bytes,
            });
        }
        let plan = P2pPlan::plan(
            self.rank,
            &ops,
            self.windows.layout().p2p_channels(),
            &self.planner.protocols,
        )?;
        let group_launches = plan.launches.len();
        // SAFETY: the caller's promise for the call's buffers; the gathering buffer holds
        // a slot of `bytes` per rank (planned only under its size) and lives as long as
        // the communicator, which waits for its launches before freeing it.
        unsafe { self.launcher.launch_p2p(plan, stream) }?;
        // SAFETY: as above; the group before it on `stream` fills the gathering buffer.
        let reductions = unsafe {
            self.launcher
                .launch_gathered(call, self.nranks, self.rank, stream)
        }?;
        Ok(group_launches + reductions)
    }

    /// Tells the NET proxy (ranks on other hosts) that a kernel was enqueued: it polls
    /// eagerly again instead of sleeping through the kernel's first steps.
    fn wake_net(&self) {
        if let Some(net) = self.windows.net() {
            net.wake();
        }
    }

    /// Waits for `stream` to finish, then reports what a kernel recorded. A healthy queue
    /// may take as long as it needs (every wait of weft's kernels has its own deadline, so
    /// the stream ends); once the abort flag is up (a kernel gave up, or `abort`), the
    /// stream gets a few seconds to drain, then this returns an error instead of waiting on
    /// whatever else holds the stream.
    pub fn synchronize(&mut self, stream: &Stream) -> Result<(), GpuError> {
        self.faults.wait_for(stream)
    }

    /// Lets this communicator's kernels that gave up end (see `faults`): for a program
    /// acting on the failure (a split or shrink of this communicator), which has heard of
    /// it. Nothing when none gave up.
    pub fn release_failed(&self) {
        self.faults.release();
    }

    /// Teardown's wait: releases every kernel of this communicator that gave up or will
    /// (finalizing or destroying is past reporting), then waits for this communicator's
    /// own launches (the last eager launch's event: launches run in call order). Not for
    /// the whole context: a kernel of another communicator on this GPU that gave up holds
    /// its stream until its own communicator hears of it (PyTorch aborts and destroys its
    /// communicators one after another). Where a launch went into a graph capture (whose
    /// replays no event of this communicator marks) or its end cannot be told, the whole
    /// context is waited for, as before.
    fn wait_for_own_work(&self) -> Result<(), GpuError> {
        self.faults.release_for_teardown();
        loop {
            match self.order.own_work_done() {
                Some(true) => return Ok(()),
                Some(false) => std::thread::sleep(std::time::Duration::from_micros(100)),
                None => return Ok(self.ctx.synchronize()?),
            }
        }
    }

    /// Ends the communicator's work: waits for this rank's own launches, and for no peer,
    /// as NCCL's finalize does (PyTorch destroys a subgroup on one rank while another rank
    /// runs on, and destroys the process group on the ranks that remain after its watchdog
    /// took one down). What peers may still write into is freed at teardown once they let
    /// go of it (`parting`).
    pub fn finalize(&mut self) -> Result<(), GpuError> {
        self.wait_for_own_work()
    }
}

/// NCCL's ring model over NVLink ([`weft_core::tune::TuningModel::nvlink`]) for one call, in
/// microseconds; LL128, which the model lacks, is costed as SIMPLE.
fn predict_ring_us(
    collective: Collective,
    bytes: usize,
    nranks: usize,
    nchannels: u32,
    protocol: Protocol,
) -> f64 {
    let protocol = match protocol {
        Protocol::Ll128 => Protocol::Simple,
        p => p,
    };
    let choice = weft_core::tune::Candidate {
        protocol,
        one_shot: false,
    };
    weft_core::tune::TuningModel::nvlink(nchannels)
        .predict_ns(
            collective,
            u64::try_from(bytes).unwrap_or(u64::MAX),
            nranks,
            choice,
        )
        .map_or(0.0, |ns| ns as f64 / 1000.0)
}

impl Drop for GpuComm {
    fn drop(&mut self) {
        // Kernels still running would write into freed memory: let them end (their waits
        // end at the timeout at the latest; one that gave up is released now).
        if let Err(e) = self.wait_for_own_work() {
            // `e` names the rank.
            log::warn!("weft: synchronizing before teardown failed: {e}");
        }
        // SAFETY: taken once, here in drop; the field is not used after.
        let windows = unsafe { ManuallyDrop::take(&mut self.windows) };
        // SAFETY: as above.
        let bootstrap = unsafe { ManuallyDrop::take(&mut self.bootstrap) };
        // SAFETY: as above.
        let launcher = unsafe { ManuallyDrop::take(&mut self.launcher) };
        // SAFETY: as above.
        let faults = unsafe { ManuallyDrop::take(&mut self.faults) };
        let memory = (
            windows,
            self.planner.region.take(),
            launcher,
            faults,
            self.planner.gathered.take(),
        );
        parting::free_once_peers_part(bootstrap, self.rank, memory);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use weft_core::abi::RedOp;

    #[test]
    fn predictions_follow_nccls_ring_model() {
        // 8 bytes over two ranks in LL: NCCL's base latency 6.6 us, two hops of 0.6 us.
        let small = predict_ring_us(Collective::AllReduce, 8, 2, 16, Protocol::Ll);
        assert!((small - 7.8).abs() < 0.01, "{small}");
        // 1 GiB in SIMPLE over 16 channels (320 GB/s bus): about 3.4 ms, and more with fewer.
        let big = predict_ring_us(Collective::AllReduce, 1 << 30, 2, 16, Protocol::Simple);
        assert!(big > 3000.0 && big < 3500.0, "{big}");
        assert!(predict_ring_us(Collective::AllReduce, 1 << 30, 2, 4, Protocol::Simple) > big);
        assert_eq!(
            predict_ring_us(Collective::AllReduce, 1 << 20, 4, 8, Protocol::Ll128),
            predict_ring_us(Collective::AllReduce, 1 << 20, 4, 8, Protocol::Simple)
        );
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
