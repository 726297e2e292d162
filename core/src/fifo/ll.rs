//! NCCL's LL ("low latency") protocol: data and its validity flag in one 8-byte store.
//!
//! SIMPLE needs two signals per step besides the data: the sender's `tail` says "the slot is
//! full", the receiver's `head` says "the slot is free". Each is another cache line that
//! crosses between cores (or PCIe/NVLink) and another wait. LL drops the tail: every 8-byte
//! [`LlLine`] carries 4 bytes of data and a 4-byte flag derived from the step, and the
//! sender writes both with one 8-byte store, so a receiver that reads the expected flag has
//! read the data that came with it. Half of the bytes moved are flags: LL trades bandwidth
//! for latency and serves small messages.
//!
//! ## Layout
//!
//! A connection's LL buffer is [`LlGeometry::slots`] steps (NCCL's 8) of
//! [`LlGeometry::lines_per_step`] lines each, step `s` in slot `s % slots`:
//!
//! ```text
//! line   = { data: u32 little-endian, flag: u32 little-endian }   8 bytes, 8-byte aligned
//! slot k = lines [k * lines_per_step, (k + 1) * lines_per_step)
//! flag   = (step + 1) mod 2^32                                    (NCCL_LL_FLAG(step + 1))
//! ```
//!
//! A message of `n` bytes at step `s` fills lines `0 .. ceil(n / 4)` of the slot, the last
//! one zero-padded; both ends know `n` from their schedule, so nothing else is sent. NCCL's
//! `ncclLLFifoLine` is two of these lines back to back (`{data1, flag1, data2, flag2}`,
//! stored with one 16-byte store by a GPU thread): the bytes are the same, and since each
//! 8-byte half carries its own flag a reader never depends on the 16-byte store being atomic.
//!
//! ## Rules
//!
//! - **Fresh data.** The receiver at step `s` polls each line of slot `s % slots` until its
//!   flag is `flag(s)`, then takes the data: the 8-byte store made both visible at once.
//! - **Slot reuse.** The receiver publishes `head = s + 1` after it has read step `s` (with
//!   release ordering after its reads); the sender fills step `s` only while
//!   `head + slots >= s + 1` ([`LlSender::acquire`], the SIMPLE send rule with one step per
//!   slice). There is no tail.
//! - **No stale line is ever fresh.** A line keeps the flag of the last step that wrote it.
//!   The flag is `step + 1` truncated to 32 bits, so a line last written at step `w` looks
//!   fresh at step `s` only if `s - w` is a multiple of 2^32. Two things keep `s - w` below
//!   that: the memory starts zeroed with the counters at 0 (flag 0 is `flag(-1)`: every line
//!   counts as written at step -1; a connection starting at another step first writes
//!   [`LlGeometry::initial_flag`] into every line), and once every 2^31 steps per slot the
//!   sender *cleans* the slot: it writes every line of it, with the step's flag and zero
//!   data past the message ([`LlSlot::clean`]; NCCL's `NCCL_LL_CLEAN_MASK`, 0x7ffffff8). A
//!   line is then never more than 2^31 + slots steps stale.
//!
//! The counters are u64 and may wrap: 2^64 is a multiple of 2^32 and of every slot count, so
//! flags, slots and cleaning steps carry on seamlessly past `u64::MAX`. The model check
//! (`ll_model_check`) runs both ends over every interleaving of their line stores and loads,
//! in any order within a step, with flags narrowed to a few bits so that it goes round the
//! flag space several times: no stale line is accepted, no line holding unread data is
//! overwritten, nothing deadlocks; without the cleaning a stale read is found.

use zerocopy::byteorder::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::error::FifoError;
use super::geometry::{FifoGeometry, NCCL_STEPS};
use super::sender::StepSender;
use super::slice::Slice;

