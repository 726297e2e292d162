//! `ConnInfo`: one direction of one connection, as a kernel (or the CPU executor) sees it.
//!
//! The sender writes slots into the receiver's buffer and advances `tail`; the receiver
//! consumes them and advances `head` (credits). Addresses are `u64` because the same struct
//! is copied into device memory and read by CUDA kernels and C callers: a Rust reference or
//! pointer type would mean nothing there.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::kinds::Protocol;
use super::{NUM_PROTOCOLS, STEPS};
use crate::wire::ParseError;

/// The peer reads this rank's buffer directly (P2P read): no copy into the FIFO.
pub const CONN_DIRECT_READ: u32 = 1 << 0;
/// The sender writes final results straight into the receiver's user buffer (P2P write,
/// NCCL's direct send): both ends are in one process, so a device pointer is valid on
/// both. The receiver publishes its output pointer at `ptr_exchange` (a `PtrExchange`, C
/// `weft_ptr_exchange`, in the sender's memory) once per collective that allows it.
pub const CONN_DIRECT_WRITE: u32 = 1 << 1;
/// The connection goes through an NVLS (NVLink SHARP) multicast buffer.
pub const CONN_NVLS: u32 = 1 << 2;
/// A proxy thread moves the data (NET): the kernel posts sizes in `sizes_fifo` for it.
pub const CONN_PROXY_DRIVEN: u32 = 1 << 3;
/// The buffers are shared between several channels (`buffs` point into a common pool).
pub const CONN_SHARED_BUFFERS: u32 = 1 << 4;
/// The buffers live in host memory (SHM, or NET without GPUDirect).
pub const CONN_HOST_MEMORY: u32 = 1 << 5;
/// Every flag this ABI version defines; any other bit set is a writer from another version.
pub const CONN_KNOWN_FLAGS: u32 = CONN_DIRECT_READ
    | CONN_DIRECT_WRITE
    | CONN_NVLS
    | CONN_PROXY_DRIVEN
    | CONN_SHARED_BUFFERS
    | CONN_HOST_MEMORY;

/// One direction of one connection (NCCL's `ncclConnInfo`, laid out for weft).
///
/// All padding is explicit (the `IntoBytes` derive refuses implicit padding), so the C
/// header generated from this struct has the same layout on every compiler.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ConnInfo {
    /// Address of the FIFO buffer of each protocol, indexed by `Protocol` (0: absent).
    /// Local for the receiver, the peer's for the sender.
    pub buffs: [u64; NUM_PROTOCOLS],
    /// Size in bytes of each protocol's buffer (`STEPS` slots each).
    pub buff_sizes: [u32; NUM_PROTOCOLS],
    /// Bytes per slot of the SIMPLE buffer.
    pub step_size: u32,
    /// Address of the `u64` head counter: steps consumed by the receiver (credits).
    pub head: u64,
    /// Address of the `u64` tail counter: steps posted by the sender.
    pub tail: u64,
    /// Address of `steps` `u32` sizes, one per slot, for a proxy-driven connection (0: none).
    pub sizes_fifo: u64,
    /// Address of the connection's `PtrExchange` (C `weft_ptr_exchange`), in the sender's
    /// memory (0: none).
    pub ptr_exchange: u64,
    /// The next step this side will post (sender) or wait for (receiver).
    pub step: u64,
    /// `CONN_*` bits.
    pub flags: u32,
    /// Number of slots in each protocol's buffer (NCCL's `NCCL_STEPS`).
    pub steps: u32,
    /// Collectives with direct writes this side has taken part in: the receiver publishes
    /// the next count with its pointer, the sender waits for the count it expects. Lives
    /// here, in device memory, so that CUDA graph replays count too.
    pub direct_ops: u64,
    /// Address of `steps` `u64` message tags, one per slot, in the receiver's memory (0:
    /// none). The sender of a point-to-point message writes [`p2p_tag`] of the message's
    /// bytes and its first step into that step's slot, on each channel it uses; the
    /// receiver compares it with its own before taking the data, so that a send and a
    /// receive of different sizes end in an error naming the peer, not in garbage.
    pub tags: u64,
}

