//! A rank's listening side: the ring link from the previous rank, and point-to-point data
//! connections whose messages wait here, keyed by (sender, tag), until `recv` asks for them.

use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weft_core::wire::bootstrap::{
    AbortReason, AbortRepr, FrameKind, MAX_BODY_LEN, Purpose, SECRET_LEN,
};

use super::frame::{ReadFail, read_frame};
use super::root::accept_hello;

/// An abort that reached this rank.
#[derive(Debug, Clone)]
pub(crate) struct AbortNote {
    /// Who sent it; None: this process.
    pub by: Option<usize>,
    pub culprit: Option<usize>,
    pub reason: AbortReason,
    pub text: String,
}

#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pub messages: HashMap<(usize, u32), VecDeque<Vec<u8>>>,
    /// The previous rank's ring connection, until the bootstrap takes it.
    pub ring_prev: Option<TcpStream>,
    /// Peers whose data connection ended: None for a clean close, Some(why) otherwise.
    pub closed: HashMap<usize, Option<String>>,
    pub abort: Option<AbortNote>,
    /// Clones of every stream, so that drop and abort can shut them all down.
    pub streams: Vec<TcpStream>,
}

/// State shared between a bootstrap, its accept loop and its connection threads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub rank: usize,
    pub nranks: usize,
    pub secret: [u8; SECRET_LEN],
    pub handshake_timeout: Duration,
    /// Raised by an abort (local or received): every wait returns.
    pub stop: AtomicBool,
    /// Raised when the bootstrap is dropped: connection threads exit.
    pub shutdown: AtomicBool,
    pub inbox: Mutex<Inbox>,
    pub arrived: Condvar,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Inbox> {
        // A connection thread cannot panic while holding the lock (no code there panics),
        // but if one did, the inbox is still consistent: each update is one insert.
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an abort, raises the stop flag and wakes every waiter. `how` says which
    /// directions of every stream to shut: `Read` wakes our own blocked reads while peers'
    /// writes still succeed (they learn why from the abort frame going round the ring);
    /// `Both` also makes peers fail at once, naming this rank.
    pub fn abort(&self, note: AbortNote, how: Shutdown) {
        let mut inbox = self.lock();
        if inbox.abort.is_none() {
            inbox.abort = Some(note);
        }
        self.stop.store(true, Ordering::Release);
        for s in &inbox.streams {
            let _ = s.shutdown(how);
        }
        drop(inbox);
        self.arrived.notify_all();
    }

    fn prev_rank(&self) -> usize {
        (self.rank + self.nranks - 1) % self.nranks
    }

    fn who(&self) -> String {
        format!("bootstrap rank {}", self.rank)
    }
}

/// Handles one accepted connection on a rank's listening port.
pub(crate) fn serve_connection(shared: &Shared, mut stream: TcpStream, from: SocketAddr) {
    let who = shared.who();
    let deadline = Instant::now() + shared.handshake_timeout;
    let Some((sender, hello)) = accept_hello(
        &mut stream,
        from,
        &shared.secret,
        deadline,
        &shared.shutdown,
        &who,
    ) else {
        return;
    };
    let sender = sender as usize;
    if hello.nranks as usize != shared.nranks || sender >= shared.nranks {
        log::warn!(
            "{who}: closed connection from {from}: it claims rank {sender} of {}, this job has {} ranks",
            hello.nranks,
            shared.nranks
        );
        return;
    }
    match hello.purpose {
        Purpose::Ring if sender == shared.prev_rank() => {
            let mut inbox = shared.lock();
            if inbox.ring_prev.is_some() {
                log::warn!("{who}: closed a second ring connection from rank {sender} ({from})");
                return;
            }
            if let Ok(clone) = stream.try_clone() {
                inbox.streams.push(clone);
            }
            inbox.ring_prev = Some(stream);
            drop(inbox);
            shared.arrived.notify_all();
        }
        Purpose::Data => serve_data(shared, stream, sender),
        other => log::warn!(
            "{who}: closed connection from {from} (rank {sender}): unexpected {other:?} connection"
        ),
    }
}

/// Reads data frames from `sender` until it closes, queueing each for `recv`.
fn serve_data(shared: &Shared, mut stream: TcpStream, sender: usize) {
    {
        let mut inbox = shared.lock();
        inbox.closed.remove(&sender);
        if let Ok(clone) = stream.try_clone() {
            inbox.streams.push(clone);
        }
    }
    loop {
        let frame = read_frame(&mut stream, None, &shared.shutdown, MAX_BODY_LEN);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        let ended = match frame {
            Ok((h, body)) if h.kind == FrameKind::Data && h.rank as usize == sender => {
                shared
                    .lock()
                    .messages
                    .entry((sender, h.tag))
                    .or_default()
                    .push_back(body);
                shared.arrived.notify_all();
                continue;
            }
            Ok((h, body)) if h.kind == FrameKind::Abort => match AbortRepr::parse(&body) {
                // The sender aborted its own communicator (`Bootstrap::abort`: the user, or
                // a rank a shrink leaves out): it is gone for every wait on it, as if it had
                // closed, with its words; waits on other ranks go on, so that the ranks that
                // stay can still agree among themselves (NCCL's shrink). Ring operations
                // still fail round the ring (the ring has its own stream).
                Ok(a) if a.reason == AbortReason::User && a.culprit.is_none() => {
                    Some(format!("it aborted: {}", a.text))
                }
                Ok(a) => {
                    shared.abort(
                        AbortNote {
                            by: Some(sender),
                            culprit: a.culprit.map(|c| c as usize),
                            reason: a.reason,
                            text: a.text.to_string(),
                        },
                        Shutdown::Read,
                    );
                    return;
                }
                Err(e) => {
                    shared.abort(
                        AbortNote {
                            by: Some(sender),
                            culprit: Some(sender),
                            reason: AbortReason::PeerFailed,
                            text: format!("unreadable abort message: {e}"),
                        },
                        Shutdown::Read,
                    );
                    return;
                }
            },
            Ok((h, _)) => Some(format!("unexpected frame {h:?} on its data connection")),
            Err(ReadFail::Closed) => None,
            Err(ReadFail::Parse(e)) => Some(format!("bad frame on its data connection: {e}")),
            Err(ReadFail::Io(e)) => Some(format!("data connection failed: {e}")),
            Err(ReadFail::Timeout | ReadFail::Stopped) => return,
        };
        if let Some(why) = &ended {
            log::warn!("{}: rank {sender}: {why}", shared.who());
        }
        shared.lock().closed.insert(sender, ended);
        shared.arrived.notify_all();
        return;
    }
}
