//! The CPU executor: runs `weft_core::sched` ring programs over host FIFO connections.
//!
//! A collective call becomes one [`ProgramSpec`]; each channel that has elements to move
//! runs its rank's [`RingProgram`](weft_core::sched::RingProgram) ([`ring::run_channel`]) on
//! its own thread: the caller's thread for the first channel, persistent workers
//! ([`pool::WorkerPool`]) for the others. Point-to-point groups run one job per peer the
//! same way ([`p2p`]). Every wait is a FIFO wait ([`crate::conn`]): it ends on data, on the
//! communicator's abort flag, on a dead or closed peer, or at its deadline.
//!
//! When any job fails, the executor raises the abort flag (so this rank's other channels
//! stop), then marks every connection aborted for the peers (so their waits end within
//! microseconds instead of at the deadline), and the communicator refuses further calls.

pub mod buffers;
pub mod error;
pub mod p2p;
pub mod pool;
pub mod reduce;
pub mod ring;

use std::sync::{Arc, Mutex, PoisonError};

use weft_core::abi::{DataType, RedOp};
use weft_core::fifo::NCCL_STEPS;
use weft_core::sched::{
    ChunkSizing, Collective, ProgramSpec, align_elems, channel_part, channels_for,
};

pub use buffers::RawBuffers;
pub use error::ExecError;
pub use pool::{Job, WorkerPool};
pub use ring::{RingCall, RingConns};

use crate::conn::AbortFlag;

/// A channel of the CPU executor carries this many times NCCL's 32 KiB of traffic before
/// a call spreads to another: handing a channel to a worker thread costs a wake-up (10-30
/// us on a loaded host), the time to copy about 256 KiB. Measured with `weft perf
/// all-reduce --ranks 2 --channels 2`: at 64 KiB, two channels took 52-60 us and one 22 us.
pub const CPU_TRAFFIC_SCALE: usize = 8;

/// One channel of a communicator: its ring and, with two or more ranks, its connections.
#[derive(Debug, Clone)]
pub struct ExecChannel {
    pub ring: Arc<[u32]>,
    pub conns: Option<Arc<Mutex<RingConns>>>,
}

/// Runs collectives for one rank over its channels.
#[derive(Debug)]
pub struct Executor {
    rank: u32,
    nranks: usize,
    channels: Vec<ExecChannel>,
    /// Bytes of one FIFO step of every connection: the largest slice.
    step_bytes: usize,
    abort: AbortFlag,
    pool: WorkerPool,
    /// Use every channel on every call (tests of the channel split), instead of NCCL's
    /// traffic rule.
    all_channels: bool,
}

