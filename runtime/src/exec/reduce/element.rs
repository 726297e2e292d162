//! The element types NCCL reduces and the scalar meaning of each operation on them.
//!
//! Everything here is `#[inline(always)]` and branch-free so that the slice loops in
//! `kernel.rs` vectorize; the per-type slice hooks let binary16 use F16C where present.

use core::fmt::Debug;
use std::sync::OnceLock;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::Dtype;
use super::kernel;
use weft_core::element::{Bf16, F8E4M3, F8E5M2, F16};

/// Operation codes for the const generic of the slice kernels.
pub(super) const SUM: u8 = 0;
pub(super) const PROD: u8 = 1;
pub(super) const MIN: u8 = 2;
pub(super) const MAX: u8 = 3;

/// Bytes of one staging block of the misaligned path (see `mod.rs`).
pub(super) const STAGE_BYTES: usize = 2048;

mod sealed {
    pub trait Sealed {}
}

/// Divides by the rank count the way NCCL's `FuncSumPostDiv` does for integer `ncclAvg`:
/// the wrapped sum's magnitude is divided (truncating) and the sign put back.
#[derive(Clone, Copy, Debug)]
pub struct RankDivisor {
    divisor: u64,
    reciprocal: u64,
}

impl RankDivisor {
    /// `nranks` must be at least 1 (callers validate; 0 is treated as 1).
    pub fn new(nranks: u32) -> Self {
        let divisor = u64::from(nranks.max(1));
        RankDivisor {
            divisor,
            reciprocal: u64::MAX / divisor,
        }
    }

    /// `floor(x / divisor)`. The reciprocal estimate is at most one too small.
    #[inline(always)]
    pub fn divide(&self, x: u64) -> u64 {
        let q = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        let rest = x.wrapping_sub(q.wrapping_mul(self.divisor));
        if rest >= self.divisor { q + 1 } else { q }
    }
}

/// A type NCCL reduces: the twelve `ncclDataType_t` element types.
///
/// Sealed: implemented for `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, [`F16`], [`Bf16`], `f32`,
/// `f64`, [`F8E4M3`] and [`F8E5M2`].
pub trait Element:
    sealed::Sealed
    + Copy
    + Debug
    + Send
    + Sync
    + FromBytes
    + IntoBytes
    + KnownLayout
    + Immutable
    + 'static
{
    /// The NCCL data type of this element.
    const DTYPE: Dtype;
    /// A `STAGE_BYTES`-sized array of elements (the misaligned path's staging buffer).
    #[doc(hidden)]
    type Stage: AsRef<[Self]> + AsMut<[Self]> + IntoBytes + FromBytes + Immutable;

    /// `ncclSum`: wrapping for integers, IEEE addition for floats.
    fn sum(self, other: Self) -> Self;
    /// `ncclProd`: wrapping for integers, IEEE multiplication for floats.
    fn prod(self, other: Self) -> Self;
    /// `ncclMin`; for floats `fmin`: a NaN operand yields the other one, -0 < +0.
    fn minimum(self, other: Self) -> Self;
    /// `ncclMax`; for floats `fmax`: a NaN operand yields the other one, +0 > -0.
    fn maximum(self, other: Self) -> Self;
    /// The factor NCCL pre-multiplies each input with for float `ncclAvg`: `1.0 / nranks`
    /// computed in `f64`, rounded to `f32`, then to this type (as `hostToDevRedOp` does).
    /// Integers return 1 (they divide after summing instead, see [`Element::divide_ranks`]).
    fn avg_scale(nranks: u32) -> Self;
    /// Integer `ncclAvg`'s final step: the wrapped sum divided by the rank count, truncating
    /// toward zero. Floats return `self` (they pre-multiply instead).
    fn divide_ranks(self, divisor: &RankDivisor) -> Self;

    /// One of `SUM`, `PROD`, `MIN`, `MAX`.
    #[doc(hidden)]
    #[inline(always)]
    fn apply<const OP: u8>(self, other: Self) -> Self {
        match OP {
            SUM => self.sum(other),
            PROD => self.prod(other),
            MIN => self.minimum(other),
            _ => self.maximum(other),
        }
    }

    /// `dst[i] = pre(a[i]) OP b[i]` with `pre(x) = x * scale` when `PRE`.
    #[doc(hidden)]
    #[inline]
    fn binary<const OP: u8, const PRE: bool>(
        scale: Self,
        dst: &mut [Self],
        a: &[Self],
        b: &[Self],
    ) {
        kernel::binary(
            move |x: Self, y: Self| Self::apply::<OP>(if PRE { x.prod(scale) } else { x }, y),
            dst,
            a,
            b,
        );
    }

    /// `acc[i] = pre(src[i]) OP acc[i]` with `pre(x) = x * scale` when `PRE`.
    #[doc(hidden)]
    #[inline]
    fn binary_in_place<const OP: u8, const PRE: bool>(scale: Self, acc: &mut [Self], src: &[Self]) {
        kernel::binary_in_place(
            move |acc: Self, x: Self| Self::apply::<OP>(if PRE { x.prod(scale) } else { x }, acc),
            acc,
            src,
        );
    }

    /// `dst[i] = src[i] * scale`.
    #[doc(hidden)]
    #[inline]
    fn scale(scale: Self, dst: &mut [Self], src: &[Self]) {
        kernel::unary(move |x: Self| x.prod(scale), dst, src);
    }
}

