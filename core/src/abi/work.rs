//! Launch descriptors: what one collective call asks of the channels that run it.
//!
//! The host fills a `CollWork`, the kernel (or CPU executor) reads it. Enumerated fields are
//! `u32` so that a corrupt or foreign value is an error from `validate`, not undefined
//! behaviour.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::MAX_CHANNELS;
use super::kinds::{Algorithm, CollKind, DataType, Protocol, RedOp};
use crate::wire::ParseError;

/// One collective call as the channels that run it see it.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct CollWork {
    /// Address of the input buffer.
    pub send_buff: u64,
    /// Address of the output buffer (equal to `send_buff` for an in-place call).
    pub recv_buff: u64,
    /// Elements per rank, as the user passed it to the collective.
    pub count: u64,
    /// Operator argument, read by the `Avg` kernels (which also run `PreMulSum`): the
    /// factor each input is multiplied by, in the data type's bits in the low bytes (float
    /// `Avg`: 1/nranks; `PreMulSum`: the user's scalar), or with
    /// [`RED_OP_ARG_DEVICE_PTR`] the device address of that factor; else 0.
    pub red_op_arg: u64,
    /// Bytes each channel moves per step of the ring program (a multiple of the element size).
    pub chunk_size: u32,
    /// Root rank of Broadcast and Reduce; ignored otherwise.
    pub root: u32,
    /// `CollKind`.
    pub coll: u32,
    /// `DataType`.
    pub dtype: u32,
    /// `RedOp`; ignored by collectives that do not reduce.
    pub redop: u32,
    /// `Algorithm`.
    pub algorithm: u32,
    /// `Protocol`.
    pub protocol: u32,
    /// First channel that runs this work: block `channel_lo + k` of the launch runs part `k`
    /// of `channel_count` on channel `channel_lo + k` (the works of a fused launch spread
    /// over the channels this way).
    pub channel_lo: u32,
    /// Number of consecutive channels from `channel_lo`.
    pub channel_count: u32,
    /// FIFO steps per slice (the unit of one post).
    pub slice_steps: u32,
    /// FIFO steps per chunk (a multiple of `slice_steps`).
    pub chunk_steps: u32,
    /// 1: ranks joined by a `CONN_DIRECT_WRITE` connection send final results
    /// straight into the receiver's output (all-reduce, all-gather, broadcast, SIMPLE only);
    /// 0: through the FIFO. The same on every rank, or the two ends would disagree on where data lands.
    pub direct: u32,
    /// `RED_OP_*` flags: how the `Avg` kernels read `red_op_arg` (0 for every other op).
    pub red_op_flags: u32,
    /// SIMPLE rings on a GPU: the fewest slices (one FIFO step each) a primitive is cut
    /// into, as NCCL cuts every chunk into `SlicePerChunk` slices so that the next rank
    /// starts on the first while the second is in flight; it is not cut into pieces
    /// narrower than 1/32 of a step for it (the last piece may be shorter). 0 or 1: as few
    /// as the steps allow. At most `STEPS` (8).
    pub min_slices: u32,
}

/// [`CollWork::red_op_flags`]: the `Avg` kernels run NCCL's `PreMulSum` instead: every
/// type, integers included, multiplies each rank's own input by the factor before the sum,
/// and no division follows (integer `Avg` divides the sum by nranks instead).
pub const RED_OP_PREMUL: u32 = 1 << 0;
/// [`CollWork::red_op_flags`]: `red_op_arg` is the device address of the factor (NCCL's
/// `ncclScalarDevice`), which each block loads when the kernel starts (stream-ordered).
pub const RED_OP_ARG_DEVICE_PTR: u32 = 1 << 1;
/// Every `RED_OP_*` flag.
pub const RED_OP_KNOWN_FLAGS: u32 = RED_OP_PREMUL | RED_OP_ARG_DEVICE_PTR;

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<CollWork>() == 88);
    assert!(align_of::<CollWork>() == 8);
    assert!(offset_of!(CollWork, send_buff) == 0);
    assert!(offset_of!(CollWork, recv_buff) == 8);
    assert!(offset_of!(CollWork, count) == 16);
    assert!(offset_of!(CollWork, red_op_arg) == 24);
    assert!(offset_of!(CollWork, chunk_size) == 32);
    assert!(offset_of!(CollWork, root) == 36);
    assert!(offset_of!(CollWork, coll) == 40);
    assert!(offset_of!(CollWork, dtype) == 44);
    assert!(offset_of!(CollWork, redop) == 48);
    assert!(offset_of!(CollWork, algorithm) == 52);
    assert!(offset_of!(CollWork, protocol) == 56);
    assert!(offset_of!(CollWork, channel_lo) == 60);
    assert!(offset_of!(CollWork, channel_count) == 64);
    assert!(offset_of!(CollWork, slice_steps) == 68);
    assert!(offset_of!(CollWork, chunk_steps) == 72);
    assert!(offset_of!(CollWork, direct) == 76);
    assert!(offset_of!(CollWork, red_op_flags) == 80);
    assert!(offset_of!(CollWork, min_slices) == 84);
};

