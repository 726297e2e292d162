//! Per-channel and per-communicator device state: who a rank's neighbours are on each
//! channel, and where each peer's connections are described.
//!
//! Rank numbers are `i32` with -1 meaning "none", as in NCCL, because a tree root has no
//! parent and a leaf has no children; arrays of variable length (per peer, per ring
//! position) live elsewhere in device memory and are referenced by `u64` address.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::TREE_MAX_CHILDREN;
use super::conn::ConnInfo;
use crate::wire::ParseError;

/// This rank's place in one channel's ring.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RingInfo {
    /// Rank this rank receives from.
    pub prev: i32,
    /// Rank this rank sends to.
    pub next: i32,
    /// Position of this rank in the ring (0 for the ring's first rank).
    pub index: i32,
    /// Must be zero.
    pub reserved: u32,
    /// Address of `nranks` `i32` ranks in ring order (0: not uploaded).
    pub user_ranks: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<RingInfo>() == 24);
    assert!(offset_of!(RingInfo, prev) == 0);
    assert!(offset_of!(RingInfo, next) == 4);
    assert!(offset_of!(RingInfo, index) == 8);
    assert!(offset_of!(RingInfo, user_ranks) == 16);
};

/// This rank's place in one channel's tree.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct TreeInfo {
    /// Distance from the root (0 at the root).
    pub depth: i32,
    /// Parent rank, -1 at the root.
    pub up: i32,
    /// Child ranks, -1 where absent.
    pub down: [i32; TREE_MAX_CHILDREN],
    /// Must be zero.
    pub reserved: u32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<TreeInfo>() == 24);
    assert!(offset_of!(TreeInfo, depth) == 0);
    assert!(offset_of!(TreeInfo, up) == 4);
    assert!(offset_of!(TreeInfo, down) == 8);
    assert!(offset_of!(TreeInfo, reserved) == 20);
};

impl Default for TreeInfo {
    /// A rank alone in its tree: no parent, no children.
    fn default() -> Self {
        TreeInfo {
            depth: 0,
            up: -1,
            down: [-1; TREE_MAX_CHILDREN],
            reserved: 0,
        }
    }
}

/// The two connections this rank has with one peer on one channel.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ChannelPeer {
    /// Data this rank sends to the peer.
    pub send: ConnInfo,
    /// Data this rank receives from the peer.
    pub recv: ConnInfo,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ChannelPeer>() == 208);
    assert!(offset_of!(ChannelPeer, send) == 0);
    assert!(offset_of!(ChannelPeer, recv) == 104);
};

/// One channel as a kernel block sees it.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DevChannel {
    /// Address of `npeers` `ChannelPeer`s, indexed by rank.
    pub peers: u64,
    pub ring: RingInfo,
    pub tree: TreeInfo,
    /// This channel's number.
    pub id: u32,
    /// Entries at `peers` (the communicator's rank count).
    pub npeers: u32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<DevChannel>() == 64);
    assert!(offset_of!(DevChannel, peers) == 0);
    assert!(offset_of!(DevChannel, ring) == 8);
    assert!(offset_of!(DevChannel, tree) == 32);
    assert!(offset_of!(DevChannel, id) == 56);
    assert!(offset_of!(DevChannel, npeers) == 60);
};

impl DevChannel {
    /// Checks that every rank named by the ring and tree is a rank of a communicator of
    /// `npeers` ranks (or -1 where a tree link may be absent), and that reserved words are 0.
    pub fn validate(&self) -> Result<(), ParseError> {
        let n = i64::from(self.npeers);
        let rank = |field, r: i32, may_be_none: bool| {
            let r64 = i64::from(r);
            if (0..n).contains(&r64) || (may_be_none && r == -1) {
                Ok(())
            } else {
                Err(ParseError::BadField {
                    field,
                    // A negative rank shows as its two's complement, which no real rank is.
                    value: r64 as u64,
                })
            }
        };
        rank("ring prev", self.ring.prev, false)?;
        rank("ring next", self.ring.next, false)?;
        rank("ring index", self.ring.index, false)?;
        rank("tree up", self.tree.up, true)?;
        for d in self.tree.down {
            rank("tree down", d, true)?;
        }
        if self.tree.depth < 0 {
            return Err(ParseError::BadField {
                field: "tree depth",
                value: i64::from(self.tree.depth) as u64,
            });
        }
        if self.ring.reserved != 0 || self.tree.reserved != 0 {
            return Err(ParseError::BadField {
                field: "channel reserved",
                value: u64::from(self.ring.reserved | self.tree.reserved),
            });
        }
        Ok(())
    }
}

