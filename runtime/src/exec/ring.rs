//! One rank's share of a collective on one channel: its ring program, run over the
//! channel's two FIFO connections (send to the next rank, receive from the previous).
//!
//! Each step of the program is cut into slices of at most one FIFO step (every transport
//! moves one message per step: the NET proxy requires it, and SHM gains nothing from larger
//! slices), balanced so that a step of `1.5` slots becomes two of `0.75`. Both ends of a
//! connection follow the same schedule, so the sender's slices and the receiver's expected
//! slices match one for one, and a step with no elements posts nothing on either side: a
//! tiny call costs one post per hop.
//!
//! Under LL ([`Protocol::Ll`]) the same program runs, each slice one LL message
//! (`FifoSendEnd::ll_send`, `FifoRecvEnd::ll_recv`): data travels as lines with flags, a
//! receiver copies it out of the lines into the channel's [`Scratch`], and reduces from there.
//!
//! Reductions follow NCCL ([`Reduction`]): a rank's own input enters through
//! `copy_input` / `reduce_input` (float `Avg` pre-multiplies it by `1/nranks`), partial
//! results meet with `reduce`, and the step that completes a result calls `finish`
//! (integer `Avg` divides).

use std::ops::Range;

use weft_core::abi::{DataType, Protocol};
use weft_core::sched::{Primitive, ProgramSpec, Ring, RingProgram};

use super::buffers::{Overlap, RawBuffers};
use super::error::ExecError;
use super::reduce::Reduction;
use crate::conn::{ConnId, FifoRecvEnd, FifoSendEnd, RecvSlot};

/// A channel's connections on the ring: to the next rank and from the previous one, and
/// the staging buffers its calls reuse (so that a small call allocates nothing).
#[derive(Debug)]
pub struct RingConns {
    pub send: FifoSendEnd,
    pub recv: FifoRecvEnd,
    pub scratch: Scratch,
}

impl RingConns {
    pub fn new(send: FifoSendEnd, recv: FifoRecvEnd) -> Self {
        RingConns {
            send,
            recv,
            scratch: Scratch::default(),
        }
    }
}

/// Byte buffers a channel reuses from call to call.
#[derive(Debug, Default)]
pub struct Scratch {
    /// An input copied aside before an in-place step overwrites it.
    pub staged: Vec<u8>,
    /// An LL message copied out of the lines.
    pub received: Vec<u8>,
    /// A one-shot all-reduce's inputs of every rank, in ring order.
    pub gathered: Vec<u8>,
}

/// `buf` holding `len` bytes, for the caller to overwrite entirely (whatever they held is
/// left, not zeroed: the buffers are reused from call to call, and clearing 64 KiB costs as
/// much as a small call).
pub fn sized(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    buf.resize(len, 0);
    buf
}

/// What every channel of one call shares.
#[derive(Debug, Clone, Copy)]
pub struct RingCall {
    pub spec: ProgramSpec,
    pub dtype: DataType,
    /// The reduction (for collectives that reduce; ignored by the others).
    pub reduction: Reduction,
    /// Elements one slice holds at most: the connections' step size (of the protocol).
    pub slice_elems: usize,
    /// How slices travel: [`Protocol::Simple`] slots or [`Protocol::Ll`] lines.
    pub protocol: Protocol,
    pub buffers: RawBuffers,
}

/// `(offset, len)` of the slices of a step of `len` elements, at most `max` each.
fn slices(len: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = len.div_ceil(max.max(1)).max(1);
    let each = len.div_ceil(n);
    (0..n).map(move |k| {
        let start = k.saturating_mul(each).min(len);
        (start, each.min(len.saturating_sub(start)))
    })
}

