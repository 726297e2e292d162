//! NCCL's tuner: what each protocol costs on the FIFO algorithms, and which protocols
//! `NCCL_PROTO` enables. [`crate::algo::Chooser`] asks it, and decides.
//!
//! NCCL predicts each (algorithm, protocol)'s time for a call as a latency plus bytes over a
//! bandwidth (`ncclTopoTuneModel`: base latency, plus per-hop latency times the ring's
//! steps, plus `nBytes / algBw`) and runs the fastest that `NCCL_PROTO` leaves enabled.
//! [`TuningModel::choose`] does the same over [`Protocol::Ll`] and [`Protocol::Simple`] on
//! a ring, with one addition for all-reduce: the *one-shot* shape, where every rank's
//! whole input goes round the ring (`n - 1` hops) and each rank reduces all of them locally,
//! in ring order, instead of the ring's reduce-scatter then all-gather (`2(n - 1)` hops). It
//! moves `(n - 1) / n` more bytes per link and halves the hops: on two ranks it moves the
//! same bytes in one hop instead of two, which is what a small message's time is made of.
//!
//! [`ProtocolEnable`] is `NCCL_PROTO` in NCCL's syntax (`parseList` in NCCL's
//! `src/graph/tuning.cc`): a comma-separated list of protocol names (`LL`, `LL128`,
//! `Simple`, any case) to enable, or after `^` to disable; optionally per collective after a
//! `;` (`"LL,Simple;allreduce:^LL"`, `"^LL128;allreduce:LL128"`). A name NCCL does not know
//! is an error, as in NCCL.
//!
//! Every rank must choose alike, or their ends of a connection disagree: the model's answer
//! depends only on the call, the rank count, the enabled set and what every connection
//! supports, which the communicator makes sure all ranks share.

use core::fmt;

use crate::abi::Protocol;
use crate::sched::Collective;

/// NCCL's `nBytes` of a call of `count` elements of `elem_size` bytes on `nranks` ranks,
/// what the tuner weighs: the whole output of an all-gather, the whole input of a
/// reduce-scatter (`count` is per rank for both), the buffer otherwise.
pub fn call_bytes(collective: Collective, count: usize, elem_size: usize, nranks: usize) -> usize {
    let per_rank = match collective {
        Collective::AllGather | Collective::ReduceScatter => nranks,
        _ => 1,
    };
    count.saturating_mul(elem_size).saturating_mul(per_rank)
}

/// A set of protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProtocolSet(u8);

impl ProtocolSet {
    pub const NONE: ProtocolSet = ProtocolSet(0);
    pub const ALL: ProtocolSet = ProtocolSet(0b111);

    pub fn of(protocols: &[Protocol]) -> Self {
        protocols
            .iter()
            .fold(ProtocolSet::NONE, |set, p| set.with(*p))
    }

    // Each protocol's number is below 3 (its index): the shifts stay in the byte.
    pub const fn contains(self, p: Protocol) -> bool {
        self.0 & (1 << (p as u8)) != 0
    }

    pub const fn with(self, p: Protocol) -> Self {
        ProtocolSet(self.0 | 1 << (p as u8))
    }

