//! LL over a process-local connection: every length, multi-step messages, the cleaning
//! steps and the 32-bit flag wrap, back-pressure, and every way a wait ends.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weft_core::fifo::ll::{LlGeometry, LlLine};

use super::ll::restart_ll_at;
use super::*;

fn conn() -> ConnId {
    ConnId {
        transport: "local",
        rank: 0,
        peer: 1,
        channel: 2,
        dir: Direction::Send,
    }
}

fn waiter(timeout: Duration) -> Waiter {
    Waiter {
        policy: WaitPolicy::default().with_timeout(timeout),
        ..Waiter::default()
    }
}

/// 8 SIMPLE slots of 4 KiB and 8 LL steps of `ll_lines` lines.
fn pair(ll_lines: usize, timeout: Duration) -> (FifoSendEnd, FifoRecvEnd) {
    let layout = FifoLayout::new(8, 4096)
        .unwrap()
        .with_ll_lines(ll_lines)
        .unwrap();
    local_pair(layout, conn(), waiter(timeout)).unwrap()
}

/// Message `i`: a length picked among the awkward ones, bytes from `i`.
fn message(i: usize, step_bytes: usize) -> Vec<u8> {
    let lens = [
        0,
        1,
        2,
        3,
        4,
        5,
        7,
        8,
        511,
        step_bytes - 1,
        step_bytes,
        step_bytes + 3,
    ];
    let len = lens[i % lens.len()] + (i / lens.len()) % 3 * step_bytes;
    (0..len)
        .map(|k| (k.wrapping_mul(131) ^ i.wrapping_mul(7919)) as u8)
        .collect()
}

/// Streams `count` messages from a thread to this one, starting at LL step `start`; checks
/// every byte, and that both ends advanced by the same number of LL steps.
fn stream(ll_lines: usize, start: u64, count: usize) {
    let (mut send, mut recv) = pair(ll_lines, Duration::from_secs(60));
    restart_ll_at(&mut send, &mut recv, start);
    let step_bytes = send.ll_step_bytes();
    assert_eq!(step_bytes, ll_lines * 4);
    let sender = std::thread::spawn(move || {
        for i in 0..count {
            send.ll_send(&message(i, step_bytes)).unwrap();
        }
        send
    });
    for i in 0..count {
        let want = message(i, step_bytes);
        let mut got = vec![0xa5u8; want.len()];
        recv.ll_recv(&mut got).unwrap();
        assert!(
            got == want,
            "message {i} of {} bytes from step {start}",
            want.len()
        );
    }
    let send = sender.join().unwrap();
    let steps: u64 = (0..count)
        .map(|i| message(i, step_bytes).len().div_ceil(step_bytes) as u64)
        .sum();
    let head = send.side.region.header().ll_head.0.load(Ordering::Acquire);
    assert_eq!(head, start.wrapping_add(steps), "from step {start}");
}

#[test]
fn every_length_and_multi_step_messages() {
    stream(128, 0, 300);
    stream(2048, 0, 60);
}

#[test]
fn across_the_cleaning_steps_and_the_flag_wrap() {
    // 2^31 - 40: through NCCL's cleaning window (steps 0x7ffffff8..0x7fffffff); 2^32 - 40:
    // through the 32-bit flag wrap (flag 0 at step 2^32 - 1); u64::MAX - 40: the counters wrap.
    for start in [(1u64 << 31) - 40, (1u64 << 32) - 40, u64::MAX - 40] {
        stream(128, start, 120);
    }
}

#[test]
fn a_cleaning_step_rewrites_its_whole_slot() {
    let (mut send, mut recv) = pair(128, Duration::from_secs(10));
    let g = LlGeometry::nccl(128).unwrap();
    let clean = 0x7fff_fff8u64;
    assert!(g.cleans(clean) && !g.cleans(clean - 1));
    restart_ll_at(&mut send, &mut recv, clean - 1);
    let mut out = [0u8; 5];
    for step in [clean - 1, clean] {
        send.ll_send(b"hello").unwrap();
        recv.ll_recv(&mut out).unwrap();
        assert_eq!(&out, b"hello");
        let words = send.side.region.ll_words();
        let slot = &words[g.slot_of(step) * 128..][..128];
        let flags: Vec<u32> = slot
            .iter()
            .map(|w| LlLine::from_word(w.load(Ordering::Acquire)).flag.get())
            .collect();
        // Two lines carry "hello"; a cleaning step writes the other 126 with its flag too.
        let fresh = flags.iter().filter(|f| **f == g.flag(step)).count();
        assert_eq!(fresh, if step == clean { 128 } else { 2 }, "step {step:#x}");
    }
}

