//! Point-to-point groups on device memory: checking a group of sends and receives, and
//! turning it into launches of the send/receive kernel (one, unless the group holds more
//! messages than a launch; each message over as many of the send/recv channels as its size
//! warrants) plus copies for a rank's messages to itself.

use weft_core::abi::{P2P_MAX_OPS, P2pArgs, P2pOp};

use super::faults::FAULT_RECORDS;
use crate::gpu::GpuError;
use crate::gpu::protocol::GpuProtocols;

/// Channels that connect every pair of ranks for send/recv, beyond two ranks (two ranks use
/// every channel: the rings connect them already).
pub const P2P_CHANNELS: u32 = 4;

/// One send or receive of a point-to-point group on device memory.
#[derive(Debug, Clone, Copy)]
pub enum GpuP2p {
    Send { peer: usize, buf: u64, bytes: usize },
    Recv { peer: usize, buf: u64, bytes: usize },
}

impl GpuP2p {
    /// (peer, buffer, bytes, whether it sends).
    pub fn parts(self) -> (usize, u64, usize, bool) {
        match self {
            GpuP2p::Send { peer, buf, bytes } => (peer, buf, bytes, true),
            GpuP2p::Recv { peer, buf, bytes } => (peer, buf, bytes, false),
        }
    }
}

/// The send/recv channels of a communicator of `nranks` ranks whose rings have `nrings`
/// channels. Two ranks: every ring channel already connects the pair both ways, so
/// send/recv takes all of them at no cost in memory (with four channels it reached 136 GB/s
/// over NVLink where NCCL reached 354, two H100, 2026-11-25). More ranks: the first
/// [`P2P_CHANNELS`] channels connect every pair, each a FIFO per peer and direction.
pub(super) fn p2p_channel_count(nranks: u32, nrings: usize) -> u32 {
    if nranks <= 2 {
        u32::try_from(nrings).unwrap_or(P2P_CHANNELS)
    } else {
        P2P_CHANNELS
    }
}

/// The refusals of [`GpuComm::group`](super::GpuComm::group) for `rank` of `nranks`,
/// without launching anything: a caller issuing several groups (NCCL's group over several
/// communicators) checks every one before launching any, so that a refusal never leaves a
/// group half-launched.
///
/// A peer may take any number of sends and receives: they match the peer's in call order
/// per (peer, direction), as in NCCL. What is refused: a peer out of range, a send to this
/// rank without its receive (or of another size), and more (peer, direction) pairs with
/// bytes to move than one launch holds.
pub fn validate_p2p_group(rank: usize, nranks: usize, ops: &[GpuP2p]) -> Result<(), GpuError> {
    let (mut to_self, mut from_self) = (Vec::new(), Vec::new());
    let mut lanes: Vec<(usize, bool)> = Vec::new();
    for op in ops {
        let (peer, _, bytes, send) = op.parts();
        if peer >= nranks {
            return Err(GpuError::InvalidArgument(format!(
                "peer {peer} of {nranks} ranks"
            )));
        }
        if peer == rank {
            if send {
                to_self.push(bytes)
            } else {
                from_self.push(bytes)
            }
        } else if bytes > 0 && !lanes.contains(&(peer, send)) {
            lanes.push((peer, send));
        }
    }
    // Each launch holds one message of each (peer, direction) at least: its first round.
    if lanes.len() > P2P_MAX_OPS {
        return Err(GpuError::InvalidArgument(format!(
            "sends and receives with {} (peer, direction) pairs in one group, more than the \
             {P2P_MAX_OPS} one launch holds (an all-to-all over more than {} ranks needs \
             more): split the group",
            lanes.len(),
            P2P_MAX_OPS / 2 + 1
        )));
    }
    if from_self.len() != to_self.len() {
        return Err(GpuError::InvalidArgument(format!(
            "{} send(s) to this rank (rank {rank}) and {} receive(s) from it in one group:              each send to itself needs its receive",
            to_self.len(),
            from_self.len()
        )));
    }
    if let Some((n, m)) = from_self.iter().zip(&to_self).find(|(a, b)| a != b) {
        return Err(GpuError::InvalidArgument(format!(
            "a send of {m} bytes to this rank (rank {rank}) meets a receive of {n}"
        )));
    }
    Ok(())
}

