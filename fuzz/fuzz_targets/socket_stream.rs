//! Fuzzes the socket NET stream messages (hello, answer, control frame): parsing arbitrary
//! bytes never panics, and whatever parses re-emits to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::wire::socket_stream::{
    AnswerRepr, ControlFrameRepr, FRAME_LEN, HELLO_LEN, HelloRepr,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = HelloRepr::parse(data) {
        let mut out = [0u8; HELLO_LEN];
        h.emit(&mut out).expect("a parsed hello re-emits");
        assert_eq!(out.get(..), data.get(..HELLO_LEN));
    }
    if let Ok(f) = ControlFrameRepr::parse(data) {
        let out = f.to_bytes().expect("a parsed frame re-emits");
        assert_eq!(out.get(..), data.get(..FRAME_LEN));
    }
    let _ = AnswerRepr::parse(data);
});
