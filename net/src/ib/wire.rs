//! The verbs backend's two byte formats, both big-endian and fixed-size:
//!
//! The listen handle (inside NCCL's 128-byte handle), 34 bytes:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `WFIB` |
//! | 4 | 2 | version |
//! | 6 | 1 | address family: 4 or 6 |
//! | 7 | 1 | zero |
//! | 8 | 2 | TCP port of the handshake listener |
//! | 10 | 16 | its address (IPv4 in the first 4 bytes) |
//! | 26 | 8 | nonce: a connection to this listener must repeat it |
//!
//! The QP exchange, sent once each way over the handshake socket, [`EXCHANGE_LEN`] bytes:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `WFIQ` |
//! | 4 | 2 | version |
//! | 6 | 8 | the listener's nonce |
//! | 14 | 1 | QP count (1..=[`MAX_QPS`]) |
//! | 15 | 1 | path MTU (`ibv_mtu`) |
//! | 16 | 2 | LID |
//! | 18 | 16 | GID |
//! | 34 | 8 | FIFO address (sender) or 0 |
//! | 42 | 4 | FIFO rkey (sender) or 0 |
//! | 46 | 8 x 8 | per QP: QP number, first PSN |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `WFIB`.
pub const HANDLE_MAGIC: u32 = 0x5746_4942;
/// `WFIQ`.
pub const EXCHANGE_MAGIC: u32 = 0x5746_4951;
/// The version of both formats.
pub const VERSION: u16 = 1;
/// The most QPs per connection.
pub const MAX_QPS: usize = 8;
/// Bytes of the listen handle.
pub const HANDLE_LEN: usize = 34;
/// Bytes of one QP exchange.
pub const EXCHANGE_LEN: usize = 46 + 8 * MAX_QPS;

/// A verbs listen handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenHandle {
    /// Where the handshake listener is.
    pub addr: SocketAddr,
    /// What a connection must repeat.
    pub nonce: u64,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap_or_default())
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

impl ListenHandle {
    /// Writes the handle into the first [`HANDLE_LEN`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8; crate::NET_HANDLE_MAXSIZE]) {
        out.fill(0);
        out[0..4].copy_from_slice(&HANDLE_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&VERSION.to_be_bytes());
        out[8..10].copy_from_slice(&self.addr.port().to_be_bytes());
        match self.addr.ip() {
            IpAddr::V4(a) => {
                out[6] = 4;
                out[10..14].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out[6] = 6;
                out[10..26].copy_from_slice(&a.octets());
            }
        }
        out[26..34].copy_from_slice(&self.nonce.to_be_bytes());
    }

    /// Reads a handle, or says what is wrong with it.
    pub fn parse(b: &[u8; crate::NET_HANDLE_MAXSIZE]) -> Result<Self, String> {
        let magic = be32(b, 0);
        if magic != HANDLE_MAGIC {
            return Err(format!(
                "not a weft verbs handle (magic {magic:#010x}, expected {HANDLE_MAGIC:#010x} \"WFIB\"): \
                 both ends must use the same backend"
            ));
        }
        let version = be16(b, 4);
        if version != VERSION {
            return Err(format!(
                "verbs handle version {version}, this build speaks {VERSION}: run one weft version on every host"
            ));
        }
        let port = be16(b, 8);
        let ip = match b[6] {
            4 => IpAddr::V4(Ipv4Addr::new(b[10], b[11], b[12], b[13])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[10..26]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            f => {
                return Err(format!(
                    "verbs handle with address family {f} (expected 4 or 6)"
                ));
            }
        };
        Ok(ListenHandle {
            addr: SocketAddr::new(ip, port),
            nonce: be64(b, 26),
        })
    }
}

/// One side's QPs and FIFO, as sent in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exchange {
    /// The listener's nonce (proves the connector read the handle).
    pub nonce: u64,
    /// `ibv_mtu` of the sender's port.
    pub mtu: u8,
    /// LID (InfiniBand) or 0.
    pub lid: u16,
    /// GID (RoCE).
    pub gid: [u8; 16],
    /// The sender's FIFO (zero from the receiver).
    pub fifo_addr: u64,
    /// Its rkey.
    pub fifo_rkey: u32,
    /// How many of `qps` are used.
    pub nqps: u8,
    /// (QP number, first PSN) per QP.
    pub qps: [(u32, u32); MAX_QPS],
}

