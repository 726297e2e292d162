//! weft-verify: seeded test data and the exact expected result of every collective, element
//! by element (what `weft perf`, the tests and the GPU suites check against).
//!
//! Every element a rank contributes is a pure function of (seed, rank, index), so any rank
//! can compute what every other rank put in, and so the expected output, without holding
//! the other ranks' buffers. Values are chosen so that results are exact in any reduction
//! order: integers wrap (associative and commutative); floating values are multiples of
//! 1/4 in [1/4, 4] (sums over up to 8 ranks are exact even in bfloat16's 8 bits, up to 64
//! in half) and, for products, powers of two in [1/2, 2]. `Avg` rounds (NCCL multiplies by
//! `1/nranks`), and so do sums over more ranks, so floating results are compared with a
//! tolerance of a few units in the last place per rank.
//!
//! The fp8 types (3 or 2 stored mantissa bits) are checked exactly instead, with data whose
//! every partial result is exact in any order (see `TestData::fp8_input`): sums of
//! multiples of 1/4 small enough to stay exact, powers of two for products, any finite value
//! for min and max, and for `Avg` one nonzero input per element, whose pre-multiplied value
//! the reference computes (`weft_core::element`, NCCL's fp8 rounding).

use std::sync::atomic::{AtomicUsize, Ordering};

use weft_core::abi::{DataType, RedOp};

use weft_core::element::{Bf16, F8E4M3, F8E5M2, F16};

/// What a checked call computes, seen from one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `out[i] = op over ranks of in(r, i)`.
    AllReduce,
    /// `out[i] = op over ranks of in(r, rank * count + i)`.
    ReduceScatter,
    /// `out[j * count + i] = in(j, i)`.
    AllGather,
    /// `out[i] = in(root, i)`.
    Broadcast { root: usize },
    /// On the root, `out[i] = op over ranks of in(r, i)`; elsewhere nothing is checked.
    Reduce { root: usize },
    /// `out[i] = in(from, i)`.
    Recv { from: usize },
}

impl From<weft_core::sched::Collective> for Expect {
    /// What a collective computes, as [`TestData::count_wrong`] checks it.
    fn from(c: weft_core::sched::Collective) -> Self {
        use weft_core::sched::Collective;
        match c {
            Collective::AllReduce => Expect::AllReduce,
            Collective::ReduceScatter => Expect::ReduceScatter,
            Collective::AllGather => Expect::AllGather,
            Collective::Broadcast { root } => Expect::Broadcast {
                root: root as usize,
            },
            Collective::Reduce { root } => Expect::Reduce {
                root: root as usize,
            },
        }
    }
}

/// The data of one test: type, operator, seed and number of ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestData {
    pub dtype: DataType,
    pub op: RedOp,
    pub seed: u64,
    pub nranks: usize,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A value of a type, widened: integers as wrapping `i128`-free raw bits, floats as `f64`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(u64),
    Float(f64),
}

impl TestData {
    fn esize(&self) -> usize {
        self.dtype.size_of_elem()
    }

    fn is_float(&self) -> bool {
        self.dtype.is_float()
    }

    fn random(&self, rank: usize, index: usize) -> u64 {
        splitmix(
            self.seed
                ^ splitmix((rank as u64).wrapping_mul(0x1000_0000_01b3))
                ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )
    }

    /// What `rank` puts at `index` of its input.
    fn input(&self, rank: usize, index: usize) -> Value {
        let r = self.random(rank, index);
        if !self.is_float() {
            return Value::Int(r);
        }
        if self.dtype.is_fp8() {
            return Value::Float(self.fp8_input(rank, index, r));
        }
        let v = if self.op == RedOp::Prod {
            // 1/2, 1 or 2, with a random sign: products stay exact powers of two.
            let magnitude = [0.5, 1.0, 2.0][(r % 3) as usize];
            if (r >> 8) & 1 == 1 {
                -magnitude
            } else {
                magnitude
            }
        } else {
            ((r % 16) as f64 + 1.0) / 4.0
        };
        Value::Float(v)
    }

