//! The CPU executor: runs `weft_core::sched` ring programs over host FIFO connections.
//!
//! A collective call first asks `weft_core::algo`'s chooser for its algorithm and protocol
//! ([`Tuning`]: what this executor offers it): LL lines for small messages, SIMPLE slots
//! otherwise, and for a small all-reduce the [`one_shot`] algorithm. It then becomes
//! one [`ProgramSpec`]; each channel that has elements to move runs its rank's
//! [`RingProgram`](weft_core::sched::RingProgram) ([`ring::run_channel`]): a call on one
//! channel (every small call) on the caller's thread with no allocation or hand-off, a call
//! on several on the caller's thread for the first channel and persistent workers
//! ([`pool::WorkerPool`]) for the others. Point-to-point groups run one job per peer the
//! same way ([`p2p`]). Every wait is a FIFO wait ([`crate::conn`]): it ends on data, on the
//! communicator's abort flag, on a dead or closed peer, or at its deadline.
//!
//! When any job fails, the executor raises the abort flag (so this rank's other channels
//! stop), then marks every connection aborted for the peers (so their waits end within
//! microseconds instead of at the deadline), and the communicator refuses further calls.
//!
//! Bulk copies go through [`crate::copy`] (256-bit loads and stores instead of glibc's `rep movsb`,
//! which ran 3-5x slower on the AMD build machine).

pub mod buffers;
pub mod error;
pub mod one_shot;
pub mod p2p;
pub mod pool;
pub mod reduce;
pub mod ring;

use std::sync::{Arc, Mutex, PoisonError};

use weft_core::abi::{DataType, Protocol, RedOp};
use weft_core::algo::{
    Algo, Call, Choice, ChooseError, Chooser, FifoSteps, LlOffer, Offer, PeerCaps, Settings,
};
use weft_core::fifo::NCCL_STEPS;
use weft_core::sched::{
    ChunkSizing, Collective, ProgramSpec, align_elems, channel_part, channels_for,
};
use weft_core::tune::{ProtocolEnable, TuningModel, call_bytes};

pub use buffers::RawBuffers;
pub use error::ExecError;
pub use pool::{Job, WorkerPool};
pub use ring::{RingCall, RingConns, Scratch};

use crate::conn::AbortFlag;

/// A channel of the CPU executor carries this many times NCCL's 32 KiB of traffic before
/// a call spreads to another: handing a channel to a worker thread costs a wake-up (10-30
/// us on a loaded host), the time to copy about 256 KiB. Measured with `weft perf
/// all-reduce --ranks 2 --channels 2`: at 64 KiB, two channels took 52-60 us and one 22 us.
pub const CPU_TRAFFIC_SCALE: usize = 8;

/// What calls choose from: `NCCL_PROTO`, and what this executor offers the chooser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// What `NCCL_PROTO` enables per collective.
    pub enable: ProtocolEnable,
    /// Payload bytes of an LL step on every ring connection of every rank, or 0 when some
    /// connection has no LL buffer (NET): LL is used only when every rank can, since all
    /// ranks must choose alike.
    pub ll_step_bytes: usize,
    pub model: TuningModel,
}

impl Default for Tuning {
    /// SIMPLE only (no LL buffers known), NCCL_PROTO's default, the host model.
    fn default() -> Self {
        Tuning {
            enable: ProtocolEnable::default(),
            ll_step_bytes: 0,
            model: TuningModel::HOST_SHM,
        }
    }
}

impl Tuning {
    /// The chooser of a communicator whose SIMPLE FIFO steps hold `simple_step_bytes`: LL
    /// where every ring connection has an LL buffer, the one-shot through the ring's FIFOs
    /// ([`one_shot`]), no peer-pointer algorithms (host memory) and no `WEFT_ALGO` (a GPU
    /// setting).
    pub fn chooser(&self, simple_step_bytes: usize) -> Chooser {
        Chooser {
            settings: Settings {
                protocols: self.enable,
                ..Settings::default()
            },
            offer: Offer {
                model: self.model,
                ll: if self.ll_step_bytes > 0 {
                    LlOffer::ByDefault
                } else {
                    LlOffer::NoBuffer
                },
                fifo_one_shot: Some(FifoSteps {
                    simple_bytes: simple_step_bytes,
                    ll_bytes: self.ll_step_bytes,
                }),
                peers: PeerCaps::NONE,
            },
        }
    }

