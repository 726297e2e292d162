//! NCCL's IB protocol, the part that is plain data: the FIFO entry a receiver RDMA-writes
//! into the sender's memory for each posted buffer, the immediate values that end a message,
//! and how a message is split over the connection's QPs.
//!
//! The flow of one request (slot `s = (seq - 1) % SLOTS`):
//! 1. The receiver posts one receive per QP (for the immediate), then RDMA-writes its
//!    `n` entries (buffer address, rkey, capacity, tag, `seq`, `n`) into slot `s` of the
//!    sender's FIFO.
//! 2. The sender's `isend` sees `seq` in slot `s`, matches its tag, and once all `n` sends of
//!    the group are there, RDMA-writes each message straight into its buffer, split over the
//!    QPs; the last write on each QP carries an immediate (the size for a single receive,
//!    [`IMM_SIZES`] when the sizes were RDMA-written to the receiver's size record first).
//! 3. Each side's request is done when every QP's signaled completion for it arrived.
//!
//! Both ends must share byte order (the entries are native structs), as in NCCL.

/// Requests in flight per comm (NCCL's `NCCL_NET_IB_MAX_REQUESTS`).
pub const SLOTS: usize = crate::NET_MAX_REQUESTS;
/// Buffers per grouped receive.
pub const MAX_RECVS: usize = crate::NET_MAX_RECVS;
/// The largest message: sizes travel in 31 bits of an immediate.
pub const MAX_MESSAGE: usize = 0x7fff_ffff;
/// Immediate meaning "the sizes are in your size record" (grouped receives).
pub const IMM_SIZES: u32 = 0xffff_fffe;
/// Immediate meaning "the sender refused this request: no buffer of the group has its tag"
/// (the tag is in the first word of the size record): the receiver fails instead of waiting
/// for data that will not come.
pub const IMM_REFUSED_TAG: u32 = 0xffff_fffd;
/// Immediate meaning "the sender refused this request: its message is larger than the
/// buffer" (the message's size is in the first word of the size record).
pub const IMM_REFUSED_SIZE: u32 = 0xffff_ffff;
/// Message parts on each QP are aligned to this many bytes (NCCL aligns to 128).
pub const SPLIT_ALIGN: usize = 128;

/// One posted receive buffer as the sender sees it. `seq` is written last (highest
/// address) and read first: NICs write an RDMA payload in address order, which NCCL's FIFO
/// relies on as well.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FifoEntry {
    /// Where the data goes.
    pub addr: u64,
    /// Where grouped sizes go (the receiver's size record for this slot).
    pub sizes_addr: u64,
    /// The rkey of `addr`.
    pub rkey: u32,
    /// The rkey of `sizes_addr`.
    pub sizes_rkey: u32,
    /// Capacity in bytes.
    pub size: u32,
    /// The tag a send must carry.
    pub tag: u32,
    /// How many entries this group has (1..=[`MAX_RECVS`]).
    pub nreqs: u32,
    /// The group's sequence number, from 1; 0 means "never written".
    pub seq: u32,
}

/// The bytes of one slot of the FIFO: [`MAX_RECVS`] entries.
pub const SLOT_BYTES: usize = MAX_RECVS * size_of::<FifoEntry>();
const _: () = assert!(size_of::<FifoEntry>() == 40);

/// The slot of sequence number `seq` (from 1).
pub fn slot_of(seq: u32) -> usize {
    (seq.wrapping_sub(1) as usize) % SLOTS
}

/// The part of a `size`-byte message that QP `qp` of `nqps` carries: (offset, length).
/// Parts are [`SPLIT_ALIGN`]-aligned and in QP order; trailing QPs may carry nothing.
pub fn split(size: usize, qp: usize, nqps: usize) -> (usize, usize) {
    let nqps = nqps.max(1);
    let per = size.div_ceil(nqps).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
    let offset = (per * qp).min(size);
    let len = per.min(size - offset);
    (offset, len)
}

/// What a receiver learns from the immediate of a completed request, with `n` buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImmMeaning {
    /// A single receive's size.
    Size(usize),
    /// Read the sizes from the size record.
    SizesInRecord,
    /// The sender refused the request: a tag not in the group.
    RefusedTag,
    /// The sender refused the request: a message larger than its buffer.
    RefusedSize,
}

/// Decodes an immediate.
pub fn decode_imm(imm: u32) -> ImmMeaning {
    match imm {
        IMM_REFUSED_TAG => ImmMeaning::RefusedTag,
        IMM_REFUSED_SIZE => ImmMeaning::RefusedSize,
        IMM_SIZES => ImmMeaning::SizesInRecord,
        size => ImmMeaning::Size(size as usize),
    }
}

/// Matches a send's tag against a group's entries, skipping those already taken.
pub fn match_tag(entries: &[FifoEntry], taken: &[bool], tag: u32) -> Option<usize> {
    entries
        .iter()
        .zip(taken)
        .position(|(e, &t)| !t && e.tag == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_byte_once_in_order() {
        for nqps in 1..=4 {
            for size in [0, 1, 127, 128, 129, 1000, 4096, 65_537, 16 << 20] {
                let mut next = 0;
                for qp in 0..nqps {
                    let (off, len) = split(size, qp, nqps);
                    assert!(off <= size && off + len <= size);
                    if len > 0 {
                        assert_eq!(off, next, "size {size} nqps {nqps} qp {qp}");
                        assert_eq!(off % SPLIT_ALIGN, 0);
                        next = off + len;
                    }
                }
                assert_eq!(next, size, "size {size} nqps {nqps}");
            }
        }
        assert_eq!(split(1000, 1, 2), (512, 488));
        assert_eq!(split(100, 1, 2), (100, 0), "a small message stays on QP 0");
    }

    #[test]
    fn slots_wrap_and_immediates_decode() {
        assert_eq!(slot_of(1), 0);
        assert_eq!(slot_of(32), 31);
        assert_eq!(slot_of(33), 0);
        assert_eq!(slot_of(0), (u32::MAX as usize) % SLOTS);
        assert_eq!(decode_imm(12345), ImmMeaning::Size(12345));
        assert_eq!(
            decode_imm(MAX_MESSAGE as u32),
            ImmMeaning::Size(MAX_MESSAGE)
        );
        assert_eq!(decode_imm(IMM_SIZES), ImmMeaning::SizesInRecord);
        assert_eq!(decode_imm(IMM_REFUSED_TAG), ImmMeaning::RefusedTag);
        assert_eq!(decode_imm(IMM_REFUSED_SIZE), ImmMeaning::RefusedSize);
    }

    #[test]
    fn tags_match_the_first_free_entry() {
        let e = |tag| FifoEntry {
            tag,
            ..FifoEntry::default()
        };
        let entries = [e(7), e(9), e(7)];
        assert_eq!(match_tag(&entries, &[false, false, false], 7), Some(0));
        assert_eq!(match_tag(&entries, &[true, false, false], 7), Some(2));
        assert_eq!(match_tag(&entries, &[true, false, true], 7), None);
        assert_eq!(match_tag(&entries, &[false; 3], 8), None);
    }
}
