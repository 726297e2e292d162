//! One connection's memory with a validated layout: what both ends are built on.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use weft_core::fifo::ll::LlGeometry;
use weft_core::fifo::{FifoError, FifoGeometry, SIZE_UNUSED, Slice};

use super::endpoint::{FifoRecvEnd, FifoSendEnd, Waiter};
use super::error::{ConnError, ConnId, Direction};
use super::layout::{
    DATA_OFFSET, FIFO_MAGIC, FIFO_VERSION, FifoHeader, FifoLayout, LayoutError, REGION_ALIGN,
};
use super::memory::{FifoMemory, HeapMemory};
use super::wait::pid_namespace;

/// A connection's memory whose header holds a valid FIFO of a known layout. Cloning shares
/// the memory (one clone per end); the memory is freed or unmapped when the last clone goes.
#[derive(Debug, Clone)]
pub struct FifoRegion {
    mem: Arc<dyn FifoMemory>,
    /// `mem.base()` and `mem.len()`, read once: they never change (the trait's contract),
    /// and every header or line access would otherwise make a dynamic call.
    base: NonNull<u8>,
    len: usize,
    layout: FifoLayout,
    /// Why a party in this process failed the connection (a NET proxy's network error), shared
    /// by the clones of this process only: the peer's waits report it instead of a bare abort.
    failure: Arc<OnceLock<Arc<str>>>,
}

impl FifoRegion {
    /// A fresh connection in this process's heap.
    pub fn local(layout: FifoLayout) -> Result<Self, LayoutError> {
        let total = layout.total_bytes();
        let mem = HeapMemory::zeroed(total).ok_or(LayoutError {
            field: "total_bytes",
            value: u64::try_from(total).unwrap_or(u64::MAX),
            rule: "the heap allocation failed",
        })?;
        Self::init(Arc::new(mem), layout)
    }

    /// Writes a fresh header for `layout` into `mem` (counters 0, sizes unused, no flags).
    /// The creator calls this before the memory is shared; the peer then calls `attach`.
    pub fn init(mem: Arc<dyn FifoMemory>, layout: FifoLayout) -> Result<Self, LayoutError> {
        Self::check_memory(&*mem, &layout)?;
        let region = FifoRegion {
            base: mem.base(),
            len: mem.len(),
            mem,
            layout,
            failure: Arc::default(),
        };
        let header = region.header();
        let ident = &header.ident.0;
        // Relaxed: published by the magic's Release store below.
        ident.version.store(FIFO_VERSION, Ordering::Relaxed);
        ident.slots.store(as_u64(layout.slots()), Ordering::Relaxed);
        ident
            .step_bytes
            .store(as_u64(layout.step_bytes()), Ordering::Relaxed);
        ident
            .ll_lines
            .store(as_u64(layout.ll_lines()), Ordering::Relaxed);
        header.head.0.store(0, Ordering::Relaxed);
        header.ll_head.0.store(0, Ordering::Relaxed);
        header.posted.0.tail.store(0, Ordering::Relaxed);
        for size in &header.posted.0.sizes {
            size.store(SIZE_UNUSED, Ordering::Relaxed);
        }
        header.state.0.flags.store(0, Ordering::Relaxed);
        header.state.0.sender_pid.store(0, Ordering::Relaxed);
        header.state.0.receiver_pid.store(0, Ordering::Relaxed);
        header.state.0.sender_pidns.store(0, Ordering::Relaxed);
        header.state.0.receiver_pidns.store(0, Ordering::Relaxed);
        header.state.0.sender_cpu.store(0, Ordering::Relaxed);
        header.state.0.receiver_cpu.store(0, Ordering::Relaxed);
        // LL lines start with flag 0: "written at step -1", never fresh before cleaning
        // (weft_core::fifo::ll). Fresh memory is zero already; this makes it not matter.
        for word in region.ll_words() {
            word.store(0, Ordering::Relaxed);
        }
        // Release: a peer that reads the magic with Acquire sees the whole header above.
        ident.magic.store(FIFO_MAGIC, Ordering::Release);
        Ok(region)
    }

