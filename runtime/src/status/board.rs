//! One rank's board: what it is doing now, as the health query reports it. Written by the
//! rank's own threads (each call, and each wait that outlasts its spin phase), read by the
//! process's status server.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::conn::{ConnId, Direction, WaitFor};

/// A call of the communicator's, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallDesc {
    /// The operation (`all_reduce`, `send/recv group`, ...).
    pub op: String,
    /// Elements per rank (operations for a send/receive group).
    pub count: usize,
    pub dtype: String,
}

/// The call in progress as recorded: a group of `calls` calls of which the first is `op`
/// of `count` x `dtype`.
#[derive(Debug, Clone, Copy)]
struct Current {
    op: &'static str,
    calls: usize,
    count: usize,
    dtype: &'static str,
}

impl Current {
    fn desc(&self) -> CallDesc {
        CallDesc {
            op: match self.calls {
                0 | 1 => self.op.to_string(),
                n => format!("group of {n} collectives, first {}", self.op),
            },
            count: self.count,
            dtype: self.dtype.to_string(),
        }
    }
}

/// A wait of one of the rank's threads that has lasted past its spin phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitDesc {
    pub channel: u32,
    pub peer: u32,
    /// `send` (waiting for the peer's credit) or `recv` (for its data).
    pub dir: String,
    /// `data`, `credit`, `LL data`, `LL credit`.
    pub what: String,
    /// Milliseconds so far (when reported).
    pub for_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Calls begun and calls completed (a call that failed is begun, not completed), and
    /// the collectives among those begun (every rank makes the same ones, unlike
    /// point-to-point groups).
    started: u64,
    done: u64,
    collectives: u64,
    /// The call in progress: what it is (kept as the callers' static names: no allocation
    /// on the launch path; made into a [`CallDesc`] when reported) and since when.
    current: Option<(Current, Instant)>,
    waits: Vec<(u64, ConnId, WaitFor, Instant)>,
    next_wait: u64,
    failed: Option<String>,
    /// The failure began here (not a neighbour's passed on).
    failed_here: bool,
}

/// Whether everything a rank launched has finished (`None`: cannot tell), for boards whose
/// calls end on a device, after the call that launched them returned.
pub type Probe = Box<dyn Fn() -> Option<bool> + Send + Sync>;