    pub const fn intersect(self, other: ProtocolSet) -> Self {
        ProtocolSet(self.0 & other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set as 3 bits (bit `p` for protocol number `p`), for exchanging between ranks.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set of 3 bits; other bits are dropped.
    pub const fn from_bits(bits: u8) -> Self {
        ProtocolSet(bits & 0b111)
    }
}

impl ProtocolSet {
    /// NCCL's names, comma-separated (`LL,Simple`); nothing for the empty set.
    fn write_list(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for p in Protocol::ALL {
            if self.contains(*p) {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(p.name())?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Display for ProtocolSet {
    /// NCCL's names, comma-separated (`LL,Simple`), or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        self.write_list(f)
    }
}

/// The collectives `NCCL_PROTO` can name, in NCCL's order (`ncclFuncStr`).
const FUNCTIONS: [&str; 5] = [
    "Broadcast",
    "Reduce",
    "AllGather",
    "ReduceScatter",
    "AllReduce",
];

fn function_index(c: Collective) -> usize {
    match c {
        Collective::Broadcast { .. } => 0,
        Collective::Reduce { .. } => 1,
        Collective::AllGather => 2,
        Collective::ReduceScatter => 3,
        Collective::AllReduce => 4,
    }
}

/// What is wrong with an `NCCL_PROTO` value; `at` is the byte range of the offending token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoParseError {
    pub kind: ProtoParseErrorKind,
    pub at: (usize, usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoParseErrorKind {
    /// Not `LL`, `LL128` or `Simple`.
    UnknownProtocol,
    /// Before a `:`, not a collective NCCL names (`AllReduce`, ...).
    UnknownCollective,
    /// An entry after the first without a `collective:` prefix.
    MissingPrefix,
}

impl fmt::Display for ProtoParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ProtoParseErrorKind::UnknownProtocol => {
                f.write_str("unknown protocol (known: LL, LL128, Simple, any case)")
            }
            ProtoParseErrorKind::UnknownCollective => f.write_str(
                "unknown collective before ':' (known: Broadcast, Reduce, AllGather, \
                 ReduceScatter, AllReduce)",
            ),
            ProtoParseErrorKind::MissingPrefix => f.write_str(
                "every entry after the first needs a collective prefix, as in \
                 \"LL,Simple;allreduce:^LL\"",
            ),
        }
    }
}

/// `NCCL_PROTO`: the protocols enabled for each collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolEnable {
    per_function: [ProtocolSet; 5],
}

impl Default for ProtocolEnable {
    /// Everything enabled (NCCL enables LL128 only where the hardware orders its stores,
    /// which is the executor's business: it offers only what it implements).
    fn default() -> Self {
        ProtocolEnable {
            per_function: [ProtocolSet::ALL; 5],
        }
    }
}

/// `text[range]` with the range's bounds, trimmed of blanks.
fn token(text: &str, start: usize, end: usize) -> (&str, (usize, usize)) {
    let raw = text.get(start..end).unwrap_or("");
    let lead = raw.len().saturating_sub(raw.trim_start().len());
    let trimmed = raw.trim();
    let from = start.saturating_add(lead);
    (trimmed, (from, from.saturating_add(trimmed.len())))
}

impl ProtocolEnable {
    /// Parses NCCL's syntax (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, ProtoParseError> {
        let mut enable = ProtocolEnable::default();
        let mut entry_start = 0usize;
        for (k, entry) in text.split(';').enumerate() {
            let entry_end = entry_start.saturating_add(entry.len());
            // strtok skips empty entries.
            if !entry.trim().is_empty() {
                let (prefix, list_start) = match entry.find(':') {
                    Some(colon) => (
                        Some(token(text, entry_start, entry_start.saturating_add(colon))),
                        entry_start.saturating_add(colon).saturating_add(1),
                    ),
                    None if k == 0 => (None, entry_start),
                    None => {
                        return Err(ProtoParseError {
                            kind: ProtoParseErrorKind::MissingPrefix,
                            at: token(text, entry_start, entry_end).1,
                        });
                    }
                };
                let set = Self::parse_list(text, list_start, entry_end)?;
                match prefix {
                    None => enable.per_function = [set; 5],
                    Some((name, at)) => {
                        let index = FUNCTIONS
                            .iter()
                            .position(|f| f.eq_ignore_ascii_case(name))
                            .ok_or(ProtoParseError {
                                kind: ProtoParseErrorKind::UnknownCollective,
                                at,
                            })?;
                        if let Some(slot) = enable.per_function.get_mut(index) {
                            *slot = set;
                        }
                    }
                }
            }
            entry_start = entry_end.saturating_add(1);
        }
        Ok(enable)
    }

    /// One list (`LL,Simple` or `^LL`) in `text[start..end]`.
    fn parse_list(text: &str, start: usize, end: usize) -> Result<ProtocolSet, ProtoParseError> {
        let (list, (mut at, _)) = token(text, start, end);
        let (negate, list) = match list.strip_prefix('^') {
            Some(rest) => {
                at = at.saturating_add(1);
                (true, rest)
            }
            None => (false, list),
        };
        let mut named = ProtocolSet::NONE;
        for name in list.split(',') {
            let name_end = at.saturating_add(name.len());
            let (trimmed, range) = token(text, at, name_end);
            if !trimmed.is_empty() {
                let p = Protocol::ALL
                    .iter()
                    .find(|p| p.name().eq_ignore_ascii_case(trimmed))
                    .ok_or(ProtoParseError {
                        kind: ProtoParseErrorKind::UnknownProtocol,
                        at: range,
                    })?;
                named = named.with(*p);
            }
            at = name_end.saturating_add(1);
        }
        Ok(if negate {
            ProtocolSet(ProtocolSet::ALL.0 & !named.0)
        } else {
            named
        })
    }

    /// The protocols enabled for `collective`.
    pub fn for_collective(&self, collective: Collective) -> ProtocolSet {
        self.per_function
            .get(function_index(collective))
            .copied()
            .unwrap_or(ProtocolSet::ALL)
    }

    /// 15 bits (3 per collective, NCCL's order), for exchanging between ranks.
    pub fn to_bits(&self) -> u16 {
        self.per_function
            .iter()
            .zip(Self::SHIFTS)
            .fold(0u16, |acc, (s, shift)| acc | u16::from(s.bits()) << shift)
    }

    pub fn from_bits(bits: u16) -> Self {
        let mut enable = ProtocolEnable::default();
        for (slot, shift) in enable.per_function.iter_mut().zip(Self::SHIFTS) {
            // The mask keeps 3 bits: the cast loses nothing.
            *slot = ProtocolSet::from_bits(((bits >> shift) & 0b111) as u8);
        }
        enable
    }

    /// Where each collective's 3 bits sit in [`ProtocolEnable::to_bits`].
    const SHIFTS: [u32; 5] = [0, 3, 6, 9, 12];
}

impl fmt::Display for ProtocolEnable {
    /// One list when every collective has the same, else one `Collective:list` per
    /// collective, as `NCCL_PROTO` would spell it (an empty list enables nothing).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.per_function[0];
        if self.per_function.iter().all(|s| *s == first) {
            return first.write_list(f);
        }
        for (i, (name, set)) in FUNCTIONS.iter().zip(self.per_function).enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{name}:")?;
            set.write_list(f)?;
        }
        Ok(())
    }
}

