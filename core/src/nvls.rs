//! NVLS buffer layout: where every head's and channel's slots and counters live in the
//! memory bound to an NVLink SHARP multicast object, and how a channel's elements are cut
//! into per-head chunks. Re-derived from NCCL's `ncclNvlsBufferSetup` and
//! `ncclNvlsSetup` (`src/transport/nvls.cc`) and the one-node NVLS all-reduce
//! (`src/device/all_reduce.h`).
//!
//! Every rank allocates the same amount of device memory and binds it into one multicast
//! object at offset 0, so one offset names the same place in every rank's *unicast* (UC)
//! mapping of its own memory and in the *multicast* (MC) mapping that reaches all of them.
//! The memory has, per head `h` and channel `c`, two buffers of [`STEPS`] slots of one
//! chunk each:
//!
//! - the *scatter* buffer, `(h * 2 * nchannels + c) * buff_size`: every rank writes its
//!   input chunk for head `h` there through UC; head `h` reduces all ranks' copies with one
//!   `multimem.ld_reduce` through MC (NCCL: `send[1]` UC, `recv[0]` MC);
//! - the *broadcast* buffer, `((h * 2 + 1) * nchannels + c) * buff_size`: head `h` stores
//!   the reduced chunk through MC (`multimem.st` writes every rank's copy), and every rank
//!   reads it back through UC (NCCL: `send[0]` MC, `recv[1]` UC).
//!
//! The counters that order those accesses live in a second, smaller multicast allocation
//! laid out the same way, one block per (head, direction, channel). Here weft differs from
//! NCCL (a 64-byte block, `head` at 0 and `tail` at 32): a block holds one `posted` and one
//! `freed` counter *per rank* (each written only by its rank, with `multimem.st` or one store
//! per peer), so a wait that gives up can name the rank it waited on instead of a sum. That
//! limits the counters to [`COUNTER_RANKS`] ranks, one NVSwitch host.
//!
//! Both allocations are rounded up to the larger of the unicast and multicast allocation
//! granularities (both powers of two), so that one size is valid for `cuMemCreate`,
//! `cuMulticastCreate` and `cuMulticastBindMem` alike. NCCL rounds the two mappings
//! separately; one size keeps the bound range equal to both.
//!
//! On one node NCCL's NVLS search places one head per GPU ([`crate::search`]'s NVLS
//! channels, one rank each), so `nheads == nranks` and head `h` is the rank on the search's
//! channel `h`: [`Heads`].

use core::fmt;

use crate::abi::STEPS as ABI_STEPS;

/// Slots of every NVLS buffer: NCCL's `NCCL_STEPS`.
pub const STEPS: u64 = ABI_STEPS as u64;
/// NCCL's default NVLS chunk (`NCCL_NVLS_CHUNKSIZE`): bytes of one slot.
pub const DEFAULT_CHUNK_SIZE: u64 = 128 * 1024;
/// Ranks a counter block has a counter for (`abi::PEER_MAX_RANKS`).
pub const COUNTER_RANKS: u64 = crate::abi::PEER_MAX_RANKS as u64;
/// Bytes of one counter block: `posted` then `freed`, one `u64` per rank each.
pub const CREDIT_BLOCK: u64 = 2 * 8 * COUNTER_RANKS;
/// Offset of rank 0's `posted` counter (steps it wrote into the buffer) in a block;
/// rank r's is `8 * r` further.
pub const POSTED_OFFSET: u64 = 0;
/// Offset of rank 0's `freed` counter (steps it finished reading) in a block.
pub const FREED_OFFSET: u64 = 8 * COUNTER_RANKS;
/// The last, short loop of a channel rounds each head's chunk up to this many bytes
/// (NCCL's `16384 / sizeof(T)` elements).
pub const LAST_CHUNK_ALIGN: u64 = 16384;
/// Most heads an NVLS communicator has (NCCL's `NCCL_MAX_NVLS_ARITY`).
pub const MAX_HEADS: usize = 32;
/// Most channels (blocks) an NVLS launch uses (NCCL's `MAXCHANNELS`).
pub const MAX_CHANNELS: u64 = crate::abi::MAX_CHANNELS as u64;

/// NCCL's default NVLS channel (block) count for a GPU of compute capability `sm`
/// (`major * 10 + minor`): 16 on Hopper, 24 on Blackwell within a node, 32 across nodes.
pub const fn default_channels(sm: u32, multi_node: bool) -> u32 {
    if sm >= 100 {
        if multi_node { 32 } else { 24 }
    } else {
        16
    }
}

