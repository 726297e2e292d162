//! What the socket NET backend says on its TCP streams once connected: the hello that opens
//! every socket of a connection, the listener's answer, and the control frames that match
//! sends to receives.
//!
//! ```text
//! hello (32 bytes, connector -> listener, first bytes of every socket)
//!  0 magic "WFSH" u32 | 4 version u16 | 6 index u16 (0 = control, 1.. = data)
//!  8 count u16 (data sockets) | 10 reserved u16 = 0 | 12 reserved u32 = 0
//! 16 nonce u64 (from the listen handle) | 24 connection id u64 (random per connect)
//!
//! answer (8 bytes, listener -> connector, on the control socket once all sockets arrived)
//!  0 magic "WFSA" u32 | 4 status u32 = 0
//!
//! control frame (16 bytes, both ways on the control socket)
//!  0 kind u8 | 1 index u8 | 2 count u8 | 3 reserved u8 = 0 | 4 tag u32 | 8 size u64
//! ```
//!
//! Version 2 made the protocol sender-eager: the receiver still announces each posted buffer
//! ([`FrameKind::ClearToSend`]), but the sender no longer waits for it: it announces each
//! message with a [`FrameKind::Data`] frame and moves its bytes at once. Each end checks a
//! message against the buffer it matched on its own (the sender against the announcement, the
//! receiver against its posted buffer), so no error frames are needed.
//!
//! All integers are big-endian. `parse` never panics; `emit` writes nothing unless it can
//! write a value that parses back.

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::ParseError;
use super::socket_handle::MAX_DATA_SOCKETS;

/// "WFSH": a socket hello.
pub const HELLO_MAGIC: u32 = 0x5746_5348;
/// "WFSA": the listener's answer.
pub const ANSWER_MAGIC: u32 = 0x5746_5341;
/// The stream protocol version (hello, answer and frames move together).
pub const VERSION: u16 = 2;
/// The most buffers one grouped receive announces (NCCL_NET_MAX_RECVS).
pub const MAX_GROUP: u8 = 8;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct HelloHeader {
    magic: U32,
    version: U16,
    index: U16,
    count: U16,
    reserved: U16,
    reserved2: U32,
    nonce: U64,
    conn_id: U64,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct AnswerHeader {
    magic: U32,
    status: U32,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct FrameHeader {
    kind: u8,
    index: u8,
    count: u8,
    reserved: u8,
    tag: U32,
    size: U64,
}

/// Bytes of a hello.
pub const HELLO_LEN: usize = core::mem::size_of::<HelloHeader>();
/// Bytes of an answer.
pub const ANSWER_LEN: usize = core::mem::size_of::<AnswerHeader>();
/// Bytes of a control frame.
pub const FRAME_LEN: usize = core::mem::size_of::<FrameHeader>();

const _: () = assert!(HELLO_LEN == 32 && ANSWER_LEN == 8 && FRAME_LEN == 16);

fn truncated(needed: usize, got: usize) -> ParseError {
    ParseError::Truncated { needed, got }
}

/// The first bytes on every socket of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloRepr {
    /// 0 for the control socket, 1..=count for data sockets.
    pub index: u16,
    /// Data sockets in the connection (1..=64).
    pub count: u16,
    /// The listener's nonce, from its handle.
    pub nonce: u64,
    /// Random per connect: groups the sockets of one connection.
    pub conn_id: u64,
}

impl HelloRepr {
    /// Parses and checks a hello.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (h, _) =
            HelloHeader::ref_from_prefix(bytes).map_err(|_| truncated(HELLO_LEN, bytes.len()))?;
        super::check_magic_version(h.magic.get(), HELLO_MAGIC, h.version.get(), VERSION)?;
        if h.reserved.get() != 0 || h.reserved2.get() != 0 {
            return Err(ParseError::BadField {
                field: "hello reserved",
                value: u64::from(h.reserved.get()) | u64::from(h.reserved2.get()),
            });
        }
        let count = h.count.get();
        if count == 0 || count > u16::from(MAX_DATA_SOCKETS) {
            return Err(ParseError::TooMany {
                field: "hello count",
                count: usize::from(count),
                max: usize::from(MAX_DATA_SOCKETS),
            });
        }
        let index = h.index.get();
        if index > count {
            return Err(ParseError::BadField {
                field: "hello index",
                value: u64::from(index),
            });
        }
        Ok(HelloRepr {
            index,
            count,
            nonce: h.nonce.get(),
            conn_id: h.conn_id.get(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HELLO_LEN
    }

    /// Writes the hello into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), ParseError> {
        let got = buf.len();
        let out = buf.get_mut(..HELLO_LEN).ok_or(truncated(HELLO_LEN, got))?;
        let h = HelloHeader {
            magic: U32::new(HELLO_MAGIC),
            version: U16::new(VERSION),
            index: U16::new(self.index),
            count: U16::new(self.count),
            reserved: U16::new(0),
            reserved2: U32::new(0),
            nonce: U64::new(self.nonce),
            conn_id: U64::new(self.conn_id),
        };
        HelloRepr::parse(h.as_bytes())?;
        out.copy_from_slice(h.as_bytes());
        Ok(())
    }
}

/// The listener's answer: all sockets of the connection arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerRepr;

impl AnswerRepr {
    /// Parses and checks an answer.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (h, _) =
            AnswerHeader::ref_from_prefix(bytes).map_err(|_| truncated(ANSWER_LEN, bytes.len()))?;
        if h.magic.get() != ANSWER_MAGIC {
            return Err(ParseError::BadMagic {
                expected: ANSWER_MAGIC,
                found: h.magic.get(),
            });
        }
        if h.status.get() != 0 {
            return Err(ParseError::BadField {
                field: "answer status",
                value: u64::from(h.status.get()),
            });
        }
        Ok(AnswerRepr)
    }

    /// Writes the answer into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), ParseError> {
        let got = buf.len();
        let out = buf
            .get_mut(..ANSWER_LEN)
            .ok_or(truncated(ANSWER_LEN, got))?;
        let h = AnswerHeader {
            magic: U32::new(ANSWER_MAGIC),
            status: U32::new(0),
        };
        out.copy_from_slice(h.as_bytes());
        Ok(())
    }
}