    /// An fp8 input, from the random bits `r`, such that the reduction over all ranks is
    /// exact whatever the order NCCL's ring combines them in:
    /// - sum: multiples of 1/4 whose magnitudes, in units of 1/4, add up to at most 16
    ///   (E4M3) or 8 (E5M2) over the ranks, so every partial sum is exact (every integer up
    ///   to 16, resp. 8, fits the 4, resp. 3, significant bits). Past that many ranks, each
    ///   element takes nonzero values from a spread-out subset of ranks only;
    /// - product: +-1/2, +-1 or +-2 while 2^nranks stays in range (8 ranks for E4M3, 15 for
    ///   E5M2), else +-1;
    /// - min and max: any finite value (exact in any order);
    /// - avg: one rank per element (`index % nranks`) gives any finite value, the others
    ///   zero; the pre-multiplied values then sum exactly.
    fn fp8_input(&self, rank: usize, index: usize, r: u64) -> f64 {
        let n = self.nranks.max(1);
        let e4m3 = self.dtype == DataType::Float8E4M3;
        let finite = |r: u64| {
            // Magnitude codes up to the largest finite one (0x7e, 0x7b), then the sign.
            let max_code = if e4m3 { 0x7e } else { 0x7b };
            let code = ((r >> 8) % (max_code + 1)) as u8 | (((r & 1) as u8) << 7);
            if e4m3 {
                F8E4M3(code).to_f32()
            } else {
                F8E5M2(code).to_f32()
            }
        };
        let sign = if (r >> 40) & 1 == 1 { -1.0 } else { 1.0 };
        match self.op {
            RedOp::Prod => {
                let max_ranks = if e4m3 { 8 } else { 15 };
                let magnitude = if n <= max_ranks {
                    [0.5, 1.0, 2.0][(r % 3) as usize]
                } else {
                    1.0
                };
                sign * magnitude
            }
            RedOp::Min | RedOp::Max => f64::from(finite(r)),
            RedOp::Avg if rank == index % n => f64::from(finite(r)),
            RedOp::Avg => 0.0,
            RedOp::Sum => {
                let units = if e4m3 { 16 } else { 8 };
                // Ranks `rank + index = 0 (mod stride)` contribute: at most `units` of them.
                let stride = n.div_ceil(units);
                if !(rank + index).is_multiple_of(stride) {
                    return 0.0;
                }
                let budget = (units / n.div_ceil(stride)) as u64;
                let k = (r % (2 * budget + 1)) as f64 - budget as f64;
                k / 4.0
            }
        }
    }

    /// An fp8 `Avg` input after NCCL's pre-multiplication by `fp8(1/nranks)`, computed by
    /// the CPU reference.
    fn fp8_premul(&self, v: f64) -> f64 {
        let n = self.nranks.max(1) as u32;
        let v = v as f32;
        f64::from(match self.dtype {
            DataType::Float8E4M3 => F8E4M3::from_f32(v).prod(F8E4M3::avg_scale(n)).to_f32(),
            _ => F8E5M2::from_f32(v).prod(F8E5M2::avg_scale(n)).to_f32(),
        })
    }

    fn encode(&self, v: Value, out: &mut [u8]) {
        match (self.dtype, v) {
            (DataType::Float8E4M3, Value::Float(f)) => out[0] = F8E4M3::from_f32(f as f32).0,
            (DataType::Float8E5M2, Value::Float(f)) => out[0] = F8E5M2::from_f32(f as f32).0,
            (DataType::Float16, Value::Float(f)) => {
                out.copy_from_slice(&F16::from_f32(f as f32).0.to_ne_bytes())
            }
            (DataType::Bfloat16, Value::Float(f)) => {
                out.copy_from_slice(&Bf16::from_f32(f as f32).0.to_ne_bytes())
            }
            (DataType::Float32, Value::Float(f)) => out.copy_from_slice(&(f as f32).to_ne_bytes()),
            (DataType::Float64, Value::Float(f)) => out.copy_from_slice(&f.to_ne_bytes()),
            (_, Value::Int(bits)) => {
                let n = out.len();
                out.copy_from_slice(&bits.to_le_bytes()[..n]);
                if cfg!(target_endian = "big") {
                    out.reverse();
                }
            }
            (_, Value::Float(_)) => out.fill(0),
        }
    }

