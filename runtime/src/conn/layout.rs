//! The bytes of one connection: a header of cache-line-separated counters, then the slots.
//!
//! ```text
//! offset    0  ident: magic, version, slots, step_bytes,     (written once, before sharing)
//!                     ll_lines
//!         128  head:  steps the receiver has consumed         (receiver writes, sender reads)
//!         256  tail:  steps the sender has filled             (sender writes, receiver reads)
//!         264  sizes: [i64; 8], bytes per slot, -1 = unused   (sender sets, receiver clears)
//!         384  state: closed/aborted bits, both pids, pid     (either side, rarely)
//!                     namespaces and CPUs
//!         512  ll_head: LL steps the receiver has read        (receiver writes, sender reads)
//!        4096  slot 0, slot 1, ... slot (slots-1), `step_bytes` each
//!   4096 + slots * step_bytes
//!              LL buffer: slots x ll_lines 8-byte lines       (sender stores, receiver polls)
//! ```
//!
//! The LL buffer is `weft_core::fifo::ll`'s: a line is `{ data: u32, flag: u32 }` stored as
//! one 8-byte word, step `s` in slot `s % slots`. It has its own step counter and head
//! (`ll_head`), independent of SIMPLE's, so its lines' flags only advance with LL steps and
//! the cleaning rule bounds how stale a line can be. Connections that never use LL (NET,
//! whose proxy moves SIMPLE slots only) have `ll_lines` 0 and no LL buffer.
//!
//! Each counter sits alone in a 128-byte line: the sender polls `head` while the receiver
//! writes it and the other way round for `tail`, and a counter sharing a line with the other
//! side's counter would bounce that line on every post. 128 rather than 64 because x86's
//! adjacent-line prefetcher pulls lines in pairs. The sizes share the tail's line: the
//! sender writes a slot's size just before the tail and the receiver reads it just after,
//! so one line crosses for both (in lines of their own, a small message paid an extra
//! transfer and two invalidations per post). The slots start on a page so that each is
//! page-aligned whenever `step_bytes` is a multiple of 4096 (good for copies, and for
//! registering the buffer with a NIC or the GPU later).

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

use weft_core::fifo::NCCL_STEPS;
use weft_core::fifo::ll::LL_LINE_BYTES;

use weft_config::TransportSettings;

/// "weftFIFO" in ASCII: identifies connection memory (a peer mapping a file of something else
/// sees a clear error instead of garbage counters).
pub const FIFO_MAGIC: u64 = u64::from_be_bytes(*b"weftFIFO");
/// Bumped whenever the header layout changes.
pub const FIFO_VERSION: u64 = 3;
/// Where slot 0 starts.
pub const DATA_OFFSET: usize = 4096;
/// Alignment of the whole region (the slots are page-aligned).
pub const REGION_ALIGN: usize = 4096;

/// Default bytes per step for host memory: 128 KiB, a 1 MiB ring of 8 slots.
///
/// NCCL's SIMPLE default (4 MiB buffer, 512 KiB steps) is sized for GPU copies over PCIe or
/// NVLink. On the host both sides copy with the CPU, and two things favour a smaller ring:
/// - cache: a 1 MiB ring fits a core's L2 (1-2 MiB on current x86 servers) and stays in L3,
///   so the receiver reads what the sender just wrote from cache rather than DRAM, while
///   128 KiB per step keeps the per-step head/tail handshake (a few cache-line transfers,
///   under a microsecond) around 1% of the step's copy time;
/// - /dev/shm: Docker's default is 64 MiB. Eight local ranks with four channels each hold
///   32 connections: 32 MiB at 1 MiB each, but all 64 MiB at 2 MiB and 128+ MiB at NCCL's 4 MiB.
///
/// `examples/shm_bw.rs` measures the trade-off; larger steps gain a little bandwidth when the
/// ranks have cores to themselves (set `WEFT_SHM_BUFFSIZE`).
pub const DEFAULT_STEP_BYTES: usize = 128 * 1024;

/// Default lines per LL step for host memory: 2048 lines, 8 KiB of data (16 KiB with the
/// flags), a 128 KiB LL buffer of 8 steps.
///
/// NCCL's LL step is 32 KiB of data (8192 lines), sized for 512 GPU threads each storing
/// 16 bytes at a time. On the host LL serves messages of a few KiB (above that SIMPLE's
/// copies win, docs/benchmarks.md), so larger steps would only take /dev/shm; a message
/// larger than a step is simply sent in several, pipelined. `WEFT_LL_BUFFSIZE` /
/// `NCCL_LL_BUFFSIZE` set it.
pub const DEFAULT_LL_LINES: usize = 2048;
/// LL steps are a whole number of these lines: 512 bytes of data, a multiple of every
/// element size (and NCCL's 512-byte grain), so a step never splits an element.
pub const LL_LINES_GRAIN: usize = 128;

/// A 128-byte-aligned, 128-byte-padded cell, so that no two of them share a cache line pair.
#[repr(C, align(128))]
#[derive(Debug)]
pub(crate) struct Line<T>(pub(crate) T);

