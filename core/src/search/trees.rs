//! Trees: the chain inside each host and NCCL's double binary tree across hosts
//! (`src/graph/trees.cc`, `connectTrees` in `connect.cc`), and the `Trees [c] ...` line.

use super::{Graph, MAX_CHANNELS, Pattern};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// One rank's place in one channel's tree: its parent and up to three children (-1: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLinks {
    pub up: i64,
    pub down: [i64; 3],
}

/// Position of `rank` in a binary tree over `nranks` (NCCL's `ncclGetBtree`): parent,
/// children, and whether `rank` is its parent's child 0 or 1.
pub fn btree(nranks: i64, rank: i64) -> (i64, i64, i64, u8) {
    let mut bit: i64 = 1;
    while bit < nranks {
        if bit & rank != 0 {
            break;
        }
        bit = bit.saturating_mul(2);
    }
    if rank == 0 {
        return (-1, -1, if nranks > 1 { bit >> 1 } else { -1 }, 0);
    }
    let mut up = (rank ^ bit) | bit.saturating_mul(2);
    if up >= nranks {
        up = rank ^ bit;
    }
    let child_type = u8::from(rank >= up);
    let mut lowbit = bit >> 1;
    let d0 = if lowbit == 0 {
        -1
    } else {
        rank.saturating_sub(lowbit)
    };
    let mut d1 = if lowbit == 0 {
        -1
    } else {
        rank.saturating_add(lowbit)
    };
    while d1 >= nranks {
        d1 = if lowbit == 0 {
            -1
        } else {
            rank.saturating_add(lowbit)
        };
        lowbit >>= 1;
    }
    (up, d0, d1, child_type)
}

/// The two complementary trees (NCCL's `ncclGetDtree`): the second is the first mirrored
/// (even counts) or shifted by one (odd counts), so that no rank is an inner node of both.
pub fn dtree(nranks: i64, rank: i64) -> [(i64, i64, i64, u8); 2] {
    let t0 = btree(nranks, rank);
    let t1 = if nranks % 2 == 1 {
        let shifted = rank
            .saturating_sub(1)
            .saturating_add(nranks)
            .checked_rem(nranks)
            .unwrap_or(0);
        let (u, d0, d1, ct) = btree(nranks, shifted);
        let back = |x: i64| {
            if x == -1 {
                -1
            } else {
                x.saturating_add(1).checked_rem(nranks).unwrap_or(0)
            }
        };
        (back(u), back(d0), back(d1), ct)
    } else {
        let mirror = |x: i64| {
            if x == -1 {
                -1
            } else {
                nranks.saturating_sub(1).saturating_sub(x)
            }
        };
        let (u, d0, d1, ct) = btree(nranks, mirror(rank));
        (mirror(u), mirror(d0), mirror(d1), ct)
    };
    [t0, t1]
}

/// Tree links of global rank `rank` in every channel of a communicator of `nnodes`
/// identical hosts (global rank = host * GPUs per host + local rank), built from the tree
/// graph as NCCL's `ncclTopoPreset` and `connectTrees` do. `comm_channels` is the
/// communicator's channel count before duplication (min of ring and tree channels); the
/// result has twice as many entries: the first half uses tree 0, the second tree 1.
pub fn tree_links(tree: &Graph, nnodes: usize, rank: i64, comm_channels: usize) -> Vec<TreeLinks> {
    let ngpus = tree.channels.first().map_or(0, |c| c.gpus.len());
    let n = comm_channels.min(tree.nchannels()).min(MAX_CHANNELS / 2);
    let per = i64::try_from(ngpus).unwrap_or(i64::MAX).max(1);
    let node = rank.checked_div(per).unwrap_or(0);
    let local = rank.checked_rem(per).unwrap_or(0);
    let nn = i64::try_from(nnodes).unwrap_or(1).max(1);
    let dt = dtree(nn, node);
    let mut out = alloc::vec![TreeLinks { up: -1, down: [-1; 3] }; n.saturating_mul(2)];
    let (child0, child1) = match tree.pattern {
        Pattern::Tree => (0usize, 0usize),
        Pattern::SplitTree => (1, 1),
        _ => (1, 0),
    };
    for c in 0..n {
        let Some(ch) = tree.channels.get(c) else {
            continue;
        };
        let g = |i: usize| ch.gpus.get(i).map_or(-1, |&r| i64::from(r));
        let on = |h: i64, r: i64| h.saturating_mul(per).saturating_add(r);
        let Some(i) = ch.gpus.iter().position(|&r| i64::from(r) == local) else {
            continue;
        };
        let mut base = TreeLinks {
            up: -1,
            down: [-1; 3],
        };
        if i > 0 {
            base.up = on(node, g(i.saturating_sub(1)));
        }
        if i.saturating_add(1) < ch.gpus.len() {
            base.down[0] = on(node, g(i.saturating_add(1)));
        }
        let (ttp, ttc0, ttc1) = (
            g(0),
            g(child0.min(ngpus.saturating_sub(1))),
            g(child1.min(ngpus.saturating_sub(1))),
        );
        for (t, (u, d0, d1, ct)) in dt.iter().copied().enumerate() {
            let mut links = base;
            if local == ttp && u != -1 {
                links.up = on(u, if ct == 0 { ttc0 } else { ttc1 });
            }
            let mut push = |d: i64| {
                if d == -1 {
                    return;
                }
                if let Some(slot) = links.down.iter_mut().find(|x| **x < 0) {
                    *slot = on(d, ttp);
                }
            };
            if local == ttc0 {
                push(d0);
            }
            if local == ttc1 {
                push(d1);
            }
            if let Some(slot) = c
                .checked_add(t.saturating_mul(n))
                .and_then(|k| out.get_mut(k))
            {
                *slot = links;
            }
        }
    }
    out
}

/// The line NCCL prints for a rank at INFO level: `Trees [0] 1/-1/-1->0->-1 [1] ...`.
pub fn trees_line(links: &[TreeLinks], rank: i64) -> String {
    let mut s = String::from("Trees");
    for (c, l) in links.iter().enumerate() {
        let _ = write!(
            s,
            " [{c}] {}/{}/{}->{rank}->{}",
            l.down[0], l.down[1], l.down[2], l.up
        );
    }
    s
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn btree_matches_nccl_for_eight_ranks() {
        // Worked out from ncclGetBtree: 0 -> 4 -> {2 -> {1, 3}, 6 -> {5, 7}}.
        assert_eq!(btree(8, 0), (-1, -1, 4, 0));
        assert_eq!(btree(8, 4), (0, 2, 6, 1));
        assert_eq!(btree(8, 2), (4, 1, 3, 0));
        assert_eq!(btree(8, 6), (4, 5, 7, 1));
        assert_eq!(btree(8, 1), (2, -1, -1, 0));
        assert_eq!(btree(8, 7), (6, -1, -1, 1));
        assert_eq!(btree(1, 0), (-1, -1, -1, 0));
    }

    #[test]
    fn every_rank_reaches_the_root_in_both_trees() {
        for n in 1..40i64 {
            for tree in 0..2 {
                for r in 0..n {
                    let mut cur = r;
                    let mut hops = 0;
                    while dtree(n, cur)[tree].0 != -1 {
                        let up = dtree(n, cur)[tree].0;
                        // The parent lists us as a child.
                        let (_, d0, d1, _) = dtree(n, up)[tree];
                        assert!(
                            d0 == cur || d1 == cur,
                            "n {n} tree {tree}: {up} does not list {cur}"
                        );
                        cur = up;
                        hops += 1;
                        assert!(hops <= n);
                    }
                }
            }
        }
    }
}
