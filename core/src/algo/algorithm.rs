//! The algorithms a collective can run, `WEFT_ALGO`'s names for them, and the rule that
//! picks a peer-pointer all-reduce where one beats the ring.
//!
//! The ring runs over FIFO connections on both executors; so does the CPU executor's
//! one-shot, which passes every input round the ring (the tuner weighs it: see
//! [`super::Chooser::tuned`]). The GPU's one-shot, two-shot and NVLS read and write peers'
//! memory directly, and are chosen by measured limits instead of a cost model:
//!
//! One-shot all-reduce (its LL form, no barrier) up to [`one_shot_max_bytes`] where every
//! rank maps every other's memory. Measured on two H100 over NVLink (docs/benchmarks.md,
//! 2026-11-25): the barrier form of one-shot took 14.6 us with CUDA graphs where NCCL's LL
//! ring took 6.6 us, so one-shot went to LL lines (3.3 us there); its limit on two ranks is
//! where it stops beating the ring there (1 MiB: 19.1 us with CUDA graphs against the
//! ring's 22.3, 22.9 against 24.8 without; at 2 MiB the ring wins, 27 against 37).
//! Above that, two-shot up to [`two_shot_max_bytes`]: on two H200 (2026-11-27, every
//! algorithm forced in one call) it beat the ring at 2 MiB (22.1 against 23.8 us, 19.9
//! against 22.4 with CUDA graphs), lost at 4 MiB (36.0 against 32.9) and lost to one-shot at
//! 1 MiB; it is chosen on two ranks only, the one count measured. NVLS is not chosen unasked:
//! it runs here only in its unicast emulation, which is slower than the others.
//! For more ranks the limit shrinks (each rank stores its input into `n - 1` peers); those
//! limits are estimates until a machine with more GPUs measures them.
//!
//! Every rank must choose alike: the choice depends only on the call, the rank count and
//! what the communicator agreed on at init.

use core::fmt;

use crate::abi::{CollKind, PEER_MAX_RANKS};

/// A collective algorithm: which ranks exchange what. Both executors run the ring and the
/// one-shot all-reduce; two-shot and NVLS are the GPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ring channels over FIFO connections: every collective.
    Ring,
    /// All-reduce: every rank reduces every rank's whole input itself. The GPU reads each
    /// peer's input from its memory; the CPU executor passes each input round the ring.
    OneShot,
    /// All-reduce: reduce-scatter by direct reads, all-gather by direct writes.
    TwoShot,
    /// All-reduce, reduce-scatter, all-gather through NVLink SHARP (multicast, with the
    /// `WEFT_NVLS=1` opt-in) or its unicast form over peer-mapped memory.
    Nvls,
}

/// The name the GPU path gave [`Algo`] before the CPU executor's one-shot joined it.
pub type GpuAlgo = Algo;

impl Algo {
    pub const ALL: &'static [Algo] = &[Algo::Ring, Algo::OneShot, Algo::TwoShot, Algo::Nvls];

    /// The name `WEFT_ALGO` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::OneShot => "oneshot",
            Algo::TwoShot => "twoshot",
            Algo::Nvls => "nvls",
        }
    }

    /// `WEFT_ALGO`'s value: one of the names, any case; empty means "not forced".
    pub fn parse(value: &str) -> Result<Option<Algo>, AlgoError> {
        let v = value.trim();
        if v.is_empty() {
            return Ok(None);
        }
        Algo::ALL
            .iter()
            .find(|a| a.name().eq_ignore_ascii_case(v))
            .copied()
            .map(Some)
            .ok_or(AlgoError::UnknownName)
    }

    /// Whether the algorithm runs `coll`.
    pub const fn runs(self, coll: CollKind) -> bool {
        match self {
            Algo::Ring => true,
            Algo::OneShot | Algo::TwoShot => matches!(coll, CollKind::AllReduce),
            Algo::Nvls => matches!(
                coll,
                CollKind::AllReduce | CollKind::ReduceScatter | CollKind::AllGather
            ),
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the communicator can offer the peer-pointer algorithms (agreed by every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCaps {
    /// Every rank maps every other rank's memory (P2P over NVLink or PCIe, one host).
    pub peer_mapped: bool,
    /// NVLS heads are known (the NVLS search found one per rank).
    pub nvls_heads: bool,
}

impl PeerCaps {
    /// No rank maps another's memory: host memory, SHM windows, or several hosts.
    pub const NONE: PeerCaps = PeerCaps {
        peer_mapped: false,
        nvls_heads: false,
    };
}

/// Why a forced algorithm cannot run a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgoError {
    /// `WEFT_ALGO` names no algorithm.
    UnknownName,
    /// The algorithm does not implement the collective.
    Collective { algo: Algo, coll: CollKind },
    /// More ranks than the peer-pointer kernels address.
    TooManyRanks { algo: Algo, nranks: u32 },
    /// Some rank cannot map another's memory (SHM windows, or across hosts).
    NotPeerMapped { algo: Algo },
    /// NVLS without heads from the NVLS search.
    NoNvlsHeads,
}

impl fmt::Display for AlgoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgoError::UnknownName => write!(
                f,
                "WEFT_ALGO names no algorithm: use ring, oneshot, twoshot or nvls (or unset it)"
            ),
            AlgoError::Collective { algo, coll } => write!(
                f,
                "WEFT_ALGO={algo} does not run {}: {algo} runs {}; unset WEFT_ALGO or use ring",
                coll.name(),
                match algo {
                    Algo::Ring => "every collective",
                    Algo::OneShot | Algo::TwoShot => "all-reduce only",
                    Algo::Nvls => "all-reduce, reduce-scatter and all-gather",
                }
            ),
            AlgoError::TooManyRanks { algo, nranks } => write!(
                f,
                "WEFT_ALGO={algo} with {nranks} ranks: its kernels address at most \
                 {PEER_MAX_RANKS} ranks of one host; use ring"
            ),
            AlgoError::NotPeerMapped { algo } => write!(
                f,
                "WEFT_ALGO={algo} needs every rank to map every other rank's GPU memory \
                 (P2P on one host), and this communicator uses SHM or spans hosts; use ring"
            ),
            AlgoError::NoNvlsHeads => write!(
                f,
                "WEFT_ALGO=nvls needs NVLS heads from the NVLS channel search, which found \
                 none (no NVSwitch, or GPUs before sm_90); use ring, oneshot or twoshot"
            ),
        }
    }
}

