//! The mesh handle parser on arbitrary bytes: it must never panic, and whatever it accepts
//! must survive emit -> parse unchanged, within NCCL's 128-byte handle.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::wire::mesh_handle::{MeshHandle, MeshHandleView, NCCL_NET_HANDLE_MAXSIZE};

fuzz_target!(|data: &[u8]| {
    let Ok(view) = MeshHandleView::new_checked(data) else {
        assert!(MeshHandle::parse(data).is_err());
        return;
    };
    assert_eq!(view.entries().count(), view.entry_count());
    let handle = MeshHandle::from_view(&view);
    assert_eq!(MeshHandle::parse(data), Ok(handle));
    assert_eq!(handle.entries().len(), view.entry_count());

    let mut buf = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let n = handle.emit(&mut buf).expect("a parsed handle emits");
    assert_eq!(n, handle.buffer_len());
    // Emit front-codes IPv6 maximally, so it never needs more bytes than the input used.
    assert!(n <= view.as_bytes().len());
    let padded = handle
        .to_nccl_handle()
        .expect("a parsed handle fits NCCL's buffer");
    assert_eq!(padded[..n], buf[..n]);
    assert!(padded[n..].iter().all(|&b| b == 0));
    let reparsed = MeshHandle::parse(&buf[..n]).expect("an emitted handle parses");
    assert_eq!(reparsed, handle);
    // Emit is deterministic: the canonical bytes are a fixed point.
    let mut again = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    assert_eq!(reparsed.emit(&mut again), Ok(n));
    assert_eq!(buf[..n], again[..n]);
});
