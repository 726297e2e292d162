//! The small enums that every collective call carries: data type, reduction, collective,
//! algorithm and protocol, with NCCL's numeric values so that a value read from a C caller
//! or written into a kernel argument means what it means in NCCL.
//!
//! Structs shared with kernels and C hold these as plain `u32` (a foreign writer may store
//! any value there, and a Rust enum with an unknown discriminant would be undefined); the
//! typed value comes from `TryFrom<u32>`, which rejects unknown numbers.

use core::fmt;
use core::str::FromStr;

use crate::wire::ParseError;

/// Defines `ALL`, `name`, `from_name`, `TryFrom<u32>`, `FromStr` and `Display` for an enum
/// whose variants are listed with their printed names. The enum itself is written out by
/// hand above each use so that cbindgen (which does not expand macros) sees it.
macro_rules! named_values {
    ($ty:ident, $what:literal, [$($variant:ident => $name:literal),+ $(,)?]) => {
        impl $ty {
            /// Every value, in numeric order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The name NCCL's tools print for this value.
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            /// The value whose printed name is `name` (exact, case-sensitive).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl TryFrom<u32> for $ty {
            type Error = ParseError;

            fn try_from(value: u32) -> Result<Self, ParseError> {
                $(if value == $ty::$variant as u32 {
                    return Ok($ty::$variant);
                })+
                Err(ParseError::BadField { field: $what, value: u64::from(value) })
            }
        }

        impl From<$ty> for u32 {
            fn from(value: $ty) -> u32 {
                value as u32
            }
        }

        impl FromStr for $ty {
            type Err = UnknownName;

            fn from_str(name: &str) -> Result<Self, UnknownName> {
                $ty::from_name(name).ok_or(UnknownName { what: $what })
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// A name that matches no value of the enum named by `what` (for example "data type").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownName {
    /// What kind of value was being parsed.
    pub what: &'static str,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} name", self.what)
    }
}

impl core::error::Error for UnknownName {}

/// Element type of a buffer: `ncclDataType_t`, same numbers.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
    /// OCP FP8 E4M3 (`ncclFloat8e4m3`, CUDA `__nv_fp8_e4m3`): no infinities, max 448.
    Float8E4M3 = 10,
    /// OCP FP8 E5M2 (`ncclFloat8e5m2`, CUDA `__nv_fp8_e5m2`): max 57344.
    Float8E5M2 = 11,
}

named_values!(DataType, "data type", [
    Int8 => "int8",
    Uint8 => "uint8",
    Int32 => "int32",
    Uint32 => "uint32",
    Int64 => "int64",
    Uint64 => "uint64",
    Float16 => "half",
    Float32 => "float",
    Float64 => "double",
    Bfloat16 => "bfloat16",
    Float8E4M3 => "f8e4m3",
    Float8E5M2 => "f8e5m2",
]);

impl DataType {
    /// Bytes per element.
    pub const fn size_of_elem(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Whether this is one of the six float types (NCCL averages them by pre-multiplying
    /// each input by 1/n; integers are summed and divided once at the end).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8E4M3
                | DataType::Float8E5M2
        )
    }

    /// Whether this is one of the two 8-bit float types. GPUs reduce them with the fp8
    /// conversion instructions of compute capability 8.9 and newer (NCCL itself refuses
    /// fp8 reductions below 9.0); collectives that only move data take them anywhere.
    pub const fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8E4M3 | DataType::Float8E5M2)
    }

    /// Bytes taken by `count` elements, or `None` if that overflows a `u64`.
    pub const fn bytes_for(self, count: u64) -> Option<u64> {
        count.checked_mul(self.size_of_elem() as u64)
    }
}

/// Reduction operator: `ncclRedOp_t`'s built-in operators, same numbers.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedOp {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
    Avg = 4,
}

named_values!(RedOp, "reduction op", [
    Sum => "sum",
    Prod => "prod",
    Max => "max",
    Min => "min",
    Avg => "avg",
]);

/// Which collective a work item runs: `ncclFunc_t`, same numbers.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollKind {
    Broadcast = 0,
    Reduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllReduce = 4,
    SendRecv = 5,
    Send = 6,
    Recv = 7,
}

named_values!(CollKind, "collective", [
    Broadcast => "Broadcast",
    Reduce => "Reduce",
    AllGather => "AllGather",
    ReduceScatter => "ReduceScatter",
    AllReduce => "AllReduce",
    SendRecv => "SendRecv",
    Send => "Send",
    Recv => "Recv",
]);

impl CollKind {
    /// Whether the collective has a root rank (and `CollWork::root` means something).
    pub const fn has_root(self) -> bool {
        matches!(self, CollKind::Broadcast | CollKind::Reduce)
    }

    /// Whether the collective combines values (and `CollWork::redop` means something).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            CollKind::Reduce | CollKind::ReduceScatter | CollKind::AllReduce
        )
    }
}

/// Channel layout used by a work item: NCCL's `NCCL_ALGO_*` numbers and names.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Tree = 0,
    Ring = 1,
    CollNetDirect = 2,
    CollNetChain = 3,
    Nvls = 4,
    NvlsTree = 5,
    Pat = 6,
}

named_values!(Algorithm, "algorithm", [
    Tree => "Tree",
    Ring => "Ring",
    CollNetDirect => "CollNetDirect",
    CollNetChain => "CollNetChain",
    Nvls => "NVLS",
    NvlsTree => "NVLSTree",
    Pat => "PAT",
]);

