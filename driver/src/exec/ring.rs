//! One rank's share of a collective on one channel: its ring program, run over the
//! channel's two FIFO connections (send to the next rank, receive from the previous).
//!
//! Each step of the program is cut into slices ([`ChunkSizing::slices`]); a slice is one FIFO
//! post. Empty slices are skipped: the sender's and the receiver's steps have the same
//! lengths (both follow the same schedule), so both skip the same ones and stay matched,
//! and a tiny call costs one post per hop instead of one per slice.

use weft_core::abi::{DataType, RedOp};
use weft_core::fifo::FifoGeometry;
use weft_core::sched::{ChunkSizing, Primitive, ProgramSpec, Ring, RingProgram};

use super::buffers::{Overlap, RawBuffers};
use super::combine;
use super::error::ExecError;
use crate::conn::{ConnId, FifoRecvEnd, FifoSendEnd, RecvSlot};

/// A channel's connections on the ring: to the next rank and from the previous one.
#[derive(Debug)]
pub struct RingConns {
    pub send: FifoSendEnd,
    pub recv: FifoRecvEnd,
}

/// What every channel of one call shares.
#[derive(Debug, Clone, Copy)]
pub struct RingCall {
    pub spec: ProgramSpec,
    pub sizing: ChunkSizing,
    pub dtype: DataType,
    pub op: RedOp,
    pub buffers: RawBuffers,
}

impl RingCall {
    /// The FIFO geometry of this collective: NCCL's slice and chunk steps.
    pub fn geometry(&self) -> Result<FifoGeometry, ExecError> {
        FifoGeometry::simple(self.sizing.slice_steps(), self.sizing.slices_per_chunk()).map_err(
            |e| ExecError::InvalidArgument(format!("FIFO geometry for this collective: {e}")),
        )
    }
}

/// Runs `rank`'s program for `channel` of `call` on `ring`. `conns` is `None` only on a ring
/// of one rank (which never sends).
pub fn run_channel(
    call: &RingCall,
    ring: &[u32],
    rank: u32,
    channel: u32,
    conns: Option<&mut RingConns>,
) -> Result<(), ExecError> {
    let ring = Ring::new(ring)?;
    let nranks = ring.nranks();
    let program = RingProgram::new(&call.spec, ring, rank, channel)?;
    if program.len() == 0 {
        return Ok(());
    }
    let esize = call.dtype.size_of_elem();
    let reduce_op = call.op;
    let divide = call.op == RedOp::Avg;
    let buf = &call.buffers;
    let mut conns = match conns {
        Some(c) => {
            let geometry = call.geometry()?;
            c.send.reload(geometry)?;
            c.recv.reload(geometry)?;
            Some(c)
        }
        None if nranks == 1 => None,
        None => {
            return Err(ExecError::InvalidArgument(format!(
                "channel {channel} has no connections on a ring of {nranks} ranks"
            )));
        }
    };
    for step in program {
        if step.len == 0 {
            continue;
        }
        for (offset, len) in call.sizing.slices(step.len) {
            if len == 0 {
                continue;
            }
            let bytes = len.saturating_mul(esize);
            let at_in = step
                .input_offset
                .saturating_add(offset)
                .saturating_mul(esize);
            let at_out = step
                .output_offset
                .saturating_add(offset)
                .saturating_mul(esize);
            let input = at_in..at_in.saturating_add(bytes);
            let output = at_out..at_out.saturating_add(bytes);
            if step.prim == Primitive::Copy {
                buf.copy_within(input, output.clone())?;
                if step.post_op && divide {
                    // SAFETY: no other slice of this range is alive (one thread per range).
                    let out = unsafe { buf.output(output)? };
                    combine::post_div(call.dtype, out, nranks);
                }
                continue;
            }
            let Some(c) = conns.as_deref_mut() else {
                return Err(ExecError::InvalidArgument(format!(
                    "{} step on a ring of one rank",
                    step.prim.name()
                )));
            };
            let post = step.post_op && divide;
            run_slice(call, c, step.prim, reduce_op, post, nranks, input, output)?;
        }
    }
    Ok(())
}

