//! Binary16 sum, product and scaling with x86's F16C conversions (8 lanes per instruction).
//!
//! Same arithmetic as the portable path (widen exactly, one `f32` operation, round to
//! nearest-even, see `weft_core::element`), and the same bits: the portable conversions quiet NaNs
//! the way `vcvtph2ps` / `vcvtps2ph` do. Only the conversions differ in speed: the portable
//! ones take a dozen vector instructions per 8 lanes, these take one.

use std::arch::x86_64::{
    __m128i, __m256, _mm_loadu_si128, _mm_storeu_si128, _mm256_add_ps, _mm256_cvtph_ps,
    _mm256_cvtps_ph, _mm256_mul_ps, _mm256_set1_ps,
};

use super::element::{Element, SUM};
use weft_core::element::F16;

/// `vcvtps2ph` rounding immediate: round to nearest, ties to even (not MXCSR's mode).
const NEAREST_EVEN: i32 = 0;

/// Whether this CPU has F16C and AVX2 (cached by `is_x86_feature_detected!`).
#[inline(always)]
pub(super) fn available() -> bool {
    super::kernel::avx2() && std::arch::is_x86_feature_detected!("f16c")
}

#[inline(always)]
fn load8(chunk: &[F16]) -> __m128i {
    debug_assert_eq!(chunk.len(), 8);
    // SAFETY: callers pass chunks of exactly 8 `F16` (16 bytes), so the read stays inside the
    // slice; `loadu` has no alignment requirement; SSE2 is part of the x86-64 baseline.
    unsafe { _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()) }
}

#[inline(always)]
fn store8(chunk: &mut [F16], value: __m128i) {
    debug_assert_eq!(chunk.len(), 8);
    // SAFETY: callers pass chunks of exactly 8 `F16` (16 bytes), so the write stays inside the
    // slice, which is exclusively borrowed; `storeu` has no alignment requirement.
    unsafe { _mm_storeu_si128(chunk.as_mut_ptr().cast::<__m128i>(), value) }
}

/// `pre(x) OP y` on 8 lanes widened to `f32`; `pre` rounds `x * scale` to binary16 first, as
/// NCCL's pre-op produces a `half` before the sum.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn combine<const OP: u8, const PRE: bool>(x: __m128i, y: __m128i, scale: __m256) -> __m128i {
    let mut wide_x = _mm256_cvtph_ps(x);
    if PRE {
        wide_x = _mm256_cvtph_ps(_mm256_cvtps_ph::<NEAREST_EVEN>(_mm256_mul_ps(
            wide_x, scale,
        )));
    }
    let wide_y = _mm256_cvtph_ps(y);
    let result = if OP == SUM {
        _mm256_add_ps(wide_x, wide_y)
    } else {
        _mm256_mul_ps(wide_x, wide_y)
    };
    _mm256_cvtps_ph::<NEAREST_EVEN>(result)
}

#[inline(always)]
fn scalar<const OP: u8, const PRE: bool>(scale: F16, x: F16, y: F16) -> F16 {
    F16::apply::<OP>(if PRE { x.prod(scale) } else { x }, y)
}

/// `dst[i] = pre(a[i]) OP b[i]` for `OP` in {`SUM`, `PROD`}.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn binary<const OP: u8, const PRE: bool>(
    scale: F16,
    dst: &mut [F16],
    a: &[F16],
    b: &[F16],
) {
    let wide_scale = _mm256_set1_ps(scale.to_f32());
    let mut d8 = dst.chunks_exact_mut(8);
    let mut a8 = a.chunks_exact(8);
    let mut b8 = b.chunks_exact(8);
    for ((d, x), y) in (&mut d8).zip(&mut a8).zip(&mut b8) {
        store8(d, combine::<OP, PRE>(load8(x), load8(y), wide_scale));
    }
    let tails = d8
        .into_remainder()
        .iter_mut()
        .zip(a8.remainder())
        .zip(b8.remainder());
    for ((d, &x), &y) in tails {
        *d = scalar::<OP, PRE>(scale, x, y);
    }
}

/// `acc[i] = pre(src[i]) OP acc[i]` for `OP` in {`SUM`, `PROD`}.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn binary_in_place<const OP: u8, const PRE: bool>(
    scale: F16,
    acc: &mut [F16],
    src: &[F16],
) {
    let wide_scale = _mm256_set1_ps(scale.to_f32());
    let mut d8 = acc.chunks_exact_mut(8);
    let mut s8 = src.chunks_exact(8);
    for (d, x) in (&mut d8).zip(&mut s8) {
        let old = load8(d);
        store8(d, combine::<OP, PRE>(load8(x), old, wide_scale));
    }
    for (d, &x) in d8.into_remainder().iter_mut().zip(s8.remainder()) {
        *d = scalar::<OP, PRE>(scale, x, *d);
    }
}

/// `dst[i] = src[i] * scale`, rounded to binary16.
///
/// # Safety
/// The CPU must support AVX2 and F16C ([`available`]).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn scale(scale: F16, dst: &mut [F16], src: &[F16]) {
    let wide_scale = _mm256_set1_ps(scale.to_f32());
    let mut d8 = dst.chunks_exact_mut(8);
    let mut s8 = src.chunks_exact(8);
    for (d, x) in (&mut d8).zip(&mut s8) {
        let product = _mm256_mul_ps(_mm256_cvtph_ps(load8(x)), wide_scale);
        store8(d, _mm256_cvtps_ph::<NEAREST_EVEN>(product));
    }
    for (d, &x) in d8.into_remainder().iter_mut().zip(s8.remainder()) {
        *d = x.prod(scale);
    }
}