/// One (shape, protocol)'s costs: NCCL's three tuner constants, in integer units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolCosts {
    /// Per call, whatever the size (NCCL's `baseLatencies`), in nanoseconds.
    pub base_ns: u64,
    /// Per hop a message crosses one after the other (NCCL's `hwLatencies`), in nanoseconds.
    pub hop_ns: u64,
    /// Bytes per microsecond each link carries and each rank absorbs (NCCL's bus
    /// bandwidth; MB/s).
    pub bus_mbps: u64,
}

/// One of the tuner's candidates: a protocol and, for all-reduce, whether it runs one-shot
/// (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub protocol: Protocol,
    pub one_shot: bool,
}

/// Costs of each shape and protocol an executor implements, as NCCL keeps a latency and a
/// bandwidth per (algorithm, protocol). LL128 is not modelled (no executor has it yet), so it
/// is never chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TuningModel {
    pub ring_ll: ProtocolCosts,
    pub ring_simple: ProtocolCosts,
    pub one_shot_ll: ProtocolCosts,
    pub one_shot_simple: ProtocolCosts,
    /// The largest input (bytes per rank) a one-shot all-reduce takes: each rank holds
    /// every rank's input at once.
    pub one_shot_max_bytes: u64,
}

impl TuningModel {
    /// The CPU executor on host memory through shared memory, fitted to `weft perf
    /// all-reduce --ranks 2` on the 2-core build machine when it was quiet (8 B to 256 KiB,
    /// docs/benchmarks.md, "Small messages"). A hop is a cache-line transfer or a few: LL
    /// signals with the data (one line), SIMPLE with the tail, size and head (three). LL
    /// moves half its bytes as flags and checks a flag every 4 bytes: 2.1 GB/s on the quiet
    /// machine, 0.7 GB/s when it was busy, where SIMPLE copies at 5-7 GB/s either way; the
    /// model takes 1.4 GB/s, which puts the switch from LL to SIMPLE between 128 and 256
    /// bytes, where both states measured it (at 256 B SIMPLE was as fast as LL when quiet
    /// and 0.76 us against 1.00 when busy, 2026-11-27). A one-shot rank copies and reduces
    /// the whole buffer, a ring rank half of it, hence the ring's better SIMPLE bandwidth.
    pub const HOST_SHM: TuningModel = TuningModel {
        ring_ll: ProtocolCosts {
            base_ns: 20,
            hop_ns: 170,
            bus_mbps: 1_400,
        },
        ring_simple: ProtocolCosts {
            base_ns: 50,
            hop_ns: 250,
            bus_mbps: 6_700,
        },
        one_shot_ll: ProtocolCosts {
            base_ns: 20,
            hop_ns: 150,
            bus_mbps: 1_400,
        },
        one_shot_simple: ProtocolCosts {
            base_ns: 50,
            hop_ns: 220,
            bus_mbps: 5_300,
        },
        one_shot_max_bytes: 64 * 1024,
    };