/// What every block of every launch on one communicator shares.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DevComm {
    pub rank: i32,
    pub nranks: i32,
    /// Entries at `channels`.
    pub n_channels: u32,
    /// Must be zero.
    pub reserved: u32,
    /// Address of a `u32` that the host sets non-zero to make every kernel return early:
    /// the kernels' way out of a wait on a peer that died. The `u32` after it is the
    /// release word: a block that gave up holds its stream until the host sets it (the
    /// failure reported, or the communicator aborted).
    pub abort_flag: u64,
    /// Address of `n_channels` `DevChannel`s.
    pub channels: u64,
    /// How long a kernel waits on a peer before it gives up (nanoseconds of the GPU's
    /// global timer; 0: only the abort flag ends a wait).
    pub timeout_ns: u64,
    /// Address of a [`KernelFault`] (host-mapped memory) where the first block that gives
    /// up records why, for the host to name the peer; 0: none.
    pub fault: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<DevComm>() == 48);
    assert!(offset_of!(DevComm, rank) == 0);
    assert!(offset_of!(DevComm, nranks) == 4);
    assert!(offset_of!(DevComm, n_channels) == 8);
    assert!(offset_of!(DevComm, abort_flag) == 16);
    assert!(offset_of!(DevComm, channels) == 24);
    assert!(offset_of!(DevComm, timeout_ns) == 32);
    assert!(offset_of!(DevComm, fault) == 40);
};

/// Why a kernel stopped early: written once (by the first block that gives up, guarded by
/// `code`) into host-mapped memory, so that the host can say which peer and which wait.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct KernelFault {
    /// [`FAULT_NONE`], [`FAULT_TIMEOUT`], [`FAULT_ABORTED`] or [`FAULT_MISMATCH`].
    pub code: u32,
    /// The channel (block) that gave up.
    pub channel: u32,
    /// The peer it was waiting on.
    pub peer: i32,
    /// [`WAIT_RECV`] (data from `peer`), [`WAIT_SEND`] (credit from `peer`) or
    /// [`WAIT_PEER_START`] (`peer` to start the collective and publish its output buffer).
    pub wait: u32,
    /// The FIFO step (or, for [`WAIT_PEER_START`], the collective count) it was waiting for.
    pub step: u64,
    /// How long it had waited, in nanoseconds.
    pub waited_ns: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<KernelFault>() == 32);
    assert!(offset_of!(KernelFault, code) == 0);
    assert!(offset_of!(KernelFault, channel) == 4);
    assert!(offset_of!(KernelFault, peer) == 8);
    assert!(offset_of!(KernelFault, wait) == 12);
    assert!(offset_of!(KernelFault, step) == 16);
    assert!(offset_of!(KernelFault, waited_ns) == 24);
};