/// The tag a point-to-point message leaves in the slot of its first step on a channel:
/// its byte count in the low 47 bits, [`P2P_TAG_MARK`] (so that memory never written, all
/// zeros, is no tag), and the step in the high 16 bits (so that the tag a slot kept from an
/// earlier message, 8 or more steps back, never matches). The kernels compute the same
/// (`p2p_tag` in collectives.cu).
pub const fn p2p_tag(bytes: u64, step: u64) -> u64 {
    (bytes & P2P_TAG_BYTES) | P2P_TAG_MARK | (step << 48)
}

/// The bits of [`p2p_tag`] that hold the byte count.
pub const P2P_TAG_BYTES: u64 = (1 << 47) - 1;
/// The bit every [`p2p_tag`] sets.
pub const P2P_TAG_MARK: u64 = 1 << 47;

/// Where the receiver of a `CONN_DIRECT_WRITE` connection publishes its output buffer:
/// it writes `ptr`, then `ops` (a release); the sender acquires `ops` and reads `ptr`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct PtrExchange {
    /// The receiver's `direct_ops` after this collective's increment.
    pub ops: u64,
    /// The receiver's output buffer (`CollWork::recv_buff`) for that collective.
    pub ptr: u64,
}

const _: () = assert!(core::mem::size_of::<PtrExchange>() == 16);

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ConnInfo>() == 104);
    assert!(align_of::<ConnInfo>() == 8);
    assert!(offset_of!(ConnInfo, buffs) == 0);
    assert!(offset_of!(ConnInfo, buff_sizes) == 24);
    assert!(offset_of!(ConnInfo, step_size) == 36);
    assert!(offset_of!(ConnInfo, head) == 40);
    assert!(offset_of!(ConnInfo, tail) == 48);
    assert!(offset_of!(ConnInfo, sizes_fifo) == 56);
    assert!(offset_of!(ConnInfo, ptr_exchange) == 64);
    assert!(offset_of!(ConnInfo, step) == 72);
    assert!(offset_of!(ConnInfo, flags) == 80);
    assert!(offset_of!(ConnInfo, steps) == 84);
    assert!(offset_of!(ConnInfo, direct_ops) == 88);
    assert!(offset_of!(ConnInfo, tags) == 96);
};

impl ConnInfo {
    /// Whether every bit of `flag` is set.
    pub const fn has(&self, flag: u32) -> bool {
        self.flags & flag == flag
    }

    /// Address and size of `proto`'s buffer, or `None` if the connection has none.
    pub fn buffer(&self, proto: Protocol) -> Option<(u64, u32)> {
        let addr = *self.buffs.get(proto.index())?;
        let size = *self.buff_sizes.get(proto.index())?;
        (addr != 0 && size != 0).then_some((addr, size))
    }

    /// Address of the slot that `step` uses in `proto`'s buffer: slot `step % steps`,
    /// each `buff_size / steps` bytes. `None` if the buffer is absent or `steps` is 0.
    pub fn slot_addr(&self, proto: Protocol, step: u64) -> Option<u64> {
        let (addr, size) = self.buffer(proto)?;
        let steps = u64::from(self.steps);
        let slot = step.checked_rem(steps)?;
        let slot_bytes = u64::from(size).checked_div(steps)?;
        addr.checked_add(slot.checked_mul(slot_bytes)?)
    }

