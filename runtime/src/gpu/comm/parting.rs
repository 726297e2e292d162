//! Teardown without waiting for peers: what peers write into is freed once they let go.
//!
//! A peer may still touch this rank's windows and peer region after this rank's own calls
//! have ended: the credits and flags of a connection's last steps, and in read mode the
//! peer reads the last steps out of this rank's window. With CUDA IPC, freeing memory that
//! another process still maps is undefined. NCCL's finalize and destroy wait for no peer
//! (its cuMem allocations stay alive while a peer maps them); weft's windows are
//! `cuMemAlloc`ed and IPC-shared, so teardown hands them to a thread of their own, which
//! frees them once every rank has torn its side down (a bootstrap barrier: each rank tears
//! down after its own work ended, so no peer touches them any more) or has gone (its
//! connection closed), and otherwise about a bootstrap timeout later (a peer that never
//! tears down: PyTorch destroys a subgroup on one rank while another rank runs on, and
//! long before then that rank's last writes have landed). The teardown's barrier is a
//! bootstrap operation of its own (`Bootstrap::part`): a peer still waiting in another
//! exchange (an init's last barrier) fails, naming this rank, rather than completing.
//! The rest of the communicator's memory goes the same way: a free waits for the whole
//! GPU, which another communicator's kernel may keep busy.
//!
//! A process that exits frees everything with it, thread or not, and a peer still reading
//! this rank's window at that moment (read mode's last steps, microseconds after this
//! rank's last call) would fault: NCCL's cuMem allocations outlive the exporting process,
//! weft's `cuMemAlloc` ones do not. So a program's exit waits a little for the teardowns
//! in flight ([`wait_for_teardowns_at_exit`], which libnccl registers with `atexit`): when
//! every rank tears down, as jobs end, they complete within milliseconds. Those still
//! waiting after that leave their memory to the exit rather than call a driver that is
//! shutting down.
//!
//! The caller never waits for a peer: `ncclCommFinalize` and `ncclCommDestroy` return once
//! this rank's own work has ended, as NCCL's do.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::bootstrap::{Bootstrap, BootstrapError};

/// Teardowns whose thread has not freed its memory yet, and the condition their end
/// signals.
static IN_FLIGHT: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// The process that counted teardowns (0: none yet): a forked child inherits the count
/// but neither the threads nor, perhaps, a free lock, and must not wait.
static COUNTED_IN: AtomicU32 = AtomicU32::new(0);

/// Set once the exit has waited: teardown threads still running leave their memory to the
/// process's end.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Waits up to `limit` for every teardown in flight to free its memory; returns how many
/// still have not.
fn wait_for_teardowns(limit: Duration) -> usize {
    let counted_in = COUNTED_IN.load(Ordering::Acquire);
    if counted_in == 0 || counted_in != std::process::id() {
        return 0;
    }
    let (count, ended) = &IN_FLIGHT;
    let until = Instant::now() + limit;
    let mut left = count.lock().unwrap_or_else(PoisonError::into_inner);
    while *left > 0 {
        let now = Instant::now();
        if now >= until {
            break;
        }
        left = ended
            .wait_timeout(left, until - now)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|p| p.into_inner().0);
    }
    *left
}

/// Waits up to `limit` for the teardowns in flight, at the process's exit; returns how many
/// still have not freed their memory. Those do not afterwards: the exit does, and the CUDA
/// driver may be shutting down.
pub fn wait_for_teardowns_at_exit(limit: Duration) -> usize {
    let left = wait_for_teardowns(limit);
    EXITING.store(true, Ordering::Release);
    left
}

/// Counts one teardown in flight for as long as it lives.
struct InFlight;

impl InFlight {
    fn start() -> InFlight {
        let mut count = IN_FLIGHT.0.lock().unwrap_or_else(PoisonError::into_inner);
        *count += 1;
        COUNTED_IN.store(std::process::id(), Ordering::Release);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (count, ended) = &IN_FLIGHT;
        let mut left = count.lock().unwrap_or_else(PoisonError::into_inner);
        *left = left.saturating_sub(1);
        ended.notify_all();
    }
}

