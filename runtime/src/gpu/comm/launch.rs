//! Launching: enqueueing planned calls on the caller's stream, consecutive calls of one
//! kernel function in one launch ([`crate::gpu::batch`]), and the kernel of a
//! point-to-point group. Every launch passes the control block's address; a launch's only
//! argument is the call itself, so it is graph-capturable.

use std::sync::Arc;

use weft_core::abi::{
    COLL_BATCH_MAX, DataType, KernelArgs, P2pArgs, PEER_BATCH_MAX, PeerBatch, PeerWork,
};
use weft_cuda::{Context, DeviceBuffer, Stream};

use super::p2p::P2pPlan;
use super::plan::{GatheredCall, Planned, lane_los};
use crate::gpu::GpuError;
use crate::gpu::batch;
use crate::gpu::kernels::{Kernels, PeerSource};

/// This rank's kernels and the control block every launch of them reads.
#[derive(Debug)]
pub(super) struct Launcher {
    /// Shared with the other communicators of the context (`Kernels::shared`).
    kernels: Arc<Kernels>,
    /// The device-side description (`DevComm` at 0), updated by kernels (FIFO steps).
    control: DeviceBuffer,
}

/// A stream of another GPU's context would launch the kernels there.
pub(super) fn check_stream(ctx: &Context, rank: usize, stream: &Stream) -> Result<(), GpuError> {
    if stream.context().raw() == ctx.raw() {
        return Ok(());
    }
    Err(GpuError::InvalidArgument(format!(
        "a stream of GPU {} given to rank {}'s communicator on GPU {}",
        stream.context().device().ordinal(),
        rank,
        ctx.device().ordinal()
    )))
}

impl Launcher {
    pub(super) fn new(kernels: Arc<Kernels>, control: DeviceBuffer) -> Launcher {
        Launcher { kernels, control }
    }

    pub(super) fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The control block's device address (the kernels' `comm` argument).
    pub(super) fn control_ptr(&self) -> u64 {
        self.control.ptr()
    }

    /// Replaces the control block (tests that restart the FIFO steps).
    pub(super) fn set_control(&mut self, control: DeviceBuffer) {
        self.control = control;
    }

    /// Launches `planned` (calls [`batch::launches`] put together: one call, or several of
    /// one fuse key) on `stream`. Returns the kernel launches made (0 or 1).
    ///
    /// # Safety
    ///
    /// As [`GpuComm::collective`](super::GpuComm::collective), for every call.
    pub(super) unsafe fn launch(
        &self,
        planned: &[Planned],
        nchannels: u32,
        stream: &Stream,
    ) -> Result<usize, GpuError> {
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
            // Its send/receive group is the communicator's to plan (GpuComm::launch_gathered).
            Some(Planned::Gathered(_)) => Err(GpuError::InvalidArgument(
                "internal: a gathered all-reduce launched without its group".to_string(),
            )),
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
                for (w, lo) in args.works[..n]
                    .iter_mut()
                    .zip(batch::spread(&counts, nchannels))
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
                // block and windows live as long as the communicator, which synchronizes
                // before freeing them.
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
                ..
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
                    // regions live as long as the communicator.
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
                for (w, lo) in batch.works[..n].iter_mut().zip(lane_los(planned)) {
                    w.lane_lo = lo;
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
                // regions live as long as the communicator.
                unsafe {
                    kernels
                        .get(op)
                        .launch(grid, block, 0, stream, &mut params)?
                };
                Ok(1)
            }
        }
    }

    /// Enqueues the reduction of a gathered all-reduce whose send/receive group is already
    /// on `stream` (rank `rank` of `nranks`). Returns the kernel launches made (1).
    ///
    /// # Safety
    ///
    /// `call`'s buffers are device memory valid for its bytes (the gathering buffer for
    /// `nranks` of them) until the stream reaches this launch's end.
    pub(super) unsafe fn launch_gathered(
        &self,
        call: &GatheredCall,
        nranks: usize,
        rank: usize,
        stream: &Stream,
    ) -> Result<usize, GpuError> {
        let kernels = self.kernels.get(call.module)?;
        let threads = kernels.threads();
        let count = call.count as u64;
        // Enough blocks for one element per thread, at most 64 (the calls are small).
        let blocks = count.div_ceil(u64::from(threads)).clamp(1, 64) as u32;
        let (mut out, mut own, mut gathered, mut count) =
            (call.recv, call.send, call.gathered, count);
        let (mut arg, mut flags) = (call.red.arg, call.red.flags);
        let (mut n, mut me) = (nranks as u32, rank as u32);
        let mut params = [
            (&mut out as *mut u64).cast::<core::ffi::c_void>(),
            (&mut own as *mut u64).cast(),
            (&mut gathered as *mut u64).cast(),
            (&mut count as *mut u64).cast(),
            (&mut arg as *mut u64).cast(),
            (&mut flags as *mut u32).cast(),
            (&mut n as *mut u32).cast(),
            (&mut me as *mut u32).cast(),
        ];
        // SAFETY: `weft_gathered_*` takes exactly these eight scalars (u64 x 5, u32 x 3, in
        // this order), each pointed to by `params` for the call; the buffers are the
        // caller's promise.
        unsafe {
            kernels.gathered(call.red.op).launch(
                (blocks, 1, 1),
                (threads, 1, 1),
                0,
                stream,
                &mut params,
            )?;
        }
        Ok(1)
    }

    /// Enqueues a planned point-to-point group: its copies to this rank, then its launches
    /// of the send/receive kernel (none when nothing goes to or comes from another rank).
    ///
    /// # Safety
    ///
    /// As [`GpuComm::group`](super::GpuComm::group): each buffer is device memory valid
    /// for its bytes until the stream reaches this call's end.
    pub(super) unsafe fn launch_p2p(&self, plan: P2pPlan, stream: &Stream) -> Result<(), GpuError> {
        // A rank's message to itself is a copy on the stream.
        for (dst, src, n) in plan.copies {
            // SAFETY: both are the caller's device buffers of `n` bytes.
            unsafe { weft_cuda::copy_async(dst, src, n, stream)? };
        }
        for mut launch in plan.launches {
            launch.args.comm = self.control.ptr();
            // Every op of this launch runs on one dtype-independent kernel; the uint8
            // module is as good as any.
            let kernels = self.kernels.get(DataType::Uint8)?;
            let mut params = [(&mut launch.args as *mut P2pArgs).cast::<core::ffi::c_void>()];
            // SAFETY: the kernel takes one `weft_p2p_args` by value; buffers as promised.
            unsafe {
                kernels.p2p().launch(
                    (launch.blocks, 1, 1),
                    (kernels.threads(), 1, 1),
                    0,
                    stream,
                    &mut params,
                )?;
            }
        }
        Ok(())
    }
}
