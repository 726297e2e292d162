//! The two 8-bit float formats NCCL reduces (OCP FP8 E4M3 and E5M2), as bit containers
//! with exact conversions, and their arithmetic as NCCL's device code does it.
//!
//! NCCL never computes in fp8 (`src/device/reduce_kernel.h`, the `__CUDA_ARCH__ >= 900`
//! specializations for `__nv_fp8_e4m3` / `__nv_fp8_e5m2`): each operation widens both
//! operands exactly to binary16, runs the binary16 operation (`__hadd`, `__hmul`, `__hmin`,
//! `__hmax`) and narrows the result with the `__nv_fp8_*(__half)` constructor, which
//! converts with `__NV_SATFINITE` (`cuda_fp8.hpp`; on the GPU one
//! `cvt.rn.satfinite.{e4m3,e5m2}x2.f16x2`):
//!
//! - round to nearest, ties to even;
//! - saturating: a magnitude above the largest finite value, infinity included, becomes
//!   that value with its sign (448 for E4M3, 57344 for E5M2). So E5M2 results are never
//!   infinite: even `max(inf, 1)` is 57344, because the binary16 `inf` is narrowed;
//! - a NaN stays a NaN (`0x7f` here, as `cuda_fp8.hpp`'s host conversion gives; NaN
//!   payloads and signs are not part of the contract, as for the other float types).
//!
//! A sum or product is therefore rounded twice (to binary16, then to fp8), which can differ
//! from one rounding of the exact result; the functions here round the same two times.
//!
//! E4M3 has no infinities: exponent 15 with mantissa 7 (`0x7f`, `0xff`) is its only NaN,
//! and 448 its largest value. E5M2 is the upper byte of a binary16: infinities `0x7c`,
//! `0xfc`, NaNs above them.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::half::F16;

/// OCP FP8 E4M3 (`ncclFloat8e4m3`, CUDA `__nv_fp8_e4m3`), stored as its bits.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// OCP FP8 E5M2 (`ncclFloat8e5m2`, CUDA `__nv_fp8_e5m2`), stored as its bits.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

/// The shape of one fp8 format.
struct Format {
    /// Explicit mantissa bits.
    mantissa: u32,
    /// Exponent bias.
    bias: i32,
    /// The largest finite magnitude's code (what saturation gives).
    max_code: u8,
    /// Magnitude codes above this one are NaNs.
    nan_above: u8,
    /// Whether the code after `max_code` is infinity (IEEE style) rather than a NaN.
    has_infinity: bool,
}

const E4M3: Format = Format {
    mantissa: 3,
    bias: 7,
    max_code: 0x7e,
    nan_above: 0x7e,
    has_infinity: false,
};

const E5M2: Format = Format {
    mantissa: 2,
    bias: 15,
    max_code: 0x7b,
    nan_above: 0x7c,
    has_infinity: true,
};

/// The NaN the conversions produce.
const NAN_CODE: u8 = 0x7f;

/// The binary16 NaN that fp8 NaNs widen to (`cuda_fp8.hpp`'s canonical one).
const F16_NAN: u16 = 0x7fff;

impl Format {
    const fn is_nan(&self, code: u8) -> bool {
        code & 0x7f > self.nan_above
    }

    /// The exact binary16 bits of a non-NaN code's magnitude (every fp8 value is a binary16
    /// value).
    const fn f16_magnitude(&self, code: u8) -> u16 {
        if self.has_infinity && code & 0x7f == self.max_code.wrapping_add(1) {
            return 0x7c00;
        }
        let m = self.mantissa;
        let field = ((code & 0x7f) >> m) as i32;
        let mut significand = (code & ((1u8 << m).wrapping_sub(1))) as u32;
        // value = significand * 2^exponent, with the implicit bit for normals.
        let mut exponent = 1i32.wrapping_sub(self.bias).wrapping_sub(m as i32);
        if field != 0 {
            significand |= 1 << m;
            exponent = field.wrapping_sub(self.bias).wrapping_sub(m as i32);
        }
        if significand == 0 {
            return 0;
        }
        // Normalize to binary16's 11-bit significand [2^10, 2^11): exact (fewer bits).
        while significand < 1 << 10 {
            significand <<= 1;
            exponent = exponent.wrapping_sub(1);
        }
        // value = 1.f * 2^(exponent + 10); binary16's field is that exponent + 15.
        let f16_field = exponent.wrapping_add(10 + 15);
        if f16_field <= 0 {
            // A binary16 subnormal (E5M2's below 2^-14): significand * 2^-24, exactly
            // (the bits shifted out are zeros).
            return (significand >> 1i32.wrapping_sub(f16_field)) as u16;
        }
        (((f16_field as u32) << 10) | (significand & 0x3ff)) as u16
    }

