//! Pointer arguments from C, checked before Rust looks through them: NULL, element counts
//! whose bytes cannot exist, misaligned slices, strings that are not UTF-8.
//!
//! A failed check is an [`ArgError`] naming the argument; each surface turns it into its own
//! error with `From` (libweft: `WEFT_ERR_NULL_ARG` / `WEFT_ERR_BAD_FIELD`; libnccl:
//! `ncclInvalidArgument`). The macros ([`arg_ref!`](crate::arg_ref) and the others) return
//! that error from an entry point's body, which keeps a body's first lines to one per
//! argument.
//!
//! What cannot be checked (that a non-null pointer points to live memory of the right type)
//! is the caller's promise: every function here is for entry points whose `# Safety`
//! section asks for it.

use std::ffi::{CStr, c_char};
use std::fmt;
use std::ptr::NonNull;

/// A pointer argument that failed its check, with the argument's name as C declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgError {
    /// The pointer was NULL.
    Null { name: &'static str },
    /// `len` elements of `elem_size` bytes are more than `isize::MAX` bytes, which no
    /// allocation can hold.
    TooLong {
        name: &'static str,
        len: usize,
        elem_size: usize,
    },
    /// The pointer is not aligned for its element type.
    Misaligned {
        name: &'static str,
        address: usize,
        align: usize,
    },
    /// The string is not UTF-8; `text` is it as Rust's `Debug` shows a `CStr` (escaped).
    NotUtf8 { name: &'static str, text: String },
}

impl ArgError {
    /// The argument's name.
    pub fn name(&self) -> &'static str {
        match self {
            ArgError::Null { name }
            | ArgError::TooLong { name, .. }
            | ArgError::Misaligned { name, .. }
            | ArgError::NotUtf8 { name, .. } => name,
        }
    }
}

/// libweft's wording, which its C tests match: "argument `name` is NULL", "argument `name`
/// = value is invalid: expected what would do".
impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, value, expected) = match self {
            ArgError::Null { name } => return write!(f, "argument `{name}` is NULL"),
            ArgError::TooLong { name, len, .. } => (
                name,
                format!("{len} elements"),
                "a length that fits in memory".to_owned(),
            ),
            ArgError::Misaligned {
                name,
                address,
                align,
            } => (
                name,
                format!("{address:#x}"),
                format!("a pointer aligned to {align} bytes"),
            ),
            ArgError::NotUtf8 { name, text } => (name, text.clone(), "a UTF-8 string".to_owned()),
        };
        write!(
            f,
            "argument `{name}` = {value} is invalid: expected {expected}"
        )
    }
}

impl std::error::Error for ArgError {}

/// `ptr`, or [`ArgError::Null`] naming it.
pub fn non_null<T>(ptr: *const T, name: &'static str) -> Result<NonNull<T>, ArgError> {
    NonNull::new(ptr.cast_mut()).ok_or(ArgError::Null { name })
}

/// Refuses element counts whose byte size exceeds `isize::MAX` (what
/// `slice::from_raw_parts` requires), then pointers not aligned for `T`.
pub fn check_slice<T>(ptr: *const T, len: usize, name: &'static str) -> Result<(), ArgError> {
    let fits = len
        .checked_mul(size_of::<T>())
        .is_some_and(|bytes| isize::try_from(bytes).is_ok());
    if !fits {
        return Err(ArgError::TooLong {
            name,
            len,
            elem_size: size_of::<T>(),
        });
    }
    if !ptr.is_aligned() {
        return Err(ArgError::Misaligned {
            name,
            address: ptr.addr(),
            align: align_of::<T>(),
        });
    }
    Ok(())
}

/// `&T` from a `*const T` argument.
///
/// # Safety
///
/// A non-null `ptr` is aligned and points to an initialised `T` that nothing writes while
/// the returned reference lives.
pub unsafe fn deref<'a, T>(ptr: *const T, name: &'static str) -> Result<&'a T, ArgError> {
    let ptr = non_null(ptr, name)?;
    // SAFETY: not null (checked); aligned, initialised and not written meanwhile by the
    // caller's promise.
    Ok(unsafe { ptr.as_ref() })
}

/// `&mut T` from a `*mut T` out-argument.
///
/// # Safety
///
/// A non-null `ptr` is aligned, valid for reads and writes of one `T` holding a valid
/// value (out-types are plain integers, pointers and arrays of them, for which any bit
/// pattern is), and nothing else accesses it while the returned reference lives.
pub unsafe fn deref_mut<'a, T>(ptr: *mut T, name: &'static str) -> Result<&'a mut T, ArgError> {
    let mut ptr = non_null(ptr, name)?;
    // SAFETY: not null (checked); the rest is the caller's promise.
    Ok(unsafe { ptr.as_mut() })
}