    /// Reads the layout from a header another process initialised, and checks it fits `mem`.
    pub fn attach(mem: Arc<dyn FifoMemory>, conn: ConnId) -> Result<Self, ConnError> {
        let bad = |what, found, expected| ConnError::BadMemory {
            conn,
            what,
            found,
            expected,
        };
        let total = as_u64(mem.len());
        if mem.len() < DATA_OFFSET || mem.base().as_ptr().align_offset(REGION_ALIGN) != 0 {
            return Err(bad("memory length", total, as_u64(DATA_OFFSET)));
        }
        // SAFETY: the memory holds at least DATA_OFFSET >= size_of::<FifoHeader>() bytes,
        // aligned to a page (checked above), and lives while `mem` does; every field of the
        // header is an atomic, valid for any bits.
        let header = unsafe { mem.base().cast::<FifoHeader>().as_ref() };
        let ident = &header.ident.0;
        // Acquire: pairs with the creator's Release store of the magic in `init`.
        let magic = ident.magic.load(Ordering::Acquire);
        if magic != FIFO_MAGIC {
            return Err(bad("magic", magic, FIFO_MAGIC));
        }
        let version = ident.version.load(Ordering::Relaxed);
        if version != FIFO_VERSION {
            return Err(bad("version", version, FIFO_VERSION));
        }
        let slots = ident.slots.load(Ordering::Relaxed);
        let step_bytes = ident.step_bytes.load(Ordering::Relaxed);
        let ll_lines = ident.ll_lines.load(Ordering::Relaxed);
        let layout = usize::try_from(slots)
            .ok()
            .zip(usize::try_from(step_bytes).ok())
            .and_then(|(s, b)| FifoLayout::new(s, b).ok())
            .ok_or(bad("slots/step_bytes", slots, step_bytes))?;
        let layout = usize::try_from(ll_lines)
            .ok()
            .and_then(|l| layout.with_ll_lines(l).ok())
            .ok_or(bad("ll_lines", ll_lines, 0))?;
        if layout.total_bytes() > mem.len() {
            return Err(bad("memory length", total, as_u64(layout.total_bytes())));
        }
        Ok(FifoRegion {
            base: mem.base(),
            len: mem.len(),
            mem,
            layout,
            failure: Arc::default(),
        })
    }

    fn check_memory(mem: &dyn FifoMemory, layout: &FifoLayout) -> Result<(), LayoutError> {
        if mem.len() < layout.total_bytes() {
            return Err(LayoutError {
                field: "memory length",
                value: as_u64(mem.len()),
                rule: "smaller than the layout's total_bytes",
            });
        }
        if mem.base().as_ptr().align_offset(REGION_ALIGN) != 0 {
            return Err(LayoutError {
                field: "memory address",
                value: as_u64(mem.base().as_ptr() as usize),
                rule: "not aligned to 4096",
            });
        }
        Ok(())
    }

    pub fn layout(&self) -> FifoLayout {
        self.layout
    }

    pub fn memory(&self) -> &Arc<dyn FifoMemory> {
        &self.mem
    }

    /// Records why the connection failed (the first cause wins). The caller then raises its
    /// end's abort bit; waits in this process that see it report
    /// [`ConnError::Failed`] with this cause instead of a bare abort.
    pub fn record_failure(&self, cause: &str) {
        let _ = self.failure.set(Arc::from(cause));
    }

    /// The cause recorded by [`FifoRegion::record_failure`], if any.
    pub fn failure(&self) -> Option<Arc<str>> {
        self.failure.get().cloned()
    }

    /// The sending end. One per connection: two senders on one region break the protocol.
    pub fn send_end(&self, conn: ConnId, waiter: Waiter) -> FifoSendEnd {
        FifoSendEnd::new(
            self.clone(),
            ConnId {
                dir: Direction::Send,
                ..conn
            },
            waiter,
        )
    }

    /// The receiving end. One per connection.
    pub fn recv_end(&self, conn: ConnId, waiter: Waiter) -> FifoRecvEnd {
        FifoRecvEnd::new(
            self.clone(),
            ConnId {
                dir: Direction::Recv,
                ..conn
            },
            waiter,
        )
    }

    /// Records this process as the connection's sender or receiver (pid and pid namespace),
    /// so the peer can tell when it dies. The ends do this when they are made; a creator may
    /// do it earlier, so that a peer that connects first can already watch it.
    pub fn record_owner(&self, dir: Direction) {
        let state = &self.header().state.0;
        let (pid, pidns) = match dir {
            Direction::Send => (&state.sender_pid, &state.sender_pidns),
            Direction::Recv => (&state.receiver_pid, &state.receiver_pidns),
        };
        // Relaxed: read only by liveness checks, which tolerate a late or missing value.
        pidns.store(pid_namespace(), Ordering::Relaxed);
        pid.store(std::process::id(), Ordering::Relaxed);
    }

