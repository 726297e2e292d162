//! Who owns a connection's bytes: the heap (one process) or a shared mapping (two).

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

use super::layout::REGION_ALIGN;

/// A block of memory holding one connection's FIFO, kept alive as long as the value lives.
///
/// # Safety
///
/// Implementors promise that `base()` is aligned to [`REGION_ALIGN`] and valid for reads and
/// writes of `len()` bytes from any thread for as long as the value exists, and that both
/// never change. The bytes may be written concurrently by another thread or process; users
/// only touch them through atomics or within the slots the FIFO protocol grants them.
pub unsafe trait FifoMemory: Send + Sync + fmt::Debug {
    fn base(&self) -> NonNull<u8>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Zeroed, page-aligned heap memory: a connection inside one process (the NET transport's
/// FIFO between an executor thread and the proxy thread, or tests).
pub struct HeapMemory {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl fmt::Debug for HeapMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.layout.size())
            .finish()
    }
}

impl HeapMemory {
    /// `None` if `len` is 0 or the allocation fails.
    pub fn zeroed(len: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len, REGION_ALIGN).ok()?;
        if layout.size() == 0 {
            return None;
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        Some(HeapMemory {
            ptr: NonNull::new(raw)?,
            layout,
        })
    }
}

impl Drop for HeapMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the allocation is owned by this value alone and every access to its bytes goes
// through atomics or protocol-granted slots (the trait's contract), so moving or sharing the
// owner between threads is sound.
unsafe impl Send for HeapMemory {}
// SAFETY: as above: `&HeapMemory` only hands out the base pointer and the length.
unsafe impl Sync for HeapMemory {}

// SAFETY: `alloc_zeroed` returned memory of `layout.size()` bytes aligned to REGION_ALIGN,
// valid until `drop`.
unsafe impl FifoMemory for HeapMemory {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}