impl Exchange {
    /// The bytes.
    pub fn emit(&self) -> [u8; EXCHANGE_LEN] {
        let mut o = [0u8; EXCHANGE_LEN];
        o[0..4].copy_from_slice(&EXCHANGE_MAGIC.to_be_bytes());
        o[4..6].copy_from_slice(&VERSION.to_be_bytes());
        o[6..14].copy_from_slice(&self.nonce.to_be_bytes());
        o[14] = self.nqps;
        o[15] = self.mtu;
        o[16..18].copy_from_slice(&self.lid.to_be_bytes());
        o[18..34].copy_from_slice(&self.gid);
        o[34..42].copy_from_slice(&self.fifo_addr.to_be_bytes());
        o[42..46].copy_from_slice(&self.fifo_rkey.to_be_bytes());
        for (i, (qpn, psn)) in self.qps.iter().enumerate() {
            let at = 46 + 8 * i;
            o[at..at + 4].copy_from_slice(&qpn.to_be_bytes());
            o[at + 4..at + 8].copy_from_slice(&psn.to_be_bytes());
        }
        o
    }

    /// Reads an exchange, or says what is wrong with it.
    pub fn parse(b: &[u8; EXCHANGE_LEN]) -> Result<Self, String> {
        let magic = be32(b, 0);
        if magic != EXCHANGE_MAGIC {
            return Err(format!(
                "not a weft verbs handshake (magic {magic:#010x}): a stray client, or a peer of another backend"
            ));
        }
        let version = be16(b, 4);
        if version != VERSION {
            return Err(format!(
                "verbs handshake version {version}, this build speaks {VERSION}"
            ));
        }
        let nqps = b[14];
        if nqps == 0 || usize::from(nqps) > MAX_QPS {
            return Err(format!("verbs handshake with {nqps} QPs (1..={MAX_QPS})"));
        }
        let mut e = Exchange {
            nonce: be64(b, 6),
            nqps,
            mtu: b[15],
            lid: be16(b, 16),
            fifo_addr: be64(b, 34),
            fifo_rkey: be32(b, 42),
            ..Exchange::default()
        };
        e.gid.copy_from_slice(&b[18..34]);
        for (i, qp) in e.qps.iter_mut().enumerate() {
            let at = 46 + 8 * i;
            let (qpn, psn) = (be32(b, at), be32(b, at + 4));
            if qpn > 0x00ff_ffff || psn > 0x00ff_ffff {
                return Err(format!(
                    "verbs handshake: QP {i} number {qpn:#x} / PSN {psn:#x} over 24 bits"
                ));
            }
            *qp = (qpn, psn);
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_say_what_is_wrong() {
        for addr in ["192.168.101.1:4791", "[fd00:101::2]:65535"] {
            let h = ListenHandle {
                addr: addr.parse().unwrap(),
                nonce: 0x0123_4567_89ab_cdef,
            };
            let mut b = [0xa5; crate::NET_HANDLE_MAXSIZE];
            h.emit(&mut b);
            assert!(b[HANDLE_LEN..].iter().all(|&x| x == 0));
            assert_eq!(ListenHandle::parse(&b), Ok(h));
        }
        let h = ListenHandle {
            addr: "10.0.0.1:80".parse().unwrap(),
            nonce: 1,
        };
        let mut b = [0; crate::NET_HANDLE_MAXSIZE];
        h.emit(&mut b);
        assert_eq!(&b[..10], &[0x57, 0x46, 0x49, 0x42, 0, 1, 4, 0, 0, 80]);
        let mut bad = b;
        bad[0] = b'X';
        assert!(
            ListenHandle::parse(&bad)
                .unwrap_err()
                .contains("same backend")
        );
        let mut bad = b;
        bad[5] = 9;
        assert!(ListenHandle::parse(&bad).unwrap_err().contains("version 9"));
        let mut bad = b;
        bad[6] = 5;
        assert!(ListenHandle::parse(&bad).unwrap_err().contains("family 5"));
    }

    #[test]
    fn exchanges_round_trip_and_check_their_fields() {
        let mut e = Exchange {
            nonce: 77,
            mtu: 3,
            lid: 0x1234,
            gid: [9; 16],
            fifo_addr: 0xdead_beef_0000,
            fifo_rkey: 0x42,
            nqps: 2,
            ..Exchange::default()
        };
        e.qps[0] = (0x11, 0xab_cdef);
        e.qps[1] = (0x12, 0x1);
        let b = e.emit();
        assert_eq!(Exchange::parse(&b), Ok(e));
        let mut bad = b;
        bad[14] = 0;
        assert!(Exchange::parse(&bad).unwrap_err().contains("0 QPs"));
        let mut bad = b;
        bad[46] = 1;
        assert!(Exchange::parse(&bad).unwrap_err().contains("over 24 bits"));
        let mut bad = b;
        bad[1] = 0;
        assert!(Exchange::parse(&bad).unwrap_err().contains("stray client"));
    }
}
