//! Step, chunk and slice sizes of NCCL's SIMPLE protocol.
//!
//! A connection's buffer is a FIFO of [`STEPS`] slots. A primitive moves one chunk of
//! `chunk_steps` slots, in `chunk_steps / slice_steps` slices of `slice_steps` slots each; the
//! receiver can start on a slice as soon as it lands, which is what pipelines a ring.

use super::{Collective, SchedError, align_up, div_up};

/// FIFO slots per connection buffer (NCCL's `NCCL_STEPS`): the slots the FIFO protocol runs
/// over, so the same constant.
pub const STEPS: usize = crate::fifo::NCCL_STEPS;

/// NCCL's default SIMPLE buffer (`NCCL_BUFFSIZE`): 4 MiB, so 512 KiB per step.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 22;

/// Chunks are a whole number of these (NCCL's SIMPLE grain, `ncclProtoGrainSize`).
pub const GRAIN_BYTES: usize = 512;

/// Sizes for one collective, element size and connection buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSizing {
    step_elems: usize,
    chunk_elems: usize,
    chunk_steps: usize,
    slice_steps: usize,
}

impl ChunkSizing {
    /// Sizes for `collective` over a connection buffer of `buffer_bytes` with elements of
    /// `elem_size` bytes. The chunk is `buffer / STEPS * chunk_steps` bytes, rounded down to
    /// [`GRAIN_BYTES`], as NCCL's `calcCollChunking` computes it for a SIMPLE ring.
    pub fn new(
        collective: Collective,
        buffer_bytes: usize,
        elem_size: usize,
    ) -> Result<Self, SchedError> {
        if elem_size == 0 {
            return Err(SchedError::ZeroElementSize);
        }
        let min_bytes = GRAIN_BYTES.saturating_mul(STEPS);
        let step_bytes = buffer_bytes / STEPS;
        let chunk_steps = collective.chunk_steps();
        let chunk_bytes = step_bytes.saturating_mul(chunk_steps);
        let chunk_bytes = chunk_bytes.saturating_sub(chunk_bytes % GRAIN_BYTES);
        let step_elems = step_bytes.checked_div(elem_size).unwrap_or(0);
        // With an element size that does not divide the grain, rounding could otherwise give
        // a chunk a few elements larger than its slots.
        let chunk_elems = chunk_bytes
            .checked_div(elem_size)
            .unwrap_or(0)
            .min(step_elems.saturating_mul(chunk_steps));
        if step_bytes < GRAIN_BYTES || chunk_elems == 0 || step_elems == 0 {
            return Err(SchedError::BufferTooSmall {
                buffer_bytes,
                min_bytes: min_bytes.max(elem_size.saturating_mul(STEPS)),
            });
        }
        Ok(ChunkSizing {
            step_elems,
            chunk_elems,
            chunk_steps,
            slice_steps: collective.slice_steps(),
        })
    }

    /// Sizes of NCCL's LL ring (`enqueue.cc`: outside SIMPLE rings `chunkSteps` and
    /// `sliceSteps` are 1, and an LL chunk is half a step's bytes, its payload): every
    /// primitive moves at most one step of `step_data_bytes` payload bytes, rounded down to
    /// [`GRAIN_BYTES`] and to whole elements.
    pub fn one_step(step_data_bytes: usize, elem_size: usize) -> Result<Self, SchedError> {
        if elem_size == 0 {
            return Err(SchedError::ZeroElementSize);
        }
        let grains = step_data_bytes.saturating_sub(step_data_bytes % GRAIN_BYTES);
        let elems = grains.checked_div(elem_size).unwrap_or(0);
        if elems == 0 {
            return Err(SchedError::BufferTooSmall {
                buffer_bytes: step_data_bytes.saturating_mul(STEPS),
                min_bytes: GRAIN_BYTES.max(elem_size).saturating_mul(STEPS),
            });
        }
        Ok(ChunkSizing {
            step_elems: elems,
            chunk_elems: elems,
            chunk_steps: 1,
            slice_steps: 1,
        })
    }

