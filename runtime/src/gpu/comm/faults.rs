//! Faults: the abort flag, the kernels' deadline on a peer, and the turning of what a
//! kernel recorded when it gave up into an error that names the peer.
//!
//! Both live in one host-mapped status page that kernels read and write while they run:
//! the abort flag (a u32 at 0), the release word (a u32 at 4) and one [`KernelFault`] per
//! block of a launch (from `FAULTS_OFFSET`). The host reads it without waiting for the
//! stream, so a caller learns of a dead peer while the kernels are still unwinding.
//!
//! A kernel that gave up holds its stream (sync.cuh's `hold_until_heard`) until the host
//! sets the release word: the call must not look complete before the program can have
//! heard of its failure. NCCL's contract is the same (a collective whose peer failed never
//! completes; ncclCommGetAsyncError reports the error and the program aborts the
//! communicator), and PyTorch depends on it: it asks about errors only for work that has
//! not completed. The host releases when it aborts or revokes the communicator
//! ([`AbortHandle::raise`], [`Faults::abort`]), when a call that waits for the stream is
//! about to return the failure ([`Faults::wait_for`]), when the program splits or shrinks
//! the failed communicator ([`Faults::release`]), and before finalize and teardown wait
//! ([`Faults::release_for_teardown`]). A failure found on the host (a NET
//! connection's, by the proxy) raises the flag alone ([`AbortHandle::fail`]): the kernels
//! then hold the stream too.

use std::mem::size_of;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::abi::{
    FAULT_ABORTED, FAULT_CLAIMED, FAULT_MISMATCH, FAULT_NONE, FAULT_TIMEOUT, KernelFault,
    MAX_CHANNELS, WAIT_NVLS_FREED, WAIT_NVLS_POSTED, WAIT_PEER_FLAG, WAIT_PEER_START, WAIT_RECV,
};
use weft_cuda::{Context, HostMapped, Stream};
use zerocopy::{FromBytes, IntoBytes};

use crate::gpu::GpuError;
use crate::proxy::staged::FirstFailure;

/// Fault records: one per block of a launch.
pub(super) const FAULT_RECORDS: usize = 2 * MAX_CHANNELS as usize;
/// Where the fault records start in the host-mapped status page (the abort flag is at 0).
const FAULTS_OFFSET: usize = 256;
/// The abort flag's word in the status page.
const FLAG_WORD: usize = 0;
/// The release word's (see the module documentation): right after the flag, where the
/// kernels look for it (`DevComm::abort_flag` + 4).
const RELEASE_WORD: usize = 1;

/// The abort flag of one [`GpuComm`](super::GpuComm), usable from any thread while the
/// communicator itself is busy (see [`GpuComm::abort_handle`](super::GpuComm::abort_handle)).
#[derive(Debug, Clone)]
pub struct AbortHandle {
    status: Arc<HostMapped>,
}

impl AbortHandle {
    /// Aborts: the communicator's kernels return at their next look at the flag, those
    /// that gave up no longer hold their streams, and its next `check` fails.
    pub fn raise(&self) {
        self.status.write_u32(RELEASE_WORD, 1);
        self.status.write_u32(FLAG_WORD, 1);
    }

    /// A failure the host found (not an abort): the flag goes up, and the kernels that
    /// stop for it hold their streams until the failure is reported or the communicator
    /// aborted (see the module documentation).
    pub fn fail(&self) {
        self.status.write_u32(FLAG_WORD, 1);
    }

    /// Whether the flag is up (an abort, or a kernel that gave up).
    pub fn is_raised(&self) -> bool {
        self.status.read_u32(FLAG_WORD).unwrap_or(0) != 0
    }
}

/// One rank's fault state: the status page its kernels share, their deadline, and the
/// first failure, which every later call reports.
#[derive(Debug)]
pub(super) struct Faults {
    rank: usize,
    /// How long a kernel waits on a peer before it gives up (`DevComm::timeout_ns`).
    timeout: Duration,
    /// Abort flag (u32 at 0) and one `KernelFault` per block (at `FAULTS_OFFSET`); shared
    /// with every [`AbortHandle`].
    status: Arc<HostMapped>,
    failed: Option<String>,
    /// The first failure of a NET connection (its proxy raised the flag).
    net_failure: Option<FirstFailure>,
}

