//! Staged NET connections (the GPU path's NET transport) over SocketNet on loopback, with
//! CPU threads playing the sending and receiving kernels on the staging areas exactly as
//! the kernels do (size and tag, then the tail's release; the head's release once read):
//! every byte and tag checked over many wraps of the FIFO; a peer that goes away
//! reaches the other side's failure hook with an error naming it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use weft_runtime::conn::{AbortFlag, ConnId, Direction};
use weft_runtime::net::socket::SocketNet;
use weft_runtime::proxy::staged::{FirstFailure, Staging, StepMover};
use weft_runtime::transport::staged::StagedNet;

#[path = "common/random.rs"]
mod random;
#[path = "common/staged_kernel.rs"]
mod staged_kernel;
use staged_kernel::{play_receiver, play_sender};

const STEPS: usize = 8;

#[path = "common/loopback.rs"]
mod loopback;
use loopback::socket_net as net;

#[path = "common/checking_net.rs"]
#[allow(dead_code)]
mod checking;

fn staged_net() -> StagedNet<SocketNet> {
    StagedNet::new(
        net(),
        0,
        AbortFlag::new(),
        Duration::from_secs(20),
        Duration::from_secs(2),
    )
    .unwrap()
}

fn conn(rank: u32, peer: u32, channel: u32, dir: Direction) -> ConnId {
    ConnId {
        transport: "NET",
        rank,
        peer,
        channel,
        dir,
    }
}

/// Connects `send` on `a` (rank 0) to `recv` on `b` (rank 1), channel 0: the receiver
/// listens and hands its handle over (the bootstrap's part, in a communicator).
fn connect<N: weft_runtime::net::Net + 'static>(
    a: &StagedNet<N>,
    b: &StagedNet<N>,
    send: &Arc<Staging>,
    recv: &Arc<Staging>,
) {
    let handle = b
        .recv(conn(1, 0, 0, Direction::Recv), recv.clone())
        .unwrap();
    a.send(
        conn(0, 1, 0, Direction::Send),
        handle.as_bytes(),
        send.clone(),
    )
    .unwrap();
}

/// How long a played kernel waits for its peer before the test fails.
const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn steps_cross_the_network_intact_over_many_wraps() {
    stream_and_check(staged_net(), staged_net(), 64 << 10);
}

/// The same through a backend that holds requests in flight for a while and checks that
/// no slot is written while its send is in flight, both with grouped receives (header and
/// bytes in one) and without (`max_recvs` 1, as NCCL's socket plugin: one receive each,
/// posted in order); sends go through `Net::isend_batch`'s default, one `isend` each.
#[test]
fn steps_cross_a_slow_backend_with_and_without_grouped_receives() {
    for single_receives in [false, true] {
        let checking = || {
            let mut n = checking::CheckingNet::new(std::sync::Arc::into_inner(net()).unwrap());
            n.single_receives = single_receives;
            Arc::new(n)
        };
        let (na, nb) = (checking(), checking());
        let staged = |n: &Arc<checking::CheckingNet>| {
            StagedNet::new(
                Arc::clone(n),
                0,
                AbortFlag::new(),
                Duration::from_secs(20),
                Duration::from_secs(2),
            )
            .unwrap()
        };
        stream_and_check(staged(&na), staged(&nb), 4 << 10);
        assert!(na.sends_checked.load(Ordering::Relaxed) > 0);
        assert_eq!(
            na.overwritten.load(Ordering::Relaxed),
            0,
            "a slot changed in flight"
        );
    }
}

