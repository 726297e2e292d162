//! Which algorithm and protocol a collective call runs: one chooser for the CPU executor and
//! the GPU kernels, answering alike on every rank.
//!
//! A [`Chooser`] holds what the user set ([`Settings`]: `NCCL_PROTO`, `WEFT_ALGO`,
//! `NCCL_P2P_LL_THRESHOLD`) and what the executor offers on one communicator ([`Offer`]: the
//! cost model of its connections, its LL buffers, room for a one-shot in its FIFOs, peers'
//! memory mapped or not). [`Chooser::choose`] turns a [`Call`] (collective, NCCL's byte
//! count, ranks) into a [`Choice`], the (algorithm, protocol) pair, in two steps:
//!
//! 1. [`Chooser::tuned`], NCCL's tuner: among the FIFO algorithms (the ring and, where the
//!    executor has one, the one-shot through the ring's FIFOs) and the protocols that
//!    `NCCL_PROTO` enables and the executor runs, the fastest by [`crate::tune`]'s model.
//!    An error when the settings leave no protocol.
//! 2. [`Chooser::algorithm`], weft's rule for the algorithms that bypass the FIFOs: the one
//!    `WEFT_ALGO` forces, checked against the call; or, unforced, a one-shot or two-shot
//!    all-reduce over peers' memory where every rank maps every other's and the message is
//!    under limits measured on GPUs ([`one_shot_max_bytes`], [`two_shot_max_bytes`]). It
//!    replaces the tuner's algorithm and keeps its protocol.
//!
//! Send and receive have NCCL's simpler rule, [`Chooser::p2p_protocol`].
//!
//! The cost model and `NCCL_PROTO`'s parser stay in [`crate::tune`]: they are NCCL's
//! formulas and syntax, used alone too (the model predicts times; the enabled set is
//! compared across ranks), while this module is the decision made from them. The two
//! families of algorithms are decided differently on purpose: the tuner's costs are NCCL's
//! (or fitted to the CPU executor), the peer algorithms' limits come from sweeps where
//! every algorithm was forced in turn on the same machine.
//!
//! Every rank must choose alike, or the two ends of a connection run different protocols
//! and wait on each other until the timeout: the choice depends only on the call and the
//! chooser, which the communicator builds from settings and offers that every rank agreed
//! on at init.

mod algorithm;
#[cfg(test)]
mod grid;
#[cfg(test)]
mod test;

use core::fmt;

pub use algorithm::{Algo, AlgoError, GpuAlgo, PeerCaps, one_shot_max_bytes, two_shot_max_bytes};

use crate::abi::{CollKind, Protocol};
use crate::fifo::NCCL_STEPS;
use crate::sched::Collective;
use crate::tune::{ProtocolEnable, ProtocolSet, TuningModel, call_bytes};

/// NCCL's default `NCCL_P2P_LL_THRESHOLD`: send/receive go LL up to this many bytes per
/// channel (NCCL `src/enqueue.cc`, `ncclParamP2pLLThreshold`).
pub const NCCL_P2P_LL_THRESHOLD: usize = 16384;

/// One collective call, as the chooser sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub collective: Collective,
    /// NCCL's `nBytes`: the whole output of an all-gather, the whole input of a
    /// reduce-scatter, the buffer otherwise (one rank's buffer for an all-reduce, what the
    /// peer algorithms' limits count).
    pub bytes: u64,
    pub nranks: usize,
}

impl Call {
    /// A call of `count` elements (as NCCL's API counts them) of `elem_size` bytes.
    pub fn new(collective: Collective, count: usize, elem_size: usize, nranks: usize) -> Self {
        let bytes = call_bytes(collective, count, elem_size, nranks);
        Call {
            collective,
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            nranks,
        }
    }

    fn kind(&self) -> CollKind {
        match self.collective {
            Collective::AllReduce => CollKind::AllReduce,
            Collective::ReduceScatter => CollKind::ReduceScatter,
            Collective::AllGather => CollKind::AllGather,
            Collective::Broadcast { .. } => CollKind::Broadcast,
            Collective::Reduce { .. } => CollKind::Reduce,
        }
    }

    /// The rank count as the peer algorithms' limits take it (more than `u32::MAX` ranks
    /// are as many as `u32::MAX`: too many for any of them).
    fn nranks_u32(&self) -> u32 {
        u32::try_from(self.nranks).unwrap_or(u32::MAX)
    }
}

