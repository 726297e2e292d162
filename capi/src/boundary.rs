//! The panic boundary every `extern "C"` body runs behind, the argument-checking macros,
//! and the thread-local last-error text.
//!
//! A panic that unwinds into C is undefined behaviour, and a library loaded inside someone
//! else's process (NCCL, PyTorch) must not take it down: every entry point catches panics
//! and turns them into `WEFT_ERR_INTERNAL` with a message naming the function.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::status::{CallError, weft_status};

thread_local! {
    /// Detailed text of the last failed call on this thread ("" after a successful one).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn store_last_error(text: CString) {
    // During thread teardown the slot may be gone; the caller still gets the status code.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = text;
        }
    });
}

fn set_last_error(function: &str, message: &str) {
    // An interior NUL would cut the message short in C; show it instead.
    let text = format!("{function}: {message}").replace('\0', "\\0");
    store_last_error(CString::new(text).unwrap_or_default());
}

fn clear_last_error() {
    store_last_error(CString::default());
}

/// The current last-error text as a C string pointer (see `weft_last_error`).
fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.try_borrow().map(|s| s.as_ptr()).ok())
        .ok()
        .flatten()
        .unwrap_or(c"".as_ptr())
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// Records a caught panic as `function`'s last error.
fn record_panic(function: &str, payload: &(dyn Any + Send)) {
    set_last_error(
        function,
        &format!(
            "internal error: panicked: {}; this is a bug in weft, please report it",
            panic_text(payload)
        ),
    );
}

/// Runs a status-returning body: `Ok` clears the last error and gives `WEFT_OK`; an error
/// records "function: message" and gives its code; a panic gives `WEFT_ERR_INTERNAL`.
pub(crate) fn status_call(
    function: &'static str,
    body: impl FnOnce() -> Result<(), CallError>,
) -> weft_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            clear_last_error();
            weft_status::WEFT_OK
        }
        Ok(Err(e)) => {
            set_last_error(function, &e.message);
            e.status
        }
        Err(payload) => {
            record_panic(function, payload.as_ref());
            weft_status::WEFT_ERR_INTERNAL
        }
    }
}

/// Runs a body that returns a value and cannot fail: on a panic, records the last error and
/// returns `fallback`. Does not touch the last error otherwise, so that `weft_last_error`
/// and `weft_status_str` can be called after a failure without erasing it.
pub(crate) fn value_call<T>(function: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            record_panic(function, payload.as_ref());
            fallback
        }
    }
}

/// Wraps the body of every `extern "C"` function.
///
/// - `boundary!("weft_f", { ... Ok(()) })`: the block returns `Result<(), CallError>`
///   (so `?` and `return Err(..)` work); the function returns `weft_status`.
/// - `boundary!("weft_f", default: value, { ... })`: the block returns the function's value;
///   `value` is returned if it panics.
macro_rules! boundary {
    ($function:literal, default: $fallback:expr, $body:block) => {
        $crate::boundary::value_call($function, $fallback, || $body)
    };
    ($function:literal, $body:block) => {
        $crate::boundary::status_call(
            $function,
            || -> ::core::result::Result<(), $crate::CallError> { $body },
        )
    };
}
pub(crate) use boundary;

/// `arg_ref!(ptr, "name")`: `&T` from a `*const T` argument, or returns `WEFT_ERR_NULL_ARG`
/// naming the argument. Only inside a `boundary!` status body of an `unsafe extern "C" fn`
/// whose `# Safety` section says a non-null pointer must be valid for reads.
macro_rules! arg_ref {
    ($ptr:expr, $name:literal) => {{
        let ptr = $ptr;
        if ptr.is_null() {
            return Err($crate::CallError::null_arg($name));
        }
        // SAFETY: `ptr` is not null, and the function's contract (its `# Safety` section)
        // makes the caller promise that a non-null pointer is aligned and points to an
        // initialised value that nothing writes during the call.
        unsafe { &*ptr }
    }};
}
pub(crate) use arg_ref;

/// `arg_mut!(ptr, "name")`: `&mut T` from a `*mut T` out-argument, or `WEFT_ERR_NULL_ARG`.
/// Same contract as `arg_ref!`, for writes: the caller owns the pointee for the call.
macro_rules! arg_mut {
    ($ptr:expr, $name:literal) => {{
        let ptr = $ptr;
        if ptr.is_null() {
            return Err($crate::CallError::null_arg($name));
        }
        // SAFETY: `ptr` is not null, and the function's contract makes the caller promise
        // that a non-null out-pointer is aligned, valid for writes of one value, and not
        // accessed by anything else during the call. Out-types are plain integers and
        // arrays of them, so any prior content is a valid value.
        unsafe { &mut *ptr }
    }};
}
pub(crate) use arg_mut;

/// `arg_slice!(ptr, len, "name")`: `&[T]` from a pointer and element count, or
/// `WEFT_ERR_NULL_ARG` when the pointer is NULL (even with `len == 0`, which is then almost
/// certainly a caller bug), or `WEFT_ERR_BAD_FIELD` when `len` elements cannot exist.
macro_rules! arg_slice {
    ($ptr:expr, $len:expr, $name:literal) => {{
        let (ptr, len) = ($ptr, $len);
        if ptr.is_null() {
            return Err($crate::CallError::null_arg($name));
        }
        $crate::boundary::check_slice_len(ptr, len, $name)?;
        // SAFETY: `ptr` is not null, `len` elements fit in `isize::MAX` bytes (checked
        // above), and the function's contract makes the caller promise that `ptr` points to
        // `len` initialised, aligned elements that nothing writes during the call.
        unsafe { ::core::slice::from_raw_parts(ptr, len) }
    }};
}
pub(crate) use arg_slice;

