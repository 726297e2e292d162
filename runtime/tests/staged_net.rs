//! Staged NET connections (the GPU path's NET transport) over SocketNet on loopback, with
//! CPU threads playing the sending and receiving kernels on the staging areas exactly as
//! the kernels do (size and tag, then the tail's release; the head's release once read):
//! every byte, size and tag checked over many wraps of the FIFO; a peer that goes away
//! reaches the other side's failure hook with an error naming it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use weft_runtime::conn::{AbortFlag, ConnId, Direction};
use weft_runtime::net::socket::{SocketConfig, SocketNet};
use weft_runtime::proxy::staged::{FirstFailure, Staging};
use weft_runtime::transport::staged::StagedNet;

#[path = "common/random.rs"]
mod random;
use random::message;

const STEPS: usize = 8;

fn net() -> Arc<SocketNet> {
    Arc::new(
        SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: 2,
            sockets_per_thread: 1,
            connect_timeout: Duration::from_secs(20),
            ..SocketConfig::default()
        })
        .expect("loopback socket backend"),
    )
}

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

/// Spins until `cond` holds, failing the test after 30 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::hint::spin_loop();
    }
}

fn tag_of(seed: u64, i: u64) -> u64 {
    (seed.rotate_left(17) ^ i) | 1 << 47
}

/// The sending kernel's part: `count` messages of stream `seed`, each one step.
fn play_sender(s: &Staging, seed: u64, count: u64) {
    for i in 0..count {
        if i + 1 > STEPS as u64 {
            wait_until("a free slot", || {
                s.head().load(Ordering::Acquire) >= i + 1 - STEPS as u64
            });
        }
        let data = message(seed, i, s.step_bytes());
        // SAFETY: the slot is free (head) and lies inside the area.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), s.slot_ptr(i as usize), data.len()) };
        s.size(i as usize)
            .store(data.len() as u32, Ordering::Relaxed);
        s.tag(i as usize).store(tag_of(seed, i), Ordering::Relaxed);
        s.tail().store(i + 1, Ordering::Release);
    }
}

/// The receiving kernel's part: checks every byte and tag of `count` messages.
fn play_receiver(s: &Staging, seed: u64, count: u64) {
    for i in 0..count {
        wait_until("a step", || s.tail().load(Ordering::Acquire) > i);
        let want = message(seed, i, s.step_bytes());
        // SAFETY: the tail published the slot; it lies inside the area.
        let got = unsafe { std::slice::from_raw_parts(s.slot_ptr(i as usize), want.len()) };
        assert!(got == &want[..], "stream {seed:#x} step {i}: bytes differ");
        assert_eq!(
            s.tag(i as usize).load(Ordering::Relaxed),
            tag_of(seed, i),
            "step {i}: tag"
        );
        s.head().store(i + 1, Ordering::Release);
    }
}

#[test]
fn steps_cross_the_network_intact_over_many_wraps() {
    let (a, b) = (staged_net(), staged_net());
    let channels = 3;
    let count = 200;
    let step_bytes = 64 << 10;
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
            scope.spawn(move || play_sender(send, seed, count));
            scope.spawn(move || play_receiver(recv, seed, count));
        }
    });
    assert_eq!(failures.get(), None);
    for (send, recv) in &pairs {
        send.close();
        recv.close();
    }
    assert!(
        a.wait_idle(Duration::from_secs(10)),
        "send links did not finish"
    );
    assert!(
        b.wait_idle(Duration::from_secs(10)),
        "receive links did not finish"
    );
}

#[test]
fn a_vanished_receiver_is_named_on_the_sending_side() {
    let a = staged_net();
    let b = staged_net();
    let step_bytes = 16 << 10;
    let sender_failure = FirstFailure::default();
    let send = Arc::new(Staging::on_heap(STEPS, step_bytes, sender_failure.hook(|| {})).unwrap());
    let recv = Arc::new(Staging::on_heap(STEPS, step_bytes, Arc::new(|_: &str| {})).unwrap());
    let handle = b
        .recv(conn(1, 0, 0, Direction::Recv), recv.clone())
        .unwrap();
    a.send(
        conn(0, 1, 0, Direction::Send),
        handle.as_bytes(),
        send.clone(),
    )
    .unwrap();
    // A few steps go through, then the receiving rank's proxy goes away with its process's
    // communicator while the sender keeps posting.
    thread::scope(|scope| {
        scope.spawn(|| play_sender(&send, 7, 4));
        scope.spawn(|| play_receiver(&recv, 7, 4));
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
