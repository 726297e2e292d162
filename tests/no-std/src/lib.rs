//! Links weft-core into a `#![no_std]` artifact that supplies its own panic handler.
#![no_std]

extern crate weft_core;

#[panic_handler]
fn on_panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}
