//! Status codes of the C ABI and the error value that carries one with its message.

use std::ffi::{CStr, c_char};
use std::fmt;

use weft_core::wire::ParseError;
use weft_ffi::ArgError;

/// Result of every status-returning `weft_*` function. The numbers are part of the ABI:
/// a code keeps its meaning forever; new codes are added at the end.
///
/// cbindgen:prefix-with-name=false
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum weft_status {
    /// Success.
    WEFT_OK = 0,
    /// A required pointer argument was NULL.
    WEFT_ERR_NULL_ARG = 1,
    /// Input bytes end before the format does.
    WEFT_ERR_TRUNCATED = 2,
    /// Input bytes are not a weft message (wrong magic number).
    WEFT_ERR_BAD_MAGIC = 3,
    /// Input comes from a weft version this build does not speak.
    WEFT_ERR_BAD_VERSION = 4,
    /// A count exceeds its maximum (for example mesh handle entries).
    WEFT_ERR_TOO_MANY = 5,
    /// An address family other than IPv4 (4) or IPv6 (6).
    WEFT_ERR_BAD_FAMILY = 6,
    /// A field or argument holds a value outside its range.
    WEFT_ERR_BAD_FIELD = 7,
    /// No local NIC can reach any of the peer's addresses.
    WEFT_ERR_NO_ROUTE = 8,
    /// A bug in weft (a panic was caught at the boundary); the message says where.
    WEFT_ERR_INTERNAL = 9,
    /// A length field disagrees with the bytes that carry it.
    WEFT_ERR_BAD_LENGTH = 10,
    /// The caller's output buffer is too small; the needed size is reported where possible.
    WEFT_ERR_BUFFER_TOO_SMALL = 11,
}

impl weft_status {
    /// Every code, in numeric order.
    pub(crate) const ALL: [weft_status; 12] = [
        weft_status::WEFT_OK,
        weft_status::WEFT_ERR_NULL_ARG,
        weft_status::WEFT_ERR_TRUNCATED,
        weft_status::WEFT_ERR_BAD_MAGIC,
        weft_status::WEFT_ERR_BAD_VERSION,
        weft_status::WEFT_ERR_TOO_MANY,
        weft_status::WEFT_ERR_BAD_FAMILY,
        weft_status::WEFT_ERR_BAD_FIELD,
        weft_status::WEFT_ERR_NO_ROUTE,
        weft_status::WEFT_ERR_INTERNAL,
        weft_status::WEFT_ERR_BAD_LENGTH,
        weft_status::WEFT_ERR_BUFFER_TOO_SMALL,
    ];

    /// The code's name and a short meaning, NUL-terminated and static.
    pub const fn description(self) -> &'static CStr {
        match self {
            weft_status::WEFT_OK => c"WEFT_OK: success",
            weft_status::WEFT_ERR_NULL_ARG => c"WEFT_ERR_NULL_ARG: a required pointer was NULL",
            weft_status::WEFT_ERR_TRUNCATED => {
                c"WEFT_ERR_TRUNCATED: input ends before the format does"
            }
            weft_status::WEFT_ERR_BAD_MAGIC => {
                c"WEFT_ERR_BAD_MAGIC: input is not a weft message (wrong magic)"
            }
            weft_status::WEFT_ERR_BAD_VERSION => {
                c"WEFT_ERR_BAD_VERSION: input comes from an incompatible weft version"
            }
            weft_status::WEFT_ERR_TOO_MANY => c"WEFT_ERR_TOO_MANY: a count exceeds its maximum",
            weft_status::WEFT_ERR_BAD_FAMILY => {
                c"WEFT_ERR_BAD_FAMILY: address family is neither IPv4 (4) nor IPv6 (6)"
            }
            weft_status::WEFT_ERR_BAD_FIELD => {
                c"WEFT_ERR_BAD_FIELD: a field or argument is out of range"
            }
            weft_status::WEFT_ERR_NO_ROUTE => {
                c"WEFT_ERR_NO_ROUTE: no local NIC reaches any peer address"
            }
            weft_status::WEFT_ERR_INTERNAL => {
                c"WEFT_ERR_INTERNAL: internal error in weft (please report it with weft_last_error())"
            }
            weft_status::WEFT_ERR_BAD_LENGTH => {
                c"WEFT_ERR_BAD_LENGTH: a length field disagrees with the data"
            }
            weft_status::WEFT_ERR_BUFFER_TOO_SMALL => {
                c"WEFT_ERR_BUFFER_TOO_SMALL: the output buffer is too small"
            }
        }
    }
}

/// Text for a status code; `code` is a plain integer because C callers may pass anything.
pub(crate) fn status_description(code: u32) -> &'static CStr {
    weft_status::ALL
        .iter()
        .find(|s| **s as u32 == code)
        .map_or(c"unknown weft status code", |s| s.description())
}

