//! What can end a wait or a post on a host FIFO connection, and which connection it was.

use std::fmt;
use std::time::Duration;

use weft_core::fifo::FifoError;

/// Which way data flows on a connection, seen from this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Send,
    Recv,
}

/// The connection an error belongs to: enough to find it in a log of many ranks and channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    /// The transport that built the connection ("SHM", "NET", "local").
    pub transport: &'static str,
    pub rank: u32,
    pub peer: u32,
    pub channel: u32,
    pub dir: Direction,
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (from, to, verb) = match self.dir {
            Direction::Send => (self.rank, self.peer, "send"),
            Direction::Recv => (self.peer, self.rank, "recv"),
        };
        write!(
            f,
            "{} {verb} connection rank {from} -> rank {to}, channel {}",
            self.transport, self.channel
        )
    }
}

/// What a blocked wait was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitFor {
    /// A sender waiting for the receiver to free a slot (head).
    Credit,
    /// A receiver waiting for the sender to fill a slot (tail).
    Data,
    /// An LL sender waiting for the receiver to free an LL slot (LL head).
    LlCredit,
    /// An LL receiver waiting for a line to carry its step's flag.
    LlData,
}

impl fmt::Display for WaitFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

impl WaitFor {
    fn what(self) -> &'static str {
        match self {
            WaitFor::Credit => "credit",
            WaitFor::Data => "data",
            WaitFor::LlCredit => "LL credit",
            WaitFor::LlData => "LL data",
        }
    }
}

/// Who raised an abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbortSource {
    /// This process's `AbortFlag`.
    Local,
    /// The other end of the connection wrote the abort word.
    Peer,
}

/// Why an operation on a FIFO connection failed. Every variant names the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnError {
    /// The wait's deadline passed; the peer was alive (or could not be checked).
    Timeout {
        conn: ConnId,
        waiting_for: WaitFor,
        waited: Duration,
        /// Our next step, and the peer's published counter (head or tail).
        step: u64,
        peer_counter: u64,
    },
    /// An abort flag ended the wait.
    Aborted { conn: ConnId, by: AbortSource },
    /// The peer closed its end while we still waited for it.
    PeerClosed { conn: ConnId, waiting_for: WaitFor },
    /// The peer's process no longer exists (or is a zombie).
    PeerDead { conn: ConnId, pid: u32 },
    /// The two ends disagree on the protocol's counters or sizes.
    Protocol { conn: ConnId, err: FifoError },
    /// A post of more bytes than the slice holds, or a size in the sizes FIFO above it.
    Oversize {
        conn: ConnId,
        bytes: u64,
        capacity: usize,
    },
    /// The party at the other end (a NET proxy) failed the connection with this cause, which
    /// names the remote peer and what went wrong (network error, connect deadline).
    Failed {
        conn: ConnId,
        cause: std::sync::Arc<str>,
    },
    /// An LL send or receive on a connection without an LL buffer (NET connections have
    /// none: their proxy moves SIMPLE slots only).
    NoLlBuffer { conn: ConnId },
    /// The connection's memory does not hold a valid FIFO (bad magic, version or layout).
    BadMemory {
        conn: ConnId,
        what: &'static str,
        found: u64,
        expected: u64,
    },
}

impl ConnError {
    pub fn conn(&self) -> ConnId {
        match *self {
            ConnError::Timeout { conn, .. }
            | ConnError::Aborted { conn, .. }
            | ConnError::Failed { conn, .. }
            | ConnError::PeerClosed { conn, .. }
            | ConnError::PeerDead { conn, .. }
            | ConnError::Protocol { conn, .. }
            | ConnError::Oversize { conn, .. }
            | ConnError::NoLlBuffer { conn }
            | ConnError::BadMemory { conn, .. } => conn,
        }
    }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Timeout {
                conn,
                waiting_for,
                waited,
                step,
                peer_counter,
            } => {
                let (what, counter) = match waiting_for {
                    WaitFor::Credit => ("a free slot (credit) from the receiver", "head"),
                    WaitFor::Data => ("data from the sender", "tail"),
                    WaitFor::LlCredit => ("a free LL slot from the receiver", "LL head"),
                    WaitFor::LlData => ("an LL line from the sender", "line flag"),
                };
                write!(
                    f,
                    "{conn}: timed out after {:.1} s waiting for {what}: our step {step}, peer's \
                     {counter} {peer_counter}. The peer process is alive but not progressing: is \
                     rank {} in the same collective (same op, count, dtype, root) and not stuck \
                     elsewhere? Raise WEFT_CONN_TIMEOUT (seconds) if it is just slow.",
                    waited.as_secs_f64(),
                    conn.peer
                )
            }
            ConnError::Aborted { conn, by } => match by {
                AbortSource::Local => write!(f, "{conn}: aborted by this process"),
                AbortSource::Peer => write!(
                    f,
                    "{conn}: aborted by rank {} (see that rank's log for the first error)",
                    conn.peer
                ),
            },
            ConnError::PeerClosed { conn, waiting_for } => write!(
                f,
                "{conn}: rank {} closed the connection while we waited for {}: it left the \
                 collective early (error, or a different number of operations on each rank?)",
                conn.peer,
                waiting_for.what()
            ),
            ConnError::PeerDead { conn, pid } => write!(
                f,
                "{conn}: rank {} (pid {pid}) has died; look for its exit status or a crash in its \
                 log (OOM killer: dmesg)",
                conn.peer
            ),
            ConnError::Failed { conn, cause } => write!(f, "{conn}: {cause}"),
            ConnError::Protocol { conn, err } => write!(f, "{conn}: protocol error: {err}"),
            ConnError::Oversize {
                conn,
                bytes,
                capacity,
            } => write!(
                f,
                "{conn}: {bytes} bytes do not fit a slice of {capacity} bytes"
            ),
            ConnError::NoLlBuffer { conn } => write!(
                f,
                "{conn}: no LL buffer on this connection (LL runs over SHM only; NET connections \
                 and WEFT_LL_BUFFSIZE=0 leave it out): a protocol choice that differs between \
                 ranks, or NCCL_PROTO=LL with a NET connection"
            ),
            ConnError::BadMemory {
                conn,
                what,
                found,
                expected,
            } => write!(
                f,
                "{conn}: connection memory is not a weft FIFO: {what} is {found:#x}, expected \
                 {expected:#x} (peers built from different weft versions?)"
            ),
        }
    }
}

impl std::error::Error for ConnError {}
