//! Parses arbitrary bytes as every bootstrap wire format; whatever parses must emit back to
//! bytes that parse to the same value. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::wire::bootstrap::{
    AbortRepr, HeaderRepr, HeaderView, HelloRepr, PeerInfoRepr, PeerInfoView, RingInfoRepr,
    SockAddrRepr, UniqueIdRepr, UniqueIdView, bus_id_from_str, bus_id_to_str, ABORT_FIXED_LEN,
    HEADER_LEN, HELLO_LEN, MAX_ABORT_TEXT, PEER_INFO_LEN, RING_INFO_LEN, SOCK_ADDR_LEN,
    UNIQUE_ID_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = UniqueIdView::new_checked(data) {
        let repr = UniqueIdRepr::parse(&view);
        let bytes = repr.to_bytes();
        let again = UniqueIdRepr::parse(&UniqueIdView::new_checked(&bytes).unwrap());
        assert_eq!(again, repr);
        assert_eq!(bytes.len(), UNIQUE_ID_LEN);
    }
    if let Ok(view) = HeaderView::new_checked(data) {
        let repr = HeaderRepr::parse(&view);
        let bytes = repr.to_bytes().unwrap();
        assert_eq!(&bytes[..], &data[..HEADER_LEN]);
        assert_eq!(HeaderRepr::parse(&HeaderView::new_checked(&bytes).unwrap()), repr);
    }
    if let Ok(repr) = HelloRepr::parse(data) {
        let mut buf = [0u8; HELLO_LEN];
        repr.emit(&mut buf).unwrap();
        assert_eq!(HelloRepr::parse(&buf).unwrap(), repr);
    }
    if let Ok(repr) = SockAddrRepr::parse(data) {
        let mut buf = [0u8; SOCK_ADDR_LEN];
        repr.emit(&mut buf).unwrap();
        assert_eq!(SockAddrRepr::parse(&buf).unwrap(), repr);
    }
    if let Ok(repr) = RingInfoRepr::parse(data) {
        let mut buf = [0u8; RING_INFO_LEN];
        repr.emit(&mut buf).unwrap();
        assert_eq!(RingInfoRepr::parse(&buf).unwrap(), repr);
    }
    if let Ok(repr) = AbortRepr::parse(data) {
        let mut buf = [0u8; ABORT_FIXED_LEN + MAX_ABORT_TEXT];
        let n = repr.emit(&mut buf).unwrap();
        assert_eq!(AbortRepr::parse(&buf[..n]).unwrap(), repr);
    }
    if let Ok(view) = PeerInfoView::new_checked(data) {
        let repr = PeerInfoRepr::parse(&view);
        let mut buf = [0u8; PEER_INFO_LEN];
        repr.emit(&mut buf).unwrap();
        assert_eq!(&buf[..], data);
    }
    if let Ok(id) = bus_id_from_str(data) {
        // Only ids that fit NCCL's dddd:bb:dd.f shape survive a text round trip.
        if id < (1 << 36) {
            let (text, n) = bus_id_to_str(id);
            assert_eq!(bus_id_from_str(&text[..n]).unwrap(), id);
        }
    }
});