    /// Elements one FIFO slot holds.
    pub const fn step_elems(&self) -> usize {
        self.step_elems
    }

    /// Elements one primitive moves at most: the `chunk_elems` to give a [`super::RingProgram`].
    pub const fn chunk_elems(&self) -> usize {
        self.chunk_elems
    }

    /// FIFO slots one primitive uses on each connection it sends or receives on.
    pub const fn chunk_steps(&self) -> usize {
        self.chunk_steps
    }

    /// FIFO slots per slice.
    pub const fn slice_steps(&self) -> usize {
        self.slice_steps
    }

    /// Slices per chunk (NCCL's `SlicePerChunk`).
    pub const fn slices_per_chunk(&self) -> usize {
        match self.chunk_steps.checked_div(self.slice_steps) {
            Some(n) if n > 0 => n,
            _ => 1,
        }
    }

    /// Elements per slice for a primitive moving `nelem` elements, NCCL's rule
    /// `max(divUp(nelem, 16 * SlicePerChunk) * 16, sliceSize / 32)`: slices are a multiple of
    /// 16 elements, and never tiny (1/32 of a slice's slots) so small chunks are not split
    /// into slivers. When `nelem` fits in a chunk the result also fits in the slice's slots.
    pub const fn slice_elems(&self, nelem: usize) -> usize {
        let per_chunk = self.slices_per_chunk();
        let capacity = self.step_elems.saturating_mul(self.slice_steps);
        let even = div_up(nelem, per_chunk.saturating_mul(16)).saturating_mul(16);
        let floor = capacity / 32;
        let slice = if even > floor { even } else { floor };
        // `even` is rounded up to 16: when that overshoots a slot whose size is not a multiple
        // of 16, fall back to the slot size as long as the slices still cover `nelem`.
        if slice > capacity && div_up(nelem, per_chunk) <= capacity {
            capacity
        } else if slice == 0 {
            1
        } else {
            slice
        }
    }

    /// The slices of a primitive moving `nelem` elements: always exactly
    /// [`Self::slices_per_chunk`] of them, the trailing ones possibly empty (an empty slice still
    /// takes its FIFO slots, so both ends stay in step).
    pub const fn slices(&self, nelem: usize) -> Slices {
        Slices {
            nelem,
            slice_elems: self.slice_elems(nelem),
            remaining: self.slices_per_chunk(),
            offset: 0,
        }
    }
}

/// Iterator over the `(offset, len)` of each slice of one primitive, offsets relative to the
/// primitive's block. See [`ChunkSizing::slices`].
#[derive(Debug, Clone)]
pub struct Slices {
    nelem: usize,
    slice_elems: usize,
    remaining: usize,
    offset: usize,
}

