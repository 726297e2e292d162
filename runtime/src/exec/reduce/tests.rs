//! Every dtype x op against a reference computed another way: integers in `i128` with an
//! explicit wrap, floats in `f64` with an independent decoder and nearest-even encoder for
//! the 16-bit formats, and for fp8 a search for the nearest of the format's values (with
//! NCCL's binary16 step and saturation spelled out in `fp8_arith`). Random data, odd lengths, every slice at every offset 0..8, both the
//! portable loops and the AVX2/F16C ones, guard bytes around every destination.

use super::kernel::PORTABLE_ONLY;
use super::*;

/// xorshift64*: small, seeded, good enough to spread bits.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const GUARD: u8 = 0xa5;

fn width(dtype: Dtype) -> u32 {
    (dtype.size_of_elem() * 8) as u32
}

fn mask(dtype: Dtype) -> u64 {
    u64::MAX >> (64 - width(dtype))
}

fn signed(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Int8 | Dtype::Int32 | Dtype::Int64)
}

/// Two's-complement reading of `bits` as the integer type.
fn int_value(dtype: Dtype, bits: u64) -> i128 {
    let w = width(dtype);
    if signed(dtype) && (bits >> (w - 1)) & 1 == 1 {
        i128::from(bits) - (1i128 << w)
    } else {
        i128::from(bits)
    }
}

fn wrap(dtype: Dtype, value: i128) -> u64 {
    (value.rem_euclid(1i128 << width(dtype))) as u64
}

/// (mantissa bits, exponent bits) of the 16- and 8-bit formats.
fn narrow_format(dtype: Dtype) -> (u32, u32) {
    match dtype {
        Dtype::Float16 => (10, 5),
        Dtype::Float8E4M3 => (3, 4),
        Dtype::Float8E5M2 => (2, 5),
        _ => (7, 8),
    }
}

/// The largest finite fp8 magnitude, and its code.
fn fp8_max(dtype: Dtype) -> (f64, u64) {
    match dtype {
        Dtype::Float8E4M3 => (448.0, 0x7e),
        _ => (57344.0, 0x7b),
    }
}

fn pow2(k: i32) -> f64 {
    // Exact for the exponents used here (well inside f64's normal range).
    2f64.powi(k)
}

/// Independent decoder: the value of a float's bits as `f64` (NaN for NaNs).
fn float_value(dtype: Dtype, bits: u64) -> f64 {
    match dtype {
        Dtype::Float32 => f64::from(f32::from_bits(bits as u32)),
        Dtype::Float64 => f64::from_bits(bits),
        _ => {
            let (mant, exp_bits) = narrow_format(dtype);
            let bias = (1i32 << (exp_bits - 1)) - 1;
            let m = bits & ((1 << mant) - 1);
            let e = ((bits >> mant) & ((1 << exp_bits) - 1)) as i32;
            let sign = if (bits >> (mant + exp_bits)) & 1 == 1 {
                -1.0
            } else {
                1.0
            };
            // E4M3 spends its top exponent on values: only mantissa 7 there is NaN.
            if dtype == Dtype::Float8E4M3 && e == 15 && m == 7 {
                return f64::NAN;
            }
            if e == (1 << exp_bits) - 1 && dtype != Dtype::Float8E4M3 {
                return if m == 0 {
                    sign * f64::INFINITY
                } else {
                    f64::NAN
                };
            }
            let magnitude = if e == 0 {
                m as f64 * pow2(1 - bias - mant as i32)
            } else {
                (m + (1 << mant)) as f64 * pow2(e - bias - mant as i32)
            };
            sign * magnitude
        }
    }
}