/// Three channels of 200 steps from `a` to `b`, every byte and tag checked, then both
/// sides finish cleanly (see the comments below).
fn stream_and_check<N: weft_runtime::net::Net + 'static>(
    a: StagedNet<N>,
    b: StagedNet<N>,
    step_bytes: usize,
) {
    let channels = 3;
    let count = 200;
    let failures = FirstFailure::default();
    let mut pairs = Vec::new();
    for c in 0..channels {
        let hook = failures.hook(|| {});
        let recv = Arc::new(Staging::on_heap(STEPS, step_bytes, hook.clone()).unwrap());
        let send = Arc::new(Staging::on_heap(STEPS, step_bytes, hook).unwrap());
        // The receiver listens first and hands its handle over (bootstrap, in a communicator).
        let handle = b
            .recv(conn(1, 0, c, Direction::Recv), recv.clone())
            .unwrap();
        a.send(
            conn(0, 1, c, Direction::Send),
            handle.as_bytes(),
            send.clone(),
        )
        .unwrap();
        pairs.push((send, recv));
    }
    thread::scope(|scope| {
        for (c, (send, recv)) in pairs.iter().enumerate() {
            let seed = 0x5eed + c as u64;
            scope.spawn(move || play_sender(send, seed, count, LIMIT).unwrap());
            scope.spawn(move || play_receiver(recv, seed, count, LIMIT).unwrap());
        }
    });
    assert_eq!(failures.get(), None);
    // The sending side's communicator goes first (its links finish once their last sends
    // are done, and close their comms); the receiving side, whose receives lent ahead will
    // never fill, takes that for the normal end, not a failure.
    for (send, _) in &pairs {
        send.close();
    }
    assert!(
        a.wait_idle(Duration::from_secs(10)),
        "send links did not finish"
    );
    drop(a);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        failures.get(),
        None,
        "the receiving side saw the sender's close as a failure"
    );
    for (_, recv) in &pairs {
        recv.close();
    }
    assert!(
        b.wait_idle(Duration::from_secs(10)),
        "receive links did not finish"
    );
}

/// The copy engine's part, played: each move copies the slot's bytes into `device` (where
/// the played kernel reads, as the GPU's device FIFO) and finishes only `delay` later, so
/// that the proxy must hold the step back until then.
struct DelayedCopier {
    host: Vec<usize>,
    device: Vec<Mutex<Vec<u8>>>,
    done_at: Vec<Mutex<Option<Instant>>>,
    delay: Duration,
}

impl StepMover for DelayedCopier {
    fn start(&self, slot: usize, bytes: usize) -> Result<(), String> {
        let mut dst = self.device[slot].lock().unwrap();
        dst.clear();
        // SAFETY: the slot lies in the staging area (its address taken at setup), which
        // the area keeps alive; its step arrived, and nothing receives into it until the
        // played kernel frees the step.
        dst.extend_from_slice(unsafe {
            std::slice::from_raw_parts(self.host[slot] as *const u8, bytes)
        });
        *self.done_at[slot].lock().unwrap() = Some(Instant::now() + self.delay);
        Ok(())
    }

    fn finished(&self, slot: usize) -> Result<bool, String> {
        let done_at = *self.done_at[slot].lock().unwrap();
        done_at
            .map(|t| Instant::now() >= t)
            .ok_or_else(|| format!("slot {slot}: no move started"))
    }
}

/// A receiving end whose steps a mover copies elsewhere (the GPU's copy-engine receive,
/// `WEFT_NET_RECV_COPY=1`): the played kernel reads every step from the mover's copy once
/// the tail says so, and every byte and tag is right over many wraps of the FIFO; a step
/// is never published before its move finished.
#[test]
fn moved_steps_reach_the_kernel_whole_and_in_order() {
    let (a, b) = (staged_net(), staged_net());
    let step_bytes = 16 << 10;
    let count = 300;
    let failures = FirstFailure::default();
    let send = Arc::new(Staging::on_heap(STEPS, step_bytes, failures.hook(|| {})).unwrap());
    let recv = Staging::on_heap(STEPS, step_bytes, failures.hook(|| {})).unwrap();
    let copier = Arc::new(DelayedCopier {
        host: (0..STEPS).map(|s| recv.slot_ptr(s) as usize).collect(),
        device: (0..STEPS).map(|_| Mutex::new(Vec::new())).collect(),
        done_at: (0..STEPS).map(|_| Mutex::new(None)).collect(),
        delay: Duration::from_micros(300),
    });
    let recv = Arc::new(recv.with_mover(copier.clone()));
    connect(&a, &b, &send, &recv);
    let seed = 0xc0de;
    thread::scope(|scope| {
        scope.spawn(|| play_sender(&send, seed, count, LIMIT).unwrap());
        scope.spawn(|| {
            for i in 0..count {
                let deadline = Instant::now() + LIMIT;
                while recv.tail().load(Ordering::Acquire) <= i {
                    assert!(Instant::now() < deadline, "step {i} never came");
                    std::hint::spin_loop();
                }
                let slot = (i % STEPS as u64) as usize;
                assert!(
                    copier.finished(slot).unwrap(),
                    "step {i} published before its move finished"
                );
                let want = random::message(seed, i, step_bytes);
                assert_eq!(
                    *copier.device[slot].lock().unwrap(),
                    want,
                    "step {i}'s bytes"
                );
                assert_eq!(
                    recv.tag(slot).load(Ordering::Relaxed),
                    staged_kernel::tag_of(seed, i),
                    "step {i}'s tag"
                );
                recv.head().store(i + 1, Ordering::Release);
            }
        });
    });
    assert_eq!(failures.get(), None);
    send.close();
    assert!(a.wait_idle(Duration::from_secs(10)));
    recv.close();
    assert!(b.wait_idle(Duration::from_secs(10)));
}

