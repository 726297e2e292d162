//! Ring programs: the ordered steps one rank runs on one channel for one collective.
//!
//! The steps follow NCCL's SIMPLE ring kernels (`src/device/{all_reduce, reduce_scatter,
//! all_gather, broadcast, reduce}.h`). Per loop over the channel's part, for a rank at ring
//! position `p` of `n`:
//!
//! - AllReduce (`n * chunk` elements a loop, in `n` blocks numbered by ring position):
//!   `Send` block `p-1`; `RecvReduceSend` blocks `p-2 .. p-(n-1)`; `RecvReduceCopySend` block
//!   `p` (the finished sum, post-op applied); `RecvCopySend` blocks `p-1 .. p-(n-2)`; `Recv`
//!   block `p+1`. The last loop shrinks its blocks to `ceil(rest / n)` rounded up to 16 bytes,
//!   so trailing blocks may be short or empty.
//! - ReduceScatter (`chunk` elements of each rank's block a loop): `Send` the block of rank
//!   `ring[p-1]`, `RecvReduceSend` those of `ring[p-2] .. ring[p-(n-1)]`, `RecvReduceCopy` its own
//!   into the output.
//! - AllGather: `CopySend` its input into its own output block, `RecvCopySend` the blocks of
//!   `ring[p-1] .. ring[p-(n-2)]`, `Recv` that of `ring[p+1]`.
//! - Broadcast: the root `CopySend`s, the rank before the root `Recv`s, the others
//!   `RecvCopySend`.
//! - Reduce: the rank after the root `Send`s, the root `RecvReduceCopy`s, the others
//!   `RecvReduceSend`.
//!
//! A ring of one rank runs one `Copy` per chunk for every collective.

use super::collective::{Collective, Primitive};
use super::partition::{ChannelPart, align_elems, channel_part, channels_for};
use super::ring::Ring;
use super::sizing::{ChunkSizing, aligned_block};
use super::{SchedError, div_up};

/// One step of a [`RingProgram`]: a primitive applied to `len` elements at `input_offset` of the
/// user's input buffer and `output_offset` of the output buffer (element offsets). An offset the
/// primitive does not use ([`Primitive::reads_input`], [`Primitive::writes_output`]) is 0.
///
/// Every used range lies within the buffers' lengths ([`Collective::input_len`],
/// [`Collective::output_len`]). `len` may be 0: the step must still run, because a primitive
/// that sends or receives always takes its FIFO slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingStep {
    pub prim: Primitive,
    pub input_offset: usize,
    pub output_offset: usize,
    pub len: usize,
    /// Apply the reduction's final transform (divide by `nranks` for an average) to the
    /// result, as NCCL's `postOp = true`. Set only on the step that completes a reduction.
    pub post_op: bool,
}

/// What a collective call is, independent of rank and channel: the same on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProgramSpec {
    pub collective: Collective,
    /// Elements, as in NCCL's API (see [`Collective`]).
    pub count: usize,
    /// Bytes per element (for the 16-byte alignment of parts and last chunks).
    pub elem_size: usize,
    /// Elements one primitive moves at most ([`super::ChunkSizing::chunk_elems`]; any value
    /// >= 1 works, and all ranks must use the same one).
    pub chunk_elems: usize,
    /// Channels the call is spread over.
    pub nchannels: u32,
}

impl ProgramSpec {
    /// The spec NCCL would run for a call: the chunk from a connection buffer of
    /// `buffer_bytes` ([`ChunkSizing`]), and as many of `max_channels` channels as carry 32 KiB
    /// of traffic each ([`channels_for`]).
    pub fn new(
        collective: Collective,
        count: usize,
        elem_size: usize,
        nranks: usize,
        max_channels: u32,
        buffer_bytes: usize,
    ) -> Result<Self, SchedError> {
        let sizing = ChunkSizing::new(collective, buffer_bytes, elem_size)?;
        Ok(ProgramSpec {
            collective,
            count,
            elem_size,
            chunk_elems: sizing.chunk_elems(),
            nchannels: channels_for(collective, count, elem_size, nranks, max_channels),
        })
    }
}

/// The steps of one rank on one channel, in the order they must run. An iterator that computes
/// each step on demand: no allocation, `O(1)` per step. Its length is known in advance
/// ([`ExactSizeIterator`]).
#[derive(Debug, Clone)]
pub struct RingProgram<'a> {
    collective: Collective,
    ring: Ring<'a>,
    /// Position of this rank on the ring.
    position: usize,
    rank: u32,
    nranks: usize,
    count: usize,
    part: ChannelPart,
    chunk: usize,
    align: usize,
    /// Elements of the part that one loop covers.
    loop_elems: usize,
    steps_per_loop: usize,
    nloops: usize,
    /// Loop being run and the next step within it.
    loop_index: usize,
    step_in_loop: usize,
    /// Block size of the current loop (the all-reduce one shrinks in its last loop).
    loop_chunk: usize,
}