macro_rules! integer_element {
    ($t:ty, $dtype:ident, $unsigned:ty, $signed:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            type Stage = [$t; STAGE_BYTES / core::mem::size_of::<$t>()];

            #[inline(always)]
            fn sum(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline(always)]
            fn prod(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            #[inline(always)]
            fn minimum(self, other: Self) -> Self {
                if other < self { other } else { self }
            }
            #[inline(always)]
            fn maximum(self, other: Self) -> Self {
                if other > self { other } else { self }
            }
            #[inline(always)]
            fn avg_scale(_nranks: u32) -> Self {
                1
            }
            #[inline(always)]
            fn divide_ranks(self, divisor: &RankDivisor) -> Self {
                let negative = $signed && (self as $unsigned) >> (<$unsigned>::BITS - 1) != 0;
                // The magnitude as the unsigned type of the same width: wrapping_neg of the
                // minimum value is itself, whose unsigned reading is the right magnitude.
                let magnitude = if negative { self.wrapping_neg() } else { self } as $unsigned;
                let quotient = divisor.divide(magnitude as u64) as $t;
                if negative {
                    quotient.wrapping_neg()
                } else {
                    quotient
                }
            }
        }
    };
}

integer_element!(i8, Int8, u8, true);
integer_element!(u8, Uint8, u8, false);
integer_element!(i32, Int32, u32, true);
integer_element!(u32, Uint32, u32, false);
integer_element!(i64, Int64, u64, true);
integer_element!(u64, Uint64, u64, false);

macro_rules! float_element {
    ($t:ty, $dtype:ident, $scale:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            type Stage = [$t; STAGE_BYTES / core::mem::size_of::<$t>()];

            #[inline(always)]
            fn sum(self, other: Self) -> Self {
                self + other
            }
            #[inline(always)]
            fn prod(self, other: Self) -> Self {
                self * other
            }
            #[inline(always)]
            fn minimum(self, other: Self) -> Self {
                let both = <$t>::from_bits(self.to_bits() | other.to_bits());
                let pick = if self < other { self } else { other };
                let pick = if self == other { both } else { pick };
                if other.is_nan() { self } else { pick }
            }
            #[inline(always)]
            fn maximum(self, other: Self) -> Self {
                let both = <$t>::from_bits(self.to_bits() & other.to_bits());
                let pick = if self > other { self } else { other };
                let pick = if self == other { both } else { pick };
                if other.is_nan() { self } else { pick }
            }
            #[inline(always)]
            fn avg_scale(nranks: u32) -> Self {
                let scale: fn(u32) -> $t = $scale;
                scale(nranks)
            }
            #[inline(always)]
            fn divide_ranks(self, _divisor: &RankDivisor) -> Self {
                self
            }
        }
    };
}

float_element!(f32, Float32, |n| (1.0 / f64::from(n.max(1))) as f32);
float_element!(f64, Float64, |n| 1.0 / f64::from(n.max(1)));

/// The scalar operations of the narrow float types: weft-core's (`weft_core::element`), the one
/// definition of NCCL's rounding that the GPU path and the test reference use too. Float
/// `Avg` pre-multiplies, so nothing is left to divide afterwards.
macro_rules! core_scalar_ops {
    ($t:ident) => {
        #[inline(always)]
        fn sum(self, other: Self) -> Self {
            $t::sum(self, other)
        }
        #[inline(always)]
        fn prod(self, other: Self) -> Self {
            $t::prod(self, other)
        }
        #[inline(always)]
        fn minimum(self, other: Self) -> Self {
            $t::minimum(self, other)
        }
        #[inline(always)]
        fn maximum(self, other: Self) -> Self {
            $t::maximum(self, other)
        }
        #[inline(always)]
        fn avg_scale(nranks: u32) -> Self {
            $t::avg_scale(nranks)
        }
        #[inline(always)]
        fn divide_ranks(self, _divisor: &RankDivisor) -> Self {
            self
        }
    };
}