/// How a FIFO slot is filled and signalled: NCCL's `NCCL_PROTO_*` numbers and names.
/// Also the index into `ConnInfo::buffs` and `ConnInfo::buff_sizes`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// 8-byte stores of 4 data bytes + 4 flag bytes: lowest latency, half the bandwidth.
    Ll = 0,
    /// 128-byte lines of 120 data bytes + 8 flag bytes: needs ordered NVLink stores.
    Ll128 = 1,
    /// Plain data, with head/tail counters as the only signal: full bandwidth.
    Simple = 2,
}

named_values!(Protocol, "protocol", [
    Ll => "LL",
    Ll128 => "LL128",
    Simple => "Simple",
]);

impl Protocol {
    /// Index of this protocol's entry in the per-protocol arrays of [`super::ConnInfo`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn data_type_numbers_names_and_sizes_are_nccls() {
        let expected: [(u32, &str, usize); 12] = [
            (0, "int8", 1),
            (1, "uint8", 1),
            (2, "int32", 4),
            (3, "uint32", 4),
            (4, "int64", 8),
            (5, "uint64", 8),
            (6, "half", 2),
            (7, "float", 4),
            (8, "double", 8),
            (9, "bfloat16", 2),
            (10, "f8e4m3", 1),
            (11, "f8e5m2", 1),
        ];
        assert_eq!(DataType::ALL.len(), expected.len());
        for (dt, (num, name, size)) in DataType::ALL.iter().zip(expected) {
            assert_eq!(*dt as u32, num);
            assert_eq!(dt.name(), name);
            assert_eq!(dt.size_of_elem(), size);
            assert_eq!(DataType::try_from(num), Ok(*dt));
            assert_eq!(DataType::from_name(name), Some(*dt));
            assert_eq!(name.parse::<DataType>(), Ok(*dt));
            assert_eq!(std::format!("{dt}"), name);
        }
    }

    #[test]
    fn float_kinds() {
        let floats: std::vec::Vec<DataType> = DataType::ALL
            .iter()
            .copied()
            .filter(|d| d.is_float())
            .collect();
        assert_eq!(
            floats,
            [
                DataType::Float16,
                DataType::Float32,
                DataType::Float64,
                DataType::Bfloat16,
                DataType::Float8E4M3,
                DataType::Float8E5M2
            ]
        );
        let fp8: std::vec::Vec<DataType> = DataType::ALL
            .iter()
            .copied()
            .filter(|d| d.is_fp8())
            .collect();
        assert_eq!(fp8, [DataType::Float8E4M3, DataType::Float8E5M2]);
    }

    #[test]
    fn red_op_numbers_and_names_are_nccls() {
        let expected = [(0, "sum"), (1, "prod"), (2, "max"), (3, "min"), (4, "avg")];
        assert_eq!(RedOp::ALL.len(), expected.len());
        for (op, (num, name)) in RedOp::ALL.iter().zip(expected) {
            assert_eq!(*op as u32, num);
            assert_eq!(op.name(), name);
            assert_eq!(RedOp::try_from(num), Ok(*op));
            assert_eq!(RedOp::from_name(name), Some(*op));
        }
    }

    #[test]
    fn coll_algo_proto_numbers_are_nccls() {
        assert_eq!(CollKind::ALL.len(), 8);
        assert_eq!(CollKind::AllReduce as u32, 4);
        assert_eq!(CollKind::Recv as u32, 7);
        assert_eq!(Algorithm::ALL.len(), 7);
        assert_eq!(Algorithm::Ring as u32, 1);
        assert_eq!(Algorithm::Pat as u32, 6);
        assert_eq!(Protocol::ALL.len(), super::super::NUM_PROTOCOLS);
        assert_eq!(Protocol::Simple.index(), 2);
        for (i, c) in CollKind::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i);
        }
    }

    #[test]
    fn unknown_values_and_names_are_errors_naming_the_field() {
        assert_eq!(
            DataType::try_from(12),
            Err(ParseError::BadField {
                field: "data type",
                value: 12
            })
        );
        assert_eq!(
            RedOp::try_from(u32::MAX),
            Err(ParseError::BadField {
                field: "reduction op",
                value: u64::from(u32::MAX)
            })
        );
        assert_eq!(DataType::from_name("Float"), None);
        assert_eq!(DataType::from_name(""), None);
        assert_eq!(
            "fp32".parse::<DataType>(),
            Err(UnknownName { what: "data type" })
        );
        assert_eq!(RedOp::from_name("mean"), None);
    }

    #[test]
    fn bytes_for_is_checked() {
        assert_eq!(DataType::Float64.bytes_for(1_000_003), Some(8_000_024));
        assert_eq!(DataType::Uint8.bytes_for(u64::MAX), Some(u64::MAX));
        assert_eq!(DataType::Float16.bytes_for(u64::MAX / 2 + 1), None);
    }

    proptest! {
        #[test]
        fn try_from_accepts_exactly_the_listed_values(v in any::<u32>()) {
            match DataType::try_from(v) {
                Ok(dt) => prop_assert_eq!(dt as u32, v),
                Err(e) => {
                    prop_assert!(v >= 12);
                    prop_assert_eq!(e, ParseError::BadField { field: "data type", value: u64::from(v) });
                }
            }
            prop_assert_eq!(RedOp::try_from(v).is_ok(), v < 5);
            prop_assert_eq!(CollKind::try_from(v).is_ok(), v < 8);
            prop_assert_eq!(Algorithm::try_from(v).is_ok(), v < 7);
            prop_assert_eq!(Protocol::try_from(v).is_ok(), v < 3);
        }

        #[test]
        fn from_name_never_accepts_random_strings(s in "[a-z0-9]{0,9}") {
            if let Some(dt) = DataType::from_name(&s) {
                prop_assert_eq!(dt.name(), s.as_str());
            }
            if let Some(op) = RedOp::from_name(&s) {
                prop_assert_eq!(op.name(), s.as_str());
            }
        }
    }
}