/// What makes a layout impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvlsError {
    /// No heads, or more than [`MAX_HEADS`].
    Heads(usize),
    /// No channels, or more than [`MAX_CHANNELS`].
    Channels(u64),
    /// A chunk that is zero or not a multiple of 16 bytes (the kernels move 16-byte packs).
    Chunk(u64),
    /// A granularity that is zero or not a power of two.
    Granularity(u64),
    /// The sizes overflow 64 bits.
    Overflow,
}

impl fmt::Display for NvlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvlsError::Heads(n) => write!(
                f,
                "NVLS layout: {n} heads; NVLS has 1 to {MAX_HEADS} (one per GPU of the node), \
                 and weft's counters hold at most {COUNTER_RANKS}"
            ),
            NvlsError::Channels(n) => write!(
                f,
                "NVLS layout: {n} channels; NVLS needs 1 to {MAX_CHANNELS} (NCCL_NVLS_NCHANNELS)"
            ),
            NvlsError::Chunk(n) => write!(
                f,
                "NVLS layout: a chunk of {n} bytes; it must be a non-zero multiple of 16 \
                 (NCCL_NVLS_CHUNKSIZE, default {DEFAULT_CHUNK_SIZE})"
            ),
            NvlsError::Granularity(n) => write!(
                f,
                "NVLS layout: an allocation granularity of {n} bytes; CUDA reports powers of two, \
                 so this is a driver or caller bug"
            ),
            NvlsError::Overflow => write!(f, "NVLS layout: the buffer sizes overflow 64 bits"),
        }
    }
}

/// Which of a head's two buffers (and counter blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ranks write (UC), the head load-reduces (MC).
    Scatter = 0,
    /// The head stores (MC), ranks read (UC).
    Broadcast = 1,
}

/// The NVLS heads: the rank of each, in the search's channel order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    ranks: [i32; MAX_HEADS],
    n: usize,
}

