//! Unit tests of the pieces: geometry rules, wrap-safe comparisons against a reference in
//! 128-bit arithmetic, post ordering, counter-corruption errors, and the sizes FIFO.

use std::string::ToString;

use proptest::prelude::*;

use super::*;

#[test]
fn geometry_rules() {
    let g = FifoGeometry::simple(2, 2).unwrap();
    assert_eq!(
        (
            g.slots(),
            g.step_per_slice(),
            g.slice_per_chunk(),
            g.chunk_steps()
        ),
        (8, 2, 2, 4)
    );
    assert_eq!(FifoGeometry::P2P, FifoGeometry::new(8, 1, 1).unwrap());
    let bad = |slots, sps, spc| FifoGeometry::new(slots, sps, spc).unwrap_err();
    assert_eq!(
        bad(6, 1, 1),
        FifoError::BadGeometry {
            field: "slots",
            value: 6
        }
    );
    assert_eq!(
        bad(16, 1, 1),
        FifoError::BadGeometry {
            field: "slots",
            value: 16
        }
    );
    assert_eq!(
        bad(0, 1, 1),
        FifoError::BadGeometry {
            field: "slots",
            value: 0
        }
    );
    assert_eq!(
        bad(4, 8, 1),
        FifoError::BadGeometry {
            field: "step_per_slice",
            value: 8
        }
    );
    assert_eq!(
        bad(4, 3, 1),
        FifoError::BadGeometry {
            field: "step_per_slice",
            value: 3
        }
    );
    assert_eq!(
        bad(4, 1, 3),
        FifoError::BadGeometry {
            field: "slice_per_chunk",
            value: 3
        }
    );
    assert_eq!(
        bad(4, 1, 0),
        FifoError::BadGeometry {
            field: "slice_per_chunk",
            value: 0
        }
    );
    assert!(bad(4, 1, 3).to_string().contains("slice_per_chunk = 3"));
}

#[test]
fn round_up_to_chunk_and_across_wrap() {
    let g = FifoGeometry::simple(2, 2).unwrap(); // chunk of 4 steps
    let cases = [
        (0, 0),
        (1, 4),
        (4, 4),
        (5, 8),
        (7, 8),
        (u64::MAX - 3, u64::MAX - 3),
    ];
    for (step, want) in cases {
        assert_eq!(g.round_up(step), want, "round_up({step})");
    }
    assert_eq!(g.round_up(u64::MAX - 2), 0);
    assert_eq!(g.round_up(u64::MAX), 0);
    assert_eq!(g.slot_of(u64::MAX), 7);
    assert_eq!(g.slot_of(u64::MAX.wrapping_add(1)), 0);
}

#[test]
fn post_in_order_only() {
    let g = FifoGeometry::simple(2, 1).unwrap();
    let mut s = StepSender::load(g, 10);
    let a = s.acquire(10).unwrap().unwrap();
    let b = s.acquire(10).unwrap().unwrap();
    assert_eq!(
        (a.step(), a.slots(), b.step(), b.slots()),
        (10, 2..4, 12, 4..6)
    );
    assert_eq!(s.outstanding(), 2);
    assert_eq!(
        s.post(b),
        Err(FifoError::PostOutOfOrder {
            expected: 10,
            got: 12
        })
    );
    assert_eq!(s.post(a), Ok(12));
    assert_eq!(
        s.post(a),
        Err(FifoError::PostOutOfOrder {
            expected: 12,
            got: 10
        })
    );
    assert_eq!(s.post(b), Ok(14));
    assert_eq!(s.post(b), Err(FifoError::NothingAcquired { step: 12 }));
    assert_eq!(
        (s.posted_step(), s.next_step(), s.outstanding()),
        (14, 14, 0)
    );
    // Credits: head 10 allows steps up to 10 + 8 - 2 = 16, so slices at 14 and 16 only.
    assert!(s.acquire(10).unwrap().is_some());
    assert!(s.acquire(10).unwrap().is_some());
    assert_eq!(s.acquire(10), Ok(None));
    assert!(!s.can_send(10) && s.can_send(12));
}