/// `arg_slice_mut!(ptr, len, "name")`: `&mut [u8]` for an output buffer; as `arg_slice!`.
macro_rules! arg_slice_mut {
    ($ptr:expr, $len:expr, $name:literal) => {{
        let (ptr, len) = ($ptr, $len);
        if ptr.is_null() {
            return Err($crate::CallError::null_arg($name));
        }
        $crate::boundary::check_slice_len(ptr.cast_const(), len, $name)?;
        // SAFETY: as in `arg_slice!`, and the caller promises the `len` elements are
        // writable and not accessed by anything else during the call. The element types
        // used (bytes) are valid for any prior content.
        unsafe { ::core::slice::from_raw_parts_mut(ptr, len) }
    }};
}
pub(crate) use arg_slice_mut;

/// `arg_cstr!(ptr, "name")`: `&str` from a NUL-terminated C string, or `WEFT_ERR_NULL_ARG`,
/// or `WEFT_ERR_BAD_FIELD` when it is not UTF-8.
macro_rules! arg_cstr {
    ($ptr:expr, $name:literal) => {{
        let ptr: *const ::std::ffi::c_char = $ptr;
        if ptr.is_null() {
            return Err($crate::CallError::null_arg($name));
        }
        // SAFETY: `ptr` is not null, and the function's contract makes the caller promise
        // that it points to a NUL-terminated string that nothing writes during the call.
        let c = unsafe { ::std::ffi::CStr::from_ptr(ptr) };
        c.to_str()
            .map_err(|_| $crate::CallError::bad_arg($name, format!("{c:?}"), "a UTF-8 string"))?
    }};
}
pub(crate) use arg_cstr;

/// Rejects element counts whose byte size exceeds `isize::MAX` (what `from_raw_parts`
/// requires), and pointers not aligned for `T`.
pub(crate) fn check_slice_len<T>(ptr: *const T, len: usize, name: &str) -> Result<(), CallError> {
    let fits = len
        .checked_mul(size_of::<T>())
        .is_some_and(|bytes| isize::try_from(bytes).is_ok());
    if !fits {
        return Err(CallError::bad_arg(
            name,
            format!("{len} elements"),
            "a length that fits in memory",
        ));
    }
    if !ptr.is_aligned() {
        return Err(CallError::bad_arg(
            name,
            format!("{ptr:p}"),
            &format!("a pointer aligned to {} bytes", align_of::<T>()),
        ));
    }
    Ok(())
}

/// Detailed text of the last failed `weft_*` call on the calling thread: the function,
/// what failed and the values involved. "" if the last status-returning call succeeded
/// (or none was made). Never NULL. The text stays valid until the next status-returning
/// `weft_*` call on this thread; copy it to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn weft_last_error() -> *const c_char {
    boundary!("weft_last_error", default: c"".as_ptr(), { last_error_ptr() })
}

#[cfg(test)]
mod test {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: weft_last_error never returns NULL and the text lives until the next call.
        unsafe { CStr::from_ptr(weft_last_error()) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    extern "C" fn panics_inside(value: u32) -> weft_status {
        boundary!("test_panics", {
            if value > 3 {
                panic!("value {value} exceeds 3");
            }
            Ok(())
        })
    }

    extern "C" fn fails(value: u32) -> weft_status {
        boundary!("test_fails", {
            Err(CallError::bad_arg("value", value, "nothing\0else"))
        })
    }

    extern "C" fn reads(p: *const u64) -> weft_status {
        boundary!("test_reads", {
            let v: &u64 = arg_ref!(p, "p");
            if *v != 7 {
                return Err(CallError::bad_arg("p", v, "7"));
            }
            Ok(())
        })
    }

    #[test]
    fn panic_becomes_internal_error_with_message() {
        assert_eq!(panics_inside(9), weft_status::WEFT_ERR_INTERNAL);
        let e = last_error();
        assert!(
            e.starts_with("test_panics: internal error: panicked: value 9 exceeds 3;"),
            "{e}"
        );
        assert_eq!(panics_inside(2), weft_status::WEFT_OK);
        assert_eq!(last_error(), "");
    }

    #[test]
    fn error_sets_and_success_clears_last_error() {
        assert_eq!(fails(5), weft_status::WEFT_ERR_BAD_FIELD);
        assert_eq!(
            last_error(),
            "test_fails: argument `value` = 5 is invalid: expected nothing\\0else"
        );
        // Reading the error, or a code's text, does not erase it.
        assert_eq!(
            last_error(),
            "test_fails: argument `value` = 5 is invalid: expected nothing\\0else"
        );
        let _ = super::super::status::weft_status_str(3);
        assert!(last_error().starts_with("test_fails"));
        let seven = 7u64;
        assert_eq!(reads(&seven), weft_status::WEFT_OK);
        assert_eq!(last_error(), "");
    }

    #[test]
    fn null_pointer_is_named() {
        assert_eq!(reads(std::ptr::null()), weft_status::WEFT_ERR_NULL_ARG);
        assert_eq!(last_error(), "test_reads: argument `p` is NULL");
    }

    #[test]
    fn last_error_is_per_thread() {
        assert_eq!(fails(1), weft_status::WEFT_ERR_BAD_FIELD);
        let other = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(other, "");
        assert!(last_error().starts_with("test_fails"));
    }

    #[test]
    fn slice_lengths_beyond_memory_are_rejected() {
        let p = std::ptr::dangling::<u64>();
        assert!(check_slice_len(p, usize::MAX / 4, "buf").is_err());
        assert!(check_slice_len(p, 3, "buf").is_ok());
        let e = check_slice_len(std::ptr::without_provenance::<u64>(5), 3, "buf").unwrap_err();
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FIELD);
        assert!(e.message.contains("aligned to 8 bytes"), "{}", e.message);
    }
}