impl Heads {
    /// Heads from the NVLS search's channels (each channel's first rank), as NCCL's
    /// `nvlsHeads`. Refuses none, more than [`MAX_HEADS`], or a rank twice.
    pub fn new(ranks: &[i32]) -> Result<Self, NvlsError> {
        if ranks.is_empty() || ranks.len() > MAX_HEADS {
            return Err(NvlsError::Heads(ranks.len()));
        }
        let mut out = [-1i32; MAX_HEADS];
        for (i, &r) in ranks.iter().enumerate() {
            if r < 0 || ranks.iter().take(i).any(|&p| p == r) {
                return Err(NvlsError::Heads(ranks.len()));
            }
            if let Some(slot) = out.get_mut(i) {
                *slot = r;
            }
        }
        Ok(Heads {
            ranks: out,
            n: ranks.len(),
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn ranks(&self) -> &[i32] {
        self.ranks.get(..self.n).unwrap_or(&[])
    }

    /// The heads of NCCL's NVLS graph (`search::compute` with `Pattern::Nvls`): the rank on
    /// each channel, channel `h` giving head `h`, as `ncclNvlsSetup` reads
    /// `graph->intra[h * localRanks]`. A graph the search could not make (no NVSwitch, GPUs
    /// before sm_90: `fallback` set, or no channel) has none.
    #[cfg(feature = "alloc")]
    pub fn from_graph(graph: &crate::search::Graph) -> Result<Self, NvlsError> {
        if graph.pattern != crate::search::Pattern::Nvls || graph.fallback.is_some() {
            return Err(NvlsError::Heads(0));
        }
        let mut ranks = [-1i32; MAX_HEADS];
        let mut n = 0usize;
        for c in &graph.channels {
            let (Some(&r), Some(slot)) = (c.gpus.first(), ranks.get_mut(n)) else {
                return Err(NvlsError::Heads(graph.channels.len()));
            };
            *slot = r;
            n = n.saturating_add(1);
        }
        Heads::new(ranks.get(..n).unwrap_or(&[]))
    }

    /// The head index of `rank` (NCCL's `headRank`), or `None` when `rank` is no head.
    pub fn index_of(&self, rank: i32) -> Option<usize> {
        self.ranks().iter().position(|&r| r == rank)
    }
}

/// Sizes and offsets of one communicator's NVLS memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub nheads: u64,
    pub nchannels: u64,
    /// Bytes of one slot (NCCL's `nvlsStepSize`, the NVLS chunk).
    pub chunk_size: u64,
    /// Bytes of one buffer: [`STEPS`] slots.
    pub buff_size: u64,
    /// Bytes the buffers occupy: `nheads * nchannels * 2 * buff_size`.
    pub data_size: u64,
    /// `data_size` rounded up to the granularity: what every rank allocates and binds.
    pub data_alloc: u64,
    /// Bytes the counter blocks occupy: `nheads * nchannels * 2 * CREDIT_BLOCK`.
    pub credit_size: u64,
    /// `credit_size` rounded up to the granularity.
    pub credit_alloc: u64,
    /// The granularity both allocations are rounded to.
    pub granularity: u64,
}

impl Layout {
    /// The layout for `nheads` heads, `nchannels` channels, slots of `chunk_size` bytes,
    /// with allocations rounded to the larger of the unicast (`cuMemGetAllocationGranularity`)
    /// and multicast (`cuMulticastGetGranularity`) granularities.
    pub fn new(
        nheads: usize,
        nchannels: u64,
        chunk_size: u64,
        uc_granularity: u64,
        mc_granularity: u64,
    ) -> Result<Self, NvlsError> {
        // One counter per rank in a block: at most COUNTER_RANKS heads (one per rank).
        if nheads == 0 || nheads > MAX_HEADS || nheads as u64 > COUNTER_RANKS {
            return Err(NvlsError::Heads(nheads));
        }
        if nchannels == 0 || nchannels > MAX_CHANNELS {
            return Err(NvlsError::Channels(nchannels));
        }
        if chunk_size == 0 || chunk_size.checked_rem(16) != Some(0) {
            return Err(NvlsError::Chunk(chunk_size));
        }
        for g in [uc_granularity, mc_granularity] {
            if !g.is_power_of_two() {
                return Err(NvlsError::Granularity(g));
            }
        }
        let granularity = uc_granularity.max(mc_granularity);
        let nheads = nheads as u64;
        let blocks = nheads
            .checked_mul(nchannels)
            .and_then(|x| x.checked_mul(2))
            .ok_or(NvlsError::Overflow)?;
        let buff_size = chunk_size.checked_mul(STEPS).ok_or(NvlsError::Overflow)?;
        let data_size = blocks.checked_mul(buff_size).ok_or(NvlsError::Overflow)?;
        let credit_size = blocks
            .checked_mul(CREDIT_BLOCK)
            .ok_or(NvlsError::Overflow)?;
        Ok(Layout {
            nheads,
            nchannels,
            chunk_size,
            buff_size,
            data_size,
            data_alloc: align_up(data_size, granularity).ok_or(NvlsError::Overflow)?,
            credit_size,
            credit_alloc: align_up(credit_size, granularity).ok_or(NvlsError::Overflow)?,
            granularity,
        })
    }

    // The index of the (head, direction, channel) block: the same for buffers and counters.
    // In range whenever head < nheads and channel < nchannels (new() checked the product).
    fn block(&self, head: u64, dir: Direction, channel: u64) -> Option<u64> {
        if head >= self.nheads || channel >= self.nchannels {
            return None;
        }
        head.checked_mul(2)?
            .checked_add(dir as u64)?
            .checked_mul(self.nchannels)?
            .checked_add(channel)
    }

    /// Offset of head `head`'s buffer in direction `dir` on channel `channel`, in the data
    /// allocation (the same in the UC and MC mappings). `None` out of range.
    pub fn buffer_offset(&self, head: u64, dir: Direction, channel: u64) -> Option<u64> {
        self.block(head, dir, channel)?.checked_mul(self.buff_size)
    }

    /// Offset of the slot that step `step` uses in that buffer.
    pub fn slot_offset(&self, head: u64, dir: Direction, channel: u64, step: u64) -> Option<u64> {
        let slot = (step % STEPS).checked_mul(self.chunk_size)?;
        self.buffer_offset(head, dir, channel)?.checked_add(slot)
    }

    /// Offset of that (head, direction, channel)'s counter block in the credit allocation.
    pub fn credit_offset(&self, head: u64, dir: Direction, channel: u64) -> Option<u64> {
        self.block(head, dir, channel)?.checked_mul(CREDIT_BLOCK)
    }
}

/// One loop of a channel's NVLS work: `nheads` chunks of `chunk` elements each from
/// `offset` (the last chunks of the last loop may be shorter or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    /// First element of the loop, counted from the channel's first element.
    pub offset: u64,
    /// Elements per head in this loop.
    pub chunk: u64,
}

impl Loop {
    /// The elements of head `head` in this loop, as (offset within the channel, count),
    /// for a channel of `channel_count` elements.
    pub fn head_part(&self, head: u64, channel_count: u64) -> (u64, u64) {
        let start = head
            .saturating_mul(self.chunk)
            .saturating_add(self.offset)
            .min(channel_count);
        let len = self.chunk.min(channel_count.saturating_sub(start));
        (start, len)
    }
}

/// The loops of a channel of `channel_count` elements of `elem_size` bytes, with slots of
/// `chunk_size` bytes and `nheads` heads (NCCL's one-node NVLS all-reduce): full loops of
/// `nheads` chunks, then a last loop whose chunk is the remainder shared by the heads,
/// rounded up to [`LAST_CHUNK_ALIGN`] bytes (never more than a full chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loops {
    channel_count: u64,
    chunk_elems: u64,
    last_chunk: u64,
    loop_elems: u64,
    next: u64,
}