/// Channels a point-to-point message of `bytes` uses: one per 512 KiB, at most `max`.
/// The sender and the receiver compute it from the same byte count.
pub fn p2p_channels_for(bytes: usize, max: u32) -> u32 {
    u32::try_from(bytes.div_ceil(512 << 10))
        .unwrap_or(u32::MAX)
        .clamp(1, max.max(1))
}

/// One launch of the send/receive kernel: its argument (its `comm` filled at launch) and
/// its blocks.
#[derive(Debug)]
pub(super) struct P2pLaunch {
    pub(super) args: P2pArgs,
    pub(super) blocks: u32,
}

/// What a checked group becomes: launches, in order, and the copies of this rank's
/// messages to itself.
///
/// The n-th message of a (peer, direction) is its round n. A launch runs a contiguous
/// range of rounds, as many as fit (`P2P_MAX_OPS` ops, one fault record per block); in it
/// each (peer, direction) has one range of blocks, as wide as its widest message there,
/// and its messages run on those blocks one after the other, in call order. So the n-th
/// send to a peer meets the peer's n-th receive from this rank on the same channels, and
/// no launch waits for a later one: each message waits only for the messages before it on
/// its connection and for its match, which by the same rule is reached on the peer (the
/// ranks may cut their launches at different rounds).
#[derive(Debug)]
pub(super) struct P2pPlan {
    pub(super) launches: Vec<P2pLaunch>,
    /// (destination, source, bytes).
    pub(super) copies: Vec<(u64, u64, usize)>,
}

/// A message to another rank, placed in its round.
#[derive(Debug, Clone, Copy)]
struct Message {
    lane: usize,
    round: usize,
    op: P2pOp,
}

impl P2pPlan {
    /// Plans `ops`, which [`validate_p2p_group`] accepted for `rank`, over `p2p_channels`
    /// send/recv channels with `protocols`' choice for each message.
    pub(super) fn plan(
        rank: usize,
        ops: &[GpuP2p],
        p2p_channels: u32,
        protocols: &GpuProtocols,
    ) -> Result<P2pPlan, GpuError> {
        let mut to_self: Vec<u64> = Vec::new();
        let mut from_self: Vec<(u64, usize)> = Vec::new();
        let mut lanes: Vec<(usize, bool)> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut messages: Vec<Message> = Vec::new();
        for op in ops {
            let (peer, buf, bytes, send) = op.parts();
            if peer == rank {
                if send {
                    to_self.push(buf)
                } else {
                    from_self.push((buf, bytes))
                }
                continue;
            }
            // Empty messages move nothing; their matches are empty too, and skipped alike.
            if bytes == 0 {
                continue;
            }
            let lane = match lanes.iter().position(|&l| l == (peer, send)) {
                Some(l) => l,
                None => {
                    lanes.push((peer, send));
                    counts.push(0);
                    lanes.len() - 1
                }
            };
            let round = counts[lane];
            counts[lane] += 1;
            let nchannels = p2p_channels_for(bytes, p2p_channels);
            messages.push(Message {
                lane,
                round,
                op: P2pOp {
                    buff: buf,
                    bytes: bytes as u64,
                    peer: peer as i32,
                    send: u32::from(send),
                    block_lo: 0,
                    nchannels,
                    protocol: protocols.p2p(bytes, nchannels) as u32,
                    reserved: 0,
                },
            });
        }
        let rounds = counts.iter().copied().max().unwrap_or(0);
        let mut launches = Vec::new();
        let mut first = 0;
        while first < rounds {
            // The most rounds from `first` on that fit one launch (at least one).
            let mut end = first + 1;
            let mut launch = Self::launch(&messages, first..end)?;
            while end < rounds {
                match Self::launch(&messages, first..end + 1) {
                    Ok(more) => {
                        launch = more;
                        end += 1;
                    }
                    Err(_) => break,
                }
            }
            launches.push(launch);
            first = end;
        }
        // The i-th receive from this rank takes the i-th send to it (equal in number and
        // size: validated).
        let copies = from_self
            .iter()
            .zip(&to_self)
            .map(|(&(dst, n), &src)| (dst, src, n))
            .collect();
        Ok(P2pPlan { launches, copies })
    }