/// The largest all-reduce, in bytes per rank, that the automatic choice runs one-shot on
/// `nranks` ranks; 0 where it never does.
///
/// From forced-algorithm sweeps beside NCCL 2.28 (docs/benchmarks.md): on two H200 one-shot
/// is the fastest up to 1 MiB; on four H200 (NVSwitch) up to 512 KiB, with and without CUDA
/// graphs (512 KiB: 18.8 us, two-shot 23.2, the ring 31.3). Three ranks were not measured:
/// each reads fewer peers than at four, so four's limit holds. More ranks: unmeasured, kept low.
pub const fn one_shot_max_bytes(nranks: u32) -> u64 {
    match nranks {
        0 | 1 => 0,
        2 => 1 << 20,
        3 | 4 => 512 << 10,
        _ if nranks as usize <= PEER_MAX_RANKS => 128 << 10,
        _ => 0,
    }
}

/// The largest all-reduce, in bytes per rank, that the automatic choice runs two-shot on
/// `nranks` ranks (above [`one_shot_max_bytes`]); 0 where it never does.
///
/// Two H200: two-shot beats the ring up to 2 MiB; four H200: up to 4 MiB (1 MiB 26.1 us
/// against the ring's 37.7, 4 MiB 51.5 against 58.7; at 8 MiB the ring is ahead, 75.9 against
/// 78.9). Three ranks (unmeasured) take two's limit: the ring's disadvantage grows with its
/// hops. More ranks: unmeasured, never.
pub const fn two_shot_max_bytes(nranks: u32) -> u64 {
    match nranks {
        2 | 3 => 2 << 20,
        4 => 4 << 20,
        _ => 0,
    }
}

/// `algo`, which `WEFT_ALGO` forces, if it can run a call of `coll` on `nranks` ranks of a
/// communicator that offers `caps`; the ring runs everything.
pub(super) fn check_forced(
    algo: Algo,
    coll: CollKind,
    nranks: u32,
    caps: PeerCaps,
) -> Result<Algo, AlgoError> {
    if algo == Algo::Ring {
        return Ok(algo);
    }
    if !algo.runs(coll) {
        return Err(AlgoError::Collective { algo, coll });
    }
    if nranks as usize > PEER_MAX_RANKS {
        return Err(AlgoError::TooManyRanks { algo, nranks });
    }
    if !caps.peer_mapped {
        return Err(AlgoError::NotPeerMapped { algo });
    }
    if algo == Algo::Nvls && !caps.nvls_heads {
        return Err(AlgoError::NoNvlsHeads);
    }
    Ok(algo)
}

