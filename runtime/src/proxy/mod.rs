//! The proxy progress thread: moves NET connections' FIFO slots over a [`Net`] backend.
//!
//! NCCL's `proxy.cc` counterpart. Executors only ever touch FIFOs in local memory; for each
//! NET connection a link holds the other end of that FIFO and a network comm, and one
//! thread per [`NetProxy`] (one per communicator) progresses every link in turn, never
//! blocking on one: each `progress` posts what can be posted and tests what is in flight.
//!
//! Idle policy: after a pass that moved nothing the thread spins briefly, then yields, then
//! sleeps [`IDLE_SLEEP`] between passes (or until a new link arrives), so that ranks
//! oversubscribing a few cores are not starved by their own proxies; after [`LONG_IDLE`]
//! without progress it sleeps [`LONG_IDLE_SLEEP`]. [`NetProxy::wake`] (a GPU launch that
//! will use staged FIFOs) starts the policy over, as progress does.
//!
//! Failures: a network error, a connect or accept deadline, or a protocol violation fails
//! that link: the cause (naming the peer rank and address) is recorded in the FIFO and the
//! proxy's abort bit raised, so the executor's wait ends at once with
//! [`ConnError::Failed`](crate::conn::ConnError::Failed). The communicator's
//! [`AbortFlag`] fails every link and stops the thread; closing the comms tells the peers.

mod fifo_side;
mod link;
pub mod staged;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) use link::{Link, RecvLink, SendLink};
pub(crate) use staged::{StagedRecvLink, StagedSendLink};

use crate::conn::AbortFlag;
use crate::net::Net;

/// Sleep between passes once the proxy has been idle for a while.
pub const IDLE_SLEEP: Duration = Duration::from_micros(50);
/// Sleep between passes after [`LONG_IDLE`] without progress (between collectives): each
/// pass tests every posted receive, a system call or more per link, which a communicator
/// with many channels should not pay 20000 times a second while nothing happens. Costs at
/// most this much latency on the first message after a long pause.
pub const LONG_IDLE_SLEEP: Duration = Duration::from_micros(500);
/// Idleness after which the proxy sleeps [`LONG_IDLE_SLEEP`].
pub const LONG_IDLE: Duration = Duration::from_millis(20);
/// How long past its linger a stopping proxy thread may take before `Drop` leaves it behind.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// Idle passes spent spinning, then yielding, before the first sleep.
const IDLE_SPINS: u32 = 200;
const IDLE_YIELDS: u32 = 20;

struct Shared<N: Net> {
    net: Arc<N>,
    abort: AbortFlag,
    incoming: Mutex<Vec<Link<N>>>,
    has_incoming: AtomicBool,
    /// Set by `Drop`: finish the links that can finish, fail the rest after `linger`.
    stopping: AtomicBool,
    linger: Duration,
    /// Links alive on the thread (incoming included), for `wait_idle`.
    live: std::sync::atomic::AtomicUsize,
    /// Set by `wake`: work is coming (a kernel was launched), poll eagerly again.
    woken: AtomicBool,
}

/// A proxy thread progressing NET links (see the module documentation).
pub struct NetProxy<N: Net + 'static> {
    shared: Arc<Shared<N>>,
    thread: Option<JoinHandle<()>>,
}

impl<N: Net + 'static> fmt::Debug for NetProxy<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetProxy")
            .field("backend", &self.shared.net.name())
            .field("links", &self.links())
            .field("aborted", &self.shared.abort.is_aborted())
            .finish()
    }
}

