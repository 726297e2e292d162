//! The reduction a GPU collective applies: one of NCCL's built-in operators, or NCCL's
//! `PreMulSum` (`ncclRedOpCreatePreMulSum`), and how either becomes the kernel's operator,
//! argument and flags.

use weft_core::abi::{DataType, RED_OP_ARG_DEVICE_PTR, RED_OP_PREMUL, RedOp};

use super::error::GpuError;
use crate::exec::reduce::{Bf16, F8E4M3, F8E5M2, F16};

/// What a collective call reduces with ([`super::GpuComm::collective`] takes anything that
/// converts into it, so a plain [`RedOp`] works as before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuRedOp {
    /// NCCL's built-in operators: sum, prod, max, min, avg.
    Builtin(RedOp),
    /// NCCL's `PreMulSum`: each rank's input is multiplied by that rank's scalar (ranks may
    /// pass different ones), then the products are summed. Integers multiply and add
    /// wrapping; floats round the product to the type, as `Avg`'s `1/nranks` factor does.
    PreMulSum(PreMulScalar),
}

/// Where a `PreMulSum`'s scalar is: one element of the call's data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreMulScalar {
    /// The scalar's bits in the call's data type, in the low bytes of the `u64` (NCCL's
    /// `ncclScalarHostImmediate`: read when the operator was created).
    Immediate(u64),
    /// The device address of the scalar (NCCL's `ncclScalarDevice`): read by the kernel when
    /// it runs, so a value written earlier on the same stream is the one used. The memory
    /// must stay valid until the stream reaches the call's end.
    Device(u64),
}

impl From<RedOp> for GpuRedOp {
    fn from(op: RedOp) -> Self {
        GpuRedOp::Builtin(op)
    }
}

/// What a launch's work carries for its reduction: the kernel entry's operator,
/// `red_op_arg` and `red_op_flags` (`CollWork` and `PeerWork` alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRedOp {
    pub op: RedOp,
    pub arg: u64,
    pub flags: u32,
}

impl GpuRedOp {
    /// The kernel form of this reduction for `dtype` over `nranks` ranks.
    ///
    /// `PreMulSum` runs on the `Avg` entries rather than entries of its own: NVRTC compiles
    /// every entry of every module per data type at run time (seconds each), and float
    /// `Avg` already is "multiply each rank's own input by a factor, then sum". The
    /// `RED_OP_PREMUL` flag makes the integer `Avg` kernels multiply too and skip their
    /// final division, and `RED_OP_ARG_DEVICE_PTR` says the factor is read from device
    /// memory; both are run-time fields, so no new kernel is compiled.
    pub fn for_kernel(self, dtype: DataType, nranks: usize) -> Result<KernelRedOp, GpuError> {
        match self {
            GpuRedOp::Builtin(op) => Ok(KernelRedOp {
                op,
                arg: avg_scale_bits(dtype, op, nranks),
                flags: 0,
            }),
            GpuRedOp::PreMulSum(PreMulScalar::Immediate(bits)) => {
                // Only the type's own bytes: the kernel reads the low bytes as one element.
                let bytes = dtype.size_of_elem() as u32;
                let mask = if bytes >= 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * bytes)) - 1
                };
                Ok(KernelRedOp {
                    op: RedOp::Avg,
                    arg: bits & mask,
                    flags: RED_OP_PREMUL,
                })
            }
            GpuRedOp::PreMulSum(PreMulScalar::Device(0)) => Err(GpuError::InvalidArgument(
                "PreMulSum scalar: the device address is null; pass the address of one \
                 element of the call's data type in this GPU's memory"
                    .to_string(),
            )),
            GpuRedOp::PreMulSum(PreMulScalar::Device(addr)) => Ok(KernelRedOp {
                op: RedOp::Avg,
                arg: addr,
                flags: RED_OP_PREMUL | RED_OP_ARG_DEVICE_PTR,
            }),
        }
    }
}

/// `weft_coll_work.red_op_arg` of a built-in operator: for a float `Avg`, the factor each
/// input is multiplied by (1/nranks rounded as the CPU executor does), in the type's bits;
/// 0 otherwise.
pub fn avg_scale_bits(dtype: DataType, op: RedOp, nranks: usize) -> u64 {
    if op != RedOp::Avg {
        return 0;
    }
    let inv = 1.0 / nranks.max(1) as f64;
    match dtype {
        DataType::Float32 => u64::from((inv as f32).to_bits()),
        DataType::Float64 => inv.to_bits(),
        DataType::Float16 => u64::from(F16::from_f32(inv as f32).0),
        DataType::Bfloat16 => u64::from(Bf16::from_f32(inv as f32).0),
        DataType::Float8E4M3 => u64::from(F8E4M3::from_f32(inv as f32).0),
        DataType::Float8E5M2 => u64::from(F8E5M2::from_f32(inv as f32).0),
        _ => 0,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn builtin_ops_keep_their_entry_and_avg_factor() {
        let k = GpuRedOp::from(RedOp::Avg)
            .for_kernel(DataType::Float32, 4)
            .unwrap();
        assert_eq!(
            k,
            KernelRedOp {
                op: RedOp::Avg,
                arg: u64::from(0.25f32.to_bits()),
                flags: 0
            }
        );
        let k = GpuRedOp::from(RedOp::Max)
            .for_kernel(DataType::Int8, 4)
            .unwrap();
        assert_eq!((k.op, k.arg, k.flags), (RedOp::Max, 0, 0));
    }

    #[test]
    fn premulsum_runs_on_the_avg_entry_with_its_flags() {
        let imm = GpuRedOp::PreMulSum(PreMulScalar::Immediate(0xdead_beef_0000_3c00));
        // A half scalar keeps its two bytes only.
        assert_eq!(
            imm.for_kernel(DataType::Float16, 2).unwrap(),
            KernelRedOp {
                op: RedOp::Avg,
                arg: 0x3c00,
                flags: RED_OP_PREMUL
            }
        );
        assert_eq!(
            imm.for_kernel(DataType::Uint64, 2).unwrap().arg,
            0xdead_beef_0000_3c00
        );
        let dev = GpuRedOp::PreMulSum(PreMulScalar::Device(0x7f00_0000_1000));
        assert_eq!(
            dev.for_kernel(DataType::Int32, 8).unwrap(),
            KernelRedOp {
                op: RedOp::Avg,
                arg: 0x7f00_0000_1000,
                flags: RED_OP_PREMUL | RED_OP_ARG_DEVICE_PTR
            }
        );
        let null = GpuRedOp::PreMulSum(PreMulScalar::Device(0));
        assert!(matches!(
            null.for_kernel(DataType::Int32, 8),
            Err(GpuError::InvalidArgument(m)) if m.contains("null")
        ));
    }
}