    /// Checks what a reader must be able to trust: only known flags, `steps` slots (the
    /// FIFO protocol assumes `STEPS`), a head and tail, and SIMPLE slots of `step_size`
    /// bytes that fit the SIMPLE buffer.
    pub fn validate(&self) -> Result<(), ParseError> {
        let unknown = self.flags & !CONN_KNOWN_FLAGS;
        if unknown != 0 {
            return Err(ParseError::BadField {
                field: "conn flags",
                value: u64::from(unknown),
            });
        }
        // A direct connection's kernel dereferences the exchange; host memory is never one.
        if self.has(CONN_DIRECT_WRITE) && (self.ptr_exchange == 0 || self.has(CONN_HOST_MEMORY)) {
            return Err(ParseError::BadField {
                field: "conn ptr_exchange",
                value: self.ptr_exchange,
            });
        }
        if self.steps != STEPS {
            return Err(ParseError::BadField {
                field: "conn steps",
                value: u64::from(self.steps),
            });
        }
        if self.head == 0 {
            return Err(ParseError::BadField {
                field: "conn head",
                value: 0,
            });
        }
        if self.tail == 0 {
            return Err(ParseError::BadField {
                field: "conn tail",
                value: 0,
            });
        }
        // The kernels cut the LL buffer into 8 slots of whole 16-byte line pairs.
        if let Some((_, size)) = self.buffer(Protocol::Ll) {
            let slots_fit = self.steps == STEPS
                && crate::fifo::ll::LlGeometry::for_buffer(
                    usize::try_from(size).unwrap_or(usize::MAX),
                )
                .is_ok();
            if !slots_fit {
                return Err(ParseError::BadField {
                    field: "conn ll buff_size",
                    value: u64::from(size),
                });
            }
        }
        if let Some((_, size)) = self.buffer(Protocol::Simple) {
            let needed = self.step_size.checked_mul(self.steps);
            if self.step_size == 0 || needed.is_none_or(|n| n > size) {
                return Err(ParseError::BadField {
                    field: "conn step_size",
                    value: u64::from(self.step_size),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn arb_conn() -> impl Strategy<Value = ConnInfo> {
        (
            any::<[u64; 3]>(),
            any::<[u32; 3]>(),
            any::<[u64; 7]>(),
            any::<[u32; 3]>(),
        )
            .prop_map(|(buffs, buff_sizes, w, n)| ConnInfo {
                buffs,
                buff_sizes,
                step_size: n[0],
                head: w[0],
                tail: w[1],
                sizes_fifo: w[2],
                ptr_exchange: w[3],
                step: w[4],
                flags: n[1],
                steps: n[2],
                direct_ops: w[5],
                tags: w[6],
            })
    }

    fn ne64(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }
    fn ne32(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    proptest! {
        /// Each field sits at the byte offset the C header promises, in native byte order.
        #[test]
        fn fields_sit_at_their_offsets(c in arb_conn()) {
            let b = c.as_bytes();
            prop_assert_eq!(b.len(), 104);
            for p in 0..3 {
                prop_assert_eq!(ne64(b, 8 * p), c.buffs[p]);
                prop_assert_eq!(ne32(b, 24 + 4 * p), c.buff_sizes[p]);
            }
            prop_assert_eq!(ne32(b, 36), c.step_size);
            prop_assert_eq!(ne64(b, 40), c.head);
            prop_assert_eq!(ne64(b, 48), c.tail);
            prop_assert_eq!(ne64(b, 56), c.sizes_fifo);
            prop_assert_eq!(ne64(b, 64), c.ptr_exchange);
            prop_assert_eq!(ne64(b, 72), c.step);
            prop_assert_eq!(ne32(b, 80), c.flags);
            prop_assert_eq!(ne32(b, 84), c.steps);
            prop_assert_eq!(ne64(b, 88), c.direct_ops);
            prop_assert_eq!(ne64(b, 96), c.tags);
            prop_assert_eq!(ConnInfo::read_from_bytes(b).unwrap(), c);
        }

        /// Slot addresses never panic on any input, and when they exist they lie inside
        /// the buffer, in step order.
        #[test]
        fn slot_addr_stays_inside_buffer(c in arb_conn(), step in any::<u64>()) {
            for proto in Protocol::ALL {
                if let Some(a) = c.slot_addr(*proto, step) {
                    let (base, size) = c.buffer(*proto).unwrap();
                    let steps = u64::from(c.steps);
                    let slot = u64::from(size) / steps;
                    prop_assert_eq!(a, base + (step % steps) * slot);
                    prop_assert!(a - base < u64::from(size));
                }
            }
            let _ = c.validate();
        }
    }

    fn valid() -> ConnInfo {
        ConnInfo {
            buffs: [0x7f00_0000_1000, 0, 0x7f00_0010_0000],
            buff_sizes: [1 << 16, 0, 8 * 524_288],
            step_size: 524_288,
            head: 0x7f00_0000_0040,
            tail: 0x7f00_0000_0080,
            sizes_fifo: 0,
            ptr_exchange: 0,
            step: 0,
            flags: CONN_DIRECT_READ | CONN_HOST_MEMORY,
            steps: STEPS,
            direct_ops: 0,
            tags: 0,
        }
    }

    #[test]
    fn p2p_tags_hold_the_bytes_and_the_step() {
        let t = p2p_tag(1200, 3);
        assert_eq!((t & P2P_TAG_BYTES, t >> 48), (1200, 3));
        // Zeroed memory is no tag, not even of an empty message at step 0.
        assert_ne!(p2p_tag(0, 0), 0);
        // An older message in the same slot (8 steps back) never carries this step's tag.
        assert_ne!(p2p_tag(1200, 3), p2p_tag(1200, 11));
        assert_ne!(p2p_tag(1200, 3), p2p_tag(1000, 3));
        // Bytes past 47 bits keep their low bits; the step's high bits fall off.
        assert_eq!(p2p_tag((1 << 47) + 5, 1 << 16) & P2P_TAG_BYTES, 5);
        assert_eq!(p2p_tag(5, 1 << 16) >> 47, 1);
    }

    #[test]
    fn buffers_and_slots() {
        let c = valid();
        assert_eq!(c.buffer(Protocol::Ll), Some((0x7f00_0000_1000, 1 << 16)));
        assert_eq!(c.buffer(Protocol::Ll128), None);
        assert_eq!(c.slot_addr(Protocol::Ll128, 3), None);
        assert_eq!(
            c.slot_addr(Protocol::Simple, 8 * 1000 + 5),
            Some(0x7f00_0010_0000 + 5 * 524_288)
        );
        assert_eq!(
            c.slot_addr(Protocol::Ll, 13),
            Some(0x7f00_0000_1000 + 5 * 8192)
        );
        assert!(c.has(CONN_DIRECT_READ));
        assert!(!c.has(CONN_DIRECT_READ | CONN_NVLS));
        let no_steps = ConnInfo { steps: 0, ..c };
        assert_eq!(no_steps.slot_addr(Protocol::Simple, 1), None);
    }

    #[test]
    fn validate_names_the_bad_field() {
        assert_eq!(valid().validate(), Ok(()));
        let bad = |c: ConnInfo| match c.validate() {
            Err(ParseError::BadField { field, value }) => (field, value),
            other => panic!("expected BadField, got {other:?}"),
        };
        assert_eq!(
            bad(ConnInfo {
                flags: CONN_NVLS | 1 << 17,
                ..valid()
            }),
            ("conn flags", 1 << 17)
        );
        assert_eq!(
            bad(ConnInfo {
                steps: 7,
                ..valid()
            }),
            ("conn steps", 7)
        );
        assert_eq!(bad(ConnInfo { head: 0, ..valid() }), ("conn head", 0));
        let direct = ConnInfo {
            flags: CONN_DIRECT_WRITE,
            ptr_exchange: 0x7f00_0000_0080,
            ..valid()
        };
        assert!(direct.validate().is_ok());
        assert_eq!(
            bad(ConnInfo {
                ptr_exchange: 0,
                ..direct
            }),
            ("conn ptr_exchange", 0)
        );
        assert_eq!(
            bad(ConnInfo {
                flags: CONN_DIRECT_WRITE | CONN_HOST_MEMORY,
                ..direct
            }),
            ("conn ptr_exchange", 0x7f00_0000_0080)
        );
        assert_eq!(bad(ConnInfo { tail: 0, ..valid() }), ("conn tail", 0));
        assert_eq!(
            bad(ConnInfo {
                step_size: 524_289,
                ..valid()
            }),
            ("conn step_size", 524_289)
        );
        assert_eq!(
            bad(ConnInfo {
                step_size: u32::MAX,
                ..valid()
            }),
            ("conn step_size", u64::from(u32::MAX))
        );
        assert_eq!(
            bad(ConnInfo {
                step_size: 0,
                ..valid()
            }),
            ("conn step_size", 0)
        );
        // LL: 8 slots of whole 16-byte pairs (512 KiB is NCCL's default).
        let ll = |size: u32| ConnInfo {
            buff_sizes: [size, 0, 8 * 524_288],
            ..valid()
        };
        assert!(ll(512 << 10).validate().is_ok());
        assert_eq!(bad(ll(8 * 16 + 8)), ("conn ll buff_size", 136));
        assert_eq!(bad(ll(8 * 24)), ("conn ll buff_size", 192));
    }
}
