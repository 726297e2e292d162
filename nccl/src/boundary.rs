//! The panic boundary every exported function runs inside, and `ncclGetLastError`'s text.
//!
//! A panic must never unwind into C (undefined behaviour; in practice an abort with no
//! message): [`run`] catches it and returns `ncclInternalError`, the panic's message
//! becoming the last error. Every failure is logged at `NCCL_DEBUG=WARN` with the entry
//! point's name.

use std::any::Any;
use std::cell::UnsafeCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::debug;
use crate::result::{ApiError, NCCL_INTERNAL_ERROR, NCCL_SUCCESS, NcclResult};

/// Capacity of the last error's buffer, NUL included (NCCL's `ncclLastError[1024]`).
const LAST_CAP: usize = 1024;

/// The last failure's text, NUL-terminated. One process-wide buffer that is never freed,
/// as NCCL's: the pointer `ncclGetLastError` returns stays valid for the life of the
/// process (a thread other than the failing one may ask, as PyTorch's watchdog does).
/// Its content may change under a reader when a later failure is recorded, as NCCL's does.
struct LastError(UnsafeCell<[u8; LAST_CAP]>);

// SAFETY: every write happens under `LAST_WRITE`; readers through the C pointer may see
// a text being replaced (NCCL's contract), but the buffer always ends in a NUL byte
// (byte LAST_CAP - 1 is never written), so a reader never runs past it.
unsafe impl Sync for LastError {}

static LAST: LastError = LastError(UnsafeCell::new([0; LAST_CAP]));
/// Serialises writers (and Rust readers, who copy under it).
static LAST_WRITE: Mutex<()> = Mutex::new(());

/// The longest prefix of `text` that fits in `max` bytes and ends on a char boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Writes `text` (cut at `LAST_CAP - 1` bytes, NULs as spaces) and its NUL into `buf`.
///
/// # Safety
///
/// `buf` is valid for `LAST_CAP` bytes and no other writer runs.
unsafe fn write_into(buf: *mut u8, text: &str) {
    let text = truncated(text, LAST_CAP - 1);
    for (i, &b) in text.as_bytes().iter().enumerate() {
        // SAFETY: i < LAST_CAP - 1 (truncated above): inside `buf` by the caller's promise.
        let at = unsafe { buf.add(i) };
        // SAFETY: as above, and no other writer runs. Volatile: C readers may look at the
        // buffer while it changes.
        unsafe { at.write_volatile(if b == 0 { b' ' } else { b }) };
    }
    // SAFETY: text.len() <= LAST_CAP - 1, inside the buffer.
    let end = unsafe { buf.add(text.len()) };
    // SAFETY: as above.
    unsafe { end.write_volatile(0) };
}

