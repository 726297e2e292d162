//! Point-to-point groups on device memory: checking a group of sends and receives, and
//! turning it into one launch of the send/receive kernel (each message over as many of
//! the send/recv channels as its size warrants) plus copies for a rank's messages to itself.

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
    fn parts(self) -> (usize, u64, usize, bool) {
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
pub fn validate_p2p_group(rank: usize, nranks: usize, ops: &[GpuP2p]) -> Result<(), GpuError> {
    let mut seen: Vec<(usize, bool)> = Vec::new();
    let (mut to_self, mut from_self) = (Vec::new(), Vec::new());
    let mut launched = 0usize;
    for op in ops {
        let (peer, _, bytes, send) = op.parts();
        if peer >= nranks {
            return Err(GpuError::InvalidArgument(format!(
                "peer {peer} of {nranks} ranks"
            )));
        }
        if seen.contains(&(peer, send)) {
            return Err(GpuError::InvalidArgument(format!(
                "two {} rank {peer} in one group: weft's GPU path takes one each way per peer and group",
                if send { "sends to" } else { "receives from" }
            )));
        }
        seen.push((peer, send));
        if peer == rank {
            if send {
                to_self.push(bytes)
            } else {
                from_self.push(bytes)
            }
        } else if bytes > 0 {
            launched += 1;
        }
    }
    if launched > P2P_MAX_OPS {
        return Err(GpuError::InvalidArgument(format!(
            "more than {P2P_MAX_OPS} sends and receives in one group ({launched}; an \
             all-to-all over more than {} ranks needs more)",
            P2P_MAX_OPS / 2 + 1
        )));
    }
    if from_self.len() != to_self.len() {
        return Err(GpuError::InvalidArgument(
            "a send to this rank without its receive (or the reverse)".into(),
        ));
    }
    if let Some((n, m)) = from_self.iter().zip(&to_self).find(|(a, b)| a != b) {
        return Err(GpuError::InvalidArgument(format!(
            "a send of {m} bytes to this rank meets a receive of {n}"
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

/// What a checked group becomes: the send/receive kernel's argument (its `comm` filled at
/// launch), its blocks, and the copies of this rank's messages to itself.
#[derive(Debug)]
pub(super) struct P2pLaunch {
    pub(super) args: P2pArgs,
    pub(super) blocks: u32,
    /// (destination, source, bytes).
    pub(super) copies: Vec<(u64, u64, usize)>,
}

impl P2pLaunch {
    /// Plans `ops`, which [`validate_p2p_group`] accepted for `rank`, over `p2p_channels`
    /// send/recv channels with `protocols`' choice for each message.
    pub(super) fn plan(
        rank: usize,
        ops: &[GpuP2p],
        p2p_channels: u32,
        protocols: &GpuProtocols,
    ) -> Result<P2pLaunch, GpuError> {
        let mut args = P2pArgs::default();
        let mut blocks = 0u32;
        let mut to_self: Vec<u64> = Vec::new();
        let mut from_self: Vec<(u64, usize)> = Vec::new();
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
            if bytes == 0 {
                continue;
            }
            let nch = p2p_channels_for(bytes, p2p_channels);
            let slot = args.ops.get_mut(args.nops as usize).ok_or_else(|| {
                GpuError::InvalidArgument(format!(
                    "more than {P2P_MAX_OPS} sends and receives in one group"
                ))
            })?;
            *slot = P2pOp {
                buff: buf,
                bytes: bytes as u64,
                peer: peer as i32,
                send: u32::from(send),
                block_lo: blocks,
                nchannels: nch,
                protocol: protocols.p2p(bytes, nch) as u32,
                reserved: 0,
            };
            args.nops += 1;
            blocks += nch;
        }
        // Each block of a launch has its own fault record.
        if blocks as usize > FAULT_RECORDS {
            return Err(GpuError::InvalidArgument(format!(
                "a point-to-point group of {blocks} blocks, more than the {FAULT_RECORDS} one \
                 launch can record faults for: split the group"
            )));
        }
        // The i-th receive from this rank takes the i-th send to it (equal in number and
        // size: validated).
        let copies = from_self
            .iter()
            .zip(&to_self)
            .map(|(&(dst, n), &src)| (dst, src, n))
            .collect();
        Ok(P2pLaunch {
            args,
            blocks,
            copies,
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn p2p_groups_are_validated_before_anything_launches() {
        let send = |peer, bytes| GpuP2p::Send {
            peer,
            buf: 0x1000,
            bytes,
        };
        let recv = |peer, bytes| GpuP2p::Recv {
            peer,
            buf: 0x2000,
            bytes,
        };
        assert!(
            validate_p2p_group(0, 4, &[send(1, 7), recv(1, 7), send(0, 3), recv(0, 3)]).is_ok()
        );
        let msg = |ops: &[GpuP2p]| validate_p2p_group(0, 20, ops).unwrap_err().to_string();
        assert!(msg(&[send(1, 7), send(1, 9)]).contains("two sends to rank 1"));
        assert!(msg(&[recv(25, 7)]).contains("peer 25 of 20"));
        assert!(msg(&[send(0, 4)]).contains("without its receive"));
        assert!(msg(&[send(0, 4), recv(0, 5)]).contains("send of 4 bytes"));
        // 16 ops to others fit; the 17th is refused. Empty messages and self copies
        // take no slot.
        let mut ops: Vec<GpuP2p> = (1..=8).flat_map(|p| [send(p, 100), recv(p, 100)]).collect();
        ops.extend([send(0, 5), recv(0, 5), send(9, 0)]);
        assert!(validate_p2p_group(0, 20, &ops).is_ok());
        ops.push(recv(9, 1));
        assert!(msg(&ops).contains("more than 16"), "{}", msg(&ops));
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
        let protocols = GpuProtocols::from_options(&crate::comm::CommOptions::default());
        let ops = [
            GpuP2p::Send {
                peer: 1,
                buf: 0x1000,
                bytes: 3 << 20,
            },
            GpuP2p::Recv {
                peer: 2,
                buf: 0x2000,
                bytes: 100,
            },
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
            GpuP2p::Send {
                peer: 3,
                buf: 0x5000,
                bytes: 0,
            },
        ];
        validate_p2p_group(0, 4, &ops).unwrap();
        let launch = P2pLaunch::plan(0, &ops, 4, &protocols).unwrap();
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
        assert_eq!(launch.copies, vec![(0x4000, 0x3000, 64)]);
    }
}