/// `&[T]` from a pointer and an element count. NULL is refused even with `len == 0`: that
/// is then almost certainly a bug in the caller.
///
/// # Safety
///
/// A non-null `ptr` whose `len` passes [`check_slice`] points to `len` initialised
/// elements that nothing writes while the returned slice lives.
pub unsafe fn slice<'a, T>(
    ptr: *const T,
    len: usize,
    name: &'static str,
) -> Result<&'a [T], ArgError> {
    let ptr = non_null(ptr, name)?;
    check_slice(ptr.as_ptr(), len, name)?;
    // SAFETY: not null, aligned, and `len` elements fit in `isize::MAX` bytes (checked);
    // initialised and not written meanwhile by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) })
}

/// `&mut [T]` for an output buffer; as [`slice()`].
///
/// # Safety
///
/// As [`slice()`], and the `len` elements are writable, hold valid values (the element types
/// used are bytes, valid for any content) and nothing else accesses them while the
/// returned slice lives.
pub unsafe fn slice_mut<'a, T>(
    ptr: *mut T,
    len: usize,
    name: &'static str,
) -> Result<&'a mut [T], ArgError> {
    let ptr = non_null(ptr, name)?;
    check_slice(ptr.as_ptr(), len, name)?;
    // SAFETY: as in `slice`, for writes too, by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) })
}

/// `&str` from a NUL-terminated C string.
///
/// # Safety
///
/// A non-null `ptr` points to a NUL-terminated string that nothing writes while the
/// returned `&str` lives.
pub unsafe fn c_str<'a>(ptr: *const c_char, name: &'static str) -> Result<&'a str, ArgError> {
    let ptr = non_null(ptr, name)?;
    // SAFETY: not null (checked); NUL-terminated and not written meanwhile by the caller's
    // promise.
    let c = unsafe { CStr::from_ptr(ptr.as_ptr()) };
    c.to_str().map_err(|_| ArgError::NotUtf8 {
        name,
        text: format!("{c:?}"),
    })
}

