//! The two 16-bit float formats NCCL reduces, as bit containers with exact conversions.
//!
//! Arithmetic on them goes through `f32`: widen both operands exactly, compute one `f32`
//! operation, round back to nearest-even. For `+`, `*` and `*scale` that is the correctly
//! rounded 16-bit result (what the GPU's `__hadd` / `__hmul` give): a product of two
//! 11-bit significands is exact in `f32`, and for sums `f32` has 24 >= 2 * 11 + 2 bits,
//! so the double rounding cannot differ from a single one.
//!
//! The conversions are written branch-free (selects only) so that LLVM vectorizes the
//! loops that use them. NaNs are quieted on both conversions, keeping sign and upper
//! payload, exactly as x86's F16C instructions do, so the software path and the F16C path
//! in `f16c.rs` give identical bits on every input.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// IEEE 754 binary16 (`ncclFloat16`, CUDA `__half`), stored as its bits.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16 (`ncclBfloat16`, CUDA `__nv_bfloat16`): the upper half of an `f32`, stored as its bits.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl F16 {
    /// The exact `f32` value (every binary16 value is representable); NaNs are quieted.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let magnitude = h & 0x7fff;
        // Move exponent and mantissa into f32 position and rebias 15 -> 127.
        let rebiased = (magnitude << 13).wrapping_add((127 - 15) << 23);
        let normal = f32::from_bits(rebiased);
        // Subnormal (exponent 0): the rebiased pattern reads as 2^-14 * (1 + m/1024);
        // subtracting 2^-14 leaves m * 2^-24 exactly, without an f32 subnormal operand.
        let subnormal =
            f32::from_bits(rebiased.wrapping_add(1 << 23)) - f32::from_bits((127 - 14) << 23);
        // Inf / NaN (exponent 31): exponent 255, quiet bit set on NaNs.
        // Signed compares: one instruction each on x86 (the value is below 2^15).
        let m = magnitude as i32;
        let quiet = if m > 0x7c00 { 0x0040_0000 } else { 0 };
        let special = rebiased.wrapping_add((128 - 16) << 23) | quiet;
        let bits = if m >= 0x7c00 {
            special
        } else if m < 0x0400 {
            subnormal.to_bits()
        } else {
            normal.to_bits()
        };
        f32::from_bits(bits | sign)
    }

    /// Rounds to nearest, ties to even; overflow gives infinity; NaNs are quieted.
    #[inline(always)]
    pub fn from_f32(value: f32) -> Self {
        let x = value.to_bits();
        let sign = (x >> 16) & 0x8000;
        let a = x & 0x7fff_ffff;
        // NaN: keep the top 10 payload bits, set the quiet bit.
        let nan = 0x7e00 | ((a >> 13) & 0x03ff);
        // Normal results: drop 13 mantissa bits with round-half-even; a carry out of the
        // mantissa correctly bumps the exponent.
        let odd = (a >> 13) & 1;
        let normal = a
            .wrapping_sub((127 - 15) << 23)
            .wrapping_add(0x0fff_u32.wrapping_add(odd))
            >> 13;
        // Subnormal results (|x| < 2^-14): adding 0.5 makes the FPU round |x| to a multiple
        // of 2^-24 (the ulp of numbers in [0.5, 1)) with the current (nearest-even) mode.
        let subnormal = (f32::from_bits(a) + 0.5)
            .to_bits()
            .wrapping_sub(0x3f00_0000);
        // `a` has no sign bit, so signed compares (one instruction on x86) order it correctly.
        let magnitude = a as i32;
        let bits = if value.is_nan() {
            nan
        } else if magnitude >= 0x477f_f000 {
            // 65520 and above round to infinity (65504 has an odd mantissa, so the tie goes up).
            0x7c00
        } else if magnitude < 0x3880_0000 {
            subnormal
        } else {
            normal
        };
        F16((bits | sign) as u16)
    }
}

impl Bf16 {
    /// The exact `f32` value (bfloat16 is a truncated `f32`).
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }

    /// Rounds to nearest, ties to even (subnormals included); NaNs are quieted.
    #[inline(always)]
    pub fn from_f32(value: f32) -> Self {
        let x = value.to_bits();
        let odd = (x >> 16) & 1;
        // Cannot overflow: the largest non-NaN pattern, -inf, is 0xff80_0000.
        let rounded = x.wrapping_add(0x7fff_u32.wrapping_add(odd)) >> 16;
        let nan = (x >> 16) | 0x0040;
        let bits = if value.is_nan() { nan } else { rounded };
        Bf16(bits as u16)
    }
}

/// The order key of a 16-bit sign-magnitude float: a signed integer that compares like the
/// value, with -0 below +0. NaNs get keys too; callers test for NaN separately.
#[inline(always)]
fn order_key(bits: u16) -> i16 {
    let x = bits as i16;
    x ^ ((x >> 15) & 0x7fff)
}

/// `fmin` on 16-bit float bits: a NaN operand yields the other operand, -0 < +0.
/// `magnitude_nan` is the smallest magnitude pattern above infinity (0x7c00 for binary16,
/// 0x7f80 for bfloat16).
#[inline(always)]
pub fn min16(a: u16, b: u16, infinity: u16) -> u16 {
    let pick = if order_key(a) < order_key(b) { a } else { b };
    if b & 0x7fff > infinity {
        a
    } else if a & 0x7fff > infinity {
        b
    } else {
        pick
    }
}

/// `fmax` on 16-bit float bits: a NaN operand yields the other operand, +0 > -0.
#[inline(always)]
pub fn max16(a: u16, b: u16, infinity: u16) -> u16 {
    let pick = if order_key(a) > order_key(b) { a } else { b };
    if b & 0x7fff > infinity {
        a
    } else if a & 0x7fff > infinity {
        b
    } else {
        pick
    }
}

/// Binary16 infinity's magnitude bits.
pub const F16_INFINITY: u16 = 0x7c00;
/// Bfloat16 infinity's magnitude bits.
pub const BF16_INFINITY: u16 = 0x7f80;
