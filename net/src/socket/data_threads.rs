//! The helper threads that move large messages over a connection's data sockets.
//!
//! A message above the inline limit is cut into pieces, one per data socket (at least
//! [`super::comm::MIN_PIECE`] bytes each); both ends cut it the same way and queue the pieces
//! on the same sockets in the same order, so each socket carries a plain byte stream and no
//! framing. Each thread owns a few sockets and moves their queued pieces with nonblocking
//! `send`/`recv`.
//!
//! Waking a sleeping thread costs tens of microseconds (more when its core went idle), and
//! NCCL's pattern pays it once per message per end: a proxy posts a message, the pieces go to
//! sleeping threads, the next message comes a little later. So a thread that runs out of work,
//! or whose socket is not ready, may keep trying for `spin` (yielding the CPU between tries,
//! `WEFT_SOCKET_SPIN_US`) before it sleeps: in `poll` (1 ms, so that an abort is seen quickly)
//! when the kernel's buffers are full, on a condition variable when it has nothing queued.
//! Spinning is on by default only where the process may use many CPUs
//! ([`super::default_spin`]): where threads outnumber cores, a spinning thread loses the
//! wake-up preemption a sleeping one gets and waits for the busy thread's whole time slice
//! (measured: a 512 KiB ping-pong over loopback on 2 cores went from 0.3 ms to 8 ms).
//! Posting a piece signals the condition variable only when the thread sleeps
//! on it, so the proxy's `isend`/`irecv` make no system call for a spinning thread.
//!
//! A finished piece decrements its request's counter in [`DataShared::pending`]; the comm
//! completes a request once its counter is zero. The first failure is stored in
//! [`DataShared`] and stops every thread of the connection.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::super::{NET_MAX_REQUESTS, NetError, NetErrorKind};
use super::LocalSettings;
use super::sys;

/// Which way a connection's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Send,
    Recv,
}

/// A contiguous part of one request's buffer, moved over one data socket.
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    /// The request slot whose counter this piece decrements when done.
    pub slot: usize,
    /// Start address (as an integer so pieces can cross threads; see the comm's safety notes).
    pub addr: usize,
    pub len: usize,
}

/// State shared between a comm and its threads.
#[derive(Debug)]
pub(super) struct DataShared {
    /// Pieces still queued or moving, per request slot.
    pub pending: [AtomicUsize; NET_MAX_REQUESTS],
    /// Set (with `error`) by the first thread that fails.
    pub failed: AtomicBool,
    pub error: Mutex<Option<NetError>>,
    /// Tells every thread to return.
    pub abort: AtomicBool,
    /// With tracing on: when each slot's last piece finished (`CLOCK_MONOTONIC` ns).
    pub handed_ns: Option<Box<[AtomicU64; NET_MAX_REQUESTS]>>,
}

#[derive(Debug, Default)]
struct Inbox {
    /// Newly queued pieces, per socket of this thread.
    queues: Mutex<Vec<VecDeque<Piece>>>,
    wake: Condvar,
    /// Pieces queued so far: the thread looks at this without the lock while it spins.
    posted: AtomicU64,
    /// Set (under the lock) while the thread waits on `wake`.
    sleeping: AtomicBool,
}

/// The threads of one connection and the queues that feed them.
#[derive(Debug)]
pub(super) struct DataThreads {
    shared: Arc<DataShared>,
    inboxes: Vec<Arc<Inbox>>,
    handles: Vec<JoinHandle<()>>,
    sockets: usize,
}