impl Loops {
    /// `None` when `elem_size` is zero or does not divide `chunk_size`, or `nheads` is zero.
    pub fn new(channel_count: u64, elem_size: u64, chunk_size: u64, nheads: u64) -> Option<Self> {
        if nheads == 0 || chunk_size.checked_rem(elem_size)? != 0 {
            return None;
        }
        let chunk_elems = chunk_size.checked_div(elem_size)?;
        if chunk_elems == 0 {
            return None;
        }
        let loop_elems = chunk_elems.checked_mul(nheads)?;
        let rem = channel_count.checked_rem(loop_elems)?;
        let align = LAST_CHUNK_ALIGN.checked_div(elem_size)?.max(1);
        let last_chunk = align_up(rem.div_ceil(nheads), align)?.min(chunk_elems);
        Some(Loops {
            channel_count,
            chunk_elems,
            last_chunk,
            loop_elems,
            next: 0,
        })
    }

    /// How many loops (steps of every head's buffers) the channel takes.
    pub fn nloops(&self) -> u64 {
        self.channel_count.div_ceil(self.loop_elems)
    }
}

impl Iterator for Loops {
    type Item = Loop;

    fn next(&mut self) -> Option<Loop> {
        if self.next >= self.channel_count {
            return None;
        }
        let offset = self.next;
        let left = self.channel_count.saturating_sub(offset);
        let chunk = if left < self.loop_elems {
            self.last_chunk
        } else {
            self.chunk_elems
        };
        self.next = offset.saturating_add(self.loop_elems);
        Some(Loop { offset, chunk })
    }
}

/// The elements channel `channel` of `nchannels` carries of a call of `count` elements of
/// `elem_size` bytes, as (first element, count): equal parts rounded up to 16 bytes, the
/// last ones short or empty. The kernels (`kernels/cuda/nvls.cu`, `direct.cu`) cut the same
/// way.
pub fn channel_part(count: u64, elem_size: u64, nchannels: u64, channel: u64) -> (u64, u64) {
    if nchannels == 0 || elem_size == 0 {
        return (0, 0);
    }
    let align = 16u64.checked_div(elem_size).unwrap_or(1).max(1);
    let per = align_up(count.div_ceil(nchannels), align).unwrap_or(u64::MAX);
    let start = channel.saturating_mul(per).min(count);
    (start, per.min(count.saturating_sub(start)))
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    if align == 0 {
        return None;
    }
    x.div_ceil(align).checked_mul(align)
}

#[cfg(test)]
mod test {
    use super::*;
    use alloc::vec::Vec;

    const MIB2: u64 = 2 << 20;

    #[test]
    fn nccl_sizes_for_two_gpus() {
        // Two GPUs, 16 channels, the default chunk, by NCCL's formulas in
        // ncclNvlsBufferSetup: buffSize 1 MiB, nvlsPerRankSize 32 MiB, nvlsTotalSize 64 MiB.
        let l = Layout::new(2, 16, DEFAULT_CHUNK_SIZE, MIB2, MIB2).unwrap();
        assert_eq!(l.buff_size, 1 << 20);
        assert_eq!(l.data_size, 64 << 20);
        assert_eq!(l.data_alloc, 64 << 20);
        assert_eq!(l.credit_size, 2 * 16 * 2 * 128);
        assert_eq!(l.credit_alloc, MIB2);
        // NCCL's indexing: head 1, channel 3.
        assert_eq!(
            l.buffer_offset(1, Direction::Scatter, 3),
            Some((2 * 16 + 3) << 20)
        );
        assert_eq!(
            l.buffer_offset(1, Direction::Broadcast, 3),
            Some((3 * 16 + 3) << 20)
        );
        assert_eq!(
            l.slot_offset(0, Direction::Scatter, 0, 9),
            Some(DEFAULT_CHUNK_SIZE)
        );
        assert_eq!(
            l.credit_offset(1, Direction::Broadcast, 15),
            Some((3 * 16 + 15) * 128)
        );
        assert_eq!(l.buffer_offset(2, Direction::Scatter, 0), None);
        assert_eq!(l.buffer_offset(0, Direction::Scatter, 16), None);
    }