/// A `CollWork` whose enumerated fields were checked, in typed form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollSpec {
    pub coll: CollKind,
    pub dtype: DataType,
    pub redop: RedOp,
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// `count * size_of_elem`, known not to overflow.
    pub bytes: u64,
}

impl CollWork {
    /// Checks every field a reader relies on and returns the typed values: known enum
    /// values, a channel range inside `[0, MAX_CHANNELS)`, a root below `nranks` for rooted
    /// collectives, a chunk that is a non-zero multiple of the element size, chunk steps a
    /// multiple of slice steps, `direct` 0 or 1 (and 0 for collectives that cannot use it),
    /// `red_op_flags` known and only on `Avg` (a device scalar's address non-zero), and a
    /// byte count that fits a `u64`.
    pub fn validate(&self, nranks: u32) -> Result<CollSpec, ParseError> {
        let coll = CollKind::try_from(self.coll)?;
        let dtype = DataType::try_from(self.dtype)?;
        let redop = RedOp::try_from(self.redop)?;
        let algorithm = Algorithm::try_from(self.algorithm)?;
        let protocol = Protocol::try_from(self.protocol)?;
        let bad = |field, value: u32| ParseError::BadField {
            field,
            value: u64::from(value),
        };
        let channel_end = self
            .channel_lo
            .checked_add(self.channel_count)
            .filter(|end| *end <= MAX_CHANNELS);
        if self.channel_count == 0 || channel_end.is_none() {
            return Err(bad("work channel_count", self.channel_count));
        }
        if coll.has_root() && self.root >= nranks {
            return Err(bad("work root", self.root));
        }
        let elem = u32::try_from(dtype.size_of_elem()).unwrap_or(u32::MAX);
        if self.chunk_size == 0 || self.chunk_size.checked_rem(elem) != Some(0) {
            return Err(bad("work chunk_size", self.chunk_size));
        }
        if self.slice_steps == 0 || self.chunk_steps.checked_rem(self.slice_steps) != Some(0) {
            return Err(bad("work slice_steps", self.slice_steps));
        }
        if self.chunk_steps == 0 {
            return Err(bad("work chunk_steps", 0));
        }
        if self.min_slices > super::STEPS {
            return Err(bad("work min_slices", self.min_slices));
        }
        let direct_ok = matches!(
            coll,
            CollKind::AllReduce | CollKind::AllGather | CollKind::Broadcast
        );
        // Direct writes are SIMPLE's: LL lines always go through the connection's buffer.
        let direct_ok = direct_ok && protocol == Protocol::Simple;
        if self.direct > 1 || (self.direct == 1 && !direct_ok) {
            return Err(bad("work direct", self.direct));
        }
        // The flags belong to the `Avg` kernels; a device address must be one.
        let flags_ok = self.red_op_flags & !RED_OP_KNOWN_FLAGS == 0
            && (self.red_op_flags == 0 || redop == RedOp::Avg)
            && (self.red_op_flags & RED_OP_ARG_DEVICE_PTR == 0 || self.red_op_arg != 0);
        if !flags_ok {
            return Err(bad("work red_op_flags", self.red_op_flags));
        }
        let bytes = dtype.bytes_for(self.count).ok_or(ParseError::BadField {
            field: "work count",
            value: self.count,
        })?;
        Ok(CollSpec {
            coll,
            dtype,
            redop,
            algorithm,
            protocol,
            bytes,
        })
    }

    /// Whether the output overwrites the input.
    pub const fn in_place(&self) -> bool {
        self.send_buff == self.recv_buff
    }
}

/// Most collectives one ring launch carries ([`KernelArgs::works`]): a group's calls of
/// one communicator, type, operator and protocol, fused as NCCL fuses a group's calls.
/// Eight keep the arguments at 720 bytes, within CUDA's 4 KiB of kernel parameters and
/// cheap to copy at every launch.
pub const COLL_BATCH_MAX: usize = 8;

/// What one kernel launch receives: where the communicator's device state is, and the
/// collectives to run, one after the other on each channel.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct KernelArgs {
    /// Address of the communicator's `DevComm`.
    pub comm: u64,
    /// Works in use, 1 to [`COLL_BATCH_MAX`].
    pub nworks: u32,
    pub reserved: u32,
    /// The collectives to run; block `b` runs, in order, the works whose channels
    /// (`channel_lo` to `channel_lo + channel_count - 1`) include `b`, on channel `b`.
    pub works: [CollWork; COLL_BATCH_MAX],
}