impl DataThreads {
    /// Starts `threads` threads over `sockets` (socket `i` goes to thread `i % threads`).
    pub fn start(
        sockets: Vec<TcpStream>,
        threads: usize,
        direction: Direction,
        peer: SocketAddr,
        local: &LocalSettings,
        stamp: bool,
    ) -> Result<Self, NetError> {
        let shared = Arc::new(DataShared {
            pending: std::array::from_fn(|_| AtomicUsize::new(0)),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            abort: AtomicBool::new(false),
            handed_ns: stamp.then(|| Box::new(std::array::from_fn(|_| AtomicU64::new(0)))),
        });
        let nsockets = sockets.len();
        let threads = threads.clamp(1, nsockets.max(1));
        let mut per_thread: Vec<Vec<(usize, TcpStream)>> =
            (0..threads).map(|_| Vec::new()).collect();
        for (i, s) in sockets.into_iter().enumerate() {
            per_thread[i % threads].push((i, s));
        }
        let mut this = DataThreads {
            shared,
            inboxes: Vec::new(),
            handles: Vec::new(),
            sockets: nsockets,
        };
        for (t, socks) in per_thread.into_iter().enumerate() {
            let inbox = Arc::new(Inbox {
                queues: Mutex::new(socks.iter().map(|_| VecDeque::new()).collect()),
                wake: Condvar::new(),
                posted: AtomicU64::new(0),
                sleeping: AtomicBool::new(false),
            });
            let worker = Worker {
                sockets: socks,
                inbox: Arc::clone(&inbox),
                shared: Arc::clone(&this.shared),
                direction,
                peer,
                spin: local.spin,
            };
            let name = format!(
                "weft-sock-{}{t}",
                if direction == Direction::Send {
                    "tx"
                } else {
                    "rx"
                }
            );
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker.run())
                .map_err(|e| {
                    NetError::io("start a socket helper thread", &e)
                        .hint("the process may be out of threads; lower NCCL_SOCKET_NTHREADS")
                });
            match handle {
                Ok(h) => {
                    this.inboxes.push(inbox);
                    this.handles.push(h);
                }
                Err(e) => {
                    this.stop();
                    return Err(e);
                }
            }
        }
        Ok(this)
    }

    pub fn shared(&self) -> &Arc<DataShared> {
        &self.shared
    }

    /// How many data sockets the connection has.
    pub fn sockets(&self) -> usize {
        self.sockets
    }

    /// Queues `piece` on data socket `socket`. The caller has already counted it in
    /// `pending[piece.slot]`.
    pub fn enqueue(&self, socket: usize, piece: Piece) {
        let threads = self.inboxes.len().max(1);
        let Some(inbox) = self.inboxes.get(socket % threads) else {
            return;
        };
        let mut queues = inbox.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(q) = queues.get_mut(socket / threads) {
            q.push_back(piece);
        }
        inbox.posted.fetch_add(1, Ordering::Release);
        // The thread sets `sleeping` under this lock and checks its queues before it waits:
        // either it saw this piece, or it is asleep and `sleeping` is already true here.
        let sleeping = inbox.sleeping.load(Ordering::Relaxed);
        drop(queues);
        if sleeping {
            inbox.wake.notify_one();
        }
    }

    /// Stops and joins every thread (their sockets close as they return). Idempotent.
    pub fn stop(&mut self) {
        self.shared.abort.store(true, Ordering::Release);
        for inbox in &self.inboxes {
            // Take the lock so a thread between its check and its wait cannot miss this.
            drop(inbox.queues.lock().unwrap_or_else(PoisonError::into_inner));
            inbox.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            if h.join().is_err() {
                log::warn!("a socket helper thread panicked");
            }
        }
    }
}

impl Drop for DataThreads {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    sockets: Vec<(usize, TcpStream)>,
    inbox: Arc<Inbox>,
    shared: Arc<DataShared>,
    direction: Direction,
    peer: SocketAddr,
    spin: Duration,
}

/// How long a thread with work but no ready socket sleeps before looking for new pieces and
/// for an abort.
const POLL_MS: i32 = 1;
/// How long an idle thread sleeps before checking for an abort it was not woken for.
const IDLE_WAIT: Duration = Duration::from_millis(100);

