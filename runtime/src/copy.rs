//! Bulk copies between host buffers and FIFO slots (the CPU executor's and the host
//! connections'), in 256-bit loads and stores.
//!
//! glibc's `memcpy` moves sizes from about 2 KiB up to its non-temporal threshold with
//! `rep movsb`. On the 2-core AMD EPYC build VM that ran at 1.2-1.8 GB/s on 2026-11-27, where
//! the same copies through 256-bit loads and stores ran at 3.3-7.1 GB/s: `weft perf
//! all-reduce --ranks 2`, 64 KiB to 16 MiB, plain and with
//! `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=1000000000` steering glibc off
//! `rep movsb` (docs/benchmarks.md). Every FIFO step of the CPU executor is such a copy, so
//! copies of at least [`VECTOR_MIN`] bytes take an AVX loop where the CPU has AVX. The loop
//! keeps its vectors in named registers (see `copy_avx`): with that, 2-rank all-reduces of
//! 128 KiB to 4 MiB ran at 8.5-11 GB/s on the same VM, 1.4-2.4x Open MPI's in the same runs.

/// Bytes from which [`copy_bytes`] uses the AVX loop (glibc's `rep movsb` starts near here).
pub const VECTOR_MIN: usize = 2048;

/// `dst = src`, as `copy_from_slice` (which panics on different lengths; so does this).
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between buffers of different lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= VECTOR_MIN && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above); the lengths are equal (asserted).
        unsafe { copy_avx(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

/// A head up to the first 64-byte boundary of `dst` through `copy_from_slice`, then per
/// 128 bytes (two whole cache lines of `dst`) four 32-byte loads and four aligned stores,
/// then the tail. (Four stores per iteration, each a quarter of the stride, also keep LLVM
/// from turning the loop back into a `memcpy` call.) Aligned stores matter: unaligned ones
/// straddle cache lines, and on the build VM they ran at half the speed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn copy_avx(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_store_si256};
    const BLOCK: usize = 128;
    let n = dst.len().min(src.len());
    let head = dst.as_ptr().align_offset(64).min(n);
    if let (Some(d), Some(s)) = (dst.get_mut(..head), src.get(..head)) {
        d.copy_from_slice(s);
    }
    let blocks = (n - head) / BLOCK;
    let s = src.as_ptr().wrapping_add(head);
    let d = dst.as_mut_ptr().wrapping_add(head);
    for b in 0..blocks {
        // Four named registers, not an array: LLVM kept an array of vectors on the stack,
        // moved it there twice per iteration, and the loads that straddled those stores
        // stalled on failed store forwarding (85 % of the loop's samples on the build VM).
        let at = b * BLOCK;
        let src = |k: usize| s.wrapping_add(at + 32 * k).cast::<__m256i>();
        let dst = |k: usize| d.wrapping_add(at + 32 * k).cast::<__m256i>();
        // SAFETY: (the four loads) `head + at + 32 * k + 32 <= n`, within `src`; unaligned.
        let v0 = unsafe { _mm256_loadu_si256(src(0)) };
        // SAFETY: as above.
        let v1 = unsafe { _mm256_loadu_si256(src(1)) };
        // SAFETY: as above.
        let v2 = unsafe { _mm256_loadu_si256(src(2)) };
        // SAFETY: as above.
        let v3 = unsafe { _mm256_loadu_si256(src(3)) };
        // SAFETY: (the four stores) `head + at + 32 * k + 32 <= n`, within `dst`, and 32-byte
        // aligned (`d` is 64-byte aligned, `at` a multiple of 128); `dst` and `src` do not
        // overlap (a `&mut` and a `&` slice).
        unsafe { _mm256_store_si256(dst(0), v0) };
        // SAFETY: as above.
        unsafe { _mm256_store_si256(dst(1), v1) };
        // SAFETY: as above.
        unsafe { _mm256_store_si256(dst(2), v2) };
        // SAFETY: as above.
        unsafe { _mm256_store_si256(dst(3), v3) };
    }
    let tail = head + blocks * BLOCK;
    if let (Some(d), Some(s)) = (dst.get_mut(tail..n), src.get(tail..n)) {
        d.copy_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the vector threshold and the block size, at every alignment
    /// offset of both buffers: the bytes arrive, and nothing past the end is touched.
    #[test]
    fn copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in (0..300)
            .chain(VECTOR_MIN - 130..VECTOR_MIN + 260)
            .chain([8191, 8192, 8193])
        {
            for (so, doff) in [(0, 0), (1, 0), (0, 3), (5, 17), (31, 1)] {
                let mut dst = vec![0xeeu8; len + doff + 64];
                copy_bytes(&mut dst[doff..doff + len], &src[so..so + len]);
                assert_eq!(
                    &dst[doff..doff + len],
                    &src[so..so + len],
                    "len {len} at {so}/{doff}"
                );
                assert!(dst[..doff].iter().all(|&b| b == 0xee));
                assert!(dst[doff + len..].iter().all(|&b| b == 0xee));
            }
        }
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn different_lengths_panic_as_copy_from_slice_does() {
        copy_bytes(&mut [0u8; 4], &[1u8; 5]);
    }
}