impl<'a> RingProgram<'a> {
    /// The program of `rank` on `channel`, whose ring is `ring`.
    pub fn new(
        spec: &ProgramSpec,
        ring: Ring<'a>,
        rank: u32,
        channel: u32,
    ) -> Result<Self, SchedError> {
        let nranks = ring.nranks();
        let position = ring
            .position(rank)
            .ok_or(SchedError::RankOutOfRange { rank, nranks })?;
        if let Some(root) = spec.collective.root() {
            if root as usize >= nranks {
                return Err(SchedError::RootOutOfRange { root, nranks });
            }
        }
        if spec.chunk_elems == 0 {
            return Err(SchedError::ZeroChunk);
        }
        let too_large = SchedError::TooLarge {
            count: spec.count,
            nranks,
        };
        // Every offset a step yields is below one of these, so checking them here lets the
        // iterator use saturating arithmetic that never actually saturates.
        spec.collective
            .input_len(spec.count, nranks)
            .ok_or(too_large)?;
        spec.collective
            .output_len(spec.count, nranks)
            .ok_or(too_large)?;
        let align = align_elems(spec.elem_size)?;
        let part = channel_part(spec.count, align, spec.nchannels, channel)?;

        let (loop_elems, steps_per_loop) = if nranks == 1 {
            (spec.chunk_elems, 1)
        } else {
            match spec.collective {
                // `n * chunk` may exceed usize when the chunk is huge; a saturated stride is
                // still larger than any part, so the part is then one loop, as it should be.
                Collective::AllReduce => (
                    spec.chunk_elems.saturating_mul(nranks),
                    nranks.saturating_mul(2).saturating_sub(1),
                ),
                Collective::ReduceScatter | Collective::AllGather => (spec.chunk_elems, nranks),
                Collective::Broadcast { .. } | Collective::Reduce { .. } => (spec.chunk_elems, 1),
            }
        };
        let nloops = div_up(part.len, loop_elems);
        let mut program = RingProgram {
            collective: spec.collective,
            ring,
            position,
            rank,
            nranks,
            count: spec.count,
            part,
            chunk: spec.chunk_elems,
            align,
            loop_elems,
            steps_per_loop,
            nloops,
            loop_index: 0,
            step_in_loop: 0,
            loop_chunk: spec.chunk_elems,
        };
        program.loop_chunk = program.block_size(0);
        Ok(program)
    }

    /// This rank.
    pub const fn rank(&self) -> u32 {
        self.rank
    }

    /// This rank's position on the ring.
    pub const fn position(&self) -> usize {
        self.position
    }

    /// The rank every receiving step receives from.
    pub fn prev(&self) -> u32 {
        self.ring.rank_before(self.position, 1)
    }

    /// The rank every sending step sends to.
    pub fn next(&self) -> u32 {
        self.ring.rank_after(self.position, 1)
    }

    /// The channel's share of `count`.
    pub const fn part(&self) -> ChannelPart {
        self.part
    }

    /// Elements of the part covered per loop (NCCL's `loopCount`: `nranks * chunk` for
    /// all-reduce, `chunk` otherwise).
    pub const fn loop_elems(&self) -> usize {
        self.loop_elems
    }

    /// Loops over the part.
    pub const fn nloops(&self) -> usize {
        self.nloops
    }

    /// Steps per loop (`2n - 1` all-reduce, `n` reduce-scatter / all-gather, 1 otherwise).
    pub const fn steps_per_loop(&self) -> usize {
        self.steps_per_loop
    }

    /// How many steps of the whole program send (each takes `chunk_steps` FIFO slots of the
    /// connection to [`Self::next`]); what a proxy needs to know to progress a NET send.
    pub fn send_count(&self) -> usize {
        self.count_steps(Primitive::sends)
    }

    /// How many steps of the whole program receive (from [`Self::prev`]).
    pub fn recv_count(&self) -> usize {
        self.count_steps(Primitive::receives)
    }

    fn count_steps(&self, pred: fn(Primitive) -> bool) -> usize {
        // Every loop runs the same primitives; only offsets and lengths differ.
        let per_loop = (0..self.steps_per_loop)
            .filter(|&s| pred(self.prim_at(s)))
            .count();
        per_loop.saturating_mul(self.nloops)
    }