    #[test]
    fn rounds_to_the_larger_granularity() {
        let l = Layout::new(3, 5, 48 * 1024, 1 << 21, 1 << 29).unwrap();
        assert_eq!(l.credit_size, 3 * 5 * 2 * CREDIT_BLOCK);
        assert_eq!(l.granularity, 1 << 29);
        assert_eq!(l.data_alloc, 1 << 29);
        assert!(l.data_size < l.data_alloc);
    }

    #[test]
    fn refuses_impossible_layouts_with_reasons() {
        assert_eq!(Layout::new(0, 16, 1024, 1, 1), Err(NvlsError::Heads(0)));
        assert_eq!(Layout::new(33, 16, 1024, 1, 1), Err(NvlsError::Heads(33)));
        assert_eq!(Layout::new(9, 16, 1024, 1, 1), Err(NvlsError::Heads(9)));
        assert_eq!(Layout::new(2, 0, 1024, 1, 1), Err(NvlsError::Channels(0)));
        assert_eq!(Layout::new(2, 65, 1024, 1, 1), Err(NvlsError::Channels(65)));
        assert_eq!(Layout::new(2, 4, 1000, 1, 1), Err(NvlsError::Chunk(1000)));
        assert_eq!(
            Layout::new(2, 4, 1024, 3 << 20, 1),
            Err(NvlsError::Granularity(3 << 20))
        );
        assert_eq!(Layout::new(8, 64, 1 << 60, 1, 1), Err(NvlsError::Overflow));
        let text = alloc::format!("{}", NvlsError::Chunk(1000));
        assert!(text.contains("NCCL_NVLS_CHUNKSIZE"), "{text}");
    }

    #[test]
    fn heads_come_from_the_search_channels() {
        let h = Heads::new(&[2, 0, 3, 1]).unwrap();
        assert_eq!(h.len(), 4);
        assert_eq!(h.ranks(), &[2, 0, 3, 1]);
        assert_eq!(h.index_of(3), Some(2));
        assert_eq!(h.index_of(7), None);
        assert_eq!(Heads::new(&[]), Err(NvlsError::Heads(0)));
        assert_eq!(Heads::new(&[1, 1]), Err(NvlsError::Heads(2)));
        assert_eq!(Heads::new(&[0; 33]), Err(NvlsError::Heads(33)));
    }

    #[test]
    fn heads_from_an_nvls_graph() {
        use crate::search::{Channel, Graph, Pattern};
        let mut g = Graph::unsupported(3, Pattern::Nvls);
        assert_eq!(Heads::from_graph(&g), Err(NvlsError::Heads(0)));
        g.fallback = None;
        g.channels = [1, 0, 3, 2]
            .iter()
            .map(|&r| Channel {
                gpus: alloc::vec![r],
                nets: None,
            })
            .collect();
        let h = Heads::from_graph(&g).unwrap();
        assert_eq!(h.ranks(), &[1, 0, 3, 2]);
        assert_eq!(h.index_of(0), Some(1));
        g.pattern = Pattern::Ring;
        assert_eq!(Heads::from_graph(&g), Err(NvlsError::Heads(0)));
    }

    #[test]
    fn max_heads_is_the_search_arity() {
        assert_eq!(MAX_HEADS, crate::search::MAX_NVLS_ARITY);
    }

    #[test]
    fn default_channels_follow_nccl() {
        assert_eq!(default_channels(90, false), 16);
        assert_eq!(default_channels(90, true), 16);
        assert_eq!(default_channels(100, false), 24);
        assert_eq!(default_channels(100, true), 32);
    }

