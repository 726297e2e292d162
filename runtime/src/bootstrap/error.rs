//! What can go wrong during bootstrap, with the rank and address at fault and what to try.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use weft_core::wire::ParseError;
use weft_core::wire::bootstrap::AbortReason;

/// Who is on the other end of a connection: the root, or a rank (with its address once known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Root(SocketAddr),
    Rank(usize, Option<SocketAddr>),
}

impl Peer {
    /// The rank, if the peer is one.
    pub fn rank(&self) -> Option<usize> {
        match *self {
            Peer::Root(_) => None,
            Peer::Rank(r, _) => Some(r),
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Root(addr) => write!(f, "the bootstrap root at {addr}"),
            Peer::Rank(r, Some(addr)) => write!(f, "rank {r} at {addr}"),
            Peer::Rank(r, None) => write!(f, "rank {r}"),
        }
    }
}

/// A bootstrap failure. `Display` names the peer, what was being done and what to try.
#[derive(Debug)]
#[non_exhaustive]
pub enum BootstrapError {
    /// The caller passed something impossible (rank >= nranks, a reserved tag...).
    InvalidArgument(String),
    /// A local resource failed: binding a socket, reading /dev/urandom, finding an interface.
    Local { what: String, source: io::Error },
    /// Connecting kept failing until the deadline.
    Unreachable {
        peer: Peer,
        waited: Duration,
        source: io::Error,
    },
    /// Nothing arrived from `peer` before the deadline.
    Timeout {
        peer: Peer,
        what: &'static str,
        waited: Duration,
    },
    /// `peer` closed the connection or it broke (the process died or was killed).
    PeerLost {
        peer: Peer,
        what: &'static str,
        source: Option<io::Error>,
    },
    /// `peer` sent bytes that are not the bootstrap protocol, or out of order.
    Protocol { peer: Peer, detail: String },
    /// The root gave up waiting: these ranks never checked in.
    MissingRanks {
        missing: Vec<usize>,
        root: SocketAddr,
        waited: Duration,
    },
    /// Someone aborted: `by` sent the abort (None: this process), `culprit` is the rank at
    /// fault if known.
    Aborted {
        by: Option<Peer>,
        culprit: Option<usize>,
        reason: AbortReason,
        text: String,
    },
    /// An earlier failure left this bootstrap unusable (the ring may be out of step).
    Poisoned(String),
}

impl BootstrapError {
    /// The rank this error blames, when there is one: the missing, dead, silent or
    /// misbehaving peer.
    pub fn culprit(&self) -> Option<usize> {
        match self {
            BootstrapError::Unreachable { peer, .. }
            | BootstrapError::Timeout { peer, .. }
            | BootstrapError::PeerLost { peer, .. }
            | BootstrapError::Protocol { peer, .. } => peer.rank(),
            BootstrapError::MissingRanks { missing, .. } => missing.first().copied(),
            BootstrapError::Aborted { culprit, .. } => *culprit,
            _ => None,
        }
    }

    pub(crate) fn protocol(peer: Peer, err: ParseError) -> Self {
        BootstrapError::Protocol {
            peer,
            detail: err.to_string(),
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::InvalidArgument(msg) => write!(f, "bootstrap: {msg}"),
            BootstrapError::Local { what, source } => write!(f, "bootstrap: {what}: {source}"),
            BootstrapError::Unreachable {
                peer,
                waited,
                source,
            } => write!(
                f,
                "bootstrap: cannot connect to {peer} (kept retrying for {waited:.1?}): {source}. \
                 Is that process running and is the address reachable from here? \
                 Set WEFT_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) to the interface the hosts share, \
                 and check firewalls"
            ),
            BootstrapError::Timeout { peer, what, waited } => write!(
                f,
                "bootstrap: {what}: nothing from {peer} within {waited:.1?}. \
                 Did that rank start, is it stuck, or is its network down? \
                 Raise WEFT_BOOTSTRAP_TIMEOUT if it is merely slow"
            ),
            BootstrapError::PeerLost {
                peer,
                what,
                source: Some(e),
            } => write!(
                f,
                "bootstrap: {what}: connection to {peer} broke: {e}. That process probably died: \
                 look at its log first"
            ),
            BootstrapError::PeerLost {
                peer,
                what,
                source: None,
            } => write!(
                f,
                "bootstrap: {what}: {peer} closed the connection. That process probably exited \
                 or crashed: look at its log first"
            ),
            BootstrapError::Protocol { peer, detail } => write!(
                f,
                "bootstrap: unexpected bytes from {peer}: {detail}. Are all ranks running the \
                 same weft build?"
            ),
            BootstrapError::MissingRanks {
                missing,
                root,
                waited,
            } if missing.is_empty() => write!(
                f,
                "bootstrap: no rank checked in with the root at {root} within {waited:.1?}. \
                 Check that the ranks were launched with this unique id and can reach {root}"
            ),
            BootstrapError::MissingRanks {
                missing,
                root,
                waited,
            } => write!(
                f,
                "bootstrap: rank(s) {missing:?} never connected to the root at {root} within \
                 {waited:.1?}. Check that they were launched, with the same unique id and world \
                 size, and that they can reach {root}"
            ),
            BootstrapError::Aborted {
                by,
                culprit,
                reason,
                text,
            } => {
                write!(f, "bootstrap aborted ({reason:?})")?;
                if let Some(by) = by {
                    write!(f, " by {by}")?;
                }
                if let Some(c) = culprit {
                    write!(f, ", blaming rank {c}")?;
                }
                write!(f, ": {text}")
            }
            BootstrapError::Poisoned(first) => write!(
                f,
                "bootstrap: unusable after an earlier failure ({first}); destroy this \
                 communicator and create a new one"
            ),
        }
    }
}

impl std::error::Error for BootstrapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootstrapError::Local { source, .. } | BootstrapError::Unreachable { source, .. } => {
                Some(source)
            }
            BootstrapError::PeerLost {
                source: Some(e), ..
            } => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn missing_ranks_message_says_who_or_that_nobody_came() {
        let root: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        let waited = Duration::from_secs(3);
        let nobody = BootstrapError::MissingRanks {
            missing: Vec::new(),
            root,
            waited,
        };
        let text = nobody.to_string();
        assert!(
            text.contains("no rank checked in with the root at 127.0.0.1:4242"),
            "{text}"
        );
        assert!(!text.contains("[]"), "{text}");
        let some = BootstrapError::MissingRanks {
            missing: vec![2, 5],
            root,
            waited,
        };
        assert!(
            some.to_string().contains("rank(s) [2, 5] never connected"),
            "{some}"
        );
    }
}