/// `arg_ref!(ptr, "name")`: `&T` from a `*const T` argument, or returns the surface's error
/// for [`ArgError::Null`] (through `From<ArgError>`) from the enclosing body. Only inside
/// the body of an `unsafe extern "C" fn` whose `# Safety` section asks what [`deref`](crate::arg::deref) does.
#[macro_export]
macro_rules! arg_ref {
    ($ptr:expr, $name:literal) => {{
        // Arguments are evaluated outside the unsafe block, as any call's are.
        let (ptr, name): (_, &'static str) = ($ptr, $name);
        // SAFETY: the enclosing function's `# Safety` section makes the caller promise what
        // `deref` needs: a non-null pointer is aligned and points to an initialised value
        // that nothing writes during the call.
        match unsafe { $crate::arg::deref(ptr, name) } {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(e) => {
                return ::core::result::Result::Err(::core::convert::From::from(e));
            }
        }
    }};
}

/// `arg_mut!(ptr, "name")`: `&mut T` from a `*mut T` out-argument; as [`arg_ref!`], with
/// [`deref_mut`]'s contract.
#[macro_export]
macro_rules! arg_mut {
    ($ptr:expr, $name:literal) => {{
        // Arguments are evaluated outside the unsafe block, as any call's are.
        let (ptr, name): (_, &'static str) = ($ptr, $name);
        // SAFETY: the enclosing function's `# Safety` section makes the caller promise what
        // `deref_mut` needs: a non-null out-pointer is aligned, valid for writes of one
        // value, and not accessed by anything else during the call.
        match unsafe { $crate::arg::deref_mut(ptr, name) } {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(e) => {
                return ::core::result::Result::Err(::core::convert::From::from(e));
            }
        }
    }};
}

/// `arg_slice!(ptr, len, "name")`: `&[T]` from a pointer and an element count; as
/// [`arg_ref!`], with [`slice()`](crate::arg::slice)'s checks and contract.
#[macro_export]
macro_rules! arg_slice {
    ($ptr:expr, $len:expr, $name:literal) => {{
        // Arguments are evaluated outside the unsafe block, as any call's are.
        let (ptr, len, name): (_, usize, &'static str) = ($ptr, $len, $name);
        // SAFETY: the enclosing function's `# Safety` section makes the caller promise what
        // `slice` needs: a non-null pointer points to `len` initialised elements that
        // nothing writes during the call.
        match unsafe { $crate::arg::slice(ptr, len, name) } {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(e) => {
                return ::core::result::Result::Err(::core::convert::From::from(e));
            }
        }
    }};
}

/// `arg_slice_mut!(ptr, len, "name")`: `&mut [T]` for an output buffer; as [`arg_slice!`],
/// with [`slice_mut`]'s contract.
#[macro_export]
macro_rules! arg_slice_mut {
    ($ptr:expr, $len:expr, $name:literal) => {{
        // Arguments are evaluated outside the unsafe block, as any call's are.
        let (ptr, len, name): (_, usize, &'static str) = ($ptr, $len, $name);
        // SAFETY: the enclosing function's `# Safety` section makes the caller promise what
        // `slice_mut` needs: a non-null pointer points to `len` writable elements that
        // nothing else accesses during the call.
        match unsafe { $crate::arg::slice_mut(ptr, len, name) } {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(e) => {
                return ::core::result::Result::Err(::core::convert::From::from(e));
            }
        }
    }};
}

/// `arg_cstr!(ptr, "name")`: `&str` from a NUL-terminated C string; as [`arg_ref!`], with
/// [`c_str`]'s checks and contract.
#[macro_export]
macro_rules! arg_cstr {
    ($ptr:expr, $name:literal) => {{
        // Arguments are evaluated outside the unsafe block, as any call's are.
        let (ptr, name): (_, &'static str) = ($ptr, $name);
        // SAFETY: the enclosing function's `# Safety` section makes the caller promise what
        // `c_str` needs: a non-null pointer points to a NUL-terminated string that nothing
        // writes during the call.
        match unsafe { $crate::arg::c_str(ptr, name) } {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(e) => {
                return ::core::result::Result::Err(::core::convert::From::from(e));
            }
        }
    }};
}

#[cfg(test)]
mod test {
    use super::*;
    use std::ptr;

    /// An error of a surface, made from an `ArgError` as the macros require.
    #[derive(Debug, PartialEq)]
    struct SurfaceError(String);

    impl From<ArgError> for SurfaceError {
        fn from(e: ArgError) -> Self {
            SurfaceError(e.to_string())
        }
    }

    /// # Safety
    /// Each pointer is NULL or valid as the macros require.
    unsafe fn body(
        value: *const u64,
        out: *mut u32,
        bytes: *const u8,
        len: usize,
        name: *const c_char,
    ) -> Result<String, SurfaceError> {
        let value = arg_ref!(value, "value");
        let out = arg_mut!(out, "out");
        let bytes = arg_slice!(bytes, len, "bytes");
        let name = arg_cstr!(name, "name");
        *out = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        Ok(format!("{value} {name} {bytes:?}"))
    }

    #[test]
    fn macros_return_the_surfaces_error_naming_the_argument() {
        let (v, data) = (7u64, [1u8, 2, 3]);
        let mut out = 0u32;
        // SAFETY: every pointer is valid or NULL.
        let call = |value, out: *mut u32, bytes, name| unsafe {
            body(value, out, bytes, data.len(), name)
        };
        assert_eq!(
            call(&v, &mut out, data.as_ptr(), c"x".as_ptr()),
            Ok("7 x [1, 2, 3]".to_owned())
        );
        assert_eq!(out, 3);
        let null = |name: &str| Err(SurfaceError(format!("argument `{name}` is NULL")));
        assert_eq!(
            call(ptr::null(), &mut out, data.as_ptr(), c"x".as_ptr()),
            null("value")
        );
        assert_eq!(
            call(&v, ptr::null_mut(), data.as_ptr(), c"x".as_ptr()),
            null("out")
        );
        assert_eq!(
            call(&v, &mut out, ptr::null(), c"x".as_ptr()),
            null("bytes")
        );
        assert_eq!(call(&v, &mut out, data.as_ptr(), ptr::null()), null("name"));
        assert_eq!(
            call(&v, &mut out, data.as_ptr(), c"\xff".as_ptr()),
            Err(SurfaceError(
                "argument `name` = \"\\xff\" is invalid: expected a UTF-8 string".to_owned()
            ))
        );
    }

    #[test]
    fn slice_lengths_beyond_memory_and_misalignment_are_rejected() {
        let p = ptr::dangling::<u64>();
        let e = check_slice(p, usize::MAX / 4, "buf").unwrap_err();
        assert_eq!(
            e,
            ArgError::TooLong {
                name: "buf",
                len: usize::MAX / 4,
                elem_size: 8
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "argument `buf` = {} elements is invalid: expected a length that fits in memory",
                usize::MAX / 4
            )
        );
        assert!(check_slice(p, 3, "buf").is_ok());
        assert!(check_slice(p, 0, "buf").is_ok());
        let e = check_slice(ptr::without_provenance::<u64>(5), 3, "buf").unwrap_err();
        assert_eq!(e.name(), "buf");
        assert_eq!(
            e.to_string(),
            "argument `buf` = 0x5 is invalid: expected a pointer aligned to 8 bytes"
        );
        // A NULL slice is refused even when empty.
        // SAFETY: NULL is refused before anything is read.
        let e = unsafe { slice::<u8>(ptr::null(), 0, "empty") }.unwrap_err();
        assert_eq!(e, ArgError::Null { name: "empty" });
        let mut buf = [0u8; 4];
        // SAFETY: `buf` holds 4 writable bytes.
        let s = unsafe { slice_mut(buf.as_mut_ptr(), 4, "buf") }.unwrap();
        s[3] = 9;
        assert_eq!(buf, [0, 0, 0, 9]);
    }

    #[test]
    fn non_null_accepts_mut_and_const_pointers() {
        let mut x = 1i32;
        assert!(non_null(&raw mut x, "x").is_ok());
        assert!(non_null(&raw const x, "x").is_ok());
        assert_eq!(
            non_null(ptr::null::<i32>(), "version"),
            Err(ArgError::Null { name: "version" })
        );
    }
}
