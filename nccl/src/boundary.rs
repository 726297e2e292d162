//! libnccl's side of the panic boundary: every exported function runs inside [`run`] or
//! [`run_value`], and `ncclGetLastError`'s text.
//!
//! A panic must never unwind into C (undefined behaviour; in practice an abort with no
//! message): [`weft_ffi::status_call`] catches it and [`Libnccl`] turns it into
//! `ncclInternalError`, the panic's message becoming the last error. Every failure is
//! logged at `NCCL_DEBUG=WARN` with the entry point's name.

use std::ffi::c_char;

use weft_ffi::{ArgError, ProcessLastError, Surface};

use crate::debug;
use crate::result::{ApiError, NCCL_INTERNAL_ERROR, NCCL_SUCCESS, NcclResult};

/// Capacity of the last error's buffer, NUL included (NCCL's `ncclLastError[1024]`).
const LAST_CAP: usize = 1024;

/// The last failure's text: one process-wide buffer that is never freed, as NCCL's, so the
/// pointer `ncclGetLastError` returns stays valid for the life of the process (a thread
/// other than the failing one may ask, as PyTorch's watchdog does).
static LAST: ProcessLastError<LAST_CAP> = ProcessLastError::new();

#[cfg(test)]
thread_local! {
    /// What this thread recorded last: tests run in parallel and all record failures
    /// into the one buffer, so they check their own text here.
    static MINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Records `text` as the last error.
pub fn set_last_error(text: &str) {
    #[cfg(test)]
    MINE.with(|m| *m.borrow_mut() = ProcessLastError::<LAST_CAP>::stored(text));
    LAST.set(text);
}

/// The last error's text (a copy, for Rust callers and tests).
pub fn last_error() -> String {
    LAST.text()
}

/// The last error as C sees it: valid for the life of the process, "" before any failure.
pub fn last_error_ptr() -> *const c_char {
    LAST.as_ptr()
}

/// libnccl as a [`Surface`]: `ncclResult_t` codes; a failure is logged at WARN and its text
/// ("entry: message") becomes the process's last error.
#[derive(Debug)]
pub struct Libnccl;

impl Surface for Libnccl {
    type Code = NcclResult;
    type Error = ApiError;
    const SUCCESS: NcclResult = NCCL_SUCCESS;
    const PANICKED: NcclResult = NCCL_INTERNAL_ERROR;

    fn failed(entry: &str, error: ApiError) -> NcclResult {
        let e = error.context(entry);
        debug::warn(0, &e.message);
        set_last_error(&e.message);
        e.code
    }

    fn panicked(entry: &str, message: &str) {
        let text = format!("{entry}: internal error: weft panicked: {message}");
        debug::warn(0, &text);
        set_last_error(&text);
    }
}

/// A NULL pointer argument is an invalid argument, in NCCL's words ("version is NULL");
/// the other checks too, in libweft's.
impl From<ArgError> for ApiError {
    fn from(e: ArgError) -> ApiError {
        match e {
            ArgError::Null { name } => ApiError::invalid_argument(format!("{name} is NULL")),
            other => ApiError::invalid_argument(other.to_string()),
        }
    }
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
    debug::forward_runtime_records();
    let _caller = weft_ffi::catch(CallerContext::save).ok().flatten();
    weft_ffi::status_call::<Libnccl>(entry, body)
}

/// As [`run`], for a body that may succeed with another code than `ncclSuccess` (a
/// non-blocking communicator's `ncclInProgress`).
pub fn run_code(entry: &str, body: impl FnOnce() -> Result<NcclResult, ApiError>) -> NcclResult {
    let mut code = NCCL_SUCCESS;
    let result = run(entry, || {
        code = body()?;
        Ok(())
    });
    if result == NCCL_SUCCESS { code } else { result }
}

/// For entry points that return a value rather than a code (`ncclGetErrorString`):
/// `fallback` if `body` panics, the panic recorded as [`run`] records it.
pub fn run_value<T>(entry: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    weft_ffi::value_call::<Libnccl, T>(entry, fallback, body)
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
    fn value_entry_points_fall_back_on_a_panic() {
        assert_eq!(run_value("ncclValue", 1, || 2), 2);
        assert_eq!(run_value("ncclValue", 1, || panic!("value {}", 9)), 1);
        let t = mine();
        assert_eq!(t, "ncclValue: internal error: weft panicked: value 9");
    }

    #[test]
    fn null_arguments_are_invalid_arguments_named_as_nccl_does() {
        let e = ApiError::from(
            weft_ffi::arg::non_null(std::ptr::null::<i32>(), "version").unwrap_err(),
        );
        assert_eq!(e, ApiError::invalid_argument("version is NULL"));
        let misaligned = std::ptr::without_provenance::<u64>(5);
        let e = ApiError::from(weft_ffi::arg::check_slice(misaligned, 1, "buff").unwrap_err());
        assert_eq!(e.code, crate::result::NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("aligned to 8 bytes"), "{}", e.message);
    }
}
