//! What can stop the CPU executor in the middle of a collective.

use std::fmt;

use weft_core::sched::SchedError;

use super::reduce::ReduceError;
use crate::conn::{ConnError, ConnId};

/// A failed collective or point-to-point operation, as seen by one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecError {
    /// A connection wait or post failed (timeout, abort, dead or closed peer, protocol).
    Conn(ConnError),
    /// The peer posted a slice of another size than this rank expects at this point of the
    /// program: the ranks are not running the same operation (count, type, root, order).
    SizeMismatch {
        conn: ConnId,
        expected: usize,
        got: usize,
    },
    /// The schedule could not be built for these arguments.
    Sched(SchedError),
    /// A buffer is too short for the call (bytes needed, bytes given).
    BadBuffer {
        what: &'static str,
        needed: usize,
        given: usize,
    },
    /// Another argument that no rank could run (send to an unknown peer, ...).
    InvalidArgument(String),
    /// The reduction kernels refused the operands (a weft bug: the executor sizes them).
    Reduce(ReduceError),
    /// The communicator's abort flag was raised (by `HostComm::abort_flag` or an earlier
    /// error) before the call started.
    Aborted,
    /// A worker thread panicked: a bug in weft. The text is the panic message.
    Panic(String),
}

impl From<ConnError> for ExecError {
    fn from(e: ConnError) -> Self {
        ExecError::Conn(e)
    }
}

impl From<ReduceError> for ExecError {
    fn from(e: ReduceError) -> Self {
        ExecError::Reduce(e)
    }
}

impl From<SchedError> for ExecError {
    fn from(e: SchedError) -> Self {
        ExecError::Sched(e)
    }
}

impl ExecError {
    /// Whether this error only reports that something else failed first (a local abort),
    /// so that the root cause can be reported instead.
    pub fn is_secondary(&self) -> bool {
        matches!(
            self,
            ExecError::Conn(ConnError::Aborted {
                by: crate::conn::AbortSource::Local,
                ..
            })
        )
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Conn(e) => write!(f, "{e}"),
            ExecError::SizeMismatch {
                conn,
                expected,
                got,
            } => write!(
                f,
                "{conn}: received a slice of {got} bytes where this rank expects {expected}: rank \
                 {} is running a different operation (check that every rank calls the same \
                 collectives in the same order with the same count, type and root)",
                conn.peer
            ),
            ExecError::Sched(e) => write!(f, "cannot schedule the collective: {e}"),
            ExecError::BadBuffer {
                what,
                needed,
                given,
            } => write!(
                f,
                "{what} buffer holds {given} bytes but the call needs {needed}"
            ),
            ExecError::InvalidArgument(msg) => write!(f, "{msg}"),
            ExecError::Reduce(e) => write!(f, "reduction: {e}"),
            ExecError::Aborted => write!(
                f,
                "the communicator was aborted (its abort flag was raised, or an earlier call \
                 failed): create a new communicator"
            ),
            ExecError::Panic(msg) => write!(
                f,
                "an executor thread panicked (a weft bug; please report it): {msg}"
            ),
        }
    }
}

impl std::error::Error for ExecError {}
