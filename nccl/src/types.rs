//! NCCL's data types and reduction operators as weft's (`weft_core::abi`, same numbers),
//! checked: a number C passes that is not one of them is an error, not undefined behaviour.

use weft_core::abi::{DataType, RedOp};

use crate::result::ApiError;

/// `ncclNumTypes`, `ncclNumOps`.
pub const NUM_TYPES: i32 = 12;
pub const NUM_OPS: i32 = 5;

/// `ncclDataType_t` -> weft's.
pub fn data_type(value: i32) -> Result<DataType, ApiError> {
    u32::try_from(value)
        .ok()
        .and_then(|v| DataType::try_from(v).ok())
        .ok_or_else(|| {
            ApiError::invalid_argument(format!(
                "invalid data type {value}: ncclDataType_t is 0..{} (ncclInt8..ncclFloat8e5m2)",
                NUM_TYPES - 1
            ))
        })
}

/// A built-in `ncclRedOp_t` -> weft's. Operators from `ncclRedOpCreatePreMulSum`
/// (>= ncclNumOps) belong to a communicator: [`crate::redop::UserRedOps::resolve`].
pub fn red_op(value: i32) -> Result<RedOp, ApiError> {
    u32::try_from(value)
        .ok()
        .and_then(|v| RedOp::try_from(v).ok())
        .ok_or_else(|| {
            ApiError::invalid_argument(format!(
                "invalid reduction operator {value}: weft takes NCCL's built-in ones, 0..{} \
                 (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg)",
                NUM_OPS - 1
            ))
        })
}

/// Bytes of `count` elements, refusing counts whose size overflows.
pub fn bytes(count: usize, dtype: DataType) -> Result<usize, ApiError> {
    count.checked_mul(dtype.size_of_elem()).ok_or_else(|| {
        ApiError::invalid_argument(format!(
            "count {count} of {dtype:?} overflows the address space"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nccl_type_maps_to_weft_with_its_size() {
        // ncclDataType_t's values and element sizes, fp8 included.
        let sizes = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for (value, size) in sizes.iter().enumerate() {
            let t = data_type(value as i32).unwrap();
            assert_eq!(t as u32, value as u32);
            assert_eq!(t.size_of_elem(), *size, "type {value}");
        }
        assert_eq!(data_type(10).unwrap(), DataType::Float8E4M3);
        assert_eq!(data_type(11).unwrap(), DataType::Float8E5M2);
        for bad in [-1, NUM_TYPES, 1000, i32::MIN] {
            let e = data_type(bad).unwrap_err();
            assert_eq!(e.code, crate::result::NCCL_INVALID_ARGUMENT);
            assert!(e.message.contains(&bad.to_string()), "{}", e.message);
        }
    }

    #[test]
    fn every_builtin_op_maps_and_others_are_refused() {
        let ops = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];
        for (value, op) in ops.iter().enumerate() {
            assert_eq!(red_op(value as i32).unwrap(), *op);
        }
        for bad in [-1, NUM_OPS, 0x7fff_ffff] {
            assert_eq!(
                red_op(bad).unwrap_err().code,
                crate::result::NCCL_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn byte_counts_check_overflow() {
        assert_eq!(bytes(1001, DataType::Float64).unwrap(), 8008);
        assert!(bytes(usize::MAX / 2, DataType::Int32).is_err());
    }
}