    /// NCCL's own model of a ring over NVLink on Hopper (`src/graph/tuning.cc`,
    /// `ncclTunerConstantsDefaults`), for the GPU kernels' `nchannels` channels:
    ///
    /// - base latency (`baseLatencies[Ring]`): LL 6.6 us, SIMPLE 8.4 us;
    /// - per hop (`hwLatencies[NVLINK][Ring]`): LL 0.6 us, SIMPLE 3.4 us;
    /// - bus bandwidth: `nChannels * bwIntra` for SIMPLE, with NCCL's sm90 NVLink channel
    ///   bandwidth of 20 GB/s (`SM90_NVLINK_BW`, rounded down) for `bwIntra`; LL
    ///   `min(llMaxBw, busBw * .5)` with `llMaxBws[Hopper-N1]` = 141 GB/s.
    ///
    /// No one-shot in this model (`one_shot_max_bytes` is 0): the GPU's one-shot reads peers'
    /// memory, and [`crate::algo::Chooser`] picks it by measured limits instead. The GPU
    /// communicator offers LL to this model by default on P2P windows; on SHM windows only
    /// when `NCCL_PROTO` / `WEFT_PROTO` asks.
    pub const fn nvlink(nchannels: u32) -> TuningModel {
        let channels = if nchannels == 0 { 1 } else { nchannels as u64 };
        let simple_bw = channels.saturating_mul(20_000);
        let half = simple_bw / 2;
        let ll_bw = if half < 141_000 { half } else { 141_000 };
        let none = ProtocolCosts {
            base_ns: 0,
            hop_ns: 0,
            bus_mbps: 1,
        };
        TuningModel {
            ring_ll: ProtocolCosts {
                base_ns: 6_600,
                hop_ns: 600,
                bus_mbps: ll_bw,
            },
            ring_simple: ProtocolCosts {
                base_ns: 8_400,
                hop_ns: 3_400,
                bus_mbps: simple_bw,
            },
            one_shot_ll: none,
            one_shot_simple: none,
            one_shot_max_bytes: 0,
        }
    }

    fn costs(&self, choice: Candidate) -> Option<ProtocolCosts> {
        match (choice.protocol, choice.one_shot) {
            (Protocol::Ll, false) => Some(self.ring_ll),
            (Protocol::Simple, false) => Some(self.ring_simple),
            (Protocol::Ll, true) => Some(self.one_shot_ll),
            (Protocol::Simple, true) => Some(self.one_shot_simple),
            (Protocol::Ll128, _) => None,
        }
    }

    /// Predicted nanoseconds for `collective` moving `bytes` (NCCL's `nBytes`: the whole
    /// output of an all-gather, the whole input of a reduce-scatter, the buffer otherwise)
    /// over a ring of `nranks` with `choice`. `None` for a protocol without costs or a
    /// one-shot that is not an all-reduce.
    pub fn predict_ns(
        &self,
        collective: Collective,
        bytes: u64,
        nranks: usize,
        choice: Candidate,
    ) -> Option<u64> {
        let costs = self.costs(choice)?;
        let n = u64::try_from(nranks).unwrap_or(u64::MAX).max(1);
        let bw = costs.bus_mbps.max(1);
        if choice.one_shot {
            if collective != Collective::AllReduce {
                return None;
            }
            // n - 1 hops, each carrying the whole buffer.
            let hops = n.saturating_sub(1);
            let moved = bytes.saturating_mul(hops);
            return Some(
                costs
                    .base_ns
                    .saturating_add(hops.saturating_mul(costs.hop_ns))
                    .saturating_add(moved.saturating_mul(1000).checked_div(bw).unwrap_or(0)),
            );
        }
        // NCCL's ring: nsteps hops, and algBw = busBw * nRanks / nsteps.
        let nsteps = match collective {
            Collective::AllReduce => n.saturating_sub(1).saturating_mul(2),
            Collective::ReduceScatter | Collective::AllGather => n.saturating_sub(1),
            Collective::Broadcast { .. } | Collective::Reduce { .. } => n,
        }
        .max(1);
        let transfer = bytes
            .saturating_mul(1000)
            .saturating_mul(nsteps)
            .checked_div(bw.saturating_mul(n))
            .unwrap_or(0);
        Some(
            costs
                .base_ns
                .saturating_add(nsteps.saturating_mul(costs.hop_ns))
                .saturating_add(transfer),
        )
    }