impl Faults {
    /// A clear status page for `rank`'s kernels, which give up on a peer after `timeout`.
    pub(super) fn new(
        ctx: &Arc<Context>,
        rank: usize,
        timeout: Duration,
    ) -> Result<Faults, GpuError> {
        let status = Arc::new(HostMapped::alloc(
            ctx,
            FAULTS_OFFSET + FAULT_RECORDS * size_of::<KernelFault>(),
        )?);
        Ok(Faults {
            rank,
            timeout,
            status,
            failed: None,
            net_failure: None,
        })
    }

    /// The abort flag's device address (`DevComm::abort_flag`).
    pub(super) fn abort_flag_ptr(&self) -> u64 {
        self.status.device_ptr()
    }

    /// The fault records' device address (`DevComm::fault`).
    pub(super) fn records_ptr(&self) -> u64 {
        self.status.device_ptr() + FAULTS_OFFSET as u64
    }

    /// The kernels' deadline on a peer in nanoseconds (`DevComm::timeout_ns`).
    pub(super) fn timeout_ns(&self) -> u64 {
        u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn handle(&self) -> AbortHandle {
        AbortHandle {
            status: self.status.clone(),
        }
    }

    /// Reports the first failure of this rank's NET connections, whose proxy raises the
    /// flag, as the communicator's failure (the kernels then only saw the flag).
    pub(super) fn watch_net(&mut self, failure: FirstFailure) {
        self.net_failure = Some(failure);
    }

    /// Raises the flag, releases the kernels that gave up, and keeps `why` as the
    /// failure, unless one came first.
    pub(super) fn abort(&mut self, why: &str) {
        self.handle().raise();
        if self.failed.is_none() {
            self.failed = Some(why.to_string());
        }
    }

    /// Clears the page after every kernel has stopped (NCCL's `setCommAbortFlags(comm, 0)`
    /// once a shrink's abort has ended what ran): the flag down, no fault records, no
    /// failure kept.
    pub(super) fn clear(&mut self) {
        for word in
            (FAULTS_OFFSET / 4)..(FAULTS_OFFSET + FAULT_RECORDS * size_of::<KernelFault>()) / 4
        {
            self.status.write_u32(word, 0);
        }
        self.status.write_u32(FLAG_WORD, 0);
        self.status.write_u32(RELEASE_WORD, 0);
        self.failed = None;
    }

    fn flag_raised(&self) -> bool {
        self.status.read_u32(FLAG_WORD).unwrap_or(0) != 0
    }

    /// Lets the kernels that gave up end, where one did (the flag is up): for a caller
    /// about to report the failure itself, or acting on it.
    pub(super) fn release(&self) {
        if self.flag_raised() {
            self.status.write_u32(RELEASE_WORD, 1);
        }
    }

    /// Lets every kernel that gave up, or will, end without holding its stream: teardown
    /// (finalize, destroy) is past reporting, and a kernel still waiting on a peer now
    /// must not hold once it gives up at its deadline.
    pub(super) fn release_for_teardown(&self) {
        self.status.write_u32(RELEASE_WORD, 1);
    }

    /// The first failure: what a kernel recorded when it gave up, or the reason of an
    /// abort.
    pub(super) fn check(&mut self) -> Result<(), GpuError> {
        // A kernel that records a fault raises the abort flag too: one load on the fast path.
        if self.failed.is_none() && !self.flag_raised() {
            return Ok(());
        }
        if self.failed.is_none() {
            self.failed = self.net_failure.as_ref().and_then(FirstFailure::get);
        }
        if let Some(fault) = self.first_fault() {
            let err = self.fault_error(&fault);
            // An abort's reason alone: later checks wrap it again (`Aborted`).
            self.failed.get_or_insert_with(|| match &err {
                GpuError::Aborted { why, .. } => why.clone(),
                other => other.to_string(),
            });
            return Err(err);
        }
        if let Some(why) = &self.failed {
            return Err(GpuError::Aborted {
                rank: self.rank,
                why: why.clone(),
            });
        }
        if self.flag_raised() {
            return Err(GpuError::Aborted {
                rank: self.rank,
                why: "the abort flag is set".to_string(),
            });
        }
        Ok(())
    }

    fn first_fault(&self) -> Option<KernelFault> {
        let words = size_of::<KernelFault>() / 4;
        (0..FAULT_RECORDS)
            .filter_map(|i| {
                let first = (FAULTS_OFFSET + i * size_of::<KernelFault>()) / 4;
                let raw: Vec<u32> = (first..first + words)
                    .map(|w| self.status.read_u32(w).unwrap_or(0))
                    .collect();
                KernelFault::read_from_bytes(raw.as_bytes()).ok()
            })
            // FAULT_CLAIMED: a kernel thread is still writing it (the next check reads it).
            .filter(|f| f.code != FAULT_NONE && f.code != FAULT_CLAIMED)
            // The timed-out wait or the mismatch is the root cause; the others saw its
            // abort. A mismatch first: a peer waiting on this rank may time out after it.
            .min_by_key(|f| match f.code {
                FAULT_MISMATCH => (0, 0),
                FAULT_TIMEOUT => (1, u64::MAX - f.waited_ns),
                _ => (2, u64::MAX - f.waited_ns),
            })
    }

    fn fault_error(&self, f: &KernelFault) -> GpuError {
        if f.code == FAULT_ABORTED && self.failed.is_some() {
            return GpuError::Aborted {
                rank: self.rank,
                why: self.failed.clone().unwrap_or_default(),
            };
        }
        let waiting_for = match f.wait {
            WAIT_RECV => "data from",
            WAIT_PEER_START => "the start of this collective (its output buffer's address) on",
            WAIT_PEER_FLAG => "the one-shot data (LL pairs) or one-/two-shot barrier flag of",
            WAIT_NVLS_POSTED => "NVLS data (a scattered or reduced chunk) from",
            WAIT_NVLS_FREED => "an NVLS slot to be freed by",
            _ => "a free FIFO slot from",
        };
        match f.code {
            FAULT_MISMATCH => GpuError::P2pMismatch {
                rank: self.rank,
                peer: f.peer.max(0) as usize,
                channel: f.channel,
                found: f.step,
                wanted: f.waited_ns,
            },
            FAULT_TIMEOUT => GpuError::PeerTimeout {
                rank: self.rank,
                peer: f.peer.max(0) as usize,
                channel: f.channel,
                waiting_for,
                waited: Duration::from_nanos(f.waited_ns),
            },
            _ => GpuError::Aborted {
                rank: self.rank,
                why: format!(
                    "a kernel stopped on channel {} while waiting for {waiting_for} rank {}",
                    f.channel, f.peer
                ),
            },
        }
    }

    /// Waits for `stream` to finish, then reports what a kernel recorded. A healthy queue
    /// may take as long as it needs (every wait of weft's kernels has its own deadline, so
    /// the stream ends); once the abort flag is up, the stream gets a few seconds to drain,
    /// then this returns an error instead of waiting on whatever else holds the stream.
    pub(super) fn wait_for(&mut self, stream: &Stream) -> Result<(), GpuError> {
        const DRAIN: Duration = Duration::from_secs(5);
        let mut spins = 0u32;
        let mut aborted_at: Option<Instant> = None;
        while !stream.is_done()? {
            if aborted_at.is_none() && self.flag_raised() {
                // This call returns the failure: the kernels holding the stream may end.
                self.release();
                aborted_at = Some(Instant::now());
            }
            if aborted_at.is_some_and(|t| t.elapsed() > DRAIN) {
                self.check()?;
                return Err(GpuError::Aborted {
                    rank: self.rank,
                    why: format!(
                        "the GPU stream did not finish {} s after the abort flag was raised; \
                         something other than weft's kernels is holding it",
                        DRAIN.as_secs()
                    ),
                });
            }
            spins += 1;
            if spins > 1000 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
        self.check()
    }
}