/// Bytes of payload per line.
pub const LL_DATA_BYTES: usize = 4;
/// Bytes per line: data and flag.
pub const LL_LINE_BYTES: usize = 8;
/// Width of the flag: NCCL's 32 bits.
pub const LL_FLAG_BITS: u32 = 32;
/// NCCL's LL buffer: `NCCL_LL_LINES_PER_THREAD` (8) x `NCCL_LL_MAX_NTHREADS` (512) 16-byte
/// lines per step, that is 8192 of weft's 8-byte lines (32 KiB of data, 64 KiB per step).
pub const NCCL_LL_LINES_PER_STEP: usize = 8 * 512 * 2;

/// Bytes of one *line pair*: two lines back to back (NCCL's 16-byte `ncclLLFifoLine`), which
/// a GPU thread stores with one vector store of two 8-byte words and polls with one vector
/// load ([`pair_words`], [`pair_data`]). Each word is one line, stored and loaded as a single
/// 8-byte access, so the pair's 16 bytes need not land at once: a reader accepts the pair
/// only when both halves carry the step's flag.
pub const LL_PAIR_BYTES: usize = 2 * LL_LINE_BYTES;
/// Payload bytes of a line pair.
pub const LL_PAIR_DATA_BYTES: usize = 2 * LL_DATA_BYTES;
/// NCCL's default LL buffer (`NCCL_LL_BUFFSIZE`): 8 steps of [`NCCL_LL_LINES_PER_STEP`]
/// lines, 512 KiB.
pub const NCCL_LL_BUFFER_BYTES: usize = NCCL_STEPS * NCCL_LL_LINES_PER_STEP * LL_LINE_BYTES;
/// NCCL's `NCCL_LL_CLEAN_MASK` for 32-bit flags and 8 slots: the sender cleans the slot of
/// step `s` when `s & mask == mask` ([`LlGeometry::cleans`]).
pub const NCCL_LL_CLEAN_MASK: u64 = 0x7fff_fff8;

/// The two words a GPU thread stores for 8 payload bytes `data` (little-endian: bytes 0..4
/// in the first line) under `flag`: two [`LlLine::pack`]ed lines. The kernels' `ll_store`
/// computes exactly this.
pub const fn pair_words(data: u64, flag: u32) -> [u64; 2] {
    [
        LlLine::pack(data as u32, flag),
        LlLine::pack((data >> 32) as u32, flag),
    ]
}

/// The 8 payload bytes of a loaded pair if both of its lines carry `flag`; `None` means "not
/// (completely) written yet" and the reader polls again. The kernels' `ll_try_load`.
pub const fn pair_data(words: [u64; 2], flag: u32) -> Option<u64> {
    match (
        LlLine::data_if(words[0], flag),
        LlLine::data_if(words[1], flag),
    ) {
        (Some(lo), Some(hi)) => Some((lo as u64) | ((hi as u64) << 32)),
        _ => None,
    }
}

/// One LL line as it lies in memory: 4 data bytes, then the 4-byte flag, both little-endian
/// (the GPU's and x86's byte order, and NCCL's `ncclLLFifoLine` halves).
///
/// Writers and readers move it as one 8-byte word ([`LlLine::word`], [`LlLine::from_word`]):
/// the word is what is stored and loaded atomically.
#[repr(C, align(8))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct LlLine {
    pub data: U32,
    pub flag: U32,
}

const _: () = {
    assert!(core::mem::size_of::<LlLine>() == LL_LINE_BYTES);
    assert!(core::mem::align_of::<LlLine>() == 8);
    assert!(core::mem::offset_of!(LlLine, flag) == LL_DATA_BYTES);
};

impl LlLine {
    pub fn new(data: u32, flag: u32) -> Self {
        LlLine {
            data: U32::new(data),
            flag: U32::new(flag),
        }
    }

    /// The 8-byte word to store: the line's bytes read as a little-endian u64, so data is
    /// the low half and the flag the high half on every host.
    pub fn word(&self) -> u64 {
        u64::from_le_bytes(zerocopy::transmute!(*self))
    }

    /// The line a loaded word holds.
    pub fn from_word(word: u64) -> Self {
        zerocopy::transmute!(word.to_le_bytes())
    }