    pub(crate) fn header(&self) -> &FifoHeader {
        // SAFETY: `init`/`attach` checked that the memory is page-aligned and holds the
        // layout's total bytes (more than DATA_OFFSET >= size_of::<FifoHeader>()); `self.mem`
        // keeps it alive for the returned borrow; all header fields are atomics, valid for
        // any bits and safe to share between threads and processes.
        unsafe { self.base.cast::<FifoHeader>().as_ref() }
    }

    /// One step per slice, one slice per chunk, over all of the layout's slots.
    pub(crate) fn default_geometry(&self) -> FifoGeometry {
        FifoGeometry::new(self.layout.slots(), 1, 1).unwrap_or(FifoGeometry::P2P)
    }

    pub(crate) fn check_geometry(
        &self,
        conn: ConnId,
        geometry: &FifoGeometry,
    ) -> Result<(), ConnError> {
        if geometry.slots() == self.layout.slots() {
            return Ok(());
        }
        Err(ConnError::Protocol {
            conn,
            err: FifoError::BadGeometry {
                field: "slots (must equal the connection's)",
                value: as_u64(geometry.slots()),
            },
        })
    }

    /// Bytes of one slice of `geometry`.
    pub(crate) fn slice_bytes(&self, geometry: &FifoGeometry) -> usize {
        let steps = usize::try_from(geometry.step_per_slice()).unwrap_or(usize::MAX);
        steps.saturating_mul(self.layout.step_bytes())
    }

    /// SIMPLE's tail: steps the sender has filled (beside the sizes, in one line).
    pub(crate) fn tail(&self) -> &AtomicU64 {
        &self.header().posted.0.tail
    }

    /// The LL buffer's geometry, `None` when the connection has no LL buffer.
    pub(crate) fn ll_geometry(&self) -> Option<LlGeometry> {
        match self.layout.ll_lines() {
            0 => None,
            lines => LlGeometry::new(self.layout.slots(), lines).ok(),
        }
    }

    /// Every line of the LL buffer, as the 8-byte words both ends store and load (empty
    /// without an LL buffer).
    pub(crate) fn ll_words(&self) -> &[AtomicU64] {
        let (offset, bytes) = (self.layout.ll_offset(), self.layout.ll_bytes());
        if bytes == 0 || offset.saturating_add(bytes) > self.len {
            return &[];
        }
        let base = self.base.as_ptr().wrapping_add(offset);
        // SAFETY: `init`/`attach` checked that the memory holds the layout's total bytes,
        // which end with this buffer (checked again above), alive while `self.mem` is; the
        // buffer starts 64-aligned (a page plus a multiple of 64) so every `AtomicU64` is
        // aligned; an `AtomicU64` has the size and layout of a `u64` and is valid for any
        // bits, and the other process touches these bytes only through 8-byte atomics too.
        unsafe {
            std::slice::from_raw_parts(base.cast::<AtomicU64>(), bytes / size_of::<AtomicU64>())
        }
    }

    /// Start and length of `slice`'s slots. Always inside the memory: the geometry's slots
    /// equal the layout's (checked on construction and reload), so `first_slot + count <=
    /// slots`, and `DATA_OFFSET + slots * step_bytes <= len`; should that ever not hold, the
    /// span is empty.
    pub(crate) fn slice_span(&self, slice: &Slice, geometry: &FifoGeometry) -> (*mut u8, usize) {
        let step = self.layout.step_bytes();
        let start = slice
            .first_slot()
            .checked_mul(step)
            .and_then(|o| o.checked_add(DATA_OFFSET));
        let len = self.slice_bytes(geometry);
        match start {
            Some(start) if start.checked_add(len).is_some_and(|end| end <= self.len) => {
                (self.base.as_ptr().wrapping_add(start), len)
            }
            _ => (self.base.as_ptr().wrapping_add(DATA_OFFSET), 0),
        }
    }
}

// SAFETY: `base` is `mem.base()`, which the `FifoMemory` contract makes valid from any
// thread for as long as `mem` (held here) lives; `FifoMemory` is `Send + Sync`, and every
// access through the pointer is to atomics or protocol-granted slots.
unsafe impl Send for FifoRegion {}
// SAFETY: as above: shared access only reads the address.
unsafe impl Sync for FifoRegion {}

fn as_u64(v: usize) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}
