//! Element-wise reduction of byte buffers for every NCCL data type and operator.
//!
//! A plain, portable version: operands are read with `from_ne_bytes` (user buffers need not
//! be aligned), 16-bit floats go through `f32`. The vectorised kernels of `exec::reduce`
//! replace it once they land; the executor only calls the three functions below.

use weft_core::abi::{DataType, RedOp};

/// Expands `$each!(type, size, binary fn)` for the element type and operator.
macro_rules! dispatch {
    ($dtype:expr, $op:expr, $each:ident) => {
        match $dtype {
            DataType::Int8 => int_ops!(i8, 1, $op, $each),
            DataType::Uint8 => int_ops!(u8, 1, $op, $each),
            DataType::Int32 => int_ops!(i32, 4, $op, $each),
            DataType::Uint32 => int_ops!(u32, 4, $op, $each),
            DataType::Int64 => int_ops!(i64, 8, $op, $each),
            DataType::Uint64 => int_ops!(u64, 8, $op, $each),
            DataType::Float32 => float_ops!(f32, 4, $op, $each),
            DataType::Float64 => float_ops!(f64, 8, $op, $each),
            DataType::Float16 => half_ops!(f16_to_f32, f32_to_f16, $op, $each),
            DataType::Bfloat16 => half_ops!(bf16_to_f32, f32_to_bf16, $op, $each),
        }
    };
}

macro_rules! int_ops {
    ($t:ty, $n:expr, $op:expr, $each:ident) => {
        match $op {
            RedOp::Sum | RedOp::Avg => $each!($t, $n, |x: $t, y: $t| x.wrapping_add(y)),
            RedOp::Prod => $each!($t, $n, |x: $t, y: $t| x.wrapping_mul(y)),
            RedOp::Max => $each!($t, $n, |x: $t, y: $t| x.max(y)),
            RedOp::Min => $each!($t, $n, |x: $t, y: $t| x.min(y)),
        }
    };
}

macro_rules! float_ops {
    ($t:ty, $n:expr, $op:expr, $each:ident) => {
        match $op {
            RedOp::Sum | RedOp::Avg => $each!($t, $n, |x: $t, y: $t| x + y),
            RedOp::Prod => $each!($t, $n, |x: $t, y: $t| x * y),
            // NaN-propagating, as CUDA's fmax/fmin are not but NCCL's results with NaN
            // inputs are unspecified anyway; `max`/`min` keep the number.
            RedOp::Max => $each!($t, $n, |x: $t, y: $t| x.max(y)),
            RedOp::Min => $each!($t, $n, |x: $t, y: $t| x.min(y)),
        }
    };
}

macro_rules! half_ops {
    ($to:ident, $from:ident, $op:expr, $each:ident) => {
        match $op {
            RedOp::Sum | RedOp::Avg => $each!(u16, 2, |x: u16, y: u16| $from($to(x) + $to(y))),
            RedOp::Prod => $each!(u16, 2, |x: u16, y: u16| $from($to(x) * $to(y))),
            RedOp::Max => $each!(u16, 2, |x: u16, y: u16| $from($to(x).max($to(y)))),
            RedOp::Min => $each!(u16, 2, |x: u16, y: u16| $from($to(x).min($to(y)))),
        }
    };
}

/// `dst[i] = op(a[i], b[i])` over `dst.len() / size` elements (`Avg` sums; see [`post_div`]).
/// The three slices have the same length, a multiple of the element size.
pub fn reduce(dtype: DataType, op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    macro_rules! each {
        ($t:ty, $n:expr, $f:expr) => {{
            let f = $f;
            for ((d, x), y) in dst
                .chunks_exact_mut($n)
                .zip(a.chunks_exact($n))
                .zip(b.chunks_exact($n))
            {
                let x = <$t>::from_ne_bytes(x.try_into().unwrap_or([0; $n]));
                let y = <$t>::from_ne_bytes(y.try_into().unwrap_or([0; $n]));
                d.copy_from_slice(&f(x, y).to_ne_bytes());
            }
        }};
    }
    dispatch!(dtype, op, each);
}

/// `dst[i] = op(a[i], dst[i])`: the same as [`reduce`] with `b` = `dst`, for in-place calls.
pub fn reduce_in_place(dtype: DataType, op: RedOp, dst: &mut [u8], a: &[u8]) {
    macro_rules! each {
        ($t:ty, $n:expr, $f:expr) => {{
            let f = $f;
            for (d, x) in dst.chunks_exact_mut($n).zip(a.chunks_exact($n)) {
                let x = <$t>::from_ne_bytes(x.try_into().unwrap_or([0; $n]));
                let y = <$t>::from_ne_bytes((&*d).try_into().unwrap_or([0; $n]));
                d.copy_from_slice(&f(x, y).to_ne_bytes());
            }
        }};
    }
    dispatch!(dtype, op, each);
}