    /// The fastest predicted choice among `allowed` (what `NCCL_PROTO` enables for the
    /// collective, intersected with what every connection supports), one-shot only in the
    /// protocols of `one_shot` (those whose FIFO takes the whole message in at most half of
    /// its steps, which the one-shot's order needs to be free of deadlock). `None` when
    /// `allowed` has no modelled protocol. Ties go to SIMPLE, then to the ring.
    pub fn choose(
        &self,
        collective: Collective,
        bytes: u64,
        nranks: usize,
        allowed: ProtocolSet,
        one_shot: ProtocolSet,
    ) -> Option<Candidate> {
        let mut best: Option<(u64, Candidate)> = None;
        let candidates = [
            Candidate {
                protocol: Protocol::Simple,
                one_shot: false,
            },
            Candidate {
                protocol: Protocol::Ll,
                one_shot: false,
            },
            Candidate {
                protocol: Protocol::Simple,
                one_shot: true,
            },
            Candidate {
                protocol: Protocol::Ll,
                one_shot: true,
            },
        ];
        for choice in candidates {
            if !allowed.contains(choice.protocol)
                || (choice.one_shot
                    && (nranks < 2
                        || bytes > self.one_shot_max_bytes
                        || !one_shot.contains(choice.protocol)))
            {
                continue;
            }
            let Some(t) = self.predict_ns(collective, bytes, nranks, choice) else {
                continue;
            };
            if best.is_none_or(|(b, _)| t < b) {
                best = Some((t, choice));
            }
        }
        best.map(|(_, c)| c)
    }
}

#[cfg(test)]
mod test {
    use std::format;
    use std::string::ToString;

    use super::*;