impl KernelArgs {
    /// The arguments of a launch of one collective.
    pub fn one(comm: u64, work: CollWork) -> KernelArgs {
        let mut args = KernelArgs {
            comm,
            nworks: 1,
            ..KernelArgs::default()
        };
        args.works[0] = work;
        args
    }

    /// The works in use.
    pub fn works(&self) -> &[CollWork] {
        let n = (self.nworks as usize).min(COLL_BATCH_MAX);
        self.works.get(..n).unwrap_or(&[])
    }
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<KernelArgs>() == 16 + 88 * COLL_BATCH_MAX);
    assert!(offset_of!(KernelArgs, comm) == 0);
    assert!(offset_of!(KernelArgs, nworks) == 8);
    assert!(offset_of!(KernelArgs, works) == 16);
};

/// Most operations one point-to-point launch carries ([`P2pArgs::ops`]).
pub const P2P_MAX_OPS: usize = 16;

/// One send or receive of a point-to-point launch: `bytes` at `buff`, to or from `peer`,
/// spread over `nchannels` channels (blocks `block_lo ..` of the launch, channel `k` of
/// the op on the communicator's channel `k`).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct P2pOp {
    pub buff: u64,
    pub bytes: u64,
    pub peer: i32,
    /// 1: send to `peer`; 0: receive from it.
    pub send: u32,
    pub block_lo: u32,
    pub nchannels: u32,
    /// `Protocol` (LL or SIMPLE): both ends of a message must use the same one, which they
    /// compute from its byte count (NCCL's `NCCL_P2P_LL_THRESHOLD` rule).
    pub protocol: u32,
    pub reserved: u32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<P2pOp>() == 40);
    assert!(offset_of!(P2pOp, bytes) == 8);
    assert!(offset_of!(P2pOp, peer) == 16);
    assert!(offset_of!(P2pOp, send) == 20);
    assert!(offset_of!(P2pOp, block_lo) == 24);
    assert!(offset_of!(P2pOp, nchannels) == 28);
    assert!(offset_of!(P2pOp, protocol) == 32);
};