impl Worker {
    fn run(self) {
        let n = self.sockets.len();
        let mut queues: Vec<VecDeque<Piece>> = (0..n).map(|_| VecDeque::new()).collect();
        let mut offsets = vec![0usize; n];
        let mut pollfds: Vec<libc::pollfd> = Vec::with_capacity(n);
        let events = match self.direction {
            Direction::Send => libc::POLLOUT,
            Direction::Recv => libc::POLLIN,
        };
        // Pieces taken from the inbox so far, and when this thread last moved bytes or took
        // a piece (it spins for `self.spin` after that before it sleeps).
        let mut taken = 0u64;
        let mut last_work = Instant::now();
        loop {
            if self.shared.abort.load(Ordering::Acquire) {
                return;
            }
            let mut have_work = queues.iter().any(|q| !q.is_empty());
            if !have_work && last_work.elapsed() < self.spin {
                // Spin: watch the counter without the lock, yielding the CPU between looks.
                while self.inbox.posted.load(Ordering::Acquire) == taken
                    && last_work.elapsed() < self.spin
                    && !self.shared.abort.load(Ordering::Relaxed)
                {
                    for _ in 0..32 {
                        std::hint::spin_loop();
                    }
                    std::thread::yield_now();
                }
            }
            if have_work && self.inbox.posted.load(Ordering::Acquire) == taken {
                // Nothing new: no need for the lock.
            } else {
                let mut inbox = self
                    .inbox
                    .queues
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let idle = !have_work && inbox.iter().all(VecDeque::is_empty);
                if idle {
                    if self.shared.abort.load(Ordering::Acquire) {
                        return;
                    }
                    self.inbox.sleeping.store(true, Ordering::Relaxed);
                    inbox = self
                        .inbox
                        .wake
                        .wait_timeout(inbox, IDLE_WAIT)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                    self.inbox.sleeping.store(false, Ordering::Relaxed);
                }
                for (local, new) in queues.iter_mut().zip(inbox.iter_mut()) {
                    if !new.is_empty() {
                        have_work = true;
                        taken += new.len() as u64;
                        local.extend(new.drain(..));
                        last_work = Instant::now();
                    }
                }
            }
            if !have_work {
                continue;
            }
            let mut progressed = false;
            for (i, (global, stream)) in self.sockets.iter().enumerate() {
                let fd = stream.as_raw_fd();
                while let Some(piece) = queues[i].front().copied() {
                    let done = offsets[i];
                    let rest = piece.len - done;
                    let addr = piece.addr + done;
                    let result = match self.direction {
                        // SAFETY: `addr..addr+rest` lies inside a buffer that `isend`'s
                        // contract keeps valid and unmodified until the request completes;
                        // the request cannot complete while this piece is pending, and the
                        // comm joins this thread before it reports an error or closes.
                        Direction::Send => sys::send(fd, unsafe {
                            std::slice::from_raw_parts(addr as *const u8, rest)
                        }),
                        // SAFETY: as above, under `irecv`'s contract the buffer is writable
                        // and used by no one else until the request completes.
                        Direction::Recv => sys::recv(fd, unsafe {
                            std::slice::from_raw_parts_mut(addr as *mut u8, rest)
                        }),
                    };
                    match result {
                        Ok(0) => {
                            self.fail(
                                NetError::new(
                                    NetErrorKind::PeerClosed,
                                    format!(
                                        "{} data socket {global}: the peer closed the connection \
                                         with {rest} of {} bytes of a piece left",
                                        self.verb(),
                                        piece.len
                                    ),
                                )
                                .peer(self.peer)
                                .hint(
                                    "the peer process exited or closed its comm; look at its log",
                                ),
                            );
                            return;
                        }
                        Ok(moved) => {
                            progressed = true;
                            last_work = Instant::now();
                            offsets[i] = done + moved;
                            if offsets[i] == piece.len {
                                offsets[i] = 0;
                                queues[i].pop_front();
                                self.piece_done(piece.slot);
                            }
                        }
                        Err(e) if sys::would_block(&e) => break,
                        Err(e) => {
                            self.fail(
                                NetError::io(format!("{} data socket {global}", self.verb()), &e)
                                    .peer(self.peer)
                                    .hint("the peer or the network failed; look at the peer's log and at `ip link`"),
                            );
                            return;
                        }
                    }
                }
            }
            if !progressed && last_work.elapsed() < self.spin {
                // The kernel's buffers are full (or empty): try again soon rather than sleep.
                std::thread::yield_now();
            } else if !progressed {
                pollfds.clear();
                for (i, (_, stream)) in self.sockets.iter().enumerate() {
                    if !queues[i].is_empty() {
                        pollfds.push(libc::pollfd {
                            fd: stream.as_raw_fd(),
                            events,
                            revents: 0,
                        });
                    }
                }
                if !pollfds.is_empty() {
                    if let Err(e) = sys::poll(&mut pollfds, POLL_MS) {
                        self.fail(NetError::io("poll data sockets", &e).peer(self.peer));
                        return;
                    }
                }
            }
        }
    }

    /// Counts a finished piece against its request (stamping the time of the last one when
    /// tracing).
    fn piece_done(&self, slot: usize) {
        let Some(p) = self.shared.pending.get(slot) else {
            return;
        };
        // Pieces of one request finish on several threads: the latest stamp is the last piece's.
        if let Some(t) = self.shared.handed_ns.as_ref().and_then(|s| s.get(slot)) {
            t.fetch_max(sys::monotonic_ns(), Ordering::Relaxed);
        }
        p.fetch_sub(1, Ordering::Release);
    }

    fn verb(&self) -> &'static str {
        match self.direction {
            Direction::Send => "send on",
            Direction::Recv => "receive on",
        }
    }

    fn fail(&self, err: NetError) {
        let mut slot = self
            .shared
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(err);
        }
        self.shared.failed.store(true, Ordering::Release);
        self.shared.abort.store(true, Ordering::Release);
    }
}