/// Static text of a status code. Never NULL; the string lives as long as the program.
/// Unknown codes give "unknown weft status code".
#[unsafe(no_mangle)]
pub extern "C" fn weft_status_str(code: u32) -> *const c_char {
    crate::boundary!("weft_status_str", default: c"internal error".as_ptr(), {
        status_description(code).as_ptr()
    })
}

/// A failed call: the status returned to C and the text `weft_last_error()` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub status: weft_status,
    pub message: String,
}

impl CallError {
    pub fn new(status: weft_status, message: impl Into<String>) -> Self {
        CallError {
            status,
            message: message.into(),
        }
    }

    /// `arg` was NULL.
    pub fn null_arg(arg: &str) -> Self {
        CallError::new(
            weft_status::WEFT_ERR_NULL_ARG,
            format!("argument `{arg}` is NULL"),
        )
    }

    /// `arg` holds `value`, which is out of range; `expected` says what would be accepted.
    pub fn bad_arg(arg: &str, value: impl fmt::Display, expected: &str) -> Self {
        CallError::new(
            weft_status::WEFT_ERR_BAD_FIELD,
            format!("argument `{arg}` = {value} is invalid: expected {expected}"),
        )
    }
}

/// A pointer argument's check failed: NULL is `WEFT_ERR_NULL_ARG`, the rest (a length that
/// cannot exist, a misaligned pointer, a string that is not UTF-8) `WEFT_ERR_BAD_FIELD`;
/// the message names the argument and the value.
impl From<ArgError> for CallError {
    fn from(e: ArgError) -> Self {
        let status = match e {
            ArgError::Null { .. } => weft_status::WEFT_ERR_NULL_ARG,
            _ => weft_status::WEFT_ERR_BAD_FIELD,
        };
        CallError::new(status, e.to_string())
    }
}

/// The status for each parse failure; the message is the error's own text, which names
/// the field and the numbers involved.
impl From<ParseError> for CallError {
    fn from(e: ParseError) -> Self {
        let status = match e {
            ParseError::Truncated { .. } => weft_status::WEFT_ERR_TRUNCATED,
            ParseError::BadMagic { .. } => weft_status::WEFT_ERR_BAD_MAGIC,
            ParseError::BadVersion { .. } => weft_status::WEFT_ERR_BAD_VERSION,
            ParseError::TooMany { .. } => weft_status::WEFT_ERR_TOO_MANY,
            ParseError::BadAddressFamily { .. } => weft_status::WEFT_ERR_BAD_FAMILY,
            ParseError::BadField { .. } => weft_status::WEFT_ERR_BAD_FIELD,
            ParseError::BadLength { .. } => weft_status::WEFT_ERR_BAD_LENGTH,
            // ParseError is non_exhaustive: a variant added later is still a bad field.
            _ => weft_status::WEFT_ERR_BAD_FIELD,
        };
        CallError::new(status, e.to_string())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn codes_are_stable_and_described() {
        for (i, s) in weft_status::ALL.iter().enumerate() {
            assert_eq!(*s as u32 as usize, i);
            let text = status_description(i as u32).to_str().unwrap();
            assert!(text.starts_with(&format!("{s:?}: ")), "{text}");
        }
        assert_eq!(
            status_description(12).to_str().unwrap(),
            "unknown weft status code"
        );
        assert_eq!(
            status_description(u32::MAX).to_str().unwrap(),
            "unknown weft status code"
        );
    }

    #[test]
    fn parse_errors_map_to_their_codes() {
        let cases = [
            (
                ParseError::Truncated { needed: 9, got: 3 },
                weft_status::WEFT_ERR_TRUNCATED,
            ),
            (
                ParseError::BadMagic {
                    expected: 1,
                    found: 2,
                },
                weft_status::WEFT_ERR_BAD_MAGIC,
            ),
            (
                ParseError::BadVersion {
                    supported: 1,
                    found: 7,
                },
                weft_status::WEFT_ERR_BAD_VERSION,
            ),
            (
                ParseError::TooMany {
                    field: "entries",
                    count: 9,
                    max: 8,
                },
                weft_status::WEFT_ERR_TOO_MANY,
            ),
            (
                ParseError::BadAddressFamily { found: 5 },
                weft_status::WEFT_ERR_BAD_FAMILY,
            ),
            (
                ParseError::BadField {
                    field: "x",
                    value: 3,
                },
                weft_status::WEFT_ERR_BAD_FIELD,
            ),
            (
                ParseError::BadLength {
                    field: "y",
                    declared: 4,
                    actual: 2,
                },
                weft_status::WEFT_ERR_BAD_LENGTH,
            ),
        ];
        for (e, status) in cases {
            let c = CallError::from(e);
            assert_eq!(c.status, status);
            assert_eq!(c.message, e.to_string());
        }
    }
}