    fn decode(&self, bytes: &[u8]) -> Value {
        let mut le = [0u8; 8];
        let n = bytes.len().min(8);
        le[..n].copy_from_slice(&bytes[..n]);
        if cfg!(target_endian = "big") {
            le[..n].reverse();
        }
        let raw = u64::from_le_bytes(le);
        match self.dtype {
            DataType::Float16 => Value::Float(f64::from(F16(raw as u16).to_f32())),
            DataType::Bfloat16 => Value::Float(f64::from(Bf16(raw as u16).to_f32())),
            DataType::Float32 => Value::Float(f64::from(f32::from_bits(raw as u32))),
            DataType::Float64 => Value::Float(f64::from_bits(raw)),
            DataType::Float8E4M3 => Value::Float(f64::from(F8E4M3(raw as u8).to_f32())),
            DataType::Float8E5M2 => Value::Float(f64::from(F8E5M2(raw as u8).to_f32())),
            _ => Value::Int(raw),
        }
    }

    /// Sign-extends or masks integer bits to the element type, as a wrapping operation in
    /// that type would leave them.
    fn normalize(&self, bits: u64) -> u64 {
        match self.dtype {
            DataType::Int8 => bits as i8 as i64 as u64,
            DataType::Uint8 => bits & 0xff,
            DataType::Int32 => bits as i32 as i64 as u64,
            DataType::Uint32 => bits & 0xffff_ffff,
            _ => bits,
        }
    }

    fn signed(&self) -> bool {
        matches!(
            self.dtype,
            DataType::Int8 | DataType::Int32 | DataType::Int64
        )
    }

    fn combine(&self, a: Value, b: Value) -> Value {
        match (a, b) {
            (Value::Int(x), Value::Int(y)) => {
                let (x, y) = (self.normalize(x), self.normalize(y));
                let r = match self.op {
                    RedOp::Sum | RedOp::Avg => x.wrapping_add(y),
                    RedOp::Prod => x.wrapping_mul(y),
                    RedOp::Max if self.signed() => (x as i64).max(y as i64) as u64,
                    RedOp::Min if self.signed() => (x as i64).min(y as i64) as u64,
                    RedOp::Max => x.max(y),
                    RedOp::Min => x.min(y),
                };
                Value::Int(self.normalize(r))
            }
            (Value::Float(x), Value::Float(y)) => Value::Float(match self.op {
                RedOp::Sum | RedOp::Avg => x + y,
                RedOp::Prod => x * y,
                RedOp::Max => x.max(y),
                RedOp::Min => x.min(y),
            }),
            _ => a,
        }
    }

    fn finish(&self, v: Value) -> Value {
        if self.op != RedOp::Avg {
            return v;
        }
        let n = self.nranks.max(1) as u64;
        match v {
            Value::Int(x) => {
                let x = self.normalize(x);
                Value::Int(self.normalize(if self.signed() {
                    ((x as i64) / (n as i64)) as u64
                } else {
                    x / n
                }))
            }
            // fp8 inputs were pre-multiplied already (see `contribution`).
            Value::Float(x) if self.dtype.is_fp8() => Value::Float(x),
            Value::Float(x) => Value::Float(x / n as f64),
        }
    }

    /// What `rank`'s input at `index` adds to a reduction: the input, pre-multiplied for an
    /// fp8 `Avg` (the other float types are divided at the end, within the tolerance).
    fn contribution(&self, rank: usize, index: usize) -> Value {
        match self.input(rank, index) {
            Value::Float(v) if self.dtype.is_fp8() && self.op == RedOp::Avg => {
                Value::Float(self.fp8_premul(v))
            }
            v => v,
        }
    }

    /// `rank`'s contribution at `index` to a `PreMulSum` call whose ranks passed
    /// [`TestData::premul_scalar`]: the input times the rank's scalar, wrapping for
    /// integers; exact for floats (the scalars are powers of two).
    fn premul_contribution(&self, rank: usize, index: usize) -> Value {
        match (self.input(rank, index), self.premul_value(rank)) {
            (Value::Int(x), Value::Int(s)) => {
                Value::Int(self.normalize(self.normalize(x).wrapping_mul(self.normalize(s))))
            }
            (Value::Float(x), Value::Float(s)) => Value::Float(x * s),
            (v, _) => v,
        }
    }

    fn reduced(&self, index: impl Fn(usize) -> usize, premul: bool) -> Value {
        let contribution = |r: usize| {
            if premul {
                self.premul_contribution(r, index(r))
            } else {
                self.contribution(r, index(r))
            }
        };
        let mut acc = contribution(0);
        for r in 1..self.nranks {
            acc = self.combine(acc, contribution(r));
        }
        if premul { acc } else { self.finish(acc) }
    }