/// `dst[i] /= n`: the final step of `Avg` (NCCL divides integer sums, and applies the
/// same division to floating sums here; the result differs from NCCL's pre-multiplication
/// by at most one rounding).
pub fn post_div(dtype: DataType, dst: &mut [u8], n: usize) {
    macro_rules! div {
        ($t:ty, $sz:expr, $f:expr) => {{
            let f = $f;
            for d in dst.chunks_exact_mut($sz) {
                let x = <$t>::from_ne_bytes((&*d).try_into().unwrap_or([0; $sz]));
                d.copy_from_slice(&f(x).to_ne_bytes());
            }
        }};
    }
    // Rank counts fit every type's division: a divisor that does not fit divides to 0.
    match dtype {
        DataType::Int8 => div!(i8, 1, |x: i8| x
            .checked_div(i8::try_from(n).unwrap_or(i8::MAX))
            .unwrap_or(0)),
        DataType::Uint8 => div!(u8, 1, |x: u8| x
            .checked_div(u8::try_from(n).unwrap_or(u8::MAX))
            .unwrap_or(0)),
        DataType::Int32 => div!(i32, 4, |x: i32| x
            .checked_div(i32::try_from(n).unwrap_or(i32::MAX))
            .unwrap_or(0)),
        DataType::Uint32 => div!(u32, 4, |x: u32| x
            .checked_div(u32::try_from(n).unwrap_or(u32::MAX))
            .unwrap_or(0)),
        DataType::Int64 => div!(i64, 8, |x: i64| x
            .checked_div(i64::try_from(n).unwrap_or(i64::MAX))
            .unwrap_or(0)),
        DataType::Uint64 => div!(u64, 8, |x: u64| x
            .checked_div(u64::try_from(n).unwrap_or(u64::MAX))
            .unwrap_or(0)),
        DataType::Float32 => div!(f32, 4, |x: f32| x / n as f32),
        DataType::Float64 => div!(f64, 8, |x: f64| x / n as f64),
        DataType::Float16 => div!(u16, 2, |x: u16| f32_to_f16(f16_to_f32(x) / n as f32)),
        DataType::Bfloat16 => div!(u16, 2, |x: u16| f32_to_bf16(bf16_to_f32(x) / n as f32)),
    }
}

/// IEEE binary16 bits to `f32` (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let sign = if negative { 0x8000_0000u32 } else { 0 };
    let bits = match exp {
        0 => {
            // Zero or subnormal: man * 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            return if negative { -v } else { v };
        }
        31 => sign | 0x7f80_0000 | (man << 13) | if man != 0 { 0x40_0000 } else { 0 },
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// `f32` to IEEE binary16 bits, rounded to nearest even (NaNs stay NaN, quieted).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 255 {
        return sign
            | 0x7c00
            | if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
    }
    let e = exp - 112;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        // A carry into the exponent is the correct rounding (up to infinity at the top).
        r += 1;
    }
    sign | r as u16
}

/// bfloat16 bits to `f32` (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `f32` to bfloat16 bits, rounded to nearest even (NaNs stay NaN, quieted).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn half_conversions_round_trip_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#x}");
            }
            let g = bf16_to_f32(h);
            if g.is_nan() {
                assert!(bf16_to_f32(f32_to_bf16(g)).is_nan());
            } else {
                assert_eq!(f32_to_bf16(g), h, "{h:#x}");
            }
        }
        // Halfway cases round to even.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(2f32.powi(-24)), 1);
        assert_eq!(f32_to_f16(2f32.powi(-26)), 0);
    }

    #[test]
    fn ops_on_each_type() {
        let a: Vec<u8> = [-3i32, 7, 100]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let b: Vec<u8> = [5i32, -7, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut d = vec![0u8; 12];
        let ints = |d: &[u8]| -> Vec<i32> {
            d.chunks_exact(4)
                .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        };
        reduce(DataType::Int32, RedOp::Sum, &mut d, &a, &b);
        assert_eq!(ints(&d), [2, 0, 103]);
        reduce(DataType::Int32, RedOp::Prod, &mut d, &a, &b);
        assert_eq!(ints(&d), [-15, -49, 300]);
        reduce(DataType::Int32, RedOp::Min, &mut d, &a, &b);
        assert_eq!(ints(&d), [-3, -7, 3]);
        let mut e = b.clone();
        reduce_in_place(DataType::Int32, RedOp::Max, &mut e, &a);
        assert_eq!(ints(&e), [5, 7, 100]);
        reduce(DataType::Int32, RedOp::Avg, &mut d, &a, &b);
        post_div(DataType::Int32, &mut d, 2);
        assert_eq!(ints(&d), [1, 0, 51]);
        let h = [
            f32_to_f16(1.5).to_ne_bytes(),
            f32_to_f16(-2.25).to_ne_bytes(),
        ]
        .concat();
        let mut out = vec![0u8; 4];
        reduce(DataType::Float16, RedOp::Prod, &mut out, &h, &h);
        let got: Vec<f32> = out
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_ne_bytes([c[0], c[1]])))
            .collect();
        assert_eq!(got, [2.25, 5.0625]);
    }
}
