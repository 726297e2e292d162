//! The user's buffers as the executor's threads see them: raw pointers with lengths.
//!
//! NCCL lets a call's input and output alias (in-place all-reduce: the same buffer; in-place
//! all-gather: the input is the rank's block of the output), which Rust references cannot
//! express, and the buffers are shared by every channel's thread. So the executor keeps raw
//! pointers and makes a slice only for the few bytes one operation touches, never holding an
//! input slice and an output slice that overlap at the same time ([`Overlap`] decides which
//! path a step takes).

use std::ops::Range;

use super::error::ExecError;

/// A call's input and output: `input_len` readable bytes at `input`, `output_len` writable
/// bytes at `output`, possibly overlapping.
#[derive(Debug, Clone, Copy)]
pub struct RawBuffers {
    input: *const u8,
    input_len: usize,
    output: *mut u8,
    output_len: usize,
}

// SAFETY: a `RawBuffers` is only a pair of addresses; whoever builds one (`RawBuffers::new`,
// an `unsafe fn`) promises the memory stays valid until every thread using it is done, and
// the executor gives each channel's thread disjoint element ranges to write.
unsafe impl Send for RawBuffers {}
// SAFETY: as above; shared access only reads the addresses.
unsafe impl Sync for RawBuffers {}

/// How an input range and an output range of one step relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// No byte in common.
    Disjoint,
    /// The very same bytes (an in-place call).
    Same,
    /// Some bytes in common, not all: only memmove-style copies are safe.
    Partial,
}

impl RawBuffers {
    /// # Safety
    ///
    /// `input` must be valid for reads of `input_len` bytes and `output` for writes of
    /// `output_len` bytes (either may be dangling when its length is 0) for as long as this
    /// value or a copy is used, and nothing outside the executor may access the output while
    /// it runs. The two may overlap.
    pub unsafe fn new(
        input: *const u8,
        input_len: usize,
        output: *mut u8,
        output_len: usize,
    ) -> Self {
        RawBuffers {
            input,
            input_len,
            output,
            output_len,
        }
    }

    /// Readable bytes at the input.
    pub fn input_len(&self) -> usize {
        self.input_len
    }

    /// Writable bytes at the output.
    pub fn output_len(&self) -> usize {
        self.output_len
    }

    fn check(range: &Range<usize>, len: usize, what: &'static str) -> Result<(), ExecError> {
        if range.start <= range.end && range.end <= len {
            Ok(())
        } else {
            Err(ExecError::BadBuffer {
                what,
                needed: range.end,
                given: len,
            })
        }
    }

    /// `input[range]`.
    ///
    /// # Safety
    ///
    /// No `&mut` to an overlapping part of the output may be alive while the slice is.
    pub unsafe fn input(&self, range: Range<usize>) -> Result<&[u8], ExecError> {
        Self::check(&range, self.input_len, "input")?;
        // SAFETY: in bounds (checked), valid for reads (constructor contract), and no
        // overlapping mutable slice is alive (this function's contract).
        Ok(
            unsafe {
                std::slice::from_raw_parts(self.input.wrapping_add(range.start), range.len())
            },
        )
    }

    /// `output[range]`.
    ///
    /// # Safety
    ///
    /// No other slice of an overlapping part of the input or output may be alive while this
    /// one is (other threads work on disjoint ranges).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn output(&self, range: Range<usize>) -> Result<&mut [u8], ExecError> {
        Self::check(&range, self.output_len, "output")?;
        // SAFETY: in bounds (checked), valid for writes (constructor contract), exclusive
        // (this function's contract).
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.output.wrapping_add(range.start), range.len())
        })
    }

    /// How `input[input]` and `output[output]` relate.
    pub fn overlap(&self, input: &Range<usize>, output: &Range<usize>) -> Overlap {
        let a = (self.input as usize).saturating_add(input.start);
        let b = (self.output as usize).saturating_add(output.start);
        let (a_end, b_end) = (
            a.saturating_add(input.len()),
            b.saturating_add(output.len()),
        );
        if a == b && a_end == b_end {
            Overlap::Same
        } else if a_end <= b || b_end <= a {
            Overlap::Disjoint
        } else {
            Overlap::Partial
        }
    }

    /// `output[output] = input[input]` (same length), correct for any overlap.
    pub fn copy_within(&self, input: Range<usize>, output: Range<usize>) -> Result<(), ExecError> {
        Self::check(&input, self.input_len, "input")?;
        Self::check(&output, self.output_len, "output")?;
        let len = input.len().min(output.len());
        let (input, output) = (
            input.start..input.start + len,
            output.start..output.start + len,
        );
        if len == 0 {
            return Ok(());
        }
        match self.overlap(&input, &output) {
            Overlap::Same => {}
            Overlap::Disjoint => {
                // SAFETY: the ranges are disjoint, and the caller holds no other slice of
                // them.
                let src = unsafe { self.input(input)? };
                // SAFETY: as above.
                let dst = unsafe { self.output(output)? };
                // Through weft's copy loop, not `ptr::copy` (glibc's `rep movsb`).
                crate::copy::copy_bytes(dst, src);
            }
            Overlap::Partial => {
                // SAFETY: both ranges are in bounds (checked) of memory valid for reads /
                // writes (constructor contract); `copy` is a memmove, so the overlap is
                // fine; no slice of these ranges is alive (the caller holds none).
                unsafe {
                    std::ptr::copy(
                        self.input.wrapping_add(input.start),
                        self.output.wrapping_add(output.start),
                        len,
                    )
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three overlaps, both directions of a partial one, and lengths on either side of
    /// the vector copy's threshold.
    #[test]
    fn copy_within_is_right_for_every_overlap() {
        for len in [0, 1, 100, crate::copy::VECTOR_MIN + 77, 5000] {
            for (from, to) in [(0, 6000), (6000, 0), (0, 0), (3000, 3003), (3003, 3000)] {
                let mut buf: Vec<u8> = (0..12000u32).map(|i| (i * 31 + 7) as u8).collect();
                let mut want = buf.clone();
                want.copy_within(from..from + len, to);
                // SAFETY: one buffer as both input and output, valid for the whole test.
                let raw = unsafe {
                    RawBuffers::new(buf.as_ptr(), buf.len(), buf.as_mut_ptr(), buf.len())
                };
                raw.copy_within(from..from + len, to..to + len).unwrap();
                assert_eq!(buf, want, "len {len} from {from} to {to}");
            }
        }
    }

    #[test]
    fn copy_within_refuses_ranges_past_the_end() {
        let mut buf = vec![0u8; 64];
        // SAFETY: valid for the whole test.
        let raw = unsafe { RawBuffers::new(buf.as_ptr(), 64, buf.as_mut_ptr(), 64) };
        assert!(raw.copy_within(0..65, 0..65).is_err());
        assert!(raw.copy_within(0..8, 60..68).is_err());
    }
}