/// Locks a connection even if a panicking job poisoned the mutex: the FIFO state is
/// counters in shared memory, which a panic cannot leave half-updated in a way that matters
/// more than the panic itself (already reported as an error).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Executor {
    pub fn new(
        rank: u32,
        nranks: usize,
        channels: Vec<ExecChannel>,
        step_bytes: usize,
        abort: AbortFlag,
    ) -> Self {
        Executor {
            rank,
            nranks,
            channels,
            step_bytes,
            abort,
            pool: WorkerPool::new(format!("weft-r{rank}")),
            all_channels: false,
        }
    }

    /// Spreads every call over every channel, whatever its size (so that tests exercise
    /// the split of small counts; every rank must set the same).
    pub fn use_all_channels(&mut self, all: bool) {
        self.all_channels = all;
    }

    pub fn nchannels(&self) -> usize {
        self.channels.len()
    }

    pub fn channels(&self) -> &[ExecChannel] {
        &self.channels
    }

    pub fn abort_flag(&self) -> &AbortFlag {
        &self.abort
    }

    /// The spec every rank computes for this call (the same on all of them): chunks cut
    /// from a FIFO of `NCCL_STEPS` steps, as NCCL does, and NCCL's channel rule with
    /// [`CPU_TRAFFIC_SCALE`] times its traffic per channel.
    pub fn spec(
        &self,
        collective: Collective,
        count: usize,
        dtype: DataType,
    ) -> Result<ProgramSpec, ExecError> {
        let esize = dtype.size_of_elem();
        let max = u32::try_from(self.channels.len()).unwrap_or(u32::MAX);
        let buffer = self.step_bytes.saturating_mul(NCCL_STEPS);
        let sizing = ChunkSizing::new(collective, buffer, esize)?;
        let scaled = count.div_ceil(CPU_TRAFFIC_SCALE);
        Ok(ProgramSpec {
            collective,
            count,
            elem_size: esize,
            chunk_elems: sizing.chunk_elems(),
            nchannels: if self.all_channels {
                max.max(1)
            } else {
                channels_for(collective, scaled, esize, self.nranks, max)
            },
        })
    }

    /// Runs `collective` on `buffers` (see [`Collective`] for what `count` means).
    pub fn collective(
        &mut self,
        collective: Collective,
        count: usize,
        dtype: DataType,
        op: RedOp,
        buffers: RawBuffers,
    ) -> Result<(), ExecError> {
        let spec = self.spec(collective, count, dtype)?;
        let call = RingCall {
            spec,
            dtype,
            reduction: ring::reduction(dtype, op, self.nranks)?,
            slice_elems: self.step_bytes / dtype.size_of_elem(),
            buffers,
        };
        let align = align_elems(dtype.size_of_elem())?;
        let mut jobs: Vec<Job> = Vec::new();
        for c in 0..spec.nchannels {
            if channel_part(count, align, spec.nchannels, c)?.len == 0 {
                continue;
            }
            let channel =
                self.channels
                    .get(c as usize)
                    .cloned()
                    .ok_or(ExecError::InvalidArgument(format!(
                        "channel {c} does not exist ({} channels)",
                        self.channels.len()
                    )))?;
            let (rank, abort) = (self.rank, self.abort.clone());
            jobs.push(Box::new(move || {
                let mut guard = channel.conns.as_deref().map(lock);
                let result = ring::run_channel(&call, &channel.ring, rank, c, guard.as_deref_mut());
                if result.is_err() {
                    abort.abort();
                }
                result
            }));
        }
        self.run(jobs)
    }

    /// Runs `jobs` (at least one) in parallel and reduces their results to the first root
    /// cause; on failure, every connection is marked aborted for the peers.
    pub fn run(&mut self, jobs: Vec<Job>) -> Result<(), ExecError> {
        self.run_with(jobs, true)
    }

    /// [`Executor::run`], or with `parallel` false every job on this thread, in order
    /// (only for jobs that cannot wait on each other: see `Comm::group`).
    pub fn run_with(&mut self, jobs: Vec<Job>, parallel: bool) -> Result<(), ExecError> {
        if self.abort.is_aborted() {
            return Err(ExecError::Aborted);
        }
        let results: Vec<Result<(), ExecError>> = if parallel {
            self.pool.run(jobs)
        } else {
            let mut results = Vec::with_capacity(jobs.len());
            for job in jobs {
                let r = pool::run_caught(job);
                let failed = r.is_err();
                results.push(r);
                if failed {
                    break;
                }
            }
            results
        };
        let mut first: Option<ExecError> = None;
        for err in results.into_iter().filter_map(Result::err) {
            match &first {
                Some(f) if !f.is_secondary() || err.is_secondary() => {}
                _ => first = Some(err),
            }
        }
        match first {
            None => Ok(()),
            Some(err) => {
                self.abort.abort();
                self.abort_connections();
                Err(err)
            }
        }
    }

    /// Closes every ring connection (the peers see them closed); later collectives fail.
    pub fn close_connections(&mut self) {
        for channel in &mut self.channels {
            channel.conns = None;
        }
    }

    /// Marks every ring connection aborted in shared memory, so that the peers' waits end.
    pub fn abort_connections(&self) {
        for channel in &self.channels {
            if let Some(conns) = &channel.conns {
                let conns = lock(conns);
                conns.send.abort();
                conns.recv.abort();
            }
        }
    }
}

#[cfg(test)]
mod test;