#[test]
fn corrupt_counters_are_errors_not_waits() {
    let g = FifoGeometry::P2P;
    let mut s = StepSender::load(g, 100);
    assert_eq!(
        s.acquire(101),
        Err(FifoError::HeadAhead {
            head: 101,
            posted: 100
        })
    );
    let mut r = StepReceiver::load(g, 100);
    assert_eq!(
        r.acquire(109),
        Err(FifoError::TailOverrun {
            tail: 109,
            posted: 100,
            slots: 8
        })
    );
    assert!(r.acquire(108).unwrap().is_some());
    // A tail behind the receiver (after rounding) is only a wait.
    let mut r = StepReceiver::load(FifoGeometry::simple(2, 2).unwrap(), 101);
    assert_eq!(r.posted_step(), 104);
    assert_eq!(r.acquire(101), Ok(None));
    assert!(
        FifoError::TailOverrun {
            tail: 109,
            posted: 100,
            slots: 8
        }
        .to_string()
        .contains("more than 8 steps past the receiver's step 100")
    );
}

#[test]
fn sizes_fifo() {
    let g = FifoGeometry::simple(2, 1).unwrap();
    let mut s = StepSender::load(g, 6);
    let a = s.acquire(6).unwrap().unwrap();
    let b = s.acquire(6).unwrap().unwrap();
    let mut sizes = SizesFifo::new();
    sizes.record(&a, 4096).unwrap();
    sizes.record(&b, 777).unwrap();
    assert_eq!(
        sizes.record(&a, 1),
        Err(FifoError::SizeSlotBusy {
            slot: 6,
            bytes: 4096
        })
    );
    assert_eq!(sizes.to_raw(), [777, -1, -1, -1, -1, -1, 4096, -1]);
    assert_eq!(SizesFifo::from_raw(sizes.to_raw()), Ok(sizes));
    assert_eq!(sizes.peek(&a), Some(4096));
    assert_eq!(sizes.take(&a), Ok(4096));
    assert_eq!(
        sizes.take(&a),
        Err(FifoError::SizeMissing { slot: 6, step: 6 })
    );
    assert_eq!(sizes.peek(&b), Some(777));
    let raw = [-1, -2, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        SizesFifo::from_raw(raw),
        Err(FifoError::BadRawSize { slot: 1, raw: -2 })
    );
    let raw = [-1, 0, 1 << 32, 0, 0, 0, 0, 0];
    assert_eq!(
        SizesFifo::from_raw(raw),
        Err(FifoError::BadRawSize {
            slot: 2,
            raw: 1 << 32
        })
    );
}

proptest! {
    /// The wrap-safe rules agree with NCCL's plain comparisons done without overflow, for
    /// counters placed anywhere, including across u64::MAX.
    #[test]
    fn rules_match_unbounded_arithmetic(
        base in any::<u64>(),
        step_off in 0u64..64,
        head_back in 0u64..20,
        tail_ahead in 0u64..20,
        s in 0u32..4, p in 0u32..4,
    ) {
        let Ok(g) = FifoGeometry::new(1 << s, 1 << p, 1) else { return Ok(()) };
        let (slots, sps) = (g.slots() as i128, g.step_per_slice() as i128);
        // Unbounded values: step = base + step_off, head at most 20 behind it, tail at most
        // 20 ahead of it; then reduce mod 2^64 for the code under test.
        // Unbounded values: step = base + step_off rounded to a slice, head at most 20
        // behind it, tail within 10 of it; reduced mod 2^64 for the code under test.
        let raw = base as i128 + step_off as i128;
        let step = (raw + sps - 1).div_euclid(sps) * sps;
        let head = step - head_back as i128;
        let tail = step - 10 + tail_ahead as i128;
        let wrap = |v: i128| v.rem_euclid(1i128 << 64) as u64;
        let sender = StepSender::load(g, wrap(raw));
        let receiver = StepReceiver::load(g, wrap(raw));
        prop_assert_eq!(sender.next_step(), wrap(step));
        prop_assert_eq!(receiver.next_step(), wrap(step));
        prop_assert_eq!(sender.can_send(wrap(head)), head + slots >= step + sps);
        prop_assert_eq!(receiver.can_recv(wrap(tail)), tail >= step + sps);
        prop_assert_eq!(g.can_send(wrap(head), wrap(step)), head + slots >= step + sps);
        prop_assert_eq!(g.can_recv(wrap(tail), wrap(step)), tail >= step + sps);
        prop_assert_eq!(steps_ahead(wrap(tail), wrap(step)) as i128, tail - step);
        prop_assert_eq!(g.slot_of(wrap(step)) as i128, step.rem_euclid(slots));
    }
}