#[repr(C)]
#[derive(Debug)]
pub(crate) struct Ident {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU64,
    pub(crate) slots: AtomicU64,
    pub(crate) step_bytes: AtomicU64,
    /// Lines per LL step (0: no LL buffer).
    pub(crate) ll_lines: AtomicU64,
}

/// Bits of [`State::flags`].
pub(crate) mod flags {
    pub(crate) const SENDER_CLOSED: u64 = 1;
    pub(crate) const RECEIVER_CLOSED: u64 = 2;
    pub(crate) const SENDER_ABORTED: u64 = 4;
    pub(crate) const RECEIVER_ABORTED: u64 = 8;
}

/// What the sender publishes for SIMPLE, in one line.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Posted {
    /// Steps the sender has filled.
    pub(crate) tail: AtomicU64,
    /// Bytes in each slot, [`weft_core::fifo::SIZE_UNUSED`] when free.
    pub(crate) sizes: [AtomicI64; NCCL_STEPS],
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct State {
    /// The abort/error word: `flags::*` bits, set with `fetch_or`, never cleared.
    pub(crate) flags: AtomicU64,
    /// The pids of both ends (0 = not attached yet), for dead-peer detection and diagnostics.
    pub(crate) sender_pid: AtomicU32,
    pub(crate) receiver_pid: AtomicU32,
    /// The inode of each end's pid namespace: a pid is only checked from the same namespace
    /// (containers sharing /dev/shm may have different ones).
    pub(crate) sender_pidns: AtomicU64,
    pub(crate) receiver_pidns: AtomicU64,
    /// The CPU each end last waited on, plus one (0: not known yet). Written only when it
    /// changes, so the line stays shared; a waiter whose peer is on its own CPU stops
    /// spinning (the peer cannot post while it spins) and yields.
    pub(crate) sender_cpu: AtomicU32,
    pub(crate) receiver_cpu: AtomicU32,
}

/// Where the header's version sits (for the sweep, which reads it from a file).
pub const VERSION_OFFSET: usize =
    std::mem::offset_of!(FifoHeader, ident) + std::mem::offset_of!(Ident, version);
/// Where the receiver's pid namespace sits in the memory (for the stale-segment sweep, which
/// reads it from a file without mapping it).
pub const RECEIVER_PIDNS_OFFSET: usize =
    std::mem::offset_of!(FifoHeader, state) + std::mem::offset_of!(State, receiver_pidns);
/// Where the receiver's pid sits.
pub const RECEIVER_PID_OFFSET: usize =
    std::mem::offset_of!(FifoHeader, state) + std::mem::offset_of!(State, receiver_pid);

/// The header at offset 0 of every connection's memory. Every field is an atomic: the memory
/// is shared with another thread or process, and any bit pattern is a valid value, so a
/// corrupt or hostile peer can produce wrong numbers (which the protocol checks) but never
/// undefined behaviour on our side.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct FifoHeader {
    pub(crate) ident: Line<Ident>,
    pub(crate) head: Line<AtomicU64>,
    pub(crate) posted: Line<Posted>,
    pub(crate) state: Line<State>,
    pub(crate) ll_head: Line<AtomicU64>,
}

const _: () = {
    assert!(size_of::<FifoHeader>() == 5 * 128);
    assert!(size_of::<FifoHeader>() <= DATA_OFFSET);
    assert!(align_of::<FifoHeader>() <= REGION_ALIGN);
    assert!(std::mem::offset_of!(FifoHeader, head) == 128);
    assert!(std::mem::offset_of!(FifoHeader, posted) == 256);
    assert!(std::mem::offset_of!(Posted, sizes) == 8);
    assert!(size_of::<Posted>() <= 128);
    assert!(std::mem::offset_of!(FifoHeader, state) == 384);
    assert!(std::mem::offset_of!(FifoHeader, ll_head) == 512);
    assert!(RECEIVER_PID_OFFSET == 384 + 12);
    assert!(RECEIVER_PIDNS_OFFSET == 384 + 24);
    assert!(VERSION_OFFSET == 8);
};

/// A layout parameter out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutError {
    pub field: &'static str,
    pub value: u64,
    pub rule: &'static str,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad FIFO buffer layout: {} = {} ({})",
            self.field, self.value, self.rule
        )
    }
}

impl std::error::Error for LayoutError {}

/// How many slots a connection has and how big each is, for SIMPLE and LL: the size of its
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FifoLayout {
    slots: usize,
    step_bytes: usize,
    /// Lines per LL step; 0: no LL buffer.
    ll_lines: usize,
}

impl Default for FifoLayout {
    /// 8 slots of [`DEFAULT_STEP_BYTES`] and an LL buffer of [`DEFAULT_LL_LINES`] per step.
    fn default() -> Self {
        FifoLayout {
            slots: NCCL_STEPS,
            step_bytes: DEFAULT_STEP_BYTES,
            ll_lines: DEFAULT_LL_LINES,
        }
    }
}