    #[test]
    fn last_loop_shares_the_remainder() {
        // f32, chunk 128 KiB = 32768 elements, 2 heads: one full loop of 65536, then
        // 1000 elements shared: 500 each, rounded up to 4096 (16 KiB).
        let loops: Vec<Loop> = Loops::new(65536 + 1000, 4, DEFAULT_CHUNK_SIZE, 2)
            .unwrap()
            .collect();
        assert_eq!(
            loops,
            [
                Loop {
                    offset: 0,
                    chunk: 32768
                },
                Loop {
                    offset: 65536,
                    chunk: 4096
                }
            ]
        );
        assert_eq!(loops[1].head_part(0, 66536), (65536, 1000));
        assert_eq!(loops[1].head_part(1, 66536), (66536, 0));
        assert!(Loops::new(10, 0, 1024, 2).is_none());
        assert!(Loops::new(10, 3, 1024, 2).is_none());
    }

    proptest::proptest! {
        #[test]
        fn regions_are_disjoint_aligned_and_fit(
            nheads in 1usize..=8,
            nchannels in 1u64..=64,
            chunk16 in 1u64..=16384,
            uc_shift in 12u32..=22,
            mc_shift in 12u32..=30,
        ) {
            let chunk = chunk16 * 16;
            let l = Layout::new(nheads, nchannels, chunk, 1 << uc_shift, 1 << mc_shift).unwrap();
            proptest::prop_assert_eq!(l.data_alloc % (1 << uc_shift), 0);
            proptest::prop_assert_eq!(l.data_alloc % (1 << mc_shift), 0);
            proptest::prop_assert_eq!(l.credit_alloc % l.granularity, 0);
            proptest::prop_assert!(l.data_size <= l.data_alloc);
            proptest::prop_assert!(l.credit_size <= l.credit_alloc);
            let mut data = Vec::new();
            let mut credits = Vec::new();
            for h in 0..nheads as u64 {
                for dir in [Direction::Scatter, Direction::Broadcast] {
                    for c in 0..nchannels {
                        let b = l.buffer_offset(h, dir, c).unwrap();
                        proptest::prop_assert_eq!(b % 16, 0);
                        proptest::prop_assert!(b + l.buff_size <= l.data_size);
                        // Every slot lies in its buffer.
                        let last = l.slot_offset(h, dir, c, STEPS - 1).unwrap();
                        proptest::prop_assert_eq!(last + chunk, b + l.buff_size);
                        data.push(b);
                        let k = l.credit_offset(h, dir, c).unwrap();
                        proptest::prop_assert!(k + CREDIT_BLOCK <= l.credit_size);
                        credits.push(k);
                    }
                }
            }
            data.sort_unstable();
            credits.sort_unstable();
            // Sorted starts at least one region apart: no two regions overlap.
            for w in data.windows(2) {
                proptest::prop_assert!(w[1] >= w[0] + l.buff_size);
            }
            for w in credits.windows(2) {
                proptest::prop_assert!(w[1] >= w[0] + CREDIT_BLOCK);
            }
            proptest::prop_assert_eq!(data.len() as u64 * l.buff_size, l.data_size);
        }

        #[test]
        fn loops_cover_every_element_once(
            count in 0u64..2_000_000,
            elem_shift in 0u32..=3,
            nheads in 1u64..=8,
            chunk_kib in 16u64..=256,
        ) {
            let elem = 1u64 << elem_shift;
            let chunk = chunk_kib * 1024;
            let loops = Loops::new(count, elem, chunk, nheads).unwrap();
            let n = loops.nloops();
            let mut covered = 0u64;
            let mut seen = 0u64;
            for lp in loops {
                proptest::prop_assert!(lp.chunk * elem <= chunk);
                proptest::prop_assert!(lp.chunk > 0);
                for h in 0..nheads {
                    let (start, len) = lp.head_part(h, count);
                    if len > 0 {
                        // Parts follow each other without gap or overlap.
                        proptest::prop_assert_eq!(start, covered);
                        covered += len;
                    }
                }
                seen += 1;
            }
            proptest::prop_assert_eq!(covered, count);
            proptest::prop_assert_eq!(seen, n);
        }

        #[test]
        fn channel_parts_cover_every_element_once(
            count in 0u64..10_000_000,
            elem_shift in 0u32..=3,
            nchannels in 1u64..=64,
        ) {
            let elem = 1u64 << elem_shift;
            let mut next = 0;
            for c in 0..nchannels {
                let (start, len) = channel_part(count, elem, nchannels, c);
                if len > 0 {
                    proptest::prop_assert_eq!(start, next);
                    proptest::prop_assert_eq!((start * elem) % 16, 0);
                }
                next = start + len;
            }
            proptest::prop_assert_eq!(next, count);
        }
    }
}
