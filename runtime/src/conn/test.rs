//! Two threads over a process-local FIFO: data, wraps, back-pressure, abort, deadline.

use std::time::{Duration, Instant};

use weft_core::fifo::FifoGeometry;

use super::*;

/// xorshift64*: a seeded generator, so a receiver can regenerate what the sender sent.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % (n as u64)) as usize
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// Message `i` of a stream: its size (0..=max, mostly odd) and its bytes.
fn message(seed: u64, i: u64, max: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407));
    let len = match rng.below(8) {
        0 => max,
        1 => 0,
        _ => rng.below(max + 1) | 1,
    }
    .min(max);
    let mut data = vec![0; len];
    rng.fill(&mut data);
    data
}

fn conn() -> ConnId {
    ConnId {
        transport: "local",
        rank: 0,
        peer: 1,
        channel: 3,
        dir: Direction::Send,
    }
}

fn waiter(timeout: Duration) -> Waiter {
    Waiter {
        policy: WaitPolicy::default().with_timeout(timeout),
        ..Waiter::default()
    }
}

/// Streams `count` messages through a fresh pair, the receiver pausing every `pause_every`
/// messages; checks every byte and every size.
fn stream(layout: FifoLayout, geometry: FifoGeometry, count: u64, seed: u64, pause_every: u64) {
    let (mut send, mut recv) = local_pair(layout, conn(), waiter(Duration::from_secs(60))).unwrap();
    send.reload(geometry).unwrap();
    recv.reload(geometry).unwrap();
    let max = send.slice_bytes();
    assert_eq!(max, recv.slice_bytes());
    let sender = std::thread::spawn(move || {
        for i in 0..count {
            send.send(&message(seed, i, max)).unwrap();
        }
        send.posted_step()
    });
    let mut out = vec![0u8; max];
    for i in 0..count {
        if pause_every != 0 && i % pause_every == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        let got = recv.recv_into(&mut out).unwrap();
        let want = message(seed, i, max);
        assert_eq!(got, want.len(), "size of message {i}");
        assert!(out[..got] == want[..], "bytes of message {i}");
    }
    let steps = sender.join().unwrap();
    assert_eq!(steps, recv.posted_step());
    assert_eq!(steps, count * geometry.step_per_slice());
}

#[test]
fn odd_sizes_across_many_wraps() {
    let layout = FifoLayout::new(8, 4160).unwrap();
    // 3000 slices over 8 slots: 375 trips round the ring.
    stream(layout, FifoGeometry::P2P, 3000, 0x5eed, 0);
}

#[test]
fn two_steps_per_slice_and_fewer_slots() {
    let layout = FifoLayout::new(4, 1344).unwrap();
    let geometry = FifoGeometry::new(4, 2, 2).unwrap();
    stream(layout, geometry, 2001, 77, 0);
}

#[test]
fn fast_sender_waits_for_a_slow_receiver() {
    let layout = FifoLayout::new(8, 192).unwrap();
    stream(layout, FifoGeometry::P2P, 400, 3, 7);
}

/// Twelve busy threads on a machine of a few cores: the spin/yield/sleep backoff lets every
/// pair progress (a waiter that only spun would starve the peer sharing its core).
#[test]
fn oversubscribed_pairs_all_finish() {
    let layout = FifoLayout::new(8, 1088).unwrap();
    let pairs: Vec<_> = (0..6)
        .map(|seed| std::thread::spawn(move || stream(layout, FifoGeometry::P2P, 700, seed, 0)))
        .collect();
    for pair in pairs {
        pair.join().unwrap();
    }
}

#[test]
fn sender_gets_no_ninth_slot_until_one_is_released() {
    let (mut send, mut recv) = local_pair(
        FifoLayout::new(8, 64).unwrap(),
        conn(),
        waiter(Duration::from_secs(5)),
    )
    .unwrap();
    for i in 0..8u8 {
        send.send(&[i; 17]).unwrap();
    }
    assert!(
        send.try_acquire().unwrap().is_none(),
        "a 9th slot would overwrite slot 0"
    );
    // Read without releasing: still no credit.
    assert_eq!(recv.try_acquire().unwrap().unwrap().data(), &[0u8; 17]);
    assert!(send.try_acquire().unwrap().is_none());
    // The dropped grant comes back unchanged, and releasing it frees exactly one slot.
    let slot = recv.try_acquire().unwrap().unwrap();
    assert_eq!((slot.step(), slot.data()), (0, &[0u8; 17][..]));
    slot.release().unwrap();
    let mut slot = send.try_acquire().unwrap().unwrap();
    assert_eq!(slot.step(), 8);
    slot.buf()[..3].copy_from_slice(b"new");
    slot.post(3).unwrap();
    for i in 1..8u8 {
        assert_eq!(recv.recv_with(|d| d.to_vec()).unwrap(), vec![i; 17]);
    }
    assert_eq!(recv.recv_with(|d| d.to_vec()).unwrap(), b"new");
}

#[test]
fn abort_flag_ends_a_blocked_wait_promptly() {
    let w = waiter(Duration::from_secs(60));
    let abort = w.abort.clone();
    let (_send, mut recv) = local_pair(FifoLayout::new(8, 64).unwrap(), conn(), w).unwrap();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        abort.abort();
    });
    let start = Instant::now();
    let err = recv.acquire().map(|_| ()).unwrap_err();
    let waited = start.elapsed();
    aborter.join().unwrap();
    assert_eq!(
        err,
        ConnError::Aborted {
            conn: ConnId {
                dir: Direction::Recv,
                ..conn()
            },
            by: AbortSource::Local
        }
    );
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