    /// Size of the blocks in loop `index`: the chunk, except for the all-reduce's last loop,
    /// which spreads what is left evenly over the `n` blocks (16-byte aligned).
    fn block_size(&self, index: usize) -> usize {
        let start = index.saturating_mul(self.loop_elems);
        let rest = self.part.len.saturating_sub(start);
        if matches!(self.collective, Collective::AllReduce)
            && self.nranks > 1
            && rest < self.loop_elems
        {
            // rest < n * chunk, so ceil(rest / n) <= chunk: capping keeps all of `rest` covered.
            aligned_block(div_up(rest, self.nranks), self.align, self.chunk)
        } else {
            self.chunk
        }
    }

    /// The primitive of step `s` of a loop.
    fn prim_at(&self, s: usize) -> Primitive {
        let n = self.nranks;
        if n == 1 {
            return Primitive::Copy;
        }
        match self.collective {
            Collective::AllReduce => {
                if s == 0 {
                    Primitive::Send
                } else if s < n.saturating_sub(1) {
                    Primitive::RecvReduceSend
                } else if s == n.saturating_sub(1) {
                    Primitive::RecvReduceCopySend
                } else if s < n.saturating_mul(2).saturating_sub(2) {
                    Primitive::RecvCopySend
                } else {
                    Primitive::Recv
                }
            }
            Collective::ReduceScatter => {
                if s == 0 {
                    Primitive::Send
                } else if s < n.saturating_sub(1) {
                    Primitive::RecvReduceSend
                } else {
                    Primitive::RecvReduceCopy
                }
            }
            Collective::AllGather => {
                if s == 0 {
                    Primitive::CopySend
                } else if s < n.saturating_sub(1) {
                    Primitive::RecvCopySend
                } else {
                    Primitive::Recv
                }
            }
            Collective::Broadcast { root } => {
                if self.rank == root {
                    Primitive::CopySend
                } else if self.next() == root {
                    Primitive::Recv
                } else {
                    Primitive::RecvCopySend
                }
            }
            Collective::Reduce { root } => {
                if self.prev() == root {
                    Primitive::Send
                } else if self.rank == root {
                    Primitive::RecvReduceCopy
                } else {
                    Primitive::RecvReduceSend
                }
            }
        }
    }

    /// Step `s` of the current loop.
    fn step_at(&self, s: usize) -> RingStep {
        let n = self.nranks;
        let prim = self.prim_at(s);
        let loop_start = self.loop_index.saturating_mul(self.loop_elems);
        let rest = self.part.len.saturating_sub(loop_start);
        // Offset of the loop in the per-rank (or whole) buffer.
        let data_offset = self.part.offset.saturating_add(loop_start);
        let mut step = RingStep {
            prim,
            input_offset: 0,
            output_offset: 0,
            len: 0,
            post_op: false,
        };

        if n == 1 || !matches!(self.collective, Collective::AllReduce) {
            step.len = self.loop_chunk.min(rest);
        }
        match self.collective {
            _ if n == 1 => {
                step.input_offset = data_offset;
                step.output_offset = data_offset;
                step.post_op = self.collective.reduces();
            }
            Collective::AllReduce => {
                // Blocks are numbered by ring position; step s handles the block the NCCL
                // kernel names `ringIx + nranks - j`.
                let back = if s < n {
                    // Send, RecvReduceSend: p-1, p-2, ..; RecvReduceCopySend (s = n-1): p.
                    s.saturating_add(1)
                } else if s < n.saturating_mul(2).saturating_sub(2) {
                    // RecvCopySend: p-1, p-2, .., p-(n-2).
                    s.saturating_sub(n).saturating_add(1)
                } else {
                    // Recv: p+1.
                    n.saturating_sub(1)
                };
                let block = self
                    .position
                    .saturating_add(n.saturating_sub(back.checked_rem(n).unwrap_or(0)))
                    .checked_rem(n)
                    .unwrap_or(0);
                let block_offset = block.saturating_mul(self.loop_chunk);
                step.len = self.loop_chunk.min(rest.saturating_sub(block_offset));
                // An empty block past the end of the part is placed at the part's end, so the
                // (empty) range is still within the buffer.
                let offset = data_offset
                    .saturating_add(block_offset)
                    .min(self.part.end());
                step.input_offset = offset;
                step.output_offset = offset;
                step.post_op = prim == Primitive::RecvReduceCopySend;
            }
            Collective::ReduceScatter => {
                // Step s reduces the block of the rank s+1 places back; the last one is ours.
                let owner = self.ring.rank_before(self.position, s.saturating_add(1));
                step.input_offset =
                    data_offset.saturating_add((owner as usize).saturating_mul(self.count));
                if prim == Primitive::RecvReduceCopy {
                    step.output_offset = data_offset;
                    step.post_op = true;
                }
            }
            Collective::AllGather => {
                // Step s forwards the block of the rank s places back (0: our own).
                let owner = self.ring.rank_before(self.position, s);
                step.output_offset =
                    data_offset.saturating_add((owner as usize).saturating_mul(self.count));
                if prim == Primitive::CopySend {
                    step.input_offset = data_offset;
                }
            }
            Collective::Broadcast { .. } => {
                if prim.reads_input() {
                    step.input_offset = data_offset;
                }
                step.output_offset = data_offset;
            }
            Collective::Reduce { .. } => {
                step.input_offset = data_offset;
                if prim == Primitive::RecvReduceCopy {
                    step.output_offset = data_offset;
                    step.post_op = true;
                }
            }
        }
        step
    }
}

