//! Element-wise reduction and copy kernels of the CPU executor, with NCCL's semantics.
//!
//! The CPU executor runs ring programs over host buffers and is the reference the CUDA
//! kernels are checked against, so every result here is what NCCL's device code computes
//! for the same operands in the same order (`src/device/reduce_kernel.h`, `enqueue.cc`'s
//! `hostToDevRedOp`):
//!
//! - Integers: sum and product wrap (two's complement); min and max compare as the signed or
//!   unsigned type.
//! - `f32`, `f64`: IEEE `+` and `*` in round-to-nearest-even. Min and max are `fminf` /
//!   `fmaxf` (NCCL's choice): a NaN operand yields the other operand, two NaNs yield a NaN;
//!   `-0.0` counts as below `+0.0` (`min(-0, +0) = -0`, `max(-0, +0) = +0`), as `__hmin` /
//!   `__hmax` document; that `fminf`/`fmin` on the GPU order signed zeros the same way is
//!   to be confirmed by the GPU comparison tests.
//! - Binary16 and bfloat16: each operation widens both operands exactly to `f32`, computes
//!   once and rounds back to nearest-even, which equals the correctly rounded 16-bit
//!   operation (`__hadd`, `__hmul`; see `weft_core::element`). Min and max as for `f32` (`__hmin`,
//!   `__hmax`), decided on the bits without widening.
//! - FP8 E4M3 and E5M2 (`fp8.rs`): as NCCL's device code (`__CUDA_ARCH__ >= 900`), every
//!   operation goes through binary16: both operands widen exactly, one binary16 operation
//!   (sum and product rounded as above, min and max as `__hmin` / `__hmax`), and the result
//!   narrows to nearest-even, saturating to the largest finite value (`__NV_SATFINITE`:
//!   E5M2 infinities and overflows become +-57344, E4M3's +-448).
//! - NaN payloads are not part of the contract: a NaN result is some quiet NaN (x86 keeps the
//!   first NaN operand's payload, the GPU returns a canonical NaN). Compare NaNs as NaNs.
//! - `ncclAvg` is not one kernel but NCCL's two-part scheme, which [`Reduction`] carries out:
//!   - floats (`ncclDevPreMulSum`): every rank's *input* is multiplied by `scale = 1/nranks`
//!     when it enters the reduction, rounded to the element type, and the products are then
//!     summed. `scale` is `1.0 / nranks` in `f64`, rounded to `f32`, then to the element type
//!     (binary16/bfloat16/fp8 are rounded twice, as `__float2half(float(1.0 / n))` and
//!     `__nv_cvt_float_to_fp8(float(1.0 / n), __NV_SATFINITE, ...)` do). Use
//!     [`Reduction::copy_input`] / [`Reduction::reduce_input`] where a rank's own input is
//!     read, [`Reduction::reduce`] where two partial results meet; nothing at the end.
//!   - integers (`ncclDevSumPostDiv`): a wrapping sum, then once, on the final sum, a
//!     division by `nranks` truncating toward zero: [`Reduction::finish`].
//!
//! Operands are named in the order NCCL combines them (`pre(input) ⊕ partial`); every op is
//! commutative, so the order shows only in which NaN payload survives.
//!
//! Buffers are byte slices at any alignment (FIFO slots, user buffers at odd offsets).
//! Operands aligned for the element type are viewed as typed slices (`zerocopy`, no
//! copies); misaligned ones go through aligned 2 KiB staging blocks on the stack. Either
//! way the inner loops are branch-free `zip`s that LLVM vectorizes, compiled for the
//! x86-64 baseline and again for AVX2 (picked at run time); binary16 sum/product use F16C
//! conversions when present; fp8 looks each result up in a table of every operand pair.
//! For buffers larger than the caches, the in-place forms are faster (about 1.5x measured
//! with `examples/reduce_bw.rs`): the destination is not a separate stream to fetch.

mod element;
#[cfg(target_arch = "x86_64")]
mod f16c;
mod kernel;
#[cfg(test)]
mod tests;

use core::fmt;

use zerocopy::{FromBytes, FromZeros, IntoBytes};

pub use element::{Element, RankDivisor};
use element::{MAX, MIN, PROD, SUM};
pub use weft_core::element::{Bf16, F8E4M3, F8E5M2, F16};

/// The element types and reductions are core's (`ncclDataType_t` / `ncclRedOp_t` numbers),
/// under the short names these kernels have always used.
pub use weft_core::abi::{DataType as Dtype, RedOp as Op};

