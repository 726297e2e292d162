//! Splitting a collective's elements over channels.
//!
//! Each channel gets one contiguous part of `count`, like NCCL's channel-balanced distribution
//! (`ncclCollCbdPart`): parts are equal and a multiple of 16 bytes, except the last non-empty
//! one, which ends at `count`. With few elements the trailing channels get empty parts; their
//! programs have no steps.
//!
//! For ReduceScatter and AllGather the part is of the per-rank `count`; a step then touches
//! that same part of every rank's block (`rank * count + part`).

use super::{Collective, SchedError, align_up, div_up};

/// Parts start on this many bytes (NCCL aligns channel parts and the last all-reduce chunk to
/// 16 bytes, the width of its vector loads).
pub const ALIGN_BYTES: usize = 16;

/// A channel's share of the elements: `offset..offset + len`, within `0..count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelPart {
    pub offset: usize,
    pub len: usize,
}

impl ChannelPart {
    /// One past the last element (never overflows: `offset + len <= count`).
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }
}

/// Elements per [`ALIGN_BYTES`] alignment unit: the smallest element count whose byte size is a
/// multiple of 16 (16 for bytes, 4 for `f32`, 2 for `f64`, 1 for 16-byte and larger powers of two).
pub const fn align_elems(elem_size: usize) -> Result<usize, SchedError> {
    if elem_size == 0 {
        return Err(SchedError::ZeroElementSize);
    }
    // 16 / gcd(16, elem_size): gcd is the largest power of two dividing both, 2^min(tz, 4).
    let twos = elem_size.trailing_zeros();
    let shift = if twos >= 4 { 4 } else { twos };
    match ALIGN_BYTES.checked_shr(shift) {
        Some(v) => Ok(v),
        None => Ok(1),
    }
}

/// Bytes of ring traffic below which NCCL does not open another channel
/// (`MinTrafficPerChannel`).
pub const MIN_TRAFFIC_PER_CHANNEL: usize = 32 << 10;

/// How many of `max_channels` channels a call should use: enough that each carries at least
/// [`MIN_TRAFFIC_PER_CHANNEL`] bytes of traffic, as NCCL decides (traffic per byte of data: 2
/// for AllReduce, `nranks` for ReduceScatter / AllGather on the per-rank count, 1 otherwise).
/// Small calls then run on one channel, which is what keeps their latency low. At least 1.
pub fn channels_for(
    collective: Collective,
    count: usize,
    elem_size: usize,
    nranks: usize,
    max_channels: u32,
) -> u32 {
    let per_byte = match collective {
        Collective::AllReduce => 2,
        Collective::ReduceScatter | Collective::AllGather => nranks,
        Collective::Broadcast { .. } | Collective::Reduce { .. } => 1,
    };
    let traffic = count.saturating_mul(elem_size).saturating_mul(per_byte);
    let wanted = div_up(traffic, MIN_TRAFFIC_PER_CHANNEL);
    u32::try_from(wanted)
        .unwrap_or(u32::MAX)
        .clamp(1, max_channels.max(1))
}

/// The part of `count` elements that `channel` of `nchannels` handles, aligned to
/// `align_elems` (see [`align_elems`]; 0 is treated as 1).
pub const fn channel_part(
    count: usize,
    align_elems: usize,
    nchannels: u32,
    channel: u32,
) -> Result<ChannelPart, SchedError> {
    if nchannels == 0 {
        return Err(SchedError::NoChannels);
    }
    if channel >= nchannels {
        return Err(SchedError::ChannelOutOfRange { channel, nchannels });
    }
    let align = if align_elems == 0 { 1 } else { align_elems };
    let per_channel = align_up(div_up(count, nchannels as usize), align);
    let start = (channel as usize).saturating_mul(per_channel);
    let offset = if start < count { start } else { count };
    let rest = count.saturating_sub(offset);
    let len = if per_channel < rest {
        per_channel
    } else {
        rest
    };
    Ok(ChannelPart { offset, len })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn alignment_in_elements() {
        assert_eq!(align_elems(1), Ok(16));
        assert_eq!(align_elems(2), Ok(8));
        assert_eq!(align_elems(4), Ok(4));
        assert_eq!(align_elems(8), Ok(2));
        assert_eq!(align_elems(16), Ok(1));
        assert_eq!(align_elems(32), Ok(1));
        assert_eq!(align_elems(12), Ok(4)); // 48 bytes
        assert_eq!(align_elems(3), Ok(16));
        assert_eq!(align_elems(0), Err(SchedError::ZeroElementSize));
    }

    #[test]
    fn small_counts_leave_channels_empty() {
        // 7 floats over 4 channels: one 16-byte unit per channel, the last ones empty.
        let parts: std::vec::Vec<_> = (0..4).map(|c| channel_part(7, 4, 4, c).unwrap()).collect();
        assert_eq!(
            parts,
            [
                ChannelPart { offset: 0, len: 4 },
                ChannelPart { offset: 4, len: 3 },
                ChannelPart { offset: 7, len: 0 },
                ChannelPart { offset: 7, len: 0 },
            ]
        );
        assert_eq!(channel_part(5, 4, 0, 0), Err(SchedError::NoChannels));
        assert_eq!(
            channel_part(5, 4, 2, 2),
            Err(SchedError::ChannelOutOfRange {
                channel: 2,
                nchannels: 2
            })
        );
    }

    #[test]
    fn small_calls_use_few_channels() {
        let ar = Collective::AllReduce;
        assert_eq!(channels_for(ar, 2, 4, 8, 24), 1);
        // 16 KiB of all-reduce data is 32 KiB of traffic: one channel; one byte more, two.
        assert_eq!(channels_for(ar, 4096, 4, 8, 24), 1);
        assert_eq!(channels_for(ar, 4097, 4, 8, 24), 2);
        assert_eq!(channels_for(ar, 1 << 28, 4, 8, 24), 24);
        // All-gather traffic grows with the ranks.
        assert_eq!(channels_for(Collective::AllGather, 1024, 4, 8, 24), 1);
        assert_eq!(channels_for(Collective::AllGather, 1024, 4, 16, 24), 2);
        assert_eq!(
            channels_for(Collective::Broadcast { root: 0 }, 0, 4, 8, 0),
            1
        );
        assert_eq!(channels_for(ar, usize::MAX, 8, 8, 32), 32);
    }

    proptest::proptest! {
        #[test]
        fn parts_tile_the_count(count in 0usize..100_000, align in 0usize..20, nch in 1u32..40) {
            let mut next = 0;
            for c in 0..nch {
                let p = channel_part(count, align, nch, c).unwrap();
                proptest::prop_assert_eq!(p.offset, next);
                if p.len != 0 && p.end() != count {
                    proptest::prop_assert_eq!(p.len % align.max(1), 0);
                }
                next = p.end();
            }
            proptest::prop_assert_eq!(next, count);
        }

        #[test]
        fn huge_counts_do_not_panic(count: usize, align: usize, nch in 1u32.., c: u32) {
            if let Ok(p) = channel_part(count, align, nch, c % nch) {
                proptest::prop_assert!(p.end() <= count);
            }
        }
    }
}
