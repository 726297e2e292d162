//! The root rendezvous: one listening socket where every rank checks in with the secret and
//! its own listening address; once all have, the root tells each rank where its ring
//! neighbour listens, then goes away. NCCL's `bootstrapRoot`.
//!
//! Robustness rules (NCCL issue 1808): the accept loop never reads from a client. Each
//! accepted connection gets its own short-lived thread with a handshake deadline, so a port
//! scanner, a silent client or garbage only costs that thread, and ranks carry on.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use weft_core::wire::bootstrap::{
    AbortReason, AbortRepr, FrameKind, HelloRepr, Purpose, RING_INFO_LEN, ROOT_SENDER,
    RingInfoRepr, SECRET_LEN, SOCK_ADDR_LEN, SockAddrRepr, secrets_match, truncate_text,
};

use super::frame::{ReadFail, read_frame, write_frame};
use super::{BootstrapError, BootstrapOptions};

/// Connections still proving themselves at once; more are closed right away (a flood of
/// silent clients must not exhaust threads).
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 128;
/// Missing ranks named in one error (a job of 100k ranks that never started needs no list).
/// How long the root keeps telling late ranks about an inconsistency it already found.
const LATE_RANK_GRACE: Duration = Duration::from_secs(5);
const MAX_LISTED_MISSING: usize = 64;

/// A rank that proved the secret and told us where it listens.
struct CheckIn {
    rank: usize,
    nranks: usize,
    listen: SocketAddr,
    stream: TcpStream,
}

/// Accepts connections until `stop` is set, handing each to `handle` on its own thread.
/// The loop itself never reads from a client.
pub(crate) fn spawn_accept_loop<F>(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    who: String,
    handle: F,
) -> std::io::Result<thread::JoinHandle<()>>
where
    F: Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let pending = Arc::new(AtomicUsize::new(0));
    thread::Builder::new()
        .name("weft-bootstrap-accept".into())
        .spawn(move || {
            loop {
                let accepted = listener.accept();
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let (stream, from) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        log::warn!("{who}: accept failed: {e}");
                        // EMFILE and friends: back off instead of spinning.
                        thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                if pending.load(Ordering::Acquire) >= MAX_PENDING_HANDSHAKES {
                    log::warn!(
                        "{who}: dropping connection from {from}: {MAX_PENDING_HANDSHAKES} others are still handshaking"
                    );
                    continue;
                }
                pending.fetch_add(1, Ordering::AcqRel);
                let handle = Arc::clone(&handle);
                let pending_done = Arc::clone(&pending);
                let spawned = thread::Builder::new()
                    .name("weft-bootstrap-conn".into())
                    .spawn(move || {
                        handle(stream, from);
                        pending_done.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    pending.fetch_sub(1, Ordering::AcqRel);
                    log::warn!("{who}: cannot start a thread for {from}: {e}");
                }
            }
        })
}

/// Wakes an accept loop blocked in `accept` after its stop flag was set.
pub(crate) fn wake_accept_loop(addr: SocketAddr) {
    let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
}

/// Reads the hello of an accepted connection and checks the secret. Logs and returns None
/// for anything else: the caller just drops the connection.
pub(crate) fn accept_hello(
    stream: &mut TcpStream,
    from: SocketAddr,
    secret: &[u8; SECRET_LEN],
    deadline: Instant,
    stop: &AtomicBool,
    who: &str,
) -> Option<(u32, HelloRepr)> {
    let _ = stream.set_nodelay(true);
    let frame = read_frame(
        stream,
        Some(deadline),
        stop,
        weft_core::wire::bootstrap::HELLO_LEN as u32,
    );
    let (header, body) = match frame {
        Ok(f) => f,
        Err(ReadFail::Stopped) => return None,
        Err(ReadFail::Timeout) => {
            log::warn!(
                "{who}: closed connection from {from}: no hello within the handshake deadline"
            );
            return None;
        }
        Err(e) => {
            log::warn!("{who}: closed connection from {from}: not a weft bootstrap client ({e:?})");
            return None;
        }
    };
    if header.kind != FrameKind::Hello {
        log::warn!(
            "{who}: closed connection from {from}: first frame is {:?}, not a hello",
            header.kind
        );
        return None;
    }
    let hello = match HelloRepr::parse(&body) {
        Ok(h) => h,
        Err(e) => {
            log::warn!("{who}: closed connection from {from}: bad hello: {e}");
            return None;
        }
    };
    if !secrets_match(&hello.secret, secret) {
        log::warn!(
            "{who}: rejected connection from {from} (claims rank {}): wrong secret. A process \
             from another job or an old unique id is connecting here",
            header.rank
        );
        return None;
    }
    Some((header.rank, hello))
}