/// What a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    pub algo: Algo,
    /// The protocol of the FIFO algorithms. One-shot, two-shot and NVLS on the GPU move
    /// data their own way and ignore it.
    pub protocol: Protocol,
}

/// What the user set: the same on every rank (the communicator checks at init).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// `NCCL_PROTO` / `WEFT_PROTO`: the protocols enabled per collective.
    pub protocols: ProtocolEnable,
    /// `WEFT_ALGO`: the algorithm every call must run; `None`: the automatic choice.
    pub algo: Option<Algo>,
    /// `NCCL_P2P_LL_THRESHOLD` / `WEFT_P2P_LL_THRESHOLD`: send/receive go LL up to this many
    /// bytes per channel; `None`: unset (see [`Chooser::p2p_ll_threshold`]).
    pub p2p_ll_threshold: Option<usize>,
}

/// What an executor offers on one communicator: the algorithms and protocols it can run
/// there, and what they cost. Built from what every rank agreed on at init.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// The costs of the FIFO algorithms on these connections.
    pub model: TuningModel,
    /// Whether LL runs here.
    pub ll: LlOffer,
    /// The FIFO steps of a one-shot through the ring's FIFOs, where the executor has one
    /// (the CPU's); `None`: it has none.
    pub fifo_one_shot: Option<FifoSteps>,
    /// What the peer-pointer algorithms (the GPU's one-shot, two-shot, NVLS) can use.
    pub peers: PeerCaps,
}

/// Whether LL runs on a communicator's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlOffer {
    /// Some connection has no LL buffer (a NET one, or `NCCL_LL_BUFFSIZE=0`): never LL.
    NoBuffer,
    /// LL buffers everywhere, but LL runs only once `NCCL_PROTO` / `WEFT_PROTO` is set to
    /// something other than its default, and send/receive only once a threshold is set:
    /// for kernels that have not yet run on this kind of connection (the GPU's over SHM
    /// windows).
    WhenAsked,
    /// LL buffers everywhere, and LL runs without being asked, as in NCCL.
    ByDefault,
}

impl LlOffer {
    /// The protocols an automatic choice may use under `enable`: SIMPLE always, LL as
    /// offered (LL128 is not implemented).
    pub fn runnable(self, enable: &ProtocolEnable) -> ProtocolSet {
        let simple = ProtocolSet::of(&[Protocol::Simple]);
        let ll = match self {
            LlOffer::NoBuffer => false,
            LlOffer::WhenAsked => *enable != ProtocolEnable::default(),
            LlOffer::ByDefault => true,
        };
        if ll {
            simple.with(Protocol::Ll)
        } else {
            simple
        }
    }
}

/// Payload bytes of one FIFO step of each protocol on every ring connection (0: none).
///
/// A one-shot through the FIFOs takes a message only where it fits half of the FIFO (4 of
/// its 8 steps): each rank then sends and receives in strict alternation, and a rank
/// blocked on a send has at least two messages unread by the next rank, which the next rank
/// can only have left unread by being blocked on an earlier send of its own; around the
/// ring that is impossible, so no cycle of waits forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FifoSteps {
    pub simple_bytes: usize,
    pub ll_bytes: usize,
}

impl FifoSteps {
    /// The protocols whose FIFO takes a one-shot of `bytes`.
    pub fn one_shot(&self, bytes: u64) -> ProtocolSet {
        let half = NCCL_STEPS / 2;
        let fits = |step: usize| {
            let step = u64::try_from(step).unwrap_or(u64::MAX);
            // At most `half` steps: bytes.div_ceil(step) <= half.
            step > 0 && bytes <= step.saturating_mul(half as u64)
        };
        let mut set = ProtocolSet::NONE;
        if fits(self.simple_bytes) {
            set = set.with(Protocol::Simple);
        }
        if fits(self.ll_bytes) {
            set = set.with(Protocol::Ll);
        }
        set
    }
}

/// Why a call has nothing to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChooseError {
    /// The settings leave the collective no protocol the executor runs.
    NoProtocol(NoProtocol),
    /// `WEFT_ALGO` forces an algorithm that cannot run the call.
    Algorithm(AlgoError),
}

/// `NCCL_PROTO` enables `enabled` for `collective`, and the executor runs `runnable`: they
/// share no protocol the tuner models. The executor's own message says which of its
/// connections lack what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoProtocol {
    pub collective: Collective,
    pub enabled: ProtocolSet,
    pub runnable: ProtocolSet,
}