    /// The launch of `messages`' rounds in `rounds`: each lane's blocks after the previous
    /// lane's, its messages in round order on them. Fails when they do not fit one launch.
    fn launch(messages: &[Message], rounds: std::ops::Range<usize>) -> Result<P2pLaunch, GpuError> {
        let mut taken: Vec<&Message> = messages
            .iter()
            .filter(|m| rounds.contains(&m.round))
            .collect();
        if taken.len() > P2P_MAX_OPS {
            return Err(GpuError::InvalidArgument(format!(
                "more than {P2P_MAX_OPS} sends and receives in one launch"
            )));
        }
        // Lane by lane (a stable sort keeps each lane's messages in round order).
        taken.sort_by_key(|m| m.lane);
        let mut args = P2pArgs::default();
        let mut blocks = 0u32;
        let mut at = 0;
        while at < taken.len() {
            let lane = taken[at].lane;
            let same = taken[at..].iter().take_while(|m| m.lane == lane).count();
            let width = taken[at..at + same]
                .iter()
                .map(|m| m.op.nchannels)
                .max()
                .unwrap_or(1);
            for (slot, m) in args.ops[at..at + same]
                .iter_mut()
                .zip(&taken[at..at + same])
            {
                *slot = P2pOp {
                    block_lo: blocks,
                    ..m.op
                };
            }
            blocks += width;
            at += same;
        }
        // Each block of a launch has its own fault record.
        if blocks as usize > FAULT_RECORDS {
            return Err(GpuError::InvalidArgument(format!(
                "a point-to-point launch of {blocks} blocks, more than the {FAULT_RECORDS} one \
                 launch can record faults for: split the group"
            )));
        }
        args.nops = taken.len() as u32;
        Ok(P2pLaunch { args, blocks })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn send(peer: usize, bytes: usize) -> GpuP2p {
        GpuP2p::Send {
            peer,
            buf: 0x1000 + peer as u64,
            bytes,
        }
    }

    fn recv(peer: usize, bytes: usize) -> GpuP2p {
        GpuP2p::Recv {
            peer,
            buf: 0x2000 + peer as u64,
            bytes,
        }
    }

    fn protocols() -> GpuProtocols {
        GpuProtocols::from_options(&crate::comm::CommOptions::default())
    }

    #[test]
    fn p2p_groups_are_validated_before_anything_launches() {
        assert!(
            validate_p2p_group(0, 4, &[send(1, 7), recv(1, 7), send(0, 3), recv(0, 3)]).is_ok()
        );
        // Any number per peer and direction.
        assert!(
            validate_p2p_group(0, 4, &[send(1, 7), send(1, 9), recv(1, 1), recv(1, 2)]).is_ok()
        );
        let msg = |ops: &[GpuP2p]| validate_p2p_group(0, 20, ops).unwrap_err().to_string();
        assert!(msg(&[recv(25, 7)]).contains("peer 25 of 20"));
        assert!(msg(&[send(0, 4)]).contains("needs its receive"));
        assert!(msg(&[send(0, 4), recv(0, 5)]).contains("send of 4 bytes"));
        // 16 (peer, direction) pairs fit; the 17th is refused. Empty messages and self
        // copies take no pair, a second message on a pair takes none either.
        let mut ops: Vec<GpuP2p> = (1..=8).flat_map(|p| [send(p, 100), recv(p, 100)]).collect();
        ops.extend([send(0, 5), recv(0, 5), send(9, 0), send(1, 3), recv(8, 1)]);
        assert!(validate_p2p_group(0, 20, &ops).is_ok());
        ops.push(recv(9, 1));
        assert!(
            msg(&ops).contains("17 (peer, direction) pairs"),
            "{}",
            msg(&ops)
        );
    }

    #[test]
    fn p2p_channels_grow_with_the_message() {
        assert_eq!(p2p_channels_for(8, 4), 1);
        assert_eq!(p2p_channels_for(512 << 10, 4), 1);
        assert_eq!(p2p_channels_for((512 << 10) + 1, 4), 2);
        assert_eq!(p2p_channels_for(1 << 30, 4), 4);
        assert_eq!(p2p_channels_for(1 << 30, 0), 1);
    }

    #[test]
    fn p2p_groups_become_one_launch_and_self_copies() {
        let ops = [
            send(1, 3 << 20),
            recv(2, 100),
            GpuP2p::Send {
                peer: 0,
                buf: 0x3000,
                bytes: 64,
            },
            GpuP2p::Recv {
                peer: 0,
                buf: 0x4000,
                bytes: 64,
            },
            send(3, 0),
        ];
        validate_p2p_group(0, 4, &ops).unwrap();
        let plan = P2pPlan::plan(0, &ops, 4, &protocols()).unwrap();
        assert_eq!(plan.launches.len(), 1);
        let launch = &plan.launches[0];
        assert_eq!(launch.args.nops, 2);
        // 3 MiB takes the 4 channels, the 100 bytes one, from block 4.
        assert_eq!(
            (launch.args.ops[0].nchannels, launch.args.ops[0].block_lo),
            (4, 0)
        );
        assert_eq!(
            (launch.args.ops[1].nchannels, launch.args.ops[1].block_lo),
            (1, 4)
        );
        assert_eq!(launch.args.ops[1].send, 0);
        assert_eq!(launch.blocks, 5);
        assert_eq!(plan.copies, vec![(0x4000, 0x3000, 64)]);
    }

    #[test]
    fn messages_of_one_peer_and_direction_share_blocks_in_call_order() {
        let ops = [
            send(1, 3 << 20),
            send(2, 10),
            send(1, 100),
            recv(1, 100),
            send(1, 7),
        ];
        validate_p2p_group(0, 4, &ops).unwrap();
        let plan = P2pPlan::plan(0, &ops, 4, &protocols()).unwrap();
        assert_eq!(plan.launches.len(), 1);
        let args = &plan.launches[0].args;
        let got: Vec<(i32, u32, u64, u32, u32)> = args.ops[..args.nops as usize]
            .iter()
            .map(|o| (o.peer, o.send, o.bytes, o.block_lo, o.nchannels))
            .collect();
        assert_eq!(
            got,
            vec![
                // The sends to rank 1 on blocks 0-3, as wide as the widest, in call order.
                (1, 1, 3 << 20, 0, 4),
                (1, 1, 100, 0, 1),
                (1, 1, 7, 0, 1),
                (2, 1, 10, 4, 1),
                (1, 0, 100, 5, 1),
            ]
        );
        assert_eq!(plan.launches[0].blocks, 6);
    }

    #[test]
    fn groups_larger_than_a_launch_take_several_in_round_order() {
        let ops: Vec<GpuP2p> = (0..20).map(|i| send(1, 100 + i)).collect();
        let plan = P2pPlan::plan(0, &ops, 4, &protocols()).unwrap();
        let sizes: Vec<Vec<u64>> = plan
            .launches
            .iter()
            .map(|l| {
                l.args.ops[..l.args.nops as usize]
                    .iter()
                    .map(|o| o.bytes)
                    .collect()
            })
            .collect();
        assert_eq!(sizes.len(), 2);
        assert_eq!(sizes[0], (100..116).collect::<Vec<u64>>());
        assert_eq!(sizes[1], (116..120).collect::<Vec<u64>>());
    }

    /// A small deterministic generator (xorshift64*), so that the property test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    /// Random groups over 2-5 ranks (several messages per pair and direction, mixed sizes,
    /// each rank's calls in its own order, some with a peer's messages one way only), planned
    /// on every rank and run by a model of the kernel that lets a message move only when its
    /// match is at the head of a running block on the peer (no FIFO buffering, the worst
    /// case): every message completes, matched with the peer's message of the same round
    /// and size on the same channel.
    #[test]
    // Ranks index both sides of `sizes` (`sizes[r][p]` and `sizes[p][r]`).
    #[allow(clippy::needless_range_loop)]
    fn random_groups_match_in_call_order_and_never_deadlock() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..400 {
            let nranks = 2 + rng.below(4) as usize;
            let channels = if nranks == 2 { 8 } else { 4 };
            // sizes[a][b]: the messages a sends b, in order.
            let mut sizes = vec![vec![Vec::new(); nranks]; nranks];
            for (a, row) in sizes.iter_mut().enumerate() {
                for (b, list) in row.iter_mut().enumerate() {
                    if a != b && rng.below(3) > 0 {
                        for _ in 0..rng.below(if case % 7 == 0 { 24 } else { 5 }) {
                            let bytes = match rng.below(4) {
                                0 => 0,
                                1 => 1 + rng.below(4096),
                                2 => 1 + rng.below(1 << 20),
                                _ => 1 + rng.below(3 << 20),
                            };
                            list.push(bytes as usize);
                        }
                    }
                }
            }
            // Each rank's calls: its sends and receives, interleaved at random but in order
            // per peer and direction.
            let plans: Vec<P2pPlan> = (0..nranks)
                .map(|r| {
                    let mut queues: Vec<Vec<GpuP2p>> = Vec::new();
                    for p in 0..nranks {
                        queues.push(sizes[r][p].iter().map(|&n| send(p, n)).collect());
                        queues.push(sizes[p][r].iter().map(|&n| recv(p, n)).collect());
                    }
                    let mut ops = Vec::new();
                    while queues.iter().any(|q| !q.is_empty()) {
                        let live: Vec<usize> = (0..queues.len())
                            .filter(|&i| !queues[i].is_empty())
                            .collect();
                        let q = live[rng.below(live.len() as u64) as usize];
                        ops.push(queues[q].remove(0));
                    }
                    validate_p2p_group(r, nranks, &ops).unwrap();
                    P2pPlan::plan(r, &ops, channels, &protocols()).unwrap()
                })
                .collect();
            simulate(&plans, &sizes, case);
        }
    }

