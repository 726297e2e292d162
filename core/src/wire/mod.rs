//! Wire formats: every byte layout that crosses a process or host boundary.
//!
//! Each format follows smoltcp's two levels: a checked view over bytes (`new_checked`
//! validates length, magic, version and counts once; after that, accessors never panic) and
//! a plain `Repr` with `parse(&[u8])` (or `from_view(&view)`), `emit(&self, &mut [u8])` and
//! `buffer_len()`. Integers are big-endian (`zerocopy::byteorder::network_endian`) so the
//! same handle means the same bytes on every host. Raw header structs stay private to their
//! module.

pub mod bootstrap;
pub mod connect;
pub mod mesh_handle;
pub mod socket_handle;
pub mod socket_stream;

use core::fmt;

use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

/// Reads a `T` from the front of `bytes`, or says how many bytes were missing.
pub(crate) fn prefix<T: FromBytes + KnownLayout + Immutable + Unaligned>(
    bytes: &[u8],
) -> Result<(&T, &[u8]), ParseError> {
    T::ref_from_prefix(bytes).map_err(|_| ParseError::Truncated {
        needed: core::mem::size_of::<T>(),
        got: bytes.len(),
    })
}

/// The check every format starts with, magic first: a wrong magic means the bytes are not
/// this format at all, which says more than a version mismatch would.
pub(crate) fn check_magic_version(
    magic: u32,
    expected: u32,
    version: u16,
    supported: u16,
) -> Result<(), ParseError> {
    if magic != expected {
        return Err(ParseError::BadMagic {
            expected,
            found: magic,
        });
    }
    if version != supported {
        return Err(ParseError::BadVersion {
            supported,
            found: version,
        });
    }
    Ok(())
}

/// Why a byte buffer is not a valid weft wire message. Small and `Copy`, so that parsing
/// untrusted bytes never allocates; each variant names the field at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The buffer ends before the format does.
    Truncated { needed: usize, got: usize },
    /// The magic number is not this format's: the bytes are something else entirely.
    BadMagic { expected: u32, found: u32 },
    /// A version this build does not understand (peers built from different weft releases).
    BadVersion { supported: u16, found: u16 },
    /// A count exceeds what the format allows.
    TooMany {
        field: &'static str,
        count: usize,
        max: usize,
    },
    /// An address family other than IPv4 (4) or IPv6 (6).
    BadAddressFamily { found: u8 },
    /// A field holds a value outside its range.
    BadField { field: &'static str, value: u64 },
    /// A length field disagrees with the bytes that carry it.
    BadLength {
        field: &'static str,
        declared: usize,
        actual: usize,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Truncated { needed, got } => {
                write!(f, "truncated: needs {needed} bytes, got {got}")
            }
            ParseError::BadMagic { expected, found } => {
                write!(
                    f,
                    "bad magic {found:#010x} (expected {expected:#010x}): not a weft message"
                )
            }
            ParseError::BadVersion { supported, found } => write!(
                f,
                "unsupported version {found} (this build speaks {supported}): are all ranks running the same weft?"
            ),
            ParseError::TooMany { field, count, max } => {
                write!(f, "{field}: {count} exceeds the maximum of {max}")
            }
            ParseError::BadAddressFamily { found } => {
                write!(f, "address family {found} is neither IPv4 (4) nor IPv6 (6)")
            }
            ParseError::BadField { field, value } => write!(f, "{field}: invalid value {value}"),
            ParseError::BadLength {
                field,
                declared,
                actual,
            } => {
                write!(
                    f,
                    "{field}: declares {declared} bytes but {actual} are present"
                )
            }
        }
    }
}

impl core::error::Error for ParseError {}