/// The parameter of the point-to-point kernel: a group's sends and receives, run at once
/// (a rank that sends and receives in one group would deadlock if they ran in turn).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct P2pArgs {
    /// Address of the `DevComm`.
    pub comm: u64,
    /// Entries of `ops` in use.
    pub nops: u32,
    pub reserved: u32,
    pub ops: [P2pOp; P2P_MAX_OPS],
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<P2pArgs>() == 16 + 40 * P2P_MAX_OPS);
    assert!(offset_of!(P2pArgs, nops) == 8);
    assert!(offset_of!(P2pArgs, ops) == 16);
};

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn all_reduce() -> CollWork {
        CollWork {
            send_buff: 0x7000_0000,
            recv_buff: 0x7100_0000,
            count: 1_000_003,
            red_op_arg: 0,
            chunk_size: 131_072 * 3,
            root: 0,
            coll: CollKind::AllReduce as u32,
            dtype: DataType::Bfloat16 as u32,
            redop: RedOp::Max as u32,
            algorithm: Algorithm::Ring as u32,
            protocol: Protocol::Simple as u32,
            channel_lo: 5,
            channel_count: 11,
            slice_steps: 2,
            chunk_steps: 4,
            direct: 0,
            red_op_flags: 0,
            min_slices: 2,
        }
    }

    #[test]
    fn valid_work_gives_typed_spec() {
        let w = all_reduce();
        assert_eq!(
            w.validate(7),
            Ok(CollSpec {
                coll: CollKind::AllReduce,
                dtype: DataType::Bfloat16,
                redop: RedOp::Max,
                algorithm: Algorithm::Ring,
                protocol: Protocol::Simple,
                bytes: 2_000_006,
            })
        );
        assert!(!w.in_place());
        assert!(
            CollWork {
                recv_buff: w.send_buff,
                ..w
            }
            .in_place()
        );
        // The root is ignored by collectives without one.
        assert!(CollWork { root: 99, ..w }.validate(7).is_ok());
        let last = CollWork {
            channel_lo: 63,
            channel_count: 1,
            ..w
        };
        assert!(last.validate(7).is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let w = all_reduce();
        let field = |w: CollWork| match w.validate(7) {
            Err(ParseError::BadField { field, .. }) => field,
            other => panic!("expected BadField, got {other:?}"),
        };
        assert_eq!(field(CollWork { coll: 8, ..w }), "collective");
        assert_eq!(field(CollWork { dtype: 12, ..w }), "data type");
        assert_eq!(field(CollWork { redop: 5, ..w }), "reduction op");
        assert_eq!(field(CollWork { algorithm: 7, ..w }), "algorithm");
        assert_eq!(field(CollWork { protocol: 3, ..w }), "protocol");
        assert_eq!(
            field(CollWork {
                channel_count: 0,
                ..w
            }),
            "work channel_count"
        );
        assert_eq!(
            field(CollWork {
                channel_lo: 60,
                channel_count: 5,
                ..w
            }),
            "work channel_count"
        );
        assert_eq!(
            field(CollWork {
                channel_lo: u32::MAX,
                channel_count: 2,
                ..w
            }),
            "work channel_count"
        );
        let bcast = CollWork {
            coll: CollKind::Broadcast as u32,
            root: 7,
            ..w
        };
        assert_eq!(field(bcast), "work root");
        assert!(CollWork { root: 6, ..bcast }.validate(7).is_ok());
        assert_eq!(field(CollWork { chunk_size: 0, ..w }), "work chunk_size");
        assert_eq!(
            field(CollWork {
                chunk_size: 131_071,
                ..w
            }),
            "work chunk_size"
        );
        assert_eq!(
            field(CollWork {
                slice_steps: 0,
                ..w
            }),
            "work slice_steps"
        );
        assert_eq!(
            field(CollWork {
                slice_steps: 3,
                ..w
            }),
            "work slice_steps"
        );
        assert_eq!(
            field(CollWork {
                chunk_steps: 0,
                ..w
            }),
            "work chunk_steps"
        );
        assert_eq!(field(CollWork { min_slices: 9, ..w }), "work min_slices");
        assert!(CollWork { min_slices: 8, ..w }.validate(7).is_ok());
        assert_eq!(field(CollWork { direct: 2, ..w }), "work direct");
        assert_eq!(
            field(CollWork {
                direct: 1,
                protocol: Protocol::Ll as u32,
                ..w
            }),
            "work direct"
        );
        let reduce = CollWork {
            coll: CollKind::ReduceScatter as u32,
            ..w
        };
        assert_eq!(
            field(CollWork {
                direct: 1,
                ..reduce
            }),
            "work direct"
        );
        assert_eq!(
            field(CollWork {
                count: u64::MAX,
                ..w
            }),
            "work count"
        );
        // PreMulSum rides on the Avg kernels: its flags on another op, an unknown flag, or
        // a device scalar at address 0 are refused.
        let avg = CollWork {
            redop: RedOp::Avg as u32,
            red_op_arg: 0x7000_1000,
            red_op_flags: RED_OP_PREMUL | RED_OP_ARG_DEVICE_PTR,
            ..w
        };
        assert!(avg.validate(7).is_ok());
        assert_eq!(
            field(CollWork {
                redop: RedOp::Sum as u32,
                ..avg
            }),
            "work red_op_flags"
        );
        assert_eq!(
            field(CollWork {
                red_op_flags: 1 << 2,
                ..avg
            }),
            "work red_op_flags"
        );
        assert_eq!(
            field(CollWork {
                red_op_arg: 0,
                ..avg
            }),
            "work red_op_flags"
        );
    }

    proptest! {
        /// Every field lands at its offset; validate never panics on any bytes.
        #[test]
        fn bytes_round_trip_and_validate_never_panics(
            raw in proptest::collection::vec(any::<u8>(), size_of::<KernelArgs>()),
            nranks in any::<u32>(),
        ) {
            let args = KernelArgs::read_from_bytes(&raw).unwrap();
            prop_assert_eq!(args.as_bytes(), &raw[..]);
            prop_assert_eq!(args.comm, u64::from_ne_bytes(raw[0..8].try_into().unwrap()));
            prop_assert_eq!(args.nworks, u32::from_ne_bytes(raw[8..12].try_into().unwrap()));
            prop_assert!(args.works().len() <= COLL_BATCH_MAX);
            // The last work, at its offset.
            let w = args.works[COLL_BATCH_MAX - 1];
            let at = 16 + 88 * (COLL_BATCH_MAX - 1);
            let word = |o: usize, n: usize| raw[at + o..at + o + n].to_vec();
            prop_assert_eq!(w.count.to_ne_bytes().to_vec(), word(16, 8));
            prop_assert_eq!(w.dtype.to_ne_bytes().to_vec(), word(44, 4));
            prop_assert_eq!(w.direct.to_ne_bytes().to_vec(), word(76, 4));
            prop_assert_eq!(w.red_op_flags.to_ne_bytes().to_vec(), word(80, 4));
            if let Ok(spec) = w.validate(nranks) {
                prop_assert_eq!(spec.dtype as u32, w.dtype);
                prop_assert_eq!(u128::from(spec.bytes),
                    u128::from(w.count) * spec.dtype.size_of_elem() as u128);
            }
        }
    }
}