/// The peer-pointer algorithm the automatic rule picks for a call of `coll` of `bytes` per
/// rank on `nranks` ranks: for an all-reduce between peer-mapped ranks, one-shot up to
/// [`one_shot_max_bytes`] and two-shot up to [`two_shot_max_bytes`]; `None` for everything
/// else (the tuner's FIFO algorithms run it).
pub(super) fn automatic(coll: CollKind, bytes: u64, nranks: u32, caps: PeerCaps) -> Option<Algo> {
    if coll != CollKind::AllReduce || !caps.peer_mapped {
        None
    } else if bytes <= one_shot_max_bytes(nranks) {
        Some(Algo::OneShot)
    } else if bytes <= two_shot_max_bytes(nranks) {
        Some(Algo::TwoShot)
    } else {
        None
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use alloc::string::ToString;

    /// The old `algo::choose`: the forced algorithm, checked, else the automatic rule's,
    /// else the ring.
    fn choose(
        forced: Option<Algo>,
        coll: CollKind,
        bytes: u64,
        nranks: u32,
        caps: PeerCaps,
    ) -> Result<Algo, AlgoError> {
        match forced {
            Some(algo) => check_forced(algo, coll, nranks, caps),
            None => Ok(automatic(coll, bytes, nranks, caps).unwrap_or(Algo::Ring)),
        }
    }

    const ALL_CAPS: PeerCaps = PeerCaps {
        peer_mapped: true,
        nvls_heads: true,
    };

    #[test]
    fn weft_algo_names() {
        assert_eq!(Algo::parse("ring"), Ok(Some(Algo::Ring)));
        assert_eq!(Algo::parse(" OneShot "), Ok(Some(Algo::OneShot)));
        assert_eq!(Algo::parse("TWOSHOT"), Ok(Some(Algo::TwoShot)));
        assert_eq!(Algo::parse("nvls"), Ok(Some(Algo::Nvls)));
        assert_eq!(Algo::parse(""), Ok(None));
        assert_eq!(Algo::parse("tree"), Err(AlgoError::UnknownName));
        for a in Algo::ALL {
            assert_eq!(Algo::parse(a.name()), Ok(Some(*a)));
        }
    }

    #[test]
    fn automatic_choice_is_one_then_two_shot_for_small_all_reduces_between_mapped_peers() {
        let unmapped = PeerCaps::NONE;
        for &coll in CollKind::ALL {
            for nranks in 1..=16u32 {
                let (one, two) = (one_shot_max_bytes(nranks), two_shot_max_bytes(nranks));
                for shift in 0..40 {
                    for bytes in [(1u64 << shift) - 1, 1u64 << shift, (1u64 << shift) + 3] {
                        let want = match coll {
                            CollKind::AllReduce if bytes <= one => Algo::OneShot,
                            CollKind::AllReduce if bytes <= two => Algo::TwoShot,
                            _ => Algo::Ring,
                        };
                        assert_eq!(choose(None, coll, bytes, nranks, ALL_CAPS), Ok(want));
                        // SHM windows or several hosts: always the ring.
                        assert_eq!(choose(None, coll, bytes, nranks, unmapped), Ok(Algo::Ring));
                    }
                }
            }
        }
        assert_eq!(one_shot_max_bytes(1), 0);
        assert_eq!(one_shot_max_bytes(2), 1 << 20);
        assert_eq!(one_shot_max_bytes(4), 512 << 10);
        // Two-shot only up to four ranks, always above one-shot's limit.
        assert_eq!(two_shot_max_bytes(2), 2 << 20);
        assert_eq!(two_shot_max_bytes(4), 4 << 20);
        assert!((5..=64).all(|n| two_shot_max_bytes(n) == 0));
        assert!((2..=4).all(|n| two_shot_max_bytes(n) > one_shot_max_bytes(n)));
        assert_eq!(
            choose(None, CollKind::AllReduce, (1 << 20) + 1, 2, ALL_CAPS),
            Ok(Algo::TwoShot)
        );
        assert_eq!(one_shot_max_bytes(PEER_MAX_RANKS as u32 + 1), 0);
        assert!(
            (2..=PEER_MAX_RANKS as u32).all(|n| one_shot_max_bytes(n) >= one_shot_max_bytes(n + 1))
        );
    }

    #[test]
    fn forced_algorithms_are_checked_against_the_call() {
        let ar = CollKind::AllReduce;
        assert_eq!(
            choose(Some(Algo::OneShot), ar, 8, 2, ALL_CAPS),
            Ok(Algo::OneShot)
        );
        assert_eq!(
            choose(Some(Algo::Nvls), CollKind::AllGather, 8, 8, ALL_CAPS),
            Ok(Algo::Nvls)
        );
        assert_eq!(
            choose(Some(Algo::Ring), CollKind::Broadcast, 8, 64, ALL_CAPS),
            Ok(Algo::Ring)
        );
        let e = choose(Some(Algo::TwoShot), CollKind::AllGather, 8, 2, ALL_CAPS);
        assert_eq!(
            e,
            Err(AlgoError::Collective {
                algo: Algo::TwoShot,
                coll: CollKind::AllGather
            })
        );
        assert!(e.unwrap_err().to_string().contains("all-reduce only"));
        assert_eq!(
            choose(Some(Algo::OneShot), ar, 8, 9, ALL_CAPS),
            Err(AlgoError::TooManyRanks {
                algo: Algo::OneShot,
                nranks: 9
            })
        );
        let no_p2p = PeerCaps {
            peer_mapped: false,
            nvls_heads: true,
        };
        assert_eq!(
            choose(Some(Algo::TwoShot), ar, 8, 2, no_p2p),
            Err(AlgoError::NotPeerMapped {
                algo: Algo::TwoShot
            })
        );
        let no_heads = PeerCaps {
            peer_mapped: true,
            nvls_heads: false,
        };
        assert_eq!(
            choose(Some(Algo::Nvls), ar, 8, 2, no_heads),
            Err(AlgoError::NoNvlsHeads)
        );
        assert_eq!(
            choose(Some(Algo::OneShot), ar, 8, 2, no_heads),
            Ok(Algo::OneShot)
        );
    }
}
