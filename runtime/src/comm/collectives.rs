//! The collectives of a [`HostComm`] on byte slices, out of place and in place.
//!
//! Every call goes through one function ([`HostComm::call`]) and one table
//! ([`BufferRule::of`]): which buffer's length gives the count, what the other must hold,
//! and where NCCL's in-place layout puts the input and the output (all-gather's input is
//! the rank's block of the output; reduce-scatter's output is the rank's block of the
//! input). The public methods only name the collective and the buffers.

use std::ops::Range;

use weft_core::abi::{DataType, RedOp};
use weft_core::sched::Collective;

use super::error::CommError;
use super::host::HostComm;
use crate::exec::RawBuffers;

/// A call's user buffers.
enum HostBuffers<'a> {
    /// Input and output apart.
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
    /// One buffer, input and output in NCCL's in-place layout.
    InPlace(&'a mut [u8]),
}

/// A buffer of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Receive,
}

/// What the buffer that does not give the count holds, out of place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Other {
    /// As many bytes as the counted one.
    Same,
    /// `nranks` times the counted one's bytes (reduce-scatter's input, all-gather's output).
    Blocks,
    /// As many bytes as the counted one on the root; elsewhere it may be empty (broadcast's
    /// input, reduce's output).
    SameOnRoot,
}

/// How a collective's buffers relate, in NCCL's layouts.
#[derive(Debug, Clone, Copy)]
struct BufferRule {
    /// Out of place: the buffer whose length gives the count (the one every rank uses).
    counted: Side,
    other: Other,
    /// In place: the side that is this rank's block of `nranks` blocks (all-gather's input,
    /// reduce-scatter's output), and the collective's name for the error when the buffer
    /// is not whole blocks; `None`: input and output are the whole buffer.
    block: Option<(Side, &'static str)>,
}

impl BufferRule {
    fn of(collective: Collective) -> BufferRule {
        let (counted, other, block) = match collective {
            Collective::AllReduce => (Side::Send, Other::Same, None),
            Collective::ReduceScatter => (
                Side::Receive,
                Other::Blocks,
                Some((Side::Receive, "reduce-scatter")),
            ),
            Collective::AllGather => (Side::Send, Other::Blocks, Some((Side::Send, "all-gather"))),
            Collective::Broadcast { .. } => (Side::Receive, Other::SameOnRoot, None),
            Collective::Reduce { .. } => (Side::Send, Other::SameOnRoot, None),
        };
        BufferRule {
            counted,
            other,
            block,
        }
    }
}

impl HostComm {
    fn count_of(len: usize, dtype: DataType, what: &str) -> Result<usize, CommError> {
        let esize = dtype.size_of_elem();
        if !len.is_multiple_of(esize) {
            return Err(CommError::InvalidArgument(format!(
                "{what} buffer of {len} bytes is not a whole number of {} ({esize}-byte) elements",
                dtype.name()
            )));
        }
        Ok(len / esize)
    }

    pub(super) fn check_len(what: &str, len: usize, want: usize) -> Result<(), CommError> {
        if len == want {
            Ok(())
        } else {
            Err(CommError::InvalidArgument(format!(
                "{what} buffer holds {len} bytes, the call needs {want}"
            )))
        }
    }

    fn check_root(&self, root: usize) -> Result<u32, CommError> {
        if root < self.nranks {
            Ok(root as u32)
        } else {
            Err(CommError::InvalidArgument(format!(
                "root {root} out of range for {} ranks",
                self.nranks
            )))
        }
    }

    /// Runs a collective on raw buffers with NCCL's semantics: `count` as in NCCL's API,
    /// `send` and `recv` may alias as NCCL allows (in-place layouts).
    ///
    /// # Safety
    ///
    /// `send` must be readable for the input length of `collective` (`count`, or `nranks *
    /// count` for reduce-scatter; broadcast reads it only on the root) and `recv` writable
    /// for its output length (`count`, `nranks * count` for all-gather; reduce writes it
    /// only on the root), in elements of `dtype`, for the whole call, and nothing else may
    /// use `recv` meanwhile. Lengths that a rank does not use may be 0.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective_raw(
        &mut self,
        collective: Collective,
        send: *const u8,
        send_len: usize,
        recv: *mut u8,
        recv_len: usize,
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.usable()?;
        // SAFETY: forwarded from this function's contract.
        let buffers = unsafe { RawBuffers::new(send, send_len, recv, recv_len) };
        let call = self
            .status
            .board
            .call(collective.name(), count, dtype.name(), true);
        match self
            .executor
            .collective(collective, count, dtype, op, buffers)
        {
            Ok(()) => {
                call.done();
                Ok(())
            }
            Err(e) => Err(self.failure(e)),
        }
    }

