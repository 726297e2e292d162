//! The text C reads after a failed call, kept where the pointer handed out stays valid.
//!
//! Two lifetimes, after the two APIs weft speaks:
//! - [`ThreadLastError`]: one text per thread, replaced by that thread's next call
//!   (libweft's `weft_last_error()`, like `errno` or rustls-ffi's last error). A thread
//!   never sees another's failure.
//! - [`ProcessLastError`]: one fixed buffer for the process, never freed (NCCL's
//!   `ncclGetLastError()`): any thread may ask, as PyTorch's watchdog does, and the pointer
//!   stays valid for the life of the process. Its content may change under a reader when a
//!   later failure is recorded, as NCCL's does.
//!
//! Both are declared by the surface that owns them (a `static`), so two surfaces linked
//! into one program do not share a text.

use std::cell::{RefCell, UnsafeCell};
use std::ffi::{CStr, CString, c_char};
use std::fmt;
use std::sync::Mutex;
use std::thread::LocalKey;

/// A per-thread last-error text, over a `thread_local!` slot the surface declares:
///
/// ```
/// use std::{cell::RefCell, ffi::CString};
/// use weft_ffi::ThreadLastError;
///
/// thread_local! {
///     static LAST_ERROR_TEXT: RefCell<CString> = RefCell::new(CString::default());
/// }
/// static LAST_ERROR: ThreadLastError = ThreadLastError::new(&LAST_ERROR_TEXT);
///
/// LAST_ERROR.set("f: argument `p` is NULL");
/// // SAFETY: the pointer is valid until this thread's next `set` or `clear`.
/// let text = unsafe { std::ffi::CStr::from_ptr(LAST_ERROR.as_ptr()) };
/// assert_eq!(text, c"f: argument `p` is NULL");
/// ```
pub struct ThreadLastError {
    slot: &'static LocalKey<RefCell<CString>>,
}

impl ThreadLastError {
    pub const fn new(slot: &'static LocalKey<RefCell<CString>>) -> ThreadLastError {
        ThreadLastError { slot }
    }

    /// Makes `text` this thread's last error. An interior NUL would cut the text short in
    /// C, so it shows as `\0`.
    pub fn set(&self, text: &str) {
        let text = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
        self.store(text);
    }

    /// Empties this thread's last error (after a successful call).
    pub fn clear(&self) {
        self.store(CString::default());
    }

    fn store(&self, text: CString) {
        // During thread teardown the slot may be gone; the caller still gets its code.
        let _ = self.slot.try_with(|slot| {
            if let Ok(mut slot) = slot.try_borrow_mut() {
                *slot = text;
            }
        });
    }

    /// This thread's last error as a C string: never NULL ("" when there is none, or during
    /// thread teardown), valid until this thread's next [`set`](Self::set) or
    /// [`clear`](Self::clear).
    pub fn as_ptr(&self) -> *const c_char {
        self.slot
            .try_with(|slot| slot.try_borrow().map(|s| s.as_ptr()).ok())
            .ok()
            .flatten()
            .unwrap_or(c"".as_ptr())
    }

    /// This thread's last error, copied.
    pub fn text(&self) -> String {
        self.slot
            .try_with(|slot| {
                slot.try_borrow()
                    .map(|s| s.to_string_lossy().into_owned())
                    .ok()
            })
            .ok()
            .flatten()
            .unwrap_or_default()
    }
}

impl fmt::Debug for ThreadLastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadLastError")
            .field("text", &self.text())
            .finish()
    }
}

/// A process-wide last-error text in a buffer of `CAP` bytes (NUL included) that is never
/// freed, as NCCL's `ncclLastError[1024]`. Texts longer than `CAP - 1` bytes are cut on a
/// character boundary; interior NULs become spaces.
pub struct ProcessLastError<const CAP: usize> {
    /// Always NUL-terminated: byte `CAP - 1` is never written.
    buf: UnsafeCell<[u8; CAP]>,
    /// Serialises writers (and Rust readers, who copy under it).
    write: Mutex<()>,
}

// SAFETY: every write happens under `write`; readers through the C pointer may see a text
// being replaced (NCCL's contract), but the buffer always ends in a NUL byte (byte CAP - 1
// is never written), so a reader never runs past it.
unsafe impl<const CAP: usize> Sync for ProcessLastError<CAP> {}

impl<const CAP: usize> ProcessLastError<CAP> {
    /// An empty text. `CAP` must leave room for the NUL.
    pub const fn new() -> Self {
        assert!(CAP > 0, "a last-error buffer needs a byte for the NUL");
        ProcessLastError {
            buf: UnsafeCell::new([0; CAP]),
            write: Mutex::new(()),
        }
    }

    /// `text` as [`set`](Self::set) stores it: cut at `CAP - 1` bytes on a character
    /// boundary, NULs as spaces.
    pub fn stored(text: &str) -> String {
        truncated(text, CAP.saturating_sub(1)).replace('\0', " ")
    }