#[test]
fn a_local_abort_reaches_the_peer_blocked_on_credit() {
    let region = FifoRegion::local(FifoLayout::new(8, 64).unwrap()).unwrap();
    let recv_waiter = waiter(Duration::from_secs(60));
    let abort = recv_waiter.abort.clone();
    let mut recv = region.recv_end(conn(), recv_waiter);
    let mut send = region.send_end(conn(), waiter(Duration::from_secs(60)));
    for _ in 0..8 {
        send.send(b"x").unwrap();
    }
    let sender = std::thread::spawn(move || {
        let start = Instant::now();
        // The ring is full: only the receiver can end this wait.
        let err = send.acquire().map(|_| ()).unwrap_err();
        (err, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    abort.abort();
    // Data is waiting, but an aborted communicator stops at its next acquire.
    let err = recv.acquire().map(|_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::Aborted {
                by: AbortSource::Local,
                ..
            }
        ),
        "{err}"
    );
    let (err, waited) = sender.join().unwrap();
    assert_eq!(
        err,
        ConnError::Aborted {
            conn: ConnId {
                dir: Direction::Send,
                ..conn()
            },
            by: AbortSource::Peer
        }
    );
    assert!(err.to_string().contains("aborted by rank 1"), "{err}");
    assert!(waited < Duration::from_secs(5), "abort took {waited:?}");
}

#[test]
fn a_deadline_names_the_peer_and_channel() {
    let (mut send, mut recv) = local_pair(
        FifoLayout::new(8, 64).unwrap(),
        conn(),
        waiter(Duration::from_millis(200)),
    )
    .unwrap();
    let start = Instant::now();
    let err = recv.acquire().map(|_| ()).unwrap_err();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    match &err {
        ConnError::Timeout {
            conn: c,
            waiting_for,
            step,
            peer_counter,
            ..
        } => {
            assert_eq!((c.peer, c.channel, c.dir), (1, 3, Direction::Recv));
            assert_eq!((*waiting_for, *step, *peer_counter), (WaitFor::Data, 0, 0));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("rank 1 -> rank 0, channel 3"), "{text}");
    assert!(text.contains("WEFT_CONN_TIMEOUT"), "{text}");
    // The timed-out receiver raised its abort bit: the sender stops too.
    let err = send.send(b"y").unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::Aborted {
                by: AbortSource::Peer,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_closed_sender_leaves_its_data_then_ends_the_wait() {
    let (mut send, mut recv) = local_pair(
        FifoLayout::new(8, 64).unwrap(),
        conn(),
        waiter(Duration::from_secs(60)),
    )
    .unwrap();
    for i in 0..3u8 {
        send.send(&[i; 5]).unwrap();
    }
    drop(send);
    for i in 0..3u8 {
        assert_eq!(recv.recv_with(|d| d.to_vec()).unwrap(), vec![i; 5]);
    }
    let err = recv.acquire().map(|_| ()).unwrap_err();
    assert_eq!(
        err,
        ConnError::PeerClosed {
            conn: ConnId {
                dir: Direction::Recv,
                ..conn()
            },
            waiting_for: WaitFor::Data
        }
    );
}

#[test]
fn oversize_posts_and_short_buffers_are_refused() {
    let (mut send, mut recv) = local_pair(
        FifoLayout::new(8, 128).unwrap(),
        conn(),
        waiter(Duration::from_secs(5)),
    )
    .unwrap();
    let err = send.send(&[1; 129]).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::Oversize {
                bytes: 129,
                capacity: 128,
                ..
            }
        ),
        "{err}"
    );
    let slot = send.acquire().unwrap();
    assert!(matches!(
        slot.post(200),
        Err(ConnError::Oversize { bytes: 200, .. })
    ));
    // The failed post kept the grant: the same slice is posted now.
    send.send(&[7; 100]).unwrap();
    let mut small = [0u8; 99];
    let err = recv.recv_into(&mut small).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::Oversize {
                bytes: 100,
                capacity: 99,
                ..
            }
        ),
        "{err}"
    );
    let mut big = [0u8; 128];
    assert_eq!(recv.recv_into(&mut big).unwrap(), 100);
    assert_eq!(&big[..100], &[7u8; 100][..]);
    assert_eq!(recv.posted_step(), 1);
}

#[test]
fn layouts_out_of_range_are_refused() {
    assert!(FifoLayout::new(8, 100).is_err());
    assert!(FifoLayout::new(6, 128).is_err());
    assert!(FifoLayout::new(16, 128).is_err());
    assert!(FifoLayout::new(8, 0).is_err());
    assert!(FifoLayout::new(8, 1 << 29).is_err());
    assert_eq!(
        FifoLayout::new(8, 192).unwrap().total_bytes(),
        4096 + 8 * 192
    );
}

#[test]
fn attach_refuses_memory_that_is_not_a_fifo() {
    let mem = std::sync::Arc::new(HeapMemory::zeroed(8192).unwrap());
    let err = FifoRegion::attach(mem, conn()).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::BadMemory {
                what: "magic",
                found: 0,
                ..
            }
        ),
        "{err}"
    );
}
