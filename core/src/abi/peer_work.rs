//! The launch descriptor of the algorithms that address the peers' memory directly
//! instead of going through ring FIFOs: one-shot and two-shot all-reduce over peer-mapped
//! windows, and NVLS (multicast, or its unicast form over the same peer mappings).
//!
//! One host, at most [`PEER_MAX_RANKS`] ranks: every rank's window is mapped into every
//! rank's process (CUDA IPC or VMM file descriptors) and its addresses travel inline here.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Most ranks a [`PeerWork`] addresses (one NVSwitch or NVLink host).
pub const PEER_MAX_RANKS: usize = 8;

/// [`PeerWork::algorithm`]: every rank reads every peer's input and reduces it locally.
pub const PEER_ALGO_ONE_SHOT: u32 = 0;
/// [`PeerWork::algorithm`]: reduce-scatter by direct reads, all-gather by direct writes.
pub const PEER_ALGO_TWO_SHOT: u32 = 1;
/// [`PeerWork::algorithm`]: NVLS through a multicast object (`multimem` instructions).
pub const PEER_ALGO_NVLS: u32 = 2;
/// [`PeerWork::algorithm`]: the NVLS algorithm with each `multimem` access replaced by one
/// access per rank over the peer mappings.
pub const PEER_ALGO_NVLS_UNICAST: u32 = 3;

/// Bytes of one channel's flags in a direct window's flag area: one `u64` per sending rank,
/// padded to a 128-byte line.
pub const PEER_FLAGS_STRIDE: u64 = 128;

/// Lanes of the LL one-shot's data window (`kernels/cuda/direct.cu`): block c of a call
/// always uses lane c, so a call of a one-/two-shot communicator has at most this many
/// channels.
pub const PEER_LANES: u32 = 32;

/// One collective of a peer-pointer algorithm, as every block of its launch sees it.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PeerWork {
    /// Address of the communicator's `DevComm` (rank, abort flag, timeout, fault records).
    pub comm: u64,
    pub send_buff: u64,
    pub recv_buff: u64,
    /// Elements as the user passed them: all-reduce's count, reduce-scatter's receive
    /// count, all-gather's send count.
    pub count: u64,
    /// As `CollWork::red_op_arg`.
    pub red_op_arg: u64,
    /// One-/two-shot: bytes of each rank's data window (the input goes through it in
    /// rounds of this size).
    pub window_bytes: u64,
    /// Address of `MAX_CHANNELS` `u64`s in this rank's device memory: per channel, the
    /// barrier epochs (one-/two-shot) or NVLS steps done by earlier launches. Kept on the
    /// device so that CUDA graph replays count too.
    pub steps: u64,
    /// NVLS: the multicast mapping of the data allocation (0 for the unicast form).
    pub mc_data: u64,
    /// NVLS: the multicast mapping of the counter allocation (0 for the unicast form).
    pub mc_credit: u64,
    /// Rank r's data window (one-/two-shot) or NVLS data allocation, as mapped here.
    pub peer_data: [u64; PEER_MAX_RANKS],
    /// Rank r's flag area (one-/two-shot) or NVLS counter allocation, as mapped here.
    pub peer_flags: [u64; PEER_MAX_RANKS],
    /// NVLS: the rank of each head, in the search's channel order.
    pub heads: [i32; PEER_MAX_RANKS],
    /// `CollKind`.
    pub coll: u32,
    /// `DataType`.
    pub dtype: u32,
    /// `RedOp`.
    pub redop: u32,
    /// `PEER_ALGO_*`.
    pub algorithm: u32,
    /// Blocks of the launch, one channel each.
    pub nchannels: u32,
    /// NVLS heads in use (`heads`).
    pub nheads: u32,
    /// NVLS: bytes of one slot (`core::nvls::Layout::chunk_size`).
    pub chunk_size: u32,
    /// NVLS: the channels `core::nvls::Layout` was made for (buffer and counter offsets
    /// use it; a launch may use fewer); 0 for one-/two-shot.
    pub layout_channels: u32,
    /// As `CollWork::red_op_flags`.
    pub red_op_flags: u32,
    /// One-shot in its LL form: the first block (and lane) of the call, so that the calls
    /// of a fused launch run side by side on lanes of their own; block `lane_lo + k` runs
    /// part `k` of `nchannels` on lane `lane_lo + k`. 0 for every other form.
    pub lane_lo: u32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<PeerWork>() == 272);
    assert!(offset_of!(PeerWork, send_buff) == 8);
    assert!(offset_of!(PeerWork, count) == 24);
    assert!(offset_of!(PeerWork, window_bytes) == 40);
    assert!(offset_of!(PeerWork, steps) == 48);
    assert!(offset_of!(PeerWork, mc_data) == 56);
    assert!(offset_of!(PeerWork, mc_credit) == 64);
    assert!(offset_of!(PeerWork, peer_data) == 72);
    assert!(offset_of!(PeerWork, peer_flags) == 136);
    assert!(offset_of!(PeerWork, heads) == 200);
    assert!(offset_of!(PeerWork, coll) == 232);
    assert!(offset_of!(PeerWork, nchannels) == 248);
    assert!(offset_of!(PeerWork, layout_channels) == 260);
    assert!(offset_of!(PeerWork, red_op_flags) == 264);
    assert!(offset_of!(PeerWork, lane_lo) == 268);
};

/// Most collectives one peer-algorithm launch carries ([`PeerBatch::works`]): a group's
/// calls of one communicator, type, operator and algorithm on as many channels, fused as
/// NCCL fuses a group's calls. Four keep the arguments near 1 KiB (a `PeerWork` carries
/// every peer's addresses), within CUDA's 4 KiB of kernel parameters.
pub const PEER_BATCH_MAX: usize = 4;

/// What one launch of a one-/two-shot kernel receives: its collectives, run one after the
/// other by every block. (NVLS kernels take one `PeerWork`.)
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PeerBatch {
    /// Works in use, 1 to [`PEER_BATCH_MAX`]; all have the same `nchannels`.
    pub nworks: u32,
    pub reserved: u32,
    pub works: [PeerWork; PEER_BATCH_MAX],
}

impl PeerBatch {
    /// The arguments of a launch of one collective.
    pub fn one(work: PeerWork) -> PeerBatch {
        let mut batch = PeerBatch {
            nworks: 1,
            ..PeerBatch::default()
        };
        batch.works[0] = work;
        batch
    }

    /// The works in use.
    pub fn works(&self) -> &[PeerWork] {
        let n = (self.nworks as usize).min(PEER_BATCH_MAX);
        self.works.get(..n).unwrap_or(&[])
    }
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<PeerBatch>() == 8 + 272 * PEER_BATCH_MAX);
    assert!(offset_of!(PeerBatch, works) == 8);
};