    /// The word for `data` under `flag`, without building the struct (the hot path).
    pub const fn pack(data: u32, flag: u32) -> u64 {
        (data as u64) | ((flag as u64) << 32)
    }

    /// The data of a loaded word if its flag is `flag`; `None` means "not written yet".
    pub const fn data_if(word: u64, flag: u32) -> Option<u32> {
        if (word >> 32) as u32 == flag {
            Some(word as u32)
        } else {
            None
        }
    }
}

/// The shape of an LL buffer: slots, lines per slot, and the width of the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlGeometry {
    slots: u8,
    lines_per_step: u32,
    flag_bits: u8,
}

impl LlGeometry {
    /// `slots` (a power of two up to 8) of `lines_per_step` lines (at least 1), 32-bit flags.
    pub fn new(slots: usize, lines_per_step: usize) -> Result<Self, FifoError> {
        Self::with_flag_bits(slots, lines_per_step, LL_FLAG_BITS)
    }

    /// NCCL's 8 slots of `lines_per_step` lines.
    pub fn nccl(lines_per_step: usize) -> Result<Self, FifoError> {
        Self::new(NCCL_STEPS, lines_per_step)
    }

    /// As [`LlGeometry::new`] with flags of `flag_bits` bits instead of 32: narrow flags
    /// wrap within a few dozen steps, which is how the model check covers the wrap. Needs
    /// `2^(flag_bits - 1) > slots`, so that cleaning keeps every line less than a flag
    /// period stale.
    pub fn with_flag_bits(
        slots: usize,
        lines_per_step: usize,
        flag_bits: u32,
    ) -> Result<Self, FifoError> {
        let bad = |field, value: usize| FifoError::BadGeometry {
            field,
            value: u64::try_from(value).unwrap_or(u64::MAX),
        };
        let credit = FifoGeometry::new(slots, 1, 1)?;
        let lines = u32::try_from(lines_per_step)
            .ok()
            .filter(|l| *l > 0)
            .ok_or(bad("lines_per_step", lines_per_step))?;
        let period = 1u64.checked_shl(flag_bits.saturating_sub(1)).unwrap_or(0);
        if flag_bits > LL_FLAG_BITS || period <= u64::from(credit.slots() as u32) {
            return Err(bad(
                "flag_bits",
                usize::try_from(flag_bits).unwrap_or(usize::MAX),
            ));
        }
        Ok(LlGeometry {
            // At most 8 and 32: validated above.
            slots: u8::try_from(credit.slots()).unwrap_or(u8::MAX),
            lines_per_step: lines,
            flag_bits: u8::try_from(flag_bits).unwrap_or(u8::MAX),
        })
    }

    pub fn slots(&self) -> usize {
        usize::from(self.slots)
    }

    pub fn lines_per_step(&self) -> usize {
        self.lines_per_step as usize
    }

    /// Payload bytes one step carries.
    pub fn step_data_bytes(&self) -> usize {
        self.lines_per_step().saturating_mul(LL_DATA_BYTES)
    }

    /// Bytes of the whole buffer (lines and flags).
    pub fn buffer_bytes(&self) -> usize {
        self.slots()
            .saturating_mul(self.lines_per_step())
            .saturating_mul(LL_LINE_BYTES)
    }

    /// Lines that carry `bytes` of payload.
    pub fn lines_for(bytes: usize) -> usize {
        bytes.div_ceil(LL_DATA_BYTES)
    }

    /// NCCL's 8 slots over a buffer of `buffer_bytes` (`weft_conn_info.buff_sizes[LL]`), as
    /// the GPU kernels divide it: each slot a whole number of line pairs. A size that does
    /// not divide into 8 slots of whole pairs is refused rather than rounded, because both
    /// ends must compute the same slots.
    pub fn for_buffer(buffer_bytes: usize) -> Result<Self, FifoError> {
        let slot_bytes = buffer_bytes / NCCL_STEPS;
        let whole = slot_bytes > 0
            && slot_bytes.is_multiple_of(LL_PAIR_BYTES)
            && buffer_bytes.is_multiple_of(NCCL_STEPS);
        if !whole {
            return Err(FifoError::BadGeometry {
                field: "ll buffer_bytes",
                value: u64::try_from(buffer_bytes).unwrap_or(u64::MAX),
            });
        }
        Self::nccl(slot_bytes / LL_LINE_BYTES)
    }