    /// `rank`'s scalar in a `PreMulSum` test of this data, widened. Integers: a different
    /// odd value per rank and seed, negative ones too for signed types (products wrap).
    /// Floats: positive powers of two (1/4 to 2), so each product is exact and sums round
    /// no more than `Sum`'s; for fp8 the same 1/2 on every rank, so that every partial sum
    /// stays exact in any order (see [`TestData::fp8_input`]'s sum budget).
    fn premul_value(&self, rank: usize) -> Value {
        let r = splitmix(self.seed ^ 0x5ca1_ab1e ^ rank as u64);
        if !self.is_float() {
            return Value::Int(self.normalize(r | 1));
        }
        if self.dtype.is_fp8() {
            return Value::Float(0.5);
        }
        Value::Float([0.25, 0.5, 1.0, 2.0][(r % 4) as usize])
    }

    /// `rank`'s scalar for a `PreMulSum` test of this data (whose `op` must be `Sum`: its
    /// inputs are `Sum`'s), as the bits of one element of `dtype` in the low bytes of a
    /// `u64`, as NCCL's `ncclScalarHostImmediate` reads them (the same bytes, in memory
    /// order, are what a device-resident scalar holds: `to_ne_bytes()[..size]`).
    pub fn premul_scalar(&self, rank: usize) -> u64 {
        let mut bytes = [0u8; 8];
        self.encode(self.premul_value(rank), &mut bytes[..self.esize()]);
        u64::from_ne_bytes(bytes)
    }

    /// [`TestData::count_wrong`] for a `PreMulSum` call in which every rank `r` passed
    /// [`TestData::premul_scalar`]`(r)`: `out[i] = sum over ranks of scalar_r * in(r, i)`
    /// (reduce-scatter, reduce: the same, on their elements). `op` must be `Sum`.
    pub fn count_wrong_premul_sum(
        &self,
        expect: Expect,
        rank: usize,
        count: usize,
        out: &[u8],
    ) -> usize {
        assert_eq!(
            self.op,
            RedOp::Sum,
            "PreMulSum data is Sum's data with scalars: build the TestData with RedOp::Sum"
        );
        let esize = self.esize();
        let wrong = AtomicUsize::new(0);
        on_every_cpu(out, esize, |start, part| {
            let n = self.count_wrong_from(expect, rank, count, start, part, true);
            wrong.fetch_add(n, Ordering::Relaxed);
        });
        wrong.into_inner()
    }

    /// Fills `buf` with what `rank` contributes at element indices `first..`, on every CPU
    /// for a large buffer (a GiB takes seconds on one).
    pub fn fill(&self, rank: usize, first: usize, buf: &mut [u8]) {
        let esize = self.esize();
        on_every_cpu(buf, esize, |start, part| {
            for (k, chunk) in part.chunks_exact_mut(esize).enumerate() {
                self.encode(self.input(rank, first + start + k), chunk);
            }
        });
    }

    /// The expected output element `i` of `rank` for `expect` (`count` as in NCCL's API);
    /// `None` where nothing is defined (non-root ranks of a reduce).
    /// With `premul`, the reductions are `PreMulSum`'s (see [`TestData::premul_scalar`]).
    fn expected(
        &self,
        expect: Expect,
        rank: usize,
        count: usize,
        i: usize,
        premul: bool,
    ) -> Option<Value> {
        Some(match expect {
            Expect::AllReduce => self.reduced(|_| i, premul),
            Expect::ReduceScatter => self.reduced(|_| rank * count + i, premul),
            Expect::AllGather => self.input(i / count.max(1), i % count.max(1)),
            Expect::Broadcast { root } => self.input(root, i),
            Expect::Reduce { root } if root == rank => self.reduced(|_| i, premul),
            Expect::Reduce { .. } => return None,
            Expect::Recv { from } => self.input(from, i),
        })
    }

    /// Relative tolerance for a floating result: exact data leaves only `Avg`'s roundings
    /// (NCCL multiplies each input by `1/nranks` rounded to the type, then sums the
    /// rounded products: about one unit in the last place per rank). None for fp8, whose
    /// data and expected values are exact.
    fn tolerance(&self) -> f64 {
        if self.dtype.is_fp8() {
            return 0.0;
        }
        let eps = match self.dtype {
            DataType::Float16 => 2f64.powi(-10),
            DataType::Bfloat16 => 2f64.powi(-7),
            DataType::Float32 => 2f64.powi(-23),
            _ => 2f64.powi(-52),
        };
        // Sums are exact up to 8 ranks in bfloat16 (64 in half); beyond, partial sums round.
        let units = if matches!(self.op, RedOp::Avg | RedOp::Sum) {
            self.nranks as f64 + 2.0
        } else {
            2.0
        };
        units * eps
    }