#[cfg(test)]
thread_local! {
    /// What this thread recorded last: tests run in parallel and all record failures
    /// into the one buffer, so they check their own text here.
    static MINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Records `text` as the last error.
pub fn set_last_error(text: &str) {
    #[cfg(test)]
    MINE.with(|m| *m.borrow_mut() = truncated(text, LAST_CAP - 1).replace('\0', " "));
    let _held = LAST_WRITE.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the static buffer holds LAST_CAP bytes; writers are serialised by the lock.
    unsafe { write_into(LAST.0.get().cast::<u8>(), text) };
}

/// The last error's text (a copy, for Rust callers and tests).
pub fn last_error() -> String {
    let _held = LAST_WRITE.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: no writer runs while the lock is held; the buffer is always NUL-terminated.
    let text = unsafe { std::ffi::CStr::from_ptr(LAST.0.get().cast::<c_char>()) };
    text.to_string_lossy().into_owned()
}

/// The last error as C sees it: valid for the life of the process, "" before any failure.
pub fn last_error_ptr() -> *const c_char {
    LAST.0.get().cast::<c_char>().cast_const()
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The caller's current CUDA context, put back when this is dropped: weft makes its
/// communicators' contexts current to launch, allocate and synchronize, and NCCL leaves
/// the caller's current device as it found it (PyTorch relies on it).
struct CallerContext {
    driver: &'static weft_cuda::CudaDriver,
    ctx: weft_cuda::CUcontext,
}

impl CallerContext {
    /// `None` when libcuda is not in the process yet, or the driver is not initialised
    /// (then the caller has no context to lose). Never fails the call.
    fn save() -> Option<CallerContext> {
        let driver = weft_cuda::driver_if_present()?;
        let mut ctx: weft_cuda::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer; before cuInit the call fails harmlessly.
        let rc = unsafe { (driver.cuCtxGetCurrent)(&mut ctx) };
        rc.is_success().then_some(CallerContext { driver, ctx })
    }
}

impl Drop for CallerContext {
    fn drop(&mut self) {
        let mut now: weft_cuda::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the driver was initialised (save succeeded).
        let rc = unsafe { (self.driver.cuCtxGetCurrent)(&mut now) };
        if rc.is_success() && now == self.ctx {
            return;
        }
        // SAFETY: `ctx` was current on this thread at entry (or null: no context). A
        // context the call destroyed meanwhile (the caller's own, never weft's) would make
        // this fail, which is only logged: the call's result stands.
        let rc = unsafe { (self.driver.cuCtxSetCurrent)(self.ctx) };
        if !rc.is_success() {
            debug::warn(
                0,
                &format!("restoring the caller's current CUDA context failed with {rc:?}"),
            );
        }
    }
}

/// Runs `body` for the entry point `entry` and returns its `ncclResult_t`: `ncclSuccess`,
/// the error's code (its text the last error), or `ncclInternalError` on a panic. The
/// caller's current CUDA context is the same after it as before.
pub fn run(entry: &str, body: impl FnOnce() -> Result<(), ApiError>) -> NcclResult {
    let _caller = catch_unwind(CallerContext::save).ok().flatten();
    let outcome = catch_unwind(AssertUnwindSafe(body));
    // Reporting formats and logs: keep it behind a boundary too.
    let reported = catch_unwind(AssertUnwindSafe(|| match outcome {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            let e = e.context(entry);
            debug::warn(0, &e.message);
            set_last_error(&e.message);
            e.code
        }
        Err(payload) => {
            let text = format!(
                "{entry}: internal error: weft panicked: {}",
                panic_message(payload.as_ref())
            );
            debug::warn(0, &text);
            set_last_error(&text);
            NCCL_INTERNAL_ERROR
        }
    }));
    reported.unwrap_or(NCCL_INTERNAL_ERROR)
}

/// For entry points that return a value rather than a code (`ncclGetErrorString`):
/// `fallback` if `body` panics.
pub fn run_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// The last error this thread recorded (tests: the process-wide text may be another
/// test thread's by the time it is read).
#[cfg(test)]
pub(crate) fn this_threads_last_error() -> String {
    MINE.with(|m| m.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::NCCL_INVALID_USAGE;

    fn mine() -> String {
        this_threads_last_error()
    }

    #[test]
    fn errors_and_panics_become_codes_and_last_errors() {
        assert_eq!(run("ncclTest", || Ok(())), NCCL_SUCCESS);
        let code = run("ncclTest", || Err(ApiError::invalid_usage("no group open")));
        assert_eq!(code, NCCL_INVALID_USAGE);
        assert_eq!(mine(), "ncclTest: no group open");
        let code = run("ncclBoom", || panic!("index 7 out of range"));
        assert_eq!(code, NCCL_INTERNAL_ERROR);
        let t = mine();
        assert!(
            t.starts_with("ncclBoom: internal error") && t.contains("index 7 out of range"),
            "{t}"
        );
    }

    #[test]
    fn the_pointer_stays_valid_after_many_failures() {
        let p = last_error_ptr();
        // The old ring kept 16 texts: the 17th freed the first. The buffer is never freed.
        for i in 0..100 {
            set_last_error(&format!("later {i}"));
        }
        assert_eq!(last_error_ptr(), p);
        // Whatever test wrote last, the text is whole and NUL-terminated in the buffer.
        let t = last_error();
        assert!(t.len() < LAST_CAP, "{}", t.len());
    }

    #[test]
    fn long_texts_are_cut_on_a_char_boundary_and_nuls_replaced() {
        let mut buf = [0xa5u8; LAST_CAP];
        let read = |b: &[u8; LAST_CAP]| {
            std::ffi::CStr::from_bytes_until_nul(b)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        };
        // 1022 ASCII bytes then a 3-byte char, which would end at byte 1025.
        let long = format!("{}\u{20ac}tail", "a".repeat(1022));
        // SAFETY: `buf` holds LAST_CAP bytes; this thread alone writes it.
        unsafe { write_into(buf.as_mut_ptr(), &long) };
        let t = read(&buf);
        assert_eq!(t.len(), 1022);
        assert!(t.bytes().all(|b| b == b'a'));
        // Exactly 1023 bytes fit, the NUL in the last byte.
        // SAFETY: as above.
        unsafe { write_into(buf.as_mut_ptr(), &"b".repeat(2000)) };
        assert_eq!(read(&buf), "b".repeat(1023));
        assert_eq!(buf[LAST_CAP - 1], 0);
        // A shorter text after a long one ends at its own NUL.
        // SAFETY: as above.
        unsafe { write_into(buf.as_mut_ptr(), "a\0b") };
        assert_eq!(read(&buf), "a b");
        assert_eq!(truncated("h\u{e9}llo", 2), "h");
        assert_eq!(truncated("h\u{e9}llo", 3), "h\u{e9}");
        assert_eq!(truncated("ab", 5), "ab");
    }
}
