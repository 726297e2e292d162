//! One-shot all-reduce: every rank's whole input goes round the ring, and each rank reduces
//! all of them itself.
//!
//! The ring all-reduce crosses `2(n - 1)` hops one after the other (reduce-scatter, then
//! all-gather). For a small message each hop's time is a latency, not a transfer, so
//! crossing `n - 1` hops instead wins even though each carries the whole buffer: on two
//! ranks both ends send their input at once and the call takes one hop, where the ring
//! takes two for the same bytes. `weft_core::tune` decides when, and whether the inputs
//! travel as LL lines or SIMPLE slots.
//!
//! Every rank reduces the inputs in the ring's order, `ring[0]`'s first, with the same
//! [`Reduction`](super::reduce::Reduction) calls, so every rank gets the same bits (as from
//! the ring, whose all-gather half hands every rank the same reduced blocks).

use weft_core::abi::Protocol;

use super::buffers::Overlap;
use super::error::ExecError;
use super::ring::{RingCall, RingConns, Scratch, sized};
use crate::conn::{FifoRecvEnd, FifoSendEnd};

/// Sends `data` as one message of `protocol`: LL lines, or SIMPLE slices of one slot each
/// (cut the same way on both ends).
fn send_msg(send: &mut FifoSendEnd, data: &[u8], protocol: Protocol) -> Result<(), ExecError> {
    if protocol == Protocol::Ll {
        return Ok(send.ll_send(data)?);
    }
    let capacity = send.slice_bytes();
    for chunk in data.chunks(capacity.max(1)) {
        let mut slot = send.acquire()?;
        let dst = slot
            .buf()
            .get_mut(..chunk.len())
            .ok_or(ExecError::BadBuffer {
                what: "FIFO slice",
                needed: chunk.len(),
                given: capacity,
            })?;
        crate::copy::copy_bytes(dst, chunk);
        slot.post(chunk.len())?;
    }
    Ok(())
}

/// Receives a message of exactly `out.len()` bytes sent by [`send_msg`].
fn recv_msg(recv: &mut FifoRecvEnd, out: &mut [u8], protocol: Protocol) -> Result<(), ExecError> {
    if protocol == Protocol::Ll {
        return Ok(recv.ll_recv(out)?);
    }
    let (capacity, conn) = (recv.slice_bytes(), recv.conn());
    for chunk in out.chunks_mut(capacity.max(1)) {
        let slot = recv.acquire()?;
        if slot.len() != chunk.len() {
            return Err(ExecError::SizeMismatch {
                conn,
                expected: chunk.len(),
                got: slot.len(),
            });
        }
        crate::copy::copy_bytes(chunk, slot.data());
        slot.release()?;
    }
    Ok(())
}

/// Runs `rank`'s part of a one-shot all-reduce of `call` on `ring` over `conns`, in
/// `call.protocol`.
pub fn all_reduce(
    call: &RingCall,
    ring: &[u32],
    rank: u32,
    conns: &mut RingConns,
) -> Result<(), ExecError> {
    let n = ring.len();
    let pos = ring.iter().position(|&r| r == rank).ok_or_else(|| {
        ExecError::InvalidArgument(format!("rank {rank} is not on the ring {ring:?}"))
    })?;
    let bytes = call.spec.count.saturating_mul(call.dtype.size_of_elem());
    let RingConns {
        send,
        recv,
        scratch: Scratch { gathered, .. },
    } = conns;
    let all = sized(gathered, bytes.saturating_mul(n));
    let total = all.len();
    // Rank at ring position `p`'s input in `all`.
    let block = |p: usize| -> Result<std::ops::Range<usize>, ExecError> {
        let start = p.saturating_mul(bytes);
        let range = start..start.saturating_add(bytes);
        if range.end > total {
            return Err(ExecError::BadBuffer {
                what: "one-shot staging",
                needed: range.end,
                given: total,
            });
        }
        Ok(range)
    };
    let buf = &call.buffers;
    let in_place = buf.overlap(&(0..bytes), &(0..bytes)) != Overlap::Disjoint;
    if in_place {
        // The output written below overwrites the input it is computed from: keep a copy.
        let mine = block(pos)?;
        // SAFETY: only this input slice is alive; `all` is the channel's own buffer.
        crate::copy::copy_bytes(&mut all[mine], unsafe { buf.input(0..bytes)? });
    }
    // SAFETY: only this input slice is alive (nothing writes the output before the reduction).
    send_msg(send, unsafe { buf.input(0..bytes)? }, call.protocol)?;
    // Hop k brings the input of the rank k places back; all but the last hop pass it on.
    for k in 1..n {
        let from = block((pos + n - k) % n)?;
        recv_msg(recv, &mut all[from.clone()], call.protocol)?;
        if k + 1 < n {
            send_msg(send, &all[from], call.protocol)?;
        }
    }
    let red = &call.reduction;
    let input_of = |p: usize| -> Result<&[u8], ExecError> {
        if p == pos && !in_place {
            // SAFETY: out of place: the input does not overlap the output.
            unsafe { buf.input(0..bytes) }
        } else {
            Ok(&all[block(p)?])
        }
    };
    // SAFETY: the input is read below only out of place (disjoint from the output); in
    // place it was copied into `all`. Only this output slice is alive.
    let out = unsafe { buf.output(0..bytes)? };
    red.copy_input(out, input_of(0)?)?;
    for p in 1..n {
        red.reduce_input_in_place(out, input_of(p)?)?;
    }
    red.finish(out)?;
    Ok(())
}