    /// Counts the elements of `out` (the whole output buffer of `rank`) that differ from
    /// the expected result; the first few mismatches go to the log.
    /// Large buffers are checked on every CPU.
    pub fn count_wrong(&self, expect: Expect, rank: usize, count: usize, out: &[u8]) -> usize {
        let esize = self.esize();
        let wrong = AtomicUsize::new(0);
        on_every_cpu(out, esize, |start, part| {
            let n = self.count_wrong_from(expect, rank, count, start, part, false);
            wrong.fetch_add(n, Ordering::Relaxed);
        });
        wrong.into_inner()
    }

    /// [`TestData::count_wrong`] of the elements `first..` of the output, in `out`; with
    /// `premul`, [`TestData::count_wrong_premul_sum`]'s.
    fn count_wrong_from(
        &self,
        expect: Expect,
        rank: usize,
        count: usize,
        first: usize,
        out: &[u8],
        premul: bool,
    ) -> usize {
        let esize = self.esize();
        let tol = self.tolerance();
        let mut wrong = 0usize;
        for (k, chunk) in out.chunks_exact(esize).enumerate() {
            let i = first + k;
            let Some(want) = self.expected(expect, rank, count, i, premul) else {
                continue;
            };
            // Round the expectation to the type first: that is what a correct result holds.
            let mut enc = [0u8; 8];
            self.encode(want, &mut enc[..esize]);
            let want = self.decode(&enc[..esize]);
            let got = self.decode(chunk);
            let ok = match (want, got) {
                (Value::Float(w), Value::Float(g)) => {
                    w == g || (w - g).abs() <= tol * w.abs().max(f64::MIN_POSITIVE)
                }
                (w, g) => w == g,
            };
            if !ok {
                if wrong < 5 {
                    log::warn!(
                        "rank {rank}: element {i} of {:?} is {got:?}, expected {want:?}",
                        expect
                    );
                }
                wrong += 1;
            }
        }
        wrong
    }
}

/// Elements below which one thread does the whole buffer.
const ELEMS_PER_THREAD: usize = 1 << 20;

