//! The value parsers the table's variables use. Each takes the value with surrounding blanks
//! removed and returns the typed value, or `Err(detail)`: `None` when the variable's
//! `allowed` text says enough, else a more precise reason.

use std::path::PathBuf;
use std::time::Duration;

use weft_core::algo::GpuAlgo;
use weft_core::topo::model::PathType;
use weft_core::tune::ProtocolEnable;

use crate::choice::{AddressFamily, DebugLevel, MeshTransport, NetBackend, TransportChoice};

/// A parse result: the value, or why it was refused (`None`: see `allowed`).
pub type Parsed<T> = Result<T, Option<String>>;

/// Any text (interface filters, names): checked by whoever uses it.
pub fn text(s: &str) -> Parsed<String> {
    Ok(s.to_string())
}

/// A file or directory.
pub fn path(s: &str) -> Parsed<PathBuf> {
    Ok(PathBuf::from(s))
}

/// A whole number from `MIN` to `MAX`.
pub fn number<const MIN: u64, const MAX: u64>(s: &str) -> Parsed<u64> {
    s.parse::<u64>()
        .ok()
        .filter(|n| (MIN..=MAX).contains(n))
        .ok_or(None)
}

/// [`number`] as a `u8` (`MAX` at most 255).
pub fn small<const MIN: u64, const MAX: u64>(s: &str) -> Parsed<u8> {
    number::<MIN, MAX>(s).and_then(|n| u8::try_from(n).map_err(|_| None))
}

/// [`number`] as a `u32`.
pub fn count<const MIN: u64, const MAX: u64>(s: &str) -> Parsed<u32> {
    number::<MIN, MAX>(s).and_then(|n| u32::try_from(n).map_err(|_| None))
}

/// A byte count (any `usize`).
pub fn bytes(s: &str) -> Parsed<usize> {
    s.parse::<usize>().map_err(|_| None)
}

/// The bytes of a FIFO of 8 steps (`NCCL_BUFFSIZE`): at least 4096, 8 steps of NCCL's
/// 512-byte grain.
pub fn ring_bytes(s: &str) -> Parsed<usize> {
    bytes(s).ok().filter(|b| *b >= 4096).ok_or(None)
}

/// Any integer, as NCCL's `int64_t` parameters take it (the user clamps).
pub fn integer(s: &str) -> Parsed<i64> {
    s.parse::<i64>().map_err(|_| None)
}

/// Seconds, fractions allowed: positive, finite, under 10^9.
pub fn seconds(s: &str) -> Parsed<Duration> {
    s.parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0 && v.is_finite() && *v < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or(None)
}

/// Whole seconds from `MIN` to `MAX`.
pub fn whole_seconds<const MIN: u64, const MAX: u64>(s: &str) -> Parsed<Duration> {
    number::<MIN, MAX>(s).map(Duration::from_secs)
}

/// Microseconds from `MIN` to `MAX`.
pub fn micros<const MIN: u64, const MAX: u64>(s: &str) -> Parsed<Duration> {
    number::<MIN, MAX>(s).map(Duration::from_micros)
}

/// `0` or `1`.
pub fn switch(s: &str) -> Parsed<bool> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(None),
    }
}

/// A whole number, on when it is not 0 (NCCL's integer switches).
pub fn nonzero(s: &str) -> Parsed<bool> {
    s.parse::<u64>().map(|n| n != 0).map_err(|_| None)
}

/// On unless `0`, `no`, `off` or `false`.
pub fn on_unless_off(s: &str) -> Parsed<bool> {
    Ok(!matches!(
        s.to_ascii_lowercase().as_str(),
        "0" | "no" | "off" | "false"
    ))
}

/// A path level as `NCCL_P2P_LEVEL` takes it: a name (`LOC` ... `SYS`) or an old number.
pub fn path_level(s: &str) -> Parsed<PathType> {
    PathType::parse_level(s).ok_or(None)
}

/// `NCCL_PROTO`'s syntax, by weft-core's parser.
pub fn protocols(s: &str) -> Parsed<ProtocolEnable> {
    ProtocolEnable::parse(s).map_err(|e| {
        let token = s.get(e.at.0..e.at.1).unwrap_or("");
        Some(format!("{e}: {token:?}"))
    })
}

/// `WEFT_ALGO`'s names, by weft-core's parser.
pub fn algo(s: &str) -> Parsed<GpuAlgo> {
    match GpuAlgo::parse(s) {
        Ok(Some(a)) => Ok(a),
        Ok(None) | Err(_) => Err(None),
    }
}

pub fn address_family(s: &str) -> Parsed<AddressFamily> {
    AddressFamily::parse(s).ok_or(None)
}

pub fn mesh_transport(s: &str) -> Parsed<MeshTransport> {
    MeshTransport::parse(s).ok_or(None)
}

pub fn transport(s: &str) -> Parsed<TransportChoice> {
    TransportChoice::parse(s).ok_or(None)
}

pub fn net_backend(s: &str) -> Parsed<NetBackend> {
    NetBackend::parse(s).ok_or(None)
}

pub fn debug_level(s: &str) -> Parsed<DebugLevel> {
    DebugLevel::parse(s).ok_or(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_to_their_range() {
        assert_eq!(number::<1, 16>("16"), Ok(16));
        assert_eq!(number::<1, 16>("0"), Err(None));
        assert_eq!(number::<1, 16>("17"), Err(None));
        assert_eq!(number::<1, 16>("-1"), Err(None));
        assert_eq!(small::<0, 255>("255"), Ok(255));
        assert_eq!(count::<1, 64>("64"), Ok(64));
        assert_eq!(ring_bytes("4095"), Err(None));
        assert_eq!(ring_bytes("4096"), Ok(4096));
        assert_eq!(integer("-3"), Ok(-3));
    }

    #[test]
    fn seconds_and_switches() {
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["0", "-1", "inf", "NaN", "1e9", "soon"] {
            assert_eq!(seconds(bad), Err(None), "{bad}");
        }
        assert_eq!(switch("1"), Ok(true));
        assert_eq!(switch("yes"), Err(None));
        assert_eq!(nonzero("2"), Ok(true));
        assert_eq!(nonzero("yes"), Err(None));
        assert_eq!(on_unless_off("OFF"), Ok(false));
        assert_eq!(on_unless_off("2"), Ok(true));
    }

    #[test]
    fn core_parsers_give_their_reasons() {
        let e = protocols("LL,Simpel").unwrap_err().unwrap();
        assert!(
            e.contains("unknown protocol") && e.contains("\"Simpel\""),
            "{e}"
        );
        assert_eq!(algo("TwoShot"), Ok(GpuAlgo::TwoShot));
        assert_eq!(algo("tree"), Err(None));
        assert_eq!(path_level("PHB"), Ok(PathType::Phb));
        assert_eq!(path_level("FAST"), Err(None));
    }
}
