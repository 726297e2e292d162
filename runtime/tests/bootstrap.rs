//! Bootstrap over loopback: N ranks as threads (and, once, as processes), random data
//! checked byte for byte, and the failure cases: wrong secret, garbage and silent clients,
//! a missing rank, a rank dying mid-operation, an abort.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use weft_core::wire::bootstrap::{FrameKind, HELLO_LEN, HeaderRepr, HelloRepr, Purpose};
use weft_runtime::bootstrap::{
    AbortReason, Bootstrap, BootstrapError, BootstrapOptions, BootstrapRoot, Cancel, UniqueId,
};

/// A small seeded generator: reproducible random data without a dependency.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// What rank `rank` contributes to round `round` of a test seeded with `seed`.
fn block(seed: u64, round: u64, rank: usize) -> Vec<u8> {
    let mut rng = XorShift::new(seed ^ (round << 32) ^ rank as u64);
    // Odd sizes, empty blocks included, one larger than a socket buffer now and then.
    // Round 1 of rank 0 is always large, so every job size sends one.
    let len = match (round, rank, rng.below(10)) {
        (1, 0, _) | (_, _, 1) => 300_001,
        (_, _, 0) => 0,
        _ => rng.below(5000) as usize,
    };
    rng.bytes(len)
}

fn opts(timeout_ms: u64) -> BootstrapOptions {
    BootstrapOptions::loopback(Duration::from_millis(timeout_ms))
}

/// Starts a root and runs `body` on `ranks` threads (of `nranks` in the job); returns each
/// thread's result in rank order.
fn run_ranks<T: Send + 'static>(
    nranks: usize,
    ranks: &[usize],
    opts: &BootstrapOptions,
    body: impl Fn(usize, Result<Bootstrap, BootstrapError>) -> T + Send + Sync + 'static,
) -> (UniqueId, Vec<T>) {
    let (id, _root) = BootstrapRoot::start(opts).unwrap();
    let body = Arc::new(body);
    let handles: Vec<_> = ranks
        .iter()
        .map(|&rank| {
            let body = Arc::clone(&body);
            let opts = opts.clone();
            thread::spawn(move || body(rank, Bootstrap::init(&id, rank, nranks, &opts)))
        })
        .collect();
    (id, handles.into_iter().map(|h| h.join().unwrap()).collect())
}

#[test]
fn all_gather_barrier_broadcast_send_recv_for_1_to_8_ranks() {
    for n in 1..=8usize {
        let seed = 0x5eed_0000 + n as u64;
        let (_, results) = run_ranks(
            n,
            &(0..n).collect::<Vec<_>>(),
            &opts(20_000),
            move |rank, b| {
                let mut b = b.unwrap();
                assert_eq!((b.rank(), b.nranks(), b.peer_addrs().len()), (rank, n, n));
                for round in 0..3 {
                    let all = b.all_gather(&block(seed, round, rank)).unwrap();
                    assert_eq!(all.len(), n);
                    for (r, got) in all.iter().enumerate() {
                        assert!(
                            *got == block(seed, round, r),
                            "n={n} round {round}: block of rank {r} differs at rank {rank}"
                        );
                    }
                    b.barrier().unwrap();
                }
                // Every rank sends tags 7, 8, 9 to every rank (itself included), and receives
                // them in the opposite order: messages with other tags must wait.
                for peer in 0..n {
                    for tag in [7u32, 8, 9] {
                        let msg = block(seed ^ 0xabc, u64::from(tag), rank * 64 + peer);
                        b.send(peer, tag, &msg).unwrap();
                    }
                }
                for peer in (0..n).rev() {
                    for tag in [9u32, 8, 7] {
                        let got = b.recv(peer, tag).unwrap();
                        assert!(
                            got == block(seed ^ 0xabc, u64::from(tag), peer * 64 + rank),
                            "n={n}: message {peer}->{rank} tag {tag} differs"
                        );
                    }
                }
                // Two messages with the same tag arrive in order.
                let next = (rank + 1) % n;
                b.send(next, 3, b"first").unwrap();
                b.send(next, 3, b"second").unwrap();
                let prev = (rank + n - 1) % n;
                assert_eq!(b.recv(prev, 3).unwrap(), b"first");
                assert_eq!(b.recv(prev, 3).unwrap(), b"second");
                // Broadcast among the even ranks, rooted at the highest one.
                let evens: Vec<usize> = (0..n).filter(|r| r % 2 == 0).collect();
                let root = *evens.last().unwrap();
                if rank % 2 == 0 {
                    let data = if rank == root {
                        block(seed, 99, root)
                    } else {
                        b"ignored".to_vec()
                    };
                    assert_eq!(
                        b.broadcast(root, &evens, &data).unwrap(),
                        block(seed, 99, root)
                    );
                }
                b.barrier().unwrap();
                rank
            },
        );
        assert_eq!(results, (0..n).collect::<Vec<_>>());
    }
}

