//! Why creating or using a communicator failed, with the rank at fault and what to try.

use std::fmt;

use crate::bootstrap::BootstrapError;
use crate::exec::ExecError;

/// A communicator failure. `Display` names this rank, the peer at fault and what to try.
#[derive(Debug)]
#[non_exhaustive]
pub enum CommError {
    /// An argument no rank could use (rank >= nranks, buffer of the wrong length, ...).
    InvalidArgument(String),
    /// Rendezvous or an exchange over the bootstrap network failed.
    Bootstrap(BootstrapError),
    /// Two ranks of one host claim the same device (NCCL: "Duplicate GPU detected").
    DuplicateDevice {
        rank: usize,
        other: usize,
        device: i32,
    },
    /// Ranks were started with different settings that must be equal (channel count,
    /// transport, FIFO size): `what` differs between this rank and `rank`.
    Inconsistent {
        what: &'static str,
        rank: usize,
        mine: String,
        theirs: String,
    },
    /// A transport could not build the connection to `peer` on `channel`.
    Transport {
        transport: &'static str,
        peer: usize,
        channel: u32,
        detail: String,
    },
    /// Choosing the channels failed on `rank` (the one that plans them for all: rank 0):
    /// an unreadable `NCCL_TOPO_FILE`, a malformed `NCCL_MIN_NCHANNELS`, ...
    Channels { rank: usize, detail: String },
    /// A collective or point-to-point operation failed on this rank.
    Exec(ExecError),
    /// A peer process on this host is gone (killed, crashed, or exited after its own
    /// error): the operation failed because of it.
    PeerDied {
        rank: usize,
        pid: u32,
        cause: ExecError,
    },
    /// A wait of this rank reached its deadline, or a neighbour gave up because of a rank
    /// elsewhere; the job's health query, run then, named the rank that holds the job up
    /// (`holder`: its rank and why), if it could.
    Stuck {
        cause: ExecError,
        holder: Option<(usize, String)>,
    },
    /// An earlier error left the communicator unusable (its peers have given up too).
    Failed(String),
}

impl From<BootstrapError> for CommError {
    fn from(e: BootstrapError) -> Self {
        CommError::Bootstrap(e)
    }
}

impl From<ExecError> for CommError {
    fn from(e: ExecError) -> Self {
        CommError::Exec(e)
    }
}

impl CommError {
    /// The rank this error blames, when there is one.
    pub fn culprit(&self) -> Option<usize> {
        match self {
            CommError::Bootstrap(e) => e.culprit(),
            CommError::DuplicateDevice { other, .. } => Some(*other),
            CommError::Inconsistent { rank, .. } => Some(*rank),
            CommError::Transport { peer, .. } => Some(*peer),
            CommError::Channels { rank, .. } => Some(*rank),
            CommError::PeerDied { rank, .. } => Some(*rank),
            CommError::Stuck {
                holder: Some((rank, _)),
                ..
            } => Some(*rank),
            CommError::Stuck {
                cause: ExecError::Conn(e),
                ..
            } => Some(e.conn().peer as usize),
            CommError::Exec(ExecError::Conn(e)) => Some(e.conn().peer as usize),
            CommError::Exec(ExecError::SizeMismatch { conn, .. }) => Some(conn.peer as usize),
            _ => None,
        }
    }
}

impl fmt::Display for CommError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            CommError::Bootstrap(e) => write!(f, "{e}"),
            CommError::DuplicateDevice {
                rank,
                other,
                device,
            } => write!(
                f,
                "ranks {other} and {rank} both use device {device} of the same host (NCCL: \
                 Duplicate GPU detected): give each rank its own device, e.g. from LOCAL_RANK"
            ),
            CommError::Inconsistent {
                what,
                rank,
                mine,
                theirs,
            } => write!(
                f,
                "rank {rank} was started with {what} = {theirs}, this rank with {mine}: every \
                 rank must use the same setting (check the WEFT_* / NCCL_* environment of each)"
            ),
            CommError::Transport {
                transport,
                peer,
                channel,
                detail,
            } => write!(
                f,
                "{transport} connection with rank {peer} on channel {channel}: {detail}"
            ),
            CommError::Channels { rank, detail } => {
                write!(f, "choosing the channels (on rank {rank}): {detail}")
            }
            CommError::Exec(e) => write!(f, "{e}"),
            CommError::Stuck { cause, holder } => match holder {
                Some((rank, why)) => write!(
                    f,
                    "{cause} The job's health query then: holding the job up: rank {rank}: \
                     {why}"
                ),
                None => write!(
                    f,
                    "{cause} The job's health query then named no rank (the log has every \
                     rank's state)"
                ),
            },
            CommError::PeerDied { rank, pid, cause } => write!(
                f,
                "rank {rank} (pid {pid}) is gone (killed, crashed, or exited after an error): \
                 look for its exit status and the first error in its log (OOM killer: dmesg). \
                 The operation here failed with: {cause}"
            ),
            CommError::Failed(first) => write!(
                f,
                "the communicator failed earlier and cannot be used (create a new one): {first}"
            ),
        }
    }
}

impl std::error::Error for CommError {}
