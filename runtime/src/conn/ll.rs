//! LL over a host connection: `weft_core::fifo::ll`'s lines in the connection's LL buffer.
//!
//! A message goes as whole LL steps of at most `lines_per_step * 4` bytes; both ends know
//! its length from their schedule, so no size travels with it. The sender waits for LL
//! credit (the receiver's `ll_head`), stores each line as one 8-byte word (data and flag),
//! and moves on: there is no tail to publish. The receiver polls each line until its flag is
//! the step's, copies the data out, and publishes `ll_head` once the step is read.
//!
//! Orderings:
//!
//! - Lines are stored and loaded `Relaxed`: a line's data and flag are one atomic word, so a
//!   receiver that sees the flag has the data; nothing else needs ordering with it.
//! - The receiver stores `ll_head` with `Release` after loading a step's lines; the sender
//!   loads it with `Acquire` before storing into that slot again: the receiver's loads of the
//!   old lines come before the sender's stores of new ones (no overwrite of unread data).
//!
//! Every wait is the connection's wait (abort flag, peer closed, aborted or dead, deadline).

use std::sync::atomic::{AtomicU64, Ordering};

use weft_core::fifo::ll::{LL_DATA_BYTES, LlLine, LlSlot};

use super::endpoint::{FifoRecvEnd, FifoSendEnd};
use super::error::{ConnError, WaitFor};

/// `bytes` (at most 4) as a line's data, zero-padded.
fn data_of(bytes: &[u8]) -> u32 {
    let mut quad = [0u8; LL_DATA_BYTES];
    if let Some(dst) = quad.get_mut(..bytes.len()) {
        dst.copy_from_slice(bytes);
    }
    u32::from_le_bytes(quad)
}

impl FifoSendEnd {
    /// Whether the connection has an LL buffer (SHM connections do, NET ones do not).
    pub fn has_ll(&self) -> bool {
        self.ll.is_some()
    }

    /// Payload bytes one LL step carries (0 without an LL buffer).
    pub fn ll_step_bytes(&self) -> usize {
        self.ll.map_or(0, |ll| ll.geometry().step_data_bytes())
    }

    /// Sends `data` over LL, in as many steps as it needs; the receiver calls
    /// [`FifoRecvEnd::ll_recv`] with a buffer of the same length. An empty message sends
    /// nothing (the receiver's returns at once too).
    pub fn ll_send(&mut self, data: &[u8]) -> Result<(), ConnError> {
        let side = &self.side;
        let Some(ll) = self.ll.as_mut() else {
            return Err(ConnError::NoLlBuffer { conn: side.conn });
        };
        let geometry = ll.geometry();
        let (lines_per_step, step_bytes) = (geometry.lines_per_step(), geometry.step_data_bytes());
        let words = side.region.ll_words();
        let head = &side.region.header().ll_head.0;
        let cache = &mut self.ll_head_cache;
        for chunk in data.chunks(step_bytes.max(1)) {
            let next = ll.next_step();
            let poll = || {
                // The cached head first (endpoint.rs: `head_cache`), the shared one when it
                // grants nothing.
                if let Some(slot) = ll.acquire(*cache).map_err(|e| side.protocol(e))? {
                    return Ok(Some(slot));
                }
                // Acquire: pairs with the receiver's Release store of ll_head (module docs).
                *cache = head.load(Ordering::Acquire);
                ll.acquire(*cache).map_err(|e| side.protocol(e))
            };
            // Through the wait even when credit is there: it checks the abort flags first.
            let slot: LlSlot = side.wait(WaitFor::LlCredit, poll, || {
                (next, head.load(Ordering::Relaxed))
            })?;
            let first = slot.slot().saturating_mul(lines_per_step);
            let lines = words
                .get(first..first.saturating_add(lines_per_step))
                .ok_or(ConnError::NoLlBuffer { conn: side.conn })?;
            let flag = slot.flag();
            let used = chunk.len().div_ceil(LL_DATA_BYTES);
            let quads = chunk.chunks_exact(LL_DATA_BYTES);
            let tail = quads.remainder();
            let mut lines_left = lines.iter();
            for (quad, word) in quads.zip(&mut lines_left) {
                let data = u32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]]);
                // Relaxed: data and flag are one atomic word (module documentation).
                word.store(LlLine::pack(data, flag), Ordering::Relaxed);
            }
            if let (false, Some(word)) = (tail.is_empty(), lines_left.next()) {
                word.store(LlLine::pack(data_of(tail), flag), Ordering::Relaxed);
            }
            if slot.clean() {
                // Every 2^31 steps: refresh the rest of the slot so no line's flag gets a
                // full flag period old (weft_core::fifo::ll).
                for word in lines.iter().skip(used) {
                    word.store(LlLine::pack(0, flag), Ordering::Relaxed);
                }
            }
            ll.post(slot).map_err(|e| side.protocol(e))?;
        }
        Ok(())
    }
}

