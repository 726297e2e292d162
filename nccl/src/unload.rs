//! What the library arranges for the process's exit, and against an early unload.
//!
//! A GPU communicator's teardown frees its memory on a thread of its own once its peers
//! let go (`weft_runtime::gpu::wait_for_teardowns_at_exit`); an exit right after a destroy would
//! free it with the process, under a peer that may still read it for a few microseconds.
//! So the exit waits, briefly, for those threads (`atexit`, which runs before the CUDA
//! driver's own teardown): when every rank tears down, as jobs end, they are done within
//! milliseconds; a peer that never tears down delays the exit by at most [`EXIT_WAIT`].
//! And the library stays mapped for the life of the process: a teardown thread may run
//! its code after a program `dlclose`s it.

use std::sync::Once;
use std::time::Duration;

/// The longest an exit waits for teardowns in flight.
pub const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Pins the library and registers the exit's wait; once, at the first communicator.
pub fn arm() {
    static ARMED: Once = Once::new();
    ARMED.call_once(|| {
        if let Err(why) = weft_ffi::pinning::keep_loaded(arm as *const () as usize) {
            log::info!("weft: could not pin libnccl ({why}); a dlclose may unload it early");
        }
        // SAFETY: `at_exit` is a plain function of a library pinned above (never unmapped),
        // and it does not unwind.
        if unsafe { libc::atexit(at_exit) } != 0 {
            log::info!("weft: atexit failed; an exit will not wait for teardowns in flight");
        }
    });
}

extern "C" fn at_exit() {
    // No panic may cross into the C runtime.
    let _ = std::panic::catch_unwind(|| weft_runtime::gpu::wait_for_teardowns_at_exit(EXIT_WAIT));
}