/// Sends an abort frame, best effort (the peer may be gone).
pub(crate) fn send_abort(
    stream: &mut TcpStream,
    sender: u32,
    culprit: Option<usize>,
    reason: AbortReason,
    text: &str,
) {
    let repr = AbortRepr {
        culprit: culprit.and_then(|c| u32::try_from(c).ok()),
        reason,
        text: truncate_text(text),
    };
    let mut body = vec![0u8; repr.buffer_len()];
    if repr.emit(&mut body).is_ok() {
        let _ = write_frame(
            stream,
            FrameKind::Abort,
            sender,
            0,
            &body,
            Duration::from_secs(1),
        );
    }
}

/// The handshake thread of one root connection: hello (purpose root), then the rank's
/// listening address.
fn root_handshake(
    mut stream: TcpStream,
    from: SocketAddr,
    secret: [u8; SECRET_LEN],
    deadline: Instant,
    stop: &AtomicBool,
    tx: mpsc::Sender<CheckIn>,
) {
    let who = "bootstrap root";
    let Some((rank, hello)) = accept_hello(&mut stream, from, &secret, deadline, stop, who) else {
        return;
    };
    if hello.purpose != Purpose::Root {
        log::warn!(
            "{who}: closed connection from {from}: {:?} connection sent to the root",
            hello.purpose
        );
        return;
    }
    let addr = match read_frame(&mut stream, Some(deadline), stop, SOCK_ADDR_LEN as u32) {
        Ok((h, body)) if h.kind == FrameKind::PeerAddress && h.rank == rank => {
            SockAddrRepr::parse(&body).map(|a| a.0)
        }
        Ok((h, _)) => {
            log::warn!("{who}: closed connection from {from}: expected its address, got {h:?}");
            return;
        }
        Err(e) => {
            log::warn!("{who}: closed connection from {from} (rank {rank}): no address: {e:?}");
            return;
        }
    };
    match addr {
        Ok(listen) => {
            let _ = tx.send(CheckIn {
                rank: rank as usize,
                nranks: hello.nranks as usize,
                listen,
                stream,
            });
        }
        Err(e) => log::warn!("{who}: closed connection from {from}: bad address: {e}"),
    }
}

/// A running root rendezvous. Dropping it leaves the root running in the background until
/// it finishes or gives up; [`BootstrapRoot::wait`] joins it and returns its outcome.
#[derive(Debug)]
pub struct BootstrapRoot {
    addr: SocketAddr,
    thread: thread::JoinHandle<Result<(), BootstrapError>>,
}