    /// Rounds `value` to this format: nearest-even, saturating, NaN to [`NAN_CODE`].
    #[inline(always)]
    fn encode(&self, value: f32) -> u8 {
        let bits = value.to_bits();
        let sign = ((bits >> 24) & 0x80) as u8;
        let magnitude = f32::from_bits(bits & 0x7fff_ffff);
        if magnitude.is_nan() {
            return NAN_CODE;
        }
        let m = self.mantissa as i32;
        let min_exponent = 1i32.wrapping_sub(self.bias);
        // The binade of the value, or the subnormal range's (one fixed step below 2^min).
        let binade = ((magnitude.to_bits() >> 23) as i32)
            .wrapping_sub(127)
            .max(min_exponent);
        // The value in units of its fp8 step: exact (a power-of-two scaling into
        // [0, 2^(m+1))), then one round to nearest even. Infinity stays infinite.
        let steps = round_ties_even_small(magnitude * pow2(m.wrapping_sub(binade)));
        let code = if steps >= (1u32 << m.wrapping_add(1)) as f32 {
            // Rounded up into the next binade (or infinite): its first code.
            i64::from(binade.wrapping_add(1).wrapping_add(self.bias)) << m
        } else if binade == min_exponent {
            // Subnormal, or the smallest normal when it rounds up to 2^m steps.
            steps as i64
        } else {
            (i64::from(binade.wrapping_add(self.bias)) << m)
                .wrapping_add((steps as i64).wrapping_sub(1 << m))
        };
        let code = if code > i64::from(self.max_code) {
            self.max_code
        } else {
            code as u8
        };
        code | sign
    }
}

/// Rounds a non-negative `x` below 2^23 (or infinity) to an integer, ties to even: the
/// addition of 2^23 leaves no fraction bits, so the FPU rounds (nearest-even, its default
/// mode), and the subtraction is exact. `f32::round_ties_even` is not in `core`.
#[inline(always)]
fn round_ties_even_small(x: f32) -> f32 {
    const TWO_POW_23: f32 = 8_388_608.0;
    if x >= TWO_POW_23 {
        return x;
    }
    (x + TWO_POW_23) - TWO_POW_23
}

/// 2^k as `f32`, for the k the encoder needs (-126..=16: normal numbers).
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// The 256 binary16 values of a format's codes (NaNs: [`F16_NAN`], without sign).
/// Evaluated only at compile time (the two statics below): an index out of range would
/// fail the build, never a run.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const fn widen_table(format: &Format) -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut code = 0;
    while code < 256 {
        let c = code as u8;
        table[code] = if format.is_nan(c) {
            F16_NAN
        } else {
            format.f16_magnitude(c) | ((c as u16 & 0x80) << 8)
        };
        code += 1;
    }
    table
}

static E4M3_TO_F16: [u16; 256] = widen_table(&E4M3);
static E5M2_TO_F16: [u16; 256] = widen_table(&E5M2);

macro_rules! fp8_type {
    ($t:ident, $format:expr, $table:ident) => {
        impl $t {
            /// The exact binary16 value; NaNs become binary16's canonical NaN (`0x7fff`).
            #[inline(always)]
            pub fn to_f16(self) -> F16 {
                F16($table[usize::from(self.0)])
            }

            /// The exact `f32` value (NaNs: a quiet NaN).
            #[inline(always)]
            pub fn to_f32(self) -> f32 {
                self.to_f16().to_f32()
            }

            /// Rounds to nearest even, saturating to the largest finite value (infinities
            /// too), NaN to `0x7f`: `__nv_cvt_float_to_fp8(value, __NV_SATFINITE, ...)`.
            #[inline(always)]
            pub fn from_f32(value: f32) -> Self {
                $t($format.encode(value))
            }

            /// As [`from_f32`](Self::from_f32) from a binary16 value (exact in `f32`, so
            /// rounded once): the `__half` constructor NCCL narrows every result with.
            #[inline(always)]
            pub fn from_f16(value: F16) -> Self {
                Self::from_f32(value.to_f32())
            }

            /// Whether this is a NaN code.
            #[inline(always)]
            pub fn is_nan(self) -> bool {
                $format.is_nan(self.0)
            }
        }
    };
}

fp8_type!(F8E4M3, E4M3, E4M3_TO_F16);
fp8_type!(F8E5M2, E5M2, E5M2_TO_F16);