macro_rules! narrow_element {
    ($t:ident, $dtype:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            type Stage = [$t; STAGE_BYTES / 2];

            core_scalar_ops!($t);

            narrow_element!(@slices $t);
        }
    };
    (@slices Bf16) => {};
    (@slices F16) => {
        #[inline]
        fn binary<const OP: u8, const PRE: bool>(scale: Self, dst: &mut [Self], a: &[Self], b: &[Self]) {
            #[cfg(target_arch = "x86_64")]
            if (OP == SUM || OP == PROD) && super::f16c::available() {
                // SAFETY: `available()` just confirmed AVX2 and F16C, the only precondition.
                unsafe { super::f16c::binary::<OP, PRE>(scale, dst, a, b) };
                return;
            }
            kernel::binary(
                move |x: Self, y: Self| Self::apply::<OP>(if PRE { x.prod(scale) } else { x }, y),
                dst,
                a,
                b,
            );
        }

        #[inline]
        fn binary_in_place<const OP: u8, const PRE: bool>(scale: Self, acc: &mut [Self], src: &[Self]) {
            #[cfg(target_arch = "x86_64")]
            if (OP == SUM || OP == PROD) && super::f16c::available() {
                // SAFETY: `available()` just confirmed AVX2 and F16C, the only precondition.
                unsafe { super::f16c::binary_in_place::<OP, PRE>(scale, acc, src) };
                return;
            }
            kernel::binary_in_place(
                move |acc: Self, x: Self| Self::apply::<OP>(if PRE { x.prod(scale) } else { x }, acc),
                acc,
                src,
            );
        }

        #[inline]
        fn scale(scale: Self, dst: &mut [Self], src: &[Self]) {
            #[cfg(target_arch = "x86_64")]
            if super::f16c::available() {
                // SAFETY: `available()` just confirmed AVX2 and F16C, the only precondition.
                unsafe { super::f16c::scale(scale, dst, src) };
                return;
            }
            kernel::unary(move |x: Self| x.prod(scale), dst, src);
        }
    };
}

narrow_element!(F16, Float16);
narrow_element!(Bf16, Bfloat16);

/// The fp8 slice loops' lookup: `OP`'s result for every operand pair.
trait PairTable: Sized {
    /// `OP`'s result for every operand pair, at index `a << 8 | b`.
    fn pair_table<const OP: u8>() -> &'static [u8; 1 << 16];
    /// One result from a table of [`pair_table`](Self::pair_table).
    fn look_up(table: &[u8; 1 << 16], a: Self, b: Self) -> Self;
}

/// The fp8 types compute as NCCL's device code does (`reduce_kernel.h`, see `fp8.rs`):
/// widen both operands to binary16, one binary16 operation, narrow with saturation. The
/// scalar methods are that definition; the slice loops look results up in a table of every
/// operand pair built from them (64 KiB per type and op, on first use), because the
/// conversions, exact but branchy, would make each element cost about 20 ns.
macro_rules! fp8_element {
    ($t:ident, $dtype:ident) => {
        impl PairTable for $t {
            fn pair_table<const OP: u8>() -> &'static [u8; 1 << 16] {
                static TABLES: [OnceLock<Box<[u8; 1 << 16]>>; 4] = [const { OnceLock::new() }; 4];
                let slot = &TABLES[usize::from(OP.min(MAX))];
                slot.get_or_init(|| {
                    let mut table = Box::new([0u8; 1 << 16]);
                    for (i, r) in table.iter_mut().enumerate() {
                        let (a, b) = ($t((i >> 8) as u8), $t(i as u8));
                        *r = a.apply::<OP>(b).0;
                    }
                    table
                })
            }

            #[inline(always)]
            fn look_up(table: &[u8; 1 << 16], a: Self, b: Self) -> Self {
                $t(table[usize::from(a.0) << 8 | usize::from(b.0)])
            }
        }

        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            type Stage = [$t; STAGE_BYTES];

            core_scalar_ops!($t);

            #[inline]
            fn binary<const OP: u8, const PRE: bool>(
                scale: Self,
                dst: &mut [Self],
                a: &[Self],
                b: &[Self],
            ) {
                let (op, prod) = ($t::pair_table::<OP>(), $t::pair_table::<PROD>());
                kernel::binary(
                    move |x: Self, y: Self| {
                        let x = if PRE { $t::look_up(prod, x, scale) } else { x };
                        $t::look_up(op, x, y)
                    },
                    dst,
                    a,
                    b,
                );
            }

            #[inline]
            fn binary_in_place<const OP: u8, const PRE: bool>(
                scale: Self,
                acc: &mut [Self],
                src: &[Self],
            ) {
                let (op, prod) = ($t::pair_table::<OP>(), $t::pair_table::<PROD>());
                kernel::binary_in_place(
                    move |acc: Self, x: Self| {
                        let x = if PRE { $t::look_up(prod, x, scale) } else { x };
                        $t::look_up(op, x, acc)
                    },
                    acc,
                    src,
                );
            }

            #[inline]
            fn scale(scale: Self, dst: &mut [Self], src: &[Self]) {
                let prod = $t::pair_table::<PROD>();
                kernel::unary(move |x: Self| $t::look_up(prod, x, scale), dst, src);
            }
        }
    };
}

fp8_element!(F8E4M3, Float8E4M3);
fp8_element!(F8E5M2, Float8E5M2);