/// Checks that the peer posted exactly `bytes`.
fn expect_len(slot: &RecvSlot<'_>, conn: ConnId, bytes: usize) -> Result<(), ExecError> {
    if slot.len() == bytes {
        Ok(())
    } else {
        Err(ExecError::SizeMismatch {
            conn,
            expected: bytes,
            got: slot.len(),
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn run_slice(
    call: &RingCall,
    c: &mut RingConns,
    prim: Primitive,
    op: RedOp,
    post: bool,
    nranks: usize,
    input: std::ops::Range<usize>,
    output: std::ops::Range<usize>,
) -> Result<(), ExecError> {
    let buf = &call.buffers;
    let dtype = call.dtype;
    let bytes = input.len();
    let recv_conn = c.recv.conn();
    let capacity = c.send.slice_bytes();
    let oversize = || ExecError::BadBuffer {
        what: "FIFO slice",
        needed: bytes,
        given: capacity,
    };
    match prim {
        Primitive::Send => {
            let mut slot = c.send.acquire()?;
            // SAFETY: only an input slice is alive here.
            let src = unsafe { buf.input(input)? };
            slot.buf()
                .get_mut(..bytes)
                .ok_or_else(oversize)?
                .copy_from_slice(src);
            slot.post(bytes)?;
        }
        Primitive::CopySend => {
            let mut slot = c.send.acquire()?;
            {
                // SAFETY: only an input slice is alive in this block.
                let src = unsafe { buf.input(input.clone())? };
                slot.buf()
                    .get_mut(..bytes)
                    .ok_or_else(oversize)?
                    .copy_from_slice(src);
            }
            slot.post(bytes)?;
            // In place (the input is the output block), the copy is skipped as in NCCL.
            buf.copy_within(input, output)?;
        }
        Primitive::Recv => {
            let slot = c.recv.acquire()?;
            expect_len(&slot, recv_conn, bytes)?;
            // SAFETY: only this output slice is alive.
            unsafe { buf.output(output)? }.copy_from_slice(slot.data());
            slot.release()?;
        }
        Primitive::RecvCopySend => {
            let rslot = c.recv.acquire()?;
            expect_len(&rslot, recv_conn, bytes)?;
            let mut sslot = c.send.acquire()?;
            sslot
                .buf()
                .get_mut(..bytes)
                .ok_or_else(oversize)?
                .copy_from_slice(rslot.data());
            sslot.post(bytes)?;
            // SAFETY: only this output slice is alive.
            unsafe { buf.output(output)? }.copy_from_slice(rslot.data());
            rslot.release()?;
        }
        Primitive::RecvReduceSend | Primitive::RecvReduceCopySend => {
            let rslot = c.recv.acquire()?;
            expect_len(&rslot, recv_conn, bytes)?;
            let mut sslot = c.send.acquire()?;
            {
                let dst = sslot.buf().get_mut(..bytes).ok_or_else(oversize)?;
                // SAFETY: only an input slice is alive in this block.
                let src = unsafe { buf.input(input)? };
                combine::reduce(dtype, op, dst, rslot.data(), src);
                if post {
                    combine::post_div(dtype, dst, nranks);
                }
                if prim == Primitive::RecvReduceCopySend {
                    // The input slice is dead (its last use is above), so the output may
                    // alias it (in-place all-reduce).
                    // SAFETY: only this output slice is alive.
                    unsafe { buf.output(output)? }.copy_from_slice(dst);
                }
            }
            sslot.post(bytes)?;
            rslot.release()?;
        }
        Primitive::RecvReduceCopy => {
            let rslot = c.recv.acquire()?;
            expect_len(&rslot, recv_conn, bytes)?;
            match buf.overlap(&input, &output) {
                Overlap::Disjoint => {
                    // SAFETY: the two ranges are disjoint, so the slices do not alias.
                    let src = unsafe { buf.input(input)? };
                    // SAFETY: as above.
                    let dst = unsafe { buf.output(output)? };
                    combine::reduce(dtype, op, dst, rslot.data(), src);
                    if post {
                        combine::post_div(dtype, dst, nranks);
                    }
                }
                Overlap::Same | Overlap::Partial => {
                    buf.copy_within(input, output.clone())?;
                    // SAFETY: only this output slice is alive.
                    let dst = unsafe { buf.output(output)? };
                    combine::reduce_in_place(dtype, op, dst, rslot.data());
                    if post {
                        combine::post_div(dtype, dst, nranks);
                    }
                }
            }
            rslot.release()?;
        }
        Primitive::Copy => {
            return Err(ExecError::InvalidArgument(
                "copy step on a ring of several ranks".to_string(),
            ));
        }
    }
    Ok(())
}