/// Why a reduction or copy was refused. Nothing is written when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceError {
    /// Not an `ncclDataType_t` this executor knows.
    UnknownDtype(u32),
    /// Not a built-in `ncclRedOp_t` (user-created ops are not supported).
    UnknownOp(u32),
    /// A source's length differs from the destination's (in bytes).
    LengthMismatch {
        /// Destination bytes.
        dst: usize,
        /// Source bytes.
        src: usize,
    },
    /// A buffer's length is not a multiple of the element size.
    PartialElement {
        /// Buffer bytes.
        len: usize,
        /// The element type.
        dtype: Dtype,
    },
    /// `ncclAvg` over zero ranks.
    NoRanks,
}

impl fmt::Display for ReduceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReduceError::UnknownDtype(value) => write!(
                f,
                "unknown NCCL data type {value}: expected 0..=11 (ncclInt8, ncclUint8, ncclInt32, \
                 ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, \
                 ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2)"
            ),
            ReduceError::UnknownOp(value) => write!(
                f,
                "unknown NCCL reduction op {value}: expected 0..=4 (ncclSum, ncclProd, ncclMax, \
                 ncclMin, ncclAvg); user-created ops (ncclRedOpCreatePreMulSum) are not \
                 supported by the CPU executor"
            ),
            ReduceError::LengthMismatch { dst, src } => write!(
                f,
                "reduction buffers differ in size: destination {dst} bytes, source {src} bytes \
                 (every operand must hold the same number of elements)"
            ),
            ReduceError::PartialElement { len, dtype } => write!(
                f,
                "a buffer of {len} bytes is not a whole number of {dtype} elements ({} bytes \
                 each): check the count and the data type",
                dtype.size_of_elem()
            ),
            ReduceError::NoRanks => {
                f.write_str("ncclAvg over 0 ranks: the communicator must have at least 1 rank")
            }
        }
    }
}

impl std::error::Error for ReduceError {}

/// Calls `$body` with `$t` bound to the element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            Dtype::Int8 => {
                type $t = i8;
                $body
            }
            Dtype::Uint8 => {
                type $t = u8;
                $body
            }
            Dtype::Int32 => {
                type $t = i32;
                $body
            }
            Dtype::Uint32 => {
                type $t = u32;
                $body
            }
            Dtype::Int64 => {
                type $t = i64;
                $body
            }
            Dtype::Uint64 => {
                type $t = u64;
                $body
            }
            Dtype::Float16 => {
                type $t = F16;
                $body
            }
            Dtype::Float32 => {
                type $t = f32;
                $body
            }
            Dtype::Float64 => {
                type $t = f64;
                $body
            }
            Dtype::Bfloat16 => {
                type $t = Bf16;
                $body
            }
            Dtype::Float8E4M3 => {
                type $t = F8E4M3;
                $body
            }
            Dtype::Float8E5M2 => {
                type $t = F8E5M2;
                $body
            }
        }
    };
}

/// One collective's reduction: element type, op and rank count, with NCCL's `ncclAvg`
/// split into a pre-op on inputs (floats) and a post-op on the final sum (integers).
///
/// How a ring all-reduce uses it, per element block: the first rank sends
/// `copy_input(own)`; each next rank computes `reduce_input(own, received)` and sends it;
/// the last one also calls `finish` on its result before the all-gather half distributes it.
/// For every op but `Avg`, `copy_input` is a copy and `finish` does nothing.
///
/// ```
/// use weft_runtime::exec::reduce::{Dtype, Op, Reduction};
///
/// // Three ranks average one f32 element each, in ring order 0 -> 1 -> 2.
/// let inputs = [3.0f32, 6.0, 12.0].map(f32::to_ne_bytes);
/// let avg = Reduction::new(Dtype::Float32, Op::Avg, 3)?;
/// let mut partial = [0u8; 4];
/// avg.copy_input(&mut partial, &inputs[0])?; // 3 * (1/3)
/// let mut next = [0u8; 4];
/// avg.reduce_input(&mut next, &inputs[1], &partial)?; // + 6 * (1/3)
/// avg.reduce_input_in_place(&mut next, &inputs[2])?; // + 12 * (1/3)
/// avg.finish(&mut next)?; // nothing left to do for floats
/// let third = (1.0f64 / 3.0) as f32;
/// let want = 12.0 * third + (6.0 * third + 3.0 * third);
/// assert_eq!(f32::from_ne_bytes(next), want);
///
/// // Integers sum (wrapping) and divide once at the end, truncating toward zero.
/// let avg = Reduction::new(Dtype::Int32, Op::Avg, 2)?;
/// let mut sum = [0u8; 4];
/// avg.reduce_input(&mut sum, &(-7i32).to_ne_bytes(), &2i32.to_ne_bytes())?;
/// avg.finish(&mut sum)?;
/// assert_eq!(i32::from_ne_bytes(sum), -2);
/// # Ok::<(), weft_runtime::exec::reduce::ReduceError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reduction {
    dtype: Dtype,
    op: Op,
    nranks: u32,
}