impl Iterator for RingProgram<'_> {
    type Item = RingStep;

    fn next(&mut self) -> Option<RingStep> {
        if self.loop_index >= self.nloops {
            return None;
        }
        let step = self.step_at(self.step_in_loop);
        self.step_in_loop = self.step_in_loop.saturating_add(1);
        if self.step_in_loop >= self.steps_per_loop {
            self.step_in_loop = 0;
            self.loop_index = self.loop_index.saturating_add(1);
            self.loop_chunk = self.block_size(self.loop_index);
        }
        Some(step)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self
            .nloops
            .saturating_sub(self.loop_index)
            .saturating_mul(self.steps_per_loop)
            .saturating_sub(self.step_in_loop);
        (left, Some(left))
    }
}

impl ExactSizeIterator for RingProgram<'_> {}

impl core::iter::FusedIterator for RingProgram<'_> {}

#[cfg(test)]
mod test {
    use super::*;
    use std::vec::Vec;

    fn collective(kind: u8, root: u32) -> Collective {
        match kind % 5 {
            0 => Collective::AllReduce,
            1 => Collective::ReduceScatter,
            2 => Collective::AllGather,
            3 => Collective::Broadcast { root },
            _ => Collective::Reduce { root },
        }
    }

    #[test]
    fn all_reduce_steps_follow_nccl() {
        // 3 ranks on ring [0 1 2], 1 channel, 10 f32 per block: rank 1 (position 1).
        let ring = [0, 1, 2];
        let spec = ProgramSpec {
            collective: Collective::AllReduce,
            count: 30,
            elem_size: 4,
            chunk_elems: 10,
            nchannels: 1,
        };
        let p = RingProgram::new(&spec, Ring::new(&ring).unwrap(), 1, 0).unwrap();
        assert_eq!((p.prev(), p.next(), p.len()), (0, 2, 5));
        let got: Vec<(Primitive, usize, usize, bool)> = p
            .map(|s| (s.prim, s.input_offset, s.len, s.post_op))
            .collect();
        assert_eq!(
            got,
            [
                (Primitive::Send, 0, 10, false),
                (Primitive::RecvReduceSend, 20, 10, false),
                (Primitive::RecvReduceCopySend, 10, 10, true),
                (Primitive::RecvCopySend, 0, 10, false),
                (Primitive::Recv, 20, 10, false),
            ]
        );
    }

    #[test]
    fn last_all_reduce_loop_is_aligned() {
        // 2 loops of 4 ranks x 8 elements, then 13 left: blocks of ceil(13/4) = 4 floats,
        // already 16 bytes; with bytes (align 16) the blocks are capped at the chunk (8).
        let ring = [0, 1, 2, 3];
        for (elem_size, block) in [(4usize, 4usize), (1, 8)] {
            let spec = ProgramSpec {
                collective: Collective::AllReduce,
                count: 2 * 32 + 13,
                elem_size,
                chunk_elems: 8,
                nchannels: 1,
            };
            let p = RingProgram::new(&spec, Ring::new(&ring).unwrap(), 0, 0).unwrap();
            let last: Vec<RingStep> = p.skip(2 * 7).collect();
            let mut blocks: Vec<(usize, usize)> =
                last.iter().map(|s| (s.input_offset, s.len)).collect();
            blocks.sort();
            blocks.dedup();
            let mut expected: Vec<(usize, usize)> = (0..4)
                .map(|b| {
                    let start = (64 + b * block).min(77);
                    (start, block.min(77 - start))
                })
                .collect();
            // Empty blocks past the end all sit at the end.
            expected.dedup();
            assert_eq!(blocks, expected, "elem_size {elem_size}");
        }
    }

