//! Fuzzes the socket NET listen handle: parsing arbitrary bytes never panics, and whatever
//! parses re-emits to the same 40 bytes (the format has exactly one encoding per value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::wire::socket_handle::{HANDLE_LEN, SocketHandle, SocketHandleRepr};

fuzz_target!(|data: &[u8]| {
    let view = SocketHandle::new_unchecked(data);
    // Accessors on an unchecked view must not panic either.
    let _ = (view.addr(), view.data_sockets(), view.threads(), view.nonce());
    if let Ok(repr) = SocketHandleRepr::parse_bytes(data) {
        let mut out = [0u8; 128];
        repr.emit(&mut out).expect("a parsed handle re-emits");
        assert_eq!(out.get(..HANDLE_LEN), data.get(..HANDLE_LEN));
        assert_eq!(SocketHandleRepr::parse_bytes(&out), Ok(repr));
    }
});
