//! User reduction operators: NCCL's `ncclRedOpCreatePreMulSum` / `ncclRedOpDestroy`.
//!
//! Each communicator has its own table of the operators created on it. An operator's value
//! is `ncclNumOps` or more, as NCCL's, and comes from one process-wide counter that never
//! repeats a value: an operator used on another communicator than its own, or after its
//! destruction, is then never mistaken for a live one and is refused
//! (`ncclInvalidArgument`; NCCL instead scrambles its table indices with a hash of the
//! communicator's address, which catches most such mistakes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};

use weft_core::abi::DataType;
use weft_runtime::gpu::{GpuRedOp, PreMulScalar};

use crate::result::ApiError;
use crate::types::NUM_OPS;

/// `ncclScalarResidence_t`.
pub const SCALAR_DEVICE: i32 = 0;
pub const SCALAR_HOST_IMMEDIATE: i32 = 1;

/// The next operator value handed out (process-wide, see the module's comment).
static NEXT_OP: AtomicI32 = AtomicI32::new(NUM_OPS);

/// One `PreMulSum` operator: the data type it was created for and its scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreMulSum {
    pub dtype: DataType,
    pub scalar: PreMulScalar,
}

/// The operators created on one communicator, by value.
#[derive(Debug, Default)]
pub struct UserRedOps {
    ops: HashMap<i32, PreMulSum>,
}

impl UserRedOps {
    /// Adds `op` and returns its new value (>= `ncclNumOps`).
    pub fn create(&mut self, op: PreMulSum) -> Result<i32, ApiError> {
        let value = NEXT_OP
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_add(1))
            .map_err(|_| {
                ApiError::new(
                    crate::result::NCCL_INTERNAL_ERROR,
                    "this process has created 2^31 reduction operators; weft never reuses \
                     an operator value, and none is left",
                )
            })?;
        self.ops.insert(value, op);
        Ok(value)
    }

    /// Frees `op` (NCCL's `ncclRedOpDestroy`).
    pub fn destroy(&mut self, op: i32) -> Result<(), ApiError> {
        check_user_value(op)?;
        self.ops.remove(&op).map(|_| ()).ok_or_else(|| unknown(op))
    }

    /// The reduction a call on this communicator with `op` (a user operator, >= ncclNumOps)
    /// and `dtype` runs: the operator's type must be the call's, as NCCL checks.
    pub fn resolve(&self, op: i32, dtype: DataType) -> Result<GpuRedOp, ApiError> {
        check_user_value(op)?;
        let user = self.ops.get(&op).ok_or_else(|| unknown(op))?;
        if user.dtype != dtype {
            return Err(ApiError::invalid_argument(format!(
                "reduction operator {op} was created for {} and this call's data type is {}: \
                 a PreMulSum operator reduces only the type given to ncclRedOpCreatePreMulSum; \
                 create one per data type",
                user.dtype, dtype
            )));
        }
        Ok(GpuRedOp::PreMulSum(user.scalar))
    }

    /// Operators alive on this communicator.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

fn check_user_value(op: i32) -> Result<(), ApiError> {
    if (0..NUM_OPS).contains(&op) {
        return Err(ApiError::invalid_argument(format!(
            "reduction operator {op} is a built-in one (ncclSum..ncclAvg), not one from \
             ncclRedOpCreatePreMulSum"
        )));
    }
    if op < 0 {
        return Err(ApiError::invalid_argument(format!(
            "invalid reduction operator {op}: ncclRedOp_t is never negative"
        )));
    }
    Ok(())
}

fn unknown(op: i32) -> ApiError {
    ApiError::invalid_argument(format!(
        "reduction operator {op} is unknown to this communicator: it was destroyed \
         (ncclRedOpDestroy), created on another communicator, or never created; create it \
         with ncclRedOpCreatePreMulSum on the communicator that runs the call"
    ))
}