impl Iterator for Slices {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        self.remaining = self.remaining.checked_sub(1)?;
        let offset = self.offset.min(self.nelem);
        let len = self.slice_elems.min(self.nelem.saturating_sub(offset));
        self.offset = offset.saturating_add(len);
        Some((offset, len))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Slices {}

/// `nelem` rounded up to `align` (used for the last all-reduce loop), capped at `cap`.
pub(crate) const fn aligned_block(nelem: usize, align: usize, cap: usize) -> usize {
    let v = align_up(nelem, align);
    if v < cap { v } else { cap }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nccl_default_sizes() {
        let ar = ChunkSizing::new(Collective::AllReduce, DEFAULT_BUFFER_BYTES, 4).unwrap();
        assert_eq!(ar.step_elems(), (512 << 10) / 4);
        assert_eq!(ar.chunk_elems(), (2 << 20) / 4);
        assert_eq!(ar.slices_per_chunk(), 2);
        let bc =
            ChunkSizing::new(Collective::Broadcast { root: 0 }, DEFAULT_BUFFER_BYTES, 2).unwrap();
        assert_eq!(bc.chunk_elems(), (512 << 10) / 2);
        assert_eq!(bc.slices_per_chunk(), 1);
        // A buffer that is not a multiple of the grain rounds the chunk down to it.
        let odd = ChunkSizing::new(Collective::AllGather, 8 * 1000 + 7, 8).unwrap();
        assert_eq!(odd.step_elems(), 1000 / 8);
        assert_eq!(odd.chunk_elems(), 3584 / 8);
    }

    #[test]
    fn ll_chunks_are_one_step_of_payload() {
        // NCCL's LL step: 64 KiB of lines, 32 KiB of payload.
        for elem in [1usize, 2, 4, 8] {
            let s = ChunkSizing::one_step(32 * 1024, elem).unwrap();
            assert_eq!(s.chunk_elems(), 32 * 1024 / elem);
            assert_eq!(
                (s.chunk_steps(), s.slice_steps(), s.slices_per_chunk()),
                (1, 1, 1)
            );
            assert_eq!(s.step_elems(), s.chunk_elems());
        }
        // Rounded down to the grain, never above the step.
        assert_eq!(ChunkSizing::one_step(1000, 8).unwrap().chunk_elems(), 64);
        assert!(matches!(
            ChunkSizing::one_step(511, 1),
            Err(SchedError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            ChunkSizing::one_step(4096, 0),
            Err(SchedError::ZeroElementSize)
        ));
    }

    #[test]
    fn slice_rule_matches_nccl() {
        let ar = ChunkSizing::new(Collective::AllReduce, DEFAULT_BUFFER_BYTES, 4).unwrap();
        // Full chunk: two slices of exactly one slice's slots.
        assert_eq!(ar.slice_elems(ar.chunk_elems()), ar.chunk_elems() / 2);
        // Tiny: the floor of 1/32 of the slice's slots.
        assert_eq!(ar.slice_elems(100), 2 * (512 << 10) / 4 / 32);
        // Medium: divUp(nelem, 32) * 16.
        let n = 100_001;
        assert_eq!(ar.slice_elems(n), n.div_ceil(32) * 16);
        let slices: std::vec::Vec<_> = ar.slices(n).collect();
        assert_eq!(
            slices,
            [
                (0, n.div_ceil(32) * 16),
                (n.div_ceil(32) * 16, n - n.div_ceil(32) * 16)
            ]
        );
        let empty: std::vec::Vec<_> = ar.slices(0).collect();
        assert_eq!(empty, [(0, 0), (0, 0)]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            ChunkSizing::new(Collective::AllReduce, 1 << 22, 0),
            Err(SchedError::ZeroElementSize)
        );
        assert!(matches!(
            ChunkSizing::new(Collective::AllReduce, 4095, 4),
            Err(SchedError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            ChunkSizing::new(Collective::AllReduce, 1 << 22, 1 << 30),
            Err(SchedError::BufferTooSmall { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn slices_cover_and_fit(
            buffer in 4096usize..(1 << 24),
            elem in 1usize..17,
            coll in 0u8..5,
            frac in 0.0f64..=1.0,
        ) {
            let coll = match coll {
                0 => Collective::AllReduce,
                1 => Collective::ReduceScatter,
                2 => Collective::AllGather,
                3 => Collective::Broadcast { root: 0 },
                _ => Collective::Reduce { root: 0 },
            };
            let Ok(s) = ChunkSizing::new(coll, buffer, elem) else { return Ok(()); };
            let nelem = (s.chunk_elems() as f64 * frac) as usize;
            let mut next = 0;
            let mut count = 0;
            for (off, len) in s.slices(nelem) {
                proptest::prop_assert_eq!(off, next);
                proptest::prop_assert!(len <= s.step_elems() * s.slice_steps());
                next = off + len;
                count += 1;
            }
            proptest::prop_assert_eq!(next, nelem);
            proptest::prop_assert_eq!(count, s.slices_per_chunk());
            proptest::prop_assert!(s.chunk_elems() * elem <= s.step_elems() * elem * s.chunk_steps());
        }
    }
}