impl fmt::Display for NoProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NCCL_PROTO enables {} for {}, but the executor runs {} on this communicator: \
             enable Simple",
            self.enabled,
            self.collective.name(),
            self.runnable
        )
    }
}

impl fmt::Display for ChooseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChooseError::NoProtocol(e) => e.fmt(f),
            ChooseError::Algorithm(e) => e.fmt(f),
        }
    }
}

impl From<NoProtocol> for ChooseError {
    fn from(e: NoProtocol) -> Self {
        ChooseError::NoProtocol(e)
    }
}

impl From<AlgoError> for ChooseError {
    fn from(e: AlgoError) -> Self {
        ChooseError::Algorithm(e)
    }
}

/// The protocol/algorithm chooser of one communicator (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chooser {
    pub settings: Settings,
    pub offer: Offer,
}

impl Chooser {
    /// What `call` runs: [`Chooser::tuned`], then [`Chooser::algorithm`] in its place where
    /// that names one.
    pub fn choose(&self, call: &Call) -> Result<Choice, ChooseError> {
        let tuned = self.tuned(call)?;
        Ok(match self.algorithm(call)? {
            Some(algo) => Choice {
                algo,
                protocol: tuned.protocol,
            },
            None => tuned,
        })
    }

    /// The protocols an automatic choice may use here (before `NCCL_PROTO`'s per-collective
    /// lists narrow them).
    pub fn runnable(&self) -> ProtocolSet {
        self.offer.ll.runnable(&self.settings.protocols)
    }

    /// NCCL's tuner over the FIFO algorithms: the ring or the FIFO one-shot, and LL or
    /// SIMPLE, the fastest by the model among what `NCCL_PROTO` enables for the collective
    /// and the executor runs here. Ties go to SIMPLE, then to the ring.
    pub fn tuned(&self, call: &Call) -> Result<Choice, NoProtocol> {
        let enabled = self.settings.protocols.for_collective(call.collective);
        let runnable = self.runnable();
        let one_shot = self
            .offer
            .fifo_one_shot
            .map_or(ProtocolSet::NONE, |steps| steps.one_shot(call.bytes));
        self.offer
            .model
            .choose(
                call.collective,
                call.bytes,
                call.nranks,
                enabled.intersect(runnable),
                one_shot,
            )
            .map(|c| Choice {
                algo: if c.one_shot {
                    Algo::OneShot
                } else {
                    Algo::Ring
                },
                protocol: c.protocol,
            })
            .ok_or(NoProtocol {
                collective: call.collective,
                enabled,
                runnable,
            })
    }

    /// The algorithm `WEFT_ALGO` forces, checked against the call and the offer; or,
    /// unforced, the peer-pointer all-reduce the automatic rule picks. `None`: the tuner's
    /// FIFO algorithm runs the call ([`Chooser::tuned`]).
    pub fn algorithm(&self, call: &Call) -> Result<Option<Algo>, AlgoError> {
        let (coll, nranks, peers) = (call.kind(), call.nranks_u32(), self.offer.peers);
        match self.settings.algo {
            Some(algo) => algorithm::check_forced(algo, coll, nranks, peers).map(Some),
            None => Ok(algorithm::automatic(coll, call.bytes, nranks, peers)),
        }
    }

    /// Send/receive's LL threshold in bytes per channel: the setting, else NCCL's where LL
    /// runs by default; `None`: never LL.
    pub fn p2p_ll_threshold(&self) -> Option<usize> {
        match self.offer.ll {
            LlOffer::NoBuffer => None,
            LlOffer::WhenAsked => self.settings.p2p_ll_threshold,
            LlOffer::ByDefault => self
                .settings
                .p2p_ll_threshold
                .or(Some(NCCL_P2P_LL_THRESHOLD)),
        }
    }

    /// The protocol of a send or receive of `bytes` spread over `nchannels` channels: LL up
    /// to the threshold per channel (NCCL: `bytes <= nChannels * NCCL_P2P_LL_THRESHOLD`).
    /// Both ends compute it from the same byte count.
    pub fn p2p_protocol(&self, bytes: usize, nchannels: u32) -> Protocol {
        let ll = self.p2p_ll_threshold().is_some_and(|t| {
            bytes <= t.saturating_mul(usize::try_from(nchannels).unwrap_or(usize::MAX))
        });
        if ll { Protocol::Ll } else { Protocol::Simple }
    }
}