    const ALL_COLLECTIVES: [Collective; 5] = [
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 1 },
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
    ];

    fn set(ps: &[Protocol]) -> ProtocolSet {
        ProtocolSet::of(ps)
    }

    #[test]
    fn nccl_proto_lists() {
        use Protocol::*;
        let each = |text: &str| {
            let e = ProtocolEnable::parse(text).unwrap();
            ALL_COLLECTIVES.map(|c| e.for_collective(c))
        };
        assert_eq!(each(""), [ProtocolSet::ALL; 5]);
        assert_eq!(each("LL,Simple"), [set(&[Ll, Simple]); 5]);
        assert_eq!(each("simple"), [set(&[Simple]); 5]);
        assert_eq!(each("^LL"), [set(&[Ll128, Simple]); 5]);
        assert_eq!(each("^ll128 , SIMPLE"), [set(&[Ll]); 5]);
        assert_eq!(each(" LL "), [set(&[Ll]); 5]);
        // NCCL's own examples (src/graph/tuning.cc).
        let mut want = [set(&[Ll, Simple]); 5];
        want[4] = set(&[Ll128, Simple]);
        assert_eq!(each("LL,Simple;allreduce:^LL"), want);
        let mut want = [set(&[Ll, Simple]); 5];
        want[4] = set(&[Ll128]);
        assert_eq!(each("^LL128;allreduce:LL128"), want);
        // A prefix alone changes only its collective; later entries override earlier ones.
        let mut want = [ProtocolSet::ALL; 5];
        want[2] = set(&[Simple]);
        assert_eq!(each("AllGather:Simple"), want);
        want[2] = set(&[Ll]);
        assert_eq!(each("allgather:simple;ALLGATHER:LL"), want);
        // "^" with nothing after it disables nothing; an empty list enables nothing.
        assert_eq!(each("^"), [ProtocolSet::ALL; 5]);
        assert_eq!(each("reduce:"), {
            let mut w = [ProtocolSet::ALL; 5];
            w[1] = ProtocolSet::NONE;
            w
        });
    }

    #[test]
    fn nccl_proto_errors_point_at_the_token() {
        let err = |text: &str| ProtocolEnable::parse(text).unwrap_err();
        let e = err("LL,LX");
        assert_eq!(
            (e.kind, e.at),
            (ProtoParseErrorKind::UnknownProtocol, (3, 5))
        );
        let e = err("  ^ LL, bogus ");
        assert_eq!(
            (e.kind, &"  ^ LL, bogus "[e.at.0..e.at.1]),
            (ProtoParseErrorKind::UnknownProtocol, "bogus")
        );
        let e = err("LL;allgathr:Simple");
        assert_eq!(
            (e.kind, e.at),
            (ProtoParseErrorKind::UnknownCollective, (3, 11))
        );
        let e = err("LL;Simple");
        assert_eq!((e.kind, e.at), (ProtoParseErrorKind::MissingPrefix, (3, 9)));
        assert!(e.to_string().contains("allreduce:^LL"));
        assert!(err("LL128,LL129").to_string().contains("LL, LL128, Simple"));
    }

    #[test]
    fn enable_sets_round_trip_and_print_as_nccl_spells_them() {
        for text in [
            "",
            "LL",
            "^LL",
            "LL,Simple;allreduce:^LL",
            "broadcast:LL;reduce:",
            "^LL128;allreduce:LL128",
        ] {
            let e = ProtocolEnable::parse(text).unwrap();
            assert_eq!(ProtocolEnable::from_bits(e.to_bits()), e, "{text}");
            // What it prints parses back to the same sets.
            assert_eq!(
                ProtocolEnable::parse(&format!("{e}")).unwrap(),
                e,
                "{text} -> {e}"
            );
        }
        assert_eq!(ProtocolEnable::default().to_string(), "LL,LL128,Simple");
        assert_eq!(
            ProtocolEnable::parse("^ll").unwrap().to_string(),
            "LL128,Simple"
        );
        assert_eq!(
            ProtocolEnable::parse("LL;allreduce:Simple")
                .unwrap()
                .to_string(),
            "Broadcast:LL;Reduce:LL;AllGather:LL;ReduceScatter:LL;AllReduce:Simple"
        );
        assert_eq!(ProtocolSet::NONE.to_string(), "none");
    }

    #[test]
    fn the_host_model_picks_ll_small_and_simple_large() {
        use Protocol::*;
        let m = TuningModel::HOST_SHM;
        let both = set(&[Ll, Simple]);
        for nranks in [2usize, 3, 4, 8] {
            for c in ALL_COLLECTIVES {
                let small = m.choose(c, 8, nranks, both, ProtocolSet::ALL).unwrap();
                assert_eq!(small.protocol, Ll, "{c:?} 8 B on {nranks}");
                assert_eq!(
                    small.one_shot,
                    c == Collective::AllReduce,
                    "{c:?} on {nranks}"
                );
                let large = m
                    .choose(c, 64 << 20, nranks, both, ProtocolSet::ALL)
                    .unwrap();
                assert_eq!(
                    large,
                    Candidate {
                        protocol: Simple,
                        one_shot: false
                    },
                    "{c:?} on {nranks}"
                );
                // As the size grows the protocol flips once, from LL to SIMPLE, and the
                // shape once, from one-shot to the ring.
                let picks: std::vec::Vec<Candidate> = (0..27)
                    .map(|shift| {
                        m.choose(c, 1 << shift, nranks, both, ProtocolSet::ALL)
                            .unwrap()
                    })
                    .collect();
                let flips = |f: fn(&Candidate) -> bool| {
                    picks.windows(2).filter(|w| f(&w[0]) != f(&w[1])).count()
                };
                assert_eq!(
                    flips(|c| c.protocol == Ll),
                    1,
                    "{c:?} on {nranks}: {picks:?}"
                );
                assert!(flips(|c| c.one_shot) <= 1, "{c:?} on {nranks}: {picks:?}");
            }
        }
        // Two ranks, as measured: LL one-shot to 128 B, SIMPLE one-shot to 4 KiB, the ring on.
        let at = |b: u64| {
            m.choose(Collective::AllReduce, b, 2, both, ProtocolSet::ALL)
                .unwrap()
        };
        assert_eq!(
            at(128),
            Candidate {
                protocol: Ll,
                one_shot: true
            }
        );
        assert_eq!(
            at(256),
            Candidate {
                protocol: Simple,
                one_shot: true
            }
        );
        assert_eq!(
            at(1024),
            Candidate {
                protocol: Simple,
                one_shot: true
            }
        );
        assert_eq!(
            at(4096),
            Candidate {
                protocol: Simple,
                one_shot: true
            }
        );
        assert_eq!(
            at(32 << 10),
            Candidate {
                protocol: Simple,
                one_shot: false
            }
        );
        // Without room in the FIFO for a one-shot, the ring.
        let ring = m
            .choose(Collective::AllReduce, 8, 2, both, ProtocolSet::NONE)
            .unwrap();
        assert_eq!(
            ring,
            Candidate {
                protocol: Ll,
                one_shot: false
            }
        );
        // Past its cap, no one-shot.
        let big = m.one_shot_max_bytes + 1;
        assert!(
            !m.choose(Collective::AllReduce, big, 2, set(&[Ll]), ProtocolSet::ALL)
                .unwrap()
                .one_shot
        );
    }

    #[test]
    fn the_nvlink_model_is_nccls_and_never_one_shot() {
        use Protocol::*;
        let both = set(&[Ll, Simple]);
        let m = TuningModel::nvlink(16);
        assert_eq!(m.ring_simple.bus_mbps, 320_000);
        assert_eq!(m.ring_ll.bus_mbps, 141_000);
        // Few channels: LL is half of SIMPLE's bandwidth.
        assert_eq!(TuningModel::nvlink(2).ring_ll.bus_mbps, 20_000);
        assert_eq!(TuningModel::nvlink(0), TuningModel::nvlink(1));
        // 8 B all-reduce on 2 GPUs: NCCL's 6.6 + 2 x 0.6 us for LL, 8.4 + 2 x 3.4 for SIMPLE.
        let ll = Candidate {
            protocol: Ll,
            one_shot: false,
        };
        let simple = Candidate {
            protocol: Simple,
            one_shot: false,
        };
        assert_eq!(m.predict_ns(Collective::AllReduce, 8, 2, ll), Some(7_800));
        assert_eq!(
            m.predict_ns(Collective::AllReduce, 8, 2, simple),
            Some(15_200)
        );
        for nranks in [2usize, 4, 8] {
            for c in ALL_COLLECTIVES {
                let picks: std::vec::Vec<Candidate> = (0..31)
                    .map(|shift| {
                        m.choose(c, 1 << shift, nranks, both, ProtocolSet::ALL)
                            .unwrap()
                    })
                    .collect();
                assert!(picks.iter().all(|p| !p.one_shot), "{c:?} on {nranks}");
                assert_eq!(picks[0], ll, "{c:?} on {nranks}");
                assert_eq!(picks[30], simple, "{c:?} on {nranks}");
                let flips = picks.windows(2).filter(|w| w[0] != w[1]).count();
                assert_eq!(flips, 1, "{c:?} on {nranks}: {picks:?}");
            }
        }
        // With LL alone enabled (NCCL_PROTO=LL), LL at every size.
        assert_eq!(
            m.choose(
                Collective::AllGather,
                1 << 30,
                2,
                set(&[Ll]),
                ProtocolSet::ALL
            ),
            Some(ll)
        );
    }

    #[test]
    fn the_choice_honours_the_enabled_set() {
        use Protocol::*;
        let m = TuningModel::HOST_SHM;
        let c = Collective::AllReduce;
        assert_eq!(
            m.choose(c, 8, 2, set(&[Simple]), ProtocolSet::ALL)
                .unwrap()
                .protocol,
            Simple
        );
        assert_eq!(
            m.choose(c, 1 << 26, 2, set(&[Ll]), ProtocolSet::ALL)
                .unwrap()
                .protocol,
            Ll
        );
        assert_eq!(m.choose(c, 8, 2, set(&[Ll128]), ProtocolSet::ALL), None);
        assert_eq!(m.choose(c, 8, 2, ProtocolSet::NONE, ProtocolSet::ALL), None);
        // One rank: no one-shot, the ring (of one) with whatever is allowed.
        assert_eq!(
            m.choose(c, 8, 1, set(&[Ll]), ProtocolSet::ALL),
            Some(Candidate {
                protocol: Ll,
                one_shot: false
            })
        );
        assert_eq!(
            m.predict_ns(
                Collective::AllGather,
                8,
                2,
                Candidate {
                    protocol: Ll,
                    one_shot: true
                }
            ),
            None
        );
    }
}