    /// Line pairs per slot (an odd line count leaves its last line out of every pair).
    pub fn pairs_per_step(&self) -> usize {
        self.lines_per_step() / 2
    }

    /// Line pairs that carry `bytes` of payload: pairs `0 .. pairs_for(bytes)` of the slot,
    /// the last zero-padded. They cover the [`LlGeometry::lines_for`] lines a line-by-line
    /// reader polls, and one line more when `bytes % 8` is 1 to 4: that line carries the
    /// step's flag and zero data, which such a reader never looks at (as if cleaned).
    pub fn pairs_for(bytes: usize) -> usize {
        bytes.div_ceil(LL_PAIR_DATA_BYTES)
    }

    fn flag_mask(&self) -> u64 {
        u64::MAX >> (64u32.saturating_sub(u32::from(self.flag_bits)))
    }

    /// The flag of every line written at `step`: `step + 1`, in `flag_bits` bits.
    pub fn flag(&self, step: u64) -> u32 {
        // The mask keeps at most 32 bits.
        (step.wrapping_add(1) & self.flag_mask()) as u32
    }

    /// The flag to write into every line before a connection's first step is
    /// `start_step`, as if each had been written at `start_step - 1`: 0 for a connection
    /// that starts at step 0, so zeroed memory is already initialised.
    pub fn initial_flag(&self, start_step: u64) -> u32 {
        self.flag(start_step.wrapping_sub(1))
    }

    /// Whether the sender cleans the slot at `step`: the last `slots` steps of every half
    /// flag period (NCCL: `(step & NCCL_LL_CLEAN_MASK) == NCCL_LL_CLEAN_MASK`, mask
    /// 0x7ffffff8 for 32-bit flags and 8 slots), so every slot is cleaned once per half period.
    pub fn cleans(&self, step: u64) -> bool {
        let mask = (self.flag_mask() >> 1) & !(u64::from(self.slots).wrapping_sub(1));
        step & mask == mask
    }

    /// The slot of `step`.
    pub fn slot_of(&self, step: u64) -> usize {
        // slots is a power of two; the result is below 8.
        (step & u64::from(self.slots).wrapping_sub(1)) as usize
    }

    /// Index of `line` of `step`'s slot in the buffer's lines; `None` past the slot.
    pub fn line_index(&self, step: u64, line: usize) -> Option<usize> {
        if line >= self.lines_per_step() {
            return None;
        }
        self.slot_of(step)
            .checked_mul(self.lines_per_step())?
            .checked_add(line)
    }
}

/// A step granted to the sender, or expected by the receiver: where its lines are and the
/// flag they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlSlot {
    step: u64,
    slot: u8,
    flag: u32,
    clean: bool,
}

impl LlSlot {
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The slot's index (its lines start at `slot * lines_per_step`).
    pub fn slot(&self) -> usize {
        usize::from(self.slot)
    }

    /// The flag of this step's lines.
    pub fn flag(&self) -> u32 {
        self.flag
    }

    /// Sender only: write every line of the slot at this step, past the message too (with
    /// this flag and zero data), so that no line outlives a flag period.
    pub fn clean(&self) -> bool {
        self.clean
    }
}

/// The sending end of an LL connection, as pure state: waits for credit like SIMPLE, posts
/// nothing (the flags are the post).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlSender {
    geometry: LlGeometry,
    steps: StepSender,
    held: Option<(LlSlot, Slice)>,
}

