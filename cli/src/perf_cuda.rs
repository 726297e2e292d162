//! `weft perf --device cuda`: the same measurement on device memory, through weft's GPU
//! communicator ([`weft_runtime::gpu::GpuComm`]).
//!
//! The host side fills and checks exactly as on the CPU (`weft_verify`): the input is
//! filled on the host and copied to the GPU, the output is poisoned (0xa5) on the GPU before
//! each checked call and copied back to be checked element by element. Timing uses CUDA
//! events around `iters` calls enqueued back to back on one stream, as nccl-tests does.

use std::sync::Arc;

use weft_core::abi::{DataType, RedOp};
use weft_core::sched::Collective;
use weft_cuda::{Context, DeviceBuffer, Event, Stream};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::comm::CommOptions;
use weft_runtime::gpu::{GpuComm, GpuError, GpuP2p};

/// Where a call's input and output are: out of place, the input is the send buffer; in
/// place, both are in the receive buffer (NCCL's layout: an all-gather's input is this
/// rank's block of the output, a reduce-scatter's output this rank's block of the input).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub in_place: bool,
    /// Bytes into the receive buffer where an in-place input starts.
    pub in_offset: usize,
    /// Bytes into the receive buffer where the output starts.
    pub out_offset: usize,
}

/// One rank's GPU state: communicator, stream, buffers, timing events.
pub struct CudaRank {
    pub comm: GpuComm,
    pub stream: Stream,
    pub send: DeviceBuffer,
    pub recv: DeviceBuffer,
    /// A copy of the message for in-place send/recv (sending from the buffer being received into).
    pub staged: DeviceBuffer,
    start: Event,
    stop: Event,
    pub device: usize,
    pub name: String,
    pub bus_id: String,
}

impl std::fmt::Debug for CudaRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaRank(rank {}, GPU {})",
            self.comm.rank(),
            self.device
        )
    }
}

/// The GPU a rank of this host uses: the launcher's local rank if it says one, else the rank,
/// modulo the GPUs this process sees.
pub fn device_for(rank: usize, local_rank: Option<usize>) -> Result<usize, GpuError> {
    let count = weft_cuda::device_count()?;
    if count == 0 {
        return Err(GpuError::InvalidArgument(
            "--device cuda: no GPU is visible in this process (CUDA_VISIBLE_DEVICES?)".to_string(),
        ));
    }
    Ok(local_rank.unwrap_or(rank) % count)
}

/// The number of GPUs this process sees (the default rank count of a local run).
pub fn gpu_count() -> Result<usize, GpuError> {
    Ok(weft_cuda::device_count()?)
}

impl CudaRank {
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        device: usize,
        opts: &CommOptions,
        max_bytes: usize,
        staged: bool,
    ) -> Result<CudaRank, GpuError> {
        let comm = GpuComm::init(id, rank, nranks, device, opts)?;
        let ctx: Arc<Context> = comm.context().clone();
        let dev = ctx.device();
        Ok(CudaRank {
            stream: Stream::new(&ctx)?,
            send: DeviceBuffer::alloc(&ctx, max_bytes.max(16))?,
            recv: DeviceBuffer::alloc(&ctx, max_bytes.max(16))?,
            staged: DeviceBuffer::alloc(&ctx, if staged { max_bytes.max(16) } else { 16 })?,
            start: Event::new(&ctx, true)?,
            stop: Event::new(&ctx, true)?,
            device,
            name: dev.name()?,
            bus_id: dev.pci_bus_id()?,
            comm,
        })
    }

    /// Copies the host's input and (poisoned) output into the device buffers.
    pub fn upload(&self, send: &[u8], recv: &[u8]) -> Result<(), GpuError> {
        self.send.copy_from_host(send)?;
        self.recv.copy_from_host(recv)?;
        Ok(())
    }

    /// Copies the device's output back.
    pub fn download(&self, recv: &mut [u8]) -> Result<(), GpuError> {
        self.recv.copy_to_host(recv)?;
        Ok(())
    }

    /// Enqueues one call (`collective`, or a send to the next rank and a receive from the
    /// previous one when `None`).
    pub fn enqueue(
        &mut self,
        collective: Option<Collective>,
        place: Placement,
        count: usize,
        in_bytes: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), GpuError> {
        let recv = self.recv.ptr() + place.out_offset as u64;
        let send = if place.in_place {
            self.recv.ptr() + place.in_offset as u64
        } else {
            self.send.ptr()
        };
        match collective {
            // SAFETY: both buffers hold the largest size's input and output (allocated at
            // init for --maxbytes) and live as long as the stream's work (synchronized
            // before they are dropped).
            Some(c) => unsafe {
                self.comm
                    .collective(c, send, recv, count, dtype, op, &self.stream)
            },
            None => {
                let n = self.comm.nranks();
                let r = self.comm.rank();
                let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
                let src = if place.in_place {
                    // SAFETY: both device buffers hold at least `in_bytes`.
                    unsafe {
                        weft_cuda::copy_async(self.staged.ptr(), recv, in_bytes, &self.stream)?
                    };
                    self.staged.ptr()
                } else {
                    send
                };
                let ops = [
                    GpuP2p::Send {
                        peer: next,
                        buf: src,
                        bytes: in_bytes,
                    },
                    GpuP2p::Recv {
                        peer: prev,
                        buf: recv,
                        bytes: in_bytes,
                    },
                ];
                // SAFETY: as above.
                unsafe { self.comm.group(&ops, &self.stream) }
            }
        }
    }

    pub fn synchronize(&mut self) -> Result<(), GpuError> {
        self.comm.synchronize(&self.stream)
    }

    /// Starts recording the stream into a CUDA graph (nothing runs until it is launched).
    pub fn begin_graph(&self) -> Result<(), GpuError> {
        Ok(weft_cuda::Graph::begin_capture(&self.stream)?)
    }

    /// Ends the recording and returns the graph.
    pub fn end_graph(&self) -> Result<weft_cuda::Graph, GpuError> {
        Ok(weft_cuda::Graph::end_capture(&self.stream)?)
    }

    /// Starts a timed region on the stream.
    pub fn time_start(&self) -> Result<(), GpuError> {
        Ok(self.start.record(&self.stream)?)
    }

    /// Ends the timed region, waits for it, and returns its length in microseconds.
    pub fn time_stop(&mut self) -> Result<f64, GpuError> {
        self.stop.record(&self.stream)?;
        self.synchronize()?;
        Ok(f64::from(Event::elapsed_ms(&self.start, &self.stop)?) * 1e3)
    }
}
