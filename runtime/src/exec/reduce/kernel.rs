//! The element-wise loops, written once and compiled twice on x86-64: for the baseline
//! (SSE2) and, chosen at run time, for AVX2.
//!
//! The loops are plain `zip`s over typed slices: no bounds checks, no branches between
//! elements, so LLVM unrolls and vectorizes them. Each is `#[inline(always)]` so that the
//! AVX2 copy gets the element function inlined and vectorized with 256-bit registers.
//! Slices of different lengths are processed up to the shortest (callers check lengths).

#[cfg(test)]
thread_local! {
    /// Set by tests to run the baseline (portable) loops on a CPU that has AVX2.
    pub(super) static PORTABLE_ONLY: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether to use the AVX2 copies (cached by `is_x86_feature_detected!`).
#[inline(always)]
pub(super) fn avx2() -> bool {
    #[cfg(test)]
    if PORTABLE_ONLY.with(core::cell::Cell::get) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline(always)]
fn binary_loop<T: Copy, F: Fn(T, T) -> T>(f: F, dst: &mut [T], a: &[T], b: &[T]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(x, y);
    }
}

#[inline(always)]
fn binary_in_place_loop<T: Copy, F: Fn(T, T) -> T>(f: F, acc: &mut [T], src: &[T]) {
    for (d, &x) in acc.iter_mut().zip(src) {
        *d = f(*d, x);
    }
}

#[inline(always)]
fn unary_loop<T: Copy, F: Fn(T) -> T>(f: F, dst: &mut [T], src: &[T]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = f(x);
    }
}

#[inline(always)]
fn unary_in_place_loop<T: Copy, F: Fn(T) -> T>(f: F, buf: &mut [T]) {
    for d in buf.iter_mut() {
        *d = f(*d);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn binary<T: Copy, F: Fn(T, T) -> T>(f: F, dst: &mut [T], a: &[T], b: &[T]) {
        super::binary_loop(f, dst, a, b);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn binary_in_place<T: Copy, F: Fn(T, T) -> T>(
        f: F,
        acc: &mut [T],
        src: &[T],
    ) {
        super::binary_in_place_loop(f, acc, src);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn unary<T: Copy, F: Fn(T) -> T>(f: F, dst: &mut [T], src: &[T]) {
        super::unary_loop(f, dst, src);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn unary_in_place<T: Copy, F: Fn(T) -> T>(f: F, buf: &mut [T]) {
        super::unary_in_place_loop(f, buf);
    }
}

/// `dst[i] = f(a[i], b[i])`.
#[inline(always)]
pub(super) fn binary<T: Copy, F: Fn(T, T) -> T>(f: F, dst: &mut [T], a: &[T], b: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 support was detected just above, the only precondition.
        unsafe { avx2::binary(f, dst, a, b) };
        return;
    }
    binary_loop(f, dst, a, b);
}

/// `acc[i] = f(acc[i], src[i])`.
#[inline(always)]
pub(super) fn binary_in_place<T: Copy, F: Fn(T, T) -> T>(f: F, acc: &mut [T], src: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 support was detected just above, the only precondition.
        unsafe { avx2::binary_in_place(f, acc, src) };
        return;
    }
    binary_in_place_loop(f, acc, src);
}

/// `dst[i] = f(src[i])`.
#[inline(always)]
pub(super) fn unary<T: Copy, F: Fn(T) -> T>(f: F, dst: &mut [T], src: &[T]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 support was detected just above, the only precondition.
        unsafe { avx2::unary(f, dst, src) };
        return;
    }
    unary_loop(f, dst, src);
}

/// `buf[i] = f(buf[i])`.
#[inline(always)]
pub(super) fn unary_in_place<T: Copy, F: Fn(T) -> T>(f: F, buf: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 support was detected just above, the only precondition.
        unsafe { avx2::unary_in_place(f, buf) };
        return;
    }
    unary_in_place_loop(f, buf);
}