impl LlSender {
    /// A sender whose next step is `step` (0 on a fresh connection).
    pub fn new(geometry: LlGeometry, step: u64) -> Self {
        // Valid: the geometry was built from the same slot count.
        let credit = FifoGeometry::new(geometry.slots(), 1, 1).unwrap_or(FifoGeometry::P2P);
        LlSender {
            geometry,
            steps: StepSender::load(credit, step),
            held: None,
        }
    }

    pub fn geometry(&self) -> LlGeometry {
        self.geometry
    }

    /// The step the next [`LlSender::acquire`] asks credit for.
    pub fn next_step(&self) -> u64 {
        self.steps.next_step()
    }

    /// The next step if the receiver's `head` frees its slot (`head + slots >= step + 1`),
    /// `None` to wait. Asking again before [`LlSender::post`] returns the same step. A head
    /// past every step sent is a protocol violation, reported.
    pub fn acquire(&mut self, head: u64) -> Result<Option<LlSlot>, FifoError> {
        if let Some((slot, _)) = self.held {
            return Ok(Some(slot));
        }
        let Some(slice) = self.steps.acquire(head)? else {
            return Ok(None);
        };
        let step = slice.step();
        let slot = LlSlot {
            step,
            slot: u8::try_from(slice.first_slot()).unwrap_or(u8::MAX),
            flag: self.geometry.flag(step),
            clean: self.geometry.cleans(step),
        };
        self.held = Some((slot, slice));
        Ok(Some(slot))
    }

    /// The step's lines are written: the next step may be acquired.
    pub fn post(&mut self, slot: LlSlot) -> Result<(), FifoError> {
        match self.held {
            Some((held, slice)) if held == slot => {
                self.steps.post(slice)?;
                self.held = None;
                Ok(())
            }
            Some((held, _)) => Err(FifoError::PostOutOfOrder {
                expected: held.step,
                got: slot.step,
            }),
            None => Err(FifoError::NothingAcquired { step: slot.step }),
        }
    }
}

/// The receiving end of an LL connection, as pure state: the step it waits for and the head
/// it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlReceiver {
    geometry: LlGeometry,
    step: u64,
}

impl LlReceiver {
    /// A receiver whose next step is `step` (0 on a fresh connection; its head starts there).
    pub fn new(geometry: LlGeometry, step: u64) -> Self {
        LlReceiver { geometry, step }
    }

    pub fn geometry(&self) -> LlGeometry {
        self.geometry
    }

    /// The step whose lines to poll next, with their flag.
    pub fn expected(&self) -> LlSlot {
        LlSlot {
            step: self.step,
            slot: u8::try_from(self.geometry.slot_of(self.step)).unwrap_or(u8::MAX),
            flag: self.geometry.flag(self.step),
            clean: false,
        }
    }

    /// Every line of `slot` was read: returns the head to publish (`step + 1`).
    pub fn post(&mut self, slot: LlSlot) -> Result<u64, FifoError> {
        if slot.step != self.step {
            return Err(FifoError::PostOutOfOrder {
                expected: self.step,
                got: slot.step,
            });
        }
        self.step = self.step.wrapping_add(1);
        Ok(self.step)
    }
}

#[cfg(test)]
mod test {
    use std::string::ToString;

    use zerocopy::IntoBytes;

    use super::*;