/// Runs `work(first_element, part)` over `buf` cut into whole elements of `esize` bytes, one
/// part per CPU (at most), each on a thread of its own.
fn on_every_cpu<B, F>(buf: B, esize: usize, work: F)
where
    B: SplitBytes,
    F: Fn(usize, B) + Sync,
{
    let elems = buf.len() / esize.max(1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parts = (elems / ELEMS_PER_THREAD).clamp(1, cpus);
    if parts == 1 {
        work(0, buf);
        return;
    }
    let per = elems.div_ceil(parts);
    std::thread::scope(|scope| {
        let mut rest = buf;
        let mut first = 0;
        while rest.len() >= esize && first < elems {
            let take = per.min(elems - first);
            let (part, tail) = rest.split(take * esize);
            let work = &work;
            scope.spawn(move || work(first, part));
            rest = tail;
            first += take;
        }
    });
}

/// A byte buffer [`on_every_cpu`] can cut in two: `&[u8]` or `&mut [u8]`.
trait SplitBytes: Send + Sized {
    fn len(&self) -> usize;
    fn split(self, at: usize) -> (Self, Self);
}

impl SplitBytes for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl SplitBytes for &mut [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn reference_of_a_known_sum() {
        let d = TestData {
            dtype: DataType::Int32,
            op: RedOp::Sum,
            seed: 7,
            nranks: 3,
        };
        let mut bufs = vec![vec![0u8; 4 * 5]; 3];
        for (r, b) in bufs.iter_mut().enumerate() {
            d.fill(r, 0, b);
        }
        let mut out = vec![0u8; 20];
        for i in 0..5 {
            let s: i32 = (0..3)
                .map(|r| i32::from_ne_bytes(bufs[r][4 * i..4 * i + 4].try_into().unwrap()))
                .fold(0i32, |a, b| a.wrapping_add(b));
            out[4 * i..4 * i + 4].copy_from_slice(&s.to_ne_bytes());
        }
        assert_eq!(d.count_wrong(Expect::AllReduce, 1, 5, &out), 0);
        out[7] ^= 1;
        assert_eq!(d.count_wrong(Expect::AllReduce, 1, 5, &out), 1);
    }

    /// PreMulSum's reference: each rank's input times its own scalar, summed; checked
    /// against products and sums computed here for an integer and a float type.
    #[test]
    fn premul_sum_reference_multiplies_each_ranks_input_by_its_scalar() {
        for dtype in [DataType::Int32, DataType::Float32] {
            let d = TestData {
                dtype,
                op: RedOp::Sum,
                seed: 11,
                nranks: 3,
            };
            let count = 64;
            let mut bufs = vec![vec![0u8; 4 * count]; 3];
            for (r, b) in bufs.iter_mut().enumerate() {
                d.fill(r, 0, b);
            }
            let scalars: Vec<[u8; 4]> = (0..3)
                .map(|r| d.premul_scalar(r).to_ne_bytes()[..4].try_into().unwrap())
                .collect();
            let mut out = vec![0u8; 4 * count];
            for i in 0..count {
                let elem = |r: usize| -> [u8; 4] { bufs[r][4 * i..4 * i + 4].try_into().unwrap() };
                let v = if dtype == DataType::Int32 {
                    let s = (0..3).fold(0i32, |acc, r| {
                        acc.wrapping_add(
                            i32::from_ne_bytes(elem(r))
                                .wrapping_mul(i32::from_ne_bytes(scalars[r])),
                        )
                    });
                    s.to_ne_bytes()
                } else {
                    let s = (0..3).fold(0f32, |acc, r| {
                        acc + f32::from_ne_bytes(elem(r)) * f32::from_ne_bytes(scalars[r])
                    });
                    s.to_ne_bytes()
                };
                out[4 * i..4 * i + 4].copy_from_slice(&v);
            }
            assert_eq!(
                d.count_wrong_premul_sum(Expect::AllReduce, 0, count, &out),
                0
            );
            // The plain sum is not the answer (the scalars are not all 1).
            assert!(
                d.count_wrong(Expect::AllReduce, 0, count, &out) > 0,
                "{dtype}"
            );
            out[9] ^= 0x10;
            assert_eq!(
                d.count_wrong_premul_sum(Expect::AllReduce, 0, count, &out),
                1
            );
            // Integer scalars differ between ranks.
            if dtype == DataType::Int32 {
                assert_ne!(scalars[0], scalars[1]);
            }
        }
    }

    #[test]
    fn large_buffers_are_filled_and_checked_in_parts_alike() {
        let d = TestData {
            dtype: DataType::Float16,
            op: RedOp::Sum,
            seed: 3,
            nranks: 2,
        };
        // Over three parts' worth of elements, not a multiple of the part size.
        let elems = 3 * ELEMS_PER_THREAD + 77;
        let mut parallel = vec![0u8; 2 * elems];
        d.fill(1, 5, &mut parallel);
        for (k, c) in parallel.chunks_exact(2).enumerate() {
            let mut want = [0u8; 2];
            d.encode(d.input(1, 5 + k), &mut want);
            assert_eq!(c, want, "element {k}");
        }
        // Rank 0's all-gather output is both inputs; break one element near the end.
        let mut out = vec![0u8; 4 * elems];
        d.fill(0, 0, &mut out[..2 * elems]);
        d.fill(1, 0, &mut out[2 * elems..]);
        assert_eq!(d.count_wrong(Expect::AllGather, 0, elems, &out), 0);
        out[4 * elems - 3] ^= 0x40;
        assert_eq!(d.count_wrong(Expect::AllGather, 0, elems, &out), 1);
    }

    #[test]
    fn float_data_is_exact_in_every_type() {
        for dtype in [
            DataType::Float16,
            DataType::Bfloat16,
            DataType::Float32,
            DataType::Float8E4M3,
            DataType::Float8E5M2,
        ] {
            let d = TestData {
                dtype,
                op: RedOp::Sum,
                seed: 1,
                nranks: 8,
            };
            let mut b = vec![0u8; dtype.size_of_elem() * 100];
            d.fill(3, 0, &mut b);
            for (i, c) in b.chunks_exact(dtype.size_of_elem()).enumerate() {
                assert_eq!(d.decode(c), d.input(3, i), "{dtype:?} {i}");
            }
        }
    }
}
