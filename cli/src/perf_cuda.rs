//! `weft perf --device cuda`: the same measurement on device memory, through weft's GPU
//! communicator ([`weft_runtime::gpu::GpuComm`]).
//!
//! The host side fills and checks exactly as on the CPU (`weft_verify`): the input is
//! filled on the host and copied to the GPU, the output is poisoned (0xa5) on the GPU before
//! each checked call and copied back to be checked element by element. Timing uses CUDA
//! events around `iters` calls enqueued back to back on one stream, as nccl-tests does.

use std::sync::Arc;

use weft_core::abi::DataType;
use weft_core::sched::Collective;
use weft_cuda::{Context, DeviceBuffer, Event, Stream};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::comm::CommOptions;
use weft_runtime::gpu::{GpuComm, GpuError, GpuP2p};

use crate::perf::{Buffers, ChannelSummary, PerfBackend, PerfCall, PerfColl, PerfResult};

/// Where a call's input and output are: out of place, the input is the send buffer; in
/// place, both are in the receive buffer (NCCL's layout: an all-gather's input is this
/// rank's block of the output, a reduce-scatter's output this rank's block of the input).
#[derive(Debug, Clone, Copy)]
struct Placement {
    in_place: bool,
    /// Bytes into the receive buffer where an in-place input starts.
    in_offset: usize,
    /// Bytes into the receive buffer where the output starts.
    out_offset: usize,
}

impl Placement {
    fn of(call: &PerfCall) -> Placement {
        // In place, the input sits in the output buffer: NCCL's layout puts an all-gather's
        // at this rank's block and a reduce-scatter's at the start.
        let (in_offset, out_offset) = match call.coll {
            PerfColl::AllGather if call.in_place => (call.rank * call.in_bytes, 0),
            PerfColl::ReduceScatter if call.in_place => (0, call.rank * call.out_bytes),
            _ => (0, 0),
        };
        Placement {
            in_place: call.in_place,
            in_offset,
            out_offset,
        }
    }
}

/// One rank's GPU state: communicator, stream, buffers, timing events.
pub struct CudaRank {
    comm: GpuComm,
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    /// A copy of the message for in-place send/recv (sending from the buffer being received into).
    staged: DeviceBuffer,
    start: Event,
    stop: Event,
    device: usize,
    name: String,
    bus_id: String,
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
    fn copy_to_device(&self, send: &[u8], recv: &[u8]) -> Result<(), GpuError> {
        self.send.copy_from_host(send)?;
        self.recv.copy_from_host(recv)?;
        Ok(())
    }

    /// Copies the device's output back.
    fn copy_from_device(&self, recv: &mut [u8]) -> Result<(), GpuError> {
        self.recv.copy_to_host(recv)?;
        Ok(())
    }

    /// Enqueues one call: its collective, or, for sendrecv, a send to the next rank and a
    /// receive from the previous one.
    fn enqueue(&mut self, call: &PerfCall) -> Result<(), GpuError> {
        let root = call.root as u32;
        let collective = match call.coll {
            PerfColl::AllReduce => Some(Collective::AllReduce),
            PerfColl::ReduceScatter => Some(Collective::ReduceScatter),
            PerfColl::AllGather => Some(Collective::AllGather),
            PerfColl::Broadcast => Some(Collective::Broadcast { root }),
            PerfColl::Reduce => Some(Collective::Reduce { root }),
            PerfColl::SendRecv => None,
        };
        let place = Placement::of(call);
        let (count, in_bytes, dtype, op) = (call.count, call.in_bytes, call.dtype, call.op);
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

    fn synchronize(&mut self) -> Result<(), GpuError> {
        self.comm.synchronize(&self.stream)
    }

    /// Starts recording the stream into a CUDA graph (nothing runs until it is launched).
    fn begin_graph(&self) -> Result<(), GpuError> {
        Ok(weft_cuda::Graph::begin_capture(&self.stream)?)
    }

    /// Ends the recording and returns the graph.
    fn end_graph(&self) -> Result<weft_cuda::Graph, GpuError> {
        Ok(weft_cuda::Graph::end_capture(&self.stream)?)
    }

    /// Starts a timed region on the stream.
    fn time_start(&self) -> Result<(), GpuError> {
        Ok(self.start.record(&self.stream)?)
    }

    /// Ends the timed region, waits for it, and returns its length in microseconds.
    fn time_stop(&mut self) -> Result<f64, GpuError> {
        self.stop.record(&self.stream)?;
        self.synchronize()?;
        Ok(f64::from(Event::elapsed_ms(&self.start, &self.stop)?) * 1e3)
    }
}

impl PerfBackend for CudaRank {
    fn device_line(&self) -> String {
        format!(
            "{:>3}\t[{}] {} weft GPU kernels",
            self.device, self.bus_id, self.name
        )
    }

