//! Which collectives of a group share a kernel launch: NCCL fuses a group's calls into one
//! launch; weft fuses consecutive calls that run the same kernel function.
//!
//! weft compiles a module per element type, with an entry per operator and protocol (ring)
//! or per operator (one-/two-shot), so only calls of one type, operator and kernel can
//! share a launch, up to the launch's capacity (`COLL_BATCH_MAX` ring works,
//! `PEER_BATCH_MAX` peer works, which keep the kernel's parameters small). A call that runs
//! no kernel (a copy) or a kernel that runs one call per launch (NVLS) stands alone, and
//! closes the run before it, so that stream order is call order. Within a launch, the calls
//! are spread over the channels ([`spread`]) where the kernel allows it.

use std::ops::Range;

/// The ranges of `keys` that share a launch: maximal runs of consecutive equal `Some` keys,
/// cut every `max(key)` calls; each `None` is a range of its own. The ranges cover
/// `0..keys.len()` in order.
pub fn launches<K: PartialEq>(keys: &[Option<K>], max: impl Fn(&K) -> usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < keys.len() {
        let mut end = start + 1;
        if let Some(key) = &keys[start] {
            let cap = max(key).max(1);
            while end < keys.len() && end - start < cap && keys[end].as_ref() == Some(key) {
                end += 1;
            }
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// The first channel of each call of a launch, given each call's channel count: side by side
/// while they fit in `total` channels, then from channel 0 again (a channel runs its calls
/// one after the other, in order, so any placement is correct; side by side, a group of
/// small calls takes about the time of one). Every rank computes the same placement from
/// the same calls.
pub fn spread(counts: &[u32], total: u32) -> Vec<u32> {
    let mut next = 0u32;
    counts
        .iter()
        .map(|&n| {
            if next.saturating_add(n) > total {
                next = 0;
            }
            let lo = next;
            next = next.saturating_add(n);
            lo
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_go_side_by_side_then_wrap() {
        assert_eq!(spread(&[1, 1, 1, 1], 32), vec![0, 1, 2, 3]);
        assert_eq!(spread(&[8, 8, 8, 8, 8], 32), vec![0, 8, 16, 24, 0]);
        assert_eq!(spread(&[20, 20, 5], 32), vec![0, 0, 20]);
        assert_eq!(spread(&[32, 1], 32), vec![0, 0]);
        assert!(spread(&[], 8).is_empty());
        // Each call within the channels, whatever the counts (at most `total` each).
        for counts in [[3u32, 7, 32, 1, 30], [16, 16, 16, 16, 2]] {
            for (lo, n) in spread(&counts, 32).iter().zip(counts) {
                assert!(lo + n <= 32);
            }
        }
    }

    #[test]
    fn consecutive_equal_keys_share_a_launch_up_to_the_cap() {
        let keys = [
            Some(1),
            Some(1),
            Some(1),
            Some(2),
            Some(2),
            None,
            Some(2),
            Some(1),
        ];
        assert_eq!(launches(&keys, |_| 8), vec![0..3, 3..5, 5..6, 6..7, 7..8]);
        assert_eq!(
            launches(&keys, |_| 2),
            vec![0..2, 2..3, 3..5, 5..6, 6..7, 7..8]
        );
    }

    #[test]
    fn none_stands_alone_and_empty_is_empty() {
        assert_eq!(launches::<u8>(&[None, None], |_| 8), vec![0..1, 1..2]);
        assert!(launches::<u8>(&[], |_| 8).is_empty());
        // A cap of zero still makes progress.
        assert_eq!(launches(&[Some(0), Some(0)], |_| 0), vec![0..1, 1..2]);
    }

    #[test]
    fn the_cap_is_the_keys_own() {
        let keys = [
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(8),
            Some(8),
        ];
        assert_eq!(launches(&keys, |k| *k), vec![0..4, 4..5, 5..7]);
    }

    /// Every sequence of up to 6 keys from {None, 0, 1}, every cap from 1 to 4: the ranges
    /// tile the input in order, each within its cap and of equal keys (a `None` alone), and
    /// two neighbours of one key only where the first is full.
    #[test]
    fn ranges_tile_and_respect_keys_exhaustively() {
        for len in 0..=6u32 {
            for code in 0..3usize.pow(len) {
                let keys: Vec<Option<u8>> = (0..len)
                    .map(|i| match code / 3usize.pow(i) % 3 {
                        0 => None,
                        k => Some(k as u8),
                    })
                    .collect();
                for cap in 1..=4 {
                    let ranges = launches(&keys, |_| cap);
                    let mut next = 0;
                    for (i, r) in ranges.iter().enumerate() {
                        assert_eq!(r.start, next, "{keys:?} cap {cap}");
                        assert!(r.end > r.start && r.len() <= cap, "{keys:?} cap {cap}");
                        let first = keys[r.start];
                        assert!(first.is_some() || r.len() == 1, "{keys:?} cap {cap}");
                        assert!(keys[r.clone()].iter().all(|k| *k == first));
                        if let Some(n) = ranges.get(i + 1)
                            && first.is_some()
                            && keys[n.start] == first
                        {
                            assert_eq!(r.len(), cap, "{keys:?} cap {cap}");
                        }
                        next = r.end;
                    }
                    assert_eq!(next, keys.len());
                }
            }
        }
    }
}