    /// What `collective` moving `bytes` (NCCL's `nBytes`) on `nranks` runs, with SIMPLE FIFO
    /// steps of `simple_step_bytes`; an error when `NCCL_PROTO` leaves none of the
    /// protocols this executor can run here.
    pub fn choose(
        &self,
        collective: Collective,
        bytes: usize,
        nranks: usize,
        simple_step_bytes: usize,
    ) -> Result<Choice, ExecError> {
        let call = Call {
            collective,
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            nranks,
        };
        self.chooser(simple_step_bytes)
            .choose(&call)
            .map_err(|e| match e {
                ChooseError::NoProtocol(e) => ExecError::InvalidArgument(format!(
                    "NCCL_PROTO enables {} for {}, but the CPU executor runs {} on this \
                     communicator (LL only when every ring connection is SHM): enable Simple",
                    e.enabled,
                    collective.name(),
                    e.runnable
                )),
                ChooseError::Algorithm(e) => ExecError::InvalidArgument(e.to_string()),
            })
    }
}

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
    tuning: Tuning,
    /// The last call's shape and the choice made for it: a loop of identical calls (the
    /// common case) skips the model.
    last_choice: Option<(Collective, usize, DataType, Choice)>,
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
            tuning: Tuning::default(),
            last_choice: None,
        }
    }

    /// What calls choose from (every rank must set the same).
    pub fn set_tuning(&mut self, tuning: Tuning) {
        self.tuning = tuning;
        self.last_choice = None;
    }

    pub fn tuning(&self) -> &Tuning {
        &self.tuning
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

    /// The algorithm and protocol `collective` of `count` elements of `dtype` uses (the same
    /// on every rank).
    pub fn choose(
        &self,
        collective: Collective,
        count: usize,
        dtype: DataType,
    ) -> Result<Choice, ExecError> {
        let bytes = call_bytes(collective, count, dtype.size_of_elem(), self.nranks);
        self.tuning
            .choose(collective, bytes, self.nranks, self.step_bytes)
    }

    /// Bytes of one FIFO step of `protocol`: the most one slice carries (a slice never
    /// spans steps, so that a ring's sends cannot fill a FIFO the peer is not reading).
    fn slice_bytes(&self, protocol: Protocol) -> usize {
        match protocol {
            Protocol::Ll => self.tuning.ll_step_bytes,
            _ => self.step_bytes,
        }
    }

    /// The spec every rank computes for this call (the same on all of them): chunks cut
    /// from a FIFO of `NCCL_STEPS` steps of `protocol`, as NCCL does, and NCCL's channel
    /// rule with [`CPU_TRAFFIC_SCALE`] times its traffic per channel.
    pub fn spec(
        &self,
        collective: Collective,
        count: usize,
        dtype: DataType,
        protocol: Protocol,
    ) -> Result<ProgramSpec, ExecError> {
        let esize = dtype.size_of_elem();
        let max = u32::try_from(self.channels.len()).unwrap_or(u32::MAX);
        let buffer = self.slice_bytes(protocol).saturating_mul(NCCL_STEPS);
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
        let choice = match self.last_choice {
            Some((c, n, d, choice)) if (c, n, d) == (collective, count, dtype) => choice,
            _ => {
                let choice = self.choose(collective, count, dtype)?;
                self.last_choice = Some((collective, count, dtype, choice));
                choice
            }
        };
        let rank = self.rank;
        let reduction = ring::reduction(dtype, op, self.nranks)?;
        if choice.algo == Algo::OneShot {
            // One message of the whole buffer on channel 0: no chunks, no channel split.
            let call = RingCall {
                spec: ProgramSpec {
                    collective,
                    count,
                    elem_size: dtype.size_of_elem(),
                    chunk_elems: count.max(1),
                    nchannels: 1,
                },
                dtype,
                reduction,
                slice_elems: count.max(1),
                protocol: choice.protocol,
                buffers,
            };
            return self.run_here(0, |ring, conns| match conns {
                Some(c) => one_shot::all_reduce(&call, ring, rank, c),
                None => ring::run_channel(&call, ring, rank, 0, None),
            });
        }
        let spec = self.spec(collective, count, dtype, choice.protocol)?;
        let call = RingCall {
            spec,
            dtype,
            reduction,
            slice_elems: self.slice_bytes(choice.protocol) / dtype.size_of_elem(),
            protocol: choice.protocol,
            buffers,
        };
        let align = align_elems(dtype.size_of_elem())?;
        let mut active = Vec::new();
        for c in 0..spec.nchannels {
            if channel_part(count, align, spec.nchannels, c)?.len > 0 {
                active.push(c);
            }
        }
        if let [c] = active[..] {
            return self.run_here(c, |ring, conns| {
                ring::run_channel(&call, ring, rank, c, conns)
            });
        }
        let mut jobs: Vec<Job> = Vec::new();
        for c in active {
            let channel = self.channel(c)?;
            let abort = self.abort.clone();
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

    fn channel(&self, c: u32) -> Result<ExecChannel, ExecError> {
        self.channels.get(c as usize).cloned().ok_or_else(|| {
            ExecError::InvalidArgument(format!(
                "channel {c} does not exist ({} channels)",
                self.channels.len()
            ))
        })
    }

    /// Runs `work` on channel `c` on this thread: what a call on one channel does, with no
    /// job to box and no worker to wake. Fails and aborts as [`Executor::run`] does.
    fn run_here(
        &mut self,
        c: u32,
        work: impl FnOnce(&[u32], Option<&mut RingConns>) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        if self.abort.is_aborted() {
            return Err(ExecError::Aborted);
        }
        let channel = self.channels.get(c as usize).ok_or_else(|| {
            ExecError::InvalidArgument(format!(
                "channel {c} does not exist ({} channels)",
                self.channels.len()
            ))
        })?;
        let result = {
            let mut guard = channel.conns.as_deref().map(lock);
            let ring = &channel.ring;
            pool::catch(|| work(ring, guard.as_deref_mut()))
        };
        result.inspect_err(|_| {
            self.abort.abort();
            self.abort_connections();
        })
    }

    /// Runs `jobs` (at least one) in parallel and reduces their results to the first root
    /// cause; on failure, every connection is marked aborted for the peers.
    pub fn run(&mut self, jobs: Vec<Job>) -> Result<(), ExecError> {
        self.run_with(jobs, true)
    }

    /// [`Executor::run`], or with `parallel` false every job on this thread, in order
    /// (only for jobs that cannot wait on each other: see `HostComm::group`).
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