/// The scalar of `ncclRedOpCreatePreMulSum` as weft keeps it: the bytes of one `dtype`
/// element read now for `ncclScalarHostImmediate`, the address for `ncclScalarDevice`.
///
/// # Safety
///
/// For `ncclScalarHostImmediate`, `scalar` (checked non-null) must be readable for one
/// element of `dtype`.
pub unsafe fn scalar_from_c(
    scalar: *const u8,
    dtype: DataType,
    residence: i32,
) -> Result<PreMulScalar, ApiError> {
    if scalar.is_null() {
        return Err(ApiError::invalid_argument(
            "scalar is NULL: pass the address of one element of the operator's data type \
             (host memory for ncclScalarHostImmediate, device memory for ncclScalarDevice)",
        ));
    }
    match residence {
        SCALAR_HOST_IMMEDIATE => {
            let n = dtype.size_of_elem();
            let mut bytes = [0u8; 8];
            // SAFETY: non-null, and readable for one element by the caller's promise; n <= 8.
            unsafe { std::ptr::copy_nonoverlapping(scalar, bytes.as_mut_ptr(), n) };
            // The element's bytes in memory order are the low bytes of a native u64, which
            // is how the kernels read it (`*(const T*)&red_op_arg`).
            Ok(PreMulScalar::Immediate(u64::from_ne_bytes(bytes)))
        }
        SCALAR_DEVICE => Ok(PreMulScalar::Device(scalar as u64)),
        other => Err(ApiError::invalid_argument(format!(
            "invalid scalar residence {other}: ncclScalarResidence_t is ncclScalarDevice (0) \
             or ncclScalarHostImmediate (1)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::NCCL_INVALID_ARGUMENT;

    fn half_two() -> PreMulSum {
        PreMulSum {
            dtype: DataType::Float16,
            scalar: PreMulScalar::Immediate(0x4000),
        }
    }

    #[test]
    fn create_use_destroy() {
        let mut ops = UserRedOps::default();
        let a = ops.create(half_two()).unwrap();
        let b = ops
            .create(PreMulSum {
                dtype: DataType::Int32,
                scalar: PreMulScalar::Device(0x7000_0000),
            })
            .unwrap();
        assert!(a >= NUM_OPS && b > a);
        assert_eq!(
            ops.resolve(a, DataType::Float16).unwrap(),
            GpuRedOp::PreMulSum(PreMulScalar::Immediate(0x4000))
        );
        assert_eq!(
            ops.resolve(b, DataType::Int32).unwrap(),
            GpuRedOp::PreMulSum(PreMulScalar::Device(0x7000_0000))
        );
        assert_eq!(ops.len(), 2);
        ops.destroy(a).unwrap();
        assert_eq!(ops.len(), 1);
        // Destroyed: neither usable nor destroyable again; b is unaffected.
        let e = ops.resolve(a, DataType::Float16).unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("destroyed"), "{}", e.message);
        assert_eq!(ops.destroy(a).unwrap_err().code, NCCL_INVALID_ARGUMENT);
        assert!(ops.resolve(b, DataType::Int32).is_ok());
        // A new operator never takes a destroyed one's value.
        let c = ops.create(half_two()).unwrap();
        assert!(c != a && c != b);
    }

    #[test]
    fn another_communicators_operator_is_refused() {
        let mut mine = UserRedOps::default();
        let mut theirs = UserRedOps::default();
        let op = theirs.create(half_two()).unwrap();
        let _own = mine.create(half_two()).unwrap();
        let e = mine.resolve(op, DataType::Float16).unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("another communicator"), "{}", e.message);
        assert_eq!(mine.destroy(op).unwrap_err().code, NCCL_INVALID_ARGUMENT);
        assert!(theirs.resolve(op, DataType::Float16).is_ok());
    }

    #[test]
    fn the_calls_type_must_be_the_operators() {
        let mut ops = UserRedOps::default();
        let op = ops.create(half_two()).unwrap();
        let e = ops.resolve(op, DataType::Bfloat16).unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("created for"), "{}", e.message);
    }

    #[test]
    fn builtin_and_negative_values_are_not_user_operators() {
        let mut ops = UserRedOps::default();
        for v in [0, 4, -1, i32::MIN] {
            assert_eq!(ops.destroy(v).unwrap_err().code, NCCL_INVALID_ARGUMENT);
            assert_eq!(
                ops.resolve(v, DataType::Float32).unwrap_err().code,
                NCCL_INVALID_ARGUMENT
            );
        }
        assert!(ops.destroy(0).unwrap_err().message.contains("built-in"));
    }

    #[test]
    fn scalars_from_c() {
        let x = 2.5f64;
        let p = (&x as *const f64).cast::<u8>();
        // SAFETY: p points to 8 readable bytes.
        let s = unsafe { scalar_from_c(p, DataType::Float64, SCALAR_HOST_IMMEDIATE) }.unwrap();
        assert_eq!(s, PreMulScalar::Immediate(2.5f64.to_bits()));
        let h = 0x3c00u16; // half 1.0
        let p = (&h as *const u16).cast::<u8>();
        // SAFETY: p points to 2 readable bytes, all a half reads.
        let s = unsafe { scalar_from_c(p, DataType::Float16, SCALAR_HOST_IMMEDIATE) }.unwrap();
        assert_eq!(s, PreMulScalar::Immediate(0x3c00));
        // SAFETY: a device address is only recorded, never read here.
        let s = unsafe { scalar_from_c(0x1000 as *const u8, DataType::Int8, SCALAR_DEVICE) };
        assert_eq!(s.unwrap(), PreMulScalar::Device(0x1000));
        // SAFETY: refused before any read.
        let e = unsafe { scalar_from_c(std::ptr::null(), DataType::Int8, SCALAR_DEVICE) };
        assert_eq!(e.unwrap_err().code, NCCL_INVALID_ARGUMENT);
        // SAFETY: refused before any read.
        let e = unsafe { scalar_from_c(p, DataType::Float16, 2) };
        assert!(e.unwrap_err().message.contains("residence"));
    }
}
