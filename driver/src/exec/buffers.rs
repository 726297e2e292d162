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
        if len == 0 || self.overlap(&input, &output) == Overlap::Same {
            return Ok(());
        }
        // SAFETY: both ranges are in bounds (checked) of memory valid for reads / writes
        // (constructor contract); `copy` is a memmove, so overlap is fine; no slice of these
        // ranges is alive (the caller holds none across this call).
        unsafe {
            std::ptr::copy(
                self.input.wrapping_add(input.start),
                self.output.wrapping_add(output.start),
                len,
            )
        };
        Ok(())
    }
}