    /// Makes `text` the last error (cut at `CAP - 1` bytes, NULs as spaces).
    pub fn set(&self, text: &str) {
        // A writer that panicked left the buffer NUL-terminated: it is still whole.
        let _held = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let text = truncated(text, CAP.saturating_sub(1));
        let buf = self.buf.get().cast::<u8>();
        for (i, &b) in text.as_bytes().iter().enumerate() {
            // SAFETY: i < text.len() <= CAP - 1 (truncated above): inside the buffer.
            let at = unsafe { buf.add(i) };
            // SAFETY: inside the buffer, and writers are serialised by the lock. Volatile:
            // C readers may look at the buffer while it changes.
            unsafe { at.write_volatile(if b == 0 { b' ' } else { b }) };
        }
        // SAFETY: text.len() <= CAP - 1: inside the buffer.
        let end = unsafe { buf.add(text.len()) };
        // SAFETY: as above.
        unsafe { end.write_volatile(0) };
    }

    /// The last error, copied ("" before any).
    pub fn text(&self) -> String {
        let _held = self.write.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: no writer runs while the lock is held; the buffer is always
        // NUL-terminated.
        let text = unsafe { CStr::from_ptr(self.buf.get().cast::<c_char>()) };
        text.to_string_lossy().into_owned()
    }

    /// The last error as C sees it: valid for as long as `self` (a `static`: the life of
    /// the process), "" before any failure.
    pub fn as_ptr(&self) -> *const c_char {
        self.buf.get().cast::<c_char>().cast_const()
    }
}

impl<const CAP: usize> Default for ProcessLastError<CAP> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const CAP: usize> fmt::Debug for ProcessLastError<CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessLastError")
            .field("capacity", &CAP)
            .field("text", &self.text())
            .finish()
    }
}

/// The longest prefix of `text` that fits in `max` bytes and ends on a char boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod test {
    use super::*;

    thread_local! {
        static TEXT: RefCell<CString> = RefCell::new(CString::default());
    }
    static THREAD: ThreadLastError = ThreadLastError::new(&TEXT);

    fn thread_text() -> String {
        // SAFETY: never NULL, valid until this thread's next set or clear.
        unsafe { CStr::from_ptr(THREAD.as_ptr()) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn thread_text_is_per_thread_and_shows_nuls() {
        assert_eq!(thread_text(), "");
        THREAD.set("f: a\0b");
        assert_eq!(thread_text(), "f: a\\0b");
        assert_eq!(THREAD.text(), "f: a\\0b");
        let other = std::thread::spawn(thread_text).join().unwrap();
        assert_eq!(other, "");
        assert_eq!(thread_text(), "f: a\\0b");
        THREAD.clear();
        assert_eq!(thread_text(), "");
        assert!(format!("{THREAD:?}").contains("text: \"\""));
    }

    #[test]
    fn process_text_is_shared_and_its_pointer_stays() {
        static LAST: ProcessLastError<64> = ProcessLastError::new();
        let p = LAST.as_ptr();
        // SAFETY: the buffer is NUL-terminated and lives as long as the static.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"");
        for i in 0..100 {
            LAST.set(&format!("later {i}"));
        }
        assert_eq!(LAST.as_ptr(), p);
        assert_eq!(LAST.text(), "later 99");
        std::thread::spawn(|| LAST.set("from another thread"))
            .join()
            .unwrap();
        assert_eq!(LAST.text(), "from another thread");
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"from another thread");
    }

    #[test]
    fn long_texts_are_cut_on_a_char_boundary_and_nuls_replaced() {
        const CAP: usize = 1024;
        let last = ProcessLastError::<CAP>::new();
        // 1022 ASCII bytes then a 3-byte char, which would end at byte 1025.
        last.set(&format!("{}\u{20ac}tail", "a".repeat(1022)));
        let t = last.text();
        assert_eq!(t.len(), 1022);
        assert!(t.bytes().all(|b| b == b'a'));
        // Exactly 1023 bytes fit, the NUL in the last byte.
        last.set(&"b".repeat(2000));
        assert_eq!(last.text(), "b".repeat(1023));
        // SAFETY: the buffer holds CAP bytes and no writer runs.
        let bytes = unsafe { &*last.buf.get() };
        assert_eq!(bytes[CAP - 1], 0);
        // A shorter text after a long one ends at its own NUL.
        last.set("a\0b");
        assert_eq!(last.text(), "a b");
        assert_eq!(ProcessLastError::<CAP>::stored("a\0b"), "a b");
        assert_eq!(ProcessLastError::<4>::stored("h\u{e9}llo"), "h\u{e9}");
        assert_eq!(truncated("h\u{e9}llo", 2), "h");
        assert_eq!(truncated("h\u{e9}llo", 3), "h\u{e9}");
        assert_eq!(truncated("ab", 5), "ab");
        assert_eq!(truncated("ab", 0), "");
        let tiny = ProcessLastError::<1>::new();
        tiny.set("anything");
        assert_eq!(tiny.text(), "");
    }
}
