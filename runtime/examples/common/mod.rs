//! Helpers shared by the socket and NET examples (`mod common;` in each).

#![allow(dead_code)] // each example uses its own subset

use std::time::{Duration, Instant};

use weft_runtime::net::Net;
use weft_runtime::net::socket::{SocketNet, SocketRecvComm, SocketSendComm};

/// Listens on device 0 and polls connect and accept until both ends exist (30 s at most).
pub fn pair(net: &SocketNet) -> (SocketSendComm, SocketRecvComm) {
    let (handle, mut listen) = net.listen(0).expect("listen");
    let mut state = None;
    let (mut s, mut r) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < deadline, "handshake timed out");
        if s.is_none() {
            s = net.connect(0, &handle, &mut state).expect("connect");
        }
        if r.is_none() {
            r = net.accept(&mut listen).expect("accept");
        }
    }
    (s.unwrap(), r.unwrap())
}

/// Fills `buf` with xorshift bytes from `seed`.
pub fn fill(buf: &mut [u8], mut seed: u64) {
    for chunk in buf.chunks_mut(8) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let b = seed.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}