impl Reduction {
    /// A reduction over `nranks` ranks (at least 1).
    pub fn new(dtype: Dtype, op: Op, nranks: u32) -> Result<Self, ReduceError> {
        if nranks == 0 {
            return Err(ReduceError::NoRanks);
        }
        Ok(Reduction { dtype, op, nranks })
    }

    /// From the raw `ncclDataType_t` and `ncclRedOp_t` values of a C call.
    pub fn from_nccl(datatype: u32, op: u32, nranks: u32) -> Result<Self, ReduceError> {
        let dtype = Dtype::try_from(datatype).map_err(|_| ReduceError::UnknownDtype(datatype))?;
        let op = Op::try_from(op).map_err(|_| ReduceError::UnknownOp(op))?;
        Reduction::new(dtype, op, nranks)
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The rank count.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Whether inputs are transformed when they enter (float `Avg`: times `1/nranks`).
    pub fn has_pre_op(&self) -> bool {
        self.op == Op::Avg && self.dtype.is_float()
    }

    /// Whether the final sum needs [`finish`](Self::finish) (integer `Avg`).
    pub fn has_post_op(&self) -> bool {
        self.op == Op::Avg && !self.dtype.is_float()
    }

    /// `dst = pre(input)`: a rank's own input entering the reduction unreduced.
    pub fn copy_input(&self, dst: &mut [u8], input: &[u8]) -> Result<(), ReduceError> {
        if self.has_pre_op() {
            premul(self.dtype, self.nranks, dst, input)
        } else {
            check_pair(self.dtype, dst.len(), input.len())?;
            copy(dst, input)
        }
    }

    /// `dst = pre(input) ⊕ other`: a rank's own input meets a partial result.
    pub fn reduce_input(
        &self,
        dst: &mut [u8],
        input: &[u8],
        other: &[u8],
    ) -> Result<(), ReduceError> {
        binary_bytes(
            self.dtype,
            self.op,
            self.has_pre_op(),
            self.nranks,
            dst,
            input,
            other,
        )
    }

    /// `acc = pre(input) ⊕ acc`: as [`reduce_input`](Self::reduce_input), in place on the
    /// partial result.
    pub fn reduce_input_in_place(&self, acc: &mut [u8], input: &[u8]) -> Result<(), ReduceError> {
        in_place_bytes(
            self.dtype,
            self.op,
            self.has_pre_op(),
            self.nranks,
            acc,
            input,
        )
    }

    /// `dst = a ⊕ b` on two partial results (no pre-op; `Avg` sums).
    pub fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<(), ReduceError> {
        binary_bytes(self.dtype, self.op, false, self.nranks, dst, a, b)
    }

    /// `acc = src ⊕ acc` on two partial results (no pre-op; `Avg` sums).
    pub fn reduce_in_place(&self, acc: &mut [u8], src: &[u8]) -> Result<(), ReduceError> {
        in_place_bytes(self.dtype, self.op, false, self.nranks, acc, src)
    }

    /// The post-op on a final sum, in place: integer `Avg` divides by `nranks`; a no-op
    /// otherwise (the length is still checked).
    pub fn finish(&self, buf: &mut [u8]) -> Result<(), ReduceError> {
        if self.has_post_op() {
            finish_avg(self.dtype, buf, self.nranks)
        } else {
            check_whole(self.dtype, buf.len())
        }
    }
}

/// `dst = a ⊕ b` for one op, without `Avg`'s pre/post steps (`Avg` sums here; see
/// [`Reduction`] for the whole of `ncclAvg`).
pub fn reduce(dtype: Dtype, op: Op, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<(), ReduceError> {
    binary_bytes(dtype, op, false, 1, dst, a, b)
}

/// `acc = src ⊕ acc`, as [`reduce`] but in place.
pub fn reduce_in_place(
    dtype: Dtype,
    op: Op,
    acc: &mut [u8],
    src: &[u8],
) -> Result<(), ReduceError> {
    in_place_bytes(dtype, op, false, 1, acc, src)
}

/// `dst = src` (the executor's copy steps; [`crate::copy`]).
pub fn copy(dst: &mut [u8], src: &[u8]) -> Result<(), ReduceError> {
    if dst.len() != src.len() {
        return Err(ReduceError::LengthMismatch {
            dst: dst.len(),
            src: src.len(),
        });
    }
    crate::copy::copy_bytes(dst, src);
    Ok(())
}

/// `dst = src * scale` with NCCL's float-`Avg` `scale` for `nranks` (see the module
/// documentation), rounded to the element type; integers are copied unchanged.
pub fn premul(dtype: Dtype, nranks: u32, dst: &mut [u8], src: &[u8]) -> Result<(), ReduceError> {
    if nranks == 0 {
        return Err(ReduceError::NoRanks);
    }
    check_pair(dtype, dst.len(), src.len())?;
    with_element!(dtype, T => {
        let scale = T::avg_scale(nranks);
        if dtype.is_float() {
            unary_bytes::<T>(dst, src, |d, s| T::scale(scale, d, s));
        } else {
            dst.copy_from_slice(src);
        }
    });
    Ok(())
}

/// Integer `Avg`'s final step, in place: every element (a wrapped sum) divided by `nranks`,
/// truncating toward zero. Floats are left unchanged (they pre-multiply, see [`premul`]).
pub fn finish_avg(dtype: Dtype, buf: &mut [u8], nranks: u32) -> Result<(), ReduceError> {
    if nranks == 0 {
        return Err(ReduceError::NoRanks);
    }
    check_whole(dtype, buf.len())?;
    if dtype.is_float() || nranks == 1 {
        return Ok(());
    }
    let divisor = RankDivisor::new(nranks);
    with_element!(dtype, T => unary_in_place_bytes::<T>(buf, |b| {
        kernel::unary_in_place(|x: T| x.divide_ranks(&divisor), b)
    }));
    Ok(())
}

/// `dst = a ⊕ b` on typed slices (`Avg` sums; see [`Reduction`]).
pub fn reduce_typed<T: Element>(
    op: Op,
    dst: &mut [T],
    a: &[T],
    b: &[T],
) -> Result<(), ReduceError> {
    let size = T::DTYPE.size_of_elem();
    check_pair(T::DTYPE, dst.len() * size, a.len() * size)?;
    check_pair(T::DTYPE, dst.len() * size, b.len() * size)?;
    typed_binary::<T>(op, false, T::avg_scale(1), dst, a, b);
    Ok(())
}

/// `acc = src ⊕ acc` on typed slices (`Avg` sums; see [`Reduction`]).
pub fn reduce_typed_in_place<T: Element>(
    op: Op,
    acc: &mut [T],
    src: &[T],
) -> Result<(), ReduceError> {
    let size = T::DTYPE.size_of_elem();
    check_pair(T::DTYPE, acc.len() * size, src.len() * size)?;
    typed_in_place::<T>(op, false, T::avg_scale(1), acc, src);
    Ok(())
}

fn check_whole(dtype: Dtype, len: usize) -> Result<(), ReduceError> {
    if !len.is_multiple_of(dtype.size_of_elem()) {
        return Err(ReduceError::PartialElement { len, dtype });
    }
    Ok(())
}

fn check_pair(dtype: Dtype, dst: usize, src: usize) -> Result<(), ReduceError> {
    if dst != src {
        return Err(ReduceError::LengthMismatch { dst, src });
    }
    check_whole(dtype, dst)
}

#[inline]
fn typed_binary<T: Element>(op: Op, pre: bool, scale: T, dst: &mut [T], a: &[T], b: &[T]) {
    match (op, pre) {
        (Op::Sum | Op::Avg, false) => T::binary::<SUM, false>(scale, dst, a, b),
        (Op::Sum | Op::Avg, true) => T::binary::<SUM, true>(scale, dst, a, b),
        (Op::Prod, _) => T::binary::<PROD, false>(scale, dst, a, b),
        (Op::Min, _) => T::binary::<MIN, false>(scale, dst, a, b),
        (Op::Max, _) => T::binary::<MAX, false>(scale, dst, a, b),
    }
}

#[inline]
fn typed_in_place<T: Element>(op: Op, pre: bool, scale: T, acc: &mut [T], src: &[T]) {
    match (op, pre) {
        (Op::Sum | Op::Avg, false) => T::binary_in_place::<SUM, false>(scale, acc, src),
        (Op::Sum | Op::Avg, true) => T::binary_in_place::<SUM, true>(scale, acc, src),
        (Op::Prod, _) => T::binary_in_place::<PROD, false>(scale, acc, src),
        (Op::Min, _) => T::binary_in_place::<MIN, false>(scale, acc, src),
        (Op::Max, _) => T::binary_in_place::<MAX, false>(scale, acc, src),
    }
}

fn binary_bytes(
    dtype: Dtype,
    op: Op,
    pre: bool,
    nranks: u32,
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), ReduceError> {
    check_pair(dtype, dst.len(), a.len())?;
    check_pair(dtype, dst.len(), b.len())?;
    with_element!(dtype, T => {
        let scale = T::avg_scale(nranks);
        binary_view::<T>(dst, a, b, |d, x, y| typed_binary::<T>(op, pre, scale, d, x, y));
    });
    Ok(())
}

fn in_place_bytes(
    dtype: Dtype,
    op: Op,
    pre: bool,
    nranks: u32,
    acc: &mut [u8],
    src: &[u8],
) -> Result<(), ReduceError> {
    check_pair(dtype, acc.len(), src.len())?;
    with_element!(dtype, T => {
        let scale = T::avg_scale(nranks);
        in_place_view::<T>(acc, src, |d, x| typed_in_place::<T>(op, pre, scale, d, x));
    });
    Ok(())
}

/// Copies the common prefix of `src` into `dst`.
#[inline(always)]
fn copy_prefix(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, _) = dst.split_at_mut(n);
    let (src, _) = src.split_at(n);
    dst.copy_from_slice(src);
}

/// The first `n` elements of a staging block (all of it if `n` is larger).
#[inline(always)]
fn stage_prefix<T: Element>(stage: &mut T::Stage, n: usize) -> &mut [T] {
    let all = stage.as_mut();
    let n = n.min(all.len());
    all.split_at_mut(n).0
}

/// Elements per staging block.
const fn stage_elems<T: Element>() -> usize {
    element::STAGE_BYTES / T::DTYPE.size_of_elem()
}

/// A source operand: viewed as `[T]` when aligned for `T`, else read through a stage.
enum Input<'a, T> {
    Typed(&'a [T]),
    Bytes(&'a [u8]),
}

impl<'a, T: Element> Input<'a, T> {
    fn new(bytes: &'a [u8]) -> Self {
        match <[T]>::ref_from_bytes(bytes) {
            Ok(typed) => Input::Typed(typed),
            Err(e) => Input::Bytes(e.into_src()),
        }
    }

    /// Elements `start..start + n` (callers stay in bounds; out of bounds reads as empty).
    #[inline(always)]
    fn block<'s>(&'s self, start: usize, n: usize, stage: &'s mut T::Stage) -> &'s [T] {
        match self {
            Input::Typed(typed) => typed.get(start..start + n).unwrap_or_default(),
            Input::Bytes(bytes) => {
                let size = T::DTYPE.size_of_elem();
                let src = bytes
                    .get(start * size..(start + n) * size)
                    .unwrap_or_default();
                copy_prefix(stage.as_mut_bytes(), src);
                stage_prefix::<T>(stage, n)
            }
        }
    }
}

/// A destination operand: viewed as `[T]` when aligned for `T`, else written through a stage.
enum Output<'a, T> {
    Typed(&'a mut [T]),
    Bytes(&'a mut [u8]),
}

impl<'a, T: Element> Output<'a, T> {
    fn new(bytes: &'a mut [u8]) -> Self {
        match <[T]>::mut_from_bytes(bytes) {
            Ok(typed) => Output::Typed(typed),
            Err(e) => Output::Bytes(e.into_src()),
        }
    }

    /// Where to compute elements `start..start + n`; with `load`, staged with their values.
    #[inline(always)]
    fn block<'s>(
        &'s mut self,
        start: usize,
        n: usize,
        stage: &'s mut T::Stage,
        load: bool,
    ) -> &'s mut [T] {
        match self {
            Output::Typed(typed) => typed.get_mut(start..start + n).unwrap_or_default(),
            Output::Bytes(bytes) => {
                if load {
                    let size = T::DTYPE.size_of_elem();
                    let src = bytes
                        .get(start * size..(start + n) * size)
                        .unwrap_or_default();
                    copy_prefix(stage.as_mut_bytes(), src);
                }
                stage_prefix::<T>(stage, n)
            }
        }
    }

    /// Writes a staged block back (nothing to do for a typed view).
    #[inline(always)]
    fn store(&mut self, start: usize, n: usize, stage: &T::Stage) {
        if let Output::Bytes(bytes) = self {
            let size = T::DTYPE.size_of_elem();
            if let Some(dst) = bytes.get_mut(start * size..(start + n) * size) {
                copy_prefix(dst, stage.as_bytes());
            }
        }
    }
}

/// Runs `kernel` on typed views of byte slices of equal, whole-element lengths: in one call
/// when every slice is aligned for `T`, else block by block, staging only the misaligned
/// operands in aligned stack copies.
#[inline(always)]
fn binary_view<T: Element>(
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
    kernel: impl Fn(&mut [T], &[T], &[T]),
) {
    let count = dst.len() / T::DTYPE.size_of_elem();
    let (mut d, x, y) = (
        Output::<T>::new(dst),
        Input::<T>::new(a),
        Input::<T>::new(b),
    );
    if let (Output::Typed(d), Input::Typed(x), Input::Typed(y)) = (&mut d, &x, &y) {
        kernel(d, x, y);
        return;
    }
    let (mut stage_d, mut stage_a, mut stage_b) = (
        T::Stage::new_zeroed(),
        T::Stage::new_zeroed(),
        T::Stage::new_zeroed(),
    );
    let mut start = 0;
    while start < count {
        let n = stage_elems::<T>().min(count - start);
        let xs = x.block(start, n, &mut stage_a);
        let ys = y.block(start, n, &mut stage_b);
        kernel(d.block(start, n, &mut stage_d, false), xs, ys);
        d.store(start, n, &stage_d);
        start += n;
    }
}

/// As [`binary_view`], for `kernel(acc, src)` updating `acc` in place.
#[inline(always)]
fn in_place_view<T: Element>(acc: &mut [u8], src: &[u8], kernel: impl Fn(&mut [T], &[T])) {
    dst_src_view(acc, src, true, kernel);
}

/// As [`binary_view`], for `kernel(dst, src)` writing `dst` without reading it.
#[inline(always)]
fn unary_bytes<T: Element>(dst: &mut [u8], src: &[u8], kernel: impl Fn(&mut [T], &[T])) {
    dst_src_view(dst, src, false, kernel);
}

/// The staging loop behind [`in_place_view`] and [`unary_bytes`]: `load_dst` says whether a
/// staged destination block must first hold the destination's current values.
#[inline(always)]
fn dst_src_view<T: Element>(
    dst: &mut [u8],
    src: &[u8],
    load_dst: bool,
    kernel: impl Fn(&mut [T], &[T]),
) {
    let count = dst.len() / T::DTYPE.size_of_elem();
    let (mut d, x) = (Output::<T>::new(dst), Input::<T>::new(src));
    if let (Output::Typed(d), Input::Typed(x)) = (&mut d, &x) {
        kernel(d, x);
        return;
    }
    let (mut stage_d, mut stage_x) = (T::Stage::new_zeroed(), T::Stage::new_zeroed());
    let mut start = 0;
    while start < count {
        let n = stage_elems::<T>().min(count - start);
        let xs = x.block(start, n, &mut stage_x);
        kernel(d.block(start, n, &mut stage_d, load_dst), xs);
        d.store(start, n, &stage_d);
        start += n;
    }
}

/// As [`binary_view`], for `kernel(buf)` in place.
#[inline(always)]
fn unary_in_place_bytes<T: Element>(buf: &mut [u8], kernel: impl Fn(&mut [T])) {
    let count = buf.len() / T::DTYPE.size_of_elem();
    let mut d = Output::<T>::new(buf);
    if let Output::Typed(d) = &mut d {
        kernel(d);
        return;
    }
    let mut stage = T::Stage::new_zeroed();
    let mut start = 0;
    while start < count {
        let n = stage_elems::<T>().min(count - start);
        kernel(d.block(start, n, &mut stage, true));
        d.store(start, n, &stage);
        start += n;
    }
}