impl FifoLayout {
    /// `slots`: a power of two up to [`NCCL_STEPS`]; `step_bytes`: a positive multiple of 64
    /// (slots start on cache lines) with a whole ring under 4 GiB (sizes are 32-bit counts).
    pub fn new(slots: usize, step_bytes: usize) -> Result<Self, LayoutError> {
        let as_u64 = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        if !slots.is_power_of_two() || slots > NCCL_STEPS {
            return Err(LayoutError {
                field: "slots",
                value: as_u64(slots),
                rule: "a power of two up to 8",
            });
        }
        let ring = step_bytes.checked_mul(slots);
        if step_bytes == 0
            || !step_bytes.is_multiple_of(64)
            || ring.is_none_or(|r| u32::try_from(r).is_err())
        {
            return Err(LayoutError {
                field: "step_bytes",
                value: as_u64(step_bytes),
                rule: "a positive multiple of 64, with slots * step_bytes under 4 GiB",
            });
        }
        Ok(FifoLayout {
            slots,
            step_bytes,
            ll_lines: 0,
        })
    }

    /// The same SIMPLE slots with an LL buffer of `ll_lines` lines per step: 0 (none) or a
    /// multiple of [`LL_LINES_GRAIN`], with the LL buffer under 4 GiB.
    pub fn with_ll_lines(self, ll_lines: usize) -> Result<Self, LayoutError> {
        let buffer = ll_lines
            .checked_mul(self.slots)
            .and_then(|l| l.checked_mul(LL_LINE_BYTES));
        if !ll_lines.is_multiple_of(LL_LINES_GRAIN)
            || buffer.is_none_or(|b| u32::try_from(b).is_err())
        {
            return Err(LayoutError {
                field: "ll_lines",
                value: u64::try_from(ll_lines).unwrap_or(u64::MAX),
                rule: "0 or a multiple of 128 lines per LL step, the LL buffer under 4 GiB",
            });
        }
        Ok(FifoLayout { ll_lines, ..self })
    }

    /// The SHM connections' layout of a transport built on its own: 8 slots of
    /// `WEFT_SHM_BUFFSIZE`, else of `WEFT_BUFFSIZE` / `NCCL_BUFFSIZE` (the whole ring in
    /// bytes, as in NCCL, each step rounded down to a multiple of 64), else of
    /// [`DEFAULT_STEP_BYTES`]; the LL buffer of `WEFT_LL_BUFFSIZE` / `NCCL_LL_BUFFSIZE`, else
    /// [`DEFAULT_LL_LINES`]. A size the layout cannot take is an error naming the variable.
    pub fn from_settings(settings: &TransportSettings) -> Result<Self, LayoutError> {
        let (var, total) = match (settings.shm_buffsize, settings.buffsize) {
            (Some(total), _) => ("WEFT_SHM_BUFFSIZE", Some(total)),
            (None, total) => ("WEFT_BUFFSIZE / NCCL_BUFFSIZE", total),
        };
        let simple = match total {
            Some(total) => {
                Self::new(NCCL_STEPS, ring_step_bytes(total)).map_err(|e| LayoutError {
                    field: var,
                    value: u64::try_from(total).unwrap_or(u64::MAX),
                    rule: e.rule,
                })?
            }
            None => Self::default(),
        };
        simple.with_ll_lines(settings.ll_buffsize.map_or(DEFAULT_LL_LINES, ll_lines_of))
    }

    /// Lines per LL step (0: no LL buffer).
    pub fn ll_lines(&self) -> usize {
        self.ll_lines
    }

    /// Where the LL buffer starts: after the SIMPLE slots (a multiple of 64, as every
    /// `step_bytes` is).
    pub fn ll_offset(&self) -> usize {
        DATA_OFFSET.saturating_add(self.slots.saturating_mul(self.step_bytes))
    }

    /// Bytes of the LL buffer.
    pub fn ll_bytes(&self) -> usize {
        self.slots
            .saturating_mul(self.ll_lines)
            .saturating_mul(LL_LINE_BYTES)
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// Bytes of memory the connection needs: header page, the SIMPLE ring and the LL
    /// buffer. Cannot overflow: both are kept under 4 GiB.
    pub fn total_bytes(&self) -> usize {
        self.ll_offset().saturating_add(self.ll_bytes())
    }
}

/// Lines per LL step of an LL buffer of `total` bytes for [`NCCL_STEPS`] steps, flags
/// included (`NCCL_LL_BUFFSIZE`, as in NCCL), rounded down to a multiple of
/// [`LL_LINES_GRAIN`] lines; 0 disables LL.
pub fn ll_lines_of(total: usize) -> usize {
    let lines = total / NCCL_STEPS / LL_LINE_BYTES;
    lines - lines % LL_LINES_GRAIN
}

/// Bytes per step of a ring of `total` bytes for [`NCCL_STEPS`] slots (`NCCL_BUFFSIZE`, as
/// NCCL reads it), rounded down to a multiple of 64.
pub fn ring_step_bytes(total: usize) -> usize {
    (total / NCCL_STEPS) & !63
}
