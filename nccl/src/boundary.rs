//! The panic boundary every exported function runs inside, and `ncclGetLastError`'s text.
//!
//! A panic must never unwind into C (undefined behaviour; in practice an abort with no
//! message): [`run`] catches it and returns `ncclInternalError`, the panic's message
//! becoming the last error. Every failure is logged at `NCCL_DEBUG=WARN` with the entry
//! point's name.

use std::any::Any;
use std::collections::VecDeque;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::debug;
use crate::result::{ApiError, NCCL_INTERNAL_ERROR, NCCL_SUCCESS, NcclResult};

/// Texts of the last failures, newest last. NCCL keeps one process-wide buffer (a
/// thread other than the failing one may ask, as PyTorch's watchdog does); weft keeps a
/// few, so that a pointer handed out stays valid while later failures come in.
static LAST: Mutex<VecDeque<CString>> = Mutex::new(VecDeque::new());
const KEPT: usize = 16;

fn lock_last() -> std::sync::MutexGuard<'static, VecDeque<CString>> {
    // A panic while holding the lock leaves plain strings behind: still usable.
    LAST.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records `text` as the last error.
pub fn set_last_error(text: &str) {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    let mut last = lock_last();
    if last.len() == KEPT {
        last.pop_front();
    }
    last.push_back(c);
}

/// The last error's text (a copy, for Rust callers and tests).
pub fn last_error() -> String {
    lock_last()
        .back()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The last error as C sees it: valid until [`KEPT`] more failures; "" before any.
pub fn last_error_ptr() -> *const c_char {
    match lock_last().back() {
        Some(c) => c.as_ptr(),
        None => c"".as_ptr(),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs `body` for the entry point `entry` and returns its `ncclResult_t`: `ncclSuccess`,
/// the error's code (its text the last error), or `ncclInternalError` on a panic.
pub fn run(entry: &str, body: impl FnOnce() -> Result<(), ApiError>) -> NcclResult {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::NCCL_INVALID_USAGE;

    /// Whether `pred` holds for one of the kept texts (tests beside this one record
    /// failures too, so the newest may be theirs).
    fn kept(pred: impl Fn(&str) -> bool) -> bool {
        lock_last().iter().any(|c| pred(&c.to_string_lossy()))
    }

    #[test]
    fn errors_and_panics_become_codes_and_last_errors() {
        assert_eq!(run("ncclTest", || Ok(())), NCCL_SUCCESS);
        let code = run("ncclTest", || Err(ApiError::invalid_usage("no group open")));
        assert_eq!(code, NCCL_INVALID_USAGE);
        assert!(kept(|t| t == "ncclTest: no group open"));
        let code = run("ncclBoom", || panic!("index 7 out of range"));
        assert_eq!(code, NCCL_INTERNAL_ERROR);
        assert!(kept(
            |t| t.starts_with("ncclBoom: internal error") && t.contains("index 7 out of range")
        ));
    }

    #[test]
    fn a_pointer_survives_later_failures() {
        set_last_error("first");
        let p = last_error_ptr();
        // Half of KEPT: tests running beside this one record failures too.
        for i in 0..KEPT / 2 {
            set_last_error(&format!("later {i}"));
        }
        // SAFETY: `p` points into a CString still kept (fewer than KEPT replaced it).
        let first = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(first.to_str(), Ok("first"));
    }
}
