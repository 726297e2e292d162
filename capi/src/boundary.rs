//! libweft's side of the panic boundary: its codes, its per-thread last error, and the
//! `boundary!` macro every `extern "C"` body runs inside.
//!
//! A panic that unwinds into C is undefined behaviour, and a library loaded inside someone
//! else's process (NCCL, PyTorch) must not take it down: [`weft_ffi::status_call`] catches
//! panics, which become `WEFT_ERR_INTERNAL` with a message naming the function. Argument
//! checks are weft-ffi's macros (`arg_ref!`, `arg_mut!`, `arg_slice!`, `arg_slice_mut!`,
//! `arg_cstr!`), their errors mapped to `WEFT_ERR_NULL_ARG` / `WEFT_ERR_BAD_FIELD` by
//! [`CallError`]'s `From<ArgError>`.

use std::cell::RefCell;
use std::ffi::{CString, c_char};

use weft_ffi::{Surface, ThreadLastError};

use super::status::{CallError, weft_status};

thread_local! {
    static LAST_ERROR_TEXT: RefCell<CString> = RefCell::new(CString::default());
}

/// Detailed text of the last failed call on this thread ("" after a successful one).
static LAST_ERROR: ThreadLastError = ThreadLastError::new(&LAST_ERROR_TEXT);

/// libweft as a [`Surface`]: `weft_status` codes; a failure's text ("function: message") is
/// this thread's last error until its next status-returning call, which clears it.
#[derive(Debug)]
pub(crate) struct Libweft;

impl Surface for Libweft {
    type Code = weft_status;
    type Error = CallError;
    const SUCCESS: weft_status = weft_status::WEFT_OK;
    const PANICKED: weft_status = weft_status::WEFT_ERR_INTERNAL;

    fn succeeded(_function: &str) {
        LAST_ERROR.clear();
    }

    fn failed(function: &str, error: CallError) -> weft_status {
        LAST_ERROR.set(&format!("{function}: {}", error.message));
        error.status
    }

    fn panicked(function: &str, message: &str) {
        LAST_ERROR.set(&format!(
            "{function}: internal error: panicked: {message}; this is a bug in weft, please \
             report it"
        ));
    }
}

/// Wraps the body of every `extern "C"` function.
///
/// - `boundary!("weft_f", { ... Ok(()) })`: the block returns `Result<(), CallError>`
///   (so `?` and `return Err(..)` work); the function returns `weft_status`: `WEFT_OK`
///   (clearing the last error), the error's code (its text the last error), or
///   `WEFT_ERR_INTERNAL` on a panic.
/// - `boundary!("weft_f", default: value, { ... })`: the block returns the function's value;
///   `value` is returned if it panics. The last error is not touched otherwise, so that
///   `weft_last_error` and `weft_status_str` can be called after a failure without erasing it.
macro_rules! boundary {
    ($function:literal, default: $fallback:expr, $body:block) => {
        ::weft_ffi::value_call::<$crate::boundary::Libweft, _>($function, $fallback, || $body)
    };
    ($function:literal, $body:block) => {
        ::weft_ffi::status_call::<$crate::boundary::Libweft>(
            $function,
            || -> ::core::result::Result<(), $crate::CallError> { $body },
        )
    };
}
pub(crate) use boundary;

/// Detailed text of the last failed `weft_*` call on the calling thread: the function,
/// what failed and the values involved. "" if the last status-returning call succeeded
/// (or none was made). Never NULL. The text stays valid until the next status-returning
/// `weft_*` call on this thread; copy it to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn weft_last_error() -> *const c_char {
    boundary!("weft_last_error", default: c"".as_ptr(), { LAST_ERROR.as_ptr() })
}

#[cfg(test)]
mod test {
    use super::*;
    use std::ffi::CStr;
    use weft_ffi::arg_ref;

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
    fn argument_checks_map_to_null_arg_and_bad_field() {
        use weft_ffi::arg::{c_str, check_slice};
        let e = CallError::from(
            check_slice(std::ptr::dangling::<u64>(), usize::MAX / 4, "buf").unwrap_err(),
        );
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FIELD);
        assert_eq!(
            e.message,
            format!(
                "argument `buf` = {} elements is invalid: expected a length that fits in memory",
                usize::MAX / 4
            )
        );
        assert!(check_slice(std::ptr::dangling::<u64>(), 3, "buf").is_ok());
        let e = check_slice(std::ptr::without_provenance::<u64>(5), 3, "buf").unwrap_err();
        let e = CallError::from(e);
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FIELD);
        assert_eq!(
            e.message,
            "argument `buf` = 0x5 is invalid: expected a pointer aligned to 8 bytes"
        );
        // SAFETY: a NUL-terminated literal.
        let e = CallError::from(unsafe { c_str(c"\xff".as_ptr(), "name") }.unwrap_err());
        assert_eq!(e.status, weft_status::WEFT_ERR_BAD_FIELD);
        assert_eq!(
            e.message,
            "argument `name` = \"\\xff\" is invalid: expected a UTF-8 string"
        );
        // SAFETY: NULL is refused before anything is read.
        let e = CallError::from(unsafe { c_str(std::ptr::null(), "name") }.unwrap_err());
        assert_eq!(e, CallError::null_arg("name"));
    }
}