/// Independent fp8 encoder: the nearest of the format's finite values by search, ties to
/// the even code, magnitudes past the largest value (infinity too) saturating to it,
/// as `__NV_SATFINITE` does. `None` for NaN.
fn fp8_nearest(dtype: Dtype, x: f64) -> Option<u64> {
    if x.is_nan() {
        return None;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let (max, max_code) = fp8_max(dtype);
    let ax = x.abs();
    if ax >= max {
        return Some(sign | max_code);
    }
    let mut best = 0u64;
    for code in 1..=max_code {
        let d = (float_value(dtype, code) - ax).abs();
        let best_d = (float_value(dtype, best) - ax).abs();
        if d < best_d || (d == best_d && code & 1 == 0) {
            best = code;
        }
    }
    Some(sign | best)
}

/// What an arithmetic result `x` (exact in `f64`) becomes in the type. For fp8 that is
/// NCCL's path: the binary16 operation rounds `x` to binary16 (overflowing to infinity),
/// then the conversion rounds that to fp8, saturating.
fn arith_bits(dtype: Dtype, x: f64) -> Option<u64> {
    if dtype.is_fp8() {
        let half = float_value(Dtype::Float16, float_bits(Dtype::Float16, x)?);
        return fp8_nearest(dtype, half);
    }
    float_bits(dtype, x)
}

/// Independent encoder: nearest-even rounding of an `f64` into the float type's bits (fp8:
/// saturating). `None` for NaN (NaN payloads are not compared).
fn float_bits(dtype: Dtype, x: f64) -> Option<u64> {
    if x.is_nan() {
        return None;
    }
    match dtype {
        Dtype::Float32 => Some(u64::from((x as f32).to_bits())),
        Dtype::Float64 => Some(x.to_bits()),
        Dtype::Float8E4M3 | Dtype::Float8E5M2 => fp8_nearest(dtype, x),
        _ => {
            let (mant, exp_bits) = narrow_format(dtype);
            let bias = (1i32 << (exp_bits - 1)) - 1;
            let emin = 1 - bias;
            let sign = if x.is_sign_negative() {
                1u64 << (mant + exp_bits)
            } else {
                0
            };
            let inf = (((1u64 << exp_bits) - 1) << mant) | sign;
            let ax = x.abs();
            if ax.is_infinite() {
                return Some(inf);
            }
            if ax == 0.0 {
                return Some(sign);
            }
            let e = (((ax.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
            let q = (ax / pow2(e - mant as i32)).round_ties_even() as u64;
            let (e, q) = if q == 1 << (mant + 1) {
                (e + 1, q >> 1)
            } else {
                (e, q)
            };
            if q < 1 << mant {
                return Some(sign | q); // subnormal (e == emin)
            }
            let field = (e + bias) as u64;
            if field >= (1 << exp_bits) - 1 {
                return Some(inf);
            }
            Some(sign | (field << mant) | (q - (1 << mant)))
        }
    }
}

fn is_nan_bits(dtype: Dtype, bits: u64) -> bool {
    dtype.is_float() && float_value(dtype, bits).is_nan()
}

/// What an element must be: exact bits, or any NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    Bits(u64),
    Nan,
}

/// An arithmetic result `x` as the type holds it (see [`arith_bits`]).
fn want_float(dtype: Dtype, x: f64) -> Want {
    arith_bits(dtype, x).map_or(Want::Nan, Want::Bits)
}

/// What an fp8 min/max result becomes: NCCL narrows the binary16 `__hmin`/`__hmax` result
/// with saturation, so an E5M2 infinity comes out as +-57344.
fn fp8_saturate(dtype: Dtype, want: Want) -> Want {
    match want {
        Want::Bits(bits) if dtype.is_fp8() => want_float(dtype, float_value(dtype, bits)),
        w => w,
    }
}

/// fmin/fmax reference by case analysis.
fn ref_minmax(dtype: Dtype, is_min: bool, a: u64, b: u64) -> Want {
    let (an, bn) = (is_nan_bits(dtype, a), is_nan_bits(dtype, b));
    match (an, bn) {
        (true, true) => return Want::Nan,
        (true, false) => return Want::Bits(b),
        (false, true) => return Want::Bits(a),
        _ => {}
    }
    let (va, vb) = (float_value(dtype, a), float_value(dtype, b));
    if va == vb {
        // Equal values: the same bits, or +0 and -0.
        let a_negative = a >> (width(dtype) - 1) == 1;
        let pick_a = if is_min { a_negative } else { !a_negative };
        return Want::Bits(if pick_a { a } else { b });
    }
    let a_smaller = va < vb;
    Want::Bits(if a_smaller == is_min { a } else { b })
}

/// `a OP b` for one element, computed independently of the kernels.
fn reference(dtype: Dtype, op: Op, a: u64, b: u64) -> Want {
    if !dtype.is_float() {
        let (va, vb) = (int_value(dtype, a), int_value(dtype, b));
        return Want::Bits(match op {
            Op::Sum | Op::Avg => wrap(dtype, va + vb),
            Op::Prod => wrap(dtype, va.wrapping_mul(vb)),
            Op::Min => wrap(dtype, va.min(vb)),
            Op::Max => wrap(dtype, va.max(vb)),
        });
    }
    let (va, vb) = (float_value(dtype, a), float_value(dtype, b));
    match op {
        Op::Sum | Op::Avg => want_float(dtype, va + vb),
        Op::Prod => want_float(dtype, va * vb),
        Op::Min => fp8_saturate(dtype, ref_minmax(dtype, true, a, b)),
        Op::Max => fp8_saturate(dtype, ref_minmax(dtype, false, a, b)),
    }
}

const SPECIAL_F64: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    3.0,
    -7.25,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1e-300,
    -1e300,
    65504.0,
    6e-8,
];

/// One random element's bits: a mix of small values, specials and raw bits.
fn random_bits(dtype: Dtype, rng: &mut Rng) -> u64 {
    let raw = rng.next() & mask(dtype);
    let choice = rng.below(10);
    if !dtype.is_float() {
        return match choice {
            0..=4 => raw,
            5..=7 => wrap(dtype, i128::from(rng.below(11) as i64 - 5)),
            8 => wrap(dtype, int_value(dtype, mask(dtype) >> 1)), // MAX
            _ => wrap(dtype, int_value(dtype, (mask(dtype) >> 1) + 1)), // MIN (or 2^(w-1))
        };
    }
    match choice {
        0..=2 => raw,
        3..=5 if dtype.is_fp8() => {
            // A value of the format's range (a few of them saturate).
            let v = (rng.below(1 << 10) as f64 - (1 << 9) as f64) / pow2(rng.below(20) as i32);
            float_bits(dtype, v).unwrap_or(0)
        }
        3..=5 => {
            // A moderate value with a few significant bits, so sums round in both directions.
            let v = (rng.below(1 << 20) as f64 - (1 << 19) as f64) / pow2(rng.below(24) as i32);
            float_bits(dtype, v).unwrap_or(0)
        }
        6 if dtype == Dtype::Float64 || dtype == Dtype::Float32 => raw,
        6 => {
            // A subnormal of the 16-bit format.
            let (mant, exp_bits) = narrow_format(dtype);
            (rng.below(1 << mant)) | ((rng.below(2)) << (mant + exp_bits))
        }
        7 if dtype == Dtype::Float8E4M3 => 0x7f | (rng.below(2) << 7),
        7 if dtype == Dtype::Float8E5M2 => 0x7c | (1 + rng.below(3)) | (rng.below(2) << 7),
        7 => {
            // A NaN with a random payload (quiet or signaling).
            let nan_pattern = float_bits(dtype, f64::INFINITY).unwrap_or(0);
            let payload =
                (rng.next() & mask(dtype) & !(nan_pattern | (1 << (width(dtype) - 1)))).max(1);
            nan_pattern | payload | ((rng.below(2)) << (width(dtype) - 1))
        }
        _ => {
            let v = SPECIAL_F64[rng.below(SPECIAL_F64.len() as u64) as usize];
            float_bits(dtype, v).unwrap_or_else(|| {
                float_bits(dtype, f64::INFINITY).unwrap_or(0) | (1 << (width(dtype) - 2))
            })
        }
    }
}

fn put(dtype: Dtype, buf: &mut [u8], index: usize, bits: u64) {
    let size = dtype.size_of_elem();
    let bytes = bits.to_le_bytes();
    buf[index * size..(index + 1) * size].copy_from_slice(&bytes[..size]);
}

fn get(dtype: Dtype, buf: &[u8], index: usize) -> u64 {
    let size = dtype.size_of_elem();
    let mut bytes = [0u8; 8];
    bytes[..size].copy_from_slice(&buf[index * size..(index + 1) * size]);
    u64::from_le_bytes(bytes)
}

fn check_element(dtype: Dtype, want: Want, got: u64, what: &dyn Fn() -> String) {
    match want {
        Want::Nan => assert!(
            is_nan_bits(dtype, got),
            "{}: want NaN, got {got:#x}",
            what()
        ),
        Want::Bits(bits) => assert_eq!(got, bits, "{}: want {bits:#x}, got {got:#x}", what()),
    }
}

/// A buffer with `offset` guard bytes before and 8 after the `len` bytes of payload.
struct Placed {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Placed {
    fn new(offset: usize, len: usize) -> Self {
        // `offset` is counted from the first 8-byte-aligned byte of the storage.
        let storage = vec![GUARD; offset + len + 16];
        let shift = storage.as_ptr().align_offset(8);
        Placed {
            storage,
            offset: shift + offset,
            len,
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
    fn assert_guards(&self, what: &str) {
        assert!(
            self.storage[..self.offset].iter().all(|&b| b == GUARD),
            "{what}: wrote before"
        );
        assert!(
            self.storage[self.offset + self.len..]
                .iter()
                .all(|&b| b == GUARD),
            "{what}: wrote after"
        );
    }
}

fn filled(dtype: Dtype, offset: usize, count: usize, rng: &mut Rng) -> (Placed, Vec<u64>) {
    let mut p = Placed::new(offset, count * dtype.size_of_elem());
    let values: Vec<u64> = (0..count).map(|_| random_bits(dtype, rng)).collect();
    for (i, &v) in values.iter().enumerate() {
        put(dtype, p.bytes_mut(), i, v);
    }
    (p, values)
}

fn both_paths(mut f: impl FnMut(&str)) {
    PORTABLE_ONLY.with(|p| p.set(true));
    f("portable");
    PORTABLE_ONLY.with(|p| p.set(false));
    f("accelerated");
}

/// One `reduce` and one `reduce_in_place` of `count` elements at the given offsets.
fn check_binary(
    dtype: Dtype,
    op: Op,
    count: usize,
    offsets: [usize; 3],
    rng: &mut Rng,
    path: &str,
) {
    let (a, va) = filled(dtype, offsets[1], count, rng);
    let (b, vb) = filled(dtype, offsets[2], count, rng);
    let mut d = Placed::new(offsets[0], count * dtype.size_of_elem());
    reduce(dtype, op, d.bytes_mut(), a.bytes(), b.bytes()).unwrap();
    d.assert_guards("reduce");
    for i in 0..count {
        let want = reference(dtype, op, va[i], vb[i]);
        check_element(dtype, want, get(dtype, d.bytes(), i), &|| {
            format!(
                "{path} reduce {dtype} {op} n={count} offsets={offsets:?} [{i}] {:#x} {:#x}",
                va[i], vb[i]
            )
        });
    }
    // In place: acc (at the destination's offset) = b ⊕ acc.
    let mut acc = Placed::new(offsets[0], count * dtype.size_of_elem());
    acc.bytes_mut().copy_from_slice(a.bytes());
    reduce_in_place(dtype, op, acc.bytes_mut(), b.bytes()).unwrap();
    acc.assert_guards("reduce_in_place");
    for i in 0..count {
        let want = reference(dtype, op, vb[i], va[i]);
        check_element(dtype, want, get(dtype, acc.bytes(), i), &|| {
            format!("{path} in place {dtype} {op} n={count} offsets={offsets:?} [{i}]")
        });
    }
}

/// Offsets in which every slice takes every value 0..8, aligned and not, mixed.
fn offset_sets() -> Vec<[usize; 3]> {
    let mut sets: Vec<[usize; 3]> = (0..8).map(|o| [o, (o + 3) % 8, (o + 5) % 8]).collect();
    sets.extend((0..8).map(|o| [o, o, o]));
    sets.push([0, 1, 0]);
    sets.push([0, 0, 2]);
    sets
}

#[test]
fn every_dtype_and_op_matches_reference_small_lengths_all_offsets() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    both_paths(|path| {
        for &dtype in Dtype::ALL {
            for &op in Op::ALL {
                for count in 0..=67 {
                    for offsets in offset_sets() {
                        check_binary(dtype, op, count, offsets, &mut rng, path);
                    }
                }
            }
        }
    });
}

#[test]
fn every_dtype_and_op_matches_reference_large_odd_lengths() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    both_paths(|path| {
        for &dtype in Dtype::ALL {
            for &op in Op::ALL {
                for count in [1031, 4099, 20_011] {
                    for offsets in [[0, 0, 0], [3, 0, 5], [1, 1, 1], [0, 7, 0]] {
                        check_binary(dtype, op, count, offsets, &mut rng, path);
                    }
                }
            }
        }
    });
}

#[test]
fn float_min_max_special_cases() {
    let nan32 = f32::NAN.to_bits();
    let cases: [(f32, f32, f32, f32); 6] = [
        // (a, b, min, max)
        (1.0, 2.0, 1.0, 2.0),
        (-0.0, 0.0, -0.0, 0.0),
        (0.0, -0.0, -0.0, 0.0),
        (f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, 3.0),
        (f32::from_bits(nan32), 5.0, 5.0, 5.0),
        (-5.0, f32::from_bits(nan32 | 1), -5.0, -5.0),
    ];
    both_paths(|path| {
        for (a, b, min, max) in cases {
            for (op, want) in [(Op::Min, min), (Op::Max, max)] {
                let mut d = [0.0f32; 1];
                reduce_typed(op, &mut d, &[a], &[b]).unwrap();
                assert_eq!(d[0].to_bits(), want.to_bits(), "{path} {op}({a}, {b})");
            }
        }
        let mut d = [0.0f64; 1];
        reduce_typed(Op::Max, &mut d, &[f64::NAN], &[f64::NAN]).unwrap();
        assert!(d[0].is_nan(), "{path} max(NaN, NaN)");
        // 16-bit: min(NaN, 1) = 1, max(-0, +0) = +0, min(-inf, x) = -inf.
        let one = F16::from_f32(1.0);
        let mut h = [F16(0); 3];
        reduce_typed(
            Op::Min,
            &mut h,
            &[F16(0x7e00), F16(0x8000), F16(0xfc00)],
            &[one, F16(0), one],
        )
        .unwrap();
        assert_eq!([h[0].0, h[1].0, h[2].0], [one.0, 0x8000, 0xfc00], "{path}");
        reduce_typed(
            Op::Max,
            &mut h,
            &[F16(0x7e00), F16(0x8000), F16(0xfc00)],
            &[one, F16(0), one],
        )
        .unwrap();
        assert_eq!([h[0].0, h[1].0, h[2].0], [one.0, 0x0000, one.0], "{path}");
        // Sums: inf + -inf is NaN, overflow rounds to inf, 65504 + 8 rounds down.
        let mut s = [F16(0); 3];
        let a = [F16(0x7c00), F16::from_f32(65504.0), F16::from_f32(65504.0)];
        let b = [F16(0xfc00), F16::from_f32(16.0), F16::from_f32(8.0)];
        reduce_typed(Op::Sum, &mut s, &a, &b).unwrap();
        assert!(s[0].to_f32().is_nan(), "{path}");
        assert_eq!(s[1].0, 0x7c00, "{path} 65504 + 16 rounds to inf");
        assert_eq!(
            s[2].0,
            F16::from_f32(65504.0).0,
            "{path} 65504 + 8 ties to even"
        );
        let mut bf = [Bf16(0); 1];
        reduce_typed(Op::Sum, &mut bf, &[Bf16(0x7f80)], &[Bf16(0xff80)]).unwrap();
        assert!(bf[0].to_f32().is_nan(), "{path} bf16 inf + -inf");
    });
}

/// Ring order as the executor runs it: the first rank's input enters with `copy_input`,
/// each next rank's with `reduce_input`, and the last result is `finish`ed.
fn ring_avg(reduction: &Reduction, inputs: &[Placed], offset: usize) -> Placed {
    let len = inputs[0].len;
    let mut acc = Placed::new(offset, len);
    reduction
        .copy_input(acc.bytes_mut(), inputs[0].bytes())
        .unwrap();
    for (r, input) in inputs.iter().enumerate().skip(1) {
        if r % 2 == 1 {
            let mut next = Placed::new((offset + r) % 8, len);
            reduction
                .reduce_input(next.bytes_mut(), input.bytes(), acc.bytes())
                .unwrap();
            next.assert_guards("reduce_input");
            acc = next;
        } else {
            reduction
                .reduce_input_in_place(acc.bytes_mut(), input.bytes())
                .unwrap();
        }
    }
    reduction.finish(acc.bytes_mut()).unwrap();
    acc.assert_guards("avg");
    acc
}

#[test]
fn avg_matches_ncclx_premul_and_postdiv() {
    let mut rng = Rng(0x0bad_cafe_f00d_1234);
    both_paths(|path| {
        for &dtype in Dtype::ALL {
            for nranks in [1u32, 2, 3, 4, 5, 7, 8, 13] {
                let reduction = Reduction::new(dtype, Op::Avg, nranks).unwrap();
                assert_eq!(reduction.has_pre_op(), dtype.is_float());
                assert_eq!(reduction.has_post_op(), !dtype.is_float());
                for count in [0usize, 1, 7, 33, 67, 1031] {
                    let offset = rng.below(8) as usize;
                    let (inputs, values): (Vec<Placed>, Vec<Vec<u64>>) = (0..nranks)
                        .map(|_| filled(dtype, rng.below(8) as usize, count, &mut rng))
                        .unzip();
                    let out = ring_avg(&reduction, &inputs, offset);
                    for i in 0..count {
                        let want = if dtype.is_float() {
                            // scale = float(1.0 / n), then rounded to the type.
                            let scale32 = f64::from((1.0 / f64::from(nranks)) as f32);
                            let scale = match dtype {
                                Dtype::Float64 => 1.0 / f64::from(nranks),
                                _ => float_value(dtype, float_bits(dtype, scale32).unwrap()),
                            };
                            let pre = |x: u64| {
                                arith_bits(dtype, float_value(dtype, x) * scale)
                                    .map_or(f64::NAN, |b| float_value(dtype, b))
                            };
                            let mut acc = pre(values[0][i]);
                            for v in values.iter().skip(1) {
                                acc = arith_bits(dtype, pre(v[i]) + acc)
                                    .map_or(f64::NAN, |b| float_value(dtype, b));
                            }
                            want_float(dtype, acc)
                        } else {
                            let sum: i128 = values.iter().map(|v| int_value(dtype, v[i])).sum();
                            let wrapped = int_value(dtype, wrap(dtype, sum));
                            Want::Bits(wrap(dtype, wrapped / i128::from(nranks)))
                        };
                        check_element(dtype, want, get(dtype, out.bytes(), i), &|| {
                            format!("{path} avg {dtype} nranks={nranks} n={count} [{i}]")
                        });
                    }
                }
            }
        }
    });
}

#[test]
fn integer_avg_divides_extremes_exactly() {
    // The reciprocal division against plain i128 division, at the edges of every width.
    for nranks in [1u32, 2, 3, 7, 255, 256, 1000, 65_537, u32::MAX] {
        let divisor = RankDivisor::new(nranks);
        for x in [
            0u64,
            1,
            2,
            254,
            255,
            256,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
            1 << 63,
        ] {
            assert_eq!(divisor.divide(x), x / u64::from(nranks), "{x} / {nranks}");
        }
        for dtype in [
            Dtype::Int8,
            Dtype::Uint8,
            Dtype::Int32,
            Dtype::Uint32,
            Dtype::Int64,
            Dtype::Uint64,
        ] {
            let m = mask(dtype);
            let mut buf = Vec::new();
            let edges = [0, 1, m, m >> 1, (m >> 1) + 1, m - 1, 5, m - 4];
            for &e in &edges {
                buf.extend_from_slice(&e.to_le_bytes()[..dtype.size_of_elem()]);
            }
            finish_avg(dtype, &mut buf, nranks).unwrap();
            for (i, &e) in edges.iter().enumerate() {
                let want = wrap(dtype, int_value(dtype, e) / i128::from(nranks));
                assert_eq!(get(dtype, &buf, i), want, "{dtype} {e:#x} / {nranks}");
            }
        }
    }
}

#[test]
fn f16_conversions_match_reference_exhaustively() {
    for bits in 0..=u16::MAX {
        let value = F16(bits).to_f32();
        let reference = float_value(Dtype::Float16, u64::from(bits));
        if reference.is_nan() {
            assert!(value.is_nan(), "{bits:#x}");
            // Quieted, sign and payload kept, as vcvtph2ps does.
            let want =
                (u32::from(bits & 0x8000) << 16) | 0x7fc0_0000 | (u32::from(bits & 0x3ff) << 13);
            assert_eq!(value.to_bits(), want, "{bits:#x}");
        } else {
            assert_eq!(f64::from(value), reference, "{bits:#x}");
            assert_eq!(value.is_sign_negative(), bits & 0x8000 != 0, "{bits:#x}");
            // Round trip.
            assert_eq!(F16::from_f32(value).0, bits, "{bits:#x}");
        }
        let bvalue = Bf16(bits).to_f32();
        let breference = float_value(Dtype::Bfloat16, u64::from(bits));
        if breference.is_nan() {
            assert!(bvalue.is_nan());
        } else {
            assert_eq!(f64::from(bvalue), breference, "bf16 {bits:#x}");
            assert_eq!(Bf16::from_f32(bvalue).0, bits, "bf16 {bits:#x}");
        }
    }
}

/// f32 inputs around every 16-bit rounding boundary, plus random bits.
fn rounding_probe_f32s(dtype: Dtype) -> Vec<u32> {
    let mut probes = Vec::new();
    for bits in 0..=u16::MAX {
        let lo = float_value(dtype, u64::from(bits));
        let hi = float_value(dtype, u64::from(bits.wrapping_add(1)));
        if lo.is_finite() && hi.is_finite() && lo.is_sign_negative() == hi.is_sign_negative() {
            let mid = ((lo + hi) / 2.0) as f32; // exact: a 16-bit midpoint fits in f32
            for d in [-2i32, -1, 0, 1, 2] {
                probes.push(mid.to_bits().wrapping_add_signed(d));
            }
        }
    }
    let mut rng = Rng(77);
    probes.extend((0..200_000).map(|_| rng.next() as u32));
    probes.extend([
        0x7f80_0000,
        0xff80_0000,
        0x7f80_0001,
        0x7fff_ffff,
        0xffc0_0000,
        0x477f_f000,
        0x477f_efff,
        1,
        0x8000_0001,
        0x3880_0000,
        0x387f_ffff,
    ]);
    probes
}

#[test]
fn narrow_rounding_matches_reference() {
    for dtype in [Dtype::Float16, Dtype::Bfloat16] {
        for bits in rounding_probe_f32s(dtype) {
            let x = f32::from_bits(bits);
            let got = match dtype {
                Dtype::Float16 => u64::from(F16::from_f32(x).0),
                _ => u64::from(Bf16::from_f32(x).0),
            };
            check_element(dtype, want_float(dtype, f64::from(x)), got, &|| {
                format!("{dtype} from_f32({x:e} = {bits:#x})")
            });
            if x.is_nan() {
                // Quieted, sign kept.
                let sign = u64::from(bits >> 31) << 15;
                assert_eq!(got & 0x8000, sign, "{dtype} NaN sign {bits:#x}");
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn f16c_conversions_agree_with_portable_bits() {
    if !super::f16c::available() {
        return;
    }
    // Through the kernels: x * 1 with the F16C path vs the portable path, on every binary16
    // value (exercises vcvtph2ps, vcvtps2ph and the portable pair, NaNs included).
    let all: Vec<F16> = (0..=u16::MAX).map(F16).collect();
    let ones = vec![F16::from_f32(1.0); all.len()];
    let run = |portable: bool| {
        PORTABLE_ONLY.with(|p| p.set(portable));
        let mut out = vec![F16(0); all.len()];
        reduce_typed(Op::Prod, &mut out, &all, &ones).unwrap();
        PORTABLE_ONLY.with(|p| p.set(false));
        out.iter().map(|h| h.0).collect::<Vec<u16>>()
    };
    assert_eq!(run(true), run(false));
    // Rounding of sums: pairs whose f32 sums land on and around every rounding boundary.
    let mut rng = Rng(5);
    let a: Vec<F16> = (0..100_000).map(|_| F16(rng.next() as u16)).collect();
    let b: Vec<F16> = (0..100_000).map(|_| F16(rng.next() as u16)).collect();
    let sum = |portable: bool| {
        PORTABLE_ONLY.with(|p| p.set(portable));
        let mut out = vec![F16(0); a.len()];
        reduce_typed(Op::Sum, &mut out, &a, &b).unwrap();
        PORTABLE_ONLY.with(|p| p.set(false));
        out.iter().map(|h| h.0).collect::<Vec<u16>>()
    };
    let (portable, accelerated) = (sum(true), sum(false));
    let is_nan = |h: u16| h & 0x7c00 == 0x7c00 && h & 0x03ff != 0;
    for i in 0..a.len() {
        // NaN payloads are not part of the contract (module docs): which NaN operand
        // survives depends on operand order, which LLVM may commute. A NaN must stay a NaN.
        if is_nan(portable[i]) || is_nan(accelerated[i]) {
            assert!(
                is_nan(portable[i]) && is_nan(accelerated[i]),
                "{:#x} + {:#x}: {:#x} vs {:#x}",
                a[i].0,
                b[i].0,
                portable[i],
                accelerated[i]
            );
        } else {
            assert_eq!(portable[i], accelerated[i], "{:#x} + {:#x}", a[i].0, b[i].0);
        }
    }
}

#[test]
fn typed_and_byte_views_agree_and_premul_scales() {
    let mut rng = Rng(99);
    let a: Vec<f32> = (0..1001)
        .map(|_| (rng.below(1000) as f32 - 500.0) / 7.0)
        .collect();
    let b: Vec<f32> = (0..1001)
        .map(|_| (rng.below(1000) as f32 - 500.0) / 3.0)
        .collect();
    let mut typed = vec![0f32; a.len()];
    reduce_typed(Op::Sum, &mut typed, &a, &b).unwrap();
    let mut bytes = vec![0u8; a.len() * 4];
    reduce(
        Dtype::Float32,
        Op::Sum,
        &mut bytes,
        a.as_bytes(),
        b.as_bytes(),
    )
    .unwrap();
    assert_eq!(bytes, typed.as_bytes());
    let mut in_place = a.clone();
    reduce_typed_in_place(Op::Sum, &mut in_place, &b).unwrap();
    assert_eq!(in_place.as_bytes(), typed.as_bytes());
    // premul by 1/3 in f32, element by element.
    let mut scaled = vec![0u8; a.len() * 4];
    premul(Dtype::Float32, 3, &mut scaled, a.as_bytes()).unwrap();
    let third = (1.0f64 / 3.0) as f32;
    for (i, &x) in a.iter().enumerate() {
        assert_eq!(
            get(Dtype::Float32, &scaled, i),
            u64::from((x * third).to_bits())
        );
    }
    // Integers are copied by premul and divided by finish_avg.
    let ints: Vec<i32> = vec![-7, 7, i32::MIN, 9];
    let mut out = vec![0u8; 16];
    premul(Dtype::Int32, 4, &mut out, ints.as_bytes()).unwrap();
    assert_eq!(out, ints.as_bytes());
    finish_avg(Dtype::Int32, &mut out, 4).unwrap();
    let want: Vec<i32> = vec![-1, 1, i32::MIN / 4, 2];
    assert_eq!(out, want.as_bytes());
    // Floats are untouched by finish_avg and by Reduction::finish.
    let mut f = a.as_bytes().to_vec();
    finish_avg(Dtype::Float32, &mut f, 3).unwrap();
    assert_eq!(f, a.as_bytes());
}

#[test]
fn errors_name_what_is_wrong() {
    let mut d = [0u8; 8];
    assert_eq!(
        reduce(Dtype::Float32, Op::Sum, &mut d, &[0; 8], &[0; 4]),
        Err(ReduceError::LengthMismatch { dst: 8, src: 4 })
    );
    assert_eq!(
        reduce(Dtype::Float32, Op::Sum, &mut d[..6], &[0; 6], &[0; 6]),
        Err(ReduceError::PartialElement {
            len: 6,
            dtype: Dtype::Float32
        })
    );
    assert_eq!(
        copy(&mut d, &[1; 7]),
        Err(ReduceError::LengthMismatch { dst: 8, src: 7 })
    );
    assert_eq!(
        Reduction::new(Dtype::Int8, Op::Avg, 0),
        Err(ReduceError::NoRanks)
    );
    assert_eq!(
        finish_avg(Dtype::Int8, &mut d, 0),
        Err(ReduceError::NoRanks)
    );
    assert_eq!(
        Reduction::from_nccl(12, 0, 2),
        Err(ReduceError::UnknownDtype(12))
    );
    assert_eq!(
        Reduction::from_nccl(7, 5, 2),
        Err(ReduceError::UnknownOp(5))
    );
    let message = ReduceError::PartialElement {
        len: 6,
        dtype: Dtype::Float32,
    }
    .to_string();
    assert!(
        message.contains("6 bytes") && message.contains("float") && message.contains("4 bytes"),
        "{message}"
    );
    assert!(ReduceError::UnknownOp(5).to_string().contains("ncclAvg"));
    // Nothing was written by the refused calls.
    assert_eq!(d, [0u8; 8]);
    let mut typed = [0f32; 2];
    assert_eq!(
        reduce_typed(Op::Sum, &mut typed, &[1.0], &[1.0, 2.0]),
        Err(ReduceError::LengthMismatch { dst: 8, src: 4 })
    );
}

#[test]
fn nccl_values_round_trip() {
    for (value, dtype) in Dtype::ALL.iter().enumerate() {
        assert_eq!(Dtype::try_from(value as u32), Ok(*dtype));
        assert_eq!(*dtype as u32, value as u32);
    }
    assert_eq!(Dtype::Float16 as u32, 6);
    assert_eq!(Dtype::Bfloat16 as u32, 9);
    assert_eq!(Op::Max as u32, 2);
    assert_eq!(Op::Min as u32, 3);
    for (value, op) in Op::ALL.iter().enumerate() {
        assert_eq!(Op::try_from(value as u32), Ok(*op));
    }
    let r = Reduction::from_nccl(9, 4, 3).unwrap();
    assert_eq!(
        (r.dtype(), r.op(), r.nranks()),
        (Dtype::Bfloat16, Op::Avg, 3)
    );
}

#[test]
fn reduction_partials_skip_the_pre_op_and_match_free_functions() {
    let mut rng = Rng(31);
    both_paths(|path| {
        for &dtype in Dtype::ALL {
            for &op in Op::ALL {
                let reduction = Reduction::new(dtype, op, 3).unwrap();
                let count = 45;
                let (a, va) = filled(dtype, 1, count, &mut rng);
                let (b, vb) = filled(dtype, 0, count, &mut rng);
                let mut d = Placed::new(3, count * dtype.size_of_elem());
                reduction
                    .reduce(d.bytes_mut(), a.bytes(), b.bytes())
                    .unwrap();
                let mut acc = Placed::new(0, count * dtype.size_of_elem());
                acc.bytes_mut().copy_from_slice(b.bytes());
                reduction
                    .reduce_in_place(acc.bytes_mut(), a.bytes())
                    .unwrap();
                // finish leaves non-Avg results alone.
                if op != Op::Avg {
                    reduction.finish(d.bytes_mut()).unwrap();
                }
                for i in 0..count {
                    let want = reference(dtype, op, va[i], vb[i]);
                    let what = || format!("{path} Reduction {dtype} {op} [{i}]");
                    check_element(dtype, want, get(dtype, d.bytes(), i), &what);
                    check_element(dtype, want, get(dtype, acc.bytes(), i), &what);
                }
                d.assert_guards("Reduction::reduce");
                acc.assert_guards("Reduction::reduce_in_place");
                let mut odd =
                    vec![0u8; dtype.size_of_elem() * 3 + usize::from(dtype.size_of_elem() > 1)];
                let finished = reduction.finish(&mut odd);
                if dtype.size_of_elem() > 1 {
                    assert_eq!(
                        finished,
                        Err(ReduceError::PartialElement {
                            len: odd.len(),
                            dtype
                        })
                    );
                }
            }
        }
    });
}

const FP8_TYPES: [Dtype; 2] = [Dtype::Float8E4M3, Dtype::Float8E5M2];

/// The fp8 code of `x` through the conversions under test.
fn fp8_from_f32(dtype: Dtype, x: f32) -> u64 {
    match dtype {
        Dtype::Float8E4M3 => u64::from(F8E4M3::from_f32(x).0),
        _ => u64::from(F8E5M2::from_f32(x).0),
    }
}

#[test]
fn fp8_every_pair_of_every_op_matches_reference() {
    // All 256 x 256 operand pairs in one buffer: a = low byte of the index, b = high byte.
    let a: Vec<u8> = (0..=u16::MAX).map(|i| i as u8).collect();
    let b: Vec<u8> = (0..=u16::MAX).map(|i| (i >> 8) as u8).collect();
    for dtype in FP8_TYPES {
        for &op in Op::ALL {
            let mut out = vec![0u8; a.len()];
            reduce(dtype, op, &mut out, &a, &b).unwrap();
            let mut acc = b.clone();
            reduce_in_place(dtype, op, &mut acc, &a).unwrap();
            for i in 0..a.len() {
                let (x, y) = (u64::from(a[i]), u64::from(b[i]));
                let want = reference(dtype, op, x, y);
                let what = || format!("{dtype} {op}({x:#04x}, {y:#04x})");
                check_element(dtype, want, u64::from(out[i]), &what);
                check_element(dtype, want, u64::from(acc[i]), &what);
            }
        }
    }
}

#[test]
fn fp8_binary16_step_changes_no_single_operation() {
    // NCCL rounds a sum or product twice (to binary16, then to fp8). Over every operand
    // pair that equals one rounding of the exact result: binary16 has 7 (E4M3) or 8 (E5M2)
    // more significand bits, and an exact sum or product of two fp8 values cannot fall
    // strictly between an fp8 midpoint and binary16's half step around it. So a correctly
    // rounded, saturating fp8 implementation matches NCCL too; the reference keeps both
    // steps anyway, as NCCL's code does.
    for dtype in FP8_TYPES {
        for x in 0..=255u64 {
            for y in 0..=255u64 {
                let (vx, vy) = (float_value(dtype, x), float_value(dtype, y));
                for exact in [vx + vy, vx * vy] {
                    assert_eq!(
                        arith_bits(dtype, exact),
                        fp8_nearest(dtype, exact),
                        "{dtype} {x:#04x} {y:#04x}"
                    );
                }
            }
        }
    }
}

#[test]
fn fp8_conversions_match_reference_exhaustively() {
    for dtype in FP8_TYPES {
        for code in 0..=255u8 {
            let reference = float_value(dtype, u64::from(code));
            let (half, value, is_nan) = match dtype {
                Dtype::Float8E4M3 => {
                    let c = F8E4M3(code);
                    (c.to_f16(), c.to_f32(), c.is_nan())
                }
                _ => {
                    let c = F8E5M2(code);
                    (c.to_f16(), c.to_f32(), c.is_nan())
                }
            };
            if reference.is_nan() {
                assert!(is_nan && value.is_nan(), "{dtype} {code:#04x}");
                assert_eq!(
                    half.0, 0x7fff,
                    "{dtype} {code:#04x} widens to the canonical NaN"
                );
                assert_eq!(
                    fp8_from_f32(dtype, value),
                    0x7f,
                    "{dtype} NaN narrows to 0x7f"
                );
                continue;
            }
            assert!(!is_nan, "{dtype} {code:#04x}");
            assert_eq!(f64::from(value), reference, "{dtype} {code:#04x}");
            assert_eq!(
                float_value(Dtype::Float16, u64::from(half.0)),
                reference,
                "{dtype} {code:#04x} to binary16"
            );
            assert_eq!(
                value.is_sign_negative(),
                code & 0x80 != 0,
                "{dtype} {code:#04x}"
            );
            // Round trip, but an E5M2 infinity saturates to the largest finite value.
            let want = if reference.is_infinite() {
                u64::from(code & 0x80) | 0x7b
            } else {
                u64::from(code)
            };
            assert_eq!(fp8_from_f32(dtype, value), want, "{dtype} {code:#04x}");
        }
        if dtype == Dtype::Float8E5M2 {
            // E5M2 is binary16's upper byte.
            for code in 0..=255u8 {
                if !F8E5M2(code).is_nan() {
                    assert_eq!(F8E5M2(code).to_f16().0, u16::from(code) << 8, "{code:#04x}");
                }
            }
        }
        // Narrowing every binary16 value: what NCCL does to every result.
        for bits in 0..=u16::MAX {
            let got = match dtype {
                Dtype::Float8E4M3 => u64::from(F8E4M3::from_f16(F16(bits)).0),
                _ => u64::from(F8E5M2::from_f16(F16(bits)).0),
            };
            let x = float_value(Dtype::Float16, u64::from(bits));
            check_element(dtype, want_float(dtype, x), got, &|| {
                format!("{dtype} from binary16 {bits:#06x} ({x:e})")
            });
        }
    }
}

#[test]
fn fp8_rounding_matches_reference_around_every_boundary() {
    let mut rng = Rng(8);
    for dtype in FP8_TYPES {
        let mut probes: Vec<u32> = Vec::new();
        for code in 0..=0x7eu64 {
            let (lo, hi) = (float_value(dtype, code), float_value(dtype, code + 1));
            if lo.is_finite() && hi.is_finite() {
                let mid = ((lo + hi) / 2.0) as f32; // exact: few significant bits
                for d in -3i32..=3 {
                    let p = mid.to_bits().wrapping_add_signed(d);
                    probes.extend([p, p | 0x8000_0000]);
                }
            }
        }
        probes.extend((0..100_000).map(|_| rng.next() as u32));
        probes.extend([
            0x7f80_0000, // inf
            0xff80_0000,
            0x7fc0_0000, // NaN
            0xffc0_0001,
            0x7f7f_ffff, // f32::MAX
            1,           // the smallest f32 subnormal
            0x8000_0000, // -0
        ]);
        for bits in probes {
            let x = f32::from_bits(bits);
            let want = fp8_nearest(dtype, f64::from(x)).map_or(Want::Nan, Want::Bits);
            check_element(dtype, want, fp8_from_f32(dtype, x), &|| {
                format!("{dtype} from_f32({x:e} = {bits:#x})")
            });
        }
    }
}

#[test]
fn fp8_edges_of_nccls_semantics() {
    let e4 = |x: f32| F8E4M3::from_f32(x);
    let e5 = |x: f32| F8E5M2::from_f32(x);
    // Saturation, not infinity and not NaN: E4M3 above 448, E5M2 from 61440 and infinity.
    assert_eq!(e4(448.0).0, 0x7e);
    assert_eq!(e4(464.0).0, 0x7e, "the tie above 448 goes to the even 448");
    assert_eq!(e4(465.0).0, 0x7e);
    assert_eq!(e4(f32::INFINITY).0, 0x7e);
    assert_eq!(e4(f32::NEG_INFINITY).0, 0xfe);
    assert_eq!(e5(57344.0).0, 0x7b);
    assert_eq!(e5(61440.0).0, 0x7b);
    assert_eq!(e5(f32::INFINITY).0, 0x7b);
    assert_eq!(e5(-1e30).0, 0xfb);
    // Subnormals round to nearest even: half the smallest goes to zero (keeping the sign),
    // 1.5 of it to 2.
    assert_eq!(e4(2f32.powi(-10)).0, 0x00);
    assert_eq!(e4(-(2f32.powi(-10))).0, 0x80);
    assert_eq!(e4(3.0 * 2f32.powi(-10)).0, 0x02);
    assert_eq!(e4(2f32.powi(-10) + 2f32.powi(-20)).0, 0x01);
    assert_eq!(e5(2f32.powi(-17)).0, 0x00);
    assert_eq!(e5(3.0 * 2f32.powi(-17)).0, 0x02);
    // NaN: 0x7f from either sign.
    assert_eq!(e4(-f32::NAN).0, 0x7f);
    assert_eq!(e5(f32::NAN).0, 0x7f);

    let op2 = |dtype: Dtype, op: Op, x: u8, y: u8| {
        let mut d = [0u8];
        reduce(dtype, op, &mut d, &[x], &[y]).unwrap();
        d[0]
    };
    let (e4m3, e5m2) = (Dtype::Float8E4M3, Dtype::Float8E5M2);
    // 448 + 32 saturates; 448 * 2 too; E5M2 inf + 1 is the largest finite value, and so is
    // max(inf, 1): NCCL narrows the binary16 result with saturation.
    assert_eq!(op2(e4m3, Op::Sum, 0x7e, e4(32.0).0), 0x7e);
    assert_eq!(op2(e4m3, Op::Prod, 0x7e, e4(-2.0).0), 0xfe);
    assert_eq!(op2(e5m2, Op::Sum, 0x7c, e5(1.0).0), 0x7b);
    assert_eq!(op2(e5m2, Op::Max, 0x7c, e5(1.0).0), 0x7b);
    assert_eq!(op2(e5m2, Op::Min, 0xfc, e5(1.0).0), 0xfb);
    // E5M2 57344 + 57344 overflows binary16 to infinity, which saturates.
    assert_eq!(op2(e5m2, Op::Sum, 0x7b, 0x7b), 0x7b);
    // inf - inf and inf * 0 are NaN; NaN + x is NaN; min/max skip one NaN.
    assert!(F8E5M2(op2(e5m2, Op::Sum, 0x7c, 0xfc)).is_nan());
    assert!(F8E5M2(op2(e5m2, Op::Prod, 0x7c, 0x00)).is_nan());
    assert!(F8E4M3(op2(e4m3, Op::Sum, 0x7f, 0x38)).is_nan());
    assert_eq!(op2(e4m3, Op::Min, 0x7f, 0x38), 0x38);
    assert_eq!(op2(e4m3, Op::Max, 0xff, 0xb8), 0xb8);
    assert!(F8E4M3(op2(e4m3, Op::Max, 0x7f, 0xff)).is_nan());
    // Signed zeros: -0 + -0 = -0, -0 + 0 = 0, min(-0, 0) = -0, max(-0, 0) = 0.
    assert_eq!(op2(e4m3, Op::Sum, 0x80, 0x80), 0x80);
    assert_eq!(op2(e4m3, Op::Sum, 0x80, 0x00), 0x00);
    assert_eq!(op2(e5m2, Op::Min, 0x00, 0x80), 0x80);
    assert_eq!(op2(e5m2, Op::Max, 0x80, 0x00), 0x00);
    // Sums round to nearest even: 16 + 1 ties to 16, 18 + 1 ties to 20 (E4M3 steps of 2).
    assert_eq!(op2(e4m3, Op::Sum, e4(16.0).0, e4(1.0).0), e4(16.0).0);
    assert_eq!(op2(e4m3, Op::Sum, e4(18.0).0, e4(1.0).0), e4(20.0).0);
    // Avg's scale: float(1/3) = 0.33333334 is 0.34375 in E4M3, 0.3125 in E5M2; 1/2^k exact.
    assert_eq!(F8E4M3::avg_scale(3).to_f32(), 0.34375);
    assert_eq!(F8E5M2::avg_scale(3).to_f32(), 0.3125);
    assert_eq!(F8E4M3::avg_scale(8).to_f32(), 0.125);
    assert_eq!(F8E5M2::avg_scale(1).to_f32(), 1.0);
    // Avg over 3 ranks of 3.0 each: 3 * 0.34375 = 1.03125 rounds to 1.0 per rank, sum 3.
    let avg = Reduction::new(e4m3, Op::Avg, 3).unwrap();
    let three = [e4(3.0).0];
    let mut partial = [0u8];
    avg.copy_input(&mut partial, &three).unwrap();
    assert_eq!(F8E4M3(partial[0]).to_f32(), 1.0);
    avg.reduce_input_in_place(&mut partial, &three).unwrap();
    avg.reduce_input_in_place(&mut partial, &three).unwrap();
    avg.finish(&mut partial).unwrap();
    assert_eq!(F8E4M3(partial[0]).to_f32(), 3.0);
}