    fn channels(&self) -> ChannelSummary {
        ChannelSummary {
            nchannels: self.comm.nchannels() as usize,
            ring: self.comm.rings().first().cloned().unwrap_or_default(),
            transport: Some(self.comm.transport_name().to_string()),
            step_bytes: self.comm.step_bytes(),
        }
    }

    /// Which protocols the sizes below may run (LL by default on P2P windows, on SHM
    /// windows only where a setting asked for it; docs/gpu.md).
    fn header_notes(&self) -> Vec<String> {
        let p = self.comm.protocols();
        vec![format!(
            "#  protocols: {} (NCCL_PROTO {}), {} KiB LL buffers, send/recv LL {}",
            p.available(),
            p.enable,
            p.ll_buffer_bytes() / 1024,
            p.p2p_threshold()
                .filter(|t| *t > 0)
                .map_or("never".to_string(), |t| format!("up to {t} B per channel"))
        )]
    }

    /// Every rank's kernels loaded before any rank launches one (a module load waits for
    /// the device; see GpuComm::prepare).
    fn prepare(&mut self, dtype: DataType) -> PerfResult<()> {
        self.comm.prepare(&[dtype, DataType::Uint8])?;
        self.comm.barrier()?;
        Ok(())
    }

    fn upload(&mut self, send: &[u8], recv: &[u8]) -> PerfResult<()> {
        Ok(self.copy_to_device(send, recv)?)
    }

    fn fetch(&mut self, recv: &mut [u8]) -> PerfResult<()> {
        self.synchronize()?;
        Ok(self.copy_from_device(recv)?)
    }

    /// Enqueues the call on the device buffers (the host buffers only stage fills and
    /// checks).
    fn run_once(&mut self, call: &PerfCall, _host: &mut Buffers) -> PerfResult<()> {
        Ok(self.enqueue(call)?)
    }

    fn exchange(&mut self, mine: &[u8]) -> PerfResult<Vec<Vec<u8>>> {
        Ok(self.comm.exchange(mine)?)
    }

    fn barrier(&mut self) -> PerfResult<()> {
        self.synchronize()?;
        Ok(self.comm.barrier()?)
    }

    fn start_clock(&mut self) -> PerfResult<()> {
        Ok(self.time_start()?)
    }

    fn stop_clock(&mut self) -> PerfResult<f64> {
        Ok(self.time_stop()?)
    }

    /// nccl-tests' -G: the calls recorded once into a CUDA graph, the graph launched
    /// `launches` times; the time per call is the total over `calls * launches`.
    fn time_graph(
        &mut self,
        call: &PerfCall,
        host: &mut Buffers,
        calls: usize,
        launches: usize,
    ) -> PerfResult<Option<f64>> {
        self.begin_graph()?;
        let recorded = (0..calls).try_for_each(|_| self.run_once(call, host));
        let graph = self.end_graph();
        recorded?;
        let graph = graph?;
        self.time_start()?;
        for _ in 0..launches {
            graph.launch(&self.stream)?;
        }
        Ok(Some(self.time_stop()? / launches as f64))
    }

    fn finalize(&mut self) -> PerfResult<()> {
        Ok(self.comm.finalize()?)
    }
}