impl BootstrapRoot {
    /// Binds `listener` (already listening) and serves one rendezvous of up to
    /// `opts.timeout` after the first rank checks in (and `opts.root_idle_timeout` for the
    /// first one).
    pub(crate) fn spawn(
        listener: TcpListener,
        secret: [u8; SECRET_LEN],
        opts: &BootstrapOptions,
    ) -> Result<Self, BootstrapError> {
        let addr = listener
            .local_addr()
            .map_err(|source| BootstrapError::Local {
                what: "reading the root's listening address".into(),
                source,
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let handshake = opts.handshake_timeout;
        let conn_stop = Arc::clone(&stop);
        let accept = spawn_accept_loop(
            listener,
            Arc::clone(&stop),
            format!("bootstrap root {addr}"),
            move |stream, from| {
                root_handshake(
                    stream,
                    from,
                    secret,
                    Instant::now() + handshake,
                    &conn_stop,
                    tx.clone(),
                );
            },
        )
        .map_err(|source| BootstrapError::Local {
            what: "starting the root's accept thread".into(),
            source,
        })?;
        let timeout = opts.timeout;
        let idle = opts.root_idle_timeout;
        let thread = thread::Builder::new()
            .name("weft-bootstrap-root".into())
            .spawn(move || {
                let result = coordinate(addr, &rx, timeout, idle);
                stop.store(true, Ordering::Release);
                wake_accept_loop(addr);
                // Not joined (see AcceptGuard): a failed wake-up must not hang the root.
                drop(accept);
                match &result {
                    // An id nobody used (one of ncclCommInitRankScalable's extra roots, or
                    // an id a program made and dropped): nobody waits on this root.
                    Err(e @ BootstrapError::MissingRanks { missing, .. }) if missing.is_empty() => {
                        log::info!("{e}");
                    }
                    Err(e) => log::warn!("{e}"),
                    Ok(()) => {}
                }
                result
            })
            .map_err(|source| BootstrapError::Local {
                what: "starting the root thread".into(),
                source,
            })?;
        Ok(BootstrapRoot { addr, thread })
    }

    /// Where the root listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for the rendezvous to end: Ok once every rank got its ring neighbour.
    pub fn wait(self) -> Result<(), BootstrapError> {
        self.thread.join().unwrap_or_else(|_| {
            Err(BootstrapError::Poisoned(
                "the bootstrap root thread panicked".into(),
            ))
        })
    }
}

/// Collects check-ins until all ranks are in (then sends ring info) or the deadline passes
/// (then aborts everyone who came, naming who did not).
fn coordinate(
    root: SocketAddr,
    rx: &mpsc::Receiver<CheckIn>,
    timeout: Duration,
    idle: Duration,
) -> Result<(), BootstrapError> {
    let started = Instant::now();
    let mut deadline = started + idle;
    let mut first_at: Option<Instant> = None;
    // A map, not a Vec sized by the first rank's nranks: that number comes off the wire.
    let mut slots: BTreeMap<usize, CheckIn> = BTreeMap::new();
    let mut nranks = 0usize;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let check_in = match rx.recv_timeout(left) {
            Ok(c) => c,
            Err(_) => {
                let missing: Vec<usize> = if slots.is_empty() {
                    Vec::new()
                } else {
                    (0..nranks)
                        .filter(|r| !slots.contains_key(r))
                        .take(MAX_LISTED_MISSING)
                        .collect()
                };
                let waited = first_at.map_or(started.elapsed(), |t| t.elapsed());
                let err = BootstrapError::MissingRanks {
                    missing: missing.clone(),
                    root,
                    waited,
                };
                let text = err.to_string();
                for c in slots.values_mut() {
                    send_abort(
                        &mut c.stream,
                        ROOT_SENDER,
                        missing.first().copied(),
                        AbortReason::MissingRank,
                        &text,
                    );
                }
                return Err(err);
            }
        };
        if first_at.is_none() {
            first_at = Some(Instant::now());
            deadline = Instant::now() + timeout;
            nranks = check_in.nranks;
        }
        let inconsistent = if check_in.nranks != nranks {
            Some(format!(
                "rank {} says there are {} ranks but the first rank to check in said {nranks}",
                check_in.rank, check_in.nranks
            ))
        } else if check_in.rank >= nranks {
            Some(format!(
                "rank {} is out of range for {nranks} ranks",
                check_in.rank
            ))
        } else if slots.contains_key(&check_in.rank) {
            Some(format!(
                "rank {} checked in twice (two processes were given the same rank)",
                check_in.rank
            ))
        } else {
            None
        };
        if let Some(text) = inconsistent {
            let mut all: Vec<CheckIn> = std::mem::take(&mut slots).into_values().collect();
            all.push(check_in);
            let culprit = all.last().map(|c| c.rank);
            for c in &mut all {
                send_abort(
                    &mut c.stream,
                    ROOT_SENDER,
                    culprit,
                    AbortReason::Inconsistent,
                    &text,
                );
            }
            // Ranks still on their way must hear the same verdict, not a reset connection:
            // answer late check-ins until every expected rank has been told, or a short
            // grace ends (a rank that never comes then fails on its own deadline).
            let grace_end = Instant::now() + timeout.min(LATE_RANK_GRACE);
            let mut answered = all.len();
            while answered < nranks {
                let left = grace_end.saturating_duration_since(Instant::now());
                let Ok(mut late) = rx.recv_timeout(left) else {
                    break;
                };
                send_abort(
                    &mut late.stream,
                    ROOT_SENDER,
                    culprit,
                    AbortReason::Inconsistent,
                    &text,
                );
                answered += 1;
            }
            return Err(BootstrapError::Aborted {
                by: None,
                culprit,
                reason: AbortReason::Inconsistent,
                text,
            });
        }
        log::debug!(
            "bootstrap root {root}: rank {} checked in from {}",
            check_in.rank,
            check_in.listen
        );
        let rank = check_in.rank;
        slots.insert(rank, check_in);
        if slots.len() == nranks {
            break;
        }
    }
    // Everyone is in: tell each rank where the next one listens.
    // All ranks 0..nranks are present (each was checked to be in range and new).
    let listens: Vec<SocketAddr> = slots.values().map(|c| c.listen).collect();
    for (&rank, c) in slots.iter_mut() {
        let next = (rank + 1) % nranks;
        let Some(&next_addr) = listens.get(next) else {
            continue;
        };
        let info = RingInfoRepr {
            next_rank: next as u32,
            nranks: nranks as u32,
            next_addr,
        };
        let mut body = [0u8; RING_INFO_LEN];
        let sent = info
            .emit(&mut body)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|_| {
                write_frame(
                    &mut c.stream,
                    FrameKind::RingInfo,
                    ROOT_SENDER,
                    0,
                    &body,
                    timeout,
                )
            });
        if let Err(e) = sent {
            // That rank will time out itself; the others proceed and will find it gone.
            log::warn!("bootstrap root {root}: cannot send ring info to rank {rank}: {e}");
        }
    }
    Ok(())
}
