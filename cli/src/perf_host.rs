//! `weft perf --device cpu`: the measurement on host memory, through weft's host
//! communicator ([`HostComm`]) and its CPU executor.
//!
//! The calls read and write the measurement's own buffers; times are host time around the
//! calls.

use std::time::{Duration, Instant};

use weft_core::abi::{DataType, RedOp};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::comm::{CommError, CommOptions, HostComm, P2pOp};

use crate::perf::{Buffers, ChannelSummary, PerfBackend, PerfCall, PerfColl, PerfResult};

/// Untimed 4-byte all-reduces before each timing on the CPU (see `HostRank::settle`): about
/// 0.4 ms when the ranks run side by side, a few ms (some scheduler balancing periods) when
/// they share a CPU.
const SETTLE_CALLS: usize = 2048;
/// ... or fewer, once one rank has spent this long settling (slow links, emulated VMs).
const SETTLE_TIME: Duration = Duration::from_millis(20);

/// One rank's host state: the communicator and the clock of the timed region.
#[derive(Debug)]
pub struct HostRank {
    comm: HostComm,
    started: Instant,
}

impl HostRank {
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        opts: &CommOptions,
    ) -> Result<HostRank, CommError> {
        Ok(HostRank {
            comm: HostComm::init(id, rank, nranks, opts)?,
            started: Instant::now(),
        })
    }
}

impl PerfBackend for HostRank {
    fn device_line(&self) -> String {
        "cpu\t[host memory] weft CPU executor".to_string()
    }

    fn channels(&self) -> ChannelSummary {
        let c = &self.comm;
        ChannelSummary {
            nchannels: c.nchannels(),
            ring: c.rings().first().cloned().unwrap_or_default(),
            transport: c
                .channel_transports()
                .first()
                .and_then(|k| k.map(|(send, _)| send.name().to_string())),
            step_bytes: c.step_bytes(),
        }
    }

    fn run_once(&mut self, call: &PerfCall, b: &mut Buffers) -> PerfResult<()> {
        let c = &mut self.comm;
        let PerfCall {
            coll,
            in_place,
            dtype,
            op,
            root,
            in_bytes,
            out_bytes,
            rank,
            nranks,
            ..
        } = *call;
        let send = &b.send[..in_bytes];
        match (coll, in_place) {
            (PerfColl::AllReduce, false) => c.all_reduce(send, &mut b.recv[..out_bytes], dtype, op),
            (PerfColl::AllReduce, true) => {
                c.all_reduce_in_place(&mut b.recv[..out_bytes], dtype, op)
            }
            (PerfColl::ReduceScatter, false) => {
                c.reduce_scatter(send, &mut b.recv[..out_bytes], dtype, op)
            }
            (PerfColl::ReduceScatter, true) => {
                c.reduce_scatter_in_place(&mut b.recv[..in_bytes], dtype, op)
            }
            (PerfColl::AllGather, false) => c.all_gather(send, &mut b.recv[..out_bytes], dtype),
            (PerfColl::AllGather, true) => c.all_gather_in_place(&mut b.recv[..out_bytes], dtype),
            (PerfColl::Broadcast, false) => {
                c.broadcast(send, &mut b.recv[..out_bytes], dtype, root)
            }
            (PerfColl::Broadcast, true) => {
                c.broadcast_in_place(&mut b.recv[..out_bytes], dtype, root)
            }
            (PerfColl::Reduce, false) => c.reduce(send, &mut b.recv[..out_bytes], dtype, op, root),
            (PerfColl::Reduce, true) => {
                c.reduce_in_place(&mut b.recv[..out_bytes], dtype, op, root)
            }
            (PerfColl::SendRecv, _) => {
                let next = (rank + 1) % nranks;
                let prev = (rank + nranks - 1) % nranks;
                let src: &[u8] = if in_place {
                    // Sending from the buffer that receives: stage the message first (part
                    // of the timed work, as the copy is what in-place costs here).
                    b.staged[..in_bytes].copy_from_slice(&b.recv[..in_bytes]);
                    &b.staged[..in_bytes]
                } else {
                    send
                };
                c.group(&mut [
                    P2pOp::Send {
                        peer: next,
                        buf: src,
                    },
                    P2pOp::Recv {
                        peer: prev,
                        buf: &mut b.recv[..out_bytes],
                    },
                ])
            }
        }?;
        Ok(())
    }

    fn exchange(&mut self, mine: &[u8]) -> PerfResult<Vec<Vec<u8>>> {
        Ok(self.comm.exchange(mine)?)
    }

    fn barrier(&mut self) -> PerfResult<()> {
        Ok(self.comm.barrier()?)
    }

    /// A few untimed 4-byte all-reduces between the barrier and the clock. The barrier is
    /// over TCP: the ranks sleep in it, and the scheduler may wake them on one CPU, where
    /// they take turns instead of running side by side until it separates them, which
    /// spinning ranks make it do. (MPI's benchmark gets the same from its per-size warm-up
    /// and its spinning MPI_Barrier.)
    fn settle(&mut self) -> PerfResult<()> {
        let started = Instant::now();
        for _ in 0..SETTLE_CALLS {
            // Each call carries "I have settled long enough"; every rank gets the same
            // maximum, so all stop after the same call.
            let mut done = u32::from(started.elapsed() > SETTLE_TIME).to_ne_bytes();
            self.comm
                .all_reduce_in_place(&mut done, DataType::Uint32, RedOp::Max)?;
            if u32::from_ne_bytes(done) != 0 {
                break;
            }
        }
        Ok(())
    }

    fn start_clock(&mut self) -> PerfResult<()> {
        self.started = Instant::now();
        Ok(())
    }

    fn stop_clock(&mut self) -> PerfResult<f64> {
        Ok(self.started.elapsed().as_secs_f64() * 1e6)
    }

    fn finalize(&mut self) -> PerfResult<()> {
        Ok(self.comm.finalize()?)
    }
}