impl<N: Net + 'static> NetProxy<N> {
    /// Starts the thread. `abort` is the communicator's flag: setting it fails every link.
    /// On drop, links still moving data get up to `linger` to finish before they are failed.
    pub fn start(net: Arc<N>, abort: AbortFlag, linger: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            net,
            abort,
            incoming: Mutex::new(Vec::new()),
            has_incoming: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            linger,
            live: std::sync::atomic::AtomicUsize::new(0),
            woken: AtomicBool::new(false),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("weft-net-proxy".into())
            .spawn(move || run(&for_thread))?;
        Ok(NetProxy {
            shared,
            thread: Some(thread),
        })
    }

    pub fn net(&self) -> &Arc<N> {
        &self.shared.net
    }

    /// Links not yet finished (a link finishes when its executor end is closed and its data
    /// has moved, or when it fails).
    pub fn links(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// Waits until every link has finished, up to `timeout`; whether they all did.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.links() > 0 {
            if Instant::now() >= deadline || self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return self.links() == 0;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Work is coming that no link can see yet (a GPU kernel was enqueued that will post
    /// to staged FIFOs): the thread leaves its long idle sleep and polls eagerly again, as
    /// after any progress, so the kernel's first step does not wait for a sleep to end.
    pub fn wake(&self) {
        self.shared.woken.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Hands a link to the thread. If the proxy has already stopped (abort), the link is
    /// failed at once so its executor does not wait in vain.
    pub(crate) fn add(&self, link: Link<N>) {
        self.shared.live.fetch_add(1, Ordering::AcqRel);
        let stopped = self.thread.as_ref().is_none_or(|t| t.is_finished());
        if stopped || self.shared.abort.is_aborted() {
            let mut link = link;
            link.fail(
                &self.shared.net,
                "the NET proxy thread has stopped (communicator aborted)",
            );
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.shared
            .incoming
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(link);
        self.shared.has_incoming.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

impl<N: Net + 'static> Drop for NetProxy<N> {
    /// Stops the thread: links still moving data get `linger` to finish, then fail. If the
    /// thread has not returned [`STOP_GRACE`] after that (a backend call that blocks, which
    /// the `Net` contract forbids), it is left behind with an error rather than hanging the
    /// caller; it owns everything it touches, so it can finish on its own later.
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + self.shared.linger + STOP_GRACE;
        while !t.is_finished() {
            if Instant::now() >= deadline {
                log::error!(
                    "the NET proxy thread ({} backend) did not stop within {:?} of its \
                     communicator's close: a backend call is blocking; leaving the thread behind",
                    self.shared.net.name(),
                    self.shared.linger + STOP_GRACE
                );
                return;
            }
            t.thread().unpark();
            std::thread::sleep(Duration::from_millis(1));
        }
        if t.join().is_err() {
            log::error!("the NET proxy thread panicked");
        }
    }
}

fn take_incoming<N: Net>(shared: &Shared<N>, links: &mut Vec<Link<N>>) {
    if shared.has_incoming.swap(false, Ordering::AcqRel) {
        let mut incoming = shared
            .incoming
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        links.append(&mut incoming);
        // Senders first in every pass: a kernel's newly posted step goes out before the
        // pass spends its time re-posting receives (a system call each on sockets), which
        // only need to be ahead of data that is not on its way yet.
        links.sort_by_key(|l| !l.is_send());
    }
}

fn fail_all<N: Net>(shared: &Shared<N>, links: &mut Vec<Link<N>>, cause: &str) {
    take_incoming(shared, links);
    for mut link in links.drain(..) {
        log::debug!("{}: {cause}", link.conn());
        link.fail(&shared.net, cause);
        shared.live.fetch_sub(1, Ordering::AcqRel);
    }
}

fn run<N: Net>(shared: &Shared<N>) {
    let net = &*shared.net;
    let mut links: Vec<Link<N>> = Vec::new();
    let mut idle_passes: u32 = 0;
    let mut idle_since: Option<Instant> = None;
    let mut stop_deadline: Option<Instant> = None;
    loop {
        if shared.abort.is_aborted() {
            fail_all(shared, &mut links, "aborted by this process");
            return;
        }
        take_incoming(shared, &mut links);
        if shared.woken.swap(false, Ordering::AcqRel) {
            idle_passes = 0;
            idle_since = None;
        }
        if shared.stopping.load(Ordering::Acquire) {
            let deadline = *stop_deadline.get_or_insert_with(|| Instant::now() + shared.linger);
            if links.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                fail_all(
                    shared,
                    &mut links,
                    "the NET proxy stopped (communicator destroyed) with data still in flight",
                );
                return;
            }
        }
        let mut busy = false;
        links.retain_mut(|link| {
            let keep = match link.progress(net) {
                Ok(link::Progress::Idle) => true,
                Ok(link::Progress::Busy) => {
                    busy = true;
                    true
                }
                Ok(link::Progress::Finished) => false,
                Err(cause) => {
                    log::error!("{}: {cause}", link.conn());
                    link.fail(net, &cause);
                    false
                }
            };
            if !keep {
                busy = true;
                shared.live.fetch_sub(1, Ordering::AcqRel);
            }
            keep
        });
        if busy {
            idle_passes = 0;
            idle_since = None;
            continue;
        }
        idle_passes = idle_passes.saturating_add(1);
        if idle_passes <= IDLE_SPINS {
            std::hint::spin_loop();
        } else if idle_passes <= IDLE_SPINS + IDLE_YIELDS {
            std::thread::yield_now();
        } else {
            let since = *idle_since.get_or_insert_with(Instant::now);
            let sleep = if since.elapsed() >= LONG_IDLE {
                LONG_IDLE_SLEEP
            } else {
                IDLE_SLEEP
            };
            std::thread::park_timeout(sleep);
        }
    }
}