/// Runs `rank`'s program for `channel` of `call` on `ring`. `conns` is `None` only on a ring
/// of one rank (which never sends).
pub fn run_channel(
    call: &RingCall,
    ring: &[u32],
    rank: u32,
    channel: u32,
    mut conns: Option<&mut RingConns>,
) -> Result<(), ExecError> {
    let ring = Ring::new(ring)?;
    let program = RingProgram::new(&call.spec, ring, rank, channel)?;
    let reduces = call.spec.collective.reduces();
    let esize = call.dtype.size_of_elem();
    // A ring of one rank has no connections, and uses only `staged` (for Avg's pre-op).
    let mut own = Scratch::default();
    for step in program {
        if step.len == 0 {
            continue;
        }
        for (offset, len) in slices(step.len, call.slice_elems) {
            let bytes = len.saturating_mul(esize);
            let at_in = step
                .input_offset
                .saturating_add(offset)
                .saturating_mul(esize);
            let at_out = step
                .output_offset
                .saturating_add(offset)
                .saturating_mul(esize);
            let (input, output) = (
                at_in..at_in.saturating_add(bytes),
                at_out..at_out.saturating_add(bytes),
            );
            let finish = step.post_op && reduces;
            if step.prim == Primitive::Copy {
                let mut slice = Slice {
                    call,
                    input,
                    output,
                    finish,
                    staged: &mut own.staged,
                };
                slice.copy(reduces)?;
                continue;
            }
            let Some(c) = conns.as_deref_mut() else {
                return Err(ExecError::InvalidArgument(format!(
                    "{} step with no connections on channel {channel} (a ring of {} ranks)",
                    step.prim.name(),
                    ring.nranks()
                )));
            };
            let RingConns {
                send,
                recv,
                scratch,
            } = c;
            let mut slice = Slice {
                call,
                input,
                output,
                finish,
                staged: &mut scratch.staged,
            };
            match call.protocol {
                Protocol::Ll => slice.run_ll(send, recv, &mut scratch.received, step.prim)?,
                _ => slice.run(send, recv, step.prim)?,
            }
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

/// One slice of one step: byte ranges of the user's buffers and what to do with them.
struct Slice<'a> {
    call: &'a RingCall,
    input: Range<usize>,
    output: Range<usize>,
    /// Apply the reduction's `finish` to the result (the step completes it).
    finish: bool,
    /// Staging for an in-place reduction whose input is about to be overwritten.
    staged: &'a mut Vec<u8>,
}

impl Slice<'_> {
    fn bytes(&self) -> usize {
        self.input.len()
    }

    /// A ring of one rank: the output is the input (through the reduction's pre- and
    /// post-ops when it reduces, which for one rank leave the values as they are).
    fn copy(&mut self, reduces: bool) -> Result<(), ExecError> {
        let buf = &self.call.buffers;
        let red = &self.call.reduction;
        if reduces && red.has_pre_op() {
            self.stage_input()?;
            // SAFETY: only this output slice is alive (the input was staged).
            let dst = unsafe { buf.output(self.output.clone())? };
            red.copy_input(dst, self.staged)?;
        } else {
            buf.copy_within(self.input.clone(), self.output.clone())?;
        }
        if self.finish {
            // SAFETY: only this output slice is alive.
            red.finish(unsafe { buf.output(self.output.clone())? })?;
        }
        Ok(())
    }

    /// Copies the input range into `staged`.
    fn stage_input(&mut self) -> Result<(), ExecError> {
        // SAFETY: only this input slice is alive.
        let src = unsafe { self.call.buffers.input(self.input.clone())? };
        self.staged.clear();
        self.staged.extend_from_slice(src);
        Ok(())
    }

    /// `output = post(pre(input) ⊕ received)`, staging the input first when the output
    /// overlaps it (an in-place call).
    fn reduce_into_output(&mut self, received: &[u8]) -> Result<(), ExecError> {
        let buf = &self.call.buffers;
        let red = &self.call.reduction;
        let overlap = buf.overlap(&self.input, &self.output);
        if overlap != Overlap::Disjoint {
            // The output overwrites the input it is computed from: stage the input.
            self.stage_input()?;
        }
        // SAFETY: the input slice, if any, is of a range disjoint from the output.
        let dst = unsafe { buf.output(self.output.clone())? };
        if overlap == Overlap::Disjoint {
            // SAFETY: disjoint from `dst` (checked above).
            let src = unsafe { buf.input(self.input.clone())? };
            red.reduce_input(dst, src, received)?;
        } else {
            red.reduce_input(dst, self.staged, received)?;
        }
        if self.finish {
            red.finish(dst)?;
        }
        Ok(())
    }

    /// One slice over LL: the same primitives as [`Slice::run`], each message one
    /// `ll_send` / `ll_recv`, received data staged in `received`.
    fn run_ll(
        &mut self,
        send: &mut FifoSendEnd,
        recv: &mut FifoRecvEnd,
        received: &mut Vec<u8>,
        prim: Primitive,
    ) -> Result<(), ExecError> {
        let buf = &self.call.buffers;
        let red = &self.call.reduction;
        let bytes = self.bytes();
        match prim {
            Primitive::Send => {
                if red.has_pre_op() {
                    // Float Avg: the input enters the reduction scaled.
                    let scaled = sized(received, bytes);
                    // SAFETY: only this input slice is alive.
                    red.copy_input(scaled, unsafe { buf.input(self.input.clone())? })?;
                    send.ll_send(scaled)?;
                } else {
                    // SAFETY: only this input slice is alive.
                    send.ll_send(unsafe { buf.input(self.input.clone())? })?;
                }
            }
            Primitive::CopySend => {
                // SAFETY: only this input slice is alive in this statement.
                send.ll_send(unsafe { buf.input(self.input.clone())? })?;
                buf.copy_within(self.input.clone(), self.output.clone())?;
            }
            Primitive::Recv => {
                // SAFETY: only this output slice is alive.
                recv.ll_recv(unsafe { buf.output(self.output.clone())? })?;
            }
            Primitive::RecvCopySend => {
                // SAFETY: only this output slice is alive.
                let out = unsafe { buf.output(self.output.clone())? };
                recv.ll_recv(out)?;
                send.ll_send(out)?;
            }
            Primitive::RecvReduceSend | Primitive::RecvReduceCopySend => {
                let acc = sized(received, bytes);
                recv.ll_recv(acc)?;
                {
                    // SAFETY: only this input slice is alive; it dies before the output
                    // slice below is made (they alias in an in-place all-reduce).
                    let src = unsafe { buf.input(self.input.clone())? };
                    red.reduce_input_in_place(acc, src)?;
                }
                if self.finish {
                    red.finish(acc)?;
                }
                if prim == Primitive::RecvReduceCopySend {
                    // SAFETY: only this output slice is alive (see above).
                    crate::copy::copy_bytes(unsafe { buf.output(self.output.clone())? }, acc);
                }
                send.ll_send(acc)?;
            }
            Primitive::RecvReduceCopy => {
                let got = sized(received, bytes);
                recv.ll_recv(got)?;
                self.reduce_into_output(got)?;
            }
            Primitive::Copy => {
                return Err(ExecError::InvalidArgument(
                    "copy step on a ring of several ranks".to_string(),
                ));
            }
        }
        Ok(())
    }

    fn run(
        &mut self,
        send: &mut FifoSendEnd,
        recv: &mut FifoRecvEnd,
        prim: Primitive,
    ) -> Result<(), ExecError> {
        let buf = &self.call.buffers;
        let red = &self.call.reduction;
        let bytes = self.bytes();
        let recv_conn = recv.conn();
        let capacity = send.slice_bytes();
        let oversize = || ExecError::BadBuffer {
            what: "FIFO slice",
            needed: bytes,
            given: capacity,
        };
        match prim {
            Primitive::Send => {
                // Only reducing collectives send their input unreduced: it enters the
                // reduction here.
                let mut slot = send.acquire()?;
                let dst = slot.buf().get_mut(..bytes).ok_or_else(oversize)?;
                // SAFETY: only this input slice is alive.
                let src = unsafe { buf.input(self.input.clone())? };
                red.copy_input(dst, src)?;
                slot.post(bytes)?;
            }
            Primitive::CopySend => {
                // All-gather and broadcast: a plain copy.
                let mut slot = send.acquire()?;
                {
                    let dst = slot.buf().get_mut(..bytes).ok_or_else(oversize)?;
                    // SAFETY: only this input slice is alive in this block.
                    let src = unsafe { buf.input(self.input.clone())? };
                    crate::copy::copy_bytes(dst, src);
                }
                slot.post(bytes)?;
                // In place (the input is the output block), the copy is skipped as in NCCL.
                buf.copy_within(self.input.clone(), self.output.clone())?;
            }
            Primitive::Recv => {
                let slot = recv.acquire()?;
                expect_len(&slot, recv_conn, bytes)?;
                // SAFETY: only this output slice is alive.
                crate::copy::copy_bytes(unsafe { buf.output(self.output.clone())? }, slot.data());
                slot.release()?;
            }
            Primitive::RecvCopySend => {
                let rslot = recv.acquire()?;
                expect_len(&rslot, recv_conn, bytes)?;
                let mut sslot = send.acquire()?;
                crate::copy::copy_bytes(
                    sslot.buf().get_mut(..bytes).ok_or_else(oversize)?,
                    rslot.data(),
                );
                // Post before the local copy: the next rank can go on meanwhile.
                sslot.post(bytes)?;
                // SAFETY: only this output slice is alive.
                crate::copy::copy_bytes(unsafe { buf.output(self.output.clone())? }, rslot.data());
                rslot.release()?;
            }
            Primitive::RecvReduceSend | Primitive::RecvReduceCopySend => {
                let rslot = recv.acquire()?;
                expect_len(&rslot, recv_conn, bytes)?;
                let mut sslot = send.acquire()?;
                {
                    let dst = sslot.buf().get_mut(..bytes).ok_or_else(oversize)?;
                    // SAFETY: only this input slice is alive; it dies before the output
                    // slice below is made (they alias in an in-place all-reduce).
                    let src = unsafe { buf.input(self.input.clone())? };
                    red.reduce_input(dst, src, rslot.data())?;
                    if self.finish {
                        red.finish(dst)?;
                    }
                    if prim == Primitive::RecvReduceCopySend {
                        // SAFETY: only this output slice is alive (see above).
                        crate::copy::copy_bytes(unsafe { buf.output(self.output.clone())? }, dst);
                    }
                }
                sslot.post(bytes)?;
                rslot.release()?;
            }
            Primitive::RecvReduceCopy => {
                let rslot = recv.acquire()?;
                expect_len(&rslot, recv_conn, bytes)?;
                self.reduce_into_output(rslot.data())?;
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
}

/// A [`Reduction`] for a call (`nranks` >= 1).
pub fn reduction(
    dtype: DataType,
    op: weft_core::abi::RedOp,
    nranks: usize,
) -> Result<Reduction, ExecError> {
    let n = u32::try_from(nranks).unwrap_or(u32::MAX);
    Ok(Reduction::new(dtype, op, n)?)
}

#[cfg(test)]
mod test {
    use super::slices;

    #[test]
    fn slices_are_balanced_and_cover_the_step() {
        let all = |len, max| slices(len, max).collect::<Vec<_>>();
        assert_eq!(all(10, 100), [(0, 10)]);
        assert_eq!(all(150, 100), [(0, 75), (75, 75)]);
        assert_eq!(all(201, 100), [(0, 67), (67, 67), (134, 67)]);
        for len in 1..500 {
            for max in [1, 7, 64, 100] {
                let s = all(len, max);
                assert_eq!(s.iter().map(|p| p.1).sum::<usize>(), len);
                assert!(s.iter().all(|p| p.1 <= max && p.1 > 0), "{len} {max} {s:?}");
            }
        }
    }
}