/// What a control frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Receiver -> sender: buffer `index` of a group of `count` takes up to `size` bytes with
    /// `tag`.
    ClearToSend = 1,
    /// Sender -> receiver: a message of `size` bytes with `tag`; its bytes follow on the
    /// control socket (small) or the data sockets (large). `index` and `count` are 0.
    Data = 2,
}

/// One control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlFrameRepr {
    pub kind: FrameKind,
    /// Buffer index within the group ([`FrameKind::ClearToSend`]; 0 for data).
    pub index: u8,
    /// Buffers in the group, 1..=[`MAX_GROUP`] ([`FrameKind::ClearToSend`]; 0 for data).
    pub count: u8,
    pub tag: u32,
    pub size: u64,
}

impl ControlFrameRepr {
    /// Parses and checks a control frame.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (h, _) =
            FrameHeader::ref_from_prefix(bytes).map_err(|_| truncated(FRAME_LEN, bytes.len()))?;
        let kind = match h.kind {
            1 => FrameKind::ClearToSend,
            2 => FrameKind::Data,
            k => {
                return Err(ParseError::BadField {
                    field: "frame kind",
                    value: u64::from(k),
                });
            }
        };
        if h.reserved != 0 {
            return Err(ParseError::BadField {
                field: "frame reserved",
                value: u64::from(h.reserved),
            });
        }
        if kind == FrameKind::Data {
            if h.index != 0 || h.count != 0 {
                return Err(ParseError::BadField {
                    field: "frame index",
                    value: u64::from(h.index) | u64::from(h.count) << 8,
                });
            }
        } else {
            if h.count == 0 || h.count > MAX_GROUP {
                return Err(ParseError::TooMany {
                    field: "frame count",
                    count: usize::from(h.count),
                    max: usize::from(MAX_GROUP),
                });
            }
            if h.index >= h.count {
                return Err(ParseError::BadField {
                    field: "frame index",
                    value: u64::from(h.index),
                });
            }
        }
        Ok(ControlFrameRepr {
            kind,
            index: h.index,
            count: h.count,
            tag: h.tag.get(),
            size: h.size.get(),
        })
    }

    /// The frame as bytes, or the reason it would not parse back.
    pub fn to_bytes(&self) -> Result<[u8; FRAME_LEN], ParseError> {
        let h = FrameHeader {
            kind: self.kind as u8,
            index: self.index,
            count: self.count,
            reserved: 0,
            tag: U32::new(self.tag),
            size: U64::new(self.size),
        };
        ControlFrameRepr::parse(h.as_bytes())?;
        let mut out = [0u8; FRAME_LEN];
        out.copy_from_slice(h.as_bytes());
        Ok(out)
    }

    /// Writes the frame into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), ParseError> {
        let got = buf.len();
        let out = buf.get_mut(..FRAME_LEN).ok_or(truncated(FRAME_LEN, got))?;
        out.copy_from_slice(&self.to_bytes()?);
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[rustfmt::skip]
    static HELLO: [u8; 32] = [
        0x57, 0x46, 0x53, 0x48, 0, 2, 0, 3, 0, 8, 0, 0, 0, 0, 0, 0,
        0xde, 0xad, 0xbe, 0xef, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0, 42,
    ];

    fn hello() -> HelloRepr {
        HelloRepr {
            index: 3,
            count: 8,
            nonce: 0xdead_beef_1234_5678,
            conn_id: 42,
        }
    }

    #[test]
    fn hello_bytes() {
        assert_eq!(HelloRepr::parse(&HELLO), Ok(hello()));
        let mut buf = [0xa5u8; 33];
        hello().emit(&mut buf).unwrap();
        assert_eq!(&buf[..32], &HELLO[..]);
        assert_eq!(buf[32], 0xa5);
    }

    #[test]
    fn hello_errors() {
        for len in 0..32 {
            assert_eq!(
                HelloRepr::parse(&HELLO[..len]),
                Err(ParseError::Truncated {
                    needed: 32,
                    got: len
                })
            );
        }
        let with = |i: usize, v: u8| {
            let mut b = HELLO;
            b[i] = v;
            HelloRepr::parse(&b)
        };
        assert!(matches!(with(0, 0), Err(ParseError::BadMagic { .. })));
        assert!(matches!(
            with(5, 1),
            Err(ParseError::BadVersion { found: 1, .. })
        ));
        assert!(matches!(
            with(7, 9),
            Err(ParseError::BadField {
                field: "hello index",
                value: 9
            })
        ));
        assert!(matches!(
            with(9, 0),
            Err(ParseError::TooMany {
                field: "hello count",
                count: 0,
                ..
            })
        ));
        assert!(matches!(
            with(9, 65),
            Err(ParseError::TooMany {
                field: "hello count",
                count: 65,
                ..
            })
        ));
        assert!(matches!(
            with(11, 1),
            Err(ParseError::BadField {
                field: "hello reserved",
                ..
            })
        ));
        assert!(matches!(
            with(13, 1),
            Err(ParseError::BadField {
                field: "hello reserved",
                ..
            })
        ));
    }

    #[test]
    fn answer() {
        let mut buf = [0xa5u8; 8];
        AnswerRepr.emit(&mut buf).unwrap();
        assert_eq!(buf, [0x57, 0x46, 0x53, 0x41, 0, 0, 0, 0]);
        assert_eq!(AnswerRepr::parse(&buf), Ok(AnswerRepr));
        buf[7] = 1;
        assert_eq!(
            AnswerRepr::parse(&buf),
            Err(ParseError::BadField {
                field: "answer status",
                value: 1
            })
        );
        assert_eq!(
            AnswerRepr::parse(&buf[..7]),
            Err(ParseError::Truncated { needed: 8, got: 7 })
        );
    }

    #[test]
    fn frame_bytes_and_errors() {
        let f = ControlFrameRepr {
            kind: FrameKind::ClearToSend,
            index: 7,
            count: 8,
            tag: 0x0102_0304,
            size: 0x0a0b_0c0d_0e0f_1011,
        };
        let b = f.to_bytes().unwrap();
        assert_eq!(
            b,
            [
                1, 7, 8, 0, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11
            ]
        );
        assert_eq!(ControlFrameRepr::parse(&b), Ok(f));
        let with = |i: usize, v: u8| {
            let mut x = b;
            x[i] = v;
            ControlFrameRepr::parse(&x)
        };
        for kind in [0u8, 3, 4, 255] {
            assert_eq!(
                with(0, kind),
                Err(ParseError::BadField {
                    field: "frame kind",
                    value: u64::from(kind)
                })
            );
        }
        assert!(matches!(
            with(1, 8),
            Err(ParseError::BadField {
                field: "frame index",
                value: 8
            })
        ));
        assert!(matches!(
            with(2, 9),
            Err(ParseError::TooMany {
                field: "frame count",
                count: 9,
                ..
            })
        ));
        assert!(matches!(
            with(3, 1),
            Err(ParseError::BadField {
                field: "frame reserved",
                ..
            })
        ));
        // A data frame carries no index or count.
        assert_eq!(
            with(0, 2),
            Err(ParseError::BadField {
                field: "frame index",
                value: 0x0807
            })
        );
        let bad = ControlFrameRepr { index: 8, ..f };
        assert!(bad.to_bytes().is_err());
        let mut short = [0u8; 15];
        assert!(f.emit(&mut short).is_err());
    }

    #[test]
    fn data_frame() {
        let data = ControlFrameRepr {
            kind: FrameKind::Data,
            index: 0,
            count: 0,
            tag: 0xfeed_0001,
            size: 524_289,
        };
        let b = data.to_bytes().unwrap();
        assert_eq!(
            b,
            [2, 0, 0, 0, 0xfe, 0xed, 0, 1, 0, 0, 0, 0, 0, 0x08, 0, 0x01]
        );
        assert_eq!(ControlFrameRepr::parse(&b), Ok(data));
        let mut buf = [0xa5u8; 17];
        data.emit(&mut buf).unwrap();
        assert_eq!(&buf[..16], &b[..]);
        assert_eq!(buf[16], 0xa5);
        let indexed = ControlFrameRepr { count: 1, ..data };
        assert!(indexed.to_bytes().is_err());
        // Every truncation is refused with the right counts.
        for len in 0..FRAME_LEN {
            assert_eq!(
                ControlFrameRepr::parse(&b[..len]),
                Err(ParseError::Truncated {
                    needed: FRAME_LEN,
                    got: len
                })
            );
        }
    }

    fn arb_frame() -> impl Strategy<Value = ControlFrameRepr> {
        let kind = prop_oneof![Just(FrameKind::ClearToSend), Just(FrameKind::Data)];
        (kind, 1..=MAX_GROUP, any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
            |(kind, count, i, tag, size)| {
                let (index, count) = if kind == FrameKind::Data {
                    (0, 0)
                } else {
                    (i % count, count)
                };
                ControlFrameRepr {
                    kind,
                    index,
                    count,
                    tag,
                    size,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn frame_roundtrip(f in arb_frame()) {
            prop_assert_eq!(ControlFrameRepr::parse(&f.to_bytes().unwrap()), Ok(f));
        }

        #[test]
        fn hello_roundtrip(count in 1..=64u16, i in any::<u16>(), nonce in any::<u64>(), id in any::<u64>()) {
            let h = HelloRepr { index: i % (count + 1), count, nonce, conn_id: id };
            let mut buf = [0u8; 32];
            h.emit(&mut buf).unwrap();
            prop_assert_eq!(HelloRepr::parse(&buf), Ok(h));
        }

        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(h) = HelloRepr::parse(&bytes) {
                let mut buf = [0u8; 32];
                h.emit(&mut buf).unwrap();
                prop_assert_eq!(&buf[..], &bytes[..32]);
            }
            if let Ok(f) = ControlFrameRepr::parse(&bytes) {
                prop_assert_eq!(&f.to_bytes().unwrap()[..], &bytes[..16]);
            }
            let _ = AnswerRepr::parse(&bytes);
        }
    }
}