/// The sending side's communicator goes as soon as its last steps are on the network (its
/// sends done), before the receiving kernel has read them: every one of those steps still
/// reaches the kernel, with the kernel reading host slots and with a mover still copying
/// when the close shows.
#[test]
fn steps_sent_before_the_sender_closes_all_reach_the_kernel() {
    for delay in [None, Some(Duration::from_millis(50))] {
        let (a, b) = (staged_net(), staged_net());
        let step_bytes = 4 << 10;
        let count = STEPS as u64 - 2;
        let failures = FirstFailure::default();
        let send = Arc::new(Staging::on_heap(STEPS, step_bytes, failures.hook(|| {})).unwrap());
        let recv = Staging::on_heap(STEPS, step_bytes, failures.hook(|| {})).unwrap();
        let copier = delay.map(|delay| {
            Arc::new(DelayedCopier {
                host: (0..STEPS).map(|s| recv.slot_ptr(s) as usize).collect(),
                device: (0..STEPS).map(|_| Mutex::new(Vec::new())).collect(),
                done_at: (0..STEPS).map(|_| Mutex::new(None)).collect(),
                delay,
            })
        });
        let recv = Arc::new(match &copier {
            Some(c) => recv.with_mover(c.clone()),
            None => recv,
        });
        connect(&a, &b, &send, &recv);
        let seed = 0xc105e;
        play_sender(&send, seed, count, LIMIT).unwrap();
        let deadline = Instant::now() + LIMIT;
        while send.head().load(Ordering::Acquire) < count {
            assert!(Instant::now() < deadline, "the sends never completed");
            thread::sleep(Duration::from_millis(1));
        }
        send.close();
        assert!(a.wait_idle(Duration::from_secs(10)));
        drop(a);
        match &copier {
            None => play_receiver(&recv, seed, count, LIMIT).unwrap(),
            Some(copier) => {
                for i in 0..count {
                    while recv.tail().load(Ordering::Acquire) <= i {
                        assert!(
                            Instant::now() < deadline,
                            "step {i} never came ({:?})",
                            failures.get()
                        );
                        thread::sleep(Duration::from_millis(1));
                    }
                    let slot = i as usize % STEPS;
                    let want = random::message(seed, i, step_bytes);
                    assert_eq!(*copier.device[slot].lock().unwrap(), want, "step {i}");
                }
            }
        }
        assert_eq!(
            failures.get(),
            None,
            "the sender's close taken for a failure"
        );
        recv.close();
        assert!(b.wait_idle(Duration::from_secs(10)));
    }
}

#[test]
fn a_vanished_receiver_is_named_on_the_sending_side() {
    let a = staged_net();
    let b = staged_net();
    let step_bytes = 16 << 10;
    let sender_failure = FirstFailure::default();
    let send = Arc::new(Staging::on_heap(STEPS, step_bytes, sender_failure.hook(|| {})).unwrap());
    let recv = Arc::new(Staging::on_heap(STEPS, step_bytes, Arc::new(|_: &str| {})).unwrap());
    connect(&a, &b, &send, &recv);
    // A few steps go through, then the receiving rank's proxy goes away with its process's
    // communicator while the sender keeps posting.
    thread::scope(|scope| {
        scope.spawn(|| play_sender(&send, 7, 4, LIMIT).unwrap());
        scope.spawn(|| play_receiver(&recv, 7, 4, LIMIT).unwrap());
    });
    drop(b);
    let start = Instant::now();
    let mut i = 4u64;
    while sender_failure.get().is_none() && start.elapsed() < Duration::from_secs(20) {
        if send.head().load(Ordering::Acquire) + STEPS as u64 > i {
            send.size(i as usize)
                .store(step_bytes as u32, Ordering::Relaxed);
            send.tail().store(i + 1, Ordering::Release);
            i += 1;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let cause = sender_failure
        .get()
        .expect("the sender's proxy reports the lost peer");
    assert!(cause.contains("rank 1"), "{cause}");
}
