//! The mesh backend's listen handle: weft-core's mesh handle (every address the listener can
//! be reached on, `weft_core::wire::mesh_handle`) followed, at a fixed place at the end of
//! NCCL's 128-byte buffer, by what only this backend needs. The core format ignores bytes
//! after its last entry, so its parsers and its C ABI read these handles unchanged.
//!
//! | bytes | field |
//! |---:|---|
//! | 0..[`CORE_MAX`] | the core mesh handle; its port is the verbs handshake listener's (0: none) |
//! | 114..116 | magic `WM` |
//! | 116..118 | the socket listener's TCP port (0: this listener serves no socket connections) |
//! | 118 | the socket listener's helper threads per connection |
//! | 119 | the socket listener's data sockets per connection |
//! | 120..128 | nonce: random per `listen`; every connection to this listener must repeat it |
//!
//! An entry whose GID index is [`NO_VERBS`] is an address with no RDMA port behind it: a
//! connection to it goes over sockets.

use weft_core::wire::mesh_handle::{MeshEntry, MeshHandle, NCCL_NET_HANDLE_MAXSIZE};

use crate::{NetError, NetErrorKind, NetHandle};

/// The most bytes the core mesh handle may take here (eight IPv4 entries take 113).
pub const CORE_MAX: usize = 114;
/// `WM`.
pub const TRAILER_MAGIC: u16 = 0x574d;
/// The GID index of an entry that only sockets can reach.
pub const NO_VERBS: u8 = 0xff;

/// A mesh listen handle, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshListenHandle {
    /// The addresses and the verbs handshake port.
    pub core: MeshHandle,
    /// The socket listener's port (0: none).
    pub socket_port: u16,
    /// The socket listener's helper threads per connection.
    pub socket_threads: u8,
    /// The socket listener's data sockets per connection.
    pub socket_data_sockets: u8,
    /// What every connection must repeat.
    pub nonce: u64,
}

impl MeshListenHandle {
    /// Whether one more entry fits before the trailer.
    pub fn fits(&self, entry: MeshEntry) -> bool {
        let mut h = self.core;
        h.push(entry).is_ok() && h.buffer_len() <= CORE_MAX
    }

    /// The 128 bytes NCCL carries.
    pub fn emit(&self) -> Result<NetHandle, NetError> {
        let mut out = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        let len = self.core.emit(&mut out[..CORE_MAX]).map_err(|e| {
            NetError::new(NetErrorKind::InvalidHandle(e), "encoding the mesh handle")
        })?;
        debug_assert!(len <= CORE_MAX);
        out[114..116].copy_from_slice(&TRAILER_MAGIC.to_be_bytes());
        out[116..118].copy_from_slice(&self.socket_port.to_be_bytes());
        out[118] = self.socket_threads;
        out[119] = self.socket_data_sockets;
        out[120..128].copy_from_slice(&self.nonce.to_be_bytes());
        Ok(NetHandle(out))
    }

    /// Decodes a handle, or says what is wrong with it and what to check.
    pub fn parse(handle: &NetHandle) -> Result<MeshListenHandle, NetError> {
        let b = &handle.0;
        let core = MeshHandle::parse(&b[..CORE_MAX]).map_err(|e| {
            NetError::new(
                NetErrorKind::InvalidHandle(e),
                "mesh connect: the peer's handle is not a mesh handle",
            )
            .hint("every rank must use the mesh backend (WEFT_NET_BACKEND=mesh / --transport mesh) of one weft build")
        })?;
        let magic = u16::from_be_bytes([b[114], b[115]]);
        if magic != TRAILER_MAGIC {
            return Err(NetError::new(
                NetErrorKind::Protocol,
                format!(
                    "mesh connect: the peer's handle has no nonce trailer (bytes 114..116 are \
                     {magic:#06x}, expected {TRAILER_MAGIC:#06x} \"WM\")"
                ),
            )
            .hint("the peer runs another weft version: run one weft build on every host"));
        }
        Ok(MeshListenHandle {
            core,
            socket_port: u16::from_be_bytes([b[116], b[117]]),
            socket_threads: b[118],
            socket_data_sockets: b[119],
            nonce: u64::from_be_bytes([
                b[120], b[121], b[122], b[123], b[124], b[125], b[126], b[127],
            ]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn v4(last: u8, nic: u8, gid: u8) -> MeshEntry {
        MeshEntry {
            addr: IpAddr::V4(Ipv4Addr::new(192, 168, 100 + nic, last)),
            prefix_len: 24,
            nic_index: nic,
            qpn: 0,
            gid_index: gid,
            speed_mbps: 2_500,
        }
    }

    #[test]
    fn round_trip_with_exact_trailer_bytes() {
        let mut core = MeshHandle::new(0x1234);
        core.push(v4(1, 0, 1)).unwrap();
        core.push(v4(1, 1, NO_VERBS)).unwrap();
        let h = MeshListenHandle {
            core,
            socket_port: 0xabcd,
            socket_threads: 4,
            socket_data_sockets: 8,
            nonce: 0x0102_0304_0506_0708,
        };
        let bytes = h.emit().unwrap();
        assert_eq!(
            &bytes.0[114..128],
            &[0x57, 0x4d, 0xab, 0xcd, 4, 8, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        // The core format reads the same handle from the whole buffer.
        assert_eq!(MeshHandle::parse(&bytes.0).unwrap(), h.core);
        assert_eq!(MeshListenHandle::parse(&bytes).unwrap(), h);
    }

    #[test]
    fn eight_ipv4_entries_fit_and_a_ninth_does_not() {
        let mut h = MeshListenHandle {
            core: MeshHandle::new(1),
            socket_port: 2,
            socket_threads: 1,
            socket_data_sockets: 1,
            nonce: 3,
        };
        for i in 0..8 {
            assert!(h.fits(v4(i + 1, i, 1)), "entry {i}");
            h.core.push(v4(i + 1, i, 1)).unwrap();
        }
        assert!(!h.fits(v4(9, 8, 1)));
        let back = MeshListenHandle::parse(&h.emit().unwrap()).unwrap();
        assert_eq!(back.core.len(), 8);
    }

    #[test]
    fn a_handle_without_the_trailer_is_refused_with_the_remedy() {
        let mut core = MeshHandle::new(7);
        core.push(v4(1, 0, 1)).unwrap();
        let bytes = NetHandle(core.to_nccl_handle().unwrap());
        let e = MeshListenHandle::parse(&bytes).unwrap_err().to_string();
        assert!(
            e.contains("no nonce trailer") && e.contains("one weft build"),
            "{e}"
        );
        let e = MeshListenHandle::parse(&NetHandle([0x41; 128]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a mesh handle"), "{e}");
    }
}
