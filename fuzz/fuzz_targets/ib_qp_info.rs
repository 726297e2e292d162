//! The IB queue-pair info parser on arbitrary bytes: it must never panic, whatever it accepts must
//! survive emit -> parse unchanged, and the encoding is canonical (emit gives back the very
//! bytes that were parsed).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::wire::connect::{IbQpInfo, IbQpInfoView};

fuzz_target!(|data: &[u8]| {
    let Ok(view) = IbQpInfoView::new_checked(data) else {
        assert!(IbQpInfo::parse(data).is_err());
        return;
    };
    let info = IbQpInfo::from_view(&view);
    assert_eq!(IbQpInfo::parse(data), Ok(info));

    let mut buf = [0u8; 256];
    let n = info.emit(&mut buf).expect("a parsed connect info emits");
    assert_eq!(n, info.buffer_len());
    assert_eq!(&buf[..n], view.as_bytes());
    assert_eq!(IbQpInfo::parse(&buf[..n]), Ok(info));
});