/// One rank's board (see the module documentation).
pub struct Board {
    pub(super) comm: u64,
    pub(super) rank: u32,
    pub(super) nranks: u32,
    state: Mutex<State>,
    probe: Mutex<Option<Probe>>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Board")
            .field("comm", &self.comm)
            .field("rank", &self.rank)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A snapshot of a board, as the server sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankReport {
    pub comm: u64,
    pub rank: u32,
    pub nranks: u32,
    pub pid: u32,
    pub host: String,
    pub started: u64,
    pub done: u64,
    /// Collectives begun (the count every rank shares, unlike point-to-point groups).
    pub collectives: u64,
    /// The call in progress and for how long, in milliseconds.
    pub current: Option<(CallDesc, u64)>,
    pub waits: Vec<WaitDesc>,
    pub failed: Option<String>,
    /// The failure began at this rank: not an abort or a close a neighbour passed on.
    pub failed_here: bool,
}

impl Board {
    pub fn new(comm: u64, rank: u32, nranks: u32) -> Arc<Board> {
        Arc::new(Board {
            comm,
            rank,
            nranks,
            state: Mutex::new(State::default()),
            probe: Mutex::new(None),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call begins; the returned guard marks it completed ([`CallGuard::done`]) or, when
    /// dropped without, left unfinished. `collective`: every rank makes this call (not a
    /// point-to-point group).
    pub fn call(
        self: &Arc<Self>,
        op: &'static str,
        count: usize,
        dtype: &'static str,
        collective: bool,
    ) -> CallGuard {
        self.launched(op, 1, count, dtype, collective);
        CallGuard {
            board: Arc::clone(self),
        }
    }

    /// A call was launched on a device and runs after this returns (`calls` calls in one
    /// group, the first `op` of `count` x `dtype`): it shows as the call in progress until
    /// the [`Probe`] says everything launched has finished.
    pub fn launched(
        &self,
        op: &'static str,
        calls: usize,
        count: usize,
        dtype: &'static str,
        collective: bool,
    ) {
        let mut s = self.state();
        s.started += 1;
        s.collectives += u64::from(collective);
        let current = Current {
            op,
            calls,
            count,
            dtype,
        };
        s.current = Some((current, Instant::now()));
    }

    /// How the board learns that device calls ([`Board::launched`]) have finished.
    pub fn set_probe(&self, probe: Probe) {
        *self.probe.lock().unwrap_or_else(PoisonError::into_inner) = Some(probe);
    }

    /// A wait on `conn` has outlasted its spin phase: it shows until the guard goes.
    pub fn waiting(self: &Arc<Self>, conn: ConnId, what: WaitFor) -> WaitGuard {
        let mut s = self.state();
        let id = s.next_wait;
        s.next_wait += 1;
        s.waits.push((id, conn, what, Instant::now()));
        WaitGuard {
            board: Arc::clone(self),
            id,
        }
    }

    /// The communicator failed: the first cause shows from now on; `here`: it began at
    /// this rank (not a neighbour's failure passed on).
    pub fn failed(&self, cause: &str, here: bool) {
        let mut s = self.state();
        if s.failed.is_none() {
            s.failed = Some(cause.to_string());
            s.failed_here = here;
        }
    }

    /// What the board says now.
    pub fn report(&self) -> RankReport {
        // Outside the state lock: the probe asks the driver.
        let finished = self
            .probe
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|p| p());
        let mut s = self.state();
        if finished == Some(true) && s.current.is_some() {
            s.done = s.started;
            s.current = None;
        }
        let now = Instant::now();
        let ms = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        RankReport {
            comm: self.comm,
            rank: self.rank,
            nranks: self.nranks,
            pid: std::process::id(),
            host: host_name(),
            started: s.started,
            done: s.done,
            collectives: s.collectives,
            current: s.current.as_ref().map(|(c, t)| (c.desc(), ms(*t))),
            waits: s
                .waits
                .iter()
                .map(|(_, conn, what, t)| WaitDesc {
                    channel: conn.channel,
                    peer: conn.peer,
                    dir: match conn.dir {
                        Direction::Send => "send",
                        Direction::Recv => "recv",
                    }
                    .to_string(),
                    what: what.to_string(),
                    for_ms: ms(*t),
                })
                .collect(),
            failed: s.failed.clone(),
            failed_here: s.failed_here,
        }
    }
}

/// A call in progress on a [`Board`].
#[derive(Debug)]
pub struct CallGuard {
    board: Arc<Board>,
}

impl CallGuard {
    /// The call completed.
    pub fn done(self) {
        let mut s = self.board.state();
        s.done += 1;
        s.current = None;
    }
}

/// A wait shown on a [`Board`] until dropped.
#[derive(Debug)]
pub struct WaitGuard {
    board: Arc<Board>,
    id: u64,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.board.state().waits.retain(|w| w.0 != self.id);
    }
}

/// This machine's name (`gethostname`), or `?`.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer of the length given; the kernel NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "?".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl fmt::Display for CallDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} x {}", self.op, self.count, self.dtype)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::atomic::{AtomicU8, Ordering};

    #[test]
    fn a_device_call_shows_until_the_probe_says_it_finished() {
        let board = Board::new(1, 0, 2);
        let state = Arc::new(AtomicU8::new(0)); // 0 running, 1 finished, 2 unknown
        let seen = Arc::clone(&state);
        board.set_probe(Box::new(move || match seen.load(Ordering::Relaxed) {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }));
        board.launched("AllReduce", 1, 8, "float", true);
        board.launched("send/recv group", 1, 2, "operations", false);
        let r = board.report();
        assert_eq!((r.started, r.done, r.collectives), (2, 0, 1));
        assert_eq!(r.current.as_ref().unwrap().0.op, "send/recv group");
        state.store(2, Ordering::Relaxed);
        assert!(board.report().current.is_some(), "unknown is not finished");
        state.store(1, Ordering::Relaxed);
        let r = board.report();
        assert_eq!((r.started, r.done), (2, 2));
        assert!(r.current.is_none());
    }

    #[test]
    fn host_calls_and_waits_show_while_they_last() {
        let board = Board::new(1, 0, 2);
        let call = board.call("AllReduce", 8, "float", true);
        let conn = ConnId {
            transport: "SHM",
            rank: 0,
            peer: 1,
            channel: 3,
            dir: Direction::Recv,
        };
        let wait = board.waiting(conn, WaitFor::Data);
        let r = board.report();
        assert_eq!(r.waits.len(), 1);
        assert_eq!((r.waits[0].channel, r.waits[0].peer), (3, 1));
        drop(wait);
        assert!(board.report().waits.is_empty());
        call.done();
        let r = board.report();
        assert_eq!((r.started, r.done), (1, 1));
        assert!(r.current.is_none());
        board.failed("first", true);
        board.failed("second", false);
        let r = board.report();
        assert_eq!(r.failed.as_deref(), Some("first"));
        assert!(r.failed_here);
    }
}