fn hello_frame(secret: [u8; 16], rank: u32, nranks: u32, purpose: Purpose) -> Vec<u8> {
    let header = HeaderRepr {
        kind: FrameKind::Hello,
        rank,
        tag: 0,
        length: HELLO_LEN as u32,
    };
    let mut out = header.to_bytes().unwrap().to_vec();
    let mut body = [0u8; HELLO_LEN];
    HelloRepr {
        secret,
        nranks,
        purpose,
    }
    .emit(&mut body)
    .unwrap();
    out.extend_from_slice(&body);
    out
}

/// True once the server has closed `stream` (EOF or reset) within `within`.
fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn wrong_secret_is_rejected_while_ranks_complete() {
    let n = 3;
    let opts = opts(10_000);
    let (id, root) = BootstrapRoot::start(&opts).unwrap();
    // An impostor claiming rank 0, with the wrong secret, before the real ranks arrive.
    let mut wrong = id.to_bytes();
    wrong[32] ^= 1;
    let wrong_secret: [u8; 16] = wrong[32..48].try_into().unwrap();
    let mut impostor = TcpStream::connect(id.root_addr()).unwrap();
    impostor
        .write_all(&hello_frame(wrong_secret, 0, n as u32, Purpose::Root))
        .unwrap();
    assert!(
        closed_by_server(&mut impostor, Duration::from_secs(3)),
        "root kept a wrong-secret client"
    );

    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let opts = opts.clone();
            thread::spawn(move || {
                let mut b = Bootstrap::init(&id, rank, n, &opts).unwrap();
                // An impostor at a rank's own port is turned away too.
                let mut at_rank = TcpStream::connect(b.listen_addr()).unwrap();
                at_rank
                    .write_all(&hello_frame(wrong_secret, 0, n as u32, Purpose::Data))
                    .unwrap();
                assert!(closed_by_server(&mut at_rank, Duration::from_secs(3)));
                let all = b.all_gather(&[rank as u8; 5]).unwrap();
                assert_eq!(all, (0..n).map(|r| vec![r as u8; 5]).collect::<Vec<_>>());
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    root.wait().unwrap();
}

#[test]
fn garbage_and_silent_clients_do_not_stall_init() {
    let n = 4;
    let opts = opts(10_000);
    let start = Instant::now();
    let (id, root) = BootstrapRoot::start(&opts).unwrap();
    let mut rng = XorShift::new(42);
    // Connected before any rank: a silent client, one sending random bytes, one sending a
    // valid-looking header that promises a huge body, and one that half-closes at once.
    let silent = TcpStream::connect(id.root_addr()).unwrap();
    let mut garbage = TcpStream::connect(id.root_addr()).unwrap();
    garbage.write_all(&rng.bytes(1000)).unwrap();
    let mut liar = TcpStream::connect(id.root_addr()).unwrap();
    let header = HeaderRepr {
        kind: FrameKind::Hello,
        rank: 0,
        tag: 0,
        length: 1 << 30,
    };
    liar.write_all(&header.to_bytes().unwrap()).unwrap();
    let quitter = TcpStream::connect(id.root_addr()).unwrap();
    quitter.shutdown(std::net::Shutdown::Write).unwrap();

    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let opts = opts.clone();
            thread::spawn(move || {
                let mut b = Bootstrap::init(&id, rank, n, &opts).unwrap();
                // The same at the rank's own port, then real traffic.
                let _silent = TcpStream::connect(b.listen_addr()).unwrap();
                let mut junk = TcpStream::connect(b.listen_addr()).unwrap();
                junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
                let all = b.all_gather(&block(7, 0, rank)).unwrap();
                for (r, got) in all.iter().enumerate() {
                    assert!(*got == block(7, 0, r));
                }
                b.send((rank + 1) % n, 1, &[rank as u8]).unwrap();
                assert_eq!(
                    b.recv((rank + n - 1) % n, 1).unwrap(),
                    [((rank + n - 1) % n) as u8]
                );
                b.barrier().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    root.wait().unwrap();
    // The handshake deadline is 5 s: finishing well before it shows nobody waited on the
    // silent clients.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "took {:?}",
        start.elapsed()
    );
    drop(silent);
}

#[test]
fn missing_rank_fails_the_others_naming_it() {
    let n = 4;
    let start = Instant::now();
    let (_, results) = run_ranks(n, &[0, 1, 3], &opts(1_000), |_, b| b.map(drop).unwrap_err());
    for err in &results {
        assert_eq!(err.culprit(), Some(2), "{err}");
        let text = err.to_string();
        assert!(text.contains("rank(s) [2] never connected"), "{text}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn rank_dying_mid_all_gather_is_named_by_the_others() {
    let n = 5;
    let dead = 2;
    let start = Instant::now();
    let (_, results) = run_ranks(
        n,
        &(0..n).collect::<Vec<_>>(),
        &opts(10_000),
        move |rank, b| {
            let mut b = b.unwrap();
            b.all_gather(&block(1, 0, rank)).unwrap();
            if rank == dead {
                // Dies before the second all-gather: its sockets close.
                drop(b);
                return None;
            }
            Some(b.all_gather(&block(1, 1, rank)).unwrap_err())
        },
    );
    for (rank, err) in results.iter().enumerate() {
        let Some(err) = err else { continue };
        assert_eq!(err.culprit(), Some(dead), "rank {rank}: {err}");
        assert!(err.to_string().contains("rank 2"), "rank {rank}: {err}");
        if rank == dead + 1 {
            assert!(
                matches!(err, BootstrapError::PeerLost { .. }),
                "rank {rank}: {err:?}"
            );
        }
    }
    // The failure goes round the ring at once, nobody waits for the 10 s timeout.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn silent_peer_times_out_naming_it() {
    let n = 3;
    let gate = Arc::new(Barrier::new(n));
    let (_, results) = run_ranks(n, &[0, 1, 2], &opts(1500), move |rank, b| {
        let mut b = b.unwrap();
        gate.wait();
        if rank == 1 {
            // Alive but never joins the all-gather.
            thread::sleep(Duration::from_millis(3500));
            return None;
        }
        Some(b.all_gather(b"x").unwrap_err())
    });
    // Rank 2 waits on rank 1; rank 0 gets rank 2's abort naming 1 (or times out on 2).
    let err2 = results[2].as_ref().unwrap();
    assert!(matches!(err2, BootstrapError::Timeout { .. }), "{err2:?}");
    assert_eq!(err2.culprit(), Some(1), "{err2}");
    let err0 = results[0].as_ref().unwrap();
    assert_eq!(err0.culprit(), Some(1), "{err0}");
}

#[test]
fn abort_reaches_every_rank() {
    let n = 4;
    let done = Arc::new(Barrier::new(n));
    let (_, results) = run_ranks(
        n,
        &(0..n).collect::<Vec<_>>(),
        &opts(10_000),
        move |rank, b| {
            let mut b = b.unwrap();
            if rank == 0 {
                b.abort("test says stop");
            }
            let err = b.all_gather(b"y").unwrap_err();
            // Rank 0 stays alive until all have failed: its abort message, not its closed
            // sockets, is what the others must report.
            done.wait();
            err
        },
    );
    assert!(
        matches!(results[0], BootstrapError::Poisoned(_)),
        "{:?}",
        results[0]
    );
    for err in &results[1..] {
        assert!(err.to_string().contains("test says stop"), "{err}");
    }
}

/// A rank that aborts its own communicator (as a shrink's excluded rank does) is gone for
/// waits on it, but the ranks that stay can still agree among themselves, as NCCL's shrink
/// needs; a wait on the aborted rank names it at once, with its words.
#[test]
fn the_ranks_that_stay_agree_after_one_aborts() {
    let n = 4;
    let gone = 1;
    let aborted = Arc::new(Barrier::new(n));
    let (_, results) = run_ranks(
        n,
        &(0..n).collect::<Vec<_>>(),
        &opts(10_000),
        move |rank, b| {
            let mut b = b.unwrap();
            b.all_gather(&block(3, 0, rank)).unwrap();
            // Every rank has a data connection to every other one (the aborting rank's
            // abort travels on each of them).
            for peer in (0..n).filter(|&p| p != rank) {
                b.send(peer, 7, &[rank as u8]).unwrap();
            }
            for peer in (0..n).filter(|&p| p != rank) {
                assert_eq!(b.recv(peer, 7).unwrap(), [peer as u8]);
            }
            if rank == gone {
                b.abort("left out by a shrink");
                aborted.wait();
                // Stays alive until the others are done: its abort, not closed sockets, is
                // what they see.
                aborted.wait();
                return None;
            }
            aborted.wait();
            std::thread::sleep(Duration::from_millis(100));
            let survivors = [0, 2, 3];
            let got = b.broadcast(0, &survivors, b"new root id").unwrap();
            let start = Instant::now();
            let err = b.recv(gone, 8).unwrap_err();
            assert!(start.elapsed() < Duration::from_secs(5));
            aborted.wait();
            Some((got, err))
        },
    );
    for (rank, r) in results.iter().enumerate() {
        let Some((got, err)) = r else { continue };
        assert_eq!(got, b"new root id", "rank {rank}");
        assert_eq!(err.culprit(), Some(gone), "rank {rank}: {err}");
        assert!(
            err.to_string().contains("left out by a shrink"),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn abort_handle_wakes_a_blocked_recv() {
    let (_, results) = run_ranks(2, &[0, 1], &opts(20_000), |rank, b| {
        let mut b = b.unwrap();
        if rank == 0 {
            let handle = b.abort_handle();
            let t = thread::spawn(move || {
                thread::sleep(Duration::from_millis(200));
                handle.abort("shutting down");
            });
            let start = Instant::now();
            let err = b.recv(1, 5).unwrap_err();
            t.join().unwrap();
            assert!(start.elapsed() < Duration::from_secs(5));
            Some(err)
        } else {
            None
        }
    });
    let err = results[0].as_ref().unwrap();
    assert!(
        matches!(err, BootstrapError::Aborted { .. }) && err.to_string().contains("shutting down"),
        "{err:?}"
    );
}

/// A cancelled token ends an init that waits for a rank that never comes (libnccl's
/// abort of a non-blocking init), long before the deadline, and the waits of the
/// bootstrap it made later; a token cancelled first fails the init at once.
#[test]
fn cancel_ends_an_init_waiting_for_an_absent_rank_and_later_waits() {
    let cancel = Cancel::new();
    let mut o = opts(20_000);
    o.cancel = Some(cancel.clone());
    let (id, _root) = BootstrapRoot::start(&o).unwrap();
    let waiting = {
        let o = o.clone();
        thread::spawn(move || Bootstrap::init(&id, 0, 2, &o))
    };
    thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    cancel.cancel("ncclCommAbort");
    let err = waiting.join().unwrap().map(drop).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, BootstrapError::Aborted { .. }) && err.to_string().contains("ncclCommAbort"),
        "{err:?}"
    );
    // Cancelled already: a new init with it fails at once.
    let start = Instant::now();
    let (id2, _root2) = BootstrapRoot::start(&o).unwrap();
    let err = Bootstrap::init(&id2, 0, 2, &o).map(drop).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(err, BootstrapError::Aborted { .. }), "{err:?}");

    // After init: a receive waiting on a silent peer ends when the token is cancelled.
    let cancel = Cancel::new();
    let mut o = opts(20_000);
    o.cancel = Some(cancel.clone());
    let (_, results) = run_ranks(2, &[0, 1], &o, move |rank, b| {
        let mut b = b.unwrap();
        if rank == 0 {
            let start = Instant::now();
            let err = b.recv(1, 5).unwrap_err();
            Some((err, start.elapsed()))
        } else {
            thread::sleep(Duration::from_millis(300));
            cancel.cancel("giving up");
            None
        }
    });
    let (err, took) = results[0].as_ref().unwrap();
    assert!(*took < Duration::from_secs(5), "{took:?}");
    assert!(matches!(err, BootstrapError::Aborted { .. }), "{err:?}");
}

/// A named exchange's failure names it: a rank that stops answering half-way through an
/// init is found at its step.
#[test]
fn a_named_all_gather_names_its_step_when_a_peer_is_silent() {
    let (_, results) = run_ranks(2, &[0, 1], &opts(1_000), |rank, b| {
        let mut b = b.unwrap();
        if rank == 0 {
            Some(
                b.all_gather_for(b"mine", "init's all_gather of the windows")
                    .unwrap_err()
                    .to_string(),
            )
        } else {
            thread::sleep(Duration::from_millis(2_500));
            None
        }
    });
    let text = results[0].as_ref().unwrap();
    assert!(
        text.contains("init's all_gather of the windows") && text.contains("rank 1"),
        "{text}"
    );
}

/// A released token leaves the bootstraps it guarded alone: libnccl releases its init's
/// token once the init ends, so an abort during a later background finalize does not cut
/// the bootstrap the communicator's teardown still needs.
#[test]
fn a_released_cancel_leaves_a_finished_init_alone() {
    let cancel = Cancel::new();
    let mut o = opts(10_000);
    o.cancel = Some(cancel.clone());
    let (_, results) = run_ranks(2, &[0, 1], &o, move |rank, b| {
        let mut b = b.unwrap();
        if rank == 0 {
            cancel.release();
            cancel.cancel("too late");
        }
        b.barrier()
            .and_then(|()| b.barrier())
            .map_err(|e| e.to_string())
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// A teardown's barrier (`part`) meets only other teardowns: a peer still waiting in a
/// barrier fails at once naming the rank that left, instead of taking its teardown for
/// its partner (which let an init complete on the ranks whose peer had failed it).
#[test]
fn part_meets_parts_only_and_fails_a_peer_still_in_a_barrier() {
    let (_, results) = run_ranks(3, &[0, 1, 2], &opts(10_000), |_, b| {
        let mut b = b.unwrap();
        b.part().map_err(|e| e.to_string())
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let (_, results) = run_ranks(2, &[0, 1], &opts(10_000), |rank, b| {
        let mut b = b.unwrap();
        let start = Instant::now();
        let outcome = if rank == 0 { b.part() } else { b.barrier() };
        (outcome, start.elapsed())
    });
    let (barrier, took) = &results[1];
    let err = barrier.as_ref().unwrap_err();
    assert_eq!(err.culprit(), Some(0), "{err}");
    assert!(
        err.to_string().contains("tore its communicator down"),
        "{err}"
    );
    assert!(*took < Duration::from_secs(5), "{took:?}");
    assert!(results[0].0.is_err(), "the teardown met a barrier");
}

#[test]
fn duplicate_rank_and_disagreeing_sizes_are_reported() {
    let (_, results) = run_ranks(3, &[0, 1, 1], &opts(5_000), |_, b| b.map(drop).unwrap_err());
    for err in &results {
        assert!(
            matches!(
                err,
                BootstrapError::Aborted {
                    reason: AbortReason::Inconsistent,
                    culprit: Some(1),
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("rank 1 checked in twice"), "{err}");
    }

    let opts = opts(5_000);
    let (id, root) = BootstrapRoot::start(&opts).unwrap();
    let handles: Vec<_> = [(0, 2), (1, 3)]
        .into_iter()
        .map(|(rank, nranks)| {
            let opts = opts.clone();
            thread::spawn(move || {
                Bootstrap::init(&id, rank, nranks, &opts)
                    .map(drop)
                    .unwrap_err()
            })
        })
        .collect();
    for h in handles {
        let err = h.join().unwrap();
        assert!(
            err.to_string()
                .contains("ranks but the first rank to check in said"),
            "{err}"
        );
    }
    assert!(root.wait().is_err());
}

#[test]
fn recv_from_a_peer_that_left_fails_naming_it() {
    let (_, results) = run_ranks(3, &[0, 1, 2], &opts(10_000), |rank, b| {
        let mut b = b.unwrap();
        b.barrier().unwrap();
        if rank == 2 {
            b.send(0, 4, b"last words").unwrap();
            return None;
        }
        if rank == 1 {
            return None;
        }
        // Queued messages are still delivered after the sender is gone...
        assert_eq!(b.recv(2, 4).unwrap(), b"last words");
        // ...then asking for more names it instead of waiting for the timeout.
        let start = Instant::now();
        let err = b.recv(2, 5).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        Some(err)
    });
    let err = results[0].as_ref().unwrap();
    assert!(matches!(err, BootstrapError::PeerLost { .. }), "{err:?}");
    assert_eq!(err.culprit(), Some(2));
    assert!(err.to_string().contains("rank 2 at 127.0.0.1:"), "{err}");
}

#[test]
fn unreachable_root_names_it() {
    // A port nobody listens on: bind, note the address, close.
    let addr: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let id = UniqueId::from_parts(addr, [9; 16]);
    let err = Bootstrap::init(&id, 0, 2, &opts(300)).unwrap_err();
    assert!(matches!(err, BootstrapError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

// ---- multi-process ----

const CHILD_ID: &str = "WEFT_TEST_BOOTSTRAP_ID";
const CHILD_RANK: &str = "WEFT_TEST_BOOTSTRAP_RANK";
const CHILD_NRANKS: &str = "WEFT_TEST_BOOTSTRAP_NRANKS";
const CHILD_EXIT_EARLY: &str = "WEFT_TEST_BOOTSTRAP_EXIT_EARLY";

/// Entry point of the child processes that `ranks_as_processes` starts; ignored in a normal
/// run. Exits with 0 when the all-gather checks out, 3 when it fails naming the rank given
/// in WEFT_TEST_BOOTSTRAP_EXIT_EARLY, and panics (101) otherwise.
#[test]
#[ignore = "run by ranks_as_processes in child processes"]
fn child_rank() {
    let id = UniqueId::from_hex(&std::env::var(CHILD_ID).unwrap()).unwrap();
    let rank: usize = std::env::var(CHILD_RANK).unwrap().parse().unwrap();
    let n: usize = std::env::var(CHILD_NRANKS).unwrap().parse().unwrap();
    let early: Option<usize> = std::env::var(CHILD_EXIT_EARLY)
        .ok()
        .map(|v| v.parse().unwrap());
    let mut b = Bootstrap::init(&id, rank, n, &opts(10_000)).unwrap();
    b.barrier().unwrap();
    if early == Some(rank) {
        // Dies abruptly, without any cleanup.
        std::process::exit(7);
    }
    match b.all_gather(&block(11, 0, rank)) {
        Ok(all) => {
            for (r, got) in all.iter().enumerate() {
                assert!(
                    *got == block(11, 0, r),
                    "rank {rank}: block of rank {r} differs"
                );
            }
            std::process::exit(0);
        }
        Err(e) if e.culprit().is_some() && e.culprit() == early => std::process::exit(3),
        Err(e) => panic!("rank {rank}: {e}"),
    }
}

fn spawn_children(id: &UniqueId, n: usize, early: Option<usize>) -> Vec<std::process::ExitStatus> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|rank| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--ignored",
                "--exact",
                "child_rank",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ID, id.to_hex())
            .env(CHILD_RANK, rank.to_string())
            .env(CHILD_NRANKS, n.to_string());
            if let Some(e) = early {
                cmd.env(CHILD_EXIT_EARLY, e.to_string());
            }
            cmd.spawn().unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|mut c| c.wait().unwrap())
        .collect()
}

#[test]
fn ranks_as_processes() {
    let n = 3;
    let (id, root) = BootstrapRoot::start(&opts(10_000)).unwrap();
    let status = spawn_children(&id, n, None);
    assert!(status.iter().all(|s| s.code() == Some(0)), "{status:?}");
    root.wait().unwrap();

    // A process that exits mid-job: the survivors fail naming it (exit code 3).
    let (id, root) = BootstrapRoot::start(&opts(10_000)).unwrap();
    let start = Instant::now();
    let status = spawn_children(&id, n, Some(1));
    let codes: Vec<_> = status.iter().map(|s| s.code()).collect();
    assert_eq!(codes, [Some(3), Some(7), Some(3)]);
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "took {:?}",
        start.elapsed()
    );
    root.wait().unwrap();
}

#[test]
fn handles_move_between_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send::<Bootstrap>();
    send_and_sync::<UniqueId>();
    send_and_sync::<weft_runtime::bootstrap::AbortHandle>();
    send_and_sync::<BootstrapError>();
    // And a bootstrap made on one thread works on another.
    let (_, results) = run_ranks(2, &[0, 1], &opts(10_000), |rank, b| {
        let b = b.unwrap();
        thread::spawn(move || {
            let mut b = b;
            b.all_gather(&[rank as u8; 3]).unwrap()
        })
        .join()
        .unwrap()
    });
    assert_eq!(results[0], vec![vec![0u8; 3], vec![1u8; 3]]);
    assert_eq!(results[1], results[0]);
}