    #[test]
    fn a_line_is_data_then_flag_little_endian() {
        let line = LlLine::new(0x0403_0201, 0x0807_0605);
        assert_eq!(line.as_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(line.word(), 0x0807_0605_0403_0201);
        assert_eq!(LlLine::pack(0x0403_0201, 0x0807_0605), line.word());
        assert_eq!(LlLine::from_word(line.word()), line);
        assert_eq!(LlLine::data_if(line.word(), 0x0807_0605), Some(0x0403_0201));
        assert_eq!(LlLine::data_if(line.word(), 0x0807_0606), None);
        // Two lines are NCCL's 16-byte ncclLLFifoLine {data1, flag1, data2, flag2}.
        let pair = [LlLine::new(0xd1, 0xf1), LlLine::new(0xd2, 0xf1)];
        let words: [u32; 4] = zerocopy::transmute!(pair);
        assert_eq!(words.map(u32::from_le), [0xd1, 0xf1, 0xd2, 0xf1]);
    }

    #[test]
    fn flags_and_cleaning_are_nccls() {
        let g = LlGeometry::nccl(NCCL_LL_LINES_PER_STEP).unwrap();
        assert_eq!(g.buffer_bytes(), 8 * 64 * 1024); // NCCL's LL buffer: 512 KiB
        assert_eq!(g.step_data_bytes(), 32 * 1024);
        // NCCL_LL_FLAG(step + 1), 32 bits; zeroed memory is flag(-1) = flag(2^32 - 1).
        assert_eq!(
            (g.flag(0), g.flag(7), g.flag(u64::from(u32::MAX))),
            (1, 8, 0)
        );
        assert_eq!(g.flag(u64::MAX), 0);
        assert_eq!((g.initial_flag(0), g.initial_flag(100)), (0, 100));
        // NCCL cleans where (step & 0x7ffffff8) == 0x7ffffff8.
        for step in [
            0u64,
            7,
            0x7fff_fff7,
            0x7fff_fff8,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fff8,
        ] {
            assert_eq!(
                g.cleans(step),
                step & 0x7fff_fff8 == 0x7fff_fff8,
                "step {step:#x}"
            );
        }
        // Each slot is cleaned once per 2^31 steps.
        let cleaned: std::vec::Vec<u64> = (0x7fff_fff0..0x8000_0010u64)
            .chain(0xffff_fff0..0x1_0000_0010)
            .filter(|s| g.cleans(*s))
            .collect();
        assert_eq!(cleaned.len(), 16);
        assert_eq!(cleaned.first(), Some(&0x7fff_fff8));
        assert_eq!(
            (
                g.line_index(9, 0),
                g.line_index(9, 8191),
                g.line_index(9, 8192)
            ),
            (Some(8192), Some(16383), None)
        );
        assert_eq!((LlGeometry::lines_for(0), LlGeometry::lines_for(5)), (0, 2));
    }

    #[test]
    fn gpu_line_pairs_are_two_lines_a_line_reader_accepts() {
        let g = LlGeometry::for_buffer(NCCL_LL_BUFFER_BYTES).unwrap();
        assert_eq!(g, LlGeometry::nccl(NCCL_LL_LINES_PER_STEP).unwrap());
        assert_eq!((g.pairs_per_step(), g.step_data_bytes()), (4096, 32 * 1024));
        assert_eq!(NCCL_LL_BUFFER_BYTES, 512 * 1024);
        // Slots of whole pairs only: 8 x 16 bytes at least, a multiple of 8 x 16.
        for bad in [0, 8, 120, 8 * 16 + 8, 8 * 24] {
            assert!(
                matches!(
                    LlGeometry::for_buffer(bad),
                    Err(FifoError::BadGeometry {
                        field: "ll buffer_bytes",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert_eq!(LlGeometry::for_buffer(8 * 16).unwrap().lines_per_step(), 2);
        assert_eq!(
            (
                LlGeometry::pairs_for(0),
                LlGeometry::pairs_for(1),
                LlGeometry::pairs_for(8),
                LlGeometry::pairs_for(9)
            ),
            (0, 1, 1, 2)
        );
        // A message written pair by pair (as a GPU thread does) reads back line by line
        // (as core's receiver and the CPU executor do), for every length and alignment of
        // the last pair, and a pair with one half stale is not accepted.
        let flag = 0x8000_0001;
        let message: std::vec::Vec<u8> = (0..37u8).map(|b| b.wrapping_mul(29) ^ 0x5a).collect();
        for n in 0..=message.len() {
            let mut lines = std::vec![0u64; 2 * LlGeometry::pairs_for(n) + 2];
            for p in 0..LlGeometry::pairs_for(n) {
                let mut bytes = [0u8; 8];
                let end = n.min(8 * p + 8);
                bytes[..end - 8 * p].copy_from_slice(&message[8 * p..end]);
                let words = pair_words(u64::from_le_bytes(bytes), flag);
                lines[2 * p..2 * p + 2].copy_from_slice(&words);
                assert_eq!(pair_data(words, flag), Some(u64::from_le_bytes(bytes)));
                assert_eq!(pair_data([words[0], 0], flag), None);
                assert_eq!(pair_data([0, words[1]], flag), None);
                assert_eq!(pair_data(words, flag + 1), None);
            }
            let mut read = std::vec::Vec::new();
            for line in &lines[..LlGeometry::lines_for(n)] {
                let data = LlLine::data_if(*line, flag).expect("a line of the message is fresh");
                read.extend_from_slice(&data.to_le_bytes());
            }
            read.truncate(n);
            assert_eq!(read, &message[..n], "{n} bytes");
            // The extra half of a short last pair is fresh, with zero data.
            if n % 8 != 0 && n % 8 <= 4 {
                let extra = lines[LlGeometry::lines_for(n)];
                assert_eq!(LlLine::data_if(extra, flag), Some(0), "{n} bytes");
            }
        }
        // The kernels' clean mask is core's cleaning rule for 32-bit flags and 8 slots.
        for step in [0x7fff_fff7u64, 0x7fff_fff8, 0xffff_ffff, 0x1_7fff_fffc] {
            assert_eq!(
                g.cleans(step),
                step & NCCL_LL_CLEAN_MASK == NCCL_LL_CLEAN_MASK
            );
        }
    }

    #[test]
    fn bad_geometries_are_refused() {
        let bad = |slots, lines, bits| LlGeometry::with_flag_bits(slots, lines, bits).unwrap_err();
        assert!(matches!(
            bad(3, 8, 32),
            FifoError::BadGeometry {
                field: "slots",
                value: 3
            }
        ));
        assert!(matches!(
            bad(8, 0, 32),
            FifoError::BadGeometry {
                field: "lines_per_step",
                value: 0
            }
        ));
        // 8 slots need half a flag period above 8: 5 bits.
        assert!(matches!(
            bad(8, 4, 4),
            FifoError::BadGeometry {
                field: "flag_bits",
                value: 4
            }
        ));
        assert!(LlGeometry::with_flag_bits(8, 4, 5).is_ok());
        assert!(bad(8, 4, 33).to_string().contains("flag_bits = 33"));
    }

    #[test]
    fn sender_waits_for_credit_and_posts_in_order() {
        let g = LlGeometry::with_flag_bits(4, 2, 8).unwrap();
        let mut s = LlSender::new(g, 10);
        let a = s.acquire(10).unwrap().unwrap();
        assert_eq!(
            (a.step(), a.slot(), a.flag(), a.clean()),
            (10, 2, 11, false)
        );
        // Acquiring again before the post returns the same step.
        assert_eq!(s.acquire(10).unwrap(), Some(a));
        s.post(a).unwrap();
        assert_eq!(s.post(a), Err(FifoError::NothingAcquired { step: 10 }));
        for step in 11..14 {
            let slot = s.acquire(10).unwrap().unwrap();
            assert_eq!(slot.step(), step);
            s.post(slot).unwrap();
        }
        // Head 10 and 4 slots: step 14 must wait until the receiver has read step 10.
        assert_eq!(s.acquire(10), Ok(None));
        assert_eq!(s.acquire(11).unwrap().map(|x| x.step()), Some(14));
        assert_eq!(
            LlSender::new(g, 5).acquire(6),
            Err(FifoError::HeadAhead { head: 6, posted: 5 })
        );
        let mut r = LlReceiver::new(g, u64::MAX);
        let want = r.expected();
        assert_eq!((want.step(), want.slot(), want.flag()), (u64::MAX, 3, 0));
        assert_eq!(
            r.post(LlReceiver::new(g, 3).expected()),
            Err(FifoError::PostOutOfOrder {
                expected: u64::MAX,
                got: 3
            })
        );
        assert_eq!(r.post(want), Ok(0));
        assert_eq!(r.expected().flag(), 1);
    }
}