    /// One message of one channel, as a block runs it: (peer, sends, bytes, protocol).
    type Part = (usize, bool, u64, u32);

    #[allow(clippy::needless_range_loop)]
    fn simulate(plans: &[P2pPlan], sizes: &[Vec<Vec<usize>>], case: usize) {
        let n = plans.len();
        // Per rank: the launch running and, per block of it, the parts still to run
        // (channel, part).
        let queues = |r: usize, l: usize| -> Vec<Vec<(u32, Part)>> {
            let launch = &plans[r].launches[l];
            let mut blocks = vec![Vec::new(); launch.blocks as usize];
            for op in &launch.args.ops[..launch.args.nops as usize] {
                for k in 0..op.nchannels {
                    blocks[(op.block_lo + k) as usize]
                        .push((k, (op.peer as usize, op.send == 1, op.bytes, op.protocol)));
                }
            }
            blocks
        };
        let mut at: Vec<usize> = vec![0; n];
        let mut running: Vec<Vec<Vec<(u32, Part)>>> = (0..n)
            .map(|r| {
                if plans[r].launches.is_empty() {
                    Vec::new()
                } else {
                    queues(r, 0)
                }
            })
            .collect();
        // received[b][a]: the sizes b received from a, per channel 0, in order.
        let mut received = vec![vec![Vec::new(); n]; n];
        loop {
            let mut moved = false;
            for a in 0..n {
                for blk in 0..running[a].len() {
                    let Some(&(k, (b, true, bytes, proto))) = running[a][blk].first() else {
                        continue;
                    };
                    // The receiver's block for this channel of the reverse lane, at its head.
                    let found = running[b].iter().position(|q| {
                        q.first()
                            .is_some_and(|&(kk, (p, s, _, _))| kk == k && p == a && !s)
                    });
                    if let Some(rb) = found {
                        let (_, (_, _, rbytes, rproto)) = running[b][rb][0];
                        assert_eq!(
                            (bytes, proto),
                            (rbytes, rproto),
                            "case {case}: rank {a} -> {b} channel {k} mismatched"
                        );
                        if k == 0 {
                            received[b][a].push(bytes as usize);
                        }
                        running[a][blk].remove(0);
                        running[b][rb].remove(0);
                        moved = true;
                    }
                }
            }
            for r in 0..n {
                if running[r].iter().all(|q| q.is_empty()) && at[r] + 1 < plans[r].launches.len() {
                    at[r] += 1;
                    running[r] = queues(r, at[r]);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        for r in 0..n {
            assert!(
                running[r].iter().all(|q| q.is_empty()) && at[r] + 1 >= plans[r].launches.len(),
                "case {case}: rank {r} stuck in launch {} of {}",
                at[r],
                plans[r].launches.len()
            );
            for p in 0..n {
                let sent: Vec<usize> = sizes[p][r].iter().copied().filter(|&b| b > 0).collect();
                assert_eq!(received[r][p], sent, "case {case}: rank {p} -> {r}");
            }
        }
    }
}