#[test]
fn a_sender_waits_for_ll_credit() {
    let (mut send, mut recv) = pair(128, Duration::from_secs(60));
    // 8 LL steps fill the buffer: the 9th waits until the receiver reads one.
    for i in 0..8u8 {
        send.ll_send(&[i; 9]).unwrap();
    }
    let sender = std::thread::spawn(move || {
        let start = Instant::now();
        send.ll_send(b"ninth").unwrap();
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut nine = [0u8; 9];
    for i in 0..8u8 {
        recv.ll_recv(&mut nine).unwrap();
        assert_eq!(nine, [i; 9]);
    }
    let mut five = [0u8; 5];
    recv.ll_recv(&mut five).unwrap();
    assert_eq!(&five, b"ninth");
    let waited = sender.join().unwrap();
    assert!(
        waited >= Duration::from_millis(90),
        "sent without credit after {waited:?}"
    );
}

#[test]
fn ll_waits_end_on_deadline_abort_and_close() {
    // Deadline: nothing is sent.
    let (send, mut recv) = pair(128, Duration::from_millis(200));
    let start = Instant::now();
    let err = recv.ll_recv(&mut [0u8; 8]).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(
            err,
            ConnError::Timeout {
                waiting_for: WaitFor::LlData,
                step: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("an LL line from the sender"),
        "{err}"
    );
    // The failed wait raised the receiver's abort bit: the sender's next send stops, though
    // it has credit.
    let mut send = send;
    let err = send.ll_send(b"x").unwrap_err();
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

    // A local abort ends a blocked receive promptly.
    let w = waiter(Duration::from_secs(60));
    let abort = w.abort.clone();
    let layout = FifoLayout::new(8, 4096)
        .unwrap()
        .with_ll_lines(128)
        .unwrap();
    let (_send, mut recv) = local_pair(layout, conn(), w).unwrap();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        abort.abort();
    });
    let start = Instant::now();
    let err = recv.ll_recv(&mut [0u8; 3]).unwrap_err();
    aborter.join().unwrap();
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
    assert!(start.elapsed() < Duration::from_secs(5));

    // A sender that closes without sending: "closed while we waited for LL data".
    let (send, mut recv) = pair(128, Duration::from_secs(60));
    drop(send);
    let err = recv.ll_recv(&mut [0u8; 4]).unwrap_err();
    assert!(
        matches!(
            err,
            ConnError::PeerClosed {
                waiting_for: WaitFor::LlData,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("LL data"), "{err}");
}

#[test]
fn connections_without_an_ll_buffer_refuse_ll() {
    let (mut send, mut recv) = local_pair(
        FifoLayout::new(8, 4096).unwrap(),
        conn(),
        waiter(Duration::from_secs(1)),
    )
    .unwrap();
    assert!(!send.has_ll() && !recv.has_ll());
    let err = send.ll_send(b"x").unwrap_err();
    assert!(matches!(err, ConnError::NoLlBuffer { .. }), "{err}");
    assert!(err.to_string().contains("no LL buffer"), "{err}");
    assert!(matches!(
        recv.ll_recv(&mut [0u8; 1]),
        Err(ConnError::NoLlBuffer { .. })
    ));
}

#[test]
fn ll_layout_rules() {
    let base = FifoLayout::new(8, 4096).unwrap();
    assert_eq!(base.ll_lines(), 0);
    assert_eq!(base.total_bytes(), 4096 + 8 * 4096);
    let ll = base.with_ll_lines(2048).unwrap();
    assert_eq!(ll.ll_offset(), 4096 + 8 * 4096);
    assert_eq!(ll.total_bytes(), 4096 + 8 * 4096 + 8 * 2048 * 8);
    for bad in [1, 100, 129] {
        let err = base.with_ll_lines(bad).unwrap_err();
        assert_eq!(err.field, "ll_lines", "{bad}");
    }
    assert!(base.with_ll_lines(1 << 30).is_err());
    assert_eq!(FifoLayout::default().ll_lines(), DEFAULT_LL_LINES);
    // A peer attaching reads the LL geometry from the header.
    let region = FifoRegion::local(ll).unwrap();
    let attached = FifoRegion::attach(region.memory().clone(), conn()).unwrap();
    assert_eq!(attached.layout(), ll);
}
