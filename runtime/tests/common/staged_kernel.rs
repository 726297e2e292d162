//! CPU threads playing the GPU kernels of a staged NET connection, exactly as the kernels
//! drive a connection end (`proxy::staged`): the sender writes a step's bytes into its slot,
//! the size and the tag, then releases the tail; the receiver acquires the tail, reads the
//! step and releases the head. Message `i` of stream `seed` is `random::message`, so the
//! receiver checks every byte and the tag (the receiving proxy checks each step's size
//! against its header). Included by path from `tests/staged_net.rs` and
//! `examples/staged_pair.rs` (the Soft-RoCE VMs' test), next to `random.rs`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weft_runtime::proxy::staged::Staging;

use super::random::message;

/// Spins until `cond` holds; an error naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// The tag the sender leaves with step `i` of stream `seed` (bit 47 set, as `p2p_tag`).
pub fn tag_of(seed: u64, i: u64) -> u64 {
    (seed.rotate_left(17) ^ i) | 1 << 47
}

/// The sending kernel's part: `count` steps of stream `seed`.
pub fn play_sender(s: &Staging, seed: u64, count: u64, limit: Duration) -> Result<(), String> {
    let steps = s.steps() as u64;
    for i in 0..count {
        if i + 1 > steps {
            wait_until(&format!("a free slot for step {i}"), limit, || {
                s.head().load(Ordering::Acquire) >= i + 1 - steps
            })?;
        }
        let data = message(seed, i, s.step_bytes());
        // SAFETY: the slot is free (the head passed it) and lies inside the area.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), s.slot_ptr(i as usize), data.len()) };
        s.size(i as usize)
            .store(data.len() as u32, Ordering::Relaxed);
        s.tag(i as usize).store(tag_of(seed, i), Ordering::Relaxed);
        s.tail().store(i + 1, Ordering::Release);
    }
    Ok(())
}

/// The receiving kernel's part: checks every byte and the tag of `count` steps.
pub fn play_receiver(s: &Staging, seed: u64, count: u64, limit: Duration) -> Result<(), String> {
    for i in 0..count {
        wait_until(&format!("step {i}"), limit, || {
            s.tail().load(Ordering::Acquire) > i
        })?;
        let want = message(seed, i, s.step_bytes());
        // SAFETY: the tail published the slot; it lies inside the area.
        let got = unsafe { std::slice::from_raw_parts(s.slot_ptr(i as usize), want.len()) };
        if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
            return Err(format!(
                "stream {seed:#x} step {i} ({} bytes): byte {at} is {:#04x}, expected {:#04x}",
                want.len(),
                got[at],
                want[at]
            ));
        }
        let tag = s.tag(i as usize).load(Ordering::Relaxed);
        if tag != tag_of(seed, i) {
            return Err(format!(
                "stream {seed:#x} step {i}: tag {tag:#x}, expected {:#x}",
                tag_of(seed, i)
            ));
        }
        s.head().store(i + 1, Ordering::Release);
    }
    Ok(())
}
