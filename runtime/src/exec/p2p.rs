//! Point-to-point transfers over one FIFO connection: a message is cut into slices of the
//! connection's slice size, one post each (an empty message is one empty post, so that a
//! zero-byte send still pairs with its receive).

use std::ops::Range;

use weft_core::fifo::FifoGeometry;

use super::buffers::RawBuffers;
use super::error::ExecError;
use crate::conn::{FifoRecvEnd, FifoSendEnd};

/// The slices of a message of `total` bytes with slices of `cap` bytes: `(offset, len)`.
fn slices(total: usize, cap: usize) -> impl Iterator<Item = (usize, usize)> {
    let cap = cap.max(1);
    let n = total.div_ceil(cap).max(1);
    (0..n).map(move |k| {
        let start = k.saturating_mul(cap);
        (start, cap.min(total.saturating_sub(start)))
    })
}

/// Sends `buf.input[range]` to the peer of `end`.
pub fn send(end: &mut FifoSendEnd, buf: &RawBuffers, range: Range<usize>) -> Result<(), ExecError> {
    end.reload(FifoGeometry::P2P)?;
    let cap = end.slice_bytes();
    for (offset, len) in slices(range.len(), cap) {
        let start = range.start.saturating_add(offset);
        let mut slot = end.acquire()?;
        // SAFETY: only this input slice is alive; sends never write the user's buffers.
        let src = unsafe { buf.input(start..start.saturating_add(len))? };
        let dst = slot.buf().get_mut(..len).ok_or(ExecError::BadBuffer {
            what: "FIFO slice",
            needed: len,
            given: cap,
        })?;
        crate::copy::copy_bytes(dst, src);
        slot.post(len)?;
    }
    Ok(())
}

/// Receives into `buf.output[range]` from the peer of `end`; every slice must have the size
/// this side expects (the peer sent the same number of bytes).
pub fn recv(end: &mut FifoRecvEnd, buf: &RawBuffers, range: Range<usize>) -> Result<(), ExecError> {
    end.reload(FifoGeometry::P2P)?;
    let cap = end.slice_bytes();
    let conn = end.conn();
    for (offset, len) in slices(range.len(), cap) {
        let start = range.start.saturating_add(offset);
        let slot = end.acquire()?;
        if slot.len() != len {
            return Err(ExecError::SizeMismatch {
                conn,
                expected: len,
                got: slot.len(),
            });
        }
        // SAFETY: only this output slice is alive, and no other thread writes this range.
        let dst = unsafe { buf.output(start..start.saturating_add(len))? };
        crate::copy::copy_bytes(dst, slot.data());
        slot.release()?;
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn slices_cover_the_message() {
        assert_eq!(slices(0, 10).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(slices(10, 10).collect::<Vec<_>>(), [(0, 10)]);
        assert_eq!(
            slices(23, 10).collect::<Vec<_>>(),
            [(0, 10), (10, 10), (20, 3)]
        );
    }
}