/// [`KernelFault::code`]: nothing went wrong.
pub const FAULT_NONE: u32 = 0;
/// [`KernelFault::code`]: a wait on a peer passed [`DevComm::timeout_ns`].
pub const FAULT_TIMEOUT: u32 = 1;
/// [`KernelFault::code`]: the host raised the abort flag during a wait.
pub const FAULT_ABORTED: u32 = 2;
/// [`KernelFault::code`] while a kernel thread writes the record's other fields: a block's
/// warp groups share one record and each claims it (compare-and-swap from [`FAULT_NONE`])
/// before writing, so a sibling's ABORTED never overwrites the TIMEOUT that names the peer.
/// The host reads such a record as not there yet.
pub const FAULT_CLAIMED: u32 = 3;
/// [`KernelFault::code`]: a point-to-point receive found no tag of its size from `peer`
/// (`wait` is [`WAIT_P2P_TAG`]; `step` holds the tag found, `waited_ns` the tag expected).
pub const FAULT_MISMATCH: u32 = 4;
/// [`KernelFault::wait`]: waiting for the peer's data (the receiver side of a connection).
pub const WAIT_RECV: u32 = 0;
/// [`KernelFault::wait`]: waiting for the peer to free a slot (the sender side).
pub const WAIT_SEND: u32 = 1;
/// [`KernelFault::wait`]: waiting for the peer to start the collective and publish its output
/// buffer (direct writes, `CONN_DIRECT_WRITE`).
pub const WAIT_PEER_START: u32 = 2;
/// [`KernelFault::wait`]: waiting for `peer` to reach the same barrier of a one- or
/// two-shot all-reduce (its flag in this rank's window).
pub const WAIT_PEER_FLAG: u32 = 3;
/// [`KernelFault::wait`]: NVLS, waiting for data: a head for the ranks' scattered chunks,
/// or a rank for head `peer`'s reduced one.
pub const WAIT_NVLS_POSTED: u32 = 4;
/// [`KernelFault::wait`]: NVLS, waiting for a slot to be freed (by head `peer`, or by the
/// ranks that read a head's broadcast).
pub const WAIT_NVLS_FREED: u32 = 5;
/// [`KernelFault::wait`] of a [`FAULT_MISMATCH`]: a point-to-point receive checked, in the
/// slot of its first step, the tag `peer` leaves there (`core::abi::p2p_tag`).
pub const WAIT_P2P_TAG: u32 = 6;

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn ring_of(rank: i32, nranks: u32) -> DevChannel {
        let n = nranks as i32;
        DevChannel {
            peers: 0x7f12_3400_0000,
            ring: RingInfo {
                prev: (rank + n - 1) % n,
                next: (rank + 1) % n,
                index: rank,
                reserved: 0,
                user_ranks: 0x7f12_3500_0000,
            },
            tree: TreeInfo {
                depth: 1,
                up: 0,
                down: [2, -1, -1],
                reserved: 0,
            },
            id: 3,
            npeers: nranks,
        }
    }

    #[test]
    fn valid_channel() {
        assert_eq!(ring_of(4, 5).validate(), Ok(()));
        let alone = DevChannel {
            tree: TreeInfo::default(),
            ..ring_of(0, 1)
        };
        assert_eq!(alone.validate(), Ok(()));
    }

    #[test]
    fn bad_ranks_are_named() {
        let c = ring_of(1, 3);
        let field = |c: DevChannel| match c.validate() {
            Err(ParseError::BadField { field, value }) => (field, value),
            other => panic!("expected BadField, got {other:?}"),
        };
        let mut r = c;
        r.ring.next = 3;
        assert_eq!(field(r), ("ring next", 3));
        let mut r = c;
        r.ring.prev = -1;
        assert_eq!(field(r), ("ring prev", u64::MAX));
        let mut r = c;
        r.tree.down[2] = -2;
        assert_eq!(field(r), ("tree down", u64::MAX - 1));
        let mut r = c;
        r.tree.up = 7;
        assert_eq!(field(r), ("tree up", 7));
        let mut r = c;
        r.tree.depth = -1;
        assert_eq!(field(r), ("tree depth", u64::MAX));
        let mut r = c;
        r.ring.reserved = 9;
        assert_eq!(field(r), ("channel reserved", 9));
        let none = DevChannel { npeers: 0, ..c };
        assert_eq!(field(none), ("ring prev", 0));
    }

    proptest! {
        #[test]
        fn layouts_round_trip_and_validate_never_panics(
            raw in proptest::collection::vec(any::<u8>(), 208),
        ) {
            let peer = ChannelPeer::read_from_bytes(&raw).unwrap();
            prop_assert_eq!(peer.as_bytes(), &raw[..]);
            prop_assert_eq!(peer.recv.as_bytes(), &raw[104..]);
            let ch = DevChannel::read_from_bytes(&raw[..64]).unwrap();
            prop_assert_eq!(ch.as_bytes(), &raw[..64]);
            prop_assert_eq!(ch.ring.next, i32::from_ne_bytes(raw[12..16].try_into().unwrap()));
            prop_assert_eq!(ch.tree.down[1], i32::from_ne_bytes(raw[44..48].try_into().unwrap()));
            prop_assert_eq!(ch.npeers, u32::from_ne_bytes(raw[60..64].try_into().unwrap()));
            if ch.validate().is_ok() {
                prop_assert!(ch.ring.next >= 0 && (ch.ring.next as u32) < ch.npeers);
            }
            let comm = DevComm::read_from_bytes(&raw[..48]).unwrap();
            prop_assert_eq!(comm.channels, u64::from_ne_bytes(raw[24..32].try_into().unwrap()));
        }
    }
}
