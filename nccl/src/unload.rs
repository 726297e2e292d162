//! What the library does as it is unloaded (the process's exit, or `dlclose`).
//!
//! A GPU communicator's teardown frees its memory on a thread of its own once its peers
//! let go (`weft_runtime::gpu::wait_for_teardowns`); an exit right after a destroy would
//! free it with the process, under a peer that may still read it for a few microseconds.
//! So the unload waits, briefly, for those threads: when every rank tears down, as jobs
//! end, they are done within milliseconds; a peer that never tears down delays the exit by
//! at most [`EXIT_WAIT`].

use std::time::Duration;

/// The longest an exit waits for teardowns in flight.
pub const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Run by the dynamic loader when the library is unloaded (`.fini_array`, as a C++ static
/// destructor would be).
#[used]
#[unsafe(link_section = ".fini_array")]
static AT_UNLOAD: extern "C" fn() = at_unload;

extern "C" fn at_unload() {
    // No panic can cross into the loader: the wait takes no lock that a panic could
    // poison unhandled, and does no arithmetic that overflows.
    let _ = std::panic::catch_unwind(|| weft_runtime::gpu::wait_for_teardowns(EXIT_WAIT));
}
