//! A channel's ring: the order in which ranks pass data around.

use super::SchedError;

/// A ring of `nranks` ranks: `ranks()[i]` sends to `ranks()[i + 1]`, and the last to the first.
/// Checked once on construction to be a permutation of `0..nranks`, so a program built on it
/// always finds each rank exactly once. Comes from topology search (NCCL's `ring.userRanks`
/// rotated to start anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring<'a> {
    ranks: &'a [u32],
}

/// Ranks tracked per pass of the duplicate check: a 4096-bit map on the stack, so checking
/// costs `nranks * ceil(nranks / 4096)` reads without allocating.
const WINDOW_WORDS: usize = 64;
const WINDOW: usize = WINDOW_WORDS * 64;

impl<'a> Ring<'a> {
    /// Checks that `ranks` is a permutation of `0..ranks.len()`.
    pub fn new(ranks: &'a [u32]) -> Result<Self, SchedError> {
        let nranks = ranks.len();
        if nranks == 0 {
            return Err(SchedError::NoRanks);
        }
        if u32::try_from(nranks).is_err() {
            return Err(SchedError::TooManyRanks { nranks });
        }
        for (position, &rank) in ranks.iter().enumerate() {
            if rank as usize >= nranks {
                return Err(SchedError::RingEntryOutOfRange {
                    position,
                    rank,
                    nranks,
                });
            }
        }
        // All entries are in range; no duplicate means each rank appears exactly once.
        let mut base = 0usize;
        while base < nranks {
            let mut seen = [0u64; WINDOW_WORDS];
            for &rank in ranks {
                let Some(bit) = (rank as usize).checked_sub(base) else {
                    continue;
                };
                if bit >= WINDOW {
                    continue;
                }
                let Some(word) = seen.get_mut(bit / 64) else {
                    continue;
                };
                let mask = 1u64 << (bit % 64);
                if *word & mask != 0 {
                    return Err(SchedError::RingDuplicate { rank });
                }
                *word |= mask;
            }
            base = base.saturating_add(WINDOW);
        }
        Ok(Ring { ranks })
    }

    /// Number of ranks on the ring (at least 1).
    pub const fn nranks(&self) -> usize {
        self.ranks.len()
    }

    /// The ranks in ring order.
    pub const fn ranks(&self) -> &'a [u32] {
        self.ranks
    }

    /// Where `rank` sits on the ring.
    pub fn position(&self, rank: u32) -> Option<usize> {
        self.ranks.iter().position(|&r| r == rank)
    }

    /// The rank `k` places after `position` (wrapping around the ring).
    pub fn rank_after(&self, position: usize, k: usize) -> u32 {
        let n = self.ranks.len();
        let pos = position.checked_rem(n).unwrap_or(0);
        let k = k.checked_rem(n).unwrap_or(0);
        // pos, k < n, so pos + k < 2n <= 2 * u32::MAX + 2 fits; reduce once more.
        let idx = pos.saturating_add(k).checked_rem(n).unwrap_or(0);
        self.ranks.get(idx).copied().unwrap_or(0)
    }

    /// The rank `k` places before `position` (wrapping around the ring).
    pub fn rank_before(&self, position: usize, k: usize) -> u32 {
        let n = self.ranks.len();
        let k = k.checked_rem(n).unwrap_or(0);
        self.rank_after(position, n.saturating_sub(k))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn neighbours() {
        let ring = Ring::new(&[2, 0, 3, 1]).unwrap();
        assert_eq!(ring.nranks(), 4);
        assert_eq!(ring.position(3), Some(2));
        assert_eq!(ring.position(4), None);
        assert_eq!(ring.rank_after(2, 1), 1);
        assert_eq!(ring.rank_after(3, 1), 2);
        assert_eq!(ring.rank_before(0, 1), 1);
        assert_eq!(ring.rank_before(0, 4), 2);
        assert_eq!(ring.rank_after(1, 9), 3);
    }

    #[test]
    fn rejects_what_is_not_a_permutation() {
        assert_eq!(Ring::new(&[]), Err(SchedError::NoRanks));
        assert_eq!(
            Ring::new(&[0, 3, 1]),
            Err(SchedError::RingEntryOutOfRange {
                position: 1,
                rank: 3,
                nranks: 3
            })
        );
        assert_eq!(
            Ring::new(&[0, 1, 1]),
            Err(SchedError::RingDuplicate { rank: 1 })
        );
    }

    #[test]
    fn large_rings_check_every_window() {
        // 10000 ranks span three windows; a duplicate in the last one must be found.
        let mut ranks: std::vec::Vec<u32> = (0..10_000).rev().collect();
        assert!(Ring::new(&ranks).is_ok());
        ranks[17] = 9_001;
        assert_eq!(
            Ring::new(&ranks),
            Err(SchedError::RingDuplicate { rank: 9_001 })
        );
    }
}
