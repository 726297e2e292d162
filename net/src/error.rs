//! The error every `Net` backend returns: what failed, with whom, and what to try.

use std::fmt;
use std::io;

use weft_core::wire::ParseError;

/// The class of a [`NetError`], for callers that react differently (the plugin maps these to
/// `ncclSystemError`, `ncclInvalidArgument`, `ncclRemoteError`, `ncclInternalError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetErrorKind {
    /// A caller mistake: bad device index, too many receive buffers, request reused...
    InvalidArgument,
    /// The listen handle from the peer does not parse.
    InvalidHandle(ParseError),
    /// A system call failed (socket, bind, connect, send, recv...).
    Io(io::ErrorKind),
    /// The peer closed or reset the connection.
    PeerClosed,
    /// A send is larger than the receive buffer it matched.
    Truncated {
        /// Bytes the sender posted.
        send_size: usize,
        /// Bytes the receive buffer holds.
        recv_size: usize,
    },
    /// A send's tag is not among the tags of the receive group it has to match.
    TagMismatch {
        /// The send's tag.
        tag: u32,
    },
    /// A deadline passed (connect never answered, handshake never finished).
    Timeout,
    /// The operation does not apply to this backend (e.g. CUDA memory on sockets).
    Unsupported,
    /// The peer spoke a protocol this build does not understand.
    Protocol,
    /// The comm was closed or already failed.
    Closed,
    /// An external net plugin returned this failing `ncclResult_t` (`ncclInternalError`,
    /// `ncclUnhandledCudaError`...), one that no kind above describes.
    Plugin(i32),
}

/// A failed `Net` operation. Boxed inside so that `Result<_, NetError>` stays one word on
/// the hot paths (`test` is called in a tight loop).
#[derive(Debug, Clone)]
pub struct NetError(Box<Inner>);

#[derive(Debug, Clone)]
struct Inner {
    kind: NetErrorKind,
    what: String,
    peer: Option<String>,
    cause: Option<String>,
    hint: Option<&'static str>,
}

impl NetError {
    /// `what` failed (a phrase: "connect to listener"), of class `kind`.
    pub fn new(kind: NetErrorKind, what: impl Into<String>) -> Self {
        NetError(Box::new(Inner {
            kind,
            what: what.into(),
            peer: None,
            cause: None,
            hint: None,
        }))
    }

    /// An I/O failure of `what`.
    pub fn io(what: impl Into<String>, err: &io::Error) -> Self {
        let kind = match err.kind() {
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => NetErrorKind::PeerClosed,
            k => NetErrorKind::Io(k),
        };
        NetError::new(kind, what).cause(err)
    }

    /// Names the peer (address, rank) involved.
    pub fn peer(mut self, peer: impl fmt::Display) -> Self {
        self.0.peer = Some(peer.to_string());
        self
    }

    /// Attaches the underlying cause.
    pub fn cause(mut self, cause: impl fmt::Display) -> Self {
        self.0.cause = Some(cause.to_string());
        self
    }

    /// Attaches what the user should try.
    pub fn hint(mut self, hint: &'static str) -> Self {
        self.0.hint = Some(hint);
        self
    }

    /// The class of error.
    pub fn kind(&self) -> NetErrorKind {
        self.0.kind
    }

    /// The peer named in the error, if any.
    pub fn peer_name(&self) -> Option<&str> {
        self.0.peer.as_deref()
    }

    /// Whether it already says what to try (so that a caller adds no hint of its own).
    pub fn has_hint(&self) -> bool {
        self.0.hint.is_some()
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        write!(f, "{}", e.what)?;
        if let Some(peer) = &e.peer {
            write!(f, " (peer {peer})")?;
        }
        if let Some(cause) = &e.cause {
            write!(f, ": {cause}")?;
        }
        if let Some(hint) = e.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NetError {}

impl From<weft_config::ConfigError> for NetError {
    /// A bad environment variable: the message names it, its value and what it takes.
    fn from(e: weft_config::ConfigError) -> Self {
        NetError::new(NetErrorKind::InvalidArgument, e.to_string())
    }
}