    proptest::proptest! {
        /// What direct writes rely on: for all-reduce, all-gather and broadcast, the k-th
        /// send of a rank that also writes its output (the data is final) meets, on the next
        /// rank, a k-th receive that writes its output without reducing, at the same output
        /// offset and length, and every such receive meets such a send. So the sender can
        /// store the data straight into the receiver's output, and the receiver skips its copy.
        #[test]
        fn final_sends_land_at_the_receivers_output_offset(
            kind in 0u8..3,
            nranks in 2usize..9,
            root: u32,
            count in 0usize..3000,
            elem_size in proptest::sample::select(std::vec![1usize, 2, 4, 8]),
            chunk_elems in 1usize..200,
            nchannels in 1u32..5,
        ) {
            let collective = match kind {
                0 => Collective::AllReduce,
                1 => Collective::AllGather,
                _ => Collective::Broadcast { root: root % nranks as u32 },
            };
            let ring: Vec<u32> = (0..nranks as u32).rev().collect();
            let spec = ProgramSpec { collective, count, elem_size, chunk_elems, nchannels };
            for channel in 0..nchannels {
                let steps = |rank: u32| -> Vec<RingStep> {
                    RingProgram::new(&spec, Ring::new(&ring).unwrap(), rank, channel)
                        .unwrap()
                        .collect()
                };
                for rank in 0..nranks as u32 {
                    let mine = steps(rank);
                    let next = ring[(ring.iter().position(|&r| r == rank).unwrap() + 1) % nranks];
                    let sends: Vec<&RingStep> = mine.iter().filter(|s| s.prim.sends()).collect();
                    let theirs = steps(next);
                    let recvs: Vec<&RingStep> = theirs.iter().filter(|s| s.prim.receives()).collect();
                    proptest::prop_assert_eq!(sends.len(), recvs.len());
                    for (s, r) in sends.iter().zip(&recvs) {
                        // And the converse, which the kernel's direct receive and its
                        // overwrite of the pointer exchange rely on: a receive that stores
                        // data as it comes always meets a final send.
                        if matches!(r.prim, Primitive::Recv | Primitive::RecvCopySend) {
                            proptest::prop_assert!(
                                s.prim.writes_output(),
                                "{:?} meets {:?}", s.prim, r.prim
                            );
                        }
                        if !s.prim.writes_output() {
                            continue;
                        }
                        proptest::prop_assert!(
                            matches!(r.prim, Primitive::Recv | Primitive::RecvCopySend),
                            "{:?} meets {:?}", s.prim, r.prim
                        );
                        proptest::prop_assert_eq!((s.output_offset, s.len), (r.output_offset, r.len));
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Any input gives an error or a program whose every range is inside the buffers.
        #[test]
        fn no_panic_and_in_bounds(
            kind: u8,
            nranks in 1usize..40,
            root: u32,
            rank: u32,
            count in proptest::prop_oneof![0usize..5000, proptest::num::usize::ANY],
            elem_size in 0usize..40,
            chunk_elems in proptest::prop_oneof![0usize..300, proptest::num::usize::ANY],
            nchannels in 0u32..70,
            channel in 0u32..70,
        ) {
            let ring: Vec<u32> = (0..nranks as u32).rev().collect();
            let ring = Ring::new(&ring).unwrap();
            let collective = collective(kind, root % (nranks as u32 + 1));
            let spec = ProgramSpec { collective, count, elem_size, chunk_elems, nchannels };
            // Mostly valid ranks and channels, so that most cases build a program.
            let rank = rank % (nranks as u32 + 1);
            let channel = channel % (nchannels + 1);
            let Ok(p) = RingProgram::new(&spec, ring, rank, channel) else {
                return Ok(());
            };
            let input_len = collective.input_len(count, nranks).unwrap();
            let output_len = collective.output_len(count, nranks).unwrap();
            let len = p.len();
            let mut seen = 0usize;
            for step in p.clone().take(2000) {
                if step.prim.reads_input() {
                    proptest::prop_assert!(step.input_offset.checked_add(step.len).unwrap() <= input_len);
                }
                if step.prim.writes_output() {
                    proptest::prop_assert!(step.output_offset.checked_add(step.len).unwrap() <= output_len);
                }
                seen += 1;
            }
            proptest::prop_assert_eq!(seen, len.min(2000));
            let _ = (p.send_count(), p.recv_count());
        }
    }
}
