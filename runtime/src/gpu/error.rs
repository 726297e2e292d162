//! Why a GPU communicator failed: which call, which peer, and what to try.

use std::fmt;
use std::time::Duration;

use weft_cuda::CudaError;

use crate::bootstrap::BootstrapError;

/// A GPU communicator failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum GpuError {
    /// An argument no rank could use.
    InvalidArgument(String),
    /// A CUDA call failed (the error names the call and the device).
    Cuda(CudaError),
    /// Rendezvous or an exchange over the bootstrap network failed.
    Bootstrap(BootstrapError),
    /// Two ranks cannot reach each other's GPU memory.
    Unreachable { peer: usize, detail: String },
    /// A kernel gave up waiting on `peer` (dead, stuck, or itself failed): which wait,
    /// on which channel, for how long.
    PeerTimeout {
        rank: usize,
        peer: usize,
        channel: u32,
        waiting_for: &'static str,
        waited: Duration,
    },
    /// A point-to-point receive from `peer` did not meet a send of its size: the tag in
    /// the slot of its first step on `channel` (`core::abi::p2p_tag`) was `found` where
    /// this rank expected `wanted`.
    P2pMismatch {
        rank: usize,
        peer: usize,
        channel: u32,
        found: u64,
        wanted: u64,
    },
    /// A kernel's wait timed out (`timeout`: that error's text), and the job's health
    /// query at the deadline named another rank, `holder`, as the one holding the job up
    /// (`why`): the root of it, where the rank waited on was only held up too.
    HeldUp {
        timeout: String,
        holder: usize,
        why: String,
    },
    /// Rank `rank`'s communicator was aborted (by the user, or after an earlier failure:
    /// `why`).
    Aborted { rank: usize, why: String },
}

impl From<CudaError> for GpuError {
    fn from(e: CudaError) -> Self {
        GpuError::Cuda(e)
    }
}

impl From<BootstrapError> for GpuError {
    fn from(e: BootstrapError) -> Self {
        GpuError::Bootstrap(e)
    }
}

impl GpuError {
    /// The rank this error blames, when there is one.
    pub fn culprit(&self) -> Option<usize> {
        match self {
            GpuError::Bootstrap(e) => e.culprit(),
            GpuError::Unreachable { peer, .. }
            | GpuError::PeerTimeout { peer, .. }
            | GpuError::P2pMismatch { peer, .. } => Some(*peer),
            GpuError::HeldUp { holder, .. } => Some(*holder),
            _ => None,
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            GpuError::Cuda(e) => write!(f, "{e}"),
            GpuError::Bootstrap(e) => write!(f, "{e}"),
            GpuError::Unreachable { peer, detail } => write!(
                f,
                "rank {peer}'s GPU memory cannot be reached from here: {detail}"
            ),
            GpuError::PeerTimeout {
                rank,
                peer,
                channel,
                waiting_for,
                waited,
            } => write!(
                f,
                "rank {rank}: the kernel waited {:.1} s on channel {channel} for {waiting_for} \
                 rank {peer} and gave up; rank {peer} is dead, stuck, or failed first (look \
                 at its own error), or the ranks called different collectives; raise \
                 WEFT_TIMEOUT if rank {peer} is only slow",
                waited.as_secs_f64()
            ),
            GpuError::HeldUp {
                timeout,
                holder,
                why,
            } => write!(
                f,
                "{timeout}. The job's health query at this deadline names rank {holder} as \
                 the one holding the job up: {why}"
            ),
            GpuError::P2pMismatch {
                rank,
                peer,
                channel,
                found,
                wanted,
            } => {
                let bytes = |tag: u64| tag & weft_core::abi::P2P_TAG_BYTES;
                // A tag of this step (and marked: not zeroed memory) is the peer's message.
                if found >> 47 == wanted >> 47 {
                    write!(
                        f,
                        "rank {rank}: a receive of {} bytes from rank {peer} met a send of {} \
                         bytes (channel {channel}): a send and its receive must have the same \
                         size (they match in call order per peer and direction, as in NCCL)",
                        bytes(*wanted),
                        bytes(*found)
                    )
                } else {
                    write!(
                        f,
                        "rank {rank}: a receive of {} bytes from rank {peer} found no message \
                         of rank {peer} starting there (channel {channel}): rank {peer} sent \
                         a message of another size before it, or more or fewer sends than \
                         this rank's receives from it, or called a collective where this rank \
                         receives; a send and its receive must have the same size and order",
                        bytes(*wanted)
                    )
                }
            }
            GpuError::Aborted { rank, why } => {
                write!(f, "rank {rank}: the communicator was aborted: {why}")
            }
        }
    }
}

impl std::error::Error for GpuError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GpuError::Cuda(e) => Some(e),
            GpuError::Bootstrap(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_deadline_held_up_elsewhere_names_the_holder_after_the_wait() {
        let timeout = GpuError::PeerTimeout {
            rank: 1,
            peer: 0,
            channel: 0,
            waiting_for: "data from",
            waited: Duration::from_secs(10),
        };
        assert_eq!(timeout.culprit(), Some(0));
        let held = GpuError::HeldUp {
            timeout: timeout.to_string(),
            holder: 3,
            why: "it did not answer (its process is gone)".into(),
        };
        assert_eq!(held.culprit(), Some(3));
        let text = held.to_string();
        assert!(
            text.starts_with("rank 1: the kernel waited 10.0 s on channel 0 for data from rank 0")
        );
        assert!(text.ends_with(
            "names rank 3 as the one holding the job up: it did not answer (its process is gone)"
        ));
    }
}