/// Drops `held` (the communicator's memory) once every rank of `bootstrap` has called this
/// too, or is gone, or a bootstrap timeout or so later; on a thread of its own, so the
/// caller returns at once. `rank` names this rank in the log.
pub(super) fn free_once_peers_part<T: Send + 'static>(
    mut bootstrap: Bootstrap,
    rank: usize,
    held: T,
) {
    let counted = InFlight::start();
    let part = move || {
        match bootstrap.part() {
            Ok(()) => {}
            Err(BootstrapError::PeerLost { peer, .. }) => log::debug!(
                "weft: rank {rank}: teardown: {peer} is gone; freeing this rank's windows"
            ),
            // A peer still uses the communicator (or never tears down): its last writes
            // have long landed, but say so.
            Err(e) => log::info!(
                "weft: rank {rank}: teardown: not every rank tore its side down ({e}); \
                 freeing this rank's windows now"
            ),
        }
        if EXITING.load(Ordering::Acquire) {
            // The process is ending: its end frees everything.
            std::mem::forget(held);
        } else {
            drop(held);
        }
        drop(bootstrap);
        drop(counted);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("weft-parting".to_string())
        .spawn(part)
    {
        // `spawn` dropped the closure, and with it what it held: freed now.
        log::warn!("weft: rank {rank}: teardown thread: {e}; freed this rank's windows at once");
    }
}

#[cfg(test)]
mod test {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::bootstrap::{BootstrapOptions, BootstrapRoot};

    /// Sets its flag when dropped: stands for a rank's windows.
    struct Held(Arc<AtomicBool>);

    impl Drop for Held {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    fn ranks(n: usize, timeout: Duration) -> Vec<Bootstrap> {
        let opts = BootstrapOptions::loopback(timeout);
        let (id, _root) = BootstrapRoot::start(&opts).unwrap();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|r| {
                    let (id, opts) = (&id, &opts);
                    s.spawn(move || Bootstrap::init(id, r, n, opts).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn freed_within(flag: &AtomicBool, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if flag.load(Ordering::Acquire) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        flag.load(Ordering::Acquire)
    }

    #[test]
    fn held_memory_goes_once_every_rank_parted_and_nobody_waits() {
        let mut ranks = ranks(3, Duration::from_secs(20));
        let flags: Vec<_> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let third = ranks.pop().unwrap();
        for (r, b) in ranks.into_iter().enumerate() {
            let t = Instant::now();
            free_once_peers_part(b, r, Held(flags[r].clone()));
            assert!(t.elapsed() < Duration::from_secs(1), "rank {r} waited");
        }
        // Rank 2 has not torn down: the others keep what it may still write into.
        std::thread::sleep(Duration::from_millis(300));
        assert!(flags.iter().all(|f| !f.load(Ordering::Acquire)));
        free_once_peers_part(third, 2, Held(flags[2].clone()));
        for (r, f) in flags.iter().enumerate() {
            assert!(
                freed_within(f, Duration::from_secs(5)),
                "rank {r} kept its memory"
            );
        }
    }

    #[test]
    fn an_exit_can_wait_for_the_teardowns_in_flight() {
        let mut ranks = ranks(2, Duration::from_secs(20));
        let flags: Vec<_> = (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let second = ranks.pop().unwrap();
        free_once_peers_part(ranks.pop().unwrap(), 0, Held(flags[0].clone()));
        // Other tests' teardowns may be in flight too: only "not all done" is certain.
        assert!(wait_for_teardowns(Duration::from_millis(100)) >= 1);
        free_once_peers_part(second, 1, Held(flags[1].clone()));
        let t = Instant::now();
        while !flags.iter().all(|f| f.load(Ordering::Acquire)) {
            assert!(t.elapsed() < Duration::from_secs(5), "never freed");
            wait_for_teardowns(Duration::from_millis(50));
        }
    }

    #[test]
    fn a_peer_that_is_gone_lets_the_memory_go_at_once() {
        let mut ranks = ranks(2, Duration::from_secs(20));
        let gone = ranks.pop().unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        free_once_peers_part(ranks.pop().unwrap(), 0, Held(flag.clone()));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!flag.load(Ordering::Acquire));
        // Its process exited: its connections closed.
        drop(gone);
        assert!(freed_within(&flag, Duration::from_secs(5)));
    }

    #[test]
    fn a_peer_that_never_parts_holds_the_memory_until_the_deadline() {
        let mut ranks = ranks(2, Duration::from_secs(1));
        let _stays = ranks.pop().unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        let t = Instant::now();
        free_once_peers_part(ranks.pop().unwrap(), 0, Held(flag.clone()));
        assert!(freed_within(&flag, Duration::from_secs(10)));
        assert!(
            t.elapsed() >= Duration::from_millis(900),
            "freed after {:?}, before the deadline",
            t.elapsed()
        );
    }
}
