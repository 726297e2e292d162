//! The narrow float types NCCL reduces, as bit containers with exact conversions: binary16
//! ([`F16`]), bfloat16 ([`Bf16`]) and OCP FP8 ([`F8E4M3`], [`F8E5M2`]). The host executor,
//! the GPU path's scalar arguments and the test reference all use these, so one rounding
//! rule holds everywhere (and matches the CUDA kernels' `reduce.cuh`).

mod fp8;
mod half;

pub use fp8::{F8E4M3, F8E5M2};
pub use half::{BF16_INFINITY, Bf16, F16, F16_INFINITY, max16, min16};

/// NCCL's scalar arithmetic on the narrow types: what `ncclSum`, `ncclProd`, `ncclMin`,
/// `ncclMax` and `ncclAvg`'s pre-multiplier mean for each, on the GPU and on the host.
/// binary16 and bfloat16 compute once in `f32` and round back (the correctly rounded result,
/// see `half.rs`); fp8 widens to binary16, computes there and narrows with saturation, as
/// NCCL's device code does (`fp8.rs`).
macro_rules! half_arith {
    ($t:ident, $infinity:expr) => {
        impl $t {
            /// `ncclSum`.
            #[inline(always)]
            pub fn sum(self, other: Self) -> Self {
                $t::from_f32(self.to_f32() + other.to_f32())
            }
            /// `ncclProd`.
            #[inline(always)]
            pub fn prod(self, other: Self) -> Self {
                $t::from_f32(self.to_f32() * other.to_f32())
            }
            /// `ncclMin`: `fmin` (a NaN operand yields the other), -0 below +0.
            #[inline(always)]
            pub fn minimum(self, other: Self) -> Self {
                $t(min16(self.0, other.0, $infinity))
            }
            /// `ncclMax`: `fmax` (a NaN operand yields the other), +0 above -0.
            #[inline(always)]
            pub fn maximum(self, other: Self) -> Self {
                $t(max16(self.0, other.0, $infinity))
            }
            /// `ncclAvg`'s pre-multiplier `1/nranks`, rounded once from `f64` through `f32`
            /// (NCCL's `hostToDevRedOp`); 0 ranks count as 1.
            #[inline(always)]
            pub fn avg_scale(nranks: u32) -> Self {
                $t::from_f32((1.0 / f64::from(nranks.max(1))) as f32)
            }
        }
    };
}

half_arith!(F16, F16_INFINITY);
half_arith!(Bf16, BF16_INFINITY);

macro_rules! fp8_arith {
    ($t:ident) => {
        impl $t {
            /// `ncclSum`: in binary16, narrowed with saturation.
            #[inline(always)]
            pub fn sum(self, other: Self) -> Self {
                $t::from_f16(self.to_f16().sum(other.to_f16()))
            }
            /// `ncclProd`: in binary16, narrowed with saturation.
            #[inline(always)]
            pub fn prod(self, other: Self) -> Self {
                $t::from_f16(self.to_f16().prod(other.to_f16()))
            }
            /// `ncclMin` (`__hmin` on the widened values).
            #[inline(always)]
            pub fn minimum(self, other: Self) -> Self {
                $t::from_f16(self.to_f16().minimum(other.to_f16()))
            }
            /// `ncclMax` (`__hmax` on the widened values).
            #[inline(always)]
            pub fn maximum(self, other: Self) -> Self {
                $t::from_f16(self.to_f16().maximum(other.to_f16()))
            }
            /// `__nv_cvt_float_to_fp8(float(1.0 / nranks), __NV_SATFINITE, ...)`
            /// (`hostToDevRedOp`): rounded to `f32`, then once to fp8.
            #[inline(always)]
            pub fn avg_scale(nranks: u32) -> Self {
                $t::from_f32((1.0 / f64::from(nranks.max(1))) as f32)
            }
        }
    };
}

fp8_arith!(F8E4M3);
fp8_arith!(F8E5M2);