impl FifoRecvEnd {
    /// Whether the connection has an LL buffer.
    pub fn has_ll(&self) -> bool {
        self.ll.is_some()
    }

    /// Receives an LL message of exactly `out.len()` bytes (see [`FifoSendEnd::ll_send`]).
    pub fn ll_recv(&mut self, out: &mut [u8]) -> Result<(), ConnError> {
        let side = &self.side;
        let Some(ll) = self.ll.as_mut() else {
            return Err(ConnError::NoLlBuffer { conn: side.conn });
        };
        let geometry = ll.geometry();
        let (lines_per_step, step_bytes) = (geometry.lines_per_step(), geometry.step_data_bytes());
        let words = side.region.ll_words();
        for chunk in out.chunks_mut(step_bytes.max(1)) {
            let slot = ll.expected();
            let first = slot.slot().saturating_mul(lines_per_step);
            let lines = words
                .get(first..first.saturating_add(lines_per_step))
                .ok_or(ConnError::NoLlBuffer { conn: side.conn })?;
            let flag = slot.flag();
            // Wait for the step's last line first: a sender stores its lines in order, so
            // on x86 (stores visible in program order) the others are there too, and the
            // sweep below streams through them instead of meeting each cache line while
            // the sender is still writing it. Every line's flag is still checked: on a
            // machine that reorders stores this is only a heuristic.
            // Through the wait even when the line is there: it checks the abort flags first.
            let used = chunk.len().div_ceil(LL_DATA_BYTES);
            if let Some(last) = used.checked_sub(1).and_then(|l| lines.get(l)) {
                wait_line(side, last, flag, slot.step())?;
            }
            let mut lines_left = lines.iter();
            let mut quads = chunk.chunks_exact_mut(LL_DATA_BYTES);
            for (dst, word) in (&mut quads).zip(&mut lines_left) {
                let data = match LlLine::data_if(word.load(Ordering::Relaxed), flag) {
                    Some(data) => data,
                    None => wait_line(side, word, flag, slot.step())?,
                };
                dst.copy_from_slice(&data.to_le_bytes());
            }
            let tail = quads.into_remainder();
            if let (false, Some(word)) = (tail.is_empty(), lines_left.next()) {
                let data = match LlLine::data_if(word.load(Ordering::Relaxed), flag) {
                    Some(data) => data,
                    None => wait_line(side, word, flag, slot.step())?,
                };
                let bytes = data.to_le_bytes();
                tail.copy_from_slice(bytes.get(..tail.len()).unwrap_or(&[]));
            }
            let head = ll.post(slot).map_err(|e| side.protocol(e))?;
            // Release: the loads above come before the sender may reuse the slot (module docs).
            side.region
                .header()
                .ll_head
                .0
                .store(head, Ordering::Release);
        }
        Ok(())
    }
}

/// Waits until `word` carries `flag`; returns its data.
fn wait_line(
    side: &super::endpoint::Side,
    word: &AtomicU64,
    flag: u32,
    step: u64,
) -> Result<u32, ConnError> {
    side.wait(
        WaitFor::LlData,
        // Relaxed: see the module documentation.
        || Ok(LlLine::data_if(word.load(Ordering::Relaxed), flag)),
        || (step, word.load(Ordering::Relaxed) >> 32),
    )
}

/// Test only: puts both ends of a fresh connection at LL step `step`, with the memory as a
/// connection that starts there has it (every line carrying `initial_flag(step)`), so that
/// tests reach the cleaning steps and the flag wrap without sending 2^31 messages first.
#[cfg(test)]
pub(super) fn restart_ll_at(send: &mut FifoSendEnd, recv: &mut FifoRecvEnd, step: u64) {
    use weft_core::fifo::ll::{LlReceiver, LlSender};
    let Some(g) = send.ll.map(|ll| ll.geometry()) else {
        return;
    };
    send.ll = Some(LlSender::new(g, step));
    send.ll_head_cache = step;
    recv.ll = Some(LlReceiver::new(g, step));
    let region = &send.side.region;
    region.header().ll_head.0.store(step, Ordering::Release);
    for word in region.ll_words() {
        word.store(LlLine::pack(0, g.initial_flag(step)), Ordering::Release);
    }
}