    /// Checks `buffers` against `collective`'s rule ([`BufferRule::of`]) and runs it.
    fn call(
        &mut self,
        collective: Collective,
        buffers: HostBuffers<'_>,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let rule = BufferRule::of(collective);
        match buffers {
            HostBuffers::OutOfPlace { send, recv } => {
                let ((counted_len, counted), (other_len, other)) = match rule.counted {
                    Side::Send => ((send.len(), "send"), (recv.len(), "receive")),
                    Side::Receive => ((recv.len(), "receive"), (send.len(), "send")),
                };
                let count = Self::count_of(counted_len, dtype, counted)?;
                let on_root = collective.root().is_some_and(|r| r as usize == self.rank);
                match rule.other {
                    Other::Same => Self::check_len(other, other_len, counted_len)?,
                    Other::Blocks => {
                        Self::check_len(other, other_len, counted_len.saturating_mul(self.nranks))?
                    }
                    Other::SameOnRoot if on_root || other_len != 0 => {
                        Self::check_len(other, other_len, counted_len)?
                    }
                    Other::SameOnRoot => {}
                }
                self.out_of_place(collective, send, recv, count, dtype, op)
            }
            HostBuffers::InPlace(buf) => {
                let total = Self::count_of(buf.len(), dtype, "in-place")?;
                let all = 0..buf.len();
                let Some((block_side, name)) = rule.block else {
                    return self.in_place(collective, buf, all.clone(), all, total, dtype, op);
                };
                if total % self.nranks != 0 {
                    return Err(CommError::InvalidArgument(format!(
                        "in-place {name} buffer of {total} elements is not {} equal blocks",
                        self.nranks
                    )));
                }
                let count = total / self.nranks;
                let block = count * dtype.size_of_elem();
                let at = self.rank * block;
                let (input, output) = match block_side {
                    Side::Send => (at..at + block, all),
                    Side::Receive => (all, at..at + block),
                };
                self.in_place(collective, buf, input, output, count, dtype, op)
            }
        }
    }

    fn out_of_place(
        &mut self,
        collective: Collective,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        // SAFETY: two live slices of the lengths passed; `recv` is borrowed mutably for the
        // call, so nothing else uses it, and Rust guarantees the two do not overlap.
        unsafe {
            self.collective_raw(
                collective,
                send.as_ptr(),
                send.len(),
                recv.as_mut_ptr(),
                recv.len(),
                count,
                dtype,
                op,
            )
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn in_place(
        &mut self,
        collective: Collective,
        buf: &mut [u8],
        input: Range<usize>,
        output: Range<usize>,
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        if input.end > buf.len() || output.end > buf.len() {
            return Err(CommError::InvalidArgument(format!(
                "in-place buffer of {} bytes is too short",
                buf.len()
            )));
        }
        let base = buf.as_mut_ptr();
        // SAFETY: both ranges lie inside `buf` (checked), which is borrowed mutably for the
        // whole call; the executor handles the aliasing of input and output.
        unsafe {
            self.collective_raw(
                collective,
                base.wrapping_add(input.start),
                input.len(),
                base.wrapping_add(output.start),
                output.len(),
                count,
                dtype,
                op,
            )
        }
    }

    /// `recv[i] = op over ranks of send[i]`. Both buffers hold the same number of elements.
    pub fn all_reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let buffers = HostBuffers::OutOfPlace { send, recv };
        self.call(Collective::AllReduce, buffers, dtype, op)
    }

    /// All-reduce with the result written over the input.
    pub fn all_reduce_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.call(Collective::AllReduce, HostBuffers::InPlace(buf), dtype, op)
    }

    /// `recv` (count elements) = block `rank` of the element-wise reduction of every rank's
    /// `send` (`nranks * count` elements).
    pub fn reduce_scatter(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        let buffers = HostBuffers::OutOfPlace { send, recv };
        self.call(Collective::ReduceScatter, buffers, dtype, op)
    }

    /// Reduce-scatter in place: `buf` is the whole input (`nranks * count` elements); the
    /// result lands in block `rank` of it (NCCL's in-place layout).
    pub fn reduce_scatter_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
    ) -> Result<(), CommError> {
        self.call(
            Collective::ReduceScatter,
            HostBuffers::InPlace(buf),
            dtype,
            op,
        )
    }

    /// `recv` (`nranks * count` elements) = every rank's `send` (count elements), in rank
    /// order.
    pub fn all_gather(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
    ) -> Result<(), CommError> {
        let buffers = HostBuffers::OutOfPlace { send, recv };
        self.call(Collective::AllGather, buffers, dtype, RedOp::Sum)
    }

    /// All-gather in place: this rank's input is already in block `rank` of `buf`.
    pub fn all_gather_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
    ) -> Result<(), CommError> {
        self.call(
            Collective::AllGather,
            HostBuffers::InPlace(buf),
            dtype,
            RedOp::Sum,
        )
    }

    /// `recv` = the root's `send` on every rank. `send` is read only on the root (other
    /// ranks may pass an empty slice).
    pub fn broadcast(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let buffers = HostBuffers::OutOfPlace { send, recv };
        self.call(Collective::Broadcast { root }, buffers, dtype, RedOp::Sum)
    }

    /// Broadcast in place: the root's `buf` goes to every rank's `buf`.
    pub fn broadcast_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let buffers = HostBuffers::InPlace(buf);
        self.call(Collective::Broadcast { root }, buffers, dtype, RedOp::Sum)
    }

    /// On the root, `recv[i] = op over ranks of send[i]`; `recv` is written only there
    /// (other ranks may pass an empty slice).
    pub fn reduce(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        let buffers = HostBuffers::OutOfPlace { send, recv };
        self.call(Collective::Reduce { root }, buffers, dtype, op)
    }

    /// Reduce in place: the result replaces the root's `buf`.
    pub fn reduce_in_place(
        &mut self,
        buf: &mut [u8],
        dtype: DataType,
        op: RedOp,
        root: usize,
    ) -> Result<(), CommError> {
        let root = self.check_root(root)?;
        self.call(
            Collective::Reduce { root },
            HostBuffers::InPlace(buf),
            dtype,
            op,
        )
    }
}
